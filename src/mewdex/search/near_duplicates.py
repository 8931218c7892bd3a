"""Near-duplicates of a meme among the scope's memes, from the ``visual`` stage's outputs: perceptual
hash distance (``memes.extensions.visual.phash``) and image-embedding cosine
(``meme_visual_embeddings``, per-model HNSW index), and the pairs recorded in ``meme_near_duplicates``.

On apply of the ``visual`` stage the meme is compared with the scope's older memes: among those with
a phash Hamming distance ≤ :data:`PHASH_MAX_DISTANCE` or an embedding cosine ≥ :data:`COSINE_MIN`,
the most similar one is recorded (meme → duplicate_of).

Thresholds (``bench/visual.py --part dup --grid``, 939 corpus images, variants of 150–300): re-encoded
and resized copies are found at any setting (cosine ≈ 0.99, phash ≈ 0); crops, flips and caption bars
need a lower cosine, but the corpus holds series of one speaker with different captions at cosine
0.90–0.95 that are different memes. cosine ≥ 0.94 or phash ≤ 4 keeps variant precision ≈ 0.98
with recall ≈ 0.74 and flags ≈ 5 % of corpus images against an older one; 0.90 / 6 raises recall to
0.94 but flags ≈ 16 %.

Every function runs in the caller's transaction.
"""

from __future__ import annotations

import threading
from typing import Any, cast
from uuid import UUID

import numpy as np
from sqlalchemy import Table, delete, select, text
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.orm import Session

from mewdex.db.models import MemeNearDuplicate
from mewdex.search.vector import nearest_images
from mewdex.search.vector_index import ensure_index, exact_distance_sql

PHASH_MAX_DISTANCE = 4  # bench/visual.py grid: see the module docstring
COSINE_MIN = 0.94
NEAR_DUPLICATE_CANDIDATES = 10
PHASH_BANDS = 5  # mewdex_phash_bands: 3+3+3+3+4 hex digits (migration 0012)
_PHASH_DISTANCE = "bit_count(('x' || (extensions->'visual'->>'phash'))::bit(64) # ('x' || :h)::bit(64))"
_PHASH_BANDS = "mewdex_phash_bands(scope_id, (extensions -> 'visual') ->> 'phash')"
# Near-duplicate pairs live in meme_near_duplicates (model MemeNearDuplicate, migration 0002).
near_duplicates = cast(Table, MemeNearDuplicate.__table__)


_ensured: set[tuple[str, int]] = set()
_ensure_lock = threading.Lock()


def ensure_visual_index(session: Session, model: str, dimensions: int) -> None:
    """The per-model HNSW expression index over ``meme_visual_embeddings`` (created once per process;
    an advisory lock keeps concurrent workers from racing on ``CREATE INDEX``)."""
    if (model, dimensions) in _ensured:
        return
    session.execute(text("SELECT pg_advisory_xact_lock(hashtext('mewdex-visual-index'))"))
    ensure_index(session, "meme_visual_embeddings", model, dimensions)
    with _ensure_lock:
        _ensured.add((model, dimensions))


def find_near_duplicates(
    session: Session,
    scope_id: str,
    meme_id,
    vector: np.ndarray | None,
    phash: str | None,
    model: str,
    preprocess_version: str,
    *,
    phash_max: int = PHASH_MAX_DISTANCE,
    cosine_min: float = COSINE_MIN,
    limit: int = NEAR_DUPLICATE_CANDIDATES,
) -> dict[Any, dict[str, Any]]:
    """Other memes of the scope close to this one: ``{meme_id: {"phash_distance", "cosine"}}``."""
    found: dict[Any, dict[str, Any]] = {}
    if phash and phash_max <= PHASH_BANDS - 1:
        # Candidates share one of the hash's bands (GIN, migration 0012): within PHASH_BANDS − 1 bits
        # at most that many hex digits differ, so one band of the five is equal. No scan of the scope;
        # the keys carry the scope (no scope_id condition, which would tempt the planner into
        # scanning the scope when its statistics are stale).
        rows = session.execute(
            text(
                f"""
                SELECT id, {_PHASH_DISTANCE} AS d FROM memes
                WHERE {_PHASH_BANDS} && mewdex_phash_bands(:scope, :h) AND id <> :id
                ORDER BY d, id LIMIT :limit
                """
            ),
            {"h": phash, "scope": scope_id, "id": meme_id, "limit": limit},
        ).all()
        for other, d in rows:
            if d <= phash_max:
                found.setdefault(other, {"phash_distance": None, "cosine": None})["phash_distance"] = int(d)
    elif phash:  # thresholds beyond the bands' guarantee: compare with every meme of the scope
        rows = session.execute(
            text(
                f"""
                SELECT id, {_PHASH_DISTANCE} AS d
                FROM memes
                WHERE scope_id = :scope AND id <> :id AND extensions->'visual'->>'phash' ~ '^[0-9a-f]{{16}}$'
                ORDER BY d LIMIT :limit
                """
            ),
            {"h": phash, "scope": scope_id, "id": meme_id, "limit": limit},
        ).all()
        for other, d in rows:
            if d <= phash_max:
                found.setdefault(other, {"phash_distance": None, "cosine": None})["phash_distance"] = int(d)
    if vector is not None:
        for other, cosine in nearest_images(
            session, scope_id, vector, limit, model=model, preprocess_version=preprocess_version, exclude=meme_id
        ):
            if cosine >= cosine_min:
                found.setdefault(other, {"phash_distance": None, "cosine": None})["cosine"] = round(cosine, 5)
    # fill in the missing measure for the pairs found one way
    if found and phash:
        for other, d in session.execute(
            text(
                """
                SELECT id, bit_count(('x' || (extensions->'visual'->>'phash'))::bit(64) # ('x' || :h)::bit(64))
                FROM memes WHERE scope_id = :scope AND id = ANY(:ids)
                  AND extensions->'visual'->>'phash' ~ '^[0-9a-f]{16}$'
                """
            ),
            {"h": phash, "scope": scope_id, "ids": list(found)},
        ).all():
            found[other]["phash_distance"] = int(d)
    if found and vector is not None:
        dims = len(vector)
        for other, cosine in session.execute(
            text(
                f"""
                SELECT meme_id, 1 - {exact_distance_sql(dims)} FROM meme_visual_embeddings
                WHERE scope_id = :scope AND model = :model AND dimensions = :dims
                  AND preprocess_version = :pv AND meme_id = ANY(:ids)
                """
            ),
            {
                "query": np.asarray(vector, dtype=np.float32),
                "scope": scope_id,
                "model": model,
                "dims": dims,
                "pv": preprocess_version,
                "ids": list(found),
            },
        ).all():
            found[other]["cosine"] = round(float(cosine), 5)
    return found


