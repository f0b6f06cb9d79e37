"""The one palette of every figure: a key is a meaning, and the same key always looks the same.

Every colour a figure draws is one of these keys (docs/PALETTE.md is the legend page: each
key, its meaning, its light and dark values, the figures that use it, and why it looks the
way it does). The families:

- compute is a slate ramp (forward lightest, backward darker, the optimizer step darkest):
  neutral, so that no strategy's hue can be mistaken for compute;
- communication is purple (``comm``); where a figure tells the fabrics apart, lavender
  inside a node and plum across nodes; where it tells the strategies apart, each
  collective takes its strategy's hue;
- waiting (idle time, a pipeline bubble, a collective's latency) is a grey with a hatch;
- red is bad, and only bad: ``exposed`` communication the step waits for, and ``warn`` for
  what is dropped, over budget, does not fit, fails or hangs;
- each parallelism axis has one hue, from Okabe and Ito's colour-blind-safe set (2008);
  HSDP is shard groups in the ZeRO hue and replica groups in the DP hue;
- memory parts are muted tones, ranks a categorical set of their own.

Each colour has a light-theme and a dark-theme value. The builder writes them into the
page's stylesheet as CSS custom properties (``--c-<key>``) with, for SVG, the classes
``fill-<key>`` and ``stroke-<key>``, ``bg-<key>`` for HTML swatches, and ``on-<key>`` for
text or numerals drawn on that colour (``--on``: dark ink or white, whichever reads better);
so an SVG names a colour by class and follows the reader's theme. Waiting is hatched: the
page holds the pattern once (``svg_defs``). Plotly charts take a concrete colour
(``plot(key)``, the light value); ``playbook.js`` swaps each for its dark value on a dark
page, using the same table (``dark_map``).

Colour is never the only cue: every figure also labels, numbers or patterns what a colour
means. ``tests/test_palette.py`` holds the palette to its rules (distances, red, contrast)
and every figure to the palette.
"""
from dataclasses import dataclass


@dataclass(frozen=True)
class Colour:
    key: str
    family: str
    meaning: str
    light: str
    dark: str
    # What text may call it ("the purple bars"): a caption's colour words must name a key it draws.
    names: tuple = ()
    # Words a readout or legend labelled with this colour uses (one is enough): its meaning, checked.
    words: tuple = ()


FAMILIES = {
    "compute": "a device computing",
    "waiting": "a device or a link waiting",
    "communication": "data on the wire",
    "bad": "what went wrong: the only reds",
    "axis": "a parallelism axis",
    "memory": "what memory holds",
    "data": "who holds a piece of data",
}

_COMM_WORDS = ("allreduce", "allgather", "reducescatter", "all-to-all", "alltoall", "collective", "communication",
               "comm", "sent", "send", "wire", "transfer", "bandwidth", "bytes")
_RANK_WORDS = ("rank", "shard", "file")

