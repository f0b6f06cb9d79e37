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
* The devices a token reaches (``expected_holders_reached``): distinct GPUs or nodes hit by its
  top-k experts under group-limited routing (DeepSeek-V3 Sec. 2.1.2), what a deduplicating
  dispatcher such as DeepEP sends per token instead of k copies (DeepSeek-V3 Sec. 3.2.2).
* The straggler effect: the layer finishes when the busiest expert (or EP rank) does, so its time
  scales with max load / mean load (article: "the layer runs at the speed of the busiest expert").

What it does not model: learned token-dependent routing, router z-loss, expert-choice or Sinkhorn
routing, shared experts, token dropping by probability instead of position, or expert-TP.
"""
import functools
import itertools
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
    off_rank_forward_bytes: float  # dispatch + combine: what leaves the rank in the forward pass


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
    off_rank = per_direction * (ep - 1) / ep
    return AllToAllBytes(per_direction, 2 * per_direction, 4 * per_direction, off_rank, 2 * off_rank)



# ---- how many devices a token reaches: what a deduplicating dispatcher sends ---------------------------

__all__ += ["expected_holders_reached"]


@functools.lru_cache(maxsize=256)
def expected_holders_reached(experts, top_k, holders, groups=1, group_limit=1):
    """Expected number of distinct holders (EP ranks, or nodes) one token's ``top_k`` experts
    sit on, when experts are laid out in order (holder j has experts j·E/H .. (j+1)·E/H - 1,
    as Megatron-Core and AutoModel place them) and routing is uniform over the groups a
    token may use: experts form ``groups`` equal groups in order, a token picks
    ``group_limit`` of them, then ``top_k`` of their experts (group-limited routing:
    DeepSeek-V2 Sec. 2.1.2 device-limited, DeepSeek-V3 Sec. 2.1.2 node-limited with 8
    groups, 4 used; Megatron-Core moe_utils.group_limited_topk). ``groups = group_limit``
    (e.g. 1, 1) is no limit.

    Derivation (ours): the chosen groups are a uniform ``group_limit``-subset of the groups
    and the experts a uniform ``top_k``-subset of their n = group_limit·E/G experts, so a
    holder whose experts fall w_g in each group g it overlaps is missed with probability
    Σ_T P(its chosen groups are T) · C(n − Σ_{g∈T} w_g, k) / C(n, k) (drawing without
    replacement: the hypergeometric zero term), P(T) = C(G − r, M − |T|) / C(G, M) for the r
    groups it overlaps. The answer is the sum over holders of 1 − that."""
    experts = positive_int("experts", experts)
    top_k = _check_top_k(top_k, experts)
    holders = positive_int("holders", holders)
    groups = positive_int("groups", groups)
    group_limit = positive_int("group_limit", group_limit)
    for name, value in (("holders", holders), ("groups", groups)):
        if experts % value:
            raise ValueError(f"{name}={value} must divide experts={experts}")
    if group_limit > groups:
        raise ValueError(f"group_limit={group_limit} must be <= groups={groups}")
    size, per_holder = experts // groups, experts // holders
    allowed = group_limit * size
    if top_k > allowed:
        raise ValueError(f"top_k={top_k} experts cannot come from group_limit={group_limit} groups of {size}")
    subsets = math.comb(groups, group_limit)
    all_picks = math.comb(allowed, top_k)
    reached = 0.0
    for holder in range(holders):
        low, high = holder * per_holder, (holder + 1) * per_holder
        overlaps = [min(high, (g + 1) * size) - max(low, g * size) for g in range(low // size, (high - 1) // size + 1)]
        others = groups - len(overlaps)
        missed = 0.0
        for chosen in range(1 << len(overlaps)):
            picked = bin(chosen).count("1")
            if picked > group_limit or group_limit - picked > others:
                continue
            inside = sum(w for i, w in enumerate(overlaps) if chosen >> i & 1)
            ways = math.comb(others, group_limit - picked) * math.comb(allowed - inside, top_k)
            missed += ways / (subsets * all_picks)
        reached += 1.0 - missed
    return reached


# ---- routing in expectation: fast enough for a figure at any size -------------------------------------
#
# ``route_tokens`` samples every token's logits: at 8,192 tokens x 64 experts that is ~0.5 s of CPython.
# The functions below give the same quantities as expectations over batches, in O(E) per call, for a
# router described by its mean probabilities P_i = softmax(b)_i (b: a per-expert logit bias), so a
# figure can show any size. What they model: each token independently puts expert i among its top k
# with probability q_i = min(1, lambda * P_i), lambda chosen so sum q_i = k (inclusion probabilities
# proportional to P, capped at 1: our modelling choice; exact for k = 1). Expert i's requests in a batch
# of T tokens are then N_i ~ Binomial(T, q_i), and with C slots it drops E[(N_i - C)+] of them
# (drops per expert do not depend on the fill order). f_i = q_i / k is the expected fraction of
# assignments, so the Switch loss is alpha * E * sum f_i P_i (Fedus et al. 2021, Eq. 4).

__all__ += [
    "ExpectedRouting", "CollapseRecord", "MAX_COLLAPSE_STEPS", "router_levels", "router_bias",
    "inclusion_probabilities", "expected_overflow", "expected_routing", "expected_collapse",
]

MAX_COLLAPSE_STEPS = 1000


@functools.lru_cache(maxsize=16)
def router_levels(experts):
    """(z, level): the router's preference levels and each expert's level. Experts ranked by the
    normal scores Phi^-1((E - r - 1/2) / E) are grouped, when E is a power of two above 16, into
    blocks of 1, 1, 2, 4, ..., E/4 from the top and the mirror image from the bottom (2 log2 E
    levels: the favourites stay single, so a collapse lands on exactly k experts); below, each
    expert is its own level. z_l is the mean score of block l. Expert 0 is the favourite; the
    others are placed by a fixed shuffle (seed E), so hot experts spread over the ranks."""
    from statistics import NormalDist
    experts = positive_int("experts", experts)
    inverse = NormalDist().inv_cdf
    scores = [inverse((experts - r - 0.5) / experts) for r in range(experts)]
    if experts > 16 and experts & (experts - 1) == 0:
        top = [1] + [2**i for i in range(experts.bit_length() - 2)]  # 1, 1, 2, ..., E/4: sums to E/2
        sizes = top + top[::-1]
    else:
        sizes = [1] * experts
    z, level, start = [], [], 0
    for l, size in enumerate(sizes):
        z.append(math.fsum(scores[start:start + size]) / size)
        level += [l] * size
        start += size
    rest = level[1:]
    random.Random(experts).shuffle(rest)
    return tuple(z), tuple(level[:1] + rest)


def router_bias(experts, skew):
    """Each expert's router logit bias b_i = skew * z_level(i): ``skew`` is the spread (about the
    standard deviation) of the bias; 0 is uniform routing."""
    non_negative("skew", skew)
    at_most("skew", skew, 50)  # exp(50 * 2.2) stays inside the float range
    z, level = router_levels(experts)
    return tuple(skew * z[l] for l in level)


def inclusion_probabilities(router_prob, top_k):
    """q_i = min(1, lambda * P_i) with sum q_i = top_k: the chance expert i is among a token's top k."""
    try:
        router_prob = tuple(map(float, router_prob))
    except TypeError:
        raise ValueError(f"router_prob must hold numbers, got {router_prob!r}") from None
    if not router_prob or min(router_prob) < 0 or not math.isfinite(sum(router_prob)) or not sum(router_prob) > 0:
        raise ValueError(f"router_prob must be finite, >= 0 and not all zero, got {router_prob[:8]!r}...")
    top_k = _check_top_k(top_k, len(router_prob))
    return tuple(_inclusion(router_prob, (1,) * len(router_prob), top_k))


