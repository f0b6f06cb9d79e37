"""Figure 04's model: the global batch product and the per-index audit of what ranks drew."""
from collections import Counter

import pytest
from hypothesis import given, settings, strategies as st

from models import sampler as S


def test_global_batch_article_example():
    # Reference article: b_micro = 4, A = 8, N = 64 give 2048 sequences per optimizer step.
    assert S.global_batch_samples(4, 8, 64) == 2048
    assert S.global_batch_samples(1, 1, 1) == 1


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 4096), st.integers(1, 64), st.integers(1, 64), st.integers(1, 1024))
def test_steps_per_epoch_times_a_step_is_each_ranks_share_of_the_epoch(dataset, micro, accum, dp):
    """An epoch is each rank's DistributedSampler share, ceil(len / R); a step draws b_micro x A of it."""
    steps = S.steps_per_epoch(dataset, micro, accum, dp)
    assert steps * micro * accum == pytest.approx(S.samples_per_rank(dataset, dp))
    assert (steps < 1) == (S.global_batch_samples(micro, accum, dp) > dp * S.samples_per_rank(dataset, dp))


@pytest.mark.parametrize("args, name", [((0, 1, 1), "micro_batch"), ((1, 1.5, 1), "accumulation_steps"),
                                        ((1, 1, -2), "data_parallel")])
def test_global_batch_rejects_nonsense(args, name):
    with pytest.raises(ValueError, match=f"^{name}"):
        S.global_batch_samples(*args)


def test_correct_sampler_covers_every_sample_once_per_epoch():
    audit = S.sampler_audit(64, 8, 3)
    assert audit.draws == 3 * 64 and audit.unique_draws == 3 * 64
    assert audit.duplicated_samples == 0 and audit.missing_samples == 0 and audit.repeated_epochs == 0
    assert audit.unique_fraction == 1.0 and audit.draws_per_rank_per_epoch == 8
    for strip in audit.strips:
        assert strip.times_drawn == (1,) * 64
        assert Counter(strip.first_rank) == {rank: 8 for rank in range(8)}
    assert audit.strips[0].first_rank != audit.strips[1].first_rank  # set_epoch reshuffles


def test_two_ranks_without_rank_offset_train_half_the_data_at_double_weight():
    # Reference article: "two ranks draw the same shard -- half your data at double weight".
    audit = S.sampler_audit(64, 2, 1, variant="no_rank_offset")
    [strip] = audit.strips
    assert Counter(strip.times_drawn) == {0: 32, 2: 32}
    assert set(strip.first_rank) == {-1, 0}
    assert audit.unique_fraction == 0.5 and audit.duplicated_samples == 32 and audit.missing_samples == 32
    assert audit.draws == 64  # the dashboard's count is exactly the correct sampler's


def test_epoch_not_set_repeats_one_order():
    audit = S.sampler_audit(64, 8, 4, variant="epoch_not_set")
    assert audit.repeated_epochs == 3 and audit.duplicated_samples == 0 and audit.unique_fraction == 1.0
    assert len({strip.first_rank for strip in audit.strips}) == 1
    assert [strip.same_order_as_previous_epoch for strip in audit.strips] == [None, True, True, True]


def test_padding_duplicates_are_counted_and_named():
    # 10 samples on 4 ranks: 12 draws, 2 of them DistributedSampler's padding.
    audit = S.sampler_audit(10, 4, 1)
    assert audit.draws == 12 and audit.duplicated_samples == 2 == audit.padding_draws


@settings(max_examples=80, deadline=None)
@given(st.integers(1, 200), st.integers(1, 64), st.integers(1, 4), st.sampled_from(S.VARIANTS), st.integers(0, 99))
def test_audit_matches_a_recount_of_the_drawn_indices(n, ranks, epochs, variant, seed):
    audit = S.sampler_audit(n, ranks, epochs, variant=variant, seed=seed)
    draws = unique = 0
    previous = None
    for epoch, strip in enumerate(audit.strips):
        per_rank = S.epoch_indices(n, ranks, epoch=epoch, seed=seed, variant=variant)
        assert strip.same_order_as_previous_epoch == (None if previous is None else per_rank == previous)
        previous = per_rank
        counts = Counter(i for row in per_rank for i in row)
        assert strip.times_drawn == tuple(counts.get(i, 0) for i in range(n))
        firsts = {}
        for draw in range(S.samples_per_rank(n, ranks)):  # round by round, rank by rank
            for rank, row in enumerate(per_rank):
                firsts.setdefault(row[draw], rank)
        assert strip.first_rank == tuple(firsts.get(i, -1) for i in range(n))
        assert strip.unique_samples == len(counts)
        draws += sum(counts.values())
        unique += len(counts)
    assert (audit.draws, audit.unique_draws, audit.duplicated_samples) == (draws, unique, draws - unique)
    assert audit.unique_fraction == unique / draws
    assert audit.draws == epochs * audit.draws_per_epoch == epochs * S.samples_per_rank(n, ranks) * ranks  # any variant


def test_audit_rejects_nonsense():
    with pytest.raises(ValueError, match="^epochs"):
        S.sampler_audit(10, 2, 0)
    with pytest.raises(ValueError, match="^variant"):
        S.sampler_audit(10, 2, 1, variant="shuffled_per_rank")
