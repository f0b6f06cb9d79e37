"""The published numbers (``../shared/reference/published_cases.json``) that model tests
reproduce, keyed by case id. CI clones the repo next to a copy of ``shared/``; set
``PLAYBOOK_SHARED`` to point elsewhere."""
import json
import os
from functools import lru_cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@lru_cache(maxsize=1)
def _load():
    candidates = []
    if os.environ.get("PLAYBOOK_SHARED"):
        candidates.append(Path(os.environ["PLAYBOOK_SHARED"]) / "reference/published_cases.json")
    candidates.append(ROOT.parent / "shared/reference/published_cases.json")
    for path in candidates:
        if path.exists():
            return {case["id"]: case for case in json.loads(path.read_text())["cases"]}
    return None


def published_cases():
    cases = _load()
    if cases is None:
        pytest.fail("published_cases.json not found beside the repo (../shared/reference/) or at $PLAYBOOK_SHARED")
    return cases