_COLOURS = (
    # compute: one slate ramp
    Colour("forward", "compute", "the forward pass (also when recomputed for the backward)", "#a3b7c9", "#b9cfe4",
           ("slate",), ("forward", "recomput")),
    Colour("weight", "compute", "the weight-gradient pass (zero-bubble schedules' W)", "#658b8d", "#7b9ea1",
           ("slate", "teal"), ("weight",)),
    Colour("compute", "compute", "compute in general: a GEMM, a step's compute, where passes are not told apart",
           "#7d858d", "#8a9299", ("slate", "grey"), ("compute", "gemm", "step")),
    Colour("backward", "compute", "the backward pass (input gradients)", "#495a63", "#637580", ("slate",), ("backward",)),
    Colour("optimizer_step", "compute", "the optimizer step", "#444156", "#5d5876", ("slate",), ("optimizer",)),
    # waiting: grey, hatched (svg_defs, css)
    Colour("idle", "waiting", "idle or waiting: a pipeline bubble, a rank waiting for its peers, a collective's latency",
           "#dbd5d1", "#534f4c", ("grey", "gray", "hatched"), ("idle", "bubble", "wait", "latency", "tax")),
    # communication
    Colour("comm", "communication", "communication on the wire (collectives, sends)", "#a673d6", "#c187f7",
           ("purple", "violet"), _COMM_WORDS),
    Colour("intra", "communication", "communication inside a node (NVLink, the scale-up fabric)", "#bca7e0", "#d6bbfd",
           ("lavender", "lilac", "purple"), _COMM_WORDS + ("inside", "intra", "nvlink", "node")),
    Colour("inter", "communication", "communication across nodes (the network)", "#614183", "#7a589f",
           ("plum", "purple"), _COMM_WORDS + ("across", "inter", "network", "node")),
    # bad: the only reds
    Colour("exposed", "bad", "exposed communication: no compute hides it, the step waits", "#d03c1a", "#f86036",
           ("red", "vermillion"), ("exposed", "wait", "tail", "ulysses")),
    Colour("warn", "bad", "bad: dropped, over budget, does not fit, wrong, failed or hung", "#b13e4a", "#df6472",
           ("red", "crimson"), ("drop", "fail", "fit", "hang", "hung", "block", "stuck", "wrong", "differ", "error",
                                "left waiting", "repeat", "distinct", "bad")),
    # one hue per parallelism axis (Okabe & Ito); HSDP draws shard groups in zero, replica groups in dp
    Colour("dp", "axis", "data parallelism (DDP; HSDP's replica groups)", "#0072b2", "#3e8bcd", ("blue",),
           ("dp", "data", "ddp", "replica", "weak scaling")),
    Colour("zero", "axis", "ZeRO / FSDP sharding (HSDP's shard groups)", "#25b7e8", "#52ceff", ("blue", "sky"),
           ("zero", "fsdp", "shard", "hsdp")),
    Colour("tp", "axis", "tensor parallelism", "#e69f00", "#f8ad20", ("orange",), ("tp", "tensor")),
    Colour("sp", "axis", "sequence parallelism (its regions: LayerNorm, dropout)", "#e4da14", "#f1e527", ("yellow",),
           ("sp", "sequence", "layernorm", "dropout")),
    Colour("pp", "axis", "pipeline parallelism", "#009e73", "#19a57a", ("green",), ("pp", "pipeline", "stage")),
    Colour("cp", "axis", "context parallelism", "#cc79a7", "#eba0c6", ("pink", "mauve"), ("cp", "context", "ring")),
    Colour("ep", "axis", "expert parallelism (and the tokens it routes)", "#694613", "#8e6530", ("brown",),
           ("ep", "expert", "token")),
    # what memory holds: muted tones
    Colour("params", "memory", "parameters (weights)", "#93cbab", "#a2ddb9", ("mint", "green"), ("param", "weight")),
    Colour("grads", "memory", "gradients", "#dbcc94", "#e5d59e", ("khaki", "sand"), ("grad",)),
    Colour("optimizer", "memory", "optimizer state", "#626b94", "#96a1d2", ("indigo", "blue"), ("optimizer",)),
    Colour("activations", "memory", "activations kept for the backward pass", "#3da4a8", "#55b7b5", ("teal",),
           ("activation", "attention", "kept")),
    Colour("buffers", "memory", "buffers, temporaries, gathered copies", "#ba9e8e", "#c7aa98", ("tan", "taupe"),
           ("buffer", "gathered", "temporar")),
    Colour("memory", "memory", "memory in total: several parts counted together (a GPU's, a job's)", "#7a606d",
           "#846a77", ("mauve",), ("memory", "model state", "need", "job", "total")),
    Colour("capacity", "memory", "a capacity line: a GPU's HBM, an expert's token slots", "#1d1f23", "#e6e4df",
           ("black", "white"), ("capacity", "hbm", "slot")),
    # who holds a piece of data
    Colour("replicated", "data", "held whole by every rank (and the one-device reference)", "#a3a297", "#9e9b91",
           ("grey", "gray"), ("replicat", "whole", "every rank", "one device", "layernorm", "dropout")),
    # ranks, for figures that colour data by the rank it came from (8 distinct, then the cycle repeats)
    Colour("rank0", "data", "rank 0", "#7aace0", "#8cbff7", ("blue",), _RANK_WORDS),
    Colour("rank1", "data", "rank 1", "#b38e55", "#bf9a62", ("ochre", "tan"), _RANK_WORDS),
    Colour("rank2", "data", "rank 2", "#3b6a44", "#7fb287", ("green",), _RANK_WORDS),
    Colour("rank3", "data", "rank 3", "#e9b6e2", "#fac8f3", ("pink",), _RANK_WORDS),
    Colour("rank4", "data", "rank 4", "#21c6ac", "#53ecd1", ("turquoise", "teal"), _RANK_WORDS),
    Colour("rank5", "data", "rank 5", "#bac262", "#d1d975", ("olive", "lime"), _RANK_WORDS),
    Colour("rank6", "data", "rank 6", "#a63881", "#e975bd", ("magenta",), _RANK_WORDS),
    Colour("rank7", "data", "rank 7", "#e6b890", "#f5c69b", ("peach", "apricot"), _RANK_WORDS),
)
COLOURS = {c.key: c for c in _COLOURS}
RANK_COLOURS = 8

# Text drawn on a colour: the page's dark ink or white, whichever contrasts more (WCAG 2.x).
INK_ON_FILL, WHITE = "#15171b", "#ffffff"
# The page behind the drawings, light and dark (site/static/playbook.css --paper and --panel):
# what a colour must stand out from (tests/test_palette.py).
PAPER = ("#fbfaf7", "#15171b")
PANEL = ("#f1efe9", "#1e2127")
# An interleaved pipeline's later model chunks (Figure 15): their pass's colour mixed towards
# the paper by these shares, opaque (a translucent bar would show the bubble's hatch through it).
CHUNK_SHARES = (0.7, 0.5, 0.35)
CHUNKED = ("forward", "backward", "weight")
# The hatch of waiting (``idle``): lines over the grey, in each theme.
IDLE_HATCH = ("#a59e99", "#7b7571")
IDLE_PATTERN = "palette-idle"  # the id of the page's one <pattern> (svg_defs)


