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
from mewdex.search.text import fold, has_han, is_han, tokenize

# Term frequency multipliers per context field (measured by bench/lab_text_recipe.py; ``labels`` 0.5 → 1.0
# by bench/quality.py --extra-queries bench/visual_queries_zh.jsonl: the keyword leg's MRR@10 0.143 → 0.157,
# fused 0.300 → 0.303, the Chinese picture descriptions' fused MRR@10 0.067 → 0.080; 2.0 was worse).
FIELD_WEIGHTS = {"name": 2.0, "ocr": 1.0, "labels": 1.0, "vision": 1.0, "tags": 2.0}
PHRASE_FIELD = "phrase"
BM25_K1 = 1.2
BM25_B = 0.75
MAX_TERM_LENGTH = 255
# Postings read per query term (in impact order) and memes scored exactly: see _BM25_SQL.
POSTINGS_PER_TERM = 5000
RESCORE = 400
# Re-weight a scope's postings when its average document length moved this much (relative).
IMPACT_DRIFT = 0.1


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

    The scope's statistics (documents, total length, document frequencies) follow in the same
    transaction by triggers (migration 0012). Postings carry their BM25 ``impact`` computed with
    the scope's ``impact_avgdl``; when the scope's average length has moved more than
    :data:`IMPACT_DRIFT` from it, every posting of the scope is re-weighted (:func:`refresh_impacts`).
    """
    index_documents(session, scope_id, [(meme_id, metadata_hash, fields)])


def term_frequencies(fields: dict[str, str]) -> dict[str, float]:
    """``{term: Σ field weights}`` of a keyword document (terms longer than MAX_TERM_LENGTH dropped)."""
    tf: defaultdict[str, float] = defaultdict(float)
    for field, value in fields.items():
        if field == PHRASE_FIELD:
            continue
        weight = FIELD_WEIGHTS.get(field, 1.0)
        for term in value.split():
            if len(term) <= MAX_TERM_LENGTH:
                tf[term] += weight
    return dict(tf)


def index_documents(session: Session, scope_id: str, documents: list[tuple[UUID, str, dict[str, str]]]) -> None:
    """:func:`index_document` for many memes of one scope at once: ``[(meme_id, metadata_hash, fields)]``
    (distinct memes), in four statements."""
    if not documents:
        return
    tfs = [term_frequencies(fields) for _, _, fields in documents]
    lengths = [float(sum(tf.values())) for tf in tfs]
    now = utcnow()
    rows = [
        dict(
            scope_id=scope_id,
            meme_id=meme_id,
            metadata_hash=metadata_hash,
            folded_text=fields.get(PHRASE_FIELD, ""),
            term_count=length,
            updated_at=now,
        )
        for (meme_id, metadata_hash, fields), length in zip(documents, lengths, strict=True)
    ]
    stmt = insert(MemeSearchDocument).values(rows)
    session.execute(
        stmt.on_conflict_do_update(
            index_elements=["scope_id", "meme_id"],
            set_={k: stmt.excluded[k] for k in ("metadata_hash", "folded_text", "term_count", "updated_at")},
        )
    )
    ids = [meme_id for meme_id, _, _ in documents]
    session.execute(delete(MemeSearchTerm).where(MemeSearchTerm.scope_id == scope_id, MemeSearchTerm.meme_id.in_(ids)))
    avgdl = refresh_impacts(session, scope_id)
    postings = [
        (t, meme_id, w, length, saturation(w, length, avgdl))
        for (meme_id, _, _), length, tf in zip(documents, lengths, tfs, strict=True)
        for t, w in tf.items()
    ]
    if postings:
        terms, meme_ids, tfs_, doc_lengths, impacts = (list(column) for column in zip(*postings, strict=True))
        session.execute(
            _INSERT_POSTINGS,
            {"s": scope_id, "terms": terms, "memes": meme_ids, "tfs": tfs_, "lengths": doc_lengths, "impacts": impacts},
        )


# All postings of a write in one statement (as arrays): one execution, and one run of the statement
# trigger that counts the terms' document frequencies, where one INSERT per posting ran it per row
# (16 postings per meme of the corpus; bench/ingest.py with pg_stat_statements).
_INSERT_POSTINGS = text(
    """
    INSERT INTO meme_search_terms (scope_id, term, meme_id, tf, doc_length, impact)
    SELECT :s, p.term, p.meme_id, p.tf, p.doc_length, p.impact
    FROM unnest(CAST(:terms AS varchar[]), CAST(:memes AS uuid[]), CAST(:tfs AS float8[]),
                CAST(:lengths AS real[]), CAST(:impacts AS real[])) AS p(term, meme_id, tf, doc_length, impact)
    """
)


def saturation(tf: float, doc_length: float, avgdl: float) -> float:
    """BM25's term-frequency part: ``tf·(k1+1) / (tf + k1·(1 − b + b·dl/avgdl))`` (the posting's
    contribution before the term's IDF)."""
    return tf * (BM25_K1 + 1) / (tf + BM25_K1 * (1 - BM25_B + BM25_B * doc_length / max(avgdl, 1.0)))


