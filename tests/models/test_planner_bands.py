"""The planner's bands measured the way they are used (issue 41): each source's checking
runs against the band it would have been shown had it never been published, the issue's
targets, and plans the band cannot tell apart shown as tied (models/planner/validation.py)."""
import re
from dataclasses import replace
from pathlib import Path

import pytest

from models import planner
from models.planner import validation
from models.planner.model import Plan

ROOT = Path(__file__).resolve().parents[2]


def _inside(check, band):
    """Published throughput over the planner's within [low, high], from the case itself
    (a step time or a training time enters inverted)."""
    c = check.case
    published_over_predicted = (check.predicted / c.published if c.quantity in validation.DURATION
                                else c.published / check.predicted)
    return band.low <= published_over_predicted <= band.high


def test_every_checking_run_is_held_out_once_and_counted_from_its_own_numbers():
    held = validation.leave_one_source_out()
    checks = validation.end_to_end(validation.CHECK)
    assert sorted(h.check.case.case_id for h in held) == sorted(c.case.case_id for c in checks)
    inside = [_inside(h.check, h.band) for h in held]
    assert [h.inside for h in held] == inside
    overall = validation.coverage()
    assert (overall.runs, overall.inside) == (len(held), sum(inside))
    assert overall.sources == len({c.case.source for c in checks})
    widths = sorted((h.band.high - h.band.low) / 2 for h in held)
    n = len(widths)
    assert overall.median_half_width == pytest.approx((widths[(n - 1) // 2] + widths[n // 2]) / 2)
    for name in validation.regimes():
        mine = [ok for h, ok in zip(held, inside) if h.check.regime == name]
        assert (validation.coverage(name).runs, validation.coverage(name).inside) == (len(mine), sum(mine))


def test_a_sources_band_does_not_depend_on_its_own_runs(monkeypatch):
    """Move every run of one source far off (the planner 3x too fast on it): the bands its
    own runs were shown do not move, while other sources' bands do (the moved runs are in
    their pools)."""
    original = validation.validate()
    before = {h.check.case.case_id: h.band for h in validation.leave_one_source_out()}
    for source in ("dgxc", "llmfoundry"):
        moved = tuple(replace(c, predicted=c.predicted * (1 / 3 if c.case.quantity in validation.DURATION else 3))
                      if c.case.source == source else c for c in original)
        monkeypatch.setattr(validation, "validate", lambda moved=moved: moved)
        validation.leave_one_source_out.cache_clear()
        try:
            after = {h.check.case.case_id: h.band for h in validation.leave_one_source_out()}
        finally:
            monkeypatch.setattr(validation, "validate", lambda: original)
            validation.leave_one_source_out.cache_clear()
        changed = {case_id for case_id in before if before[case_id] != after[case_id]}
        own = {c.case.case_id for c in original if c.case.source == source and c.case.end_to_end
               and c.case.role == validation.CHECK}
        assert own and not own & changed, source
        assert changed, source  # the moved runs do reach the other sources' bands
    assert validation.leave_one_source_out()  # the real cases again


def _misses_named_in_models_md():
    text = (ROOT / "docs/MODELS.md").read_text()
    return set(re.findall(r"^(\w+ · [\w -]+?) misses:", text, flags=re.M))


def test_the_coverage_targets_hold_and_every_shortfall_is_stated():
    """Issue 41's targets: leave-one-source-out coverage >= 80% overall with a median
    half-width <= 20%; a regime with two or more sources that falls short is named, with
    why, in docs/MODELS.md (and only such a regime)."""
    overall = validation.coverage()
    assert overall.share >= 0.80 and overall.median_half_width <= 0.20
    short = {name for name in validation.regimes()
             if validation.coverage(name).sources >= 2 and validation.coverage(name).share < 0.80}
    assert short == _misses_named_in_models_md()


def test_the_page_band_uses_every_checking_run_and_the_held_out_ones_use_fewer():
    model, cluster = planner.model_preset("gpt3-175b"), planner.cluster_preset("dgx-a100-80gb", 1024)
    band = planner.band(model, cluster, Plan(tp=8, pp=8, dp=16, global_batch=1536))
    regime = [c for c in validation.end_to_end(validation.CHECK) if c.regime == band.regime]
    assert band.checks == len(regime) and band.sources == len({c.case.source for c in regime}) == 2
    held = [h for h in validation.leave_one_source_out() if h.check.regime == band.regime]
    assert all(h.band.checks < band.checks and h.band.sources == 1 for h in held)
    assert "from 2 sources" in band.basis and "the planner was not fitted to" in band.basis


class _Band:
    def __init__(self, reach):
        self.reach = reach


def test_plans_within_the_band_of_the_fastest_are_tied():
    assert validation.ties([10.0, 10.05, 10.5, 11.2, 12.0], _Band(0.10)) == 3
    assert validation.ties([10.0, 10.05, 10.5, 11.2, 12.0], _Band(0.001)) == 1
    assert validation.ties([10.0, 11.0], _Band(0.10)) == 2  # at the edge: not told apart
    band = validation.Band(0.9, 1.1, "x", "", 0)
    assert band.reach == pytest.approx(1 / 0.9 - 1) and band.half_width == pytest.approx(0.1)


def test_a_pinned_plan_within_the_band_of_the_recommended_one_is_called_tied():
    model, cluster = planner.model_preset("gpt3-175b"), planner.cluster_preset("dgx-a100-80gb", 1024)
    best = planner.search(model, cluster, 1536, top=5).candidates[0]
    reach = planner.band(model, cluster, best.plan).reach
    for fixed in ({"tp": 8}, {"tp": 1}):
        pinned = planner.search(model, cluster, 1536, top=1, fixed=fixed).candidates[0]
        reasons = " ".join(planner.explain(model, cluster, pinned.plan, best=(best.plan, best.estimate),
                                           estimate=pinned.estimate))
        slower = pinned.estimate.step_time_s / best.estimate.step_time_s - 1
        assert slower > 0 and "slower than the recommended plan" in reasons
        assert ("the two are tied" in reasons) == (slower <= reach), (fixed, slower, reach)


def test_the_band_multiple_counts_each_source_as_one_however_many_runs_it_has():
    """The band is for a reader's stack, a new source: a source of many close runs does not
    outvote the others (each source's residuals weigh one source in all), and the quantile
    takes the step of one more source (level x (K + 1) of K sources' weight)."""
    others = {"a": [1.0], "b": [1.2], "c": [1.4], "d": [1.6]}
    many = {"many": [0.1] * 16, **others}
    # Five sources: 0.8 x 6 = 4.8 sources' weight is reached at d's residual. Run by run (20
    # runs, the ceil(0.8 x 21) = 17th smallest) it would have been a's 1.0.
    assert validation.source_quantile(many, 0.80) == 1.6
    assert validation.source_quantile({**many, "many": [0.1] * 160}, 0.80) == 1.6
    assert validation.source_quantile({**many, "many": [0.1]}, 0.80) == 1.6
    # Half the weight: 0.5 x 6 = 3 sources, reached at b's residual.
    assert validation.source_quantile(many, 0.50) == 1.2
    # More weight asked for than the sources hold (0.8 x 4 > 3): the largest residual seen.
    assert validation.source_quantile({"a": [0.3, 0.9], "b": [0.5], "c": [0.7]}, 0.80) == 0.9
    assert validation.source_quantile({}, 0.80) == 0.0


def test_the_coverage_level_is_the_issues_own_share():
    """No margin chosen with the table in view: the level is issue 41's 80%; the one-more-
    source step of ``source_quantile`` is what widens the band for having few sources."""
    assert validation.COVERAGE_LEVEL == 0.80
    assert validation.band_multiple() == validation.source_quantile(
        validation._residuals(validation.end_to_end(validation.CHECK)), 0.80)


def test_a_held_out_run_is_inside_when_it_is_within_the_multiple_and_models_md_quotes_the_last_deepspeed_miss():
    """Each held-out run's distance from its band's centre, in standard deviations, says
    whether it is inside (|distance| <= multiple, or within MIN_BAND where that is wider), and
    MODELS.md's account of the A100 DeepSpeed miss quotes the distance and multiple it has."""
    for h in validation.leave_one_source_out():
        if abs(h.distance) <= h.multiple:
            assert h.inside, h.check.case.case_id
        elif not h.inside:
            assert abs(h.check.error) > validation.MIN_BAND
    text = (ROOT / "docs/MODELS.md").read_text()
    quoted = re.search(r"the 1,120-GPU run sits (\d\.\d\d)\s+standard deviations below the centre, where the band\s+"
                       r"spans (\d\.\d\d)", text)
    assert quoted, "MODELS.md no longer states the 530B ZeRO-3 run's distance"
    held = next(h for h in validation.leave_one_source_out() if h.check.case.case_id == "sc21-t2-zero3-530b-1120gpu")
    assert not held.inside and held.distance < 0
    assert quoted.groups() == (f"{-held.distance:.2f}", f"{held.multiple:.2f}")
