"""Published GPT shapes: the layers, width and heads behind a parameter count.

What it models
--------------
Figures that take "a model of Ψ parameters" still need its shape (layers L, hidden size h,
attention heads a, sequence length s, vocabulary V) for activation memory, FLOPs and
activation-sized traffic. Rather than invent a shape from Ψ, this module lists models
whose shapes were published:

* the ten GPT models of Narayanan et al. 2021, "Efficient Large-Scale Language Model
  Training on GPU Clusters Using Megatron-LM" (SC'21), Table 1 (V = 51,200, s = 2,048);
* GPT-3 Medium (350M), Large (760M) and 175B, Brown et al. 2020, "Language Models are
  Few-Shot Learners", Table 2.1 (V = 50,257, s = 2,048). (Not GPT-3 XL: its printed
  24 heads of 128 do not make its d_model of 2,048.)

``params`` is the count those tables print; ``flops.gpt_params`` (Narayanan Eq. 2)
reproduces each to the printed rounding. ``shape_for(params)`` returns the listed model
nearest to ``params`` on a log scale, so a slider whose stops are ``PARAMS`` always finds
its own shape.

What it does not model: GQA, SwiGLU or mixture-of-experts shapes; every model here is the
plain GPT block (ffn = 4h, K and V as wide as Q).
"""
import math
from dataclasses import dataclass

from models._validate import positive

__all__ = ["Shape", "SHAPES", "PARAMS", "shape_for"]


@dataclass(frozen=True)
class Shape:
    name: str
    params: int  # as printed in the source table
    layers: int
    hidden: int
    heads: int
    seq: int
    vocab: int
    source: str

    @property
    def layer_params(self):
        """Weights of one transformer layer: 12h² + 13h (Narayanan 2021 Eq. 2's per-layer term)."""
        return 12 * self.hidden * self.hidden + 13 * self.hidden


_MEGATRON = "Narayanan et al. 2021 (SC'21) Table 1"
_GPT3 = "Brown et al. 2020 (GPT-3) Table 2.1"

SHAPES = tuple(sorted((
    Shape("GPT-3 Medium", 350_000_000, 24, 1024, 16, 2048, 50257, _GPT3),
    Shape("GPT-3 Large", 760_000_000, 24, 1536, 16, 2048, 50257, _GPT3),
    Shape("GPT 1.7B", 1_700_000_000, 24, 2304, 24, 2048, 51200, _MEGATRON),
    Shape("GPT 3.6B", 3_600_000_000, 30, 3072, 32, 2048, 51200, _MEGATRON),
    Shape("GPT 7.5B", 7_500_000_000, 36, 4096, 32, 2048, 51200, _MEGATRON),
    Shape("GPT 18.4B", 18_400_000_000, 40, 6144, 48, 2048, 51200, _MEGATRON),
    Shape("GPT 39.1B", 39_100_000_000, 48, 8192, 64, 2048, 51200, _MEGATRON),
    Shape("GPT 76.1B", 76_100_000_000, 60, 10240, 80, 2048, 51200, _MEGATRON),
    Shape("GPT 145.6B", 145_600_000_000, 80, 12288, 96, 2048, 51200, _MEGATRON),
    Shape("GPT-3 175B", 175_000_000_000, 96, 12288, 96, 2048, 50257, _GPT3),
    Shape("GPT 310.1B", 310_100_000_000, 96, 16384, 128, 2048, 51200, _MEGATRON),
    Shape("GPT 529.6B", 529_600_000_000, 105, 20480, 128, 2048, 51200, _MEGATRON),
    Shape("GPT 1T", 1_008_000_000_000, 128, 25600, 160, 2048, 51200, _MEGATRON),
), key=lambda shape: shape.params))

PARAMS = tuple(shape.params for shape in SHAPES)


def shape_for(params):
    """The listed model nearest to ``params`` (log scale); exact for any value of ``PARAMS``."""
    positive("params", params)
    return min(SHAPES, key=lambda shape: abs(math.log(shape.params / params)))