#: A perceptual hash with fewer set bits than this says little: the hash sets the bits of the 8×8
#: low-frequency coefficients above their median, so a picture with detail sets about 32; a flat or
#: nearly flat one leaves most coefficients tied at the median (a plain picture of any colour hashes
#: to ``8000000000000000``), and every such picture would look like a variant of every other.
PHASH_MIN_SET_BITS = 16


def informative_phash(phash: str) -> bool:
    """Whether ``phash`` (16 hex digits) carries enough detail to call two pictures variants by it
    alone (:data:`PHASH_MIN_SET_BITS`)."""
    return int(phash, 16).bit_count() >= PHASH_MIN_SET_BITS


def closest_by_phash(
    session: Session, scope_id: str, phash: str, exclude: UUID, *, phash_max: int = PHASH_MAX_DISTANCE
) -> tuple[UUID, int] | None:
    """The scope's live meme (other than ``exclude``, the meme asking) whose stored phash is nearest to ``phash`` within
    ``phash_max`` bits (the bands of :func:`find_near_duplicates`): ``(meme_id, distance)``, the
    nearest then the oldest; None when there is none. What a chat's save answers before the
    ``visual`` stage has looked at the new meme (:mod:`mewdex.channels.saving`). A hash with little
    detail (:func:`informative_phash`: a plain or nearly plain picture) finds none."""
    from mewdex.db.models import Meme
    from mewdex.library.live import live

    if not informative_phash(phash):
        return None
    found = find_near_duplicates(session, scope_id, exclude, None, phash, "", "", phash_max=phash_max)
    if not found:
        return None
    rows = session.execute(
        select(Meme.id, Meme.created_at).where(Meme.scope_id == scope_id, Meme.id.in_(list(found)), live())
    ).all()
    if not rows:
        return None
    best = min(rows, key=lambda r: (found[r.id]["phash_distance"], r.created_at, str(r.id)))
    return best.id, int(found[best.id]["phash_distance"])


def record_near_duplicates(
    session: Session, meme, vector, phash, model: str, preprocess_version: str
) -> dict[str, Any] | None:
    """Record the meme as a near-duplicate of the most similar OLDER meme of the scope within the
    thresholds (phash distance ≤ :data:`PHASH_MAX_DISTANCE` or cosine ≥ :data:`COSINE_MIN`).

    Only the best match is recorded (measured by ``bench/visual.py``: flagging every meme above
    the thresholds drops precision far below 0.95 on a corpus full of same-template memes, the
    best match keeps it ≈ 0.98); groups still form through the pairs (see
    :func:`mewdex.search.image_search.duplicate_clusters`). Re-running replaces the meme's own
    pair; pairs of newer memes pointing at it are theirs and stay. Returns the pair or None.
    """
    from mewdex.db.models import Meme

    session.execute(
        delete(near_duplicates).where(near_duplicates.c.scope_id == meme.scope_id, near_duplicates.c.meme_id == meme.id)
    )
    found = find_near_duplicates(session, meme.scope_id, meme.id, vector, phash, model, preprocess_version)
    if not found:
        return None
    created = dict(
        session.execute(
            select(Meme.id, Meme.created_at).where(Meme.scope_id == meme.scope_id, Meme.id.in_([*found, meme.id]))
        ).all()
    )
    mine = (created[meme.id], str(meme.id))
    older = {m: v for m, v in found.items() if m in created and (created[m], str(m)) < mine}
    if not older:
        return None
    best = max(
        older,
        key=lambda m: (
            older[m]["cosine"] if older[m]["cosine"] is not None else -1.0,
            -(older[m]["phash_distance"] if older[m]["phash_distance"] is not None else 65),
        ),
    )
    pair = {
        "scope_id": meme.scope_id,
        "meme_id": meme.id,
        "duplicate_of": best,
        "phash_distance": older[best]["phash_distance"],
        "cosine": older[best]["cosine"],
        "model": model,
    }
    stmt = insert(near_duplicates).values([pair])
    session.execute(
        stmt.on_conflict_do_update(
            index_elements=["scope_id", "meme_id", "duplicate_of"],
            set_={
                "phash_distance": stmt.excluded.phash_distance,
                "cosine": stmt.excluded.cosine,
                "model": stmt.excluded.model,
            },
        )
    )
    return pair
