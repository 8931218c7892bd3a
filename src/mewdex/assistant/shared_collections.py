"""A member's shared collections in its assistant's answers (issue 43 item 5): the collections shared
with the account that it chose with "Use in my chat answers" (:func:`mewdex.library.sharing.chat_pools`,
read at every search, so a removed membership or a changed choice counts at once) are searched beside
the account's own library, and their memes can be shown and sent without being copied into it.

A shared collection's meme travels as a :class:`SearchHit` whose ``media_url`` is the member route
(:func:`mewdex.library.sharing.member_media_path`): that is how a card, a message's artifact refs and a
follow-up know it is a shared one, and of which collection. Its search runs in the owner's scope
inside the collection only (:func:`mewdex.search.service.search_collection` with ``member``: nothing
learned into the owner's library, no metered step of the owner's).
"""

from __future__ import annotations

from uuid import UUID

from sqlalchemy.orm import Session, sessionmaker

from mewdex.db.models import ScopeContext
from mewdex.dto.search import SearchFilters, SearchHit
from mewdex.library import sharing
from mewdex.search import service as search_service


def _marked(hit: SearchHit, collection_id: UUID) -> SearchHit:
    hit.media_url = sharing.member_media_path(collection_id, hit.id)
    return hit


def search(
    sessions: sessionmaker[Session],
    scope: ScopeContext,
    query: str,
    n: int,
    own: list[SearchHit],
    filters: SearchFilters | None = None,
) -> list[SearchHit]:
    """``own`` (the hits of the scope's own library, best first) with the hits of each chosen shared
    collection for ``query`` (and ``filters``' other conditions), by score, at most ``n``; a meme
    already among ``own`` is not repeated. A search kept to one of the caller's collections
    (``filters.collection_ids``) is left as it is. One short transaction per collection (the search's
    legs take connections of their own)."""
    if filters is not None and filters.collection_ids:
        return own
    with sessions.begin() as session:
        chosen = sharing.chat_pools(session, scope.scope_id)
    if not chosen:
        return own
    shared: list[SearchHit] = []
    for granted in chosen:
        with sessions.begin() as session:
            found = search_service.search_collection(
                session, granted.owner, granted.collection.id, query, n, filters=filters, member=True
            ).results
        shared += [_marked(hit, granted.collection.id) for hit in found]
    seen = {h.id for h in own}
    merged = list(own)
    for hit in shared:
        if hit.id not in seen:
            seen.add(hit.id)
            merged.append(hit)
    merged.sort(key=lambda h: -h.score)  # stable: own first on a tie
    return merged[:n]


def hydrate(session: Session, scope: ScopeContext, ids: list[UUID], scores: dict) -> list[SearchHit]:
    """``ids`` (in order) as hits: the scope's own live memes, and the live memes of the shared
    collections it chose now (marked with their member URL); any other id is left out."""
    hits = {UUID(h.id): h for h in search_service.hydrate(session, scope, ids, scores)}
    missing = [i for i in ids if i not in hits]
    if missing:
        for granted in sharing.chat_pools(session, scope.scope_id):
            members = sharing.collection_meme_ids(session, granted)
            inside = [i for i in missing if i in members and i not in hits]
            for hit in search_service.hydrate(session, granted.owner, inside, scores):
                hits[UUID(hit.id)] = _marked(hit, granted.collection.id)
    return [hits[i] for i in ids if i in hits]


def shared_collection(hit_or_url: SearchHit | str | None) -> str | None:
    """The shared collection a hit (or its ``media_url``) comes from; None for the caller's own meme."""
    url = hit_or_url.media_url if isinstance(hit_or_url, SearchHit) else hit_or_url
    return sharing.member_media_collection(url)
