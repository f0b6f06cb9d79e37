import math

import pytest
from hypothesis import given, settings, strategies as st

from models import collectives
from models import ddp as D

MiB = 2**20

# Hand-computed example. Registration order L0..L3, sizes 0.5, 2, 3, 0.5 MiB, 1 ms backward each.
# 2 ranks, alpha 0, 1 MiB/ms: a 2-rank ring AllReduce moves 2(N-1)/N = 1x the bucket, so a
# bucket of x MiB takes x ms.
LAYERS = [(0.5 * MiB, 1e-3), (2 * MiB, 1e-3), (3 * MiB, 1e-3), (0.5 * MiB, 1e-3)]
LINK = dict(ranks=2, alpha_s=0.0, bandwidth_bytes_per_s=MiB * 1000.0, bucket_cap_mb=4)


def test_defaults_match_pytorch():
    assert D.DEFAULT_BUCKET_CAP_MB == 25
    assert D.FIRST_BUCKET_CAP_BYTES == 1024 * 1024  # dist._DEFAULT_FIRST_BUCKET_BYTES
    assert D.bucket_cap_bytes(25) == 25 * 1024 * 1024  # int(bucket_cap_mb * 1024 * 1024)


def test_bucket_assignment_by_hand_steady_state():
    # Reverse order L3, L2, ...: L3 (0.5) < 1 MiB, +L2 = 3.5 >= 1 closes bucket 0 (first cap 1 MiB);
    # then L1 + L0 = 2.5 < 4 MiB stays open until the end.
    buckets, caps = D.assign_buckets([b for b, _ in LAYERS], bucket_cap_mb=4)
    assert buckets == ((3, 2), (1, 0))
    assert caps == (1 * MiB, 4 * MiB)


def test_bucket_assignment_by_hand_find_unused():
    # Registration order, then reversed: the 1 MiB bucket holds L0, L1 and fires last.
    buckets, caps = D.assign_buckets([b for b, _ in LAYERS], bucket_cap_mb=4, find_unused_parameters=True)
    assert buckets == ((2, 3), (0, 1))
    assert caps == (4 * MiB, 1 * MiB)


def test_timeline_by_hand():
    # Gradients ready at 1 (L3), 2 (L2), 3 (L1), 4 ms (L0). Bucket 0 (3.5 MiB) ready at 2 ms,
    # runs 2 -> 5.5 ms; bucket 1 (2.5 MiB) ready at 4 ms, waits for the stream, 5.5 -> 8 ms.
    t = D.backward_timeline(LAYERS, **LINK)
    assert t.status == "ok"
    assert t.layer_ready_s == pytest.approx((4e-3, 3e-3, 2e-3, 1e-3))
    b0, b1 = t.buckets
    assert (b0.ready_s, b0.start_s, b0.finish_s) == pytest.approx((2e-3, 2e-3, 5.5e-3))
    assert (b1.ready_s, b1.start_s, b1.finish_s) == pytest.approx((4e-3, 5.5e-3, 8e-3))
    assert t.backward_end_s == pytest.approx(4e-3)
    assert t.comm_end_s == pytest.approx(8e-3)
    assert t.exposed_comm_s == pytest.approx(4e-3)
    assert t.total_comm_s == pytest.approx(6e-3)


def test_timeline_uses_collectives_time():
    kw = dict(LINK, ranks=8, alpha_s=1e-5)
    t = D.backward_timeline(LAYERS, **kw)
    for b in t.buckets:
        assert b.comm_s == collectives.time_s("allreduce", b.size_bytes, 8, alpha_s=1e-5, bandwidth_bytes_per_s=MiB * 1000.0)
        assert b.finish_s == pytest.approx(b.start_s + b.comm_s)


