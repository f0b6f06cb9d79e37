"""Figure 21, the planner lab: its readouts are the planner's numbers, its drawing shows
the estimate's parts, bad input stays next to its field or in the note, and the exports
and the validation table are the planner's own."""
import re
import time
import xml.etree.ElementTree as ET
from collections import OrderedDict
from html import unescape

import pytest

from figures import fig21_planner_lab, registry
from models import planner
from models.planner import validation
from tests.figure_views import SVG, readouts

FIGURE = registry()[21]
DEFAULT = FIGURE.default_state()


def view(**changes):
    return FIGURE.render(FIGURE.validate_state({**DEFAULT, **changes}))


STATES = [
    ({}, planner.model_preset("gpt3-175b"), planner.cluster_preset("dgx-a100-80gb", 1024), 1536, {}),
    ({"tp": 8, "recompute": "full"}, planner.model_preset("gpt3-175b"), planner.cluster_preset("dgx-a100-80gb", 1024),
     1536, {"tp": 8, "recompute": "full"}),
    ({"model": "llama3-8b", "cluster": "dgx-h100", "gpus": 8, "batch": 32, "tokens": 15e12},
     planner.model_preset("llama3-8b"), planner.cluster_preset("dgx-h100", 8), 32, {}),
    ({"model": "mixtral-8x7b", "seq": 4096, "cluster": "dgx-h100", "gpus": 64, "batch": 256, "ep": 8},
     planner.model_preset("mixtral-8x7b", seq_len=4096), planner.cluster_preset("dgx-h100", 64), 256, {"ep": 8}),
]


@pytest.mark.parametrize("changes,model,cluster,batch,fixed", STATES, ids=lambda x: str(x)[:30])
def test_star_readouts_are_the_planners_numbers(changes, model, cluster, batch, fixed):
    shown = readouts(view(**changes))
    best = planner.search(model, cluster, batch, top=5, fixed=fixed).candidates[0]
    e = best.estimate
    tokens = changes.get("tokens", DEFAULT["tokens"])
    assert shown["plan"].text == best.plan.label()
    assert shown["mfu"].value == e.mfu
    assert shown["tokens_per_s"].value == e.tokens_per_s
    assert shown["train_time_s"].value == planner.train_time_s(e, tokens)
    assert shown["step_time_s"].value == e.step_time_s
    assert shown["memory_bytes"].value == e.memory_bytes
    assert shown["fits"].value == "fits"
    assert 0 < shown["mfu"].value < 1


def test_estimates_are_ranges_from_their_regimes_checking_runs():
    """The ★ values stay the point estimates; the text shows the band its regime's
    checking runs support (issue 32: "≈ 41–49% MFU", not "48.9%")."""
    v = view()
    shown = readouts(v)
    model, cluster = planner.model_preset("gpt3-175b"), planner.cluster_preset("dgx-a100-80gb", 1024)
    best = planner.search(model, cluster, 1536, top=5).candidates[0]
    band = planner.band(model, cluster, best.plan)
    assert band.regime == "A100 · Megatron-LM" and band.checks >= 10
    low, high = band.throughput(best.estimate.mfu)
    assert shown["mfu"].text == f"\u2248 {low * 100:.0f}\u2013{high * 100:.0f}%"
    assert shown["mfu"].value == best.estimate.mfu
    for key in ("step_time_s", "tokens_per_s", "train_time_s", "memory_bytes"):
        assert shown[key].text.startswith("\u2248 ") and "\u2013" in shown[key].text, key
    assert shown["validation_error"].value == pytest.approx(max(1 / band.low - 1, 1 - 1 / band.high))
    assert f"{band.checks} published runs" in shown["validation_error"].text
    assert shown["train_time_s"].text.endswith("days") and "300B tokens in" == shown["train_time_s"].label
    # another regime, another band: PyTorch FSDP on H100s
    fsdp = readouts(view(model="llama3-8b", cluster="dgx-h100", gpus=8, batch=32, framework="fsdp"))
    assert "H100 \u00b7 PyTorch FSDP" in fsdp["validation_error"].text
    assert fsdp["validation_error"].value != shown["validation_error"].value


