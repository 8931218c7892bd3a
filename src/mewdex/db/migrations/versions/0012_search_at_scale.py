"""Search at scale (issue 14): per-scope keyword statistics kept by triggers, impact-ordered postings,
scope-bounded keys for two-character Chinese phrases and for perceptual-hash near-duplicates.

- ``meme_search_scope_stats`` (documents and total length per scope) and ``meme_search_term_stats``
  (document frequency per scope and term) are maintained by statement-level triggers on
  ``meme_search_documents`` and ``meme_search_terms``, inside the transaction that writes the
  documents (every path: upsert, delete, cascades from memes and scopes).
- ``meme_search_terms`` gains ``doc_length`` (the document's ``term_count``) and ``impact`` (BM25's
  term-frequency part, computed with the scope's ``impact_avgdl``) and the index
  ``(scope_id, term, impact DESC, meme_id) INCLUDE (tf, doc_length)`` that a query reads a bounded
  number of rows of per term (index-only).
- ``mewdex_han_bigram_keys(scope, folded_text)``: the scope-prefixed Han character bigrams of a
  document, GIN-indexed, so a Chinese phrase (two characters included) is found without a scan.
- ``mewdex_phash_bands(scope, phash)``: five scope-prefixed bands of a 64-bit perceptual hash
  (3, 3, 3, 3, 4 hex digits), GIN-indexed on ``memes``: two hashes within Hamming distance 4 differ in
  at most 4 hex digits, so they share a band.

- The per-model HNSW indexes are rebuilt with ``m = 32, ef_construction = 200``
  (``mewdex.search.vector_index.HNSW_WITH``; the defaults left the USE leg at recall@10 ≈ 0.6).

Existing rows are backfilled (statistics, lengths and impacts).

Revision ID: 0012
Revises: 0011
"""

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None

# BM25 parameters at the time of this migration (mewdex.search.keyword.BM25_K1 / BM25_B).
K1 = 1.2
B = 0.75

FUNCTIONS = r"""
CREATE FUNCTION mewdex_han_bigram_keys(scope text, folded text) RETURNS text[]
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT coalesce(array_agg(DISTINCT scope || ' ' || g), '{}')
    FROM (SELECT substr(folded, i, 2) AS g FROM generate_series(1, length(folded) - 1) AS i) s
    WHERE g ~ '^[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]{2}$'
$$;

CREATE FUNCTION mewdex_phash_bands(scope text, phash text) RETURNS text[]
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE WHEN phash ~ '^[0-9a-f]{16}$' THEN ARRAY[
        scope || ' 0' || substr(phash, 1, 3), scope || ' 1' || substr(phash, 4, 3),
        scope || ' 2' || substr(phash, 7, 3), scope || ' 3' || substr(phash, 10, 3),
        scope || ' 4' || substr(phash, 13, 4)] END
$$;

CREATE FUNCTION mewdex_search_documents_stats() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP IN ('INSERT', 'UPDATE') THEN
        INSERT INTO meme_search_scope_stats AS s (scope_id, n_documents, total_length, impact_avgdl)
        SELECT scope_id, count(*), sum(term_count), 0 FROM new_rows GROUP BY scope_id ORDER BY scope_id
        ON CONFLICT (scope_id) DO UPDATE
            SET n_documents = s.n_documents + excluded.n_documents,
                total_length = s.total_length + excluded.total_length;
    END IF;
    IF TG_OP IN ('DELETE', 'UPDATE') THEN
        UPDATE meme_search_scope_stats s
            SET n_documents = s.n_documents - o.n, total_length = s.total_length - o.total
        FROM (SELECT scope_id, count(*) AS n, sum(term_count) AS total FROM old_rows GROUP BY scope_id) o
        WHERE s.scope_id = o.scope_id;
        DELETE FROM meme_search_scope_stats
        WHERE scope_id IN (SELECT scope_id FROM old_rows) AND n_documents <= 0;
    END IF;
    RETURN NULL;
END $$;

CREATE FUNCTION mewdex_search_terms_stats() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO meme_search_term_stats AS t (scope_id, term, df)
        SELECT scope_id, term, count(*) FROM new_rows GROUP BY scope_id, term ORDER BY scope_id, term
        ON CONFLICT (scope_id, term) DO UPDATE SET df = t.df + excluded.df;
    ELSE
        UPDATE meme_search_term_stats t SET df = t.df - o.n
        FROM (SELECT scope_id, term, count(*) AS n FROM old_rows GROUP BY scope_id, term) o
        WHERE t.scope_id = o.scope_id AND t.term = o.term;
        DELETE FROM meme_search_term_stats t USING (SELECT DISTINCT scope_id, term FROM old_rows) o
        WHERE t.scope_id = o.scope_id AND t.term = o.term AND t.df <= 0;
    END IF;
    RETURN NULL;
END $$;
"""

TRIGGERS = """
CREATE TRIGGER trg_search_documents_stats_insert AFTER INSERT ON meme_search_documents
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION mewdex_search_documents_stats();
CREATE TRIGGER trg_search_documents_stats_update AFTER UPDATE ON meme_search_documents
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION mewdex_search_documents_stats();
CREATE TRIGGER trg_search_documents_stats_delete AFTER DELETE ON meme_search_documents
    REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION mewdex_search_documents_stats();
CREATE TRIGGER trg_search_terms_stats_insert AFTER INSERT ON meme_search_terms
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION mewdex_search_terms_stats();
CREATE TRIGGER trg_search_terms_stats_delete AFTER DELETE ON meme_search_terms
    REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION mewdex_search_terms_stats();
"""


