"""Search by image, similar memes and near-duplicate clusters (visual embeddings, pgvector HNSW).

Results use the text search's shape (:class:`mewdex.search.service.SearchResponse`):
``{"results": [{"id", "display_name", "sha256", "score", "media_url", "snippet"}], "took_ms"}``
with ``score`` = cosine similarity of the image embeddings.
"""

from __future__ import annotations

import time
from typing import Any
from uuid import UUID

import numpy as np
from sqlalchemy import or_, select
from sqlalchemy.orm import Session

from mewdex.db.models import Meme, MemeVisualEmbedding, ScopeContext
from mewdex.dto.cursor import decode_cursor, encode_cursor
from mewdex.dto.search import SearchFilters
from mewdex.inference import visual_model as visual
from mewdex.library import listing
from mewdex.library.listing import meme_brief
from mewdex.search.near_duplicates import near_duplicates as near_duplicates_table
from mewdex.search.service import SearchResponse, hydrate
from mewdex.search.variants import meme_caption, pair_kind
from mewdex.search.vector import nearest_images


class MemeNotEmbedded(Exception):
    """The meme has no visual embedding yet (its ``visual`` stage has not run)."""


def _response(session: Session, scope: ScopeContext, hits: list[tuple[UUID, float]], started: float) -> SearchResponse:
    scores = {m: c for m, c in hits}
    return SearchResponse(
        results=hydrate(session, scope, [m for m, _ in hits], scores),
        took_ms=(time.perf_counter() - started) * 1000,
        legs={"visual": len(hits)},
    )


def search_by_vector(
    session: Session,
    scope: ScopeContext,
    vector: np.ndarray,
    n_results: int = 10,
    *,
    exclude=None,
    started: float | None = None,
    filters: SearchFilters | None = None,
    offset: int = 0,
) -> SearchResponse:
    """Memes nearest to the visual embedding ``vector``, narrowed by ``filters`` inside the HNSW query."""
    started = time.perf_counter() if started is None else started
    filters = None if filters is None or filters.empty else filters
    want = fetch = offset + n_results
    while True:  # trashed memes keep their vectors: read further until enough live ones are found
        hits = nearest_images(
            session,
            scope.scope_id,
            vector,
            fetch,
            model=visual.MODEL_ID,
            preprocess_version=visual.PREPROCESS_VERSION,
            exclude=exclude,
            filters=filters,
        )
        alive = listing.live_ids(session, scope.scope_id, [m for m, _ in hits])
        kept = [h for h in hits if h[0] in alive]
        if len(kept) >= want or len(hits) < fetch:
            break
        fetch *= 2
    return _response(session, scope, kept[offset:want], started)


def search_by_image(
    session: Session,
    scope: ScopeContext,
    data: bytes,
    n_results: int = 10,
    *,
    max_pixels: int | None = None,
    model: visual.VisualModel | None = None,
    filters: SearchFilters | None = None,
    offset: int = 0,
) -> SearchResponse:
    """Memes of the scope that look most like the image ``data``.

    Raises:
        ImageError: the bytes are not a usable image (415/422/413).
        BackendUnavailable: the visual model cannot be loaded (503).
    """
    started = time.perf_counter()
    vector = (model or visual.visual_model()).embed_bytes(data, max_pixels=max_pixels).vector
    return search_by_vector(session, scope, vector, n_results, started=started, filters=filters, offset=offset)


def meme_vector(session: Session, scope_id: str, meme_id) -> np.ndarray | None:
    row = session.execute(
        select(MemeVisualEmbedding.embedding).where(
            MemeVisualEmbedding.scope_id == scope_id,
            MemeVisualEmbedding.meme_id == meme_id,
            MemeVisualEmbedding.model == visual.MODEL_ID,
            MemeVisualEmbedding.preprocess_version == visual.PREPROCESS_VERSION,
        )
    ).scalar_one_or_none()
    return None if row is None else np.asarray(row, dtype=np.float32)


def similar(session: Session, scope: ScopeContext, meme_id, n_results: int = 10) -> SearchResponse:
    """Memes that look like meme ``meme_id`` (itself excluded). Raises :class:`MemeNotEmbedded`."""
    started = time.perf_counter()
    vector = meme_vector(session, scope.scope_id, meme_id)
    if vector is None:
        raise MemeNotEmbedded(str(meme_id))
    return search_by_vector(session, scope, vector, n_results, exclude=meme_id, started=started)


def similar_cli(target: str, n_results: int = 10, *, scope: ScopeContext | None = None) -> dict[str, Any]:
    """``mewdex similar PATH|ID``: a file path → search by that image; otherwise a meme id → similar memes.

    Returns the response dict (``{"results": [...], "took_ms"}``). Raises ``ValueError`` when the
    target is neither an existing file nor a meme id of the scope, ImageError / BackendUnavailable /
    MemeNotEmbedded as the functions above.
    """
    from pathlib import Path

    from mewdex.config import get_settings
    from mewdex.db.engine import get_sessionmaker
    from mewdex.library.scopes import default_scope

    scope = scope or default_scope()
    path = Path(target)
    with get_sessionmaker().begin() as session:
        if path.is_file():
            return search_by_image(
                session, scope, path.read_bytes(), n_results, max_pixels=get_settings().max_pixels
            ).as_dict()
        try:
            meme_id = UUID(target)
        except ValueError:
            raise ValueError(f"{target!r} is neither a file nor a meme id") from None
        if listing.find(session, scope, meme_id) is None:
            raise ValueError(f"no meme {target}")
        return similar(session, scope, meme_id, n_results).as_dict()


