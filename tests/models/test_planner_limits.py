"""The planner's input ranges (models/planner/limits.py): one table for the lab and the
command line. No published run or preset falls outside it; what does is refused with a
message naming the input, before any arithmetic (issue 42: 1e-320 Gb/s, 10^12-token
sequences, 0 layers)."""
import math

import pytest

from models import hardware
from models.planner import CASES, CLUSTERS, MODELS
from models.planner.limits import LIMITS, check

MODEL_FIELDS = ("layers", "hidden", "heads", "kv_heads", "ffn", "vocab", "seq_len", "experts", "top_k",
                "shared_experts", "expert_ffn", "dense_layers")


def test_every_preset_and_published_run_is_inside_the_ranges():
    models = [p.model for p in MODELS.values()] + [c.model for c in CASES]
    for model in models:
        for name in MODEL_FIELDS:
            assert check(name, getattr(model, name)) == getattr(model, name)
    for case in CASES:
        check("gpus", case.cluster.gpus)
        check("gpus_per_node", case.cluster.gpus_per_node)
        check("global_batch", case.plan.global_batch)
        for degree in ("tp", "pp", "dp", "cp", "ep", "microbatch", "virtual_stages", "zero"):
            check(degree, getattr(case.plan, degree))
    for preset in CLUSTERS.values():
        check("gpus_per_node", preset.gpus_per_node)
    for link in hardware.LINKS.values():  # every link a reader can pick is a speed the field accepts
        check("inter_gbps", link.bandwidth_bytes_per_s * 8 / 1e9)


@pytest.mark.parametrize("name,value,message", [
    ("layers", 0, "layers=0: at least 1"),
    ("tp", 0, "tp=0: at least 1"),
    ("pp", -1, "pp=-1: at least 1"),
    ("seq_len", 10**12, "seq_len=1000000000000: at most 1,048,576 tokens"),
    ("seq_len", 2.5, "seq_len=2.5: a whole number"),
    ("inter_gbps", 1e-300, "inter_gbps=1e-300: at least 1 Gb/s"),
    ("inter_gbps", math.inf, "inter_gbps=inf: at most 10,000 Gb/s"),
    ("inter_gbps", math.nan, "inter_gbps must be a number, got nan"),
    ("tokens", 1e16, "tokens=1e+16: at most 1,000T tokens"),
    ("global_batch", 0, "global_batch=0: at least 1 sequence"),
    ("memory_margin_gb", -1, "memory_margin_gb=-1: at least 0 GB"),
    ("gpus", True, "gpus must be a number, got True"),
    ("gpus", "8", "gpus must be a number, got '8'"),
])
def test_an_input_out_of_range_is_named_with_its_bound(name, value, message):
    with pytest.raises(ValueError) as error:
        check(name, value)
    assert str(error.value) == message


def test_each_range_is_finite_and_the_model_fields_say_where_their_top_comes_from():
    for name, limit in LIMITS.items():
        assert limit.low <= limit.high and math.isfinite(limit.high), name
        if name in MODEL_FIELDS + ("gpus", "inter_gbps", "global_batch", "tokens"):
            assert limit.why, name
