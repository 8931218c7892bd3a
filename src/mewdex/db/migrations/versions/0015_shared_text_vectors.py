"""One indexed vector per shared text (issue 14: HNSW recall at scale).

Memes of one folder share their folder text, memes with a generic file name share their name, many
share a label set: each of those rows used to carry the same vector, and an HNSW graph with many
identical vectors degrades for every query (pgvector keeps pruned links, so a group of identical
vectors larger than ``ef_construction`` links only to itself and traps the searches that enter it;
``bench/scale.py --exact-fields folder`` at 10k: e5 recall@10 0.62 instead of 1.00).

Now at most ``CARRIERS_PER_TEXT`` rows of a (scope, generation, field, text) carry the vector
(:func:`mewdex.search.generations.write_vectors`); the others keep ``embedding`` NULL (the seed's
column is nullable), are not in the HNSW graph, and search gives them their carrier's distance
(:func:`mewdex.search.vector.search_generation`). Two partial indexes find a text's carriers and
its members; a trigger hands a deleted carrier's vector to a member when no carrier of that text is
left, whichever path deleted it (a meme's deletion cascading, a re-embedding).
Existing duplicates beyond the first carriers are turned into members here.

Revision ID: 0015
Revises: 0014
"""

from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None

CARRIERS_PER_TEXT = 2  # mewdex.search.generations.CARRIERS_PER_TEXT when this revision was written

KEY = "scope_id, generation_id, field, left(semantic_document_hash, 16)"


def upgrade() -> None:
    op.execute(f"CREATE INDEX ix_meme_embeddings_text_carriers ON meme_embeddings ({KEY}) WHERE embedding IS NOT NULL")
    op.execute(
        f"CREATE INDEX ix_meme_embeddings_text_members ON meme_embeddings ({KEY})"
        " WHERE embedding IS NULL AND item_status = 'ready'"
    )
    # Row-level and queued to the end of the statement: when several carriers of one text go in one
    # statement, the first call promotes a member and the next ones see it. A member is any 'ready'
    # row of the text without a vector. Its lookups need the table's statistics to take the partial
    # indexes: without them (a table filled since the last analyze) the planner walks the primary key
    # over the whole generation per deleted row (10,000 deletions: 4.3 s instead of 0.01 s without
    # the trigger); autovacuum's analyze, and the one at the end of this migration, provide them.
    op.execute(
        """
        CREATE FUNCTION mewdex_promote_text_carrier() RETURNS trigger LANGUAGE plpgsql AS $$
        DECLARE
            heir uuid;
        BEGIN
            IF EXISTS (
                SELECT 1 FROM meme_embeddings c
                WHERE c.scope_id = OLD.scope_id AND c.generation_id = OLD.generation_id AND c.field = OLD.field
                  AND left(c.semantic_document_hash, 16) = left(OLD.semantic_document_hash, 16)
                  AND c.semantic_document_hash = OLD.semantic_document_hash AND c.embedding IS NOT NULL
            ) THEN
                RETURN NULL;
            END IF;
            -- a member no other transaction holds (one being deleted is skipped, not waited for)
            SELECT e.meme_id INTO heir FROM meme_embeddings e
            WHERE e.scope_id = OLD.scope_id AND e.generation_id = OLD.generation_id AND e.field = OLD.field
              AND left(e.semantic_document_hash, 16) = left(OLD.semantic_document_hash, 16)
              AND e.semantic_document_hash = OLD.semantic_document_hash
              AND e.embedding IS NULL AND e.item_status = 'ready'
            LIMIT 1 FOR UPDATE SKIP LOCKED;
            IF heir IS NOT NULL THEN
                UPDATE meme_embeddings SET embedding = OLD.embedding
                WHERE scope_id = OLD.scope_id AND generation_id = OLD.generation_id AND meme_id = heir
                  AND field = OLD.field;
            END IF;
            RETURN NULL;
        END $$
        """
    )
    op.execute(
        "CREATE TRIGGER tg_meme_embeddings_promote_carrier AFTER DELETE ON meme_embeddings FOR EACH ROW"
        " WHEN (OLD.embedding IS NOT NULL) EXECUTE FUNCTION mewdex_promote_text_carrier()"
    )
    # Rows already stored: the first carriers of each text (by meme id) keep their vector.
    op.execute(
        f"""
        UPDATE meme_embeddings m SET embedding = NULL
        FROM (
            SELECT scope_id, generation_id, meme_id, field,
                   row_number() OVER (PARTITION BY scope_id, generation_id, field, semantic_document_hash
                                      ORDER BY meme_id) AS n
            FROM meme_embeddings WHERE embedding IS NOT NULL
        ) r
        WHERE r.n > {CARRIERS_PER_TEXT} AND m.scope_id = r.scope_id AND m.generation_id = r.generation_id
          AND m.meme_id = r.meme_id AND m.field = r.field
        """
    )
    op.execute("ANALYZE meme_embeddings")


def downgrade() -> None:
    # members get their text's vector back from a carrier
    op.execute(
        """
        UPDATE meme_embeddings m SET embedding = c.embedding
        FROM (
            SELECT DISTINCT ON (scope_id, generation_id, field, semantic_document_hash)
                   scope_id, generation_id, field, semantic_document_hash, embedding
            FROM meme_embeddings WHERE embedding IS NOT NULL
            ORDER BY scope_id, generation_id, field, semantic_document_hash, meme_id
        ) c
        WHERE m.embedding IS NULL AND m.scope_id = c.scope_id AND m.generation_id = c.generation_id
          AND m.field = c.field AND m.semantic_document_hash = c.semantic_document_hash
        """
    )
    op.execute("DROP TRIGGER tg_meme_embeddings_promote_carrier ON meme_embeddings")
    op.execute("DROP FUNCTION mewdex_promote_text_carrier()")
    op.execute("DROP INDEX ix_meme_embeddings_text_members")
    op.execute("DROP INDEX ix_meme_embeddings_text_carriers")
