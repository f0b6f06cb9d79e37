import dataclasses
import math

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from tests.published_cases import published_cases as _published_cases
from models import pipeline as PL
from models.pipeline import (
    SCHEDULES,
    Op,
    bubble_over_ideal,
    bubble_ratio_formula,
    interleaved_group_size,
    simulate,
)

EXACT = 1e-12




def _chunks_for(schedule, v):
    return v if schedule == "interleaved" else 1


@st.composite
def small_pipelines(draw, factor):
    """(schedule, P, m, v, factors) small enough to simulate by the hundred: v is 1 unless
    interleaved; factors is None (uniform stages) or one ``factor`` per stage."""
    schedule = draw(st.sampled_from(SCHEDULES))
    P = draw(st.integers(1, 8))
    factors = draw(st.none() | st.lists(factor, min_size=P, max_size=P).map(tuple))
    return schedule, P, draw(st.integers(1, 16)), _chunks_for(schedule, draw(st.integers(1, 4))), factors


# --------------------------------------------------------------------------- helpers: an
# independent check of any timeline (legality) and an independent re-timing (numpy oracle)


def _pass_durations(t, forward_s, backward_s, factors):
    """Expected length of each op, from the inputs rather than from the simulation."""
    factors = factors or (1.0,) * t.stages
    split = t.schedule == "zb-h1"
    per_kind = {"F": forward_s, "B": backward_s / 2 if split else backward_s, "W": backward_s / 2}
    return [per_kind[op.kind] * factors[op.stage] / t.chunks for op in t.ops]


def _virtual_stage(t, op):
    return op.chunk * t.stages + op.stage


def assert_legal(t, forward_s=1.0, backward_s=2.0, factors=None):
    P, m, v = t.stages, t.microbatches, t.chunks
    kinds = "FBW" if t.schedule == "zb-h1" else "FB"
    by_key = {}
    for op in t.ops:
        key = (op.kind, op.microbatch, _virtual_stage(t, op))
        assert key not in by_key, f"duplicate {key}"
        by_key[key] = op
    # exactly one F, one B (and one W for zb-h1) per (microbatch, virtual stage)
    assert len(by_key) == len(kinds) * m * P * v == len(t.ops)
    for kind in kinds:
        for i in range(m):
            for k in range(P * v):
                op = by_key[(kind, i, k)]
                assert op.stage == k % P and op.chunk == k // P
    # durations match the inputs
    for op, dt in zip(t.ops, _pass_durations(t, forward_s, backward_s, factors)):
        assert op.end - op.start == pytest.approx(dt, rel=1e-12, abs=1e-12)
        assert op.start >= 0
    # dependencies respected
    last = P * v - 1
    for (kind, i, k), op in by_key.items():
        if kind == "F" and k > 0:
            assert op.start >= by_key[("F", i, k - 1)].end - 1e-9
        if kind == "B":
            assert op.start >= by_key[("F", i, k)].end - 1e-9
            if k < last:
                assert op.start >= by_key[("B", i, k + 1)].end - 1e-9
        if kind == "W":
            assert op.start >= by_key[("B", i, k)].end - 1e-9
    # sorted by (stage, start); one op at a time per device
    keys = [(op.stage, op.start) for op in t.ops]
    assert keys == sorted(keys)
    for a, b in zip(t.ops, t.ops[1:]):
        if a.stage == b.stage:
            assert b.start >= a.end - 1e-9
    # summary fields consistent with the ops
    assert t.makespan == max(op.end for op in t.ops)
    for d in range(P):
        busy = sum(op.end - op.start for op in t.ops if op.stage == d)
        assert t.busy_per_stage[d] == pytest.approx(busy, rel=1e-12)
        assert t.idle_per_stage[d] == pytest.approx(t.makespan - busy, rel=1e-9, abs=1e-9)
    assert t.bubble_ratio == pytest.approx(sum(t.idle_per_stage) / (P * t.makespan), abs=1e-12)


