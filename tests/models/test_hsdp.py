import math

import pytest
from hypothesis import assume, given, settings, strategies as st

from models import hsdp, memory

SETTINGS = settings(max_examples=120, deadline=None)

NET = dict(gpus_per_node=8, intra_node_bandwidth_bytes_per_s=300e9, inter_node_bandwidth_bytes_per_s=25e9)


def ring_oracle(op, nbytes, ranks, alpha_s, bandwidth):
    """Independent ring alpha-beta (Thakur et al. 2005): AG/RS (N-1)a + (N-1)/N n/B; AR twice that."""
    if ranks == 1:
        return 0.0
    factor = 2 if op == "allreduce" else 1
    return factor * ((ranks - 1) * alpha_s + (ranks - 1) / ranks * nbytes / bandwidth)


def test_node_sized_group_numbers():
    psi, world, g, alpha, alpha_inter = 7e9, 64, 8, 5e-6, 2e-5
    step = hsdp.hsdp_step(psi, world, g, alpha_s=alpha, inter_node_alpha_s=alpha_inter, num_units=4, **NET)
    assert (step.shard_fabric, step.replica_fabric, step.replicas) == ("intra-node", "inter-node", 8)
    assert step.allgather_s == pytest.approx(2 * 4 * ring_oracle("allgather", 2 * psi / 4, 8, alpha, 300e9))
    assert step.reducescatter_s == pytest.approx(4 * ring_oracle("reducescatter", 2 * psi / 4, 8, alpha, 300e9))
    assert step.allreduce_s == pytest.approx(4 * ring_oracle("allreduce", 2 * psi / 8 / 4, 8, alpha_inter, 25e9))
    assert step.total_comm_s == pytest.approx(step.allgather_s + step.reducescatter_s + step.allreduce_s)
    assert step.memory == memory.model_states(psi, 8, 3)
    assert step.memory.total_bytes == 16 * psi / 8


def test_pure_ddp_and_pure_fsdp_ends():
    psi = 1e9
    ddp = hsdp.hsdp_step(psi, 32, 1, **NET)
    assert ddp.allgather_s == ddp.reducescatter_s == 0 and ddp.shard_fabric == "none"
    assert ddp.allreduce_s == pytest.approx(ring_oracle("allreduce", 2 * psi, 32, 0, 25e9))
    full = hsdp.hsdp_step(psi, 32, 32, **NET)
    assert full.allreduce_s == 0 and full.replica_fabric == "none" and full.shard_fabric == "inter-node"
    single_node = hsdp.hsdp_step(psi, 8, 8, **NET)
    assert single_node.shard_fabric == "intra-node"
    assert single_node.allgather_s == pytest.approx(2 * ring_oracle("allgather", 2 * psi, 8, 0, 300e9))


def test_fabric_placement():
    assert hsdp.shard_fabric(64, 4, 8) == "intra-node"
    assert hsdp.shard_fabric(64, 16, 8) == "inter-node"
    assert hsdp.shard_fabric(24, 3, 8) == "inter-node"  # groups of 3 straddle 8-GPU nodes
    assert hsdp.shard_fabric(6, 3, 8) == "intra-node"   # the whole world is one node
    assert hsdp.replica_fabric(8, 2, 8) == "intra-node"
    assert hsdp.replica_fabric(16, 2, 8) == "inter-node"


def test_article_shard_inside_the_node_wins():
    # "Sharding across all 512 GPUs puts the per-layer AllGather on the slow fabric."
    node = hsdp.hsdp_step(7e9, 512, 8, alpha_s=5e-6, num_units=32, **NET)
    world = hsdp.hsdp_step(7e9, 512, 512, alpha_s=5e-6, num_units=32, **NET)
    assert node.total_comm_s < world.total_comm_s / 3
    # "You keep 1/8 of the memory saving instead of 1/512."
    assert node.memory.total_bytes / world.memory.total_bytes == 64


def test_no_reshard_drops_one_gather():
    a = hsdp.hsdp_step(1e9, 64, 8, **NET)
    b = hsdp.hsdp_step(1e9, 64, 8, reshard_after_forward=False, **NET)
    assert b.allgather_s == pytest.approx(a.allgather_s / 2)


