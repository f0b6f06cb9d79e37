import math

import pytest
from hypothesis import given, settings, strategies as st

from tests.published_cases import published_cases as _cases
from models import flops as fl

SETTINGS = settings(max_examples=150, deadline=None)
A100_PEAK = 312e12




@pytest.fixture(scope="module")
def cases():
    return _cases()


# ---- Narayanan 2021 Table 1 ----------------------------------------------------------------------

@pytest.mark.parametrize("model", ["1.7B", "18B", "145B", "1T"])
def test_megatron2021_table1(cases, model):
    case = cases[f"megatron2021-table1-{model}"]
    i, expected, derived = case["inputs"], case["expected"], case["derived"]
    # Eq. 2 reproduces the "Number of parameters" column to 0.1B.
    params = fl.gpt_params(i["layers"], i["hidden"], i["vocab"], i["seq"])
    assert round(params / 1e9, 1) == pytest.approx(i["params_B"], abs=0.051)
    # Eq. 3 (with recomputation) per iteration.
    flops = fl.training_flops(i["global_batch"], i["seq"], i["layers"], i["hidden"], i["vocab"], recompute=True)
    assert flops == pytest.approx(derived["flops_per_iter_Eq3"], rel=1e-12)
    # Achieved teraFLOP/s per GPU, % of peak and aggregate PFLOP/s are mutually consistent.
    x = expected["tflops_per_gpu"] * 1e12
    assert round(100 * x / A100_PEAK) == expected["pct_peak"]
    aggregate = x * i["gpus"] / 1e15
    assert aggregate == pytest.approx(expected["aggregate_pflops"], rel=0.006)
    assert aggregate == pytest.approx(derived["tf_times_n_over_1000"], abs=0.05)
    # Iteration time implied by Eq. 3 and the achieved throughput, and back again.
    t = fl.iteration_time_s(flops, i["gpus"], x)
    assert t == pytest.approx(derived["iteration_time_s_implied"], rel=2e-3)
    assert fl.achieved_flops_per_s_per_gpu(flops, t, i["gpus"]) == pytest.approx(x, rel=1e-12)
    assert fl.utilization(flops, t, i["gpus"], A100_PEAK) == pytest.approx(expected["pct_peak"] / 100, abs=0.005)
    assert i["tp"] * i["pp"] * i["dp"] == i["gpus"]


def test_megatron2021_flops_eq3_closed_forms(cases):
    expected = cases["megatron2021-flops-eq3"]["expected"]
    assert expected["with_full_recompute"].startswith("96*B*s*l*h^2")
    for B, s, l, h, V in ((512, 2048, 24, 2304, 51200), (1, 4096, 32, 4096, 32000), (8, 128, 2, 64, 100)):
        with_rc = 96 * B * s * l * h**2 * (1 + s / (6 * h) + V / (16 * l * h))
        without = 72 * B * s * l * h**2 * (1 + s / (6 * h) + V / (12 * h * l))
        params = 12 * l * h**2 * (1 + 13 / (12 * h) + (V + s) / (12 * l * h))
        assert fl.training_flops(B, s, l, h, V, recompute=True) == pytest.approx(with_rc, rel=1e-13)
        assert fl.training_flops(B, s, l, h, V, recompute="full") == pytest.approx(with_rc, rel=1e-13)
        assert fl.training_flops(B, s, l, h, V) == pytest.approx(without, rel=1e-13)
        assert fl.model_flops(B, s, l, h, V) == pytest.approx(without, rel=1e-13)
        assert fl.gpt_params(l, h, V, s) == pytest.approx(params, rel=1e-13)


def test_breakdown_itemisation():
    # Korthikanti App. A: 24Bsh² + 4Bs²h per layer forward, 2BshV logits, backward = 2x forward.
    B, s, l, h, V = 2, 64, 3, 32, 50
    parts = fl.flops_breakdown(B, s, l, h, V, recompute="full")
    assert parts.forward_transformer == l * (24 * B * s * h * h + 4 * B * s * s * h)
    assert parts.forward_logits == 2 * B * s * h * V
    assert parts.backward == 2 * (parts.forward_transformer + parts.forward_logits)
    assert parts.recompute == parts.forward_transformer
    assert parts.hardware_flops - parts.model_flops == parts.recompute
    assert fl.flops_breakdown(B, s, l, h, V).recompute == 0


