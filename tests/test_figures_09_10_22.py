"""Figures 09 (FSDP prefetch), 10 (HSDP mesh), 22 (checkpoint resharding): the starred readouts
equal what models/ computes, called here directly, and the drawings show what they claim."""
import math
import xml.etree.ElementTree as ET

import pytest

from figures import registry, svg
from models import checkpoint, fsdp, hardware, hsdp, memory
from tests.figure_views import SVG, inside, overlap as boxes_overlap, path_data, readouts, rectangles, render, shapes, text_boxes, texts, values


# ---- Figure 09 ---------------------------------------------------------------------------------

FIG09_STATES = [
    {},
    {"units": 32, "compute_ms": 5, "gather_ms": 10, "prefetch": False},
    {"units": 128, "compute_ms": 0.5, "gather_ms": 100, "reshard": False},
    {"units": 1, "compute_ms": 100, "gather_ms": 0.5, "prefetch": False, "reshard": False},
]


@pytest.mark.parametrize("changes", FIG09_STATES)
def test_fig09_starred_readouts_are_the_schedule(changes):
    state, view = render(9, **changes)
    step = fsdp.simulate_fsdp_timed(state["units"], state["compute_ms"] / 1e3, state["gather_ms"] / 1e3,
                                    prefetch=state["prefetch"], reshard_after_forward=state["reshard"])
    got = values(view)
    assert got["step_time_s"] == pytest.approx(step.step_time_s, rel=1e-12)
    assert got["exposed_comm_s"] == pytest.approx(step.exposed_comm_s, rel=1e-12, abs=1e-15)
    assert got["peak_unsharded_units"] == fsdp.resident_units(step).peak
    other = fsdp.simulate_fsdp_timed(state["units"], state["compute_ms"] / 1e3, state["gather_ms"] / 1e3,
                                     prefetch=not state["prefetch"], reshard_after_forward=state["reshard"])
    assert got["other_step_time_s"] == pytest.approx(other.step_time_s, rel=1e-12)
    assert got["comm_busy_s"] == pytest.approx(step.comm_busy_s, rel=1e-12)


def test_fig09_default_prefetch_hides_all_but_the_edges():
    state, view = render(9)
    got = values(view)
    gather = state["gather_ms"] / 1e3
    assert got["exposed_comm_s"] == pytest.approx(3 * gather)  # first gathers of each pass, last ReduceScatter
    assert got["peak_unsharded_units"] == 2  # "the peak holds one more unsharded unit"
    _, without = render(9, prefetch=False)
    assert values(without)["exposed_comm_s"] == pytest.approx(3 * state["units"] * gather)
    assert values(without)["peak_unsharded_units"] == 1


def test_fig09_draws_both_timelines_and_the_toggle_picks_the_readouts():
    _, on = render(9, units=16)
    _, off = render(9, units=16, prefetch=False)
    assert values(on)["step_time_s"] == values(off)["other_step_time_s"]
    # Same bars either way: 16 forward and 16 backward computes, 16 ReduceScatters per timeline.
    for view in (on, off):
        assert shapes(view, "stroke-forward") == shapes(view, "stroke-backward") == 2 * 16
        assert len(path_data(view, "fill-buffers")) == 2  # a gathered-units strip under each timeline
    assert [t for t in texts(on) if "readouts" in t][0].startswith("With prefetch")
    assert [t for t in texts(off) if "readouts" in t][0].startswith("Without prefetch")


def test_fig09_gaps_and_strip_follow_the_model():
    state, view = render(9, units=8, compute_ms=5, gather_ms=10, reshard=False)
    runs = [fsdp.fsdp_lanes(8, 0.005, 0.01, prefetch=p, reshard_after_forward=False) for p in (False, True)]
    assert shapes(view, "stroke-exposed") == sum(len(r.idle) for r in runs)
    # No reshard: every unit stays gathered until its backward; no backward AllGather is drawn.
    assert all(r.resident.peak == 8 for r in runs)
    assert shapes(view, "stroke-comm") == 2 * (8 + 8)  # forward AllGathers + ReduceScatters, both rows
    assert "peak 8" in texts(view)


