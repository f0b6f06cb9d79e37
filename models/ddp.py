"""PyTorch DDP gradient bucketing and the backward/communication timeline (Figure 05).

What it models
--------------
* Bucket assignment as in PyTorch's ``compute_bucket_assignment_by_size``
  (torch/csrc/distributed/c10d/reducer.cpp): walk the parameters in order, add each to the open
  bucket, and close the bucket once its size reaches the current limit; the limits are
  ``[first_bucket_cap_bytes, bucket_cap_bytes]`` (the last one repeats). A bucket can therefore
  exceed its cap by up to one parameter.
    - ``find_unused_parameters=False`` (default): after the first iteration DDP rebuilds its
      buckets in the order gradients actually arrived (``Reducer::rebuild_buckets``), i.e.
      reverse registration order for a sequential model, so the FIRST bucket to fire is the
      small 1 MiB one (``dist._DEFAULT_FIRST_BUCKET_BYTES``). This module models that steady state.
    - ``find_unused_parameters=True``: buckets are never rebuilt; the construction-time
      assignment walks registration order and the bucket list is then reversed
      (torch/nn/parallel/distributed.py ``_ddp_init_helper``), so the small bucket holds the
      first-registered parameters and fires LAST.
  ``bucket_cap_mb`` is in MiB: DDP computes ``bucket_bytes_cap = int(bucket_cap_mb * 1024 * 1024)``.
* The backward pass runs layers in reverse registration order; a layer's gradient is ready when
  its backward finishes. A bucket's AllReduce launches when its last gradient is ready and every
  earlier bucket has launched (the reducer launches buckets strictly in order), and runs on one
  serial communication stream; its duration is ``collectives.time_s("allreduce", ...)``.
* ``no_sync`` gradient accumulation, unused parameters (hang vs ``find_unused_parameters``),
  and a straggler rank whose backward is slower.

What it does not model
----------------------
Several tensors per layer (each layer is one parameter tensor here), mixed dtypes (one bucket
per dtype/device in PyTorch), static_graph, comm hooks, gradient_as_bucket_view copies, the
interference of the collective with backward compute (see ``models.overlap``), or the forward
pass beyond an optional fixed ``forward_s``.
"""
import math
from dataclasses import dataclass

from models import collectives
from models._validate import non_negative, positive, positive_int

MiB = 2**20
DEFAULT_BUCKET_CAP_MB = 25  # torch.nn.parallel.DistributedDataParallel(bucket_cap_mb=25)
FIRST_BUCKET_CAP_BYTES = 1 * MiB  # torch.distributed._DEFAULT_FIRST_BUCKET_BYTES = 1024 * 1024


@dataclass(frozen=True)
class Layer:
    param_bytes: float  # gradient bytes this layer contributes (one tensor)
    backward_s: float  # its backward compute time on a normal rank
    name: str = ""


@dataclass(frozen=True)
class Bucket:
    index: int  # launch order: bucket 0 fires first
    layers: tuple  # registration indices of the layers it holds, in the order they were added
    size_bytes: float
    cap_bytes: float
    ready_s: float | None  # when its last gradient is ready (None: never)
    start_s: float | None  # when its AllReduce starts on the comm stream (None: never)
    finish_s: float | None
    comm_s: float  # AllReduce duration once started


@dataclass(frozen=True)
class BackwardTimeline:
    status: str  # "ok", or "hang" when a bucket can never launch
    buckets: tuple
    layer_ready_s: tuple  # per layer in registration order: gradient ready time (None: unused)
    backward_start_s: float  # after the optional unused-parameter graph traversal
    backward_end_s: float  # slowest rank
    comm_end_s: float | None
    exposed_comm_s: float | None  # communication still running after the backward ends
    total_comm_s: float  # sum of bucket AllReduce durations
    stuck_buckets: tuple  # indices of buckets that never launch (status "hang")
    message: str