def refresh_impacts(session: Session, scope_id: str, *, force: bool = False) -> float:
    """The average length the scope's posting impacts use; re-weights every posting of the scope
    first when the current average has drifted more than :data:`IMPACT_DRIFT` from it (or ``force``).

    Runs after the document write (the statistics row is locked by then: the scope's writers take
    their turn, so all postings of a scope share one reference length)."""
    row = session.execute(
        text("SELECT n_documents, total_length, impact_avgdl FROM meme_search_scope_stats WHERE scope_id = :s"),
        {"s": scope_id},
    ).first()
    if row is None or row[0] <= 0:
        return 1.0
    current = max(row[1] / row[0], 1.0)
    reference = row[2]
    if not force and reference > 0 and abs(current - reference) <= IMPACT_DRIFT * reference:
        return reference
    session.execute(
        text(
            "UPDATE meme_search_terms SET impact = tf * (:k1 + 1) / (tf + :k1 * (1 - :b + :b * doc_length / :avgdl))"
            " WHERE scope_id = :s"
        ),
        {"k1": BM25_K1, "b": BM25_B, "avgdl": current, "s": scope_id},
    )
    session.execute(
        text("UPDATE meme_search_scope_stats SET impact_avgdl = :a WHERE scope_id = :s"), {"a": current, "s": scope_id}
    )
    return current


# Top-k by impact: every query term's best POSTINGS_PER_TERM postings (by impact: an index-only
# range scan whatever the library's size or its neighbours', the index carries tf and length) give
# their memes a partial BM25 score with the current statistics. When no query term has more postings
# than that, the partial scores are the scores: plain BM25's ranking exactly. Otherwise the RESCORE
# best get their full score from their own postings of the query terms, looked up per meme (a join
# on the terms read every posting of every query term instead: at 1M memes, p95 111 → 27 ms).
_BM25_SQL = """
    WITH stats AS (
        SELECT n_documents::float8 AS n, greatest(total_length / greatest(n_documents, 1), 1.0) AS avgdl
        FROM meme_search_scope_stats WHERE scope_id = :scope
    ),
    q AS (
        SELECT t.term, t.df, ln(1 + (stats.n - t.df + 0.5) / (t.df + 0.5)) AS idf
        FROM meme_search_term_stats t CROSS JOIN stats
        WHERE t.scope_id = :scope AND t.term = ANY(CAST(:terms AS varchar[]))
    ),
    top AS (
        SELECT p.meme_id,
               sum(q.idf * p.tf * (:k1 + 1) / (p.tf + :k1 * (1 - :b + :b * p.doc_length / stats.avgdl))) AS partial
        FROM q CROSS JOIN stats CROSS JOIN LATERAL (
            SELECT p.meme_id, p.tf, p.doc_length FROM meme_search_terms p
            WHERE p.scope_id = :scope AND p.term = q.term{filters}
            ORDER BY p.impact DESC
            LIMIT :per_term
        ) p
        GROUP BY p.meme_id
        ORDER BY partial DESC, p.meme_id
        LIMIT :rescore
    ),
    exact AS (SELECT coalesce(max(q.df), 0) <= :per_term AS every_posting_read FROM q)
    (SELECT top.meme_id, top.partial AS score FROM top WHERE (SELECT every_posting_read FROM exact))
    UNION ALL
    (SELECT c.meme_id,
            sum(p.idf * p.tf * (:k1 + 1) / (p.tf + :k1 * (1 - :b + :b * p.doc_length / stats.avgdl)))
     FROM top c
     CROSS JOIN LATERAL (
         SELECT q.idf, p.tf, p.doc_length FROM q
         JOIN meme_search_terms p ON p.scope_id = :scope AND p.term = q.term AND p.meme_id = c.meme_id
         OFFSET 0  -- kept a per-meme lookup: the planner would join every posting of the terms instead
     ) p
     CROSS JOIN stats
     WHERE NOT (SELECT every_posting_read FROM exact)
     GROUP BY c.meme_id)
    ORDER BY score DESC, meme_id
    LIMIT :limit
    """


