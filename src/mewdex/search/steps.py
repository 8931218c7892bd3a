"""Optional search steps that a layer above search supplies (issue 15, points 6–7): query
rewriting before the legs, extra legs fused like the others, and reranking after fusion.

Search knows nothing of providers, budgets or connectors: the steps are the hooks
``search_enhancers``, ``search_legs`` and ``search_rerankers`` of :mod:`mewdex.hooks`, which
:mod:`mewdex.providers.search_steps` (a built-in plugin, imported at the first search) and any
third-party plugin implement (``examples/wordleg``: a leg), and
:mod:`mewdex.search.service` calls the three entry points at fixed places:

* :func:`submit_extra` — right after the plain legs are submitted: the rewritten queries of the
  registered enhancer run through the same legs (named ``<leg>+<n>``, weighted
  :data:`VARIANT_WEIGHT` × the leg's weight), and registered extra legs (``remote``) run next to
  them. The enhancer itself runs on a leg thread, concurrently with the plain legs.
* :func:`weights` — the fusion weights of every ranking, extras included.
* :func:`rerank` — after fusion: the registered reranker may reorder the top :data:`RERANK_TOP`.

Every step is optional and bounded: ``None`` (not enabled for this scope, no connector) or any
exception, or no answer within ``search_llm_timeout_seconds``, leaves the plain result (the
provider side meters and audits what it did). Extra steps run on the search-leg threads and use
the search-leg connection pool only, never the caller's.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from uuid import UUID

from mewdex import hooks
from mewdex.config import get_settings
from mewdex.db.models import ScopeContext
from mewdex.dto.search import SearchFilters
from mewdex.inference.errors import BackendUnavailable

log = logging.getLogger(__name__)

#: A rewritten query's rankings count this share of the typed query's (same leg).
VARIANT_WEIGHT = 0.5
#: How many of the fused results a reranker may reorder.
RERANK_TOP = 20
MAX_VARIANTS = 4

#: ``(scope, query) -> [rewritten query, …]`` or None (not enabled / failed).
Enhancer = Callable[[ScopeContext, str], list[str] | None]
#: ``(scope, query, [meme id, …]) -> the same ids reordered`` or None.
Reranker = Callable[[ScopeContext, str, list[UUID]], list[UUID] | None]
#: ``(scope, query, filters, limit) -> ranked meme ids`` or None (not available for this scope).
ExtraLeg = Callable[[ScopeContext, str, SearchFilters | None, int], list[UUID] | None]


def set_enhancer(fn: Enhancer | None, name: str = "llm_enhance") -> None:
    """Provide the query rewriter (the ``search_enhancers`` hook; None: none)."""
    if fn is None:
        hooks.withdraw("search_enhancers")
    else:
        hooks.provide("search_enhancers", name, fn, stacklevel=2)


def set_reranker(fn: Reranker | None, name: str = "llm_rerank") -> None:
    """Provide the reranker (the ``search_rerankers`` hook; None: none)."""
    if fn is None:
        hooks.withdraw("search_rerankers")
    else:
        hooks.provide("search_rerankers", name, fn, stacklevel=2)


def register_leg(name: str, fn: ExtraLeg, weight: float = 1.0) -> None:
    """An extra leg ``name`` (the ``search_legs`` hook: runs with the default legs, or when asked for
    by name), fused with ``weight``."""
    hooks.provide("search_legs", name, (fn, weight), stacklevel=2)


def _legs() -> dict[str, tuple[ExtraLeg, float]]:
    legs: dict[str, tuple[ExtraLeg, float]] = hooks.implementations("search_legs")
    return legs


def extra_leg_names() -> tuple[str, ...]:
    return tuple(_legs())


def _timeout() -> float:
    return get_settings().search_llm_timeout_seconds


def submit_extra(
    executor: ThreadPoolExecutor,
    run_leg: Callable[..., tuple[list[UUID], set[UUID]]],
    scope: ScopeContext,
    query: str,
    legs: tuple[str, ...],
    default_legs: tuple[str, ...],
    filters: SearchFilters | None,
    limit: int,
) -> dict[str, Future]:
    """Futures of the extra rankings (module doc), each resolving to ``(ranked ids, phrase ids)``;
    ``{}`` when nothing is registered or enabled. Waits at most the step timeout for the enhancer."""
    futures: dict[str, Future] = {}
    base = tuple(leg for leg in legs if leg in default_legs)
    for name, (fn, _) in _legs().items():
        if name in legs or tuple(legs) == tuple(default_legs):
            futures[name] = executor.submit(_extra_leg, fn, scope, query, filters, limit)
    enhancer = hooks.single("search_enhancers")
    if enhancer is None or not base:
        return futures
    variants = _bounded(executor, enhancer, "llm_enhance", scope, query) or []
    seen = {query.casefold()}
    kept = []
    for variant in variants:
        text = " ".join(str(variant).split())[:500]
        if text and text.casefold() not in seen:
            seen.add(text.casefold())
            kept.append(text)
    for n, variant in enumerate(kept[:MAX_VARIANTS], 1):
        for leg in base:
            futures[f"{leg}+{n}"] = executor.submit(_variant_leg, run_leg, leg, scope.scope_id, variant, filters)
    return futures


def _variant_leg(run_leg, leg, scope_id, variant, filters) -> tuple[list[UUID], set[UUID]]:
    """A rewritten query's ranking in ``leg``; its exact-phrase matches do not jump the queue (only
    the typed query's do)."""
    return run_leg(leg, scope_id, variant, filters)[0], set()