def _as_layers(layers):
    if not isinstance(layers, (list, tuple)) or not layers:
        raise ValueError(f"layers must be a non-empty list of (param_bytes, backward_s), got {layers!r}")
    out = []
    for i, layer in enumerate(layers):
        if isinstance(layer, Layer):
            param_bytes, backward_s, name = layer.param_bytes, layer.backward_s, layer.name
        elif isinstance(layer, (list, tuple)) and len(layer) == 2:
            (param_bytes, backward_s), name = layer, ""
        else:
            raise ValueError(f"layers[{i}] must be a Layer or (param_bytes, backward_s), got {layer!r}")
        non_negative(f"layers[{i}].param_bytes", param_bytes)
        non_negative(f"layers[{i}].backward_s", backward_s)
        out.append(Layer(param_bytes, backward_s, name))
    if not math.isfinite(sum(float(layer.param_bytes) for layer in out)):
        raise ValueError("layers: total param_bytes overflows a float")
    return out


def bucket_cap_bytes(bucket_cap_mb):
    """DDP: ``bucket_bytes_cap = int(bucket_cap_mb * 1024 * 1024)`` (torch/nn/parallel/distributed.py)."""
    positive("bucket_cap_mb", bucket_cap_mb)
    cap = bucket_cap_mb * MiB
    if not math.isfinite(cap):
        raise ValueError(f"bucket_cap_mb is too large, got {bucket_cap_mb!r}")
    return float(cap)


def _greedy_buckets(order, sizes, limits):
    """PyTorch compute_bucket_assignment_by_size: close a bucket once size >= its limit."""
    buckets, current, size, limit_index = [], [], 0.0, 0
    caps = []
    for i in order:
        current.append(i)
        size += sizes[i]
        if size >= limits[limit_index]:
            buckets.append(tuple(current))
            caps.append(limits[limit_index])
            current, size = [], 0.0
            limit_index = min(limit_index + 1, len(limits) - 1)
    if current:
        buckets.append(tuple(current))
        caps.append(limits[limit_index])
    return buckets, caps


def assign_buckets(
    param_bytes,
    *,
    bucket_cap_mb=DEFAULT_BUCKET_CAP_MB,
    first_bucket_cap_bytes=FIRST_BUCKET_CAP_BYTES,
    find_unused_parameters=False,
):
    """Buckets in launch order, each a tuple of registration indices (module docstring).

    ``param_bytes[i]`` is the gradient size of parameter i in registration order.
    Returns (buckets, caps): caps[b] is the size limit that closed (or would close) bucket b.
    """
    if not isinstance(param_bytes, (list, tuple)) or not param_bytes:
        raise ValueError(f"param_bytes must be a non-empty list, got {param_bytes!r}")
    for i, b in enumerate(param_bytes):
        non_negative(f"param_bytes[{i}]", b)
    cap = bucket_cap_bytes(bucket_cap_mb)
    positive("first_bucket_cap_bytes", first_bucket_cap_bytes)
    limits = [float(first_bucket_cap_bytes), cap]
    n = len(param_bytes)
    if find_unused_parameters:
        # Construction-time assignment in registration order, then reversed (never rebuilt).
        buckets, caps = _greedy_buckets(range(n), param_bytes, limits)
        return tuple(reversed(buckets)), tuple(reversed(caps))
    # Rebuilt after iteration 1 in gradient-arrival order = reverse registration order.
    buckets, caps = _greedy_buckets(range(n - 1, -1, -1), param_bytes, limits)
    return tuple(buckets), tuple(caps)