def test_the_validation_panel_shows_every_run_by_regime_with_its_role():
    html_text = unescape(view().html.split('<details class="figure-fold"><summary>Validation: ')[-1])
    assert html_text.startswith(f"{len(validation.end_to_end())} published runs (")  # folded under its summary
    for name in validation.regimes():
        assert f"<caption>{name}: " in html_text, name
    for check in planner.validate():
        assert check.case.label in html_text
        if check.case.end_to_end:  # the layout each run was priced as, HSDP and gradient dtype included
            assert f"<td>{check.case.plan.label()}</td>" in html_text
    assert "ZeRO-3 HSDP 8x12 bf16 grads none recompute" in html_text  # IBM's 7B on 96 H100s
    assert html_text.count(">fitting<") == len(validation.end_to_end(validation.FIT))
    assert html_text.count(">checking<") == len(validation.end_to_end(validation.CHECK))
    assert "docs/" not in html_text and "models/" not in html_text  # no repo paths on the page
    assert '<td class="num">163 TFLOP/s</td>' in html_text  # Table 1's 1T run, with its unit, right-aligned


def test_the_form_shows_the_presets_values_and_reads_counts_as_written():
    lab = registry()[21]
    state = lab.default_state()
    hints = lab.field_hints({**state, "model": "llama3-8b"})
    assert hints["layers"] == "32" and hints["ffn"] == "14,336" and hints["kv_heads"] == "8"
    assert lab.control("layers").display(0) == ""  # an empty field: the preset's own
    assert lab.check_state({"layers": ""})[0]["layers"] == 0
    tokens = lab.control("tokens")
    assert tokens.display(15.6e12) == "15.6T" and tokens.display(300e9) == "300B"
    assert lab.check_state({"tokens": "15T"})[0]["tokens"] == 15e12
    assert lab.control("gpus").display(16384) == "16,384"


def test_an_input_that_cannot_be_met_is_said_next_to_its_field():
    lab = registry()[21]
    shown = lab.render(lab.validate_state({"model": "llama3-8b", "tp": 16}))
    assert shown.field_errors == {"tp": "tp=16 does not divide kv_heads=8"}
    assert "No plan for these inputs" in shown.svg and "does not divide" in shown.svg
    assert lab.render(lab.validate_state({"model": "llama3-8b", "pp": 64})).field_errors.keys() == {"pp"}
    assert lab.render(lab.validate_state({"batch": 7})).field_errors.keys() == {"batch"}
    assert lab.render(lab.default_state()).field_errors == {}


def test_the_reasoning_is_the_ladder_and_a_pinned_plan_is_compared():
    recommended = view()
    assert "Recommended plan" in recommended.html
    assert "Model states: 174.6B parameters \u00d7 18 bytes" in unescape(recommended.html)
    pinned = view(tp=8)
    assert "Your plan (tp=8; the rest searched)" in pinned.html
    assert "slower than the recommended plan" in unescape(pinned.html)


def _bars(svg_text):
    root = ET.fromstring(svg_text)
    boxes = [(p.get("class"), p.get("d")) for p in root.iter(f"{SVG}path") if p.get("class", "").startswith("fill-")]
    widths = {}
    for cls, d in boxes:
        numbers = [float(n) for n in re.findall(r"-?\d+(?:\.\d+)?", d)]
        if numbers[3] == 26:  # bars are 26 high; legend swatches 10
            widths.setdefault(cls, []).append(numbers[2])
    texts = [t.text for t in root.iter(f"{SVG}text")]
    return widths, texts


