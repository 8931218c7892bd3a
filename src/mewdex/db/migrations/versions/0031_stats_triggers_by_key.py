"""The keyword statistics' delete triggers reach each statistics row by its primary key, whatever the
planner's statistics; indexes for the two ``ON DELETE SET NULL`` foreign keys to ``memes``.

0012's triggers subtracted a deletion's counts with ``UPDATE meme_search_term_stats … FROM (aggregate
of old_rows) WHERE …`` and removed the emptied rows with ``DELETE … USING``: joins of a transition
table (no statistics; PL/pgSQL plans it once per connection with the row count of the first call) with
a table that grows by whole imports between two ANALYZEs. With the table estimated at one row (last
analysed while empty) the planner put the whole statistics table on the outer side of a nested loop and
re-read the deleted terms for each of its rows: deleting a scope of 260 memes (35,000 postings) next to
150,000 statistics rows of other scopes took minutes of CPU where it takes a second (seen as a test
teardown of 180–206 s); even the plans that stayed linear read every statistics row at each call.

Now a deletion's counts are subtracted as an upsert of negative counts (``INSERT … ON CONFLICT DO
UPDATE``, whose conflicts are found through the primary key by construction, no join to plan) in key
order, and the rows it brought to zero are deleted per scope by ``scope_id = s AND term = ANY(terms)``
(an index condition on the key). The functions run with ``enable_seqscan = off``: a plan cached while
the table was small cannot later read it whole. Same for ``meme_search_scope_stats``. The counts are
exactly those of 0012's functions (a row the upsert finds missing is inserted at ≤ 0 and deleted again).

``artifacts.meme_id`` and ``channel_deliveries.meme_id`` (``ON DELETE SET NULL``) get an index each:
without one, every deleted meme read the whole table for its references.

Revision ID: 0031
Revises: 0030
"""

from alembic import op

revision = "0031"
down_revision = "0030"
branch_labels = None
depends_on = None

FUNCTIONS = r"""
CREATE OR REPLACE FUNCTION mewdex_search_documents_stats() RETURNS trigger LANGUAGE plpgsql
SET enable_seqscan = off AS $$
DECLARE
    emptied text[];
BEGIN
    IF TG_OP IN ('INSERT', 'UPDATE') THEN
        INSERT INTO meme_search_scope_stats AS s (scope_id, n_documents, total_length, impact_avgdl)
        SELECT scope_id, count(*), sum(term_count), 0 FROM new_rows GROUP BY scope_id ORDER BY scope_id
        ON CONFLICT (scope_id) DO UPDATE
            SET n_documents = s.n_documents + excluded.n_documents,
                total_length = s.total_length + excluded.total_length;
    END IF;
    IF TG_OP IN ('DELETE', 'UPDATE') THEN
        WITH changed AS (
            INSERT INTO meme_search_scope_stats AS s (scope_id, n_documents, total_length, impact_avgdl)
            SELECT scope_id, -count(*), -sum(term_count), 0 FROM old_rows GROUP BY scope_id ORDER BY scope_id
            ON CONFLICT (scope_id) DO UPDATE
                SET n_documents = s.n_documents + excluded.n_documents,
                    total_length = s.total_length + excluded.total_length
            RETURNING s.scope_id, s.n_documents)
        SELECT array_agg(scope_id) INTO emptied FROM changed WHERE n_documents <= 0;
        IF emptied IS NOT NULL THEN
            DELETE FROM meme_search_scope_stats WHERE scope_id = ANY (emptied);
        END IF;
    END IF;
    RETURN NULL;
END $$;

CREATE OR REPLACE FUNCTION mewdex_search_terms_stats() RETURNS trigger LANGUAGE plpgsql
SET enable_seqscan = off AS $$
DECLARE
    emptied record;
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO meme_search_term_stats AS t (scope_id, term, df)
        SELECT scope_id, term, count(*) FROM new_rows GROUP BY scope_id, term ORDER BY scope_id, term
        ON CONFLICT (scope_id, term) DO UPDATE SET df = t.df + excluded.df;
    ELSE
        FOR emptied IN
            WITH changed AS (
                INSERT INTO meme_search_term_stats AS t (scope_id, term, df)
                SELECT scope_id, term, -count(*) FROM old_rows GROUP BY scope_id, term ORDER BY scope_id, term
                ON CONFLICT (scope_id, term) DO UPDATE SET df = t.df + excluded.df
                RETURNING t.scope_id, t.term, t.df)
            SELECT scope_id, array_agg(term) AS terms FROM changed WHERE df <= 0 GROUP BY scope_id ORDER BY scope_id
        LOOP
            DELETE FROM meme_search_term_stats WHERE scope_id = emptied.scope_id AND term = ANY (emptied.terms);
        END LOOP;
    END IF;
    RETURN NULL;
END $$;
"""

# 0012's functions (CREATE OR REPLACE also drops the SET clause).
FUNCTIONS_0012 = r"""
CREATE OR REPLACE FUNCTION mewdex_search_documents_stats() RETURNS trigger LANGUAGE plpgsql AS $$
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

CREATE OR REPLACE FUNCTION mewdex_search_terms_stats() RETURNS trigger LANGUAGE plpgsql AS $$
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


def upgrade() -> None:
    op.execute(FUNCTIONS)
    op.create_index("ix_artifacts_meme", "artifacts", ["meme_id"], postgresql_where="meme_id IS NOT NULL")
    op.create_index(
        "ix_channel_deliveries_meme", "channel_deliveries", ["meme_id"], postgresql_where="meme_id IS NOT NULL"
    )


def downgrade() -> None:
    op.drop_index("ix_channel_deliveries_meme", table_name="channel_deliveries")
    op.drop_index("ix_artifacts_meme", table_name="artifacts")
    op.execute(FUNCTIONS_0012)
