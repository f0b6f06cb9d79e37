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
from figures.contract import Number, decode_fragment, encode_state
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
    assert "No plan for these inputs" in shown.svg and "Tensor parallel tp" in shown.svg
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
    assert v.field_errors == {"heads": "heads=7 does not divide hidden=12288"}
    assert readouts(v)["plan"].value == "none" and "Validation" in v.html
    state, errors = FIGURE.check_state({**DEFAULT, "gpus": "eight", "batch": "-3"})
    assert state["gpus"] == DEFAULT["gpus"] and "GPUs" in errors["gpus"] and "at least 1" in errors["batch"]
    assert view(gpus=12).field_errors["gpus"].startswith("gpus=12 must be a multiple of gpus_per_node=8")
    assert view(batch=7).field_errors["batch"].startswith("global_batch=7")


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
    assert "hidden" in view(hidden=1000).field_errors["hidden"]
    assert "pp=8" in view(layers=7, pp=8).field_errors["pp layers"]


# ---- issue 42.5 and 43.2: hostile input, each refused once, next to its field --------------

PRESET = " (empty: the preset's value)"
# (what the reader types, {field: the message beside it}): the figure keeps its last good
# state meanwhile. `0` in a field whose empty value is the preset is refused, not the preset.
HOSTILE_TYPED = [
    *(({key: "0"}, {key: f"{FIGURE.control(key).label}: at least 1{PRESET}"})
      for key in ("layers", "hidden", "heads", "kv_heads", "ffn", "vocab", "seq", "experts", "expert_ffn")),
    ({"nic_gbps": "0"}, {"nic_gbps": f"Network per GPU: at least 1 Gb/s{PRESET}"}),
    ({"nic_gbps": "1e-320"}, {"nic_gbps": f"Network per GPU: at least 1 Gb/s{PRESET}"}),
    ({"nic_gbps": "0.5"}, {"nic_gbps": f"Network per GPU: at least 1 Gb/s{PRESET}"}),
    ({"nic_gbps": "1e300"}, {"nic_gbps": f"Network per GPU: at most 10,000 Gb/s{PRESET}"}),
    ({"nic_gbps": "-400"}, {"nic_gbps": f"Network per GPU: at least 1 Gb/s{PRESET}"}),
    ({"layers": "-0"}, {"layers": f"Layers: at least 1{PRESET}"}),
    ({"layers": "-96"}, {"layers": f"Layers: at least 1{PRESET}"}),
    ({"layers": "1025"}, {"layers": f"Layers: at most 1,024{PRESET}"}),
    ({"layers": "2.5"}, {"layers": "Layers: a whole number"}),
    ({"layers": "nan"}, {"layers": "Layers: enter a finite number"}),
    ({"layers": "inf"}, {"layers": "Layers: enter a finite number"}),
    ({"layers": "1e400"}, {"layers": "Layers: enter a finite number"}),
    ({"layers": "ninety-six"}, {"layers": "Layers: 'ninety-six' is not a number"}),
    ({"layers": "<script>"}, {"layers": "Layers: '<script>' is not a number"}),
    ({"hidden": "0x3000"}, {"hidden": "Hidden size: '0x3000' is not a number"}),
    ({"seq": "1e12"}, {"seq": f"Sequence length: at most 1,048,576{PRESET}"}),
    ({"seq": "2M"}, {"seq": f"Sequence length: at most 1,048,576{PRESET}"}),
    ({"vocab": "3M"}, {"vocab": f"Vocabulary: at most 2M{PRESET}"}),
    ({"experts": "4096"}, {"experts": f"Experts: at most 1,024{PRESET}"}),
    ({"gpus": "0"}, {"gpus": "GPUs: at least 1"}),
    ({"gpus": ""}, {"gpus": "GPUs: enter a number"}),
    ({"gpus": "1e9"}, {"gpus": "GPUs: at most 131,072"}),
    ({"gpus": "eight"}, {"gpus": "GPUs: 'eight' is not a number"}),
    ({"gpus": "1024.5"}, {"gpus": "GPUs: a whole number"}),
    ({"batch": "0"}, {"batch": "Global batch: at least 1 sequence"}),
    ({"batch": "-3"}, {"batch": "Global batch: at least 1 sequence"}),
    ({"batch": "1e7"}, {"batch": "Global batch: at most 1M sequences"}),
    ({"tokens": "0"}, {"tokens": "Tokens to train: at least 1M"}),
    ({"tokens": "1e16"}, {"tokens": "Tokens to train: at most 1000T"}),
    ({"tokens": "-15T"}, {"tokens": "Tokens to train: at least 1M"}),
    ({"margin_gb": "-1"}, {"margin_gb": "Memory margin per GPU: at least 0 GB"}),
    ({"margin_gb": "1e308"}, {"margin_gb": "Memory margin per GPU: at most 64 GB"}),
    ({"layers": "0", "gpus": "0"}, {"layers": f"Layers: at least 1{PRESET}", "gpus": "GPUs: at least 1"}),
]


