"""Figure 19's advice is what the other figures price best (issue 43, checklist item 13).

Each fix the tree lights is held to the prices the figures that draw that axis give: a ZeRO-3
fix to Figure 10's communication per step for every shard group that fits (its own ``_step``,
on the GPU's NVLink and usual NIC), a tensor-parallel fix to Figure 12's model
(``tensor.tp_layer_time``'s blocking AllReduces). Among the sizes that make the failing check
pass, the tree must name the cheapest, for every try and a sweep of states.
"""
import itertools

import pytest

from figures import fig10_hsdp_mesh as fig10
from figures import fig19_decision_tree as fig19
from models import hardware, ladder, memory, shapes, tensor
from tests.figure_views import readouts, render, texts

GPUS_PER_NODE = 8  # Figure 19's nodes (the ladder's default)


def _figure10_price(params, gpus, group, gpu):
    """Figure 10's communication per step for this world, shard group and GPU's fabrics."""
    spec = hardware.gpu(gpu)
    return fig10._step(params, gpus, group, min(GPUS_PER_NODE, gpus), spec.scale_up_link,
                       hardware.USUAL_NETWORK[gpu])[0].total_comm_s


def _holds_to_the_other_figures(state):
    r = ladder.climb(state["params"], state["seq"], state["gpu"], state["gpus"], state["experts"], state["micro"])
    shape = shapes.shape_for(state["params"])
    if r.fix.axis in ("fsdp", "hsdp") and r.fix.fits:
        fitting = [o.group for o in r.options if o.passes]
        for o in r.options:  # "fits" is FSDP's peak with one gathered layer, plus the activations
            peak = memory.fsdp_peak_memory(state["params"], o.group, shape.layer_params).peak_bytes + r.activation_bytes
            assert o.passes == (peak <= r.hbm_bytes)
        prices = {g: _figure10_price(state["params"], state["gpus"], g, state["gpu"]) for g in fitting}
        assert r.fix.group in fitting
        # Figure 10 counts 32 units a step, the ladder one per layer: the same order, up to alpha
        assert prices[r.fix.group] <= min(prices.values()) * 1.02, (state, prices, r.fix.group)
    if r.fix.axis == "tp" and r.options:
        network = hardware.USUAL_NETWORK[state["gpu"]]
        prices = {o.group: shape.layers * tensor.tp_layer_time(state["micro"], state["seq"], shape.hidden, o.group,
                                                               gpu=state["gpu"], inter_link=network).comm_s
                  for o in r.options}
        tokens = r.check("step_time").value
        for o in r.options:
            assert o.comm_s == prices[o.group]
            if r.first_bottleneck == "step_time":
                assert o.passes == (tokens / o.group <= ladder.MAX_BATCH_TOKENS)
            else:
                assert o.passes == (o.per_device_bytes <= r.hbm_bytes)
        passing = [o.group for o in r.options if o.passes]
        if passing:
            assert r.fix.group == min(passing, key=prices.get)
            assert r.fix.group == min(passing)  # a wider TP group sends more: TP only as wide as it must be
        else:
            assert r.fix.group == max(o.group for o in r.options)
    return r


@pytest.mark.parametrize("changes", [{}] + [changes for _, changes in fig19.TRIES])
def test_every_try_names_the_fix_the_other_figures_price_cheapest(changes):
    state, view = render(19, **changes)
    r = _holds_to_the_other_figures(state)
    shown = readouts(view)
    if r.fix.comm_s is not None and r.fix.fits:
        assert shown["fix_comm_s"].value == r.fix.comm_s


def test_the_default_shards_in_whole_nodes_as_figure_10_prices_it():
    """7.5B on 64 A100s: groups of 2 fit, but Figure 10 prices them at 664 ms and 14.5 GB across
    nodes a step against 266 ms and 3.3 GB for whole-node groups of 8, which fit too."""
    state, view = render(19)
    shown = readouts(view)
    assert (shown["recommended_axis"].value, shown["fix"].text) == ("hsdp", "groups of 8, 8 replicas: 26.5 GB a GPU")
    assert fig10._step(7.5e9, 64, 2, 8, "nvlink3", "ib_hdr")[0].total_comm_s == pytest.approx(0.664, abs=1e-3)
    assert fig10._step(7.5e9, 64, 8, 8, "nvlink3", "ib_hdr")[0].total_comm_s == pytest.approx(0.266, abs=1e-3)
    assert shown["fix_comm_s"].text == "266 ms of communication a step, least of 6 that fit"
    assert "least communication: 266 ms a step (6 fit)" in texts(view)
    assert "groups of 2: 665 ms" in shown["compared"].text


def test_a_batch_too_large_takes_the_narrowest_tp_that_brings_it_under_the_limit():
    """1.7B on 4,096 GPUs: TP 2 halves the 8.4M-token batch to the 4.2M limit (Figure 12: TP
    only as wide as it must be), not TP 8."""
    state, view = render(19, params=1_700_000_000, gpus=4096)
    shown = readouts(view)
    assert (shown["recommended_axis"].value, shown["fix"].text) == ("tp", "TP 2 with sequence parallel: 15.7 GB a GPU")
    assert shown["compared"].text == "TP 2: 3.38 ms, TP 4: 5.62 ms, TP 8: 7.84 ms"


SWEEP = list(itertools.product(
    (760_000_000, 1_700_000_000, 7_500_000_000, 18_400_000_000, 76_100_000_000, 175_000_000_000),
    (2048, 32768), tuple(hardware.GPUS), (8, 64, 1024, 4096, 16384), (1, 8, 32)))


@pytest.mark.parametrize("params, seq, gpu, gpus, micro", SWEEP)
def test_a_sweep_of_states_holds_every_branch_to_the_same_prices(params, seq, gpu, gpus, micro):
    _holds_to_the_other_figures({"params": params, "seq": seq, "gpu": gpu, "gpus": gpus, "experts": 1, "micro": micro})


def test_the_sweep_reaches_every_priced_branch():
    """The sweep is not vacuous: it lights ZeRO-3 at several group sizes and TP for the batch
    and for memory."""
    seen = set()
    for params, seq, gpu, gpus, micro in SWEEP:
        r = ladder.climb(params, seq, gpu, gpus, 1, micro)
        if r.fix.fits and r.fix.axis in ("fsdp", "hsdp", "tp"):
            seen.add((r.fix.axis, r.first_bottleneck, r.fix.group))
    assert {("hsdp", "model_state", 8), ("tp", "step_time", 2)} <= seen
    assert any(axis == "tp" and why in ("activations", "layer") for axis, why, _ in seen)
    assert len({g for axis, _, g in seen if axis in ("fsdp", "hsdp")}) >= 3