@pytest.mark.parametrize("changes", FIG09_STATES)
def test_fig09_on_a_phone_stacks_its_header_and_marks_the_waits(changes):
    """Issue 34: 640 units wide did not fit a phone. Narrow, the drawing is 320 units (11-unit
    labels, so 320 px at least), each header wraps under its timeline's name, each strip's
    peak is named in the margin, and the dashed waits (the gaps prefetch removes) are the key."""
    figure = registry()[9]
    state = figure.validate_state({**figure.default_state(), **changes})
    wide, narrow = figure.render(state), figure.render(state, narrow=True)
    root = ET.fromstring(narrow.svg)
    assert root.get("viewBox").split()[2] == "320" and "min-width:320px" in root.get("style")
    assert float(root.get("viewBox").split()[3]) > float(ET.fromstring(wide.svg).get("viewBox").split()[3])
    lines = texts(narrow)
    chosen = "With prefetch" if state["prefetch"] else "Without prefetch"
    assert f"{chosen}  \u25c0 readouts" in lines and len([t for t in lines if t.endswith("prefetch")]) == 1
    assert len([t for t in lines if t.startswith("peak ") and t[5:].isdigit()]) == 2
    for view in (wide, narrow):
        key = path_data(view, svg.KEY)
        assert len(key) == 2 and all(d != "M0 0" for d in key)  # each timeline's waits
        assert path_data(view, svg.KEY) == path_data(view, "stroke-exposed")
    assert all(inside(box, narrow) for _, box in text_boxes(narrow))
    assert registry()[9].primary == ("units", "gather_ms")


# ---- Figure 10 ---------------------------------------------------------------------------------

FIG10_STATES = [
    {},
    {"shard": 512},
    {"shard": 1, "N": 64, "gpus": 4, "intra": "nvlink3", "inter": "ib_hdr"},
    {"params": 1_000_000_000_000, "N": 4096, "shard": 64, "gpus": 16, "inter": "ib_xdr"},
]


def _hsdp(state):
    inside, across = hardware.link(state["intra"]), hardware.link(state["inter"])
    step = hsdp.hsdp_step(state["params"], state["N"], state["shard"], gpus_per_node=state["gpus"], num_units=32,
                          alpha_s=inside.alpha_s, inter_node_alpha_s=across.alpha_s,
                          intra_node_bandwidth_bytes_per_s=inside.bandwidth_bytes_per_s,
                          inter_node_bandwidth_bytes_per_s=across.bandwidth_bytes_per_s)
    return step, hsdp.hsdp_traffic(state["params"], state["N"], state["shard"], gpus_per_node=state["gpus"])


@pytest.mark.parametrize("changes", FIG10_STATES)
def test_fig10_starred_readouts_are_the_models(changes):
    state, view = render(10, **changes)
    step, traffic = _hsdp(state)
    got = values(view)
    assert got["model_state_bytes_per_device"] == memory.hsdp_model_states(state["params"], state["N"], state["shard"]).total_bytes
    assert got["intra_node_bytes_per_step"] == traffic.intra_node_bytes
    assert got["inter_node_bytes_per_step"] == traffic.inter_node_bytes
    assert got["step_comm_s"] == step.total_comm_s
    assert got["allreduce_s"] == step.allreduce_s
    assert got["crosses_node"] == (1 if step.shard_fabric == hsdp.INTER_NODE else 0)


def test_fig10_default_is_the_articles_7_5b_on_64_nodes():
    state, view = render(10)
    assert (state["params"], state["N"], state["shard"], state["gpus"]) == (7_500_000_000, 512, 8, 8)
    shown = {r.key: r.text for r in view.readouts}
    assert shown["model_state_bytes_per_device"] == "15.0 GB"
    assert shown["intra_node_bytes_per_step"] == "39.4 GB"
    assert round(values(view)["inter_node_bytes_per_step"] / 1e9, 1) == 3.7
    assert values(view)["crosses_node"] == 0
    _, flat = render(10, shard=512)
    assert round(values(flat)["inter_node_bytes_per_step"] / 1e9, 1) == 44.9 and values(flat)["crosses_node"] == 1
    assert values(flat)["step_comm_s"] > 3 * values(view)["step_comm_s"]


def test_fig10_shard_group_snaps_to_a_divisor_of_the_world():
    figure = registry()[10]
    state = figure.validate_state({"N": 16, "shard": 4096})
    assert state["shard"] == 16 and state["N"] % state["shard"] == 0


def test_fig10_mesh_draws_a_subset_and_says_so():
    _, small = render(10, N=16, shard=8, gpus=8)
    assert shapes(small, "svg-neutral-fill") == 16  # two shard groups of 8, every GPU drawn
    assert not any("Drawn:" in t for t in texts(small))
    assert shapes(small, "stroke-intra") == 2 and shapes(small, "stroke-inter") == 8  # 2 row rings, 8 column rings
    _, big = render(10, N=4096, shard=64, gpus=8)
    assert shapes(big, "svg-neutral-fill") == 8 * 24
    assert "Drawn: 24 of the 64 GPUs of each shard group and 8 of the 64 shard groups." in texts(big)
    assert shapes(big, "stroke-inter") == 8 + 24  # the shard rings cross nodes too
    # One bar per shard group size the world allows in the memory chart (red where it does not fit).
    assert shapes(big, "fill-memory") + shapes(big, "fill-warn") - 1 == 13  # less the legend's swatch