def numpy_retime(t):
    """Re-time the timeline's own per-device orders as a longest-path fixed point.

    Independent of the simulator's sweep: start = max(previous op on the device ends,
    dependency ends), iterated with numpy until nothing moves.
    """
    n = len(t.ops)
    index = {(op.kind, op.microbatch, _virtual_stage(t, op)): j for j, op in enumerate(t.ops)}
    duration = np.array([op.end - op.start for op in t.ops])
    previous = np.full(n, n)  # n = a sentinel op that ends at 0
    dep = np.full(n, n)
    last = t.stages * t.chunks - 1
    for j, op in enumerate(t.ops):
        if j > 0 and t.ops[j - 1].stage == op.stage:
            previous[j] = j - 1
        k = _virtual_stage(t, op)
        if op.kind == "F" and k > 0:
            dep[j] = index[("F", op.microbatch, k - 1)]
        elif op.kind == "B":
            dep[j] = index[("B", op.microbatch, k + 1)] if k < last else index[("F", op.microbatch, k)]
        elif op.kind == "W":
            dep[j] = index[("B", op.microbatch, k)]
    start = np.zeros(n)
    for _ in range(n + 1):
        end = np.append(start + duration, 0.0)
        new = np.maximum(end[previous], end[dep])
        if np.array_equal(new, start):
            return start
        start = new
    raise AssertionError("no fixed point")


# --------------------------------------------------------------------------- the bubble:
# simulation == closed form


@pytest.mark.parametrize("schedule", ["gpipe", "1f1b"])
def test_gpipe_1f1b_bubble_equals_formula_exhaustive_small(schedule):
    for P in range(1, 9):
        for m in range(1, 25):
            t = simulate(schedule, P, m)
            assert abs(t.bubble_ratio - (P - 1) / (m + P - 1)) <= EXACT, (P, m)
            assert t.bubble_ratio == pytest.approx(bubble_ratio_formula(schedule, P, m), abs=EXACT)


@settings(max_examples=100, deadline=None)
@given(
    schedule=st.sampled_from(["gpipe", "1f1b"]),
    P=st.integers(2, 16),
    m=st.integers(1, 64),
)
def test_gpipe_1f1b_bubble_equals_formula(schedule, P, m):
    t = simulate(schedule, P, m)
    assert abs(t.bubble_ratio - bubble_ratio_formula(schedule, P, m)) <= EXACT
    # Narayanan et al. 2021 Sec. 2.2.1: 1F1B keeps GPipe's bubble (and makespan)
    assert simulate("gpipe", P, m).makespan == simulate("1f1b", P, m).makespan == (m + P - 1) * 3.0


def test_interleaved_bubble_equals_formula_when_P_divides_m_small_grid():
    for P in range(1, 9):
        for m in range(P, 4 * P + 1, P):
            for v in range(1, 5):
                t = simulate("interleaved", P, m, v)
                assert abs(t.bubble_ratio - (P - 1) / (v * m + P - 1)) <= EXACT, (P, m, v)


@settings(max_examples=80, deadline=None)
@given(P=st.integers(2, 16), groups=st.integers(1, 4), v=st.integers(1, 4))
def test_interleaved_bubble_equals_formula_when_P_divides_m(P, groups, v):
    m = P * groups
    t = simulate("interleaved", P, m, v)
    assert abs(t.bubble_ratio - bubble_ratio_formula("interleaved", P, m, v)) <= EXACT


@settings(max_examples=80, deadline=None)
@given(P=st.integers(2, 12), extra=st.integers(1, 40), v=st.integers(2, 4))
def test_interleaved_other_m_at_least_P_also_matches_formula(P, extra, v):
    # Our extension beyond Megatron's default: groups of N = interleaved_group_size
    # (Megatron's own validity rule, last group shorter but >= P) run deadlock-free and
    # keep the closed-form bubble exactly.
    m = P + extra
    t = simulate("interleaved", P, m, v)
    assert abs(t.bubble_ratio - (P - 1) / (v * m + P - 1)) <= EXACT
    N = interleaved_group_size(P, m)
    assert N >= P and (m % N == 0 or m % N >= P)


def test_interleaved_group_size_examples():
    assert interleaved_group_size(4, 8) == 4  # P | m: Megatron's default N = P
    assert interleaved_group_size(4, 5) == 5  # one group of 5
    assert interleaved_group_size(4, 9) == 5  # groups 5 + 4
    assert interleaved_group_size(4, 13) == 7  # groups 7 + 6
    assert interleaved_group_size(8, 3) == 3  # m < P: a single group


@pytest.mark.parametrize("P,m,v", [(4, 1, 2), (4, 3, 2), (8, 5, 3), (8, 7, 4), (16, 9, 4)])
def test_interleaved_below_P_microbatches(P, m, v):
    # m < P (Megatron refuses it; we run one group of m): the pipeline never fills and
    # the step is the chain of one microbatch through all P*v chunks plus m-1 more
    # chunk-steps: makespan = (v*P + m - 1) (t_f + t_b) / v (derived here), worse than
    # the closed form (P-1)/(v*m+P-1).
    t = simulate("interleaved", P, m, v)
    assert t.makespan == pytest.approx((v * P + m - 1) * 3.0 / v, rel=1e-12)
    assert t.bubble_ratio > bubble_ratio_formula("interleaved", P, m, v)


