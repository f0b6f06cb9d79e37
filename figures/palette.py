"""The one palette of every figure: the same colour always means the same thing.

Each colour has a light-theme and a dark-theme value. The builder writes them into the
page's stylesheet as CSS custom properties (``--c-<key>``) plus, for SVG diagrams, the
classes ``fill-<key>`` and ``stroke-<key>`` (``bg-<key>`` for HTML); so an SVG names a colour by class and
follows the reader's theme. Plotly charts take a concrete colour (``plot(key)``, the
light value); ``playbook.js`` swaps each for its dark value when the page is dark,
using the same table (``dark_map``).

Colour is never the only cue: every figure also labels or patterns what a colour means.
The axis colours are Okabe and Ito's colour-blind-safe set (2008); passes, memory parts
and ranks keep Tableau 10 hues, which stay apart under the common colour-vision
deficiencies when paired with labels.
"""
from dataclasses import dataclass


@dataclass(frozen=True)
class Colour:
    key: str
    meaning: str
    light: str
    dark: str


_COLOURS = (
    # what a device is doing
    Colour("forward", "forward pass", "#4c78a8", "#6f9fd6"),
    Colour("backward", "backward pass (input gradients)", "#e45756", "#ef7c78"),
    Colour("weight", "weight-gradient pass", "#72b7b2", "#8fd0ca"),
    Colour("comm", "communication on the wire", "#8e6bb8", "#b79be0"),
    Colour("exposed", "communication no compute hides", "#c0392b", "#f08a74"),
    Colour("idle", "idle time, bubble, waiting", "#b8b3a7", "#5b5f69"),
    Colour("optimizer_step", "optimizer step", "#9d755d", "#c49a80"),
    # what memory holds
    Colour("params", "parameters", "#4c78a8", "#6f9fd6"),
    Colour("grads", "gradients", "#f58518", "#f7a451"),
    Colour("optimizer", "optimizer state", "#54a24b", "#7cc572"),
    Colour("activations", "activations", "#b279a2", "#d49fc6"),
    Colour("buffers", "buffers, temporaries, fragmentation", "#9d755d", "#c49a80"),
    Colour("hbm", "the GPU's memory capacity", "#1d1f23", "#e6e4df"),
    # one colour per parallelism axis (Okabe-Ito)
    Colour("dp", "data parallelism", "#0072b2", "#56a8e0"),
    Colour("zero", "ZeRO / FSDP sharding", "#56b4e9", "#86cdf2"),
    Colour("hsdp", "hybrid sharding (HSDP)", "#2a9d8f", "#5cc2b4"),
    Colour("tp", "tensor parallelism", "#d55e00", "#ff8a3d"),
    Colour("sp", "sequence parallelism", "#e69f00", "#f5bd45"),
    Colour("pp", "pipeline parallelism", "#009e73", "#3fcf9f"),
    Colour("cp", "context parallelism", "#cc79a7", "#e3a3c8"),
    Colour("ep", "expert parallelism", "#8c6d1f", "#c9a54a"),
    # fabrics
    Colour("intra", "inside a node (NVLink)", "#009e73", "#3fcf9f"),
    Colour("inter", "across nodes (the network)", "#d55e00", "#ff8a3d"),
    # verdicts
    Colour("ok", "fits / correct", "#2d7a4b", "#7bc99a"),
    Colour("warn", "does not fit / broken", "#a23b2a", "#f08a74"),
    # ranks, for figures that colour data by the rank it came from (8 distinct, then repeat)
    Colour("rank0", "rank 0", "#4c78a8", "#6f9fd6"),
    Colour("rank1", "rank 1", "#f58518", "#f7a451"),
    Colour("rank2", "rank 2", "#54a24b", "#7cc572"),
    Colour("rank3", "rank 3", "#e45756", "#ef7c78"),
    Colour("rank4", "rank 4", "#72b7b2", "#8fd0ca"),
    Colour("rank5", "rank 5", "#eeca3b", "#f2d56b"),
    Colour("rank6", "rank 6", "#b279a2", "#d49fc6"),
    Colour("rank7", "rank 7", "#9d755d", "#c49a80"),
    # data every rank holds whole (a replicated tensor), and the one-device reference result
    Colour("replicated", "held whole by every rank / one device", "#6e7380", "#a4a9b3"),
)
COLOURS = {c.key: c for c in _COLOURS}
RANK_COLOURS = 8


def plot(key):
    """The colour to put in a Plotly spec (the light value; dark pages swap it)."""
    return COLOURS[key].light


def rank_key(rank):
    """The palette key of a rank's colour: ranks 0-7, then the cycle repeats."""
    return f"rank{rank % RANK_COLOURS}"


def css():
    """The stylesheet part the builder writes: variables for both themes, then one
    fill and one stroke class per colour for SVG diagrams, and a background class for
    HTML swatches (a readout's legend swatch)."""
    light = "".join(f"--c-{c.key}:{c.light};" for c in _COLOURS)
    dark = "".join(f"--c-{c.key}:{c.dark};" for c in _COLOURS)
    classes = "".join(
        f".fill-{c.key}{{fill:var(--c-{c.key})}}.stroke-{c.key}{{stroke:var(--c-{c.key})}}"
        f".bg-{c.key}{{background:var(--c-{c.key})}}" for c in _COLOURS
    )
    return f":root{{{light}}}\n@media (prefers-color-scheme: dark){{:root{{{dark}}}}}\n{classes}\n"


def dark_map():
    """Light value -> dark value, for playbook.js to re-colour Plotly charts on dark pages."""
    return {c.light: c.dark for c in _COLOURS}
