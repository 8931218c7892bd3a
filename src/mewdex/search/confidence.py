"""How much to trust a fused search result: ``high`` | ``medium`` | ``low``.

The fused score (weighted reciprocal rank, :mod:`mewdex.search.fusion`) is rank-based: the best
meme of any query — also of ``qqqqzzzzxxxx`` — gets the same top score when the vector legs agree,
and the vector legs' own similarities do not separate real queries from nonsense either (measured on
the 40 dev queries plus 18 nonsense strings with ``bench/confidence.py``: USE gives nonsense a top
cosine of 0.40–0.61, real queries 0.29–0.63; e5 0.83–0.89 against 0.79–0.92). What does separate
them is lexical evidence: nonsense matches no keyword, and among the top 10 of the dev queries a
meme that the keyword leg also found is right about 3× as often as one found by the vectors only:

===============================================  ====  =========
top-10 results of the 40 dev queries             n     precision
===============================================  ====  =========
all                                              400   0.15
keyword hit, fused ≥ 0.35                        21    0.52
keyword hit, fused ≥ 0.25                        48    0.35
no keyword hit, fused ≥ 0.40                     10    0.30
no keyword hit, fused < 0.40                     312   0.13
===============================================  ====  =========

(precision counts the labelled relevant memes only, so it is a lower bound). Hence: ``high`` = an
exact-phrase match, or a keyword hit with a fused score ≥ :data:`HIGH_MIN_SCORE`; ``medium`` = a
keyword hit ≥ :data:`MEDIUM_MIN_SCORE`, or any result ≥ :data:`MEDIUM_MIN_SCORE_VECTOR_ONLY`;
``low`` = the rest. A query with no ``high`` result has "no strong match". The thresholds belong to
the fusion's ``RRF_K`` and leg weights (:mod:`mewdex.search.service`): re-run the bench when those change.
"""

from __future__ import annotations

from typing import Literal

Confidence = Literal["high", "medium", "low"]

HIGH_MIN_SCORE = 0.35
MEDIUM_MIN_SCORE = 0.25
MEDIUM_MIN_SCORE_VECTOR_ONLY = 0.40


def confidence(score: float, *, keyword_hit: bool, phrase: bool = False) -> Confidence:
    """The confidence of one fused result: ``score`` is its fused score, ``keyword_hit`` whether the
    keyword leg found it, ``phrase`` whether it matched the query as an exact phrase."""
    if phrase or (keyword_hit and score >= HIGH_MIN_SCORE):
        return "high"
    if (keyword_hit and score >= MEDIUM_MIN_SCORE) or score >= MEDIUM_MIN_SCORE_VECTOR_ONLY:
        return "medium"
    return "low"


def strong_match(confidences: list[Confidence | None]) -> bool:
    """Whether any result is ``high`` (a page without one says "no strong match")."""
    return "high" in confidences
