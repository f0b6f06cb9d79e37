"""Tests for models.mesh: rank <-> coordinate folding, process groups, node crossing."""
import itertools

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from models.mesh import AXES, Mesh

SETTINGS = settings(max_examples=100, deadline=None)


# ---- the article's example and formula ---------------------------------------------------------

def test_article_example_512_ranks_tp_fastest():
    mesh = Mesh(dp=8, tp=8, pp=8)
    assert mesh.world_size == 512
    # "tp = r % TP, cp = (r / TP) % CP, dp = (r / (TP*CP)) % DP, pp = r / (TP*CP*DP)"
    for r in (0, 7, 8, 63, 64, 200, 511):
        assert mesh.coords(r) == {"tp": r % 8, "cp": 0, "dp": (r // 8) % 8, "pp": r // 64}
    assert mesh.group("tp", 200) == list(range(200, 208))
    assert mesh.group("dp", 200) == [192 + 8 * i for i in range(8)]
    assert mesh.group("pp", 200) == [8 + 64 * i for i in range(8)]


def test_article_formula_with_context_parallel():
    tp, cp, dp, pp = 4, 2, 3, 2
    mesh = Mesh(dp=dp, tp=tp, pp=pp, cp=cp)
    for r in range(mesh.world_size):
        assert mesh.coords(r) == {
            "tp": r % tp, "cp": (r // tp) % cp, "dp": (r // (tp * cp)) % dp, "pp": r // (tp * cp * dp)
        }


def test_tp_inside_node_unless_order_puts_dp_fastest():
    good = Mesh(dp=8, tp=8, pp=8)
    assert not good.crosses_node("tp")
    assert good.crosses_node("dp") and good.crosses_node("pp")
    assert good.nodes_spanned("tp") == 1 and good.nodes_spanned("dp") == 8
    bad = Mesh(dp=8, tp=8, pp=8, order=("dp", "tp", "pp"))  # the article's flagged configuration
    assert bad.crosses_node("tp")
    assert not bad.crosses_node("dp")
    assert bad.group("tp", 0) == [0, 8, 16, 24, 32, 40, 48, 56]


def test_group_straddling_node_boundary():
    # tp=4 on 6-GPU nodes: group [4,5,6,7] spans nodes 0 and 1 although it is only 4 wide.
    mesh = Mesh(dp=3, tp=4, gpus_per_node=6)
    assert mesh.group("tp", 5) == [4, 5, 6, 7]
    assert mesh.crosses_node("tp")
    assert mesh.node(5) == 0 and mesh.node(6) == 1
    assert not Mesh(dp=3, tp=4, gpus_per_node=4).crosses_node("tp")


def test_order_accepts_megatron_string_and_omits_degree_one_axes():
    assert Mesh(dp=2, tp=2, order="tp-dp").order == ("tp", "dp")
    assert Mesh(dp=2, tp=2, order="dp-tp").group("dp", 0) == [0, 1]
    assert Mesh(dp=2, tp=2, order=["tp", "dp"]) == Mesh(dp=2, tp=2, order=("tp", "dp"))
    hash(Mesh(dp=2))  # frozen and hashable, usable as a cache key


# ---- expert parallelism (Megatron-Core layout) ---------------------------------------------------

def test_expert_groups_match_megatron_core_hand_example():
    # Megatron-Core expert generator: tp=2, ep=2, edp=world/(tp*ep*pp)=2, order tp-ep-dp-pp.
    mesh = Mesh(dp=4, tp=2, ep=2)
    assert mesh.world_size == 8  # ep does not multiply the world size
    assert mesh.groups("ep") == [[0, 2], [1, 3], [4, 6], [5, 7]]
    assert mesh.groups("edp") == [[0, 4], [1, 5], [2, 6], [3, 7]]
    assert mesh.expert_coords(6) == {"ep": 1, "edp": 1}
    assert mesh.degree("edp") == 2


def test_expert_groups_fold_cp_and_dp_together():
    mesh = Mesh(dp=2, tp=2, cp=2, ep=4)  # ep spans the whole 2x2 cp x dp block
    assert mesh.group("ep", 0) == [0, 2, 4, 6]
    assert mesh.group("ep", 1) == [1, 3, 5, 7]
    assert mesh.groups("edp") == [[r] for r in range(8)]


# ---- validation -----------------------------------------------------------------------------------

@pytest.mark.parametrize(
    "kwargs, fragment",
    [
        ({"tp": 0}, "tp"),
        ({"dp": -2}, "dp"),
        ({"pp": 1.5}, "pp"),
        ({"cp": True}, "cp"),
        ({"gpus_per_node": 0}, "gpus_per_node"),
        ({"dp": 2, "order": ("tp",)}, "dp=2"),
        ({"tp": 2, "order": ("tp", "tp")}, "more than once"),
        ({"tp": 2, "order": ("tp", "xp")}, "unknown axis"),
        ({"dp": 2, "ep": 2, "order": ("dp", "ep")}, "ep"),
        ({"dp": 4, "ep": 3}, r"ep=3 does not divide dp\*cp=4"),
        ({"order": 5}, "order"),
    ],
)
def test_invalid_mesh_names_the_argument(kwargs, fragment):
    with pytest.raises(ValueError, match=fragment):
        Mesh(**kwargs)


def test_invalid_queries_name_the_argument():
    mesh = Mesh(dp=2, tp=2)
    with pytest.raises(ValueError, match="rank must be < world_size=4"):
        mesh.coords(4)
    with pytest.raises(ValueError, match="rank must be >= 0"):
        mesh.group("tp", -1)
    with pytest.raises(ValueError, match="axis must be one of"):
        mesh.groups("sp")
    with pytest.raises(ValueError, match=r"tp must be in \[0, 2\)"):
        mesh.rank(tp=2)
    with pytest.raises(ValueError, match="expert_coords"):
        mesh.rank(ep=0)


# ---- properties (numpy as the independent oracle) -------------------------------------------------

@st.composite
def meshes(draw):
    degrees = {axis: draw(st.integers(1, 4)) for axis in AXES}
    order = draw(st.permutations(AXES))
    block = degrees["dp"] * degrees["cp"]
    ep = draw(st.sampled_from([d for d in range(1, block + 1) if block % d == 0]))
    return Mesh(ep=ep, order=tuple(order), gpus_per_node=draw(st.integers(1, 16)), **degrees)


def _oracle_array(mesh):
    """ranks as an ndarray indexed [slowest, ..., fastest] (C order = last axis fastest)."""
    order = mesh.full_order
    shape = [getattr(mesh, axis) for axis in reversed(order)]
    return np.arange(mesh.world_size).reshape(shape), list(reversed(order))


@SETTINGS
@given(meshes())
def test_coords_rank_bijection_and_numpy_oracle(mesh):
    array, axes = _oracle_array(mesh)
    for r in range(mesh.world_size):
        c = mesh.coords(r)
        assert mesh.rank(**c) == r
        assert array[tuple(c[a] for a in axes)] == r


@SETTINGS
@given(meshes())
def test_groups_partition_world_with_degree_sizes(mesh):
    array, axes = _oracle_array(mesh)
    for axis in AXES + ("ep", "edp"):
        groups = mesh.groups(axis)
        flat = sorted(itertools.chain.from_iterable(groups))
        assert flat == list(range(mesh.world_size))
        assert all(len(g) == mesh.degree(axis) for g in groups)
        assert all(g == sorted(g) for g in groups)
        for g in groups:
            for member in g:
                assert mesh.group(axis, member) == g
    # base axes against numpy: move the axis last, every row is one group
    for axis in AXES:
        rows = np.moveaxis(array, axes.index(axis), -1).reshape(-1, getattr(mesh, axis))
        assert sorted(sorted(row.tolist()) for row in rows) == sorted(mesh.groups(axis))


@SETTINGS
@given(meshes())
def test_group_members_share_all_other_coordinates(mesh):
    for r in range(0, mesh.world_size, max(1, mesh.world_size // 7)):
        c = mesh.coords(r)
        for axis in AXES:
            for member in mesh.group(axis, r):
                other = mesh.coords(member)
                assert all(other[a] == c[a] for a in AXES if a != axis)
        e = mesh.expert_coords(r)
        for member in mesh.group("ep", r):
            assert {a: mesh.coords(member)[a] for a in ("tp", "pp")} == {"tp": c["tp"], "pp": c["pp"]}
            assert mesh.expert_coords(member)["edp"] == e["edp"]


@SETTINGS
@given(meshes())
def test_crosses_node_matches_brute_force(mesh):
    g = mesh.gpus_per_node
    for axis in AXES + ("ep",):
        brute = any(len({m // g for m in grp}) > 1 for grp in mesh.groups(axis))
        assert mesh.crosses_node(axis) == brute
    assert all(mesh.node(r) == r // g for r in range(mesh.world_size))


# ---- the stride-only queries Figure 17 uses ------------------------------------------------------------

from models.mesh import axis_crosses_node, group_nodes, group_ranks  # noqa: E402


@SETTINGS
@given(meshes())
def test_stride_queries_equal_the_enumerating_ones(mesh):
    g = mesh.gpus_per_node
    for axis in AXES + ("ep", "edp"):
        assert axis_crosses_node(mesh, axis) == mesh.crosses_node(axis)
        for r in range(mesh.world_size):
            assert group_ranks(mesh, axis, r) == mesh.group(axis, r)
            assert group_nodes(mesh, axis, r) == sorted({m // g for m in mesh.group(axis, r)})


@pytest.mark.parametrize("order", ["tp-cp-dp-pp", "pp-dp-cp-tp", "dp-tp-cp-pp", "cp-dp-tp-pp"])
@pytest.mark.parametrize("gpus_per_node", [1, 8, 72])
def test_stride_queries_on_large_power_of_two_meshes(order, gpus_per_node):
    # the figure's range: powers of two, EP inside DP x CP, up to 4,096 ranks, odd node sizes (NVL72)
    mesh = Mesh(tp=4, cp=2, dp=16, pp=8, ep=8, order=order, gpus_per_node=gpus_per_node)
    for axis in AXES + ("ep", "edp"):
        assert axis_crosses_node(mesh, axis) == mesh.crosses_node(axis)
        for r in (0, 77, 511, 777, 1023):
            assert group_ranks(mesh, axis, r) == mesh.group(axis, r)


def test_article_rank_77_of_the_512_gpu_mesh():
    # "Try rank 77 in the 512-GPU example: tp = 5, cp = 0, dp = 1, pp = 1"; ranks 72-79 are node 9 and a TP group
    mesh = Mesh(tp=8, dp=8, pp=8)
    assert mesh.coords(77) == {"tp": 5, "cp": 0, "dp": 1, "pp": 1}
    assert group_ranks(mesh, "tp", 77) == list(range(72, 80)) and group_nodes(mesh, "tp", 77) == [9]
    assert not axis_crosses_node(mesh, "tp") and axis_crosses_node(mesh, "dp") and axis_crosses_node(mesh, "pp")
    flipped = Mesh(tp=8, dp=8, pp=8, order="dp-tp-cp-pp")
    assert axis_crosses_node(flipped, "tp") and not axis_crosses_node(flipped, "dp")


@SETTINGS
@given(st.lists(st.integers(0, 500), max_size=40, unique=True), st.integers(1, 80))
def test_nodes_of_matches_the_set_of_node_indices(ranks, g):
    from models.mesh import nodes_of
    ranks = sorted(ranks)
    assert nodes_of(ranks, g) == sorted({r // g for r in ranks})
    assert nodes_of(list(range(3, 300, 5)), g) == sorted({r // g for r in range(3, 300, 5)})