@pytest.mark.parametrize("changes", FIG10_STATES + [{"params": 1_000_000_000_000}, {"N": 8, "gpus": 2}, {"N": 4096, "shard": 1}])
def test_fig10_bars_have_value_axes_with_units_and_the_chosen_values(changes):
    """The bars had no scale or unit: a 39.4 GB readout (NVLink bytes) beside a bar shorter
    than the 3.69 GB one (network bytes), because the bars are times. Now each chart has a
    titled value axis with units, and the chosen group's bars carry the readouts' numbers."""
    state, view = render(10, **changes)
    step, _ = _hsdp(state)
    boxes = text_boxes(view)
    shown = [t for t, _ in boxes]
    assert "Model state per GPU, for every shard group size" in shown
    assert "Communication time per step, before overlap (time, not bytes)" in shown
    got = {r.key: r for r in view.readouts}
    fits = got["fits"].value  # a size over the HBM line is labelled so: "2,000 GB (does not fit)"
    assert got["model_state_bytes_per_device"].text + ("" if fits else " (does not fit)") in shown
    assert got["step_comm_s"].text in shown
    assert got["shard_comm_s"].value == step.allgather_s + step.reducescatter_s
    # the memory ticks sit where the bars put their values, on a log axis (issue 43: a linear one
    # up to 1T parameters' 16 TB hid which groups fit): a decade of bytes is the same height
    sizes = [s for s in (2 ** k for k in range(13)) if s <= state["N"]]
    red = [b for b in rectangles(view, "fill-warn") if b[2:] != (10.0, 10.0)]  # not the legend's swatch
    bars = sorted(rectangles(view, "fill-memory") + red)
    assert len(bars) == len(sizes)
    held = [memory.hsdp_model_states(state["params"], state["N"], s).total_bytes for s in sizes]
    base = bars[0][1] + bars[0][3]
    per_decade = (bars[0][3] - bars[-1][3]) / math.log10(held[0] / held[-1]) if len(bars) > 1 else None
    ticks = [(t, box) for t, box in boxes if t.endswith((" MB", " GB", " TB")) and box[0] + box[2] == pytest.approx(90)]
    assert len(ticks) >= 3
    units = {"MB": 1e6, "GB": 1e9, "TB": 1e12}
    for tick, box in ticks:
        value = float(tick.split()[0].replace(",", "")) * units[tick.split()[1]]
        y = box[1] + svg.ASCENT * 11 - 4
        if per_decade:
            assert y == pytest.approx(base - bars[0][3] - math.log10(value / held[0]) * per_decade, abs=0.2)
    hbm = hardware.gpu("h100_sxm").hbm_bytes
    assert len(red) == sum(1 for b in held if b > hbm)
    assert any(t.endswith((" ms", " s")) and box[0] + box[2] == pytest.approx(90) for t, box in boxes)
    assert all(inside(box, view) for _, box in boxes)
    assert not any(boxes_overlap(a, b) for i, (_, a) in enumerate(boxes) for _, b in boxes[i + 1:])