def test_interleaved_with_one_chunk_is_1f1b():
    for P, m in [(1, 1), (4, 3), (4, 8), (8, 20)]:
        a, b = simulate("interleaved", P, m, 1), simulate("1f1b", P, m)
        assert a.ops == b.ops
        assert a.bubble_ratio == b.bubble_ratio and a.peak_stashes_per_stage == b.peak_stashes_per_stage
        assert a.schedule == "interleaved"


@settings(max_examples=80, deadline=None)
@given(P=st.integers(2, 16), m=st.integers(1, 64))
def test_zb_h1_bubble(P, m):
    t = simulate("zb-h1", P, m)
    if m >= P:  # Qi et al. 2023 Sec. 3.1: bubble (P-1)(T_F+T_B-T_W), T_F=T_B=T_W=1
        assert abs(t.bubble_ratio - bubble_ratio_formula("zb-h1", P, m)) <= EXACT
        assert t.makespan == 3 * m + P - 1
    else:
        # Too few microbatches to fill the tail with W's: the step is F and B through
        # all P stages for microbatch 0 plus (m-1) B+W pairs and one W on stage 0:
        # 2P + 2m - 1 (derived here), i.e. (P-m) more than the closed form.
        assert t.makespan == 2 * P + 2 * m - 1
        assert t.bubble_ratio > bubble_ratio_formula("zb-h1", P, m)


@settings(max_examples=60, deadline=None)
@given(
    P=st.integers(2, 10),
    extra=st.integers(0, 20),
    forward_s=st.floats(0.1, 5),
    backward_s=st.floats(0.1, 10),
)
def test_zb_h1_idle_with_unequal_passes(P, extra, forward_s, backward_s):
    # With T_B = T_W = backward_s/2 the paper's (P-1)(T_F+T_B-T_W) = (P-1) T_F holds while
    # T_W <= T_F; beyond that our handcrafted order idles (P-1) T_W per stage.
    m = P + extra
    t = simulate("zb-h1", P, m, forward_s=forward_s, backward_s=backward_s)
    expected = (P - 1) * max(forward_s, backward_s / 2)
    assert t.idle_per_stage == pytest.approx([expected] * P, rel=1e-9)
    # 1F1B always idles (P-1)(T_F + T_B_full) per stage (DualPipe README table)
    one = simulate("1f1b", P, m, forward_s=forward_s, backward_s=backward_s)
    assert one.idle_per_stage == pytest.approx([(P - 1) * (forward_s + backward_s)] * P, rel=1e-9)


def test_reference_article_gpipe_numbers():
    # "With P=8 stages and m=8 microbatches you waste 47% of the cluster. With m=64 you waste 10%."
    assert round(100 * simulate("gpipe", 8, 8).bubble_ratio) == 47
    assert round(100 * simulate("gpipe", 8, 64).bubble_ratio) == 10
    assert round(100 * simulate("1f1b", 8, 8).bubble_ratio) == 47
    assert simulate("gpipe", 8, 8).bubble_ratio == 7 / 15


def test_published_megatron2021_pipeline_bubble():
    case = _published_cases()["megatron2021-pipeline-bubble"]
    for example, value in zip(case["inputs"]["examples"], case["expected"]["values"]):
        p, m, v = example["p"], example["m"], example["v"]
        schedule = "1f1b" if v == 1 else "interleaved"
        assert bubble_over_ideal(schedule, p, m, v) == pytest.approx(value, abs=1e-15)
        t = simulate(schedule, p, m, v)
        # bubble / ideal compute, from the simulated timeline
        assert sum(t.idle_per_stage) / sum(t.busy_per_stage) == pytest.approx(value, abs=EXACT)
        r = t.bubble_ratio
        assert r / (1 - r) == pytest.approx(value, abs=EXACT)