def _inclusion(prob, sizes, top_k):
    """q per group of ``sizes[g]`` experts that share the probability ``prob[g]``: water-filling.
    Equal probabilities are capped together (capping one raises the others' lambda * P too)."""
    rest = sum(map(operator.mul, prob, sizes))
    if max(prob) * top_k <= rest:  # nothing capped (the usual case); divide first: no overflow
        return [p / rest * top_k for p in prob]
    q = list(prob)
    full = 0
    for g in sorted(range(len(prob)), key=prob.__getitem__, reverse=True):
        if full == top_k or prob[g] * (top_k - full) <= rest:
            break
        q[g] = None  # capped at 1 (at most k experts are, so summing afresh stays cheap)
        full += sizes[g]
        rest = sum(p * size for p, size in zip(q, sizes) if p is not None)  # no cancellation residue
    left = top_k - full
    if rest > 0 or left == 0:
        return [1.0 if p is None else p / rest * left if left else 0.0 for p in q]
    # the rest have P = 0, yet a token names k experts: the remaining picks fall on them evenly
    share = left / (sum(sizes) - full)
    return [1.0 if p is None else share for p in q]


_SQRT2 = math.sqrt(2.0)
_INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)


def expected_overflow(tokens, probability, capacity):
    """E[(N - C)+] for N ~ Binomial(tokens, probability): the requests an expert with C slots drops,
    on average. Exact (a sum of the binomial pmf on the side of C that is the tail) while the
    variance is under 36; beyond, the normal approximation E[(X - C)+] = (mu - C) Phi(d) + sigma phi(d),
    d = (mu - C) / sigma, off by under 0.15% of the mean (tests: against the exact sum)."""
    tokens = non_negative_int("tokens", tokens)
    non_negative("probability", probability)
    at_most("probability", probability, 1)
    capacity = non_negative_int("capacity", capacity)
    return _overflow(tokens, float(probability), capacity)


