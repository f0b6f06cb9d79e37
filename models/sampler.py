"""Which samples each data-parallel rank sees: torch's DistributedSampler, and two ways to break it.

What it models
--------------
The index arithmetic of ``torch.utils.data.distributed.DistributedSampler`` (torch/utils/data/
distributed.py): per-rank ``num_samples = ceil(len / R)`` (or ``ceil((len - R) / R)`` with
``drop_last`` when R does not divide len), ``total_size = num_samples * R``; shuffle with a seed
of ``seed + epoch``; without ``drop_last`` pad by repeating indices from the start of the
(shuffled) list, with it cut the tail; rank r takes ``indices[r:total_size:R]``.

One deliberate difference: torch shuffles with ``torch.randperm`` on a ``torch.Generator``
seeded with ``seed + epoch``; this module uses ``random.Random(seed + epoch).shuffle`` (standard
library only), so the orders differ from torch's but have the same structure: deterministic in
(seed, epoch), identical on every rank, different between epochs.

Broken variants a reader can switch on (reference article, "What the global batch is actually
made of" and Figure 04):
* ``"no_rank_offset"``: every rank takes ``indices[0::R]``, as if ``rank`` were never passed:
  each sample of that slice is trained R times, the rest never.
* ``"epoch_not_set"``: ``set_epoch`` is never called, so the epoch stays 0 and every epoch
  repeats the same order.

What it does not model
----------------------
DataLoader workers, batching beyond the per-rank index list, resuming mid-epoch, or
dataset-specific samplers (weighted, length-grouped).
"""
import math
import random
from collections import Counter
from dataclasses import dataclass
from itertools import repeat

from models._validate import at_most, choice, non_negative_int, positive_int

VARIANTS = ("correct", "no_rank_offset", "epoch_not_set")
MAX_DATASET_LEN = 1_000_000  # every index is materialised; keeps a figure update fast


def _check_common(dataset_len, num_replicas, seed, epoch, variant):
    positive_int("dataset_len", dataset_len)
    at_most("dataset_len", dataset_len, MAX_DATASET_LEN)
    positive_int("num_replicas", num_replicas)
    at_most("num_replicas", num_replicas, MAX_DATASET_LEN)
    non_negative_int("seed", seed)
    non_negative_int("epoch", epoch)
    choice("variant", variant, VARIANTS)


def samples_per_rank(dataset_len, num_replicas, *, drop_last=False):
    """DistributedSampler.num_samples: ceil(len/R), or ceil((len-R)/R) with drop_last when R does not divide len."""
    positive_int("dataset_len", dataset_len)
    positive_int("num_replicas", num_replicas)
    if drop_last and dataset_len % num_replicas != 0:
        return max(0, math.ceil((dataset_len - num_replicas) / num_replicas))
    return math.ceil(dataset_len / num_replicas)


def _global_order(dataset_len, num_replicas, *, epoch, seed, shuffle, drop_last, variant):
    """The padded/truncated index list every rank computes identically before slicing."""
    effective_epoch = 0 if variant == "epoch_not_set" else epoch
    indices = list(range(dataset_len))
    if shuffle:
        random.Random(seed + effective_epoch).shuffle(indices)
    total_size = samples_per_rank(dataset_len, num_replicas, drop_last=drop_last) * num_replicas
    if drop_last:
        return indices[:total_size], total_size
    padding = total_size - len(indices)
    if padding <= len(indices):
        indices += indices[:padding]
    else:
        indices += (indices * math.ceil(padding / len(indices)))[:padding]
    return indices, total_size


def epoch_indices(dataset_len, num_replicas, *, epoch=0, seed=0, shuffle=True, drop_last=False, variant="correct"):
    """Per-rank index lists for one epoch (a tuple of tuples, rank-major)."""
    _check_common(dataset_len, num_replicas, seed, epoch, variant)
    order, total_size = _global_order(
        dataset_len, num_replicas, epoch=epoch, seed=seed, shuffle=shuffle, drop_last=drop_last, variant=variant
    )
    if variant == "no_rank_offset":
        same = tuple(order[0:total_size:num_replicas])
        return tuple(same for _ in range(num_replicas))
    return tuple(tuple(order[r:total_size:num_replicas]) for r in range(num_replicas))


