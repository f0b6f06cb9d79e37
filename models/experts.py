"""Mixture-of-experts routing: top-k choice, capacity and drops, load balancing, All-to-All bytes.

What it models
--------------
* Routing of ``tokens`` seeded tokens over E experts: each token's router logits are a seeded
  Gaussian (``random.Random(seed)``) plus a per-expert ``bias`` (the part of the router that
  "learns"); g = softmax(logits) and the top-k experts are chosen (Shazeer et al. 2017; GShard,
  Lepikhin et al. 2020; Switch Transformer, Fedus et al. 2021).
* Expert capacity = ceil(capacity_factor * tokens * k / E) (Switch Transformer §2.2 / GShard;
  rounding as Megatron-Core ``moe_utils.get_capacity``). Assignments beyond capacity are dropped
  (the token skips that expert and rides the residual), first choices before second choices, each
  in token order (GShard Algorithm 1). Dropless mode never drops: the busiest expert just runs long.
* The Switch load-balancing loss alpha * E * sum_i f_i P_i (Fedus et al. 2021, Eq. 4), with f_i the
  fraction of assignments sent to expert i and P_i the mean router probability; its minimum alpha
  is reached at uniform routing.
* A toy collapse dynamic: experts that receive more tokens than average get better and attract
  more (bias_i += lr * collapse_rate * (f_i - 1/E)) while the gradient of the balancing loss w.r.t.
  the bias pushes back. It is a cartoon of the article's "rich get richer", not a trained router.
* All-to-All volume: dispatch and combine each carry k * b * s * h elements per rank per MoE layer
  (article, "Expert parallelism · specification"), of which (ep-1)/ep leaves the rank under
  uniform routing.
* The straggler effect: the layer finishes when the busiest expert (or EP rank) does, so its time
  scales with max load / mean load (article: "the layer runs at the speed of the busiest expert").

What it does not model: learned token-dependent routing, router z-loss, expert-choice or Sinkhorn
routing, shared experts, token dropping by probability instead of position, or expert-TP.
"""
import functools
import math
import operator
import random
from dataclasses import dataclass
from fractions import Fraction

from models._validate import at_most, finite, finite_result, non_negative, non_negative_int, positive, positive_int

__all__ = [
    "Routing", "Dispatch", "MoeLayer", "CollapseStep", "AllToAllBytes", "MAX_ROUTED_LOGITS",
    "expert_capacity", "route_tokens", "apply_capacity", "load_balancing_loss", "moe_layer",
    "collapse_step", "simulate_collapse", "moe_alltoall_bytes", "imbalance", "rank_loads",
    "moe_layer_time_s",
]

MAX_ROUTED_LOGITS = 2_000_000  # tokens * experts per call: ~1 s of CPython, more would freeze a tab




def expert_capacity(tokens, experts, top_k=1, capacity_factor=1.0):
    """ceil(capacity_factor * tokens * k / E) token slots per expert (Switch §2.2; Megatron-Core
    get_capacity rounds up). The factor is taken as the decimal the caller wrote (1.1 is 11/10)."""
    tokens = positive_int("tokens", tokens)
    experts = positive_int("experts", experts)
    top_k = _check_top_k(top_k, experts)
    positive("capacity_factor", capacity_factor)
    exact = Fraction(repr(float(capacity_factor))) * tokens * top_k / experts
    return math.ceil(exact)


def _check_top_k(top_k, experts):
    top_k = positive_int("top_k", top_k)
    if top_k > experts:
        raise ValueError(f"top_k must be <= experts={experts}, got {top_k}")
    return top_k


def _check_bias(bias, experts):
    if bias is None:
        return (0.0,) * experts
    bias = tuple(bias)
    if len(bias) != experts:
        raise ValueError(f"bias must have one entry per expert ({experts}), got {len(bias)}")
    for i, b in enumerate(bias):
        finite(f"bias[{i}]", b)
    return tuple(float(b) for b in bias)


@functools.lru_cache(maxsize=256)
def _exp_noise(tokens, experts, seed, logit_std):
    """exp of the seeded Gaussian part of every token's logits, cached: sliders re-route the same
    tokens, and exp(noise + bias) = exp(noise) * exp(bias) saves an exp per logit."""
    gauss = random.Random(seed).gauss
    return tuple(tuple(math.exp(gauss(0.0, logit_std)) for _ in range(experts)) for _ in range(tokens))


