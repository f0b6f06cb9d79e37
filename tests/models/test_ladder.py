"""The decision ladder of Figure 19: the first thing that fails on one GPU and its fix."""
import pytest
from hypothesis import given, settings, strategies as st

from models import activations, hardware, hsdp, ladder as L, memory, shapes
from tests.published_cases import published_cases

A100 = "a100_80gb"


def test_article_7b_on_64_gpus_is_fsdp_or_hsdp():
    # "A 7B model on 64 GPUs should almost certainly be plain FSDP or HSDP" (reference article).
    r = L.climb(7_500_000_000, 2048, A100, 64)
    assert r.first_bottleneck == "model_state" and r.recommended_axis in ("fsdp", "hsdp")
    case = published_cases()["zero-fig1-7.5B-nd64"]
    assert r.model_state_bytes / 1e9 == case["expected"]["baseline_GB"]  # 120 GB, 16 bytes/parameter
    shape = shapes.shape_for(7.5e9)
    acts = activations.first_stage_bytes(2048, 1, shape.hidden, shape.heads, shape.layers, recompute="selective",
                                         vocab=shape.vocab).total_bytes
    smallest = hsdp.smallest_fitting_group(7.5e9, 64, hbm_bytes=hardware.gpu(A100).hbm_bytes, activation_bytes=acts,
                                           largest_unit_params=shape.layer_params, gpus_per_node=8)
    # groups of 2 are the smallest that fit, but whole-node groups of 8 send the least: their
    # replica AllReduce carries 1/8 of the gradients across nodes, not 1/2 (issue 43)
    assert smallest == 2 and (r.fix.group, r.fix.replicas) == (8, 8)
    assert r.fix.per_device_bytes == memory.fsdp_peak_memory(7.5e9, 8, shape.layer_params).peak_bytes + acts
    priced = {o.group: o.comm_s for o in r.options if o.passes}
    assert sorted(priced) == [2, 4, 8, 16, 32, 64] and min(priced, key=priced.get) == 8
    assert (priced[2], priced[8]) == (pytest.approx(0.664, abs=2e-3), pytest.approx(0.266, abs=2e-3))  # Figure 10


def test_a_model_that_fits_uses_data_parallelism():
    r = L.climb(1_700_000_000, 2048, A100, 64)
    assert (r.first_bottleneck, r.recommended_axis, r.then) == ("none", "ddp", None)
    assert all(check.passed for check in r.checks)


def test_activations_first_buy_the_free_zero_stages():
    r = L.climb(1_700_000_000, 2048, A100, 64, micro=16)
    assert r.check("model_state").passed and not r.check("activations").passed
    assert (r.first_bottleneck, r.recommended_axis) == ("activations", "zero")
    assert r.fix.per_device_bytes == memory.model_states(1.7e9, 64, 2).total_bytes + r.activation_bytes


def test_long_sequences_call_for_context_parallelism():
    r = L.climb(1_700_000_000, 131072, A100, 64)
    assert (r.first_bottleneck, r.recommended_axis) == ("context", "cp")
    assert r.check("context").value == 131072 / (6 * 2304)  # attention FLOPs over dense GEMM FLOPs
    assert r.fix.fits and r.fix.group == 16
    assert r.then is None  # 131072 x 64 tokens, over 16-way CP: 524k a step, within the batch limit
    r = L.climb(1_700_000_000, 131072, A100, 1024)
    assert (r.recommended_axis, r.then, r.then_axis) == ("cp", "step_time", "tp")  # 8.4M tokens even after CP


def test_too_many_replicas_call_for_tensor_then_pipeline():
    r = L.climb(1_700_000_000, 2048, A100, 4096)
    # TP 2 already halves the 8.4M-token batch to the 4.2M limit: TP 4 and 8 would only send more
    assert (r.first_bottleneck, r.recommended_axis, r.fix.group, r.then) == ("step_time", "tp", 2, None)
    assert [o.group for o in r.options if o.passes] == [2, 4, 8] and r.options[0].comm_s < r.options[-1].comm_s
    assert r.check("step_time").value == 2048 * 4096 > L.MAX_BATCH_TOKENS
    r = L.climb(1_700_000_000, 2048, A100, 16384, micro=4)
    assert (r.then, r.then_axis) == ("step_time", "pp")
    r = L.climb(350_000_000, 2048, "a100_40gb", 128, micro=32)  # TP for activations is enough for the batch too
    assert (r.first_bottleneck, r.recommended_axis, r.then) == ("activations", "tp", None)


def test_big_models_shard_then_split_activations():
    r = L.climb(175_000_000_000, 2048, A100, 1024)
    assert (r.first_bottleneck, r.recommended_axis, r.fix.fits) == ("model_state", "fsdp", False)
    assert (r.then, r.then_axis) == ("activations", "tp")


def test_not_enough_gpus_says_how_many():
    r = L.climb(7_500_000_000, 2048, A100, 1)
    assert (r.first_bottleneck, r.recommended_axis, r.fix.fits, r.fix.min_gpus) == ("model_state", "fsdp", False, 2)


def test_mixtures_of_experts_shard_experts_first():
    r = L.climb(1_700_000_000, 2048, "h100_sxm", 8, experts=8)
    assert (r.first_bottleneck, r.recommended_axis) == ("experts", "ep")
    r = L.climb(39_100_000_000, 2048, "h100_sxm", 1024, experts=64)
    assert (r.first_bottleneck, r.recommended_axis, r.fix.fits) == ("experts", "ep", False)
    assert r.then == "model_state" and r.then_axis in ("fsdp", "hsdp")


@settings(max_examples=80, deadline=None)
@given(st.sampled_from(shapes.PARAMS), st.sampled_from((512, 2048, 8192, 32768, 131072)),
       st.sampled_from(tuple(hardware.GPUS)), st.sampled_from((1, 8, 64, 1024, 16384)),
       st.sampled_from((1, 8, 256)), st.sampled_from((1, 4, 32)))
def test_every_climb_names_a_known_bottleneck_and_axis(params, seq, gpu, gpus, experts, micro):
    r = L.climb(params, seq, gpu, gpus, experts, micro)
    assert r.first_bottleneck in L.BOTTLENECKS and r.recommended_axis in L.AXES
    assert r.model_state_bytes == 16 * params
    assert [c.key for c in r.checks] == list(L.QUESTIONS)
    first_failed = next((c.key for c in r.checks if not c.passed), None)
    if first_failed is None:
        assert r.first_bottleneck == "none" and r.recommended_axis == "ddp"
    elif first_failed in ("step_time", "context", "experts"):
        assert r.first_bottleneck == first_failed
    else:
        assert r.first_bottleneck in ("model_state", "activations", "layer", "context", "experts")
    assert r.then is None or r.then in L.QUESTIONS and r.then_axis in L.AXES


def test_bad_arguments_name_themselves():
    for kwargs, name in (({"seq": 0}, "seq"), ({"gpus": 0}, "gpus"), ({"gpu": "abacus"}, "gpu"),
                         ({"experts": 0}, "experts"), ({"micro": -1}, "micro")):
        args = {"params": 7.5e9, "seq": 2048, "gpu": A100, "gpus": 8, **kwargs}
        with pytest.raises(ValueError, match=name):
            L.climb(**args)