def test_the_bars_show_every_part_in_proportion():
    v = view()
    e = planner.recommend(planner.model_preset("gpt3-175b"), planner.cluster_preset("dgx-a100-80gb", 1024), 1536)[0]
    widths, texts = _bars(v.svg)
    memory = {k: v for k, v in e.estimate.memory_breakdown.items() if v > 0}
    drawn = {k: widths[f"fill-{k}"][0] for k in memory}
    scale = drawn["activations"] / memory["activations"]
    for key, value in memory.items():
        assert drawn[key] == pytest.approx(value * scale, abs=0.01)
        assert any(t.startswith(planner.MEMORY_NAMES[key]) for t in texts)  # a label, not colour alone
    assert ("usable" in texts and "HBM" in texts) or "usable, HBM" in texts  # one label when the marks are close
    time_parts = [k for k, v in e.estimate.time_breakdown.items() if v > 0]
    for key in time_parts:
        assert any(t.startswith(planner.PART_NAMES[key]) for t in texts)
    assert len(v.alt) > 40 and "59.2 GB" in v.alt


def test_a_plan_that_does_not_fit_is_drawn_over_the_line_with_its_reasons():
    v = view(tp=8, pp=1, recompute="none", zero=0, microbatch=1, cp=1)
    shown = readouts(v)
    assert shown["fits"].value == "does-not-fit"
    assert "too much" in v.svg
    assert "Does not fit" in unescape(v.html) and "Less memory" in unescape(v.html)
    assert "nothing fits" in v.note


def test_bad_input_is_named_and_the_figure_still_renders():
    v = view(heads=7)
    assert "heads=7 does not divide hidden=12288" in v.note
    assert readouts(v)["plan"].value == "none" and "Validation" in v.html
    state, errors = FIGURE.check_state({**DEFAULT, "gpus": "eight", "batch": "-3"})
    assert state["gpus"] == DEFAULT["gpus"] and "GPUs" in errors["gpus"] and "at least 1" in errors["batch"]
    v = view(gpus=12)
    assert v.note.startswith("gpus=12 must be a multiple of gpus_per_node=8")
    assert view(batch=7).note.startswith("global_batch=7")


def test_field_overrides_change_the_model():
    shown = readouts(view(layers=48))
    model = planner.model_preset("gpt3-175b", layers=48)
    best = planner.recommend(model, planner.cluster_preset("dgx-a100-80gb", 1024), 1536)[0]
    assert shown["step_time_s"].value == best.estimate.step_time_s
    assert readouts(view(seq=4096))["tokens_per_s"].value != readouts(view())["tokens_per_s"].value
    assert "SwiGLU" in FIGURE.control("gated").options[1][1]


def test_exports_are_the_shown_plan():
    v = view()
    blocks = [unescape(b) for b in re.findall(r"<code>(.*?)</code>", v.html, re.S)]
    megatron, toml = blocks
    model, gpus, plan = planner.parse_megatron_args(megatron)
    assert gpus == 1024 and plan.label() == readouts(v)["plan"].text
    assert model == planner.model_preset("gpt3-175b")
    assert planner.parse_torchtitan_toml(toml, model).tp == plan.tp
    assert v.html.count("data-copy") == 2


def test_a_repaint_is_cheap():
    view()
    started = time.perf_counter()
    for _ in range(5):
        view()
    assert (time.perf_counter() - started) / 5 < 0.05  # a cached search: the render itself is a few ms