@pytest.mark.parametrize("typed,expected", HOSTILE_TYPED, ids=lambda x: str(x)[:40])
def test_hostile_typed_values_are_refused_next_to_their_field(typed, expected):
    good = FIGURE.validate_state({**DEFAULT, "model": "llama3-8b", "layers": 48})
    state, errors = FIGURE.check_state(typed, fallback=good)
    assert errors == expected
    assert state == good  # the last good state stays (the page dims it: browser test)


def test_an_empty_field_is_the_preset_and_old_links_still_restore():
    """Empty stays 0 in the state (state keys and values unchanged): a link made before
    issue 42 (which never wrote an empty field, and could not hold 0 typed) restores as it
    did; a hand-written ``layers=0`` falls back to the preset, as every unreadable link
    value falls back to its default."""
    for key in ("layers", "seq", "nic_gbps"):
        assert FIGURE.check_state({key: ""}) == ({**DEFAULT, key: 0}, {})
        assert FIGURE.validate_state({key: 0})[key] == 0  # a state's own empty field (JSON from the page)
    assert encode_state(FIGURE, DEFAULT) == "fig-21"
    for fragment, expected in (("fig-21:layers=0,nic_gbps=0", {}), ("fig-21:layers=48,seq=4096", {"layers": 48, "seq": 4096}),
                               ("fig-21:model=llama3-8b,tp=2,gpus=64", {"model": "llama3-8b", "tp": 2, "gpus": 64})):
        _, values = decode_fragment(fragment)
        assert FIGURE.validate_state(values) == {**DEFAULT, **expected}, fragment
    assert readouts(view(layers=0))["plan"].text == readouts(view())["plan"].text  # empty: GPT-3's 96 layers


def test_the_labs_ranges_are_the_planners_one_table():
    from models.planner.limits import LIMITS
    for key, field in fig21_planner_lab.MODEL_FIELDS + (("gpus", "gpus"), ("nic_gbps", "inter_gbps"),
                                                        ("batch", "global_batch"), ("tokens", "tokens"),
                                                        ("margin_gb", "memory_margin_gb")):
        control = FIGURE.control(key)
        assert (control.min, control.max) == (LIMITS[field].low, LIMITS[field].high), key


# (state, the field the message goes by, the message): the field the reader set, naming the other
UNMET = [
    ({"hidden": 1000}, "hidden", "heads=96 does not divide hidden=1000"),
    ({"heads": 7}, "heads", "heads=7 does not divide hidden=12288"),
    ({"kv_heads": 1024}, "kv_heads", "kv_heads=1024 does not divide heads=96"),
    ({"model": "llama3-8b", "tp": 16}, "tp", "tp=16 does not divide kv_heads=8"),
    ({"gpus": 12}, "gpus", "gpus=12 must be a multiple of gpus_per_node=8 (whole nodes)"),
    ({"per_node": 72}, "per_node", "gpus=1024 must be a multiple of gpus_per_node=72 (whole nodes)"),
    ({"layers": 7, "pp": 8}, "pp layers", "pp=8 must be <= layers=7 (a pipeline rank needs a layer)"),
    ({"top_k": 2}, "top_k", "top_k=2 must be <= experts=1"),
    ({"schedule": "interleaved", "virtual_stages": 1}, "virtual_stages schedule",
     "virtual_stages=1: the interleaved schedule needs at least 2 model chunks per pipeline rank"),
    ({"gpus": 131072, "layers": 1, "ep": 64}, "gpus",
     "global_batch=1536: no layout of 131072 GPUs divides it into data-parallel replicas with framework=megatron."),
    ({"ep": 4}, "ep", "ep=4 needs a mixture-of-experts model (experts > 1)"),
    ({"cluster": "dgx-a100-40gb", "margin_gb": 41}, "margin_gb",
     "memory_margin_bytes=38.1842 GiB leaves nothing of the 40 GiB on a NVIDIA A100 40GB SXM"),
]