def phrase_worthy(folded: str) -> bool:
    """Long enough to be a phrase a user remembers: ≥ 2 Han characters or ≥ 4 other characters."""
    han = sum(1 for ch in folded if has_han(ch))
    return han >= 2 or len(folded) - han >= 4


# Exact phrases: a Chinese phrase (two characters too) is looked up by its scope-prefixed Han
# bigrams (GIN, migration 0012: only this scope's documents that hold every bigram are read), other
# phrases by the trigram index; LIKE then checks the whole phrase.
_PHRASE_SQL = """
    SELECT d.meme_id FROM meme_search_documents d
    WHERE d.scope_id = :scope AND {lookup}d.folded_text LIKE :pattern ESCAPE '\\'{filters}
    ORDER BY length(d.folded_text), d.meme_id
    LIMIT :limit
    """
_BIGRAMS = "mewdex_han_bigram_keys(d.scope_id, d.folded_text) @> CAST(:bigrams AS text[]) AND "


def han_bigram_keys(scope_id: str, folded: str) -> list[str]:
    """The scope-prefixed Han character bigrams of ``folded`` (as SQL's ``mewdex_han_bigram_keys``)."""
    return sorted({f"{scope_id} {a}{b}" for a, b in zip(folded, folded[1:], strict=False) if is_han(a) and is_han(b)})


def search(
    session: Session, scope_id: str, query: str, limit: int, filters: SearchFilters | None = None
) -> list[KeywordHit]:
    """Keyword hits for ``query`` in the scope, best first: exact-phrase hits, then by BM25 score.

    One statement (one round trip). ``filters`` narrow the memes inside both parts (BM25 statistics
    stay those of the whole scope, so a kept meme scores as it would unfiltered)."""
    terms = sorted(set(tokenize(query)))
    phrase = fold(query).strip()
    parts: list[str] = []
    params: dict = {"scope": scope_id, "limit": limit}
    if terms:
        where, filter_params = exists_sql(filters, "p.meme_id")
        params |= {"terms": terms, "k1": BM25_K1, "b": BM25_B, "per_term": POSTINGS_PER_TERM}
        params |= {"rescore": max(RESCORE, 2 * limit), **filter_params}
        parts.append(f"SELECT meme_id, score, false AS phrase, 0 AS ord FROM ({_BM25_SQL.format(filters=where)}) bm25")
    if phrase_worthy(phrase):
        where, filter_params = exists_sql(filters, "d.meme_id")
        bigrams = han_bigram_keys(scope_id, phrase)
        params |= {"pattern": "%" + phrase.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"}
        params |= {"bigrams": bigrams, **filter_params}
        sql = _PHRASE_SQL.format(lookup=_BIGRAMS if bigrams else "", filters=where)
        parts.append(f"SELECT meme_id, NULL::float8, true, row_number() OVER () AS ord FROM ({sql}) phrase")
    if not parts:
        return []
    rows = session.execute(text(" UNION ALL ".join(f"({p})" for p in parts)), params).all()
    scores = {m: float(score) for m, score, is_phrase, _ in rows if not is_phrase}
    phrase_ids = [m for m, _, is_phrase, _ in sorted((r for r in rows if r[2]), key=lambda r: r[3])]
    phrase_set = set(phrase_ids)
    hits = [KeywordHit(m, scores.get(m, 0.0), True) for m in phrase_ids]
    hits.sort(key=lambda h: -h.score)
    hits += [KeywordHit(m, s, False) for m, s in sorted(scores.items(), key=lambda kv: -kv[1]) if m not in phrase_set]
    return hits[:limit]
