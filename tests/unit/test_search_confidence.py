"""The confidence rule of search results (mewdex.search.confidence), at its thresholds."""

from __future__ import annotations

import pytest

from mewdex.search.confidence import HIGH_MIN_SCORE, MEDIUM_MIN_SCORE, MEDIUM_MIN_SCORE_VECTOR_ONLY, confidence


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