def test_unused_parameter_hangs_without_find_unused():
    t = D.backward_timeline(LAYERS, unused_layers=[2], **LINK)
    assert t.status == "hang"
    assert t.stuck_buckets == (0, 1)  # bucket 0 holds L2; bucket 1 cannot launch before it
    assert t.comm_end_s is None and t.exposed_comm_s is None
    assert "[2]" in t.message and "find_unused_parameters" in t.message
    assert all(b.start_s is None for b in t.buckets)


def test_unused_parameter_with_find_unused_by_hand():
    # Traversal 0.5 ms; L2 does not run. L3 ready 1.5 ms (first hook: L2 marked ready too),
    # L1 2.5 ms, L0 3.5 ms. Buckets (2,3) 3.5 MiB: 1.5 -> 5.0 ms; (0,1) 2.5 MiB: 5.0 -> 7.5 ms.
    t = D.backward_timeline(LAYERS, unused_layers=[2], find_unused_parameters=True, traversal_s=0.5e-3, **LINK)
    assert t.status == "ok"
    assert t.layer_ready_s == pytest.approx((3.5e-3, 2.5e-3, 1.5e-3, 1.5e-3))
    assert [b.finish_s for b in t.buckets] == pytest.approx([5.0e-3, 7.5e-3])
    assert t.backward_end_s == pytest.approx(3.5e-3)
    assert t.exposed_comm_s == pytest.approx(4.0e-3)


def test_no_sync_accumulation_by_hand():
    # forward 1 ms; a quiet microbatch is 1 + 4 = 5 ms; the last one 1 + 4 + 4 (exposed) = 9 ms.
    acc = D.accumulation_step(LAYERS, 3, forward_s=1e-3, **LINK)
    assert (acc.reductions, acc.step_s, acc.comm_s) == (1, pytest.approx(19e-3), pytest.approx(6e-3))
    assert acc.bytes_reduced == 6 * MiB
    every = D.accumulation_step(LAYERS, 3, forward_s=1e-3, no_sync=False, **LINK)
    assert (every.reductions, every.step_s, every.bytes_reduced) == (3, pytest.approx(27e-3), 18 * MiB)


def test_straggler_by_hand():
    # One rank 50% slower: gradients at 1.5, 3, 4.5, 6 ms; bucket 0: 3 -> 6.5, bucket 1: 6.5 -> 9 ms.
    s = D.straggler_effect(LAYERS, 0.5, **LINK)
    assert s.with_straggler.comm_end_s == pytest.approx(9e-3)
    assert s.delay_s == pytest.approx(1e-3)
    assert s.fast_rank_idle_s == pytest.approx(5e-3)  # normal rank finished its backward at 4 ms


def test_article_only_the_final_bucket_is_exposed():
    # Fast link: each bucket finishes before the next is ready, so only the last one shows.
    layers = [(8 * MiB, 2e-3)] * 24
    t = D.backward_timeline(layers, ranks=8, alpha_s=5e-6, bandwidth_bytes_per_s=100e9)
    assert t.exposed_comm_s == pytest.approx(t.buckets[-1].comm_s)
    assert t.exposed_comm_s < 0.2 * t.total_comm_s


def test_article_bucket_size_is_a_tuning_knob():
    # Many small gradients, high alpha: tiny buckets pay alpha repeatedly, one huge bucket fires late.
    layers = [(0.25 * MiB, 1e-4)] * 400
    kw = dict(ranks=64, alpha_s=20e-6, bandwidth_bytes_per_s=50e9)
    exposed = {cap: D.backward_timeline(layers, bucket_cap_mb=cap, **kw).exposed_comm_s for cap in (0.01, 25, 1e6)}
    assert exposed[25] < exposed[0.01] / 10
    assert exposed[25] < exposed[1e6]


