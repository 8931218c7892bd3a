"""The confidence rule of search results (mewdex.search.confidence), at its thresholds."""

from __future__ import annotations

import pytest

from mewdex.search.confidence import (
    HIGH_MIN_SCORE,
    MEDIUM_MIN_SCORE,
    MEDIUM_MIN_SCORE_VECTOR_ONLY,
    confidence,
    query_label,
    strong_match,
)


@pytest.mark.parametrize(
    "score,keyword_hit,phrase,want",
    [
        (0.01, False, True, "high"),  # an exact phrase is a strong match whatever its fused score
        (HIGH_MIN_SCORE, True, False, "high"),
        (HIGH_MIN_SCORE - 0.001, True, False, "medium"),
        (MEDIUM_MIN_SCORE, True, False, "medium"),
        (MEDIUM_MIN_SCORE - 0.001, True, False, "low"),
        (0.58, False, False, "medium"),  # the vectors alone never make a strong match
        (MEDIUM_MIN_SCORE_VECTOR_ONLY, False, False, "medium"),
        (MEDIUM_MIN_SCORE_VECTOR_ONLY - 0.001, False, False, "low"),
    ],
)
def test_confidence_levels(score, keyword_hit, phrase, want):
    assert confidence(score, keyword_hit=keyword_hit, phrase=phrase) == want


def test_vectors_alone_are_low_for_a_query_no_meme_has_a_word_of():
    assert confidence(0.58, keyword_hit=False, lexical=False) == "low"  # nonsense: the vectors place it anywhere
    assert confidence(0.58, keyword_hit=False, lexical=True) == "medium"


def test_the_querys_label_is_the_best_of_its_first_results():
    assert query_label(["medium", "low", "low"]) == "medium" and strong_match(["medium", "low", "low"])
    assert query_label(["low", "high"]) == "high" and strong_match(["low", "high"])
    assert query_label(["low", "low", "low", "high"]) == "low" and not strong_match(["low", "low", "low", "high"])
    assert query_label([]) is None and not strong_match([]) and not strong_match([None])