def backward_timeline(
    layers,
    *,
    ranks,
    alpha_s,
    bandwidth_bytes_per_s,
    bucket_cap_mb=DEFAULT_BUCKET_CAP_MB,
    first_bucket_cap_bytes=FIRST_BUCKET_CAP_BYTES,
    find_unused_parameters=False,
    unused_layers=(),
    traversal_s=0.0,
    straggler_slowdown=0.0,
    algorithm="ring",
):
    """Backward compute and bucketed AllReduce timeline of one DDP iteration.

    ``layers``: (param_bytes, backward_s) or ``Layer`` per layer, in registration (forward) order.
    ``unused_layers``: registration indices whose gradient is never produced this step (their
    backward does not run either). With
    ``find_unused_parameters=False`` the bucket holding one never becomes ready, so it and every
    later bucket never launch: status "hang" (the reduction never finishes; see ``message``).
    With True, DDP traverses the graph after the forward (``traversal_s``) and marks unused
    parameters ready when the first gradient hook fires (reducer.cpp autograd_hook,
    ``has_marked_unused_parameters_``).
    ``straggler_slowdown``: one rank's backward takes (1 + s) times longer; an AllReduce can only
    start when every rank has launched it, so all ranks follow the slowest one.
    Times are seconds from the start of the backward pass.
    """
    items = _as_layers(layers)
    positive_int("ranks", ranks)
    non_negative("traversal_s", traversal_s)
    non_negative("straggler_slowdown", straggler_slowdown)
    unused = _check_unused(unused_layers, len(items))
    buckets, caps = assign_buckets(
        [layer.param_bytes for layer in items],
        bucket_cap_mb=bucket_cap_mb,
        first_bucket_cap_bytes=first_bucket_cap_bytes,
        find_unused_parameters=find_unused_parameters,
    )
    slow = 1.0 + float(straggler_slowdown)
    start = float(traversal_s) if find_unused_parameters else 0.0

    # Backward runs the last-registered layer first.
    ready = [None] * len(items)
    t = start
    first_hook_s = None
    for i in range(len(items) - 1, -1, -1):
        if i in unused:
            continue  # the branch did not run: no backward compute, no gradient
        t += items[i].backward_s * slow
        ready[i] = t
        if first_hook_s is None:
            first_hook_s = t
    backward_end_s = t
    if not math.isfinite(backward_end_s):
        raise ValueError("layers: total backward_s (times straggler_slowdown) overflows a float")
    if find_unused_parameters:
        for i in unused:
            # Marked ready at the first hook; if no gradient at all arrives, at the backward's end.
            ready[i] = first_hook_s if first_hook_s is not None else backward_end_s

    allreduce_s = collectives.cost_function(
        "allreduce", ranks, alpha_s=alpha_s, bandwidth_bytes_per_s=bandwidth_bytes_per_s, algorithm=algorithm
    )
    out, prev_launch, prev_finish, total_comm = [], start, start, 0.0
    stuck = []
    for b, (members, cap) in enumerate(zip(buckets, caps)):
        size = float(sum(items[i].param_bytes for i in members))
        comm = allreduce_s(size)
        total_comm += comm
        member_ready = [ready[i] for i in members]
        if stuck or any(r is None for r in member_ready):
            stuck.append(b)
            never_ready = any(r is None for r in member_ready)
            out.append(Bucket(b, members, size, cap, None if never_ready else max(member_ready), None, None, comm))
            continue
        bucket_ready = max(member_ready)
        launch = max(bucket_ready, prev_launch)  # buckets launch strictly in order
        begin = max(launch, prev_finish)  # one serial communication stream
        finish = begin + comm
        out.append(Bucket(b, members, size, cap, bucket_ready, begin, finish, comm))
        prev_launch, prev_finish = launch, finish

    layer_ready = tuple(ready)
    if stuck:
        first = stuck[0]
        culprits = sorted(i for i in buckets[first] if ready[i] is None)
        return BackwardTimeline(
            "hang", tuple(out), layer_ready, start, backward_end_s, None, None, total_comm, tuple(stuck),
            f"bucket {first} waits for the gradient of unused layer(s) {culprits}, which never arrives: "
            f"buckets {stuck} never launch, so the reduction never finishes (PyTorch raises "
            f"'Expected to have finished reduction in the prior iteration' at the next forward, or hangs "
            f"if ranks disagree on which parameters are unused); set find_unused_parameters=True",
        )
    exposed = max(0.0, prev_finish - backward_end_s)
    return BackwardTimeline(
        "ok", tuple(out), layer_ready, start, backward_end_s, prev_finish, exposed, total_comm, (), "",
    )


def _check_unused(unused_layers, count):
    if not isinstance(unused_layers, (list, tuple, set, frozenset)):
        raise ValueError(f"unused_layers must be a collection of layer indices, got {unused_layers!r}")
    out = set()
    for i in unused_layers:
        if isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < count:
            raise ValueError(f"unused_layers must hold layer indices in [0, {count - 1}], got {i!r}")
        out.add(i)
    return out