@pytest.mark.parametrize(
    "layers, kwargs, name",
    [
        ([], {}, "layers"),
        ([(1, 2, 3)], {}, "layers[0]"),
        ([(-1, 1e-3)], {}, "layers[0].param_bytes"),
        ([(1, float("nan"))], {}, "layers[0].backward_s"),
        (LAYERS, {"ranks": 0}, "ranks"),
        (LAYERS, {"bucket_cap_mb": 0}, "bucket_cap_mb"),
        (LAYERS, {"first_bucket_cap_bytes": -1}, "first_bucket_cap_bytes"),
        (LAYERS, {"unused_layers": [7]}, "unused_layers"),
        (LAYERS, {"unused_layers": 2}, "unused_layers"),
        (LAYERS, {"straggler_slowdown": -0.1}, "straggler_slowdown"),
        (LAYERS, {"traversal_s": -1}, "traversal_s"),
        (LAYERS, {"alpha_s": -1}, "alpha_s"),
        ([(1e308, 1.0)] * 3, {}, "layers"),
    ],
)
def test_rejects_nonsense(layers, kwargs, name):
    args = dict(LINK)
    args.update(kwargs)
    with pytest.raises(ValueError) as err:
        D.backward_timeline(layers, **args)
    assert str(err.value).startswith(name)


def test_accumulation_rejects_nonsense():
    with pytest.raises(ValueError, match="^microbatches"):
        D.accumulation_step(LAYERS, 0, **LINK)
    with pytest.raises(ValueError, match="^microbatches"):
        D.accumulation_step(LAYERS, 10**400, **LINK)
    with pytest.raises(ValueError, match="bucket 0 waits"):
        D.accumulation_step(LAYERS, 2, unused_layers=[2], **LINK)


layer_lists = st.lists(
    st.tuples(st.floats(min_value=0, max_value=64 * MiB), st.floats(min_value=0, max_value=1e-2)),
    min_size=1,
    max_size=30,
)


@settings(max_examples=100, deadline=None)
@given(
    layer_lists,
    st.floats(min_value=0.01, max_value=200),
    st.booleans(),
    st.integers(min_value=1, max_value=512),
    st.floats(min_value=0, max_value=1e-4),
    st.floats(min_value=0, max_value=2),
)
def test_timeline_invariants(layers, cap_mb, find_unused, ranks, alpha, slowdown):
    t = D.backward_timeline(
        layers, ranks=ranks, alpha_s=alpha, bandwidth_bytes_per_s=25e9, bucket_cap_mb=cap_mb,
        find_unused_parameters=find_unused, straggler_slowdown=slowdown,
    )
    members = sorted(i for b in t.buckets for i in b.layers)
    assert members == list(range(len(layers)))  # a partition of the layers
    built = list(reversed(t.buckets)) if find_unused else list(t.buckets)  # construction order
    for b in built[:-1]:
        assert b.size_bytes >= b.cap_bytes  # closed only once the cap is reached...
        last = layers[b.layers[-1]][0]
        assert b.size_bytes - last < b.cap_bytes  # ...and as soon as it is
    prev_finish = 0.0
    for b in t.buckets:
        assert b.start_s >= b.ready_s - 1e-15 and b.start_s >= prev_finish - 1e-15
        assert b.finish_s == pytest.approx(b.start_s + b.comm_s)
        prev_finish = b.finish_s
    assert t.exposed_comm_s >= 0 and math.isfinite(t.exposed_comm_s)
    assert t.exposed_comm_s <= t.total_comm_s + 1e-12
    assert t.comm_end_s >= t.backward_end_s - 1e-15 or t.exposed_comm_s == 0


@settings(max_examples=100, deadline=None)
@given(layer_lists, st.integers(min_value=1, max_value=16))
def test_no_sync_never_costs_more(layers, k):
    kw = dict(ranks=8, alpha_s=1e-5, bandwidth_bytes_per_s=25e9)
    with_ns = D.accumulation_step(layers, k, **kw)
    without = D.accumulation_step(layers, k, no_sync=False, **kw)
    assert with_ns.step_s <= without.step_s * (1 + 1e-12)
    assert without.bytes_reduced == pytest.approx(k * with_ns.bytes_reduced)
