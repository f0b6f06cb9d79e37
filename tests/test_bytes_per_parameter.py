"""Bytes per parameter differ between figures for good reasons (16 for training state with bf16
gradients, 18 with Megatron-LM's fp32 main gradients, 14 for a checkpoint, which leaves the gradients out): each figure that prices them
says which, in a readout label and its caption or note, so a reader comparing two never meets an
unexplained jump (issue 33)."""
import re

import pytest

from figures import registry
from tests.figure_views import readouts, render

CONTENT = __import__("pathlib").Path(__file__).resolve().parent.parent / "site" / "content"


@pytest.mark.parametrize("number, key, per_param, holds, chapter", [
    (2, "model_state_bytes_per_device", 16, "bf16 weights and gradients plus fp32 master weights", "03-six-axes.md"),
    (19, "model_state_bytes", 16, "bf16 weights and gradients, fp32 master", "20-choosing.md"),
    (22, "checkpoint_bytes", 14, "leaves out the gradients", "22-checkpointing.md"),
    (18, "memory_per_gpu_bytes", 18, "fp32 main gradients", "19-overlap-by-strategy.md"),  # Megatron-LM's, the planner's
])
def test_each_figure_says_how_many_bytes_a_parameter_and_what_they_hold(number, key, per_param, holds, chapter):
    figure = registry()[number]
    state, view = render(number)
    readout = readouts(view)[key]
    assert f"{per_param} B per parameter" in readout.label
    if holds:
        told = figure.caption + " " + figure.note  # the caption is one or two sentences, the rest in its note
        assert f"{per_param} bytes per parameter" in told and holds in told
    else:
        assert f"{per_param} bytes per parameter (bf16 weights and gradients, fp32 master weights" in view.note
    prose = (CONTENT / chapter).read_text()
    assert re.search(rf"\b{per_param} bytes (a|per|for every) parameter", prose), chapter


def test_the_numbers_are_the_counts_they_say():
    _, data = render(2)  # the data cut keeps the whole ledger: 16 x 7B
    assert readouts(data)["model_state_bytes_per_device"].value == 16 * 7e9
    assert readouts(render(19)[1])["model_state_bytes"].value == 16 * 7.5e9
    assert readouts(render(22)[1])["checkpoint_bytes"].value == 14 * 7.5e9