def test_shard_group_sizes():
    assert hsdp.shard_group_sizes(12) == (1, 2, 3, 4, 6, 12)
    assert hsdp.shard_group_sizes(64, 8) == (1, 2, 4, 8, 16, 32, 64)
    assert hsdp.shard_group_sizes(48, 8) == (1, 2, 4, 8, 16, 24, 48)
    assert hsdp.shard_group_sizes(1) == (1,)


def test_smallest_fitting_group_cases():
    # 70B, Adam mixed: 1120 GB of states. 80 GB HBM with 20 GB activations -> need 16Psi/g <= 60 GB -> g >= 18.7.
    assert hsdp.smallest_fitting_group(70e9, 512, hbm_bytes=80e9, activation_bytes=20e9) == 32
    assert hsdp.smallest_fitting_group(70e9, 48, hbm_bytes=80e9, activation_bytes=20e9) == 24
    assert hsdp.smallest_fitting_group(70e9, 40, hbm_bytes=80e9, activation_bytes=20e9) == 20
    # 20 straddles 8-GPU nodes; the next node-aligned size is 40.
    assert hsdp.smallest_fitting_group(70e9, 40, hbm_bytes=80e9, activation_bytes=20e9, gpus_per_node=8) == 40
    assert hsdp.smallest_fitting_group(70e9, 8, hbm_bytes=80e9, activation_bytes=20e9) is None
    assert hsdp.smallest_fitting_group(1e9, 64, hbm_bytes=80e9) == 1
    # The gathered unit counts: a 7e9-parameter unit adds 28 GB (2 B params + 2 B grads): 35+28+20 > 80 at g=32.
    assert hsdp.smallest_fitting_group(70e9, 512, hbm_bytes=80e9, activation_bytes=20e9,
                                       largest_unit_params=7e9) == 64


def test_bad_inputs_named():
    with pytest.raises(ValueError, match="shard_group_size=3 does not divide world_size=64"):
        hsdp.hsdp_step(1e9, 64, 3, **NET)
    with pytest.raises(ValueError, match="gpus_per_node=8 does not divide world_size=12"):
        hsdp.hsdp_step(1e9, 12, 4, **NET)
    with pytest.raises(ValueError, match="inter_node_bandwidth_bytes_per_s"):
        hsdp.hsdp_step(1e9, 64, 8, gpus_per_node=8, intra_node_bandwidth_bytes_per_s=1e11,
                       inter_node_bandwidth_bytes_per_s=-1)
    with pytest.raises(ValueError, match="params"):
        hsdp.hsdp_step(math.nan, 64, 8, **NET)
    with pytest.raises(ValueError, match="num_units"):
        hsdp.hsdp_step(1e9, 64, 8, num_units=0, **NET)
    with pytest.raises(ValueError, match="inter_node_alpha_s"):
        hsdp.hsdp_step(1e9, 64, 8, inter_node_alpha_s=-1e-6, **NET)
    with pytest.raises(ValueError, match="hbm_bytes"):
        hsdp.smallest_fitting_group(1e9, 64, hbm_bytes=0)
    with pytest.raises(ValueError, match="world_size"):
        hsdp.smallest_fitting_group(1e9, 0, hbm_bytes=1e9)
    with pytest.raises(ValueError, match="largest_unit_params"):
        hsdp.smallest_fitting_group(1e9, 8, hbm_bytes=1e9, largest_unit_params=2e9)


# ---- properties ----------------------------------------------------------------------------

worlds = st.sampled_from([1, 2, 4, 8, 16, 24, 64, 96, 512, 4096])


@SETTINGS
@given(st.floats(1e6, 1e13), worlds, st.integers(0, 12), st.sampled_from([1, 2, 4, 8]),
       st.sampled_from([0.0, 1e-6, 1e-4]), st.integers(1, 64), st.booleans())
