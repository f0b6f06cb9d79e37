"""Issue 43, point 2, for Figures 12, 17, 13, 10 and 02: each figure says only what is true,
says what changed when one control moves another, and keeps what it draws visible."""
import itertools

import pytest

from figures import fig12_tp_tax as fig12, registry
from models import hardware, tensor
from tests.figure_views import inside, overlap, readouts, render, text_boxes, texts, values, view


def _no_text_overlaps(v):
    boxes = text_boxes(v)
    return [(a, b) for (a, box_a), (b, box_b) in itertools.combinations(boxes, 2) if overlap(box_a, box_b)]


def _clean(v):
    """Every label inside the drawing and none on another."""
    assert [t for t, box in text_boxes(v) if not inside(box, v)] == []
    assert _no_text_overlaps(v) == []


# ---- Figure 12: an NVL72 rack is Blackwell; an H100's NVLink domain is a node of 8 ----------------

def test_figure_12s_nvl72_try_is_a_blackwell_rack_on_nvlink_5():
    [(label, changes)] = [(label, changes) for label, changes in fig12.TRIES if "NVL72" in label]
    state, v = render(12, **changes)
    spec = hardware.gpu(state["gpu"])
    assert spec.generation == "blackwell" and spec.scale_up_link == "nvlink5" and state["gpus"] == 72
    assert "every T up to 64 fits in one NVLink 5 domain" in texts(v)
    assert values(v)["nvlink_domain"] == 72 and values(v)["crosses_node"] == 0


@pytest.mark.parametrize("narrow", [False, True])
@pytest.mark.parametrize("gpu", ["h100_sxm", "h200", "mi300x"])
def test_figure_12_never_puts_72_of_a_node_of_8_gpus_on_one_fabric(gpu, narrow):
    """An H100's NVLink 4 joins the 8 GPUs of its node, not 72: the edge stays at 8 and the
    drawing says why, instead of "every T up to 64 fits in one NVLink 4 domain"."""
    figure = registry()[12]
    state = figure.validate_state({**figure.default_state(), "gpus": 72, "gpu": gpu, "T": 16})
    v = figure.render(state, narrow=narrow)
    shown = " ".join(texts(v))
    assert "fits in one" not in shown
    assert "joins at most 8 GPUs" in shown and "Blackwell NVL72" in shown
    assert values(v)["nvlink_domain"] == 8 and values(v)["crosses_node"] == 1
    model = tensor.tp_layer_time(state["micro"], state["seq"], state["hidden"], 16, gpu=gpu, gpus_per_node=8,
                                 inter_link=state["inter"])
    assert values(v)["layer_time_s"] == model.layer_s and model.crosses_node
    _clean(v)