@functools.lru_cache(maxsize=64)
def _route(tokens, experts, top_k, seed, bias, logit_std):
    """(top-k choices per token, softmax probabilities per token), both tuples."""
    top_bias = max(bias)
    exp_bias = [math.exp(b - top_bias) for b in bias]  # shifted: no overflow for any finite bias
    choices, probs = [], []
    indices = range(experts)
    for exp_noise in _exp_noise(tokens, experts, seed, logit_std):
        weights = [n * b for n, b in zip(exp_noise, exp_bias)]  # exp(logit - max bias), monotone in logit
        inverse = 1.0 / sum(weights)
        probs.append(tuple([w * inverse for w in weights]))
        if top_k == 1:
            choices.append((weights.index(max(weights)),))
        else:
            # sorted(reverse=True) is stable: ties go to the lower expert index
            choices.append(tuple(sorted(indices, key=weights.__getitem__, reverse=True)[:top_k]))
    return tuple(choices), tuple(probs)


@dataclass(frozen=True)
class Routing:
    choices: tuple  # per token, its top-k experts, best first
    counts: tuple  # assignments per expert before capacity; sums to tokens * k
    fractions: tuple  # f_i = counts_i / (tokens * k)
    router_prob: tuple  # P_i = mean over tokens of softmax probability of expert i


def _check_routing_args(tokens, experts, top_k, seed, logit_std):
    tokens = positive_int("tokens", tokens)
    experts = positive_int("experts", experts)
    top_k = _check_top_k(top_k, experts)
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise ValueError(f"seed must be an integer, got {seed!r}")
    positive("logit_std", logit_std)
    at_most("logit_std", logit_std, 50)  # keeps exp(noise) inside the float range
    at_most("tokens*experts", tokens * experts, MAX_ROUTED_LOGITS)
    return tokens, experts, top_k


def route_tokens(tokens, experts, top_k=1, *, seed=0, bias=None, logit_std=1.0):
    """Top-k routing of ``tokens`` seeded tokens; logits = N(0, logit_std^2) + bias."""
    tokens, experts, top_k = _check_routing_args(tokens, experts, top_k, seed, logit_std)
    bias = _check_bias(bias, experts)
    choices, probs = _route(tokens, experts, top_k, seed, bias, float(logit_std))
    return _summarise(choices, probs, experts, top_k)


@functools.lru_cache(maxsize=64)
def _summarise(choices, probs, experts, top_k):
    counts = [0] * experts
    for chosen in choices:
        for e in chosen:
            counts[e] += 1
    assignments = len(choices) * top_k
    sums = [0.0] * experts
    for p in probs:
        sums = [a + b for a, b in zip(sums, p)]
    router_prob = [total / len(probs) for total in sums]
    return Routing(tuple(choices), tuple(counts), tuple(c / assignments for c in counts), tuple(router_prob))


@dataclass(frozen=True)
class Dispatch:
    capacity: int | None  # None in dropless mode
    counts: tuple  # requested assignments per expert
    loads: tuple  # assignments actually processed per expert
    dropped_per_expert: tuple
    dropped: int  # total dropped assignments = sum(counts) - sum(loads)


def apply_capacity(choices, experts, capacity=None):
    """Fill each expert up to ``capacity`` (None = dropless): all first choices in token order, then
    all second choices, ... (GShard Algorithm 1 gives top-1 priority); the rest are dropped."""
    experts = positive_int("experts", experts)
    if capacity is not None:
        capacity = non_negative_int("capacity", capacity)
    choices = [tuple(c) for c in choices]
    k = max((len(c) for c in choices), default=0)
    counts = [0] * experts
    loads = [0] * experts
    for rank_in_choice in range(k):
        for chosen in choices:
            if rank_in_choice >= len(chosen):
                continue
            e = chosen[rank_in_choice]
            if isinstance(e, bool) or not isinstance(e, int) or not 0 <= e < experts:
                raise ValueError(f"choices name expert {e!r}; experts are 0..{experts - 1}")
            counts[e] += 1
            if capacity is None or loads[e] < capacity:
                loads[e] += 1
    dropped = [c - l for c, l in zip(counts, loads)]
    return Dispatch(capacity, tuple(counts), tuple(loads), tuple(dropped), sum(dropped))