@dataclass(frozen=True)
class StragglerResult:
    baseline: BackwardTimeline  # every rank at normal speed
    with_straggler: BackwardTimeline
    delay_s: float  # how much later everyone's communication ends
    fast_rank_idle_s: float  # a normal rank's wait after its own backward ends


def straggler_effect(layers, straggler_slowdown, **kwargs):
    """One slow rank delays every rank: the AllReduce completes when its last participant arrives."""
    non_negative("straggler_slowdown", straggler_slowdown)
    base = backward_timeline(layers, **kwargs)
    slow = backward_timeline(layers, straggler_slowdown=straggler_slowdown, **kwargs)
    if base.status != "ok" or slow.status != "ok":
        raise ValueError("layers/unused_layers make the step hang; straggler_effect needs a step that completes")
    fast_backward_end = base.backward_end_s
    return StragglerResult(
        base,
        slow,
        slow.comm_end_s - base.comm_end_s,
        max(slow.comm_end_s, slow.backward_end_s) - fast_backward_end,
    )


@dataclass(frozen=True)
class AccumulationResult:
    microbatches: int
    no_sync: bool
    reductions: int  # gradient AllReduce passes per optimizer step
    step_s: float  # forward + backward of every microbatch, plus exposed communication
    comm_s: float  # total AllReduce time issued (hidden or not)
    exposed_comm_s: float
    bytes_reduced: float  # gradient bytes reduced per optimizer step


def accumulation_step(layers, microbatches, *, no_sync=True, forward_s=0.0, **kwargs):
    """Gradient accumulation over ``microbatches``: with ``no_sync()`` the hooks are suppressed
    on all but the last microbatch, so one reduction per optimizer step instead of k
    (torch DistributedDataParallel.no_sync docs; reference article, "DDP internals")."""
    positive_int("microbatches", microbatches)
    if microbatches > 10**9:
        raise ValueError(f"microbatches must be <= 1000000000, got {microbatches}")
    non_negative("forward_s", forward_s)
    timeline = backward_timeline(layers, **kwargs)
    if timeline.status != "ok":
        raise ValueError(timeline.message)
    reductions = 1 if no_sync else microbatches
    backward_s = timeline.backward_end_s - timeline.backward_start_s
    # Under no_sync DDP skips prepare_for_backward, so no unused-parameter traversal either.
    quiet = forward_s + backward_s
    loud = forward_s + timeline.backward_end_s + timeline.exposed_comm_s
    step = (microbatches - reductions) * quiet + reductions * loud
    grad_bytes = sum(b.size_bytes for b in timeline.buckets)
    return AccumulationResult(
        microbatches,
        no_sync,
        reductions,
        step,
        reductions * timeline.total_comm_s,
        reductions * timeline.exposed_comm_s,
        reductions * grad_bytes,
    )


# ---------------------------------------------------------------------------------------------
# Figure 05: a model of equal layers, and how much of its bucketed communication hides
# ---------------------------------------------------------------------------------------------

GRAD_BYTES_BF16 = 2  # bytes per gradient element in bf16 (the article's "2Psi" gradient bytes)
MAX_LAYERS = 4096  # a figure draws every layer


def uniform_layers(params, layers, backward_s, *, grad_bytes_per_param=GRAD_BYTES_BF16):
    """``layers`` equal layers (one gradient tensor each) holding ``params`` parameters and
    sharing ``backward_s`` of backward compute: the ``layers`` argument of ``backward_timeline``."""
    positive("params", params)
    positive_int("layers", layers)
    if layers > MAX_LAYERS:
        raise ValueError(f"layers must be <= {MAX_LAYERS}, got {layers}")
    positive("backward_s", backward_s)
    positive("grad_bytes_per_param", grad_bytes_per_param)
    param_bytes = float(params) * grad_bytes_per_param / layers
    if not math.isfinite(param_bytes * layers):
        raise ValueError("params is too large: the gradient bytes overflow a float")
    return (Layer(param_bytes, float(backward_s) / layers),) * int(layers)