def rank_indices(dataset_len, num_replicas, rank, **kwargs):
    """The indices rank ``rank`` visits in one epoch (keywords as ``epoch_indices``)."""
    positive_int("num_replicas", num_replicas)
    non_negative_int("rank", rank)
    if rank >= num_replicas:
        raise ValueError(f"rank must be < num_replicas={num_replicas}, got {rank}")
    return epoch_indices(dataset_len, num_replicas, **kwargs)[rank]


@dataclass(frozen=True)
class EpochReport:
    epoch: int
    per_rank: tuple  # per-rank index tuples
    draws: int  # samples visited, summed over ranks
    unique_samples: int
    duplicate_draws: int  # draws - unique_samples
    padding_draws: int  # duplicates the correct sampler adds to even out ranks (drop_last=False)
    unexpected_duplicates: int  # duplicate_draws - padding_draws: > 0 means a broken sampler
    missing_samples: tuple  # dataset indices no rank visits this epoch
    dropped_by_drop_last: int  # samples the correct sampler legitimately skips (drop_last=True)
    same_order_as_previous_epoch: bool | None  # None for the first epoch reported


def epoch_report(dataset_len, num_replicas, *, epoch=0, seed=0, shuffle=True, drop_last=False, variant="correct",
                 previous=None):
    """Unique samples, duplicates and missing samples of one epoch across all ranks."""
    per_rank = epoch_indices(
        dataset_len, num_replicas, epoch=epoch, seed=seed, shuffle=shuffle, drop_last=drop_last, variant=variant
    )
    total_size = samples_per_rank(dataset_len, num_replicas, drop_last=drop_last) * num_replicas
    seen = set()
    draws = 0
    for row in per_rank:
        seen.update(row)
        draws += len(row)
    padding = 0 if drop_last else total_size - dataset_len
    dropped = dataset_len - total_size if drop_last else 0
    return EpochReport(
        epoch=epoch,
        per_rank=per_rank,
        draws=draws,
        unique_samples=len(seen),
        duplicate_draws=draws - len(seen),
        padding_draws=padding,
        unexpected_duplicates=draws - len(seen) - padding,
        missing_samples=tuple(i for i in range(dataset_len) if i not in seen),
        dropped_by_drop_last=dropped,
        same_order_as_previous_epoch=None if previous is None else per_rank == previous.per_rank,
    )


def epochs_report(dataset_len, num_replicas, epochs, **kwargs):
    """``epoch_report`` for epochs 0..epochs-1, each compared with the one before."""
    positive_int("epochs", epochs)
    at_most("epochs", epochs, 1000)
    reports, previous = [], None
    for e in range(epochs):
        previous = epoch_report(dataset_len, num_replicas, epoch=e, previous=previous, **kwargs)
        reports.append(previous)
    return tuple(reports)


# ---------------------------------------------------------------------------------------------
# Figure 04: the global batch, and an audit of what the ranks drew over several epochs
# ---------------------------------------------------------------------------------------------

MAX_AUDIT_EPOCHS = 64


def global_batch_samples(micro_batch, accumulation_steps, data_parallel):
    """Samples per optimizer step: B_global = b_micro x A x N (reference article, "What the
    global batch is actually made of"; Megatron-LM's global_batch_size = micro_batch_size x
    num_micro_batches x data_parallel_size)."""
    micro_batch = positive_int("micro_batch", micro_batch)
    accumulation_steps = positive_int("accumulation_steps", accumulation_steps)
    data_parallel = positive_int("data_parallel", data_parallel)
    return micro_batch * accumulation_steps * data_parallel


def steps_per_epoch(dataset_len, micro_batch, accumulation_steps, data_parallel):
    """Optimizer steps in one epoch: each rank's share of the epoch (``samples_per_rank``, the
    DistributedSampler's ceil(len / R)) over what it draws per step, b_micro x A. Below 1, one
    step draws more than the whole dataset (1 / this many epochs per step)."""
    per_step = positive_int("micro_batch", micro_batch) * positive_int("accumulation_steps", accumulation_steps)
    return samples_per_rank(dataset_len, data_parallel) / per_step


