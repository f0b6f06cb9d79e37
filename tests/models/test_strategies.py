"""The strategy cards and the comparison table: complete, consistent and looked up safely."""
from dataclasses import fields

import pytest

from models import strategies as st

ARTICLE_ORDER = ("dp", "zero", "tp", "sp", "cp", "pp", "ep")


def test_seven_cards_in_article_order_with_unique_keys():
    keys = tuple(c.key for c in st.CARDS)
    assert keys == ARTICLE_ORDER
    assert len(set(keys)) == 7


@pytest.mark.parametrize("entry", st.CARDS, ids=lambda c: c.key)
def test_every_card_field_is_filled(entry):
    for f in fields(st.StrategyCard):
        value = getattr(entry, f.name)
        assert isinstance(value, str) and value.strip(), f"{entry.key}.{f.name} is empty"


@pytest.mark.parametrize("key", ARTICLE_ORDER)
def test_card_lookup_returns_the_matching_card(key):
    found = st.card(key)
    assert found.key == key
    assert found is next(c for c in st.CARDS if c.key == key)


@pytest.mark.parametrize("bad", ["xp", "", "DP", None, 3])
def test_card_rejects_unknown_keys_and_names_them(bad):
    with pytest.raises(ValueError) as err:
        st.card(bad)
    message = str(err.value)
    assert repr(bad) in message
    for key in ARTICLE_ORDER:
        assert key in message


def test_cards_are_frozen():
    with pytest.raises(Exception):
        st.CARDS[0].name = "changed"


def test_comparison_columns_match_the_dataclass_fields():
    assert tuple(name for name, _ in st.COMPARISON_COLUMNS) == tuple(f.name for f in fields(st.ComparisonRow))
    headers = [header for _, header in st.COMPARISON_COLUMNS]
    assert all(h.strip() for h in headers)
    assert len(set(headers)) == len(headers)


def test_seven_comparison_rows_with_every_column_filled():
    assert [r.strategy for r in st.COMPARISON_ROWS] == [
        "DDP", "ZeRO-1/2", "FSDP / ZeRO-3", "Tensor", "Pipeline", "Context", "Expert",
    ]
    for row in st.COMPARISON_ROWS:
        for name, _ in st.COMPARISON_COLUMNS:
            value = getattr(row, name)
            assert isinstance(value, str) and value.strip(), f"{row.strategy}.{name} is empty"


def test_comparison_note_states_the_units():
    note = st.COMPARISON_NOTE
    assert "per device per" in note and "Ψ" in note and "b·s·h" in note


def test_zero_memory_figures_are_the_finite_n_ones():
    # The "16Ψ → 4Ψ → 2Ψ" shorthand is only the N → ∞ limit; the data must carry the real terms.
    row = next(r for r in st.COMPARISON_ROWS if r.strategy == "ZeRO-1/2")
    assert "4Ψ + 12Ψ/N" in row.memory_effect and "2Ψ + 14Ψ/N" in row.memory_effect
    assert "4Ψ + 12Ψ/N" in st.card("zero").memory_saved


def test_fields_stay_short_enough_for_the_figures():
    for entry in st.CARDS:
        for f in fields(st.StrategyCard):
            assert len(getattr(entry, f.name)) <= 160, f"{entry.key}.{f.name} is too long"
    for row in st.COMPARISON_ROWS:
        for name, _ in st.COMPARISON_COLUMNS:
            assert len(getattr(row, name)) <= 80, f"{row.strategy}.{name} is too long"
