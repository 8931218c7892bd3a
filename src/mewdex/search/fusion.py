"""Reciprocal-rank fusion of ranked lists."""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from typing import TypeVar

Item = TypeVar("Item", bound=Hashable)


def rrf(
    rankings: Mapping[str, Sequence[Item]], *, k: float = 60.0, weights: Mapping[str, float] | None = None
) -> dict[Item, float]:
    """Fused scores: Σ over lists of weight / (k + rank), rank starting at 1. Higher is better."""
    scores: dict[Item, float] = {}
    for name, ranked in rankings.items():
        weight = 1.0 if weights is None else weights.get(name, 1.0)
        for rank, item in enumerate(ranked, start=1):
            scores[item] = scores.get(item, 0.0) + weight / (k + rank)
    return scores