@dataclass(frozen=True)
class EpochStrip:
    """One epoch of the dataset as a strip of sample indices (Figure 04)."""

    epoch: int
    first_rank: tuple  # per dataset index: the rank that drew it first this epoch (earliest round, then
    #                    lowest rank: rank r's k-th draw is position k*R + r of the padded order), -1 if none
    times_drawn: tuple  # per dataset index: how many draws (over all ranks) picked it this epoch
    unique_samples: int  # indices drawn at least once this epoch
    same_order_as_previous_epoch: bool | None  # None for the first epoch shown


@dataclass(frozen=True)
class SamplerAudit:
    """What every rank drew over epochs 0..epochs-1, counted the way a data audit would."""

    strips: tuple  # one EpochStrip per epoch
    draws: int  # samples drawn over all ranks and shown epochs (what a dashboard counts)
    draws_per_rank_per_epoch: int
    draws_per_epoch: int  # over all ranks: samples_per_rank x R, the same in every variant
    unique_draws: int  # per epoch, the distinct indices drawn, summed over the epochs
    duplicated_samples: int  # draws beyond the first of the same index within one epoch
    padding_draws: int  # of those, the correct sampler's own padding (len not divisible by R)
    missing_samples: int  # per epoch, the indices no rank drew, summed over the epochs
    repeated_epochs: int  # epochs whose per-rank orders equal the previous epoch's
    unique_fraction: float  # unique_draws / draws


def sampler_audit(dataset_len, num_replicas, epochs, *, variant="correct", seed=0):
    """What every rank drew in epochs 0..epochs-1 (shuffle on, drop_last off: DistributedSampler's
    defaults), tallied per dataset index: the within-epoch duplicates, missing samples and repeated
    epochs a broken sampler leaves behind, while the number of draws stays exactly what the correct
    one makes. Counts the same draws as ``epoch_indices``, from the one padded order every rank
    slices (C-level counting: a figure audits 1,024 ranks x 4 epochs within a frame)."""
    epochs = positive_int("epochs", epochs)
    at_most("epochs", epochs, MAX_AUDIT_EPOCHS)
    _check_common(dataset_len, num_replicas, seed, 0, variant)
    per_rank = samples_per_rank(dataset_len, num_replicas)
    strips, unique, previous = [], 0, None
    for epoch in range(epochs):
        order, total = _global_order(dataset_len, num_replicas, epoch=epoch, seed=seed, shuffle=True,
                                     drop_last=False, variant=variant)
        if variant == "no_rank_offset":  # every rank takes rank 0's slice: rank 0 draws each first
            drawn = order[0:total:num_replicas]  # what decides every rank's list
            counts = Counter(drawn * num_replicas)
            first = dict.fromkeys(drawn, 0)
        else:  # position p is rank p % R's draw; the earliest position of an index is written last
            drawn = order
            counts = Counter(order)
            first = dict(zip(reversed(order), reversed(list(range(num_replicas)) * per_rank)))
        strips.append(EpochStrip(epoch, tuple(map(first.get, range(dataset_len), repeat(-1))),
                                 tuple(map(counts.get, range(dataset_len), repeat(0))), len(counts),
                                 None if previous is None else drawn == previous))
        unique += len(counts)
        previous = drawn
    draws = epochs * per_rank * num_replicas
    return SamplerAudit(
        strips=tuple(strips),
        draws=draws,
        draws_per_rank_per_epoch=per_rank,
        draws_per_epoch=per_rank * num_replicas,
        unique_draws=unique,
        duplicated_samples=draws - unique,
        padding_draws=epochs * (per_rank * num_replicas - dataset_len),
        missing_samples=epochs * dataset_len - unique,
        repeated_epochs=sum(1 for strip in strips if strip.same_order_as_previous_epoch),
        unique_fraction=unique / draws,
    )