# ------------------------------------------------------------------ near-duplicates


def _meme_brief(m: Meme) -> dict[str, Any]:
    return meme_brief(m).model_dump()


def near_duplicates_of(session: Session, scope_id: str, meme_id) -> list[dict[str, Any]]:
    """The meme's near-duplicate pairs (either side): ``[{"id", "display_name", "relation", "kind",
    "phash_distance", "cosine"}]`` where ``relation`` is ``duplicate_of`` (this meme duplicates that
    older one) or ``duplicated_by``, and ``kind`` is ``duplicate`` (same caption) or ``variant``
    (another caption on the same template; :func:`mewdex.search.variants.pair_kind`)."""
    meme_id = meme_id if isinstance(meme_id, UUID) else UUID(str(meme_id))
    return near_duplicates_of_many(session, scope_id, [meme_id])[meme_id]


def near_duplicates_of_many(session: Session, scope_id: str, meme_ids: list[UUID]) -> dict[UUID, list[dict[str, Any]]]:
    """:func:`near_duplicates_of` for several memes at once (two statements, whatever their number):
    ``{meme_id: pairs}`` with every id of ``meme_ids`` present."""
    wanted = set(meme_ids)
    out: dict[UUID, list[dict[str, Any]]] = {m: [] for m in meme_ids}
    if not wanted:
        return out
    t = near_duplicates_table
    rows = (
        session.execute(
            select(t).where(t.c.scope_id == scope_id, or_(t.c.meme_id.in_(wanted), t.c.duplicate_of.in_(wanted)))
        )
        .mappings()
        .all()
    )
    if not rows:
        return out
    involved = {r["meme_id"] for r in rows} | {r["duplicate_of"] for r in rows}
    memes = listing.memes_by_id(session, ScopeContext(scope_id), list(involved))
    captions = {m_id: meme_caption(m) for m_id, m in memes.items()}
    for r in rows:
        for mine, other, relation in (
            (r["meme_id"], r["duplicate_of"], "duplicate_of"),
            (r["duplicate_of"], r["meme_id"], "duplicated_by"),
        ):
            if mine not in wanted or other not in memes:
                continue
            out[mine].append(
                {
                    **_meme_brief(memes[other]),
                    "relation": relation,
                    "kind": pair_kind(captions.get(mine, ""), captions[other]),
                    "phash_distance": r["phash_distance"],
                    "cosine": r["cosine"],
                }
            )
    for pairs in out.values():
        pairs.sort(key=lambda d: (d["relation"] != "duplicate_of", -(d["cosine"] or 0)))
    return out


def duplicate_clusters(
    session: Session, scope: ScopeContext, *, limit: int = 100, cursor: str | None = None
) -> dict[str, Any]:
    """Connected groups of near-duplicate memes, the oldest first in each group (its ``original``).

    ``{"clusters": [{"original": id, "size": n, "memes": [...], "pairs": [...]}], "total": n,
    "next_cursor": str | None}``, biggest clusters first (then the oldest original); ``cursor``: a
    page's ``next_cursor`` for the next page. Raises :class:`~mewdex.dto.cursor.CursorInvalid`.
    """
    after = tuple(decode_cursor(cursor, (int, str, str))) if cursor else None
    t = near_duplicates_table
    rows = session.execute(select(t).where(t.c.scope_id == scope.scope_id)).mappings().all()
    parent: dict[UUID, UUID] = {}

    def find(x):
        parent.setdefault(x, x)
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for r in rows:
        a, b = find(r["meme_id"]), find(r["duplicate_of"])
        if a != b:
            parent[a] = b
    groups: dict[UUID, list[UUID]] = {}
    for x in list(parent):
        groups.setdefault(find(x), []).append(x)
    ids = [i for g in groups.values() for i in g]
    memes = listing.memes_by_id(session, scope, ids)
    clusters: list[dict[str, Any]] = []
    for members in groups.values():
        ms = sorted((memes[i] for i in members if i in memes), key=lambda m: (m.created_at, str(m.id)))
        if len(ms) < 2:
            continue
        member_set = {m.id for m in ms}
        pairs = [
            {
                "meme_id": str(r["meme_id"]),
                "duplicate_of": str(r["duplicate_of"]),
                "phash_distance": r["phash_distance"],
                "cosine": r["cosine"],
            }
            for r in rows
            if r["meme_id"] in member_set
        ]
        clusters.append(
            {"original": str(ms[0].id), "size": len(ms), "memes": [_meme_brief(m) for m in ms], "pairs": pairs}
        )

    def order(c: dict[str, Any]) -> tuple[int, str, str]:
        return (-c["size"], str(c["memes"][0]["created_at"]), c["original"])

    clusters.sort(key=order)
    rest = [c for c in clusters if after is None or order(c) > (-after[0], after[1], after[2])]
    page = rest[:limit]
    last = order(page[-1]) if page and len(rest) > limit else None
    next_cursor = encode_cursor([-last[0], last[1], last[2]]) if last else None
    return {"clusters": page, "total": len(clusters), "next_cursor": next_cursor}