def test_published_zero_bubble_schedules():
    case = _published_cases()["zero-bubble-schedules"]
    example = case["expected"]["numeric_example_p8_m24"]
    rates = case["expected"]["bubble_rate_T_F=T_B=T_W"]
    assert rates["1F1B"] == "(p-1)/m" and rates["ZB1P(ZB-H1)"] == "(p-1)/(3m)"
    for schedule, key in [("1f1b", "1F1B"), ("zb-h1", "ZB1P")]:
        assert bubble_over_ideal(schedule, 8, 24) == pytest.approx(example[key], abs=1e-15)
        t = simulate(schedule, 8, 24)
        assert sum(t.idle_per_stage) / sum(t.busy_per_stage) == pytest.approx(example[key], abs=EXACT)
    # activation memory of ZB1P = 1x 1F1B's (README table), peak over stages
    memory = case["expected"]["activation_memory_vs_1F1B"]
    for P, m in [(8, 24), (4, 4), (16, 64)]:
        ratio = simulate("zb-h1", P, m).peak_stashes / simulate("1f1b", P, m).peak_stashes
        assert ratio == memory["ZB1P"] == 1
    # DualPipe table, B = full backward: 1F1B bubble (PP-1)(F+B), ZB1P (PP-1)(F+B-2W)
    F, B = 1.3, 2.9
    W = B / 2
    assert simulate("1f1b", 8, 24, forward_s=F, backward_s=B).idle_per_stage[0] == pytest.approx(7 * (F + B))
    # (F+B-2W) = F here; valid while W <= F, so pick F >= B/2
    F = 1.6
    t = simulate("zb-h1", 8, 24, forward_s=F, backward_s=B)
    assert t.idle_per_stage[0] == pytest.approx(7 * (F + B - 2 * W))


def test_formula_conventions():
    for schedule in SCHEDULES:
        for P in (1, 2, 8, 16):
            for m in (1, 8, 64):
                v = _chunks_for(schedule, 3)
                r = bubble_ratio_formula(schedule, P, m, v)
                assert 0 <= r < 1
                assert bubble_over_ideal(schedule, P, m, v) == pytest.approx(r / (1 - r), rel=1e-12)
    assert bubble_ratio_formula("gpipe", 8, 64) == 7 / 71
    assert bubble_ratio_formula("interleaved", 8, 64, 4) == 7 / 263
    assert bubble_ratio_formula("zb-h1", 8, 64) == 7 / 199
    assert bubble_over_ideal("zb-h1", 8, 64) == 7 / 192


# --------------------------------------------------------------------------- memory


@settings(max_examples=80, deadline=None)
@given(P=st.integers(1, 16), m=st.integers(1, 64))
def test_1f1b_bounds_stashes_by_P_gpipe_by_m(P, m):
    one, gpipe, zb = simulate("1f1b", P, m), simulate("gpipe", P, m), simulate("zb-h1", P, m)
    assert one.peak_stashes == min(P, m) and one.worst_stage == 0
    assert one.peak_stashes_per_stage == tuple(float(min(P - s, m)) for s in range(P))
    assert gpipe.peak_stashes == m and gpipe.worst_stage == 0
    assert gpipe.peak_stashes_per_stage == (float(m),) * P
    assert zb.peak_stashes <= one.peak_stashes
    assert zb.peak_stashes_per_stage == (float(min(P, m)),) * P and zb.worst_stage == 0


@pytest.mark.parametrize("case_id", ["korthikanti-fig1-175B", "korthikanti-fig1-22B"])
def test_interleaved_peak_matches_korthikanti_interleave_penalty(case_id):
    # Korthikanti et al. 2022: the first stage of an interleaved schedule stores
    # (1 + (p-1)/(p v)) times 1F1B's activations. Our stage-0 peak: Megatron's warm-up
    # (P-1)*2 + (v-1)*P chunk stashes plus one, in units of 1/v stage.
    case = _published_cases()[case_id]
    p, v = case["inputs"]["p"], case["inputs"]["v"]
    m = case["inputs"]["B"] // case["inputs"]["b"] // (case["inputs"]["n"] // (case["inputs"]["t"] * p))
    penalty = case["derived"]["interleave_penalty"]
    t = simulate("interleaved", p, m, v)
    assert t.peak_stashes / min(p, m) == pytest.approx(1 + (p - 1) / (p * v), rel=1e-12)
    assert t.peak_stashes / min(p, m) == pytest.approx(penalty, abs=1e-5)
    assert t.worst_stage == 0


def test_interleaved_peak_per_stage():
    P, m, v = 8, 64, 3
    t = simulate("interleaved", P, m, v)
    for d in range(P):
        warmup = (P - d - 1) * 2 + (v - 1) * P
        assert t.peak_stashes_per_stage[d] == pytest.approx((warmup + 1) / v, rel=1e-12)


# --------------------------------------------------------------------------- order structure


def _device_ops(t, d):
    return [op for op in t.ops if op.stage == d]


