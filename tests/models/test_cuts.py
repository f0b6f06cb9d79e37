"""One step, six cuts (Figure 02): what one device keeps and sends, against the ledger and the
per-collective formulas written out by hand."""
import math

import pytest
from hypothesis import given, settings, strategies as st

from models import cuts, memory, strategies
from tests.published_cases import published_cases

B, S, M, BPE = cuts.MICRO_BATCH, cuts.SEQ, cuts.MICROBATCHES, cuts.BYTES_PER_ELEMENT


def test_hidden_size_from_kaplan_parameter_count():
    """Psi ~= 12 L h^2 (Kaplan et al. 2020, Eq. 2.1), to a multiple of 128: a 7B, 32-layer model is ~4.2k wide,
    a 70B 80-layer one ~8.6k (Llama 2 has 4096 and 8192 with SwiGLU and embeddings counted)."""
    assert cuts.hidden_size(7e9, 32) == 4224 and cuts.hidden_size(70e9, 80) == 8576
    assert cuts.hidden_size(175e9, 96) == 12288  # GPT-3: 12 * 96 * 12288^2 = 174B
    assert cuts.hidden_size(1, 128) == 128


@settings(max_examples=200, deadline=None)
@given(st.floats(min_value=1e8, max_value=1e13), st.integers(min_value=1, max_value=256))
def test_hidden_size_is_the_nearest_multiple_of_128(params, layers):
    h = cuts.hidden_size(params, layers)
    exact = math.sqrt(params / (12 * layers))
    assert h % 128 == 0 and (abs(h - exact) <= 64 + 1e-6 or h == 128)


def test_ledger_per_device_by_cut():
    psi, d = 7e9, 8
    kept = {c: cuts.step_cut(c, psi, 32, d).model_state_bytes for c in cuts.CUTS}
    assert kept == pytest.approx({"data": 16 * psi, "zero": 16 * psi / d, "tensor": 16 * psi / d, "pipeline": 16 * psi / d,
                                  "context": 16 * psi, "expert": 16 * psi * (1 / 3 + 2 / 3 / d)}, rel=1e-12)


def test_zero_cut_reproduces_the_zero_paper():
    case = published_cases()["zero-fig1-7.5B-nd64"]
    step = cuts.step_cut("zero", case["inputs"]["params"], 32, case["inputs"]["dp_degree"])
    assert step.model_state_bytes / 1e9 == pytest.approx(case["expected"]["ZeRO3_GB"], abs=0.005)
    assert cuts.step_cut("data", 7.5e9, 32, 64).model_state_bytes / 1e9 == case["expected"]["baseline_GB"]


@pytest.mark.parametrize("d", [2, 4, 8, 64])
def test_bytes_sent_per_step_by_hand(d):
    psi, layers = 70e9, 80
    h = cuts.hidden_size(psi, layers)
    bsh = B * S * h * BPE  # one activation, bytes
    sent = {c: cuts.step_cut(c, psi, layers, d) for c in cuts.CUTS}
    assert sent["data"].comm_bytes == pytest.approx(2 * (d - 1) / d * 2 * psi)  # ring AllReduce of bf16 gradients
    assert sent["zero"].comm_bytes == pytest.approx(3 * (d - 1) / d * 2 * psi)  # 2 AllGathers + 1 ReduceScatter
    assert sent["tensor"].comm_bytes == pytest.approx(4 * 2 * (d - 1) / d * bsh * layers * M)
    assert sent["pipeline"].comm_bytes == pytest.approx((1 if d == 2 else 2) * bsh * M)
    assert sent["context"].comm_bytes == pytest.approx(3 * (d - 1) * 2 * bsh / d * layers * M)  # K,V fwd; K,V,dK,dV bwd
    assert sent["expert"].comm_bytes == pytest.approx(4 * cuts.TOP_K * bsh * (d - 1) / d * layers * M)
    assert [sent[c].messages for c in cuts.CUTS] == [1, 3 * layers, 4 * layers * M, (1 if d == 2 else 2) * M,
                                                      2 * (d - 1) * layers * M, 4 * layers * M]


def test_the_cards_ratios_hold():
    """The strategy cards: DDP sends ~2x the gradient buffer; ZeRO-3 ~1.5x DDP (ZeRO Sec. 7)."""
    data, zero = cuts.step_cut("data", 13e9, 40, 1024), cuts.step_cut("zero", 13e9, 40, 1024)
    assert zero.comm_bytes / data.comm_bytes == pytest.approx(1.5, rel=1e-12)
    assert data.comm_bytes / (2 * 13e9) == pytest.approx(2, rel=1e-3)
    assert memory.comm_volume_psi(3) / memory.comm_volume_psi(0) == 1.5
    for cut in cuts.CUTS:
        assert strategies.card(cuts.CARD_KEYS[cut]).name


@settings(max_examples=100, deadline=None)
@given(st.sampled_from(cuts.CUTS), st.sampled_from((1e9, 7e9, 70e9, 1e12)), st.sampled_from((8, 32, 128)),
       st.sampled_from((2, 4, 8, 16, 32, 64)))
def test_every_cut_reports_finite_positive_numbers(cut, params, layers, degree):
    if cut == "pipeline" and degree > layers:
        return
    step = cuts.step_cut(cut, params, layers, degree)
    assert step.comm_bytes > 0 and step.model_state_bytes > 0 and step.messages >= 1
    assert step.collective in ("allreduce", "allgather+reducescatter", "sendrecv", "alltoall")
    assert len(step.what) <= 34 and len(step.when) <= 34  # short enough for a panel


@pytest.mark.parametrize("args, name", [
    (("pipeline", 7e9, 32, 64), "degree"), (("expert", 7e9, 32, 3), "degree"), (("stripes", 7e9, 32, 8), "cut"),
    (("data", 0, 32, 8), "params"), (("data", 7e9, 0, 8), "layers"), (("data", 7e9, 32, 0), "degree"),
])
def test_step_cut_rejects_nonsense_naming_the_argument(args, name):
    with pytest.raises(ValueError) as err:
        cuts.step_cut(*args)
    assert str(err.value).startswith(name)