def _overflow(n, p, c):
    mean = n * p
    if c >= n or p == 0.0:
        return 0.0
    if p == 1.0 or c == 0:
        return mean - c
    variance = mean * (1.0 - p)
    if variance >= 36.0:
        sigma = math.sqrt(variance)
        d = (mean - c) / sigma
        return sigma * (d * 0.5 * math.erfc(-d / _SQRT2) + _INV_SQRT_2PI * math.exp(-0.5 * d * d))
    # exact: sum (k - c) pmf(k) above c, or mean - c + sum (c - k) pmf(k) below c: whichever side
    # is the tail. pmf falls below e^-40 of its peak 9 standard deviations (+12 terms) past c.
    reach = int(9.0 * math.sqrt(variance)) + 12
    if c - mean > reach:
        return 0.0
    if mean - c > reach:
        return mean - c
    ratio = p / (1.0 - p)
    if c >= mean:  # terms k = c+1 .. c+reach, each pmf(k+1) = pmf(k) (n-k)/(k+1) p/q
        start, end = c + 1, min(n, c + reach)
        steps = [(n - k) / (k + 1) * ratio for k in range(start, end)]
    else:  # terms k = c-1 .. c-reach, each pmf(k-1) = pmf(k) k/(n-k+1) q/p
        start, end = c - 1, max(0, c - reach)
        steps = [k / ((n - k + 1) * ratio) for k in range(start, end, -1)]
    first = math.exp(math.lgamma(n + 1) - math.lgamma(start + 1) - math.lgamma(n - start + 1)
                     + start * math.log(p) + (n - start) * math.log1p(-p))
    total = sum(map(operator.mul, range(1, len(steps) + 2), itertools.accumulate(steps, operator.mul, initial=first)))
    return total if c >= mean else max(0.0, mean - c + total)


@dataclass(frozen=True)
class ExpectedRouting:
    tokens: int
    top_k: int
    capacity: int | None  # slots per expert per batch; None = no limit (dropless)
    router_prob: tuple  # P_i: mean router probability of each expert
    inclusion: tuple  # q_i: chance a token picks expert i
    fractions: tuple  # f_i = q_i / k: expected fraction of the assignments
    requests: tuple  # E[N_i] = T q_i: tokens sent to each expert
    dropped: tuple  # E[(N_i - C)+]: of those, dropped
    kept: tuple  # requests - dropped
    dropped_fraction: float  # sum dropped / (T k)
    wasted_capacity_fraction: float | None  # 1 - sum kept / (E C); None without a limit
    balance_loss: float  # E * sum f_i P_i, 1 when balanced, up to E when collapsed (Switch, alpha = 1)
    busiest_vs_mean: float  # max requests / (T k / E): the busiest expert's load against the average


def expected_routing(tokens, router_prob, top_k=1, capacity=None):
    """Expected requests, drops and balancing loss of one batch of ``tokens`` tokens routed top-k by
    a router with mean probabilities ``router_prob`` to experts with ``capacity`` slots each (None:
    no limit). See the comment above for the model."""
    tokens = positive_int("tokens", tokens)
    q = inclusion_probabilities(router_prob, top_k)
    experts, top_k = len(q), int(top_k)
    total = sum(router_prob)
    prob = tuple(p / total for p in router_prob)
    if capacity is not None:
        capacity = non_negative_int("capacity", capacity)
    requests = tuple(tokens * qi for qi in q)
    if capacity is None:
        dropped = (0.0,) * experts
    else:
        overflow = {qi: _overflow(tokens, qi, capacity) for qi in set(q)}  # experts sharing a q: once
        dropped = tuple(map(overflow.__getitem__, q))
    kept = tuple(map(operator.sub, requests, dropped))
    assignments = tokens * top_k
    fractions = tuple(qi / top_k for qi in q)
    wasted = None if not capacity else 1.0 - sum(kept) / (experts * capacity)
    balance = experts * sum(map(operator.mul, fractions, prob))  # load_balancing_loss(f, P, alpha=1)
    return ExpectedRouting(
        tokens, top_k, capacity, prob, q, fractions, requests, dropped, kept,
        min(1.0, sum(dropped) / assignments), wasted, balance, max(requests) * experts / assignments,
    )