def plot(key):
    """The colour to put in a Plotly spec (the light value; dark pages swap it)."""
    return COLOURS[key].light


def rank_key(rank):
    """The palette key of a rank's colour: ranks 0-7, then the cycle repeats."""
    return f"rank{rank % RANK_COLOURS}"


def _luminance(colour):
    """WCAG 2.x relative luminance of ``#rrggbb``."""
    def channel(value):
        value /= 255
        return value / 12.92 if value <= 0.04045 else ((value + 0.055) / 1.055) ** 2.4
    r, g, b = (channel(int(colour[i:i + 2], 16)) for i in (1, 3, 5))
    return 0.2126 * r + 0.7152 * g + 0.0722 * b


def contrast(a, b):
    """WCAG 2.x contrast ratio of two ``#rrggbb`` colours (1 to 21)."""
    low, high = sorted((_luminance(a), _luminance(b)))
    return (high + 0.05) / (low + 0.05)


def on(colour):
    """The ink for text drawn on ``colour``: dark or white, whichever contrasts more."""
    return INK_ON_FILL if contrast(colour, INK_ON_FILL) >= contrast(colour, WHITE) else WHITE


def mix(colour, other, share):
    """``share`` of ``colour`` and the rest of ``other`` (sRGB values, as CSS color-mix in srgb)."""
    a, b = (tuple(int(c[i:i + 2], 16) for i in (1, 3, 5)) for c in (colour, other))
    return "#" + "".join(f"{round(x * share + y * (1 - share)):02x}" for x, y in zip(a, b))


def chunk_colour(key, chunk, theme):
    """The colour of model chunk ``chunk`` (1, 2, 3) of pass ``key`` in a theme (0 light, 1 dark)."""
    return mix(getattr(COLOURS[key], ("light", "dark")[theme]), PAPER[theme], CHUNK_SHARES[chunk - 1])


def css():
    """The stylesheet part the builder writes: variables for both themes, then per key a
    fill and a stroke class for SVG, a background class for HTML swatches and an ``on``
    class for text drawn on the colour; waiting is hatched (the pattern of ``svg_defs``,
    a CSS gradient for swatches); a pipeline pass's later chunks are its colour mixed
    towards the paper (``op-chunk-<n>``, Figure 15)."""
    def variables(theme):
        values = "".join(f"--c-{c.key}:{getattr(c, theme)};--on-{c.key}:{on(getattr(c, theme))};" for c in _COLOURS)
        index = int(theme == "dark")
        chunks = "".join(f"--c-{k}-{n}:{chunk_colour(k, n, index)};--on-{k}-{n}:{on(chunk_colour(k, n, index))};"
                         for k in CHUNKED for n in range(1, len(CHUNK_SHARES) + 1))
        return values + chunks + f"--c-idle-hatch:{IDLE_HATCH[index]};"
    classes = "".join(
        f".fill-{c.key}{{fill:var(--c-{c.key})}}.stroke-{c.key}{{stroke:var(--c-{c.key})}}"
        f".bg-{c.key}{{background:var(--c-{c.key})}}.on-{c.key}{{--on:var(--on-{c.key});--under:var(--c-{c.key})}}"
        for c in _COLOURS
    )
    hatch = (f".fill-idle{{fill:url(#{IDLE_PATTERN}) var(--c-idle)}}.stroke-idle{{stroke:url(#{IDLE_PATTERN}) var(--c-idle)}}"
             ".bg-idle{background:repeating-linear-gradient(-45deg,var(--c-idle) 0 2.5px,var(--c-idle-hatch) 2.5px 4px)}"
             f"#{IDLE_PATTERN} rect{{fill:var(--c-idle)}}#{IDLE_PATTERN} path{{stroke:var(--c-idle-hatch)}}")
    chunks = "".join(f".op-chunk-{n}.stroke-{k}{{stroke:var(--c-{k}-{n})}}.op-chunk-{n}.on-{k}{{--on:var(--on-{k}-{n})}}"
                     for k in CHUNKED for n in range(1, len(CHUNK_SHARES) + 1))
    return (f":root{{{variables('light')}}}\n@media (prefers-color-scheme: dark){{:root{{{variables('dark')}}}}}\n"
            f"{classes}\n{hatch}\n{chunks}\n")


def svg_defs():
    """The page's one copy of the patterns (an SVG of no size, outside every figure): any
    drawing's ``fill-idle`` or ``stroke-idle`` paints with it, in either theme."""
    return (f'<svg xmlns="http://www.w3.org/2000/svg" class="palette-defs" width="0" height="0" aria-hidden="true" focusable="false">'
            f'<defs><pattern id="{IDLE_PATTERN}" width="6" height="6" patternUnits="userSpaceOnUse" '
            f'patternTransform="rotate(45)"><rect width="6" height="6"/><path d="M1.5 0V6" stroke-width="2"/>'
            f"</pattern></defs></svg>")


def dark_map():
    """Light value -> dark value, for playbook.js to re-colour Plotly charts on dark pages."""
    return {c.light: c.dark for c in _COLOURS}