def test_step_invariants(params, world, pick, gpn, alpha, units, reshard):
    assume(world <= gpn or world % gpn == 0)
    sizes = hsdp.shard_group_sizes(world)
    g = sizes[pick % len(sizes)]
    step = hsdp.hsdp_step(params, world, g, gpus_per_node=gpn, intra_node_bandwidth_bytes_per_s=3e11,
                          inter_node_bandwidth_bytes_per_s=2.5e10, alpha_s=alpha, num_units=units,
                          reshard_after_forward=reshard)
    parts = (step.allgather_s, step.reducescatter_s, step.allreduce_s, step.total_comm_s)
    assert all(math.isfinite(x) and x >= 0 for x in parts)
    assert step.total_comm_s == pytest.approx(sum(parts[:3]))
    assert step.replicas * g == world
    assert step.memory == memory.model_states(params, g, 3)
    # An AllReduce is a ReduceScatter + AllGather (same fabric, same bytes): check on the replica group.
    if step.replicas > 1:
        fabric_bw = 3e11 if step.replica_fabric == "intra-node" else 2.5e10
        ar = ring_oracle("allreduce", 2 * params / g / units, step.replicas, alpha, fabric_bw)
        rs = ring_oracle("reducescatter", 2 * params / g / units, step.replicas, alpha, fabric_bw)
        ag = ring_oracle("allgather", 2 * params / g / units, step.replicas, alpha, fabric_bw)
        assert ar == pytest.approx(rs + ag)
        assert step.allreduce_s == pytest.approx(units * ar)


@SETTINGS
@given(st.floats(1e8, 1e13), worlds, st.floats(1e9, 2e11), st.floats(0, 5e10))
def test_smallest_fitting_group_is_smallest(params, world, hbm, activations):
    g = hsdp.smallest_fitting_group(params, world, hbm_bytes=hbm, activation_bytes=activations)
    need = lambda size: memory.model_states(params, size, 3).total_bytes + activations
    smaller = [d for d in hsdp.shard_group_sizes(world) if g is None or d < g]
    assert all(need(d) > hbm for d in smaller)
    if g is None:
        assert need(world) > hbm
    else:
        assert world % g == 0 and need(g) <= hbm


@SETTINGS
@given(st.floats(1e6, 1e13), worlds)
def test_memory_monotone_in_group(params, world):
    totals = [hsdp.hsdp_step(params, world, g, **NET).memory.total_bytes for g in hsdp.shard_group_sizes(world)]
    assert all(a > b for a, b in zip(totals, totals[1:]))
    assert totals[0] == 16 * params


# ---- bytes per fabric (Figure 10) --------------------------------------------------------------

def test_article_hsdp_traffic_7_5b_on_64_nodes():
    # The article: 7.5B on 64 nodes of 8 GPUs. HSDP S=8, R=64: 3 x 7/8 x 15 GB = 39.4 GB over NVLink,
    # 2 x 63/64 x 1.875 GB = 3.7 GB across nodes; flat FSDP over 512: 3 x 511/512 x 15 = 44.9 GB across nodes.
    hybrid = hsdp.hsdp_traffic(7.5e9, 512, 8, gpus_per_node=8)
    assert hybrid.intra_node_bytes == pytest.approx(3 * 7 / 8 * 15e9) and round(hybrid.intra_node_bytes / 1e9, 1) == 39.4
    assert hybrid.inter_node_bytes == pytest.approx(2 * 63 / 64 * 1.875e9) and round(hybrid.inter_node_bytes / 1e9, 1) == 3.7
    flat = hsdp.hsdp_traffic(7.5e9, 512, 512, gpus_per_node=8)
    assert (flat.intra_node_bytes, round(flat.inter_node_bytes / 1e9, 1)) == (0.0, 44.9)
    assert flat.inter_node_bytes / hybrid.inter_node_bytes > 12  # "twelve times less"
    # Memory: 15 GB of model state per GPU instead of 0.23 GB.
    assert memory.hsdp_model_states(7.5e9, 512, 8).total_bytes == 15e9
    assert round(memory.hsdp_model_states(7.5e9, 512, 512).total_bytes / 1e9, 2) == 0.23


def test_traffic_without_reshard_and_at_the_ends():
    kept = hsdp.hsdp_traffic(1e9, 64, 8, gpus_per_node=8, reshard_after_forward=False)
    assert kept.shard_bytes == pytest.approx(2 * 7 / 8 * 2e9)
    ddp = hsdp.hsdp_traffic(1e9, 64, 1, gpus_per_node=8)
    assert (ddp.shard_bytes, ddp.shard_fabric) == (0.0, "none")
    assert ddp.inter_node_bytes == pytest.approx(2 * 63 / 64 * 2e9)  # DDP's AllReduce of every gradient
    one_node = hsdp.hsdp_traffic(1e9, 8, 2, gpus_per_node=8)
    assert one_node.inter_node_bytes == 0 and one_node.intra_node_bytes == one_node.shard_bytes + one_node.replica_bytes