def load_balancing_loss(fractions, router_prob, alpha=0.01):
    """alpha * E * sum_i f_i P_i (Switch Transformer, Fedus et al. 2021, Eq. 4; alpha = 1e-2 there).
    Equals alpha under uniform routing, alpha * E when one expert takes everything."""
    fractions, router_prob = tuple(fractions), tuple(router_prob)
    if not fractions or len(fractions) != len(router_prob):
        raise ValueError(
            "fractions and router_prob must be non-empty and the same length, "
            f"got {len(fractions)} and {len(router_prob)}"
        )
    for i, (f, p) in enumerate(zip(fractions, router_prob)):
        non_negative(f"fractions[{i}]", f)
        non_negative(f"router_prob[{i}]", p)
    non_negative("alpha", alpha)
    total = sum(f * p for f, p in zip(fractions, router_prob))  # plain sum: inf, not OverflowError
    return finite_result("load-balancing loss", alpha * len(fractions) * total)


def imbalance(loads):
    """max load / mean load: the MoE layer's slowdown against perfectly balanced routing."""
    loads = tuple(loads)
    if not loads:
        raise ValueError("loads must not be empty")
    for i, load in enumerate(loads):
        non_negative(f"loads[{i}]", load)
    mean = sum(load / len(loads) for load in loads)  # divide first: no overflow near 1e308
    if mean == 0:
        raise ValueError("loads must not all be zero")
    return finite_result("imbalance", max(loads) / mean)


def rank_loads(loads, ep):
    """Tokens per EP rank when rank r holds experts [r*E/ep, (r+1)*E/ep) (Megatron-Core's
    contiguous local experts)."""
    loads = tuple(loads)
    ep = positive_int("ep", ep)
    if not loads or len(loads) % ep:
        raise ValueError(f"ep={ep} does not divide experts={len(loads)}")
    per_rank = len(loads) // ep
    return tuple(sum(loads[r * per_rank:(r + 1) * per_rank]) for r in range(ep))


def moe_layer_time_s(loads, time_per_token_s):
    """The layer ends when the busiest expert does: max(load) * time per token (article)."""
    non_negative("time_per_token_s", time_per_token_s)
    loads = tuple(loads)
    if not loads:
        raise ValueError("loads must not be empty")
    for i, load in enumerate(loads):
        non_negative(f"loads[{i}]", load)
    return finite_result("layer time", max(loads) * time_per_token_s)


@dataclass(frozen=True)
class MoeLayer:
    routing: Routing
    dispatch: Dispatch
    capacity: int | None
    dropped: int
    dropped_fraction: float  # of tokens * k assignments
    ideal_load: float  # tokens * k / E
    busiest_load: int
    time_factor: float  # busiest_load / ideal_load: expert time against perfect balance
    wasted_capacity_fraction: float | None  # empty slots / (E * capacity); None if dropless
    aux_loss: float


def moe_layer(tokens, experts, top_k=1, *, capacity_factor=1.25, dropless=False, seed=0, bias=None,
              logit_std=1.0, alpha=0.01):
    """Route, apply capacity (or not), and report drops, imbalance and the balancing loss."""
    routing = route_tokens(tokens, experts, top_k, seed=seed, bias=bias, logit_std=logit_std)
    capacity = None if dropless else expert_capacity(tokens, experts, top_k, capacity_factor)
    if dropless:
        positive("capacity_factor", capacity_factor)
    dispatch = apply_capacity(routing.choices, experts, capacity)
    ideal = tokens * top_k / experts
    busiest = max(dispatch.loads)
    wasted = None if capacity is None or capacity == 0 else 1.0 - sum(dispatch.loads) / (experts * capacity)
    return MoeLayer(
        routing, dispatch, capacity, dispatch.dropped, dispatch.dropped / (tokens * top_k), ideal,
        busiest, busiest / ideal, wasted, load_balancing_loss(routing.fractions, routing.router_prob, alpha),
    )


@dataclass(frozen=True)
class CollapseStep:
    step: int
    bias: tuple  # router bias used for this step's routing
    fractions: tuple
    router_prob: tuple
    aux_loss: float
    max_fraction: float  # 1/E when balanced, 1 when collapsed
    dropped_fraction: float  # at ``capacity_factor``
    time_factor: float  # busiest expert / ideal, dropless


