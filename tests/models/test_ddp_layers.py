"""Figure 05's model: equal layers, and their DDP step in closed form (checked against the simulation)."""
import pytest
from hypothesis import given, settings, strategies as st

from models import collectives
from models import ddp as D

MiB = 2**20


def test_uniform_layers():
    layers = D.uniform_layers(1.3e9, 256, 0.2)
    assert len(layers) == 256
    assert sum(layer.param_bytes for layer in layers) == pytest.approx(2.6e9)  # bf16 gradients: 2 bytes each
    assert sum(layer.backward_s for layer in layers) == pytest.approx(0.2)
    with pytest.raises(ValueError, match="^layers"):
        D.uniform_layers(1e9, D.MAX_LAYERS + 1, 1.0)
    with pytest.raises(ValueError, match="^backward_s"):
        D.uniform_layers(1e9, 4, 0)


def test_uniform_step_by_hand():
    # 8 layers of 1 MiB (2^19 params x 2 bytes), 1 ms of backward each, cap 3 MiB; 2 ranks, alpha 0,
    # 1 MiB/ms: a 2-rank ring AllReduce of x MiB takes x ms. Buckets (reverse order): [L7] closes at
    # 1 MiB (ready 1 ms), [L6 L5 L4] at 3 MiB (ready 4 ms), [L3 L2 L1] (ready 7 ms), [L0] (ready 8 ms).
    # Stream: 1-2, 4-7, 7-10, 10-11 ms: 3 ms after the backward ends, of 8 ms in all.
    s = D.uniform_step(8 * 2**19, 8, 8e-3, ranks=2, alpha_s=0.0, bandwidth_bytes_per_s=MiB * 1000.0, bucket_cap_mb=3)
    assert s.bucket_layers == (1, 3, 3, 1)
    assert s.size_bytes == (MiB, 3 * MiB, 3 * MiB, MiB)
    assert s.ready_s == pytest.approx((1e-3, 4e-3, 7e-3, 8e-3))
    assert s.backward_start_s == pytest.approx((0, 1e-3, 4e-3, 7e-3))
    assert s.backward_s == pytest.approx((1e-3, 3e-3, 3e-3, 1e-3))
    assert s.start_s == pytest.approx((1e-3, 4e-3, 7e-3, 10e-3))
    assert s.finish_s == pytest.approx((2e-3, 7e-3, 10e-3, 11e-3))
    assert (s.backward_end_s, s.comm_end_s, s.exposed_comm_s, s.total_comm_s) == pytest.approx((8e-3, 11e-3, 3e-3, 8e-3))
    assert s.overlap_fraction == pytest.approx(5 / 8)
    assert s.latency_total_s == 0


def test_latency_is_paid_per_bucket():
    # A ring AllReduce over 64 ranks pays 2 x 63 alpha, once per bucket.
    s = D.uniform_step(1.3e9, 256, 0.2, ranks=64, alpha_s=5e-6, bandwidth_bytes_per_s=50e9, bucket_cap_mb=1)
    assert len(s.bucket_layers) == 256  # 10.2 MB layers: every bucket holds one
    assert s.latency_s == pytest.approx(126 * 5e-6)
    assert s.latency_total_s == pytest.approx(256 * 126 * 5e-6)
    assert s.comm_s[0] == collectives.time_s("allreduce", s.size_bytes[0], 64, alpha_s=5e-6, bandwidth_bytes_per_s=50e9)


def test_bucket_size_has_a_sweet_spot():
    # Tiny buckets pay 2(N-1) alpha each and queue past the backward; one huge bucket waits for it.
    exposed = {cap: D.uniform_step(1.3e9, 256, 0.2, ranks=64, alpha_s=5e-6, bandwidth_bytes_per_s=50e9,
                                   bucket_cap_mb=cap).exposed_comm_s for cap in (1, 25, 1024)}
    assert exposed[25] < exposed[1] / 10 and exposed[25] < exposed[1024] / 5


@settings(max_examples=120, deadline=None)
@given(st.integers(1, 2**20), st.integers(1, 600), st.floats(1e-3, 10), st.sampled_from([1, 2, 5, 10, 25, 100, 1024]),
       st.floats(1e9, 1e12), st.floats(0, 1e-4), st.sampled_from([2, 8, 64]))
def test_uniform_step_equals_the_simulation(layer_params, layers, backward_s, cap, bw, alpha, ranks):
    # Whole bytes per layer (as PyTorch's tensors have): the greedy sums are then exact.
    params = layer_params * layers
    kwargs = dict(ranks=ranks, alpha_s=alpha, bandwidth_bytes_per_s=bw, bucket_cap_mb=cap)
    fast = D.uniform_step(params, layers, backward_s, **kwargs)
    slow = D.backward_timeline(D.uniform_layers(params, layers, backward_s), **kwargs)
    assert fast.bucket_layers == tuple(len(b.layers) for b in slow.buckets)
    assert fast.size_bytes == tuple(b.size_bytes for b in slow.buckets)
    for column, field in (("ready_s", "ready_s"), ("start_s", "start_s"), ("finish_s", "finish_s"), ("comm_s", "comm_s")):
        assert getattr(fast, column) == pytest.approx(tuple(getattr(b, field) for b in slow.buckets), rel=1e-9)
    assert fast.backward_end_s == pytest.approx(slow.backward_end_s, rel=1e-9)
    assert fast.exposed_comm_s == pytest.approx(slow.exposed_comm_s, rel=1e-6, abs=1e-12 * slow.comm_end_s)
    assert fast.total_comm_s == pytest.approx(slow.total_comm_s, rel=1e-9)
    hidden = sum(max(0.0, min(b.finish_s, slow.backward_end_s) - b.start_s) for b in slow.buckets)
    assert fast.overlap_fraction * fast.total_comm_s == pytest.approx(hidden, rel=1e-6, abs=1e-12 * slow.comm_end_s)