@pytest.mark.parametrize("P,m", [(4, 8), (8, 3), (5, 5), (1, 4)])
def test_1f1b_order_warmup_then_alternate(P, m):
    # "after a warm-up of P-i-1 forwards, stage i alternates strictly between one
    # forward and one backward" (reference article; Narayanan et al. 2021 Sec. 2.2.1)
    t = simulate("1f1b", P, m)
    for d in range(P):
        kinds = "".join(op.kind for op in _device_ops(t, d))
        w = min(P - d - 1, m)
        steady = m - w
        assert kinds == "F" * w + "FB" * steady + "B" * w


def test_gpipe_order_all_forward_then_backward():
    t = simulate("gpipe", 4, 6)
    for d in range(4):
        ops = _device_ops(t, d)
        assert "".join(op.kind for op in ops) == "F" * 6 + "B" * 6
        assert [op.microbatch for op in ops] == list(range(6)) + list(range(5, -1, -1))


def test_interleaved_order_matches_megatron_warmup_and_groups():
    P, m, v = 4, 8, 2
    t = simulate("interleaved", P, m, v)
    for d in range(P):
        ops = _device_ops(t, d)
        warmup = min((P - d - 1) * 2 + (v - 1) * P, m * v)
        first_b = next(j for j, op in enumerate(ops) if op.kind == "B")
        assert first_b == warmup + 1
        forwards = [(op.microbatch, op.chunk) for op in ops if op.kind == "F"]
        # Megatron get_schedule_table: groups of P microbatches, chunk 0 then chunk 1
        assert forwards[:8] == [(0, 0), (1, 0), (2, 0), (3, 0), (0, 1), (1, 1), (2, 1), (3, 1)]
        backwards = [(op.microbatch, op.chunk) for op in ops if op.kind == "B"]
        assert backwards[:4] == [(0, 1), (1, 1), (2, 1), (3, 1)]  # last chunk first


def test_zb_h1_order_keeps_1f1b_warmup_and_defers_w():
    P, m = 4, 8
    t = simulate("zb-h1", P, m)
    one = simulate("1f1b", P, m)
    for d in range(P):
        kinds = "".join(op.kind for op in _device_ops(t, d))
        one_kinds = "".join(op.kind for op in _device_ops(one, d))
        assert kinds.index("B") == one_kinds.index("B")  # same warm-up
        assert kinds.replace("W", "") == one_kinds  # F/B order is 1F1B's
        # device d holds up to d W's: the first W comes after d+1 B's
        assert kinds[: kinds.index("W")].count("B") == d + 1
    # stage 0 idles only while waiting for its first B: (P-1) units
    s0 = _device_ops(t, 0)
    gaps = [b.start - a.end for a, b in zip(s0, s0[1:]) if b.start > a.end]
    assert gaps == [P - 1]


def _zb_h1_order_by_the_rule(P, m, d, block):
    """ZB-H1's program on device d written out step by step (Qi et al. 2023, Sec. 3.1):
    1F1B's warm-up, then per microbatch j its F (while any are left), its B, and the
    oldest held W once more than d are held; the held W's at the end."""
    warmup = min(P - d - 1, m)
    first = d * m
    order, held = list(range(first, first + warmup)), []
    for j in range(m):
        if warmup + j < m:
            order.append(first + warmup + j)
        order.append(block + first + j)
        held.append(2 * block + first + j)
        if len(held) > d:
            order.append(held.pop(0))
    return order + held


def _one_f_one_b_order_by_the_rule(forwards, backwards, warmup):
    steady = len(forwards) - warmup
    order = forwards[:warmup]
    for f, b in zip(forwards[warmup:], backwards):
        order += [f, b]
    return order + backwards[steady:]


def _interleaved_orders_by_the_table(P, m, v, block):
    """Megatron-LM get_schedule_table, written out: groups of N microbatches through
    chunk 0, then chunk 1, ...; backwards walk the same table with chunks reversed."""
    group = PL.interleaved_group_size(P, m)
    table = [(i, c) for first in range(0, m, group) for c in range(v) for i in range(first, min(first + group, m))]
    orders = []
    for d in range(P):
        forwards = [c * P * m + d * m + i for i, c in table]
        backwards = [block + (v - 1 - c) * P * m + d * m + i for i, c in table]
        warmup = min((P - d - 1) * 2 + (v - 1) * group, m * v)
        orders.append(_one_f_one_b_order_by_the_rule(forwards, backwards, warmup))
    return orders