def _extra_leg(fn: ExtraLeg, scope, query, filters, limit) -> tuple[list[UUID], set[UUID]]:
    """An extra leg's ranking; any failure of it is the leg being unavailable (listed in the
    search's ``degraded``), never a failed search."""
    try:
        return (fn(scope, query, filters, limit) or []), set()
    except BackendUnavailable:
        raise
    except Exception as exc:  # noqa: BLE001
        log.info("search: extra leg failed (%s)", type(exc).__name__)
        raise BackendUnavailable(f"extra search leg failed ({type(exc).__name__})", backend="extra") from None


def weights(base: dict[str, float], names) -> dict[str, float]:
    """Fusion weights of ``names`` (every ranking of one search): a base leg's own, a variant
    ``<leg>+<n>`` :data:`VARIANT_WEIGHT` × its leg's, an extra leg its registered weight."""
    out = dict(base)
    extra = _legs()
    for name in names:
        if name in extra:
            out[name] = extra[name][1]
        elif "+" in name:
            out[name] = VARIANT_WEIGHT * base.get(name.split("+", 1)[0], 1.0)
    return out


def rerank(executor: ThreadPoolExecutor, scope: ScopeContext, query: str, ordered: list[UUID]) -> list[UUID]:
    """``ordered`` with its top :data:`RERANK_TOP` reordered by the registered reranker (when it
    answers in time with a permutation of them; else unchanged)."""
    reranker = hooks.single("search_rerankers")
    if reranker is None or len(ordered) < 2:
        return ordered
    top = ordered[:RERANK_TOP]
    new = _bounded(executor, reranker, "rerank", scope, query, list(top))
    if not new or sorted(map(str, new)) != sorted(map(str, top)):
        return ordered
    return list(new) + ordered[RERANK_TOP:]


def _bounded(executor: ThreadPoolExecutor, fn, what: str, *args):
    """``fn(*args)`` on a leg thread, waiting at most the step timeout; None on timeout or error."""
    future = executor.submit(fn, *args)
    try:
        return future.result(timeout=_timeout())
    except FutureTimeout:
        log.info("search: %s took longer than %.1f s; the plain result stands", what, _timeout())
    except Exception as exc:  # noqa: BLE001 — an optional step never fails a search
        log.info("search: %s failed (%s); the plain result stands", what, type(exc).__name__)
    return None
