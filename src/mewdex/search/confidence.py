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
keyword hit ≥ :data:`MEDIUM_MIN_SCORE`, or a meme both vector legs put first
(≥ :data:`MEDIUM_MIN_SCORE_VECTOR_ONLY`) for a query some meme has a word of; ``low`` = the rest.

The query's label is the best of its first :data:`LABEL_RESULTS` results' (:func:`query_label`, the
one rule the chat and the search page ask; a ``high`` second result is not hidden under a ``low``
first one): ``low`` is "no strong match", said only where the first result is likely wrong. Measured
with ``bench/confidence.py`` on the whole corpus (935 memes; issue 45), the label of the 40 dev
queries and how often their first result is a labelled relevant meme:

==========  =======  =========  ======================================================
label       queries  precision  what decides it (the best of the first 3 results)
==========  =======  =========  ======================================================
high        16       0.44       an exact phrase, or a keyword hit with fused ≥ 0.35
medium      4        0.00       a keyword hit ≥ 0.25, or both vector legs put it first
                                (and the query has a word some meme has)
low         20       0.25       the vectors alone (any score: 5 of 26 such firsts are right)
==========  =======  =========  ======================================================

Every one of the 16 nonsense strings is ``low``: none has a word any meme has (every dev query has
one), and that is what tells them from a query such as 熊本熊 whose memes both vector legs agree on
(the fused score alone does not: 4 of them get 0.5). A ``low`` first result is right about one time
in five, so the words said over it (the chat's ``assistant.weak``, the page's "No strong match")
say "not sure these fit, the closest by meaning", never that nothing matches.
The thresholds belong to the fusion's ``RRF_K`` and leg weights (:mod:`mewdex.search.service`):
re-run the bench when those change.
"""

from __future__ import annotations

from typing import Literal

Confidence = Literal["high", "medium", "low"]

HIGH_MIN_SCORE = 0.35
MEDIUM_MIN_SCORE = 0.25
#: First in both vector legs (RRF k = 5: (1 + 2) / 6); only for a query the keyword leg found anything for.
MEDIUM_MIN_SCORE_VECTOR_ONLY = 0.5


def confidence(score: float, *, keyword_hit: bool, phrase: bool = False, lexical: bool = True) -> Confidence:
    """The confidence of one fused result: ``score`` is its fused score, ``keyword_hit`` whether the
    keyword leg found it, ``phrase`` whether it matched the query as an exact phrase, ``lexical``
    whether the keyword leg found any meme for the query (none: no meme has a word of it, as for
    nonsense, and the vectors alone are never more than ``low``)."""
    if phrase or (keyword_hit and score >= HIGH_MIN_SCORE):
        return "high"
    if (keyword_hit and score >= MEDIUM_MIN_SCORE) or (lexical and score >= MEDIUM_MIN_SCORE_VECTOR_ONLY):
        return "medium"
    return "low"


LABEL_RESULTS = 3  # the results a query's label reads: the chat's first page, the page's first row
_ORDER: dict[Confidence | None, int] = {"high": 3, "medium": 2, "low": 1, None: 0}


def query_label(confidences: list[Confidence | None]) -> Confidence | None:
    """The label of a query's results (``confidences`` in their order): the best of the first
    :data:`LABEL_RESULTS`; None for no results or results without one (a search by image)."""
    return max(confidences[:LABEL_RESULTS], key=_ORDER.__getitem__, default=None)


def strong_match(confidences: list[Confidence | None]) -> bool:
    """Whether the results may be presented as found: the query's label (:func:`query_label`) is not
    ``low``. The chat's reply and the search page both ask this; where it is False they say "no
    strong match" (the first result is likely wrong)."""
    return query_label(confidences) not in ("low", None)