@pytest.mark.parametrize("P", [1, 2, 3, 4, 7, 11, 16])
def test_device_orders_are_the_written_out_rules(P):
    """The orders are built by slicing one shared list of ids (fast in Pyodide); they
    must be the programs each schedule's rule writes out op by op."""
    for m in [1, 2, 3, P - 1, P, P + 1, 2 * P + 3, 47, 64]:
        if m < 1:
            continue
        block = P * m
        ids = PL._op_ids(3 * block * 4 + 1)
        assert PL._device_orders("zb-h1", P, m, 1, block, ids) == [
            _zb_h1_order_by_the_rule(P, m, d, block) for d in range(P)]
        assert PL._device_orders("1f1b", P, m, 1, block, ids) == [
            _one_f_one_b_order_by_the_rule(list(range(d * m, d * m + m)), list(range(block + d * m, block + d * m + m)),
                                           min(P - d - 1, m)) for d in range(P)]
        assert PL._device_orders("gpipe", P, m, 1, block, ids) == [
            list(range(d * m, d * m + m)) + list(range(block + d * m + m - 1, block + d * m - 1, -1)) for d in range(P)]
        for v in (2, 3, 4):
            assert PL._device_orders("interleaved", P, m, v, block * v, ids) == _interleaved_orders_by_the_table(P, m, v, block * v)
    assert PL._op_ids(5)[:5] == [0, 1, 2, 3, 4]


# --------------------------------------------------------------------------- legality and an
# independent numpy re-timing, on every schedule


@settings(max_examples=60, deadline=None)
@given(pipeline=small_pipelines(st.floats(0.25, 4)), forward_s=st.floats(0.01, 10), ratio=st.floats(0.5, 4))
def test_timelines_are_legal_and_match_numpy_oracle(pipeline, forward_s, ratio):
    schedule, P, m, v, factors = pipeline
    backward_s = forward_s * ratio
    t = simulate(schedule, P, m, v, forward_s=forward_s, backward_s=backward_s, stage_time_factors=factors)
    assert_legal(t, forward_s, backward_s, factors)
    starts = numpy_retime(t)
    assert np.allclose(starts, [op.start for op in t.ops], rtol=1e-12, atol=1e-9)
    for value in (t.makespan, t.bubble_ratio, *t.busy_per_stage, *t.idle_per_stage, *t.peak_stashes_per_stage):
        assert math.isfinite(value) and value >= -1e-12
    assert 0 <= t.bubble_ratio < 1
    assert t.peak_stashes == max(t.peak_stashes_per_stage)
    assert t.worst_stage == t.peak_stashes_per_stage.index(t.peak_stashes)


def test_largest_figure_config_is_legal():
    # the figure's largest setting, P=16, m=64, v=4 (8,192 ops)
    t = simulate("interleaved", 16, 64, 4)
    assert_legal(t)
    assert abs(t.bubble_ratio - 15 / 271) <= EXACT


# --------------------------------------------------------------------------- imbalance


def test_heavy_first_and_last_stage_grow_the_bubble():
    # Reference article: "A pipeline runs at the speed of its slowest stage, and one
    # heavy stage makes every other stage's bubble worse."
    P, m = 4, 8
    factors = (1.5, 1.0, 1.0, 1.5)
    for schedule in SCHEDULES:
        v = _chunks_for(schedule, 2)
        uniform = simulate(schedule, P, m, v)
        heavy = simulate(schedule, P, m, v, stage_time_factors=factors)
        assert heavy.bubble_ratio > uniform.bubble_ratio
        for d in (1, 2):  # the light stages wait more
            assert heavy.idle_per_stage[d] > uniform.idle_per_stage[d]
    # Concrete 1F1B case: the bottleneck (4.5 s per microbatch) runs back to back, so the
    # step is m * 4.5 plus one pass through every other stage: 36 + 3 + 3 + 4.5.
    t = simulate("1f1b", P, m, stage_time_factors=factors)
    assert t.makespan == 46.5
    assert t.bubble_ratio == pytest.approx(1 - (3 * 8 * (1.5 + 1 + 1 + 1.5)) / (4 * 46.5), abs=EXACT)


@settings(max_examples=80, deadline=None)
@given(
    schedule=st.sampled_from(SCHEDULES),
    P=st.integers(1, 8),
    m=st.integers(1, 24),
    factors=st.lists(st.floats(0.2, 5), min_size=8, max_size=8),
)
def test_pipeline_runs_at_speed_of_slowest_stage(schedule, P, m, factors):
    factors = tuple(factors[:P])
    v = _chunks_for(schedule, 2)
    t = simulate(schedule, P, m, v, forward_s=1.0, backward_s=2.0, stage_time_factors=factors)
    slowest_per_microbatch_s = max(factors) * 3.0
    assert t.makespan >= m * slowest_per_microbatch_s * (1 - 1e-12)
    assert t.busy_per_stage == pytest.approx([m * 3.0 * f for f in factors], rel=1e-12)