def test_the_lab_is_prepared_ahead_in_slices_keeping_the_readers_pair(monkeypatch):
    """The worker renders the lab ahead by running ``prepare`` a few steps at a time: a
    MoE model's searches take hundreds of steps; the render after them searches nothing
    and draws what a cold render draws; the planner keeps the reader's pair, not the one
    prepared ahead."""
    view()  # the reader is at the default: GPT-3 on 1024 A100s
    reader = list(planner.cost._contexts)
    state = FIGURE.validate_state({**DEFAULT, "model": "mixtral-8x7b", "tp": 2})
    monkeypatch.setattr(fig21_planner_lab, "_searches", OrderedDict())  # nothing searched yet
    steps = sum(1 for _ in FIGURE.prepare(state))
    assert steps > 300
    assert list(planner.cost._contexts) == reader
    with monkeypatch.context() as searching:
        searching.setattr(planner, "search_steps", None)  # a render after prepare must not search
        prepared = FIGURE.render(state)
    monkeypatch.setattr(fig21_planner_lab, "_searches", OrderedDict())
    assert prepared == FIGURE.render(state)
    assert sum(1 for _ in FIGURE.prepare(state)) == 0  # prepared already: nothing to do
    # no plan: a model that cannot be built prepares nothing; a pin no layout takes raises
    # nothing; the render says why
    unbuilt, unpinned = ({**DEFAULT, "hidden": 1000}, {**DEFAULT, "layers": 7, "pp": 8})
    assert list(FIGURE.prepare(FIGURE.validate_state(unbuilt))) == []
    list(FIGURE.prepare(FIGURE.validate_state(unpinned)))
    assert "hidden" in view(hidden=1000).note and "pp=8" in view(layers=7, pp=8).note


def test_the_page_says_what_its_ranges_covered_with_the_models_number():
    """Issue 41: the lab states the share of published runs from other sources that fell
    inside ranges built without them, from validation.coverage(); the prose quotes that
    readout, and the validation panel has the per-regime table."""
    held = validation.coverage()
    shown = readouts(view())
    assert shown["band_coverage"].value == held.share
    assert shown["band_coverage"].text == f"{held.share * 100:.0f}% of {held.runs} runs from other sources"
    assert f"such a range held {held.share * 100:.0f}% of {held.runs} published runs" in unescape(view().html)
    prose = (fig21_planner_lab.__file__.rsplit("/figures/", 1)[0] + "/site/content/21-planner.md")
    assert "held {{21.band_coverage}}" in open(prose).read()
    panel = unescape(view().html.split("against the range built from the other sources")[-1])
    for name in validation.regimes():
        c = validation.coverage(name)
        if c.runs:
            assert f"<td>{name}</td><td class=\"num\">{c.sources}</td><td class=\"num\">{c.inside} of {c.runs}</td>" \
                in panel, name


def _table_rows(html_text):
    body = html_text.split("The five fastest plans")[1].split("</tbody>")[0]
    return [re.findall(r"<td[^>]*>(.*?)</td>", row) for row in body.split("<tr")[2:]]


def test_plans_the_band_cannot_tell_apart_are_tied_not_ranked():
    """Issue 43: the five fastest plans of the default state differ by less than their
    band: no 1-5 ranking among them, and a caption names the band."""
    v = view()
    model, cluster = planner.model_preset("gpt3-175b"), planner.cluster_preset("dgx-a100-80gb", 1024)
    found = planner.search(model, cluster, 1536, top=5)
    band = planner.band(model, cluster, found.candidates[0].plan)
    steps = [c.estimate.step_time_s for c in found.candidates]
    tied = validation.ties(steps, band)
    assert tied == sum(1 for t in steps if t <= steps[0] * (1 + band.reach)) > 1
    rows = _table_rows(v.html)
    assert [r[0] for r in rows] == ["tied"] * tied + [str(i + 1) for i in range(tied, len(rows))]
    assert f"differ by less than the \u00b1{float(f'{band.reach * 100:.2g}'):g}% band" in unescape(v.html)
    # with a narrow band only the plans of the same step are tied, the rest are ranked
    narrow = validation.Band(0.999, 1.001, band.regime, "", 1)
    few = validation.ties(steps, narrow)
    assert 1 <= few < tied
    table = fig21_planner_lab._table(found.candidates, found.candidates[0], found.candidates[0], narrow)
    ranks = [r[0] for r in _table_rows("The five fastest plans" + table)]
    assert ranks == (["tied"] * few if few > 1 else ["1"]) + [str(i + 1) for i in range(few, len(ranks))]
    assert ("are tied" in table) == (few > 1)