@dataclass(frozen=True)
class UniformStep:
    """``backward_timeline`` of equal layers, kept as columns (one entry per bucket, launch
    order) so that a figure with a thousand buckets builds no object per bucket."""

    layer_bytes: float  # gradient bytes of one layer
    layer_backward_s: float
    bucket_layers: tuple  # how many layers each bucket holds
    size_bytes: tuple
    backward_start_s: tuple  # the backward of its first layer starts (the previous bucket's ready time)
    backward_s: tuple  # its layers' backward, back to back: layers x layer_backward_s
    ready_s: tuple  # its last gradient is ready: the backward of its last layer ends
    start_s: tuple  # its AllReduce starts (buckets launch in order on one stream)
    finish_s: tuple
    comm_s: tuple
    latency_s: float  # the alpha part of one bucket's AllReduce: 2(N-1) alpha on a ring
    backward_end_s: float
    comm_end_s: float
    exposed_comm_s: float  # communication still running after the backward ends
    total_comm_s: float  # sum of the bucket AllReduce times
    latency_total_s: float  # buckets x latency_s: what tiny buckets pay again and again
    overlap_fraction: float  # 1 - exposed / total: the share hidden under the backward pass


def _layers_to_reach(limit_bytes, layer_bytes):
    """Fewest equal layers whose bytes reach ``limit_bytes`` (at least one): where the greedy
    assignment closes a bucket."""
    count = max(1, math.ceil(limit_bytes / layer_bytes))
    while count > 1 and (count - 1) * layer_bytes >= limit_bytes:
        count -= 1
    while count * layer_bytes < limit_bytes:
        count += 1
    return count


def uniform_step(params, layers, backward_s, *, ranks, alpha_s, bandwidth_bytes_per_s,
                 bucket_cap_mb=DEFAULT_BUCKET_CAP_MB, first_bucket_cap_bytes=FIRST_BUCKET_CAP_BYTES,
                 grad_bytes_per_param=GRAD_BYTES_BF16, algorithm="ring"):
    """The steady-state DDP step of ``uniform_layers(params, layers, backward_s)``, equal to
    ``backward_timeline`` of those layers (same bucket rule: reverse order, close a bucket once it
    reaches 1 MiB, then the cap), in O(buckets): the first bucket takes the fewest layers reaching
    the first cap, each later one the fewest reaching the cap, the last one what is left."""
    model = uniform_layers(params, layers, backward_s, grad_bytes_per_param=grad_bytes_per_param)
    size, per_layer_s = model[0].param_bytes, model[0].backward_s
    positive("first_bucket_cap_bytes", first_bucket_cap_bytes)
    first = min(layers, _layers_to_reach(first_bucket_cap_bytes, size))
    step = _layers_to_reach(bucket_cap_bytes(bucket_cap_mb), size)
    full, rest = divmod(layers - first, step)
    counts = (first,) + (step,) * full + ((rest,) if rest else ())
    allreduce_s = collectives.cost_function("allreduce", ranks, alpha_s=alpha_s,
                                            bandwidth_bytes_per_s=bandwidth_bytes_per_s, algorithm=algorithm)
    durations = {count: allreduce_s(count * size) for count in set(counts)}
    done, ready = 0, []
    for count in counts:
        done += count
        ready.append(done * per_layer_s)
    comm, starts, finishes, free = [durations[c] for c in counts], [], [], 0.0
    for at, duration in zip(ready, comm):  # buckets are ready in launch order: one serial stream
        begin = at if at > free else free
        free = begin + duration
        starts.append(begin)
        finishes.append(free)
    backward_end_s = ready[-1]
    total = math.fsum(comm)
    exposed = max(0.0, free - backward_end_s)
    latency_s = allreduce_s(0)
    return UniformStep(
        layer_bytes=size, layer_backward_s=per_layer_s, bucket_layers=counts,
        size_bytes=tuple(c * size for c in counts), backward_start_s=(0.0,) + tuple(ready[:-1]),
        backward_s=tuple(c * per_layer_s for c in counts), ready_s=tuple(ready), start_s=tuple(starts),
        finish_s=tuple(finishes), comm_s=tuple(comm), latency_s=latency_s, backward_end_s=backward_end_s,
        comm_end_s=free, exposed_comm_s=exposed, total_comm_s=total, latency_total_s=len(counts) * latency_s,
        overlap_fraction=max(0.0, 1.0 - exposed / total) if total > 0 else 1.0,
    )