# --------------------------------------------------------------------------- API details


def test_op_and_timeline_are_frozen_dataclasses():
    op = Op(1, "F", 2, 0, 0.5, 1.5)
    assert (op.stage, op.kind, op.microbatch, op.chunk, op.start, op.end) == (1, "F", 2, 0, 0.5, 1.5)
    assert dataclasses.asdict(op) == dict(stage=1, kind="F", microbatch=2, chunk=0, start=0.5, end=1.5)
    assert dataclasses.replace(op, start=0.0).start == 0.0
    assert [f.name for f in dataclasses.fields(Op)] == ["stage", "kind", "microbatch", "chunk", "start", "end"]
    with pytest.raises(dataclasses.FrozenInstanceError):
        op.start = 3.0
    t = simulate("1f1b", 4, 4)
    with pytest.raises(dataclasses.FrozenInstanceError):
        t.makespan = 1.0
    assert isinstance(t.ops, tuple) and all(type(o) is Op for o in t.ops)
    assert repr(t.ops[0]) == "Op(stage=0, kind='F', microbatch=0, chunk=0, start=0.0, end=1.0)"
    assert set(PL.SCHEDULE_LABELS) == set(SCHEDULES)


def test_results_are_cached():
    a = simulate("zb-h1", 6, 12, stage_time_factors=[1.0, 1, 1, 1, 1, 2])
    b = simulate("zb-h1", 6, 12, stage_time_factors=(1.0, 1.0, 1.0, 1.0, 1.0, 2.0))
    assert a is b
    assert simulate("zb-h1", 6, 12) is not a


@settings(max_examples=60, deadline=None)
@given(pipeline=small_pipelines(st.integers(1, 3)), forward_units=st.integers(1, 5), backward_units=st.integers(1, 10))
def test_whole_tick_times_are_simulated_in_exact_ints(pipeline, forward_units, backward_units):
    schedule, P, m, v, factors = pipeline
    forward, backward = forward_units * 2 * v, backward_units * 2 * v  # every pass a whole tick
    exact = simulate(schedule, P, m, v, forward_s=forward, backward_s=backward, stage_time_factors=factors)
    floats = simulate(schedule, P, m, v, forward_s=float(forward), backward_s=float(backward),
                      stage_time_factors=factors and tuple(map(float, factors)))
    assert exact is not floats
    assert type(exact.makespan) is int and type(floats.makespan) is float
    assert all(type(p.duration_s) is int and all(type(s) is int for s in p.starts) for p in exact.passes)
    assert exact.passes == floats.passes and exact.makespan == floats.makespan
    assert exact.idle_per_stage == floats.idle_per_stage and exact.bubble_ratio == floats.bubble_ratio
    assert exact.peak_stashes_per_stage == floats.peak_stashes_per_stage


def test_whole_times_with_fractional_passes_fall_back_to_floats():
    t = simulate("interleaved", 2, 2, 4, forward_s=2, backward_s=4)  # a chunk's pass is 0.5
    assert {op.end - op.start for op in t.ops if op.kind == "F"} == {0.5}
    assert type(t.makespan) is float
    z = simulate("zb-h1", 2, 3, forward_s=2, backward_s=3)  # B and W of 1.5 each
    assert {op.end - op.start for op in z.ops if op.kind in "BW"} == {1.5}
    assert z.makespan == simulate("zb-h1", 2, 3, forward_s=2.0, backward_s=3.0).makespan


def test_chunk_times_and_split_backward():
    t = simulate("interleaved", 2, 2, 4, forward_s=2.0, backward_s=4.0)
    assert {op.end - op.start for op in t.ops if op.kind == "F"} == {0.5}
    assert {op.end - op.start for op in t.ops if op.kind == "B"} == {1.0}
    z = simulate("zb-h1", 2, 2, forward_s=2.0, backward_s=4.0)
    assert {op.end - op.start for op in z.ops if op.kind in "BW"} == {2.0}