def test_megatron2021_eq4_training_time(cases):
    case = cases["megatron2021-eq4-training-time"]
    for inputs, days, derived in zip(case["inputs"]["cases"], case["expected"]["days"], case["derived"]["days"]):
        got = fl.training_time_s(inputs["T"], inputs["P"], inputs["n"], inputs["X_tflops"] * 1e12) / fl.SECONDS_PER_DAY
        assert got == pytest.approx(derived, abs=0.05)
        assert got == pytest.approx(days, abs=1.0)  # paper rounds; its 1T uses P = 1.008e12
    one_t = fl.training_time_s(450e9, 1.008e12, 3072, 163e12) / fl.SECONDS_PER_DAY
    assert round(one_t) == 84


def test_llama3_compute_budget(cases):
    case = cases["llama3-compute-budget"]
    e = case["expected"]
    got = fl.six_n_d(e["actual_params_B"] * 1e9, e["actual_tokens_T"] * 1e12)
    assert got == pytest.approx(case["derived"]["6ND_405B_15.6T"], rel=1e-4)
    assert got == pytest.approx(case["inputs"]["flops_budget"], rel=0.01)
    optimum = fl.six_n_d(e["compute_optimal_params_B"] * 1e9, e["compute_optimal_tokens_T"] * 1e12)
    assert optimum == pytest.approx(case["inputs"]["flops_budget"], rel=0.06)


def test_korthikanti_table5_mfu_hfu():
    # Korthikanti 2022 Table 5 (present work: SP + selective), A100 312 TFLOP/s, s=2048, V=51200.
    rows = [  # B, L, h, GPUs, iteration s, MFU %, HFU %
        (4, 48, 6144, 8, 1.10, 41.5, 43.7),
        (64, 96, 12288, 64, 13.75, 51.4, 52.8),
        (280, 105, 20480, 280, 37.83, 56.0, 57.0),
        (512, 128, 25600, 512, 71.49, 56.3, 57.0),
    ]
    for B, L, h, n, t, mfu, hfu in rows:
        u = fl.mfu_hfu(B, 2048, L, h, 51200, step_time_s=t, gpus=n, peak_flops_per_s=A100_PEAK,
                       recompute="selective")
        assert 100 * u.mfu == pytest.approx(mfu, abs=0.2)
        assert u.mfu < u.hfu < u.mfu * (1 + 2048 / (18 * h)) * (1 + 1e-12)
        # The published HFU column uses Eq. 8 as printed.
        eq8 = fl.korthikanti_eq8_hardware_flops(B, 2048, L, h, 51200)
        assert 100 * fl.utilization(eq8, t, n, A100_PEAK) == pytest.approx(hfu, abs=0.2)


def test_selective_overheads_sec5():
    # Korthikanti Sec. 5: selective recompute "introduces only 2.7% and 1.6% FLOPs overhead"
    # (GPT-3, MT-NLG) -- numbers computed with Eq. 8, i.e. ≈ s/(6h).
    for h, L, overhead in ((12288, 96, 0.027), (20480, 105, 0.016)):
        model = fl.model_flops(1, 2048, L, h, 51200)
        assert fl.korthikanti_eq8_hardware_flops(1, 2048, L, h, 51200) / model - 1 == pytest.approx(
            overhead, abs=0.0015)
        # The itemised count (4Bs²h per layer) is a third of that extra attention work.
        itemised = fl.training_flops(1, 2048, L, h, 51200, recompute="selective") / model - 1
        assert itemised == pytest.approx(2048 / (18 * h) / (1 + 2048 / (6 * h) + 51200 / (12 * h * L)), rel=1e-12)


def test_six_n_d_close_to_72_form_for_big_models():
    l, h, V, s = 96, 12288, 51200, 2048
    params = fl.gpt_params(l, h, V, s)
    exact = fl.model_flops(1, s, l, h, V)
    assert fl.six_n_d(params, s) == pytest.approx(exact, rel=0.03)
    assert fl.iterations(300e9, 1536, 2048) == pytest.approx(300e9 / (1536 * 2048))