@pytest.mark.parametrize("changes,field,message", UNMET, ids=lambda x: str(x)[:30])
def test_an_input_that_cannot_be_met_is_said_once_by_the_field_the_reader_set(changes, field, message):
    v = view(**changes)
    assert v.field_errors == {field: message}
    assert readouts(v)["plan"].value == "none"
    # once: not again in the note, the drawing or the HTML block (issue 43: "the same error four times")
    drawn = " ".join(t.text for t in ET.fromstring(v.svg).iter(f"{SVG}text"))
    assert v.note == "" and message not in drawn
    assert message not in unescape(v.html) and "No plan" not in v.html
    labels = [FIGURE.control(key).label for key in field.split()]
    assert drawn.startswith("No plan for these inputs.") and all(label[1:] in drawn for label in labels), drawn
    assert message in v.alt  # the text alternative says it in full


def test_extreme_inputs_never_show_internal_text():
    """Every typed field at each end of its range, alone and three at a time with menus
    at random: a state with no plan always says why by a field, in the planner's words
    about its inputs (never a float overflow or a byte count)."""
    import random
    rng = random.Random(42)
    numbers = [c for c in FIGURE.controls if isinstance(c, Number)]
    menus = [c for c in FIGURE.controls if not isinstance(c, Number)]
    states = [{c.key: end} for c in numbers for end in (c.min, c.max)]
    for _ in range(120):
        state = {c.key: rng.choice((c.min, c.max)) for c in rng.sample(numbers, 3)}
        state.update({c.key: rng.choice(c.values) for c in rng.sample(menus, 2)})
        states.append(state)
    for changes in states:
        v = view(**changes)
        text = " ".join((v.note, v.alt, " ".join(v.field_errors.values())))
        assert not re.search(r"overflow|nbytes|bytes_per_s|Traceback|nan\b|inf\b", text), (changes, text)
        if readouts(v)["plan"].value == "none":
            assert v.field_errors, (changes, v.alt)


def test_zero_sharding_names_dp_times_cp():
    """Issue 43: "ZeRO-1 over 32 ranks" beside dp=16 (it shards over dp × cp) said nothing of cp."""
    state = {"model": "llama3-405b", "cluster": "dgx-h100", "gpus": 16384, "batch": 2048}
    v = view(**state)
    plan = planner.search(planner.model_preset("llama3-405b"), planner.cluster_preset("dgx-h100", 16384), 2048,
                          top=1).candidates[0].plan
    assert plan.cp > 1
    assert (f"over the dp \u00d7 cp = {plan.dp} \u00d7 {plan.cp} = {plan.dp * plan.cp} data- and context-parallel "
            "ranks") in unescape(v.html)
    assert "over the 32 data-parallel ranks" in unescape(view().html)  # no cp: dp alone


def test_the_prose_and_note_say_what_an_empty_field_and_a_zero_do():
    from pathlib import Path
    prose = (Path(__file__).parents[1] / "site/content/21-planner.md").read_text()
    for text in (prose, fig21_planner_lab.NOTE):
        assert "0, or" not in text and "empty field" in text


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
            assert f"<td class=\"name\">{name}</td><td class=\"num\">{c.sources}</td><td class=\"num\">{c.inside} of {c.runs}</td>" \
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
