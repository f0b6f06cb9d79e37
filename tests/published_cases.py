"""The published numbers that model tests reproduce, keyed by case id.

The source is ``shared/reference/published_cases.json`` beside the repo (or at
``$PLAYBOOK_SHARED``); ``tests/data/published_cases.json`` is a copy kept in the repo so
that a clone anywhere runs the whole suite, and ``test_vendored_copy_matches_the_source``
fails the moment the two differ."""
import json
import os
from functools import lru_cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
VENDORED = ROOT / "tests/data/published_cases.json"


def source_path():
    """The shared reference file, when it is reachable from here."""
    candidates = []
    if os.environ.get("PLAYBOOK_SHARED"):
        candidates.append(Path(os.environ["PLAYBOOK_SHARED"]) / "reference/published_cases.json")
    candidates.append(ROOT.parent / "shared/reference/published_cases.json")
    return next((path for path in candidates if path.exists()), None)


@lru_cache(maxsize=1)
def published_cases():
    path = source_path() or VENDORED
    return {case["id"]: case for case in json.loads(path.read_text())["cases"]}