# ---- validation ----------------------------------------------------------------------------------

@pytest.mark.parametrize("call,message", [
    (lambda: fl.gpt_params(0, 1024, 50000, 2048), "layers must be >= 1"),
    (lambda: fl.gpt_params(24, 1024.5, 50000, 2048), "hidden must be a whole number"),
    (lambda: fl.training_flops(8, 2048, 24, 1024, 50000, recompute="partial"), "recompute must be one of"),
    (lambda: fl.training_flops(-1, 2048, 24, 1024, 50000), "batch must be >= 1"),
    (lambda: fl.six_n_d(0, 1e12), "params must be > 0"),
    (lambda: fl.six_n_d(1e9, float("nan")), "tokens must be finite"),
    (lambda: fl.six_n_d(1e300, 1e300), "overflows"),
    (lambda: fl.six_n_d(10**400, 1), "params=.* too large"),
    (lambda: fl.training_time_s(1e12, 1e9, 0, 1e14), "gpus must be >= 1"),
    (lambda: fl.training_time_s(1e12, 1e9, 8, 1e14, recompute="yes"), "recompute must be True or False"),
    (lambda: fl.utilization(1e15, 0, 8, 3e14), "step_time_s must be > 0"),
    (lambda: fl.utilization(1e15, 1, 8, -3e14), "peak_flops_per_s must be > 0"),
    (lambda: fl.mfu_hfu(1, 2, 3, 4, 5, step_time_s=1, gpus=1, peak_flops_per_s=True), "peak_flops_per_s must be a number"),
    (lambda: fl.gpt_params(10**400, 1, 1, 1), "layers=.* too large"),
])
def test_rejects(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_huge_finite_inputs():
    assert math.isfinite(fl.six_n_d(1e30, 1e15))
    assert math.isfinite(fl.training_flops(10**6, 10**6, 10**4, 10**6, 10**6, recompute=True))


# ---- properties --------------------------------------------------------------------------------

DIMS = dict(batch=st.integers(1, 4096), seq=st.integers(1, 131072), layers=st.integers(1, 200),
            hidden=st.integers(1, 65536), vocab=st.integers(1, 300000))


@SETTINGS
@given(**DIMS)
def test_recompute_ordering_and_ratio(batch, seq, layers, hidden, vocab):
    none = fl.training_flops(batch, seq, layers, hidden, vocab)
    selective = fl.training_flops(batch, seq, layers, hidden, vocab, recompute="selective")
    full = fl.training_flops(batch, seq, layers, hidden, vocab, recompute=True)
    assert all(math.isfinite(x) and x > 0 for x in (none, selective, full))
    assert none < selective < full  # recomputing part of a layer never costs more than all of it
    assert none < full < 4 / 3 * none  # recompute adds one forward (< 1/3 because logits are not redone)
    assert fl.gpt_params(layers, hidden, vocab, seq) > 0


@SETTINGS
@given(**DIMS, gpus=st.integers(1, 100000), time=st.floats(1e-3, 1e5), peak=st.floats(1e12, 1e16))
def test_mfu_hfu_consistent(batch, seq, layers, hidden, vocab, gpus, time, peak):
    u = fl.mfu_hfu(batch, seq, layers, hidden, vocab, step_time_s=time, gpus=gpus,
                   peak_flops_per_s=peak, recompute="full")
    assert u.hfu / u.mfu == pytest.approx(u.hardware_flops / u.model_flops, rel=1e-12)
    assert u.mfu * peak * gpus * time == pytest.approx(u.model_flops, rel=1e-9)
    assert u.mfu > 0 and math.isfinite(u.hfu)


@SETTINGS
@given(st.floats(1e6, 1e13), st.floats(1e6, 1e16), st.integers(1, 100000), st.floats(1e9, 1e16))
def test_training_time_recompute_costs_a_third_more(params, tokens, gpus, rate):
    with_rc = fl.training_time_s(tokens, params, gpus, rate)
    without = fl.training_time_s(tokens, params, gpus, rate, recompute=False)
    assert with_rc == pytest.approx(4 / 3 * without, rel=1e-12)
    assert without == pytest.approx(fl.six_n_d(params, tokens) / (gpus * rate), rel=1e-12)
