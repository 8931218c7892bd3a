"""Keyword leg: a BM25 inverted index in PostgreSQL over jieba / word terms (folded), plus an
exact-phrase tier: memes whose folded text contains the whole folded query rank above all others.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from uuid import UUID

from sqlalchemy import delete, text
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.orm import Session

from mewdex.db.models import MemeSearchDocument, MemeSearchTerm, utcnow
from mewdex.dto.search import SearchFilters
from mewdex.library.listing import exists_sql
from mewdex.search.text import fold, has_han, tokenize

# Term frequency multipliers per context field (measured by bench/lab_text_recipe.py).
FIELD_WEIGHTS = {"name": 2.0, "ocr": 1.0, "labels": 0.5, "vision": 1.0}
PHRASE_FIELD = "phrase"
BM25_K1 = 1.2
BM25_B = 0.75
MAX_TERM_LENGTH = 255


@dataclass(frozen=True)
class KeywordHit:
    meme_id: UUID
    score: float
    phrase: bool


def index_document(session: Session, scope_id: str, meme_id: UUID, metadata_hash: str, fields: dict[str, str]) -> None:
    """Replace the meme's keyword document and postings.

    ``fields`` is :func:`mewdex.pipeline.context.keyword_document`'s output: space-joined folded
    tokens per field (``name``, ``ocr``, ``labels``) and ``phrase``, the folded text that exact
    phrases are matched in.
    """
    tf: defaultdict[str, float] = defaultdict(float)  # term -> Σ field weights
    for field, value in fields.items():
        if field == PHRASE_FIELD:
            continue
        weight = FIELD_WEIGHTS.get(field, 1.0)
        for term in value.split():
            if len(term) <= MAX_TERM_LENGTH:
                tf[term] += weight
    document = dict(
        scope_id=scope_id,
        meme_id=meme_id,
        metadata_hash=metadata_hash,
        folded_text=fields.get(PHRASE_FIELD, ""),
        term_count=float(sum(tf.values())),
        updated_at=utcnow(),
    )
    stmt = insert(MemeSearchDocument).values(**document)
    session.execute(
        stmt.on_conflict_do_update(
            index_elements=["scope_id", "meme_id"],
            set_={k: stmt.excluded[k] for k in ("metadata_hash", "folded_text", "term_count", "updated_at")},
        )
    )
    session.execute(
        delete(MemeSearchTerm).where(MemeSearchTerm.scope_id == scope_id, MemeSearchTerm.meme_id == meme_id)
    )
    if tf:
        session.execute(
            insert(MemeSearchTerm),
            [{"scope_id": scope_id, "meme_id": meme_id, "term": t, "tf": w} for t, w in tf.items()],
        )


_BM25_SQL = """
    WITH stats AS (
        SELECT count(*)::float AS n, greatest(avg(term_count), 1.0) AS avgdl
        FROM meme_search_documents WHERE scope_id = :scope
    ),
    df AS (
        SELECT term, count(*)::float AS df FROM meme_search_terms
        WHERE scope_id = :scope AND term = ANY(:terms) GROUP BY term
    )
    SELECT p.meme_id,
           sum(ln(1 + (stats.n - df.df + 0.5) / (df.df + 0.5))
               * p.tf * (:k1 + 1) / (p.tf + :k1 * (1 - :b + :b * d.term_count / stats.avgdl))) AS score
    FROM meme_search_terms p
    JOIN df ON df.term = p.term
    JOIN meme_search_documents d ON d.scope_id = p.scope_id AND d.meme_id = p.meme_id
    CROSS JOIN stats
    WHERE p.scope_id = :scope AND p.term = ANY(:terms){filters}
    GROUP BY p.meme_id
    ORDER BY score DESC, p.meme_id
    LIMIT :limit
    """


def phrase_worthy(folded: str) -> bool:
    """Long enough to be a phrase a user remembers: ≥ 2 Han characters or ≥ 4 other characters."""
    han = sum(1 for ch in folded if has_han(ch))
    return han >= 2 or len(folded) - han >= 4


_PHRASE_SQL = """
    SELECT meme_id FROM meme_search_documents
    WHERE scope_id = :scope AND folded_text LIKE :pattern ESCAPE '\\'{filters}
    ORDER BY length(folded_text), meme_id
    LIMIT :limit
    """


def search(
    session: Session, scope_id: str, query: str, limit: int, filters: SearchFilters | None = None
) -> list[KeywordHit]:
    """Keyword hits for ``query`` in the scope, best first: exact-phrase hits, then by BM25 score.

    ``filters`` narrow the memes inside both queries (BM25 statistics stay those of the whole scope,
    so a kept meme scores as it would unfiltered)."""
    terms = sorted(set(tokenize(query)))
    where, filter_params = exists_sql(filters, "p.meme_id")
    scores: dict[UUID, float] = {}
    if terms:
        params = {"scope": scope_id, "terms": terms, "k1": BM25_K1, "b": BM25_B, "limit": limit, **filter_params}
        scores = {row[0]: float(row[1]) for row in session.execute(text(_BM25_SQL.format(filters=where)), params)}
    phrase = fold(query).strip()
    phrase_ids: list[UUID] = []
    if phrase_worthy(phrase):
        pattern = "%" + phrase.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
        where, filter_params = exists_sql(filters, "meme_search_documents.meme_id")
        phrase_ids = list(
            session.execute(
                text(_PHRASE_SQL.format(filters=where)),
                {"scope": scope_id, "pattern": pattern, "limit": limit, **filter_params},
            ).scalars()
        )
    phrase_set = set(phrase_ids)
    hits = [KeywordHit(m, scores.get(m, 0.0), True) for m in phrase_ids]
    hits.sort(key=lambda h: -h.score)
    hits += [KeywordHit(m, s, False) for m, s in sorted(scores.items(), key=lambda kv: -kv[1]) if m not in phrase_set]
    return hits[:limit]
