"""docs/MODELS.md names a test for every quantity: each named test must exist."""
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_every_test_named_in_models_md_exists():
    table_rows = [line for line in (ROOT / "docs/MODELS.md").read_text().splitlines() if line.startswith("| ")]
    checked = 0
    for row in table_rows:
        test_cell = row.rstrip(" |").split(" | ")[-1]
        current = None
        for token in re.findall(r"(test_\w+\.py)?::(\w+)", test_cell):
            current = token[0] or current
            source = (ROOT / "tests/models" / current).read_text()
            assert re.search(rf"def {token[1]}\b", source), f"{current}::{token[1]} named in docs/MODELS.md does not exist"
            checked += 1
    assert checked >= 60


def test_models_md_states_the_calibration_the_planner_has():
    """The fitting- and checking-set summaries in docs/MODELS.md are validate()'s (a change
    to the planner that moves them must move the docs)."""
    from models import fmt
    from models.planner import validation

    text = (ROOT / "docs/MODELS.md").read_text()
    for name, role in (("Fitting", validation.FIT), ("Checking", validation.CHECK)):
        s = validation.summarize(validation.end_to_end(role))
        line = f"{name} set: {s.count} runs, mean |error| {fmt.percent(s.mean_abs)}, largest {fmt.percent(s.max_abs)}."
        assert line in text, line
    for name in validation.regimes():
        s = validation.regime_summary(name)
        if s.count:
            assert f"| {name} | {s.count} | {fmt.percent(s.mean_abs)} | {fmt.percent(s.max_abs)} |" in text, name


def test_models_md_states_the_leave_one_source_out_coverage_the_planner_has():
    """The table of bands measured on held-out sources in docs/MODELS.md is
    validation.coverage()'s, row by row (issue 41)."""
    from models import fmt
    from models.planner import validation

    text = (ROOT / "docs/MODELS.md").read_text()
    for name in (None,) + validation.regimes():
        c = validation.coverage(name)
        if c.runs:
            row = (f"| {name or 'all checking runs'} | {c.sources} | {c.inside} of {c.runs} | "
                   f"{fmt.percent(c.share, 0)} | ±{fmt.percent(c.median_half_width)} |")
            assert row in text, row
