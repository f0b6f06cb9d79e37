"""Figure 05's model: equal layers and the share of bucketed communication that hides."""
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


def test_overlap_fraction_by_hand():
    # test_ddp.py's hand timeline: 6 ms of AllReduce, 4 ms of it after the backward ends.
    layers = [(0.5 * MiB, 1e-3), (2 * MiB, 1e-3), (3 * MiB, 1e-3), (0.5 * MiB, 1e-3)]
    t = D.backward_timeline(layers, ranks=2, alpha_s=0.0, bandwidth_bytes_per_s=MiB * 1000.0, bucket_cap_mb=4)
    assert D.overlap_fraction(t) == pytest.approx(1 - 4 / 6)


def test_overlap_fraction_rejects_a_hung_step():
    t = D.backward_timeline([(MiB, 1e-3), (MiB, 1e-3)], ranks=2, alpha_s=0.0, bandwidth_bytes_per_s=1e9,
                            unused_layers=[0])
    with pytest.raises(ValueError, match="^timeline"):
        D.overlap_fraction(t)


def test_first_bucket_is_one_mib_then_the_cap():
    # 64 layers of 0.5 MiB: reverse order, the first bucket closes at 1 MiB (two layers), then 25 MiB ones.
    layers = D.uniform_layers(64 * MiB / 4, 64, 0.064)  # 16 Mi params x 2 bytes = 32 MiB
    t = D.backward_timeline(layers, ranks=8, alpha_s=5e-6, bandwidth_bytes_per_s=50e9)
    assert [b.layers for b in t.buckets[:1]] == [(63, 62)]
    assert [b.size_bytes / MiB for b in t.buckets] == [1, 25, 6]
    assert [b.comm_s for b in t.buckets] == [collectives.time_s("allreduce", b.size_bytes, 8, alpha_s=5e-6,
                                                                bandwidth_bytes_per_s=50e9) for b in t.buckets]


def test_bucket_size_has_a_sweet_spot():
    # Tiny buckets pay 2(N-1) alpha each and queue past the backward; one huge bucket waits for it.
    layers = D.uniform_layers(1.3e9, 256, 0.2)
    exposed = {cap: D.backward_timeline(layers, ranks=64, alpha_s=5e-6, bandwidth_bytes_per_s=50e9,
                                        bucket_cap_mb=cap).exposed_comm_s for cap in (1, 25, 1024)}
    assert exposed[25] < exposed[1] / 10 and exposed[25] < exposed[1024] / 5


@settings(max_examples=60, deadline=None)
@given(st.floats(1e6, 1e12), st.integers(1, 512), st.floats(1e-3, 10), st.sampled_from([1, 2, 5, 25, 100, 1024]),
       st.floats(1e9, 1e12), st.floats(0, 1e-4))
def test_overlap_fraction_is_the_share_before_the_backward_ends(params, layers, backward_s, cap, bw, alpha):
    t = D.backward_timeline(D.uniform_layers(params, layers, backward_s), ranks=64, alpha_s=alpha,
                            bandwidth_bytes_per_s=bw, bucket_cap_mb=cap)
    f = D.overlap_fraction(t)
    assert 0 <= f <= 1
    hidden = sum(max(0.0, min(b.finish_s, t.backward_end_s) - b.start_s) for b in t.buckets)
    assert f == pytest.approx(hidden / t.total_comm_s, rel=1e-9, abs=1e-12)