def collapse_step(bias, step, *, tokens=256, experts=8, top_k=1, seed=0, collapse_rate=0.005,
                  alpha=0.01, lr=100.0, logit_std=1.0, capacity_factor=1.25, max_bias_step=0.2):
    """One step of the toy dynamic. Returns (CollapseStep for ``bias``, next bias).

    next b_j = b_j + lr * [collapse_rate * (f_j - 1/E) - dL/db_j], with the balancing-loss gradient
    dL/db_j = alpha * E * mean_t p_tj (f_j - sum_i f_i p_ti) (f treated as constant, as in Switch).
    Net drift near balance is lr * (collapse_rate - alpha) * (f_j - 1/E): the loss wins iff
    alpha > collapse_rate (defaults: Switch's alpha = 0.01 against collapse_rate = 0.005). Each bias
    moves at most ``max_bias_step`` per step (gradient clipping): without it a large alpha * lr
    overshoots, oscillates and collapses onto one expert, where the Switch gradient vanishes.
    Routing uses ``seed`` and ``step`` to draw a fresh, reproducible batch.
    """
    tokens, experts, top_k = _check_routing_args(tokens, experts, top_k, seed, logit_std)
    bias = _check_bias(bias, experts)
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        raise ValueError(f"step must be an integer >= 0, got {step!r}")
    non_negative("collapse_rate", collapse_rate)
    non_negative("alpha", alpha)
    positive("lr", lr)
    positive("capacity_factor", capacity_factor)
    positive("max_bias_step", max_bias_step)
    # A fresh, reproducible batch every step (seed and step mixed, not added, so seeds don't overlap).
    choices, probs = _route(tokens, experts, top_k, seed * 1_000_003 + step, bias, float(logit_std))
    routing = _summarise(choices, probs, experts, top_k)
    f = routing.fractions
    grad = [0.0] * experts
    for p in probs:
        s = sum(map(operator.mul, f, p))
        grad = [g + pj * (fj - s) for g, pj, fj in zip(grad, p, f)]
    scale = alpha * experts / tokens
    next_bias = []
    for j in range(experts):
        delta = lr * (collapse_rate * (f[j] - 1.0 / experts) - scale * grad[j])
        next_bias.append(bias[j] + max(-max_bias_step, min(max_bias_step, delta)))
    capacity = expert_capacity(tokens, experts, top_k, capacity_factor)
    dropped = apply_capacity(choices, experts, capacity).dropped
    ideal = tokens * top_k / experts
    record = CollapseStep(
        step, bias, f, routing.router_prob,
        load_balancing_loss(f, routing.router_prob, alpha), max(f), dropped / (tokens * top_k),
        max(routing.counts) / ideal,
    )
    return record, tuple(next_bias)


def simulate_collapse(steps, *, tokens=256, experts=8, top_k=1, seed=0, collapse_rate=0.005, alpha=0.01,
                      lr=100.0, logit_std=1.0, capacity_factor=1.25, max_bias_step=0.2, bias=None):
    """``steps`` steps of ``collapse_step`` from ``bias`` (default all zeros)."""
    steps = positive_int("steps", steps)
    positive_int("tokens", tokens)
    positive_int("experts", experts)
    at_most("steps*tokens*experts", steps * tokens * experts, MAX_ROUTED_LOGITS)
    bias = _check_bias(bias, experts)
    history = []
    for step in range(steps):
        record, bias = collapse_step(
            bias, step, tokens=tokens, experts=experts, top_k=top_k, seed=seed,
            collapse_rate=collapse_rate, alpha=alpha, lr=lr, logit_std=logit_std,
            capacity_factor=capacity_factor, max_bias_step=max_bias_step,
        )
        history.append(record)
    return tuple(history)


@dataclass(frozen=True)
class AllToAllBytes:
    per_direction_bytes: float  # one All-to-All (dispatch OR combine): k*b*s*h*bytes per rank
    forward_bytes: float  # dispatch + combine in the forward pass
    forward_backward_bytes: float  # the backward pass repeats both (gradients flow back)
    off_rank_bytes_per_direction: float  # the (ep-1)/ep that leaves the rank, uniform routing


def moe_alltoall_bytes(top_k, micro_batch, seq, hidden, dtype_bytes=2, ep=1):
    """Per rank, per MoE layer: k * b * s * h * dtype_bytes per All-to-All (article, EP specification)."""
    top_k = positive_int("top_k", top_k)
    micro_batch = positive_int("micro_batch", micro_batch)
    seq = positive_int("seq", seq)
    hidden = positive_int("hidden", hidden)
    positive("dtype_bytes", dtype_bytes)
    ep = positive_int("ep", ep)
    per_direction = float(top_k) * micro_batch * seq * hidden * dtype_bytes
    if not math.isfinite(per_direction):
        raise ValueError("top_k * micro_batch * seq * hidden * dtype_bytes overflows the float range")
    return AllToAllBytes(per_direction, 2 * per_direction, 4 * per_direction, per_direction * (ep - 1) / ep)