@pytest.mark.parametrize(
    "kwargs, name",
    [
        (dict(schedule="gpipe", stages=0, microbatches=4), "stages"),
        (dict(schedule="gpipe", stages=4, microbatches=0), "microbatches"),
        (dict(schedule="interleaved", stages=4, microbatches=4, chunks=5), "chunks"),
        (dict(schedule="interleaved", stages=4, microbatches=4, chunks=0), "chunks"),
        (dict(schedule="1f1b", stages=4, microbatches=4, chunks=2), "chunks"),
        (dict(schedule="pipedream", stages=4, microbatches=4), "schedule"),
        (dict(schedule="gpipe", stages=2.5, microbatches=4), "stages"),
        (dict(schedule="gpipe", stages=True, microbatches=4), "stages"),
        (dict(schedule="gpipe", stages=4, microbatches="8"), "microbatches"),
        (dict(schedule="gpipe", stages=2, microbatches=4, stage_time_factors=(1.0, -1.0)), "stage_time_factors"),
        (dict(schedule="gpipe", stages=2, microbatches=4, stage_time_factors=(1.0, 0.0)), "stage_time_factors"),
        (dict(schedule="gpipe", stages=2, microbatches=4, stage_time_factors=(1.0, math.nan)), "stage_time_factors"),
        (dict(schedule="gpipe", stages=2, microbatches=4, stage_time_factors=(1.0,)), "stage_time_factors"),
        (dict(schedule="gpipe", stages=2, microbatches=4, stage_time_factors=2.0), "stage_time_factors"),
        (dict(schedule="gpipe", stages=2, microbatches=4, forward_s=0.0), "forward_s"),
        (dict(schedule="gpipe", stages=2, microbatches=4, backward_s=math.inf), "backward_s"),
        (dict(schedule="interleaved", stages=128, microbatches=1024, chunks=4), "microbatches"),
    ],
)
def test_invalid_inputs_name_the_argument(kwargs, name):
    with pytest.raises(ValueError, match=name):
        simulate(**kwargs)


@pytest.mark.parametrize("function", [bubble_ratio_formula, bubble_over_ideal])
def test_formula_invalid_inputs(function):
    for args, name in [
        (("gpipe", 0, 4), "stages"),
        (("gpipe", 4, 0), "microbatches"),
        (("interleaved", 4, 4, 5), "chunks"),
        (("zb-h2", 4, 4), "schedule"),
        (("gpipe", 4, 4, 2), "chunks"),
    ]:
        with pytest.raises(ValueError, match=name):
            function(*args)


def test_extreme_times_raise_instead_of_inf_or_zero():
    with pytest.raises(ValueError, match="forward_s"):
        simulate("zb-h1", 4, 8, forward_s=1e308)
    with pytest.raises(ValueError, match="backward_s"):
        simulate("gpipe", 4, 8, forward_s=5e-324, backward_s=5e-324, stage_time_factors=(0.5,) * 4)
    t = simulate("1f1b", 4, 8, forward_s=1e-300, backward_s=2e-300)
    assert t.bubble_ratio == pytest.approx(3 / 11, rel=1e-9) and t.makespan > 0


def test_interleaved_non_multiple_m_costs_memory():
    # m = 6 on P = 4: one group of 6 (Megatron's smallest valid N); same closed-form
    # bubble, but stage 0 warms up with all 12 chunk-forwards: GPipe-like memory.
    t = simulate("interleaved", 4, 6, 2)
    assert abs(t.bubble_ratio - 3 / 15) <= EXACT
    assert t.peak_stashes == 6.0 > simulate("interleaved", 4, 8, 2).peak_stashes == 5.5


def test_huge_inputs_closed_forms_do_not_overflow():
    assert bubble_ratio_formula("gpipe", 10**6, 10**30) == pytest.approx(1e-24, rel=1e-6)
    assert bubble_over_ideal("interleaved", 10**6, 10**30, 4) == pytest.approx((10**6 - 1) / 4e30)
    assert bubble_ratio_formula("1f1b", 1, 1) == 0.0


def _fixed_orders(orders):
    """A stand-in for _device_orders that returns `orders` whatever it is asked."""
    def device_orders(*args):
        return [list(order) for order in orders]
    return device_orders


@pytest.mark.parametrize("schedule,orders", [
    # 1F1B, P=2, m=1 (block 2: F ids 0-1, B ids 2-3): device 0 asks for its backward first
    ("1f1b", [[2, 0], [1, 3]]),
    # ZB-H1, P=2, m=1 (F 0-1, B 2-3, W 4-5): device 1 runs W before the B it needs, and
    # device 0's B waits for that same B: two devices wait on one op
    ("zb-h1", [[0, 2, 4], [1, 5, 3]]),
])
def test_an_order_that_cannot_finish_is_reported_as_a_deadlock(monkeypatch, schedule, orders):
    monkeypatch.setattr(PL, "_device_orders", _fixed_orders(orders))
    PL._simulate.cache_clear()
    try:
        with pytest.raises(ValueError, match="deadlocks"):
            PL.simulate(schedule, 2, 1)
    finally:
        PL._simulate.cache_clear()