def upgrade() -> None:
    op.create_table(
        "meme_search_scope_stats",
        sa.Column("scope_id", sa.String(128), primary_key=True),
        sa.Column("n_documents", sa.BigInteger(), nullable=False),
        sa.Column("total_length", sa.Float(), nullable=False),
        sa.Column("impact_avgdl", sa.Float(), nullable=False, server_default=sa.text("0")),
    )
    op.create_table(
        "meme_search_term_stats",
        sa.Column("scope_id", sa.String(128), primary_key=True),
        sa.Column("term", sa.String(255), primary_key=True),
        sa.Column("df", sa.BigInteger(), nullable=False),
    )
    op.add_column("meme_search_terms", sa.Column("doc_length", sa.REAL(), nullable=True))
    op.add_column("meme_search_terms", sa.Column("impact", sa.REAL(), nullable=True))
    # Backfill: statistics, then each posting's length and impact with its scope's average length.
    op.execute(
        """
        INSERT INTO meme_search_scope_stats (scope_id, n_documents, total_length, impact_avgdl)
        SELECT scope_id, count(*), sum(term_count), greatest(avg(term_count), 1.0)
        FROM meme_search_documents GROUP BY scope_id
        """
    )
    op.execute(
        """
        INSERT INTO meme_search_term_stats (scope_id, term, df)
        SELECT scope_id, term, count(*) FROM meme_search_terms GROUP BY scope_id, term
        """
    )
    op.execute(
        f"""
        UPDATE meme_search_terms p
        SET doc_length = d.term_count,
            impact = p.tf * {K1 + 1} / (p.tf + {K1} * (1 - {B} + {B} * d.term_count / s.impact_avgdl))
        FROM meme_search_documents d, meme_search_scope_stats s
        WHERE d.scope_id = p.scope_id AND d.meme_id = p.meme_id AND s.scope_id = p.scope_id
        """
    )
    op.alter_column("meme_search_terms", "doc_length", nullable=False)
    op.alter_column("meme_search_terms", "impact", nullable=False)
    op.create_index(
        "ix_meme_search_terms_impact",
        "meme_search_terms",
        ["scope_id", "term", sa.text("impact DESC"), "meme_id"],
        postgresql_include=["tf", "doc_length"],
    )
    op.execute(FUNCTIONS)
    op.execute(TRIGGERS)
    op.create_index(
        "ix_meme_search_documents_bigrams",
        "meme_search_documents",
        [sa.text("mewdex_han_bigram_keys(scope_id, folded_text)")],
        postgresql_using="gin",
    )
    op.create_index(
        "ix_memes_phash_bands",
        "memes",
        [sa.text("mewdex_phash_bands(scope_id, (extensions -> 'visual') ->> 'phash')")],
        postgresql_using="gin",
    )
    _rebuild_hnsw(HNSW_WITH)


HNSW_WITH = "WITH (m = 32, ef_construction = 200)"  # vector_index.HNSW_WITH at the time of this migration


def _rebuild_hnsw(with_clause: str) -> None:
    """Recreate every per-model HNSW index of the vector tables with ``with_clause`` (same name,
    expression and predicate)."""
    bind = op.get_bind()
    rows = bind.execute(
        sa.text(
            "SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = current_schema()"
            " AND tablename IN ('meme_embeddings', 'meme_visual_embeddings') AND indexdef ILIKE '%USING hnsw%'"
        )
    ).all()
    for name, definition in rows:
        head, sep, predicate = definition.partition(" WHERE ")
        if " WITH (" in head:
            head = head[: head.index(" WITH (")]
        op.execute(f'DROP INDEX "{name}"')
        op.execute(f"{head} {with_clause}{sep}{predicate}")


def downgrade() -> None:
    _rebuild_hnsw("")
    op.drop_index("ix_memes_phash_bands", table_name="memes")
    op.drop_index("ix_meme_search_documents_bigrams", table_name="meme_search_documents")
    for name, table in (
        ("trg_search_documents_stats_insert", "meme_search_documents"),
        ("trg_search_documents_stats_update", "meme_search_documents"),
        ("trg_search_documents_stats_delete", "meme_search_documents"),
        ("trg_search_terms_stats_insert", "meme_search_terms"),
        ("trg_search_terms_stats_delete", "meme_search_terms"),
    ):
        op.execute(f"DROP TRIGGER IF EXISTS {name} ON {table}")
    for fn in (
        "mewdex_search_terms_stats()",
        "mewdex_search_documents_stats()",
        "mewdex_phash_bands(text, text)",
        "mewdex_han_bigram_keys(text, text)",
    ):
        op.execute(f"DROP FUNCTION IF EXISTS {fn}")
    op.drop_index("ix_meme_search_terms_impact", table_name="meme_search_terms")
    op.drop_column("meme_search_terms", "impact")
    op.drop_column("meme_search_terms", "doc_length")
    op.drop_table("meme_search_term_stats")
    op.drop_table("meme_search_scope_stats")