@dataclass(frozen=True)
class CollapseRecord:
    """One step of ``expected_collapse``. Experts that start on the same level stay equal, so the
    run is kept per level; the per-expert views expand it."""
    step: int
    level: tuple  # each expert's level (router_levels)
    level_sizes: tuple  # experts on each level
    level_bias: tuple
    level_prob: tuple  # P of one expert of each level
    level_fractions: tuple  # f = q / k of one expert of each level
    balance_loss: float  # E * sum f_i P_i (multiply by alpha for the loss the optimizer sees)

    @property
    def bias(self):
        return tuple(map(self.level_bias.__getitem__, self.level))

    @property
    def router_prob(self):
        return tuple(map(self.level_prob.__getitem__, self.level))

    @property
    def fractions(self):
        return tuple(map(self.level_fractions.__getitem__, self.level))


def expected_collapse(steps, experts, top_k=1, *, skew=0.0, alpha=0.01, collapse_rate=0.005, lr=25.0,
                      max_bias_step=0.5):
    """Steps 0..``steps`` of ``collapse_step``'s toy dynamic in expectation (f and P as in
    ``expected_routing`` instead of a sampled batch), from the bias ``router_bias(experts, skew)``:
    b_j += clip(lr * E * [collapse_rate * (f_j - 1/E) - alpha * E * P_j (f_j - sum_i f_i P_i)]),
    the rich-get-richer pull against the gradient of alpha * E * sum f_i P_i through P (f held
    constant, as in Switch), each step clipped to +-max_bias_step. ``lr`` is per expert
    (``collapse_step``'s lr / E), so the pace does not depend on E. Near balance the loss wins iff
    alpha > collapse_rate; far from it the loss's pull on the cold experts fades with their P_j."""
    steps = non_negative_int("steps", steps)
    at_most("steps", steps, MAX_COLLAPSE_STEPS)
    experts = positive_int("experts", experts)
    top_k = _check_top_k(top_k, experts)
    non_negative("skew", skew)
    at_most("skew", skew, 50)
    for name, value in (("alpha", alpha), ("collapse_rate", collapse_rate)):
        non_negative(name, value)
    positive("lr", lr)
    positive("max_bias_step", max_bias_step)
    history = _collapse_history(experts, top_k, float(skew), float(alpha), float(collapse_rate), float(lr),
                                float(max_bias_step))
    while len(history) <= steps:  # extend the cached run: one more step costs one step
        history.append(_collapse_next(history[-1], experts, top_k, alpha, collapse_rate, lr, max_bias_step))
    return tuple(history[:steps + 1])


@functools.lru_cache(maxsize=32)
def _collapse_history(experts, top_k, skew, alpha, collapse_rate, lr, max_bias_step):
    """The run's records so far, a list ``expected_collapse`` extends (each record depends only on
    the one before, so a cached prefix is the same whichever step was asked first)."""
    z, level = router_levels(experts)
    sizes = tuple(level.count(l) for l in range(len(z)))
    return [_collapse_record(0, level, sizes, tuple(skew * zl for zl in z), top_k)]


def _collapse_record(step, level, sizes, bias, top_k):
    top = max(bias)
    weights = [math.exp(b - top) for b in bias]
    inverse = 1.0 / sum(map(operator.mul, weights, sizes))
    prob = [w * inverse for w in weights]
    f = [qi / top_k for qi in _inclusion(prob, sizes, top_k)]
    loss = len(level) * sum(map(operator.mul, map(operator.mul, f, prob), sizes))
    return CollapseRecord(step, level, sizes, tuple(bias), tuple(prob), tuple(f), loss)


def _collapse_next(record, experts, top_k, alpha, collapse_rate, lr, max_bias_step):
    rate, pull, mean = lr * experts * collapse_rate, lr * experts * experts * alpha, 1.0 / experts
    loss_per_e = record.balance_loss / experts  # sum f_i P_i
    bias = []
    for b, f, p in zip(record.level_bias, record.level_fractions, record.level_prob):
        delta = rate * (f - mean) - pull * p * (f - loss_per_e)
        bias.append(b + max(-max_bias_step, min(max_bias_step, delta)))
    return _collapse_record(record.step + 1, record.level, record.level_sizes, bias, top_k)
