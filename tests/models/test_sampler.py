import math
import random
from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from models import sampler as S


def _oracle(n, replicas, epoch, seed, shuffle, drop_last):
    """torch DistributedSampler.__iter__ restated with numpy (same stdlib permutation)."""
    base = list(range(n))
    if shuffle:
        random.Random(seed + epoch).shuffle(base)
    if drop_last and n % replicas:
        per_rank = math.ceil((n - replicas) / replicas)
    else:
        per_rank = math.ceil(n / replicas)
    total = per_rank * replicas
    order = np.resize(np.array(base), total) if total else np.array([], dtype=int)  # cyclic padding
    return [tuple(int(x) for x in order[r:total:replicas]) for r in range(replicas)]


def test_hand_example_padding():
    # 10 samples on 4 ranks: 3 each, total 12, padded with indices 0 and 1.
    assert S.epoch_indices(10, 4, shuffle=False) == ((0, 4, 8), (1, 5, 9), (2, 6, 0), (3, 7, 1))
    assert S.samples_per_rank(10, 4) == 3


def test_hand_example_drop_last():
    # ceil((10 - 4) / 4) = 2 each; samples 8 and 9 are dropped.
    assert S.epoch_indices(10, 4, shuffle=False, drop_last=True) == ((0, 4), (1, 5), (2, 6), (3, 7))
    r = S.epoch_report(10, 4, shuffle=False, drop_last=True)
    assert r.missing_samples == (8, 9) and r.dropped_by_drop_last == 2 and r.unexpected_duplicates == 0


def test_tiny_dataset_pads_repeatedly_or_drops_everything():
    assert S.epoch_indices(3, 8, shuffle=False) == tuple((r % 3,) for r in range(8))
    assert S.epoch_indices(3, 8, shuffle=False, drop_last=True) == ((),) * 8


@settings(max_examples=150, deadline=None)
@given(
    st.integers(min_value=1, max_value=300),
    st.integers(min_value=1, max_value=16),
    st.integers(min_value=0, max_value=50),
    st.integers(min_value=0, max_value=2**31),
    st.booleans(),
    st.booleans(),
)
def test_matches_torch_semantics_oracle(n, replicas, epoch, seed, shuffle, drop_last):
    got = S.epoch_indices(n, replicas, epoch=epoch, seed=seed, shuffle=shuffle, drop_last=drop_last)
    assert list(got) == _oracle(n, replicas, epoch, seed, shuffle, drop_last)
    assert all(len(row) == S.samples_per_rank(n, replicas, drop_last=drop_last) for row in got)
    for rank in (0, replicas - 1):
        assert S.rank_indices(n, replicas, rank, epoch=epoch, seed=seed, shuffle=shuffle, drop_last=drop_last) == got[rank]


@settings(max_examples=150, deadline=None)
@given(
    st.integers(min_value=1, max_value=300),
    st.integers(min_value=1, max_value=16),
    st.integers(min_value=0, max_value=50),
    st.booleans(),
)
def test_correct_sampler_partitions_the_dataset(n, replicas, epoch, drop_last):
    r = S.epoch_report(n, replicas, epoch=epoch, seed=3, drop_last=drop_last)
    counts = Counter(i for row in r.per_rank for i in row)
    if drop_last:
        assert max(counts.values(), default=1) == 1  # disjoint
        assert len(r.missing_samples) == r.dropped_by_drop_last == n - r.draws
        assert r.dropped_by_drop_last < replicas
    else:
        assert set(counts) == set(range(n))  # the union is the epoch
        assert r.missing_samples == ()
        assert r.duplicate_draws == r.padding_draws < replicas  # only padding repeats
    assert r.unexpected_duplicates == 0


@settings(max_examples=100, deadline=None)
@given(st.integers(min_value=2, max_value=300), st.integers(min_value=2, max_value=16))
def test_no_rank_offset_duplicates_and_misses(n, replicas):
    r = S.epoch_report(n, replicas, variant="no_rank_offset", drop_last=True)
    per = S.samples_per_rank(n, replicas, drop_last=True)
    assert all(row == r.per_rank[0] for row in r.per_rank)
    assert r.unique_samples == per
    assert r.duplicate_draws == r.unexpected_duplicates == (replicas - 1) * per
    assert len(r.missing_samples) == n - per


def test_article_two_ranks_same_shard_half_data_double_weight():
    # "two ranks draw the same shard - you are then training on half your data at double weight"
    r = S.epoch_report(1000, 2, variant="no_rank_offset")
    counts = Counter(i for row in r.per_rank for i in row)
    assert r.unique_samples == 500 and set(counts.values()) == {2}
    assert len(r.missing_samples) == 500
    assert r.draws == 1000  # every other number "looks normal"


def test_epoch_not_set_repeats_the_order():
    broken = S.epochs_report(100, 4, 3, variant="epoch_not_set", seed=7)
    correct = S.epochs_report(100, 4, 3, seed=7)
    assert [r.same_order_as_previous_epoch for r in broken] == [None, True, True]
    assert [r.same_order_as_previous_epoch for r in correct] == [None, False, False]
    assert broken[0].per_rank == correct[0].per_rank  # epoch 0 is identical either way
    assert all(r.unexpected_duplicates == 0 and r.missing_samples == () for r in broken)  # each epoch is fine


def test_deterministic_in_seed_and_epoch():
    a = S.epoch_indices(50, 4, epoch=2, seed=11)
    assert a == S.epoch_indices(50, 4, epoch=2, seed=11)
    assert a != S.epoch_indices(50, 4, epoch=3, seed=11)
    assert S.epoch_indices(50, 4, epoch=2, seed=11) == S.epoch_indices(50, 4, epoch=0, seed=13)  # seed + epoch


@pytest.mark.parametrize(
    "call, name",
    [
        (lambda: S.epoch_indices(0, 4), "dataset_len"),
        (lambda: S.epoch_indices(10**30, 4), "dataset_len"),
        (lambda: S.epoch_indices(10, 0), "num_replicas"),
        (lambda: S.epoch_indices(10, 10**12), "num_replicas"),
        (lambda: S.epoch_indices(10, 4, epoch=-1), "epoch"),
        (lambda: S.epoch_indices(10, 4, seed=1.5), "seed"),
        (lambda: S.epoch_indices(10, 4, variant="broken"), "variant"),
        (lambda: S.rank_indices(10, 4, 4), "rank"),
        (lambda: S.rank_indices(10, 4, -1), "rank"),
        (lambda: S.epochs_report(10, 4, 0), "epochs"),
        (lambda: S.samples_per_rank(10, 0), "num_replicas"),
    ],
)
def test_rejects_nonsense(call, name):
    with pytest.raises(ValueError) as err:
        call()
    assert str(err.value).startswith(name)
