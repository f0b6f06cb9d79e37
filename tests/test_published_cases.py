"""The repo's copy of the published numbers is the shared reference, byte for byte."""
import pytest

from tests.published_cases import VENDORED, published_cases, source_path


@pytest.mark.skipif(source_path() is None, reason="shared/reference is not beside this checkout: the copy is all there is")
def test_vendored_copy_matches_the_source():
    assert VENDORED.read_bytes() == source_path().read_bytes(), (
        f"tests/data/published_cases.json differs from {source_path()}: copy the source over it")


def test_every_case_has_an_id_and_a_source():
    cases = published_cases()
    assert len(cases) > 20
    assert all(case["source"] for case in cases.values())
