"""The toy model cut seven ways (Figure 20): holdings and bytes on the wire, frame by frame."""
import pytest

from models import collectives, memory, tensor, tour as T

TOY = T.TOY


def _step_bytes(strategy, devices):
    return sum(T.panel(strategy, devices, f.index).moving_bytes for f in T.FRAMES)


def test_toy_shape_and_frames():
    assert TOY.layer_params == 786_432 and TOY.params == 3_145_728 and TOY.state_bytes == 16 * TOY.params
    assert TOY.weight_bytes == 1_572_864 and TOY.activation_bytes == 1_048_576
    assert [f.phase for f in T.FRAMES] == ["forward"] * 4 + ["backward"] * 4 + ["optimizer"]
    assert [f.layer for f in T.FRAMES] == [0, 1, 2, 3, 3, 2, 1, 0, None]


@pytest.mark.parametrize("devices", T.DEVICES)
def test_held_fractions_are_the_ledgers(devices):
    n = devices
    assert T.held_fraction("dp", n) == 1 == T.held_fraction("cp", n)
    assert T.held_fraction("zero", n) == pytest.approx(memory.ledger_fraction(n, 3))  # ZeRO Sec. 5: 1/N
    assert T.held_fraction("hsdp", n) == pytest.approx(memory.ledger_fraction(2, 3))
    assert T.held_fraction("tp", n) == pytest.approx(1 / n) == T.held_fraction("pp", n)
    assert T.held_fraction("ep", n) == pytest.approx(1 / 3 + 2 / 3 / n)  # attention replicated, experts spread


@pytest.mark.parametrize("devices", T.DEVICES)
def test_data_parallel_volumes_are_zeros(devices):
    # ZeRO Sec. 7: per rank and step, DDP moves 2 Psi, ZeRO-3 3 Psi (elements), times (N-1)/N on a ring.
    n, psi_bytes = devices, 2 * TOY.params
    assert _step_bytes("dp", n) / n == pytest.approx(memory.comm_volume_psi(0) * psi_bytes * (n - 1) / n)
    assert _step_bytes("zero", n) / n == pytest.approx(memory.comm_volume_psi(3) * psi_bytes * (n - 1) / n)


@pytest.mark.parametrize("devices", T.DEVICES)
def test_tensor_parallel_moves_four_allreduces_per_layer(devices):
    plan = tensor.tp_layer_communication(1, TOY.tokens, TOY.hidden, devices)
    per_layer = devices * plan.wire_bytes_per_rank
    assert T.panel("tp", devices, 0).moving_bytes + T.panel("tp", devices, 7).moving_bytes == pytest.approx(per_layer)
    assert _step_bytes("tp", devices) == pytest.approx(TOY.layers * per_layer)


def test_pipeline_sends_one_activation_per_boundary_and_idles_the_rest():
    for n in T.DEVICES:
        sends = [t for f in T.FRAMES for t in T.panel("pp", n, f.index).transfers]
        assert len(sends) == 2 * (n - 1) and all(t.op == "sendrecv" for t in sends)
        assert _step_bytes("pp", n) == 2 * (n - 1) * TOY.activation_bytes
        assert sum(T.panel("pp", n, 0).computing) == 1  # one stage works, the others wait
    first = T.panel("pp", 4, 0).transfers[0]
    assert first.groups == ((0, 1),)


def test_hsdp_on_two_devices_is_zero3():
    for f in T.FRAMES:
        assert T.panel("hsdp", 2, f.index).moving_bytes == T.panel("zero", 2, f.index).moving_bytes
    backward = T.panel("hsdp", 4, 4)
    assert [t.op for t in backward.transfers] == ["allgather", "reducescatter", "allreduce"]
    assert backward.transfers[2].groups == ((0, 2), (1, 3))
    grad = TOY.weight_bytes
    assert backward.transfers[2].wire_bytes == pytest.approx(2 * 2 * collectives.volume_bytes_per_rank("allreduce", grad / 2, 2))


def test_expert_and_context_traffic():
    ep = T.panel("ep", 4, 0)
    assert [t.op for t in ep.transfers] == ["alltoall", "alltoall"]
    tokens_per_rank_bytes = TOY.tokens // 4 * TOY.hidden * 2
    assert ep.moving_bytes == pytest.approx(2 * 4 * 3 / 4 * tokens_per_rank_bytes)
    cp_forward, cp_backward = T.panel("cp", 4, 0), T.panel("cp", 4, 4)
    ring = cp_forward.transfers[0].wire_bytes
    assert ring == 4 * 3 * 2 * (TOY.tokens // 4) * TOY.hidden * 2  # N ranks x (N-1) hops x K and V blocks
    assert cp_backward.transfers[0].wire_bytes == 2 * ring


def test_optimizer_frame_is_local():
    for strategy in T.STRATEGIES:
        last = T.panel(strategy, 4, len(T.FRAMES) - 1)
        assert last.moving_bytes == 0 and all(last.computing)


def test_bad_arguments_name_themselves():
    for args, name in ((("tp", 3, 0), "devices"), (("zero3", 2, 0), "strategy"), (("dp", 2, 9), "frame_index")):
        with pytest.raises(ValueError, match=name):
            T.panel(*args)