@SETTINGS
@given(st.floats(1e6, 1e13), worlds, st.integers(0, 12), st.sampled_from([1, 2, 4, 8]), st.booleans())
def test_traffic_is_what_the_step_times_move(params, world, pick, gpn, reshard):
    # With alpha = 0 and one unit, each collective's time is its ring bytes over its fabric's bandwidth.
    assume(world <= gpn or world % gpn == 0)
    sizes = hsdp.shard_group_sizes(world)
    g = sizes[pick % len(sizes)]
    bandwidth = {"intra-node": 3e11, "inter-node": 2.5e10, "none": 1.0}
    step = hsdp.hsdp_step(params, world, g, gpus_per_node=gpn, intra_node_bandwidth_bytes_per_s=3e11,
                          inter_node_bandwidth_bytes_per_s=2.5e10, reshard_after_forward=reshard)
    traffic = hsdp.hsdp_traffic(params, world, g, gpus_per_node=gpn, reshard_after_forward=reshard)
    assert (traffic.shard_fabric, traffic.replica_fabric) == (step.shard_fabric, step.replica_fabric)
    assert step.allgather_s + step.reducescatter_s == pytest.approx(traffic.shard_bytes / bandwidth[step.shard_fabric])
    assert step.allreduce_s == pytest.approx(traffic.replica_bytes / bandwidth[step.replica_fabric])
    assert traffic.intra_node_bytes + traffic.inter_node_bytes == pytest.approx(traffic.shard_bytes + traffic.replica_bytes)


def test_traffic_bad_inputs_named():
    with pytest.raises(ValueError, match="shard_group_size=3 does not divide world_size=64"):
        hsdp.hsdp_traffic(1e9, 64, 3, gpus_per_node=8)
    with pytest.raises(ValueError, match="params"):
        hsdp.hsdp_traffic(-1, 64, 8, gpus_per_node=8)
    with pytest.raises(ValueError, match="reshard_after_forward"):
        hsdp.hsdp_traffic(1e9, 64, 8, gpus_per_node=8, reshard_after_forward=None)


def test_shard_group_options_price_every_node_aligned_group():
    """Each node-aligned size with hsdp_step's seconds and hsdp_traffic's bytes across nodes on the
    links named; 7.5B on 64 A100s (NVLink 3, HDR): groups of 2 and of 8 both fit 80 GiB, and the
    whole node sends 3.3 GB across nodes a step against 14.5 GB."""
    from models import hardware

    options = hsdp.shard_group_options(7.5e9, 64, hbm_bytes=hardware.gpu("a100_80gb").hbm_bytes, gpus_per_node=8,
                                       intra_link="nvlink3", inter_link="ib_hdr", num_units=32)
    assert [o.group for o in options] == list(hsdp.shard_group_sizes(64, 8))
    by_group = {o.group: o for o in options}
    assert by_group[2].fits and by_group[8].fits and not by_group[1].fits
    assert round(by_group[2].inter_node_bytes / 1e9, 1) == 14.5 and round(by_group[8].inter_node_bytes / 1e9, 1) == 3.3
    nvlink, hdr = hardware.link("nvlink3"), hardware.link("ib_hdr")
    for o in options:
        step = hsdp.hsdp_step(7.5e9, 64, o.group, gpus_per_node=8, num_units=32, alpha_s=nvlink.alpha_s,
                              inter_node_alpha_s=hdr.alpha_s, intra_node_bandwidth_bytes_per_s=nvlink.bandwidth_bytes_per_s,
                              inter_node_bandwidth_bytes_per_s=hdr.bandwidth_bytes_per_s)
        assert o.comm_s == step.total_comm_s and o.replicas == 64 // o.group
        assert o.per_device_bytes == hsdp.hsdp_model_states(7.5e9, 64, o.group).total_bytes
    assert min((o for o in options if o.fits), key=lambda o: o.comm_s).group == 8
    # a world inside one node: every group's traffic stays on NVLink
    assert all(o.inter_node_bytes == 0 for o in hsdp.shard_group_options(
        7.5e9, 4, hbm_bytes=1e12, gpus_per_node=8, intra_link="nvlink3", inter_link="ib_hdr", num_units=32))
