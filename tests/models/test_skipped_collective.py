"""One rank skips a collective (Figure 01): the rest of its group waits inside it until the watchdog."""
import pytest

from models import reliability as R
from models.mesh import Mesh


def _simulated(group, skipper, world):
    """The event simulator's answer: every member issues the call but the skipper, whose branch leaves it out."""
    call = R.Call("allreduce", tuple(group), (25_000_000,), compute_s=0.0, label="gradient AllReduce")
    programs = [[call] if r in group and r != skipper else [] for r in range(world)]
    return R.simulate_collectives(programs)


@pytest.mark.parametrize("nodes, gpus, tp", [(1, 1, 1), (1, 8, 2), (2, 4, 4), (2, 8, 4), (4, 2, 1), (3, 4, 2)])
def test_skipped_collective_agrees_with_the_event_simulator_on_every_dp_group(nodes, gpus, tp):
    mesh = Mesh(dp=nodes * gpus // tp, tp=tp, gpus_per_node=gpus)
    for rank in range(mesh.world_size):
        group = mesh.group("dp", rank)
        hang = R.skipped_collective(group, rank)
        report = _simulated(group, rank, mesh.world_size)
        assert hang.blocked == tuple(p.rank for p in report.parked)
        assert all(p.waiting_on == (rank,) for p in report.parked)
        assert hang.group == tuple(group) and hang.skipper == rank
        if hang.blocked:
            assert report.status == "hang" and report.watchdog_at_s == hang.watchdog_at_s == R.DEFAULT_NCCL_TIMEOUT_S
        else:  # a group of one: nobody to wait
            assert report.status == "completed" and len(group) == 1


def test_skipped_collective_matches_the_articles_preset():
    """The article's divergent rank 3 of four: ranks 0-2 park in the valid-token AllReduce."""
    report = R.simulate_preset("divergent_control_flow")
    parked_there = tuple(p.rank for p in report.parked if p.call.label == "valid-token count AllReduce")
    assert R.skipped_collective((0, 1, 2, 3), 3).blocked == parked_there == (0, 1, 2)


def test_skipped_collective_of_a_whole_world_is_cheap_and_custom_timeouts_carry():
    hang = R.skipped_collective(range(256), 200, timeout_s=1800)
    assert len(hang.blocked) == 255 and 200 not in hang.blocked and hang.watchdog_at_s == 1800.0


@pytest.mark.parametrize("args, kwargs, name", [
    (((), 0), {}, "group"), (((0, 0, 1), 0), {}, "group"), (((0, -1), 0), {}, "group"), ((None, 0), {}, "group"),
    (((0, 1), 2), {}, "skipper"), (((0, 1), True), {}, "skipper"), (((0, 1), 0), {"timeout_s": 0}, "timeout_s"),
])
def test_skipped_collective_rejects_nonsense_naming_the_argument(args, kwargs, name):
    with pytest.raises(ValueError) as err:
        R.skipped_collective(*args, **kwargs)
    assert str(err.value).startswith(name)