@pytest.mark.parametrize("changes", FIG10_STATES + [{"N": 4096, "shard": 1}, {"N": 4096, "shard": 4096}])
def test_fig10_on_a_phone_draws_fewer_gpus_and_names_every_other_size(changes):
    """Issue 34: 560 units wide did not fit a phone. Narrow, the drawing is 320 units (320 px at
    least): up to 16 GPUs of a shard group, the mesh's lines wrapped, the chosen size always
    named on the size axis (every other one where 13 sizes crowd it), and the rings of the
    chatty collective (the replicas' AllReduce when there is none) are the key."""
    figure = registry()[10]
    state = figure.validate_state({**figure.default_state(), **changes})
    wide, narrow = figure.render(state), figure.render(state, narrow=True)
    root = ET.fromstring(narrow.svg)
    assert root.get("viewBox").split()[2] == "320" and "min-width:320px" in root.get("style")
    assert shapes(narrow, "svg-neutral-fill") == min(state["shard"], 16) * min(state["N"] // state["shard"], 8)
    boxes = text_boxes(narrow)
    assert all(inside(box, narrow) for _, box in boxes)
    assert not any(boxes_overlap(a, b) for i, (_, a) in enumerate(boxes) for _, b in boxes[i + 1:])
    sizes = [t for t, _ in boxes if t.isdigit() and t != "0"]  # the size axis ("0" is a value tick)
    assert str(state["shard"]) in sizes and len(sizes) >= (len(bin(state["N"])) - 2) // 2
    for view in (wide, narrow):
        [key] = [p for p in ET.fromstring(view.svg).iter(f"{SVG}path") if svg.KEY in p.get("class", "").split()]
        # the shard groups' rings (solid), or the replicas' dashed columns where a group is one GPU
        assert key.get("class").split()[0] in ("stroke-intra", "stroke-inter")
        assert ("stroke-dasharray" in key.attrib) == (state["shard"] == 1)
    assert registry()[10].primary == ("shard", "gpus")


# ---- Figure 22 ---------------------------------------------------------------------------------

FIG22_STATES = [
    {},
    {"src": 64, "dst": 63, "rows": 1024, "params": 1_000_000_000_000, "write_GBps": 50},
    {"mode": "gathered", "dst": 5, "rows": 16, "metadata": False},
    {"metadata": False, "src": 8, "dst": 6},
    {"metadata": False, "src": 8, "dst": 8, "rows": 1},
]


@pytest.mark.parametrize("changes", FIG22_STATES)
def test_fig22_starred_readouts_are_the_models(changes):
    state, view = render(22, **changes)
    saved = checkpoint.ShardLayout(state["src"] if state["mode"] == "sharded" else 1)
    loaded = checkpoint.ShardLayout(state["dst"])
    verdict = checkpoint.reload_verdict(checkpoint.ShardLayout(state["src"]), loaded, mode=state["mode"],
                                        has_metadata=state["metadata"])
    got = values(view)
    assert got["reload_ok"] == (1 if verdict.loadable else 0)
    if verdict.loadable:
        plan = checkpoint.reshard_reads((state["rows"], 4096), 4, saved, loaded)
        assert got["reads_total"] == sum(len(reads) for reads in plan)
        assert got["max_reads_per_rank"] == max(len(reads) for reads in plan)
    else:
        assert got["reads_total"] == got["max_reads_per_rank"] == 0
    link = hardware.link("ib_ndr")
    write = checkpoint.checkpoint_write_time(
        (state["params"],), 14, checkpoint.ShardLayout(state["src"]), mode=state["mode"],
        per_writer_bytes_per_s=state["write_GBps"] * 1e9, filesystem_bytes_per_s=100e9,
        network_bytes_per_s=link.bandwidth_bytes_per_s, alpha_s=link.alpha_s)
    assert got["write_time_s"] == write.total_s
    assert got["checkpoint_bytes"] == write.total_bytes == 14 * state["params"]
    assert got["largest_write_bytes"] == write.peak_writer_bytes


def test_fig22_lines_join_each_new_rank_to_each_range_it_reads():
    state, view = render(22)
    plan = checkpoint.reshard_reads((state["rows"], 4096), 4, checkpoint.ShardLayout(8), checkpoint.ShardLayout(6))
    line_paths = [d for css in (f"stroke-rank{k}" for k in range(8)) for d in path_data(view, css)]
    assert sum(d.count("M") for d in line_paths) == sum(map(len, plan)) == values(view)["reads_total"] == 13
    assert shapes(view, "stroke-warn") == 0


def test_fig22_without_metadata_the_restart_cannot_happen():
    _, view = render(22, metadata=False, src=4, dst=6)
    assert values(view)["reload_ok"] == 0
    assert shapes(view, "stroke-warn") == 4  # rank k can only open file k ...
    assert shapes(view, "fill-warn") == 2    # ... and ranks 4 and 5 find no file at all
    assert not any(path_data(view, f"stroke-rank{k}") for k in range(8))
    assert any(t.startswith("\u2717 Restart fails") for t in texts(view))
    assert "World size changed from 4 to 6" in view.note
    _, same = render(22, metadata=False, src=6, dst=6)
    assert values(same)["reload_ok"] == 1 and values(same)["reads_total"] == 6
    _, gathered = render(22, metadata=False, mode="gathered", src=4, dst=6)
    assert values(gathered)["reload_ok"] == 1  # one full file describes itself


@pytest.mark.parametrize("src, dst", [(4, 6), (8, 6), (2, 8), (8, 2)])
def test_fig22_the_guess_reads_over_the_dashed_guesses(src, dst):
    """"rank k can only guess" sits where the dashed guesses cross: it is haloed in the panel's
    colour, so no dash runs through its letters."""
    _, view = render(22, metadata=False, src=src, dst=dst)
    root = ET.fromstring(view.svg)
    label = next(t for t in root.iter(f"{SVG}text") if (t.text or "").startswith("rank k can only guess"))
    assert "svg-halo" in label.get("class").split()
    assert inside(dict(text_boxes(view))[label.text], view)


def test_fig22_sharded_writes_beat_gathered_at_real_sizes():
    _, sharded = render(22, src=64, params=1_000_000_000_000)
    _, gathered = render(22, src=64, params=1_000_000_000_000, mode="gathered")
    # 14 TB: one writer at 2 GB/s takes ~2 h; 64 writers hit the 100 GB/s file system cap.
    assert values(gathered)["write_time_s"] > 7000
    assert values(sharded)["write_time_s"] == pytest.approx(14e12 / 100e9)
    assert values(gathered)["largest_write_bytes"] == 14e12


@pytest.mark.parametrize("number, changes", [
    (9, {"units": 128, "compute_ms": 0.5, "gather_ms": 100}),
    (9, {"units": 128, "reshard": False, "prefetch": False}),
    (10, {"N": 4096, "shard": 64, "gpus": 2}),
    (22, {"src": 64, "dst": 63, "rows": 1024}),
    (22, {"src": 64, "dst": 64, "rows": 1024, "mode": "gathered"}),
])
def test_heaviest_views_stay_a_few_dozen_elements(number, changes):
    """What a redraw costs the browser: many bars, boxes and lines ride in a few paths, and text
    labels (~20 us of layout each) stay in the dozens, whatever the state."""
    _, view = render(number, **changes)
    root = ET.fromstring(view.svg)
    assert sum(1 for _ in root.iter()) <= 120
    assert sum(1 for _ in root.iter(SVG + "text")) <= 45
    assert len(view.svg) < 120_000


@pytest.mark.parametrize("changes", [{}, {"metadata": False, "src": 4}, {"src": 64, "dst": 63, "rows": 1024, "params": 10**12}])
def test_fig22_on_a_phone_the_reshard_keeps_its_lines_in_one_column_and_the_legend_goes_under_the_plot(changes):
    """Narrow (issue 34): a 320-unit drawing, every line of text inside it, the reads (or the
    failed guesses) marked as the drawing's point, the write-time curves named under the plot."""
    state, wide = render(22, **changes)
    narrow = registry()[22].render(state, narrow=True)
    root = ET.fromstring(narrow.svg)
    width, height = map(float, root.get("viewBox").split()[2:])
    assert width == 320 and height > float(ET.fromstring(wide.svg).get("viewBox").split()[3])
    assert [t for t, box in text_boxes(narrow) if not inside(box, narrow)] == []
    keyed = [p for p in root.iter(SVG + "path") if svg.KEY in (p.get("class") or "").split()]
    if values(wide)["reload_ok"]:
        assert sum(p.get("d").count("M") for p in keyed) == values(wide)["reads_total"]  # one line per range read
    else:
        assert [p.get("class") for p in keyed] == [f"stroke-warn {svg.KEY}"]
    assert [t for t in texts(narrow) if t in ("gathered", "sharded")] == ["gathered", "sharded"]  # the legend


@pytest.mark.parametrize("changes", [{}, {"mode": "gathered"}, {"params": 1_000_000_000_000, "src": 64},
                                     {"src": 1, "write_GBps": 50}, {"src": 64, "params": 1_000_000_000, "write_GBps": 0.5}])
def test_22_the_save_time_drawn_is_the_readouts(changes):
    """The chart named each curve with its time at 64 ranks (54.6 s gathered) where the
    readout and the prose quote the time at the ranks that saved (54.3 s at 8): the drawing
    gives the marked squares' times, the readouts' numbers, and names the curves apart."""
    from models import fmt
    state, view = render(22, **changes)
    other = "gathered" if state["mode"] == "sharded" else "sharded"
    _, flipped = render(22, **{**changes, "mode": other})
    times = {state["mode"]: readouts(view)["write_time_s"].text, other: readouts(flipped)["write_time_s"].text}
    ranks = fmt.gpus(state["src"]).replace("GPU", "rank")
    line = f"At {ranks} (the squares): sharded {times['sharded']}, gathered {times['gathered']}"
    shown = " ".join(t for t, _ in text_boxes(view))
    assert line in shown
    for narrow in (False, True):
        boxes = text_boxes(registry()[22].render(state, narrow=narrow))
        assert [(a, b) for i, (a, p) in enumerate(boxes) for b, q in boxes[i + 1:] if svg.boxes_touch(p, q)] == []
