"""The whole library schema of seed 000 (scopes through task lane fairness).

Vector columns carry no fixed dimension; per-model HNSW indexes are created at run time by
mewdex.search.vector_index. pg_trgm serves exact-phrase keyword matches.

Revision ID: 0001
Revises:
Create Date: 2026-11-29 23:58:04.010103
"""

import pgvector.sqlalchemy
import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("CREATE EXTENSION IF NOT EXISTS vector")
    op.execute("CREATE EXTENSION IF NOT EXISTS pg_trgm")
    op.create_table(
        "image_naming_pools",
        sa.Column("id", sa.String(length=128), nullable=False),
        sa.Column("capacity", sa.Integer(), nullable=False),
        sa.Column("cursor_scope_id", sa.String(length=128), nullable=True),
        sa.Column("next_check_at", sa.DateTime(timezone=True), nullable=False),
        sa.CheckConstraint("capacity > 0", name="ck_image_naming_capacity"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_image_naming_pools")),
    )
    op.create_table(
        "installation_state",
        sa.Column("key", sa.String(length=64), nullable=False),
        sa.Column("schema_revision", sa.String(length=128), nullable=False),
        sa.Column("initialized_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("key", name=op.f("pk_installation_state")),
    )
    op.create_table(
        "scopes",
        sa.Column("id", sa.String(length=128), nullable=False),
        sa.Column("storage_namespace", sa.Uuid(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_scopes")),
        sa.UniqueConstraint("storage_namespace"),
    )
    # A scope's blob namespace is part of every blob path: it never changes once set.
    op.execute(
        "CREATE FUNCTION scopes_storage_namespace_immutable() RETURNS trigger LANGUAGE plpgsql AS $$ "
        "BEGIN IF NEW.storage_namespace IS DISTINCT FROM OLD.storage_namespace THEN "
        "RAISE EXCEPTION 'storage_namespace is immutable' USING ERRCODE = 'check_violation'; END IF; "
        "RETURN NEW; END $$"
    )
    op.execute(
        "CREATE TRIGGER scopes_storage_namespace_immutable BEFORE UPDATE ON scopes "
        "FOR EACH ROW EXECUTE FUNCTION scopes_storage_namespace_immutable()"
    )
    op.create_table(
        "meme_collections",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("scope_id", sa.String(length=128), nullable=False),
        sa.Column("name", sa.String(length=100), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["scope_id"], ["scopes.id"], name=op.f("fk_meme_collections_scope_id_scopes"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_meme_collections")),
        sa.UniqueConstraint("scope_id", "id", name="uq_meme_collections_scope_id"),
        sa.UniqueConstraint("scope_id", "name", name="uq_meme_collections_scope_name"),
    )
    op.create_table(
        "memes",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("scope_id", sa.String(length=128), nullable=False),
        sa.Column("storage_key", sa.String(length=1024), nullable=False),
        sa.Column("display_name", sa.String(length=255), server_default=sa.text("'image'"), nullable=False),
        sa.Column("name_source", sa.String(length=16), server_default=sa.text("'unknown'"), nullable=False),
        sa.Column(
            "text_input_status", sa.String(length=32), server_default=sa.text("'waiting_for_text'"), nullable=False
        ),
        sa.Column("extension", sa.String(length=16), nullable=False),
        sa.Column("size_bytes", sa.BigInteger(), nullable=False),
        sa.Column("sha256", sa.String(length=64), nullable=False),
        sa.Column("metadata_schema_version", sa.Integer(), server_default=sa.text("1"), nullable=False),
        sa.Column("context_status", sa.String(length=32), nullable=False),
        sa.Column("search_metadata_hash", sa.String(length=64), nullable=True),
        sa.Column("meme_context", postgresql.JSONB(astext_type=sa.Text()), nullable=False),
        sa.Column("provenance", postgresql.JSONB(astext_type=sa.Text()), nullable=False),
        sa.Column("extensions", postgresql.JSONB(astext_type=sa.Text()), nullable=False),
        sa.Column("revision", sa.BigInteger(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.CheckConstraint(
            "context_status IN ('pending','partial','ready','repair_required')", name="ck_memes_context_status"
        ),
        sa.CheckConstraint(
            "display_name <> '' AND char_length(display_name) <= 255 AND octet_length(display_name) <= 255 AND display_name = btrim(display_name, ' .') AND position('/' in display_name) = 0 AND position(chr(92) in display_name) = 0 AND display_name !~ '[[:cntrl:]]' AND display_name NOT IN ('.', '..', '.staging', '.quarantine') AND lower(display_name) !~ '\\.(png|jpe?g|gif|webp)$'",
            name="ck_memes_display_name_safe",
        ),
        sa.CheckConstraint(
            "extension = lower(extension) AND extension IN ('.png','.jpg','.gif','.webp')",
            name="ck_memes_extension_normalized",
        ),
        sa.CheckConstraint("name_source IN ('uploaded','manual','automatic','unknown')", name="ck_memes_name_source"),
        sa.CheckConstraint("sha256 ~ '^[0-9a-f]{64}$'", name="ck_memes_sha256_hex"),
        sa.CheckConstraint(
            "storage_key <> '' AND storage_key NOT IN ('.', '..', '.staging', '.quarantine') AND position('/' in storage_key) = 0 AND position(chr(92) in storage_key) = 0 AND storage_key !~ '[[:cntrl:]]'",
            name="ck_memes_storage_key_flat",
        ),
        sa.CheckConstraint(
            "text_input_status IN ('eligible','waiting_for_text','repair_required')", name="ck_memes_text_input_status"
        ),
        sa.CheckConstraint(
            "search_metadata_hash IS NULL OR length(search_metadata_hash) = 64", name="ck_memes_search_metadata_hash"
        ),
        sa.CheckConstraint("size_bytes >= 0", name="ck_memes_size_nonnegative"),
        sa.CheckConstraint("storage_key = sha256 || extension", name="ck_memes_storage_key_content_addressed"),
        sa.ForeignKeyConstraint(["scope_id"], ["scopes.id"], name=op.f("fk_memes_scope_id_scopes"), ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_memes")),
        sa.UniqueConstraint("scope_id", "id", name="uq_memes_scope_id"),
        sa.UniqueConstraint("scope_id", "sha256", "extension", name="uq_memes_scope_content"),
        sa.UniqueConstraint("scope_id", "storage_key", name="uq_memes_scope_storage"),
    )
    op.create_index("ix_memes_scope_display_name", "memes", ["scope_id", "display_name", "id"], unique=False)
    op.create_index(
        "ix_memes_scope_name_lower", "memes", ["scope_id", sa.literal_column("lower(display_name)"), "id"], unique=False
    )
    op.create_index(
        "ix_memes_scope_updated",
        "memes",
        ["scope_id", sa.literal_column("updated_at DESC"), sa.literal_column("id DESC")],
        unique=False,
    )
    op.create_table(
        "search_generations",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("scope_id", sa.String(length=128), nullable=False),
        sa.Column("model", sa.String(length=255), nullable=False),
        sa.Column("dimensions", sa.Integer(), nullable=False),
        sa.Column("status", sa.String(length=32), nullable=False),
        sa.Column("source_snapshot_hash", sa.String(length=64), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("activated_at", sa.DateTime(timezone=True), nullable=True),
        sa.CheckConstraint("status IN ('building','ready','active','failed','retired')", name="ck_generation_status"),
        sa.CheckConstraint("dimensions > 0", name="ck_generation_dimensions"),
        sa.ForeignKeyConstraint(
            ["scope_id"], ["scopes.id"], name=op.f("fk_search_generations_scope_id_scopes"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_search_generations")),
        sa.UniqueConstraint("scope_id", "id", name="uq_generations_scope_id"),
        sa.UniqueConstraint("scope_id", "model", "id", name="uq_generations_scope_model_id"),
    )
    op.create_index(
        "uq_search_generation_building",
        "search_generations",
        ["scope_id", "model"],
        unique=True,
        postgresql_where=sa.text("status = 'building'"),
    )
    op.create_table(
        "search_migration_states",
        sa.Column("scope_id", sa.String(length=128), nullable=False),
        sa.Column("model", sa.String(length=255), nullable=True),
        sa.Column("mode", sa.String(length=32), nullable=False),
        sa.Column("epoch", sa.BigInteger(), nullable=False),
        sa.Column("legacy_generation_id", sa.Uuid(), nullable=True),
        sa.Column("completed_count", sa.Integer(), nullable=False),
        sa.Column("total_count", sa.Integer(), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.CheckConstraint("mode IN ('legacy_only','backfill','incremental_only')", name="ck_search_migration_mode"),
        sa.ForeignKeyConstraint(
            ["scope_id"], ["scopes.id"], name=op.f("fk_search_migration_states_scope_id_scopes"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("scope_id", name=op.f("pk_search_migration_states")),
    )
    op.create_table(
        "task_batches",
        sa.Column("scope_id", sa.String(length=128), nullable=False),
        sa.Column("batch_id", sa.String(length=255), nullable=False),
        sa.Column("finalizer_state", sa.String(length=32), nullable=False),
        sa.Column("summary", postgresql.JSONB(astext_type=sa.Text()), nullable=True),
        sa.Column("sealed", sa.Boolean(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("finalized_at", sa.DateTime(timezone=True), nullable=True),
        sa.CheckConstraint("finalizer_state IN ('pending','submitted','complete')", name="ck_batch_finalizer_state"),
        sa.ForeignKeyConstraint(
            ["scope_id"], ["scopes.id"], name=op.f("fk_task_batches_scope_id_scopes"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("scope_id", "batch_id", name=op.f("pk_task_batches")),
    )
    op.create_table(
        "task_lane_fairness",
        sa.Column("lane", sa.String(length=64), nullable=False),
        sa.Column("resource_key", sa.String(length=128), server_default=sa.text("'__global__'"), nullable=False),
        sa.Column("scope_id", sa.String(length=128), nullable=False),
        sa.Column("last_dispatch_sequence", sa.BigInteger(), server_default=sa.text("0"), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.CheckConstraint("last_dispatch_sequence >= 0", name="ck_task_lane_fairness_sequence"),
        sa.CheckConstraint("length(resource_key) > 0", name="ck_task_lane_fairness_resource_key"),
        sa.ForeignKeyConstraint(
            ["scope_id"], ["scopes.id"], name=op.f("fk_task_lane_fairness_scope_id_scopes"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("lane", "resource_key", "scope_id", name=op.f("pk_task_lane_fairness")),
    )
    op.create_index(
        "ix_task_lane_fairness_dispatch",
        "task_lane_fairness",
        ["lane", "resource_key", "last_dispatch_sequence", "scope_id"],
        unique=False,
    )
    op.create_table(
        "derived_image_thumbnails",
        sa.Column("scope_id", sa.String(length=128), nullable=False),
        sa.Column("meme_id", sa.Uuid(), nullable=False),
        sa.Column("source_sha256", sa.String(length=64), nullable=False),
        sa.Column("source_size_bytes", sa.BigInteger(), nullable=False),
        sa.Column("profile", sa.String(length=128), nullable=False),
        sa.Column("output_key", sa.String(length=1024), nullable=True),
        sa.Column("output_sha256", sa.String(length=64), nullable=True),
        sa.Column("output_size_bytes", sa.BigInteger(), nullable=True),
        sa.Column("width", sa.Integer(), nullable=True),
        sa.Column("height", sa.Integer(), nullable=True),
        sa.Column("media_type", sa.String(length=128), nullable=True),
        sa.Column("status", sa.String(length=32), nullable=False),
        sa.Column("diagnostic", postgresql.JSONB(astext_type=sa.Text()), nullable=True),
        sa.Column("generated_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.CheckConstraint("status IN ('available','pending','failed','stale')", name="ck_thumbnail_status"),
        sa.CheckConstraint("height IS NULL OR height > 0", name="ck_thumbnail_height"),
        sa.CheckConstraint("length(source_sha256) = 64", name="ck_thumbnail_source_sha256"),
        sa.CheckConstraint("output_sha256 IS NULL OR length(output_sha256) = 64", name="ck_thumbnail_output_sha256"),
        sa.CheckConstraint(
            "output_size_bytes IS NULL OR output_size_bytes >= 0", name="ck_thumbnail_output_size_nonnegative"
        ),
        sa.CheckConstraint("source_size_bytes >= 0", name="ck_thumbnail_source_size_nonnegative"),
        sa.CheckConstraint("width IS NULL OR width > 0", name="ck_thumbnail_width"),
        sa.ForeignKeyConstraint(
            ["scope_id", "meme_id"],
            ["memes.scope_id", "memes.id"],
            name=op.f("fk_derived_image_thumbnails_scope_id_memes"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint(
            "scope_id",
            "meme_id",
            "source_sha256",
            "source_size_bytes",
            "profile",
            name=op.f("pk_derived_image_thumbnails"),
        ),
    )
    op.create_index(
        "ix_thumbnail_current",
        "derived_image_thumbnails",
        ["scope_id", "meme_id", "profile", "status", "updated_at"],
        unique=False,
    )
    op.create_table(
        "image_processing_jobs",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("scope_id", sa.String(length=128), nullable=False),
        sa.Column("meme_id", sa.Uuid(), nullable=False),
        sa.Column("revision", sa.Integer(), nullable=False),
        sa.Column("image_sha256", sa.String(length=64), nullable=False),
        sa.Column("metadata_hash", sa.String(length=64), nullable=True),
        sa.Column("processing_config_hash", sa.String(length=64), nullable=False),
        sa.Column("processing_config", postgresql.JSONB(astext_type=sa.Text()), nullable=False),
        sa.Column("telemetry_context", postgresql.JSONB(astext_type=sa.Text()), nullable=True),
        sa.Column("reverse_image_policy", sa.String(length=16), nullable=False),
        sa.Column("auto_name", sa.Boolean(), server_default=sa.text("false"), nullable=False),
        sa.Column("processing_mode", sa.String(length=16), server_default=sa.text("'normal'"), nullable=False),
        sa.Column("status", sa.String(length=32), nullable=False),
        sa.Column("current_stage", sa.String(length=64), nullable=True),
        sa.Column("error", postgresql.JSONB(astext_type=sa.Text()), nullable=True),
        sa.Column("retry_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("lease_owner", sa.String(length=255), nullable=True),
        sa.Column("lease_expires_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("claim_generation", sa.BigInteger(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("completed_at", sa.DateTime(timezone=True), nullable=True),
        sa.CheckConstraint("processing_mode IN ('normal','full_retry','repair')", name="ck_image_processing_mode"),
        sa.CheckConstraint("reverse_image_policy IN ('forbid','auto')", name="ck_image_processing_policy"),
        sa.CheckConstraint(
            "status IN ('queued','running','succeeded','failed','blocked','unknown_execution')",
            name="ck_image_processing_status",
        ),
        sa.CheckConstraint("claim_generation >= 0", name="ck_image_processing_generation"),
        sa.ForeignKeyConstraint(
            ["scope_id", "meme_id"],
            ["memes.scope_id", "memes.id"],
            name=op.f("fk_image_processing_jobs_scope_id_memes"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["scope_id"], ["scopes.id"], name=op.f("fk_image_processing_jobs_scope_id_scopes"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_image_processing_jobs")),
        sa.UniqueConstraint("scope_id", "id", name="uq_image_processing_jobs_scope_id"),
        sa.UniqueConstraint(
            "scope_id", "meme_id", "image_sha256", "revision", name="uq_image_processing_jobs_revision"
        ),
    )
    op.create_index(
        "ix_image_processing_jobs_active",
        "image_processing_jobs",
        ["scope_id", "meme_id", "image_sha256", "status"],
        unique=False,
    )
    op.create_table(
        "meme_collection_items",
        sa.Column("scope_id", sa.String(length=128), nullable=False),
        sa.Column("collection_id", sa.Uuid(), nullable=False),
        sa.Column("meme_id", sa.Uuid(), nullable=False),
        sa.Column("added_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["scope_id", "collection_id"],
            ["meme_collections.scope_id", "meme_collections.id"],
            name=op.f("fk_meme_collection_items_scope_id_meme_collections"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["scope_id", "meme_id"],
            ["memes.scope_id", "memes.id"],
            name=op.f("fk_meme_collection_items_scope_id_memes"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("scope_id", "collection_id", "meme_id", name=op.f("pk_meme_collection_items")),
    )
    op.create_index(
        "ix_meme_collection_items_page",
        "meme_collection_items",
        ["scope_id", "collection_id", "added_at", "meme_id"],
        unique=False,
    )
    op.create_table(
        "meme_embeddings",
        sa.Column("scope_id", sa.String(length=128), nullable=False),
        sa.Column("generation_id", sa.Uuid(), nullable=False),
        sa.Column("meme_id", sa.Uuid(), nullable=False),
        sa.Column("field", sa.String(length=32), server_default=sa.text("'document'"), nullable=False),
        sa.Column("model", sa.String(length=255), nullable=False),
        sa.Column("dimensions", sa.Integer(), nullable=False),
        sa.Column("embedding", pgvector.sqlalchemy.vector.VECTOR(), nullable=True),
        sa.Column("semantic_document", sa.String(length=6000), nullable=False),
        sa.Column("semantic_document_hash", sa.String(length=64), nullable=False),
        sa.Column("metadata_hash", sa.String(length=64), nullable=False),
        sa.Column("image_sha256", sa.String(length=64), nullable=False),
        sa.Column("meme_revision", sa.BigInteger(), nullable=False),
        sa.Column("item_status", sa.String(length=32), nullable=False),
        sa.CheckConstraint("item_status IN ('pending','ready','failed')", name="ck_embedding_item_status"),
        sa.CheckConstraint(
            "dimensions > 0 AND (embedding IS NULL OR vector_dims(embedding) = dimensions)",
            name="ck_embedding_dimensions",
        ),
        sa.ForeignKeyConstraint(
            ["scope_id", "generation_id"],
            ["search_generations.scope_id", "search_generations.id"],
            name=op.f("fk_meme_embeddings_scope_id_search_generations"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["scope_id", "meme_id"],
            ["memes.scope_id", "memes.id"],
            name=op.f("fk_meme_embeddings_scope_id_memes"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["scope_id"], ["scopes.id"], name=op.f("fk_meme_embeddings_scope_id_scopes"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("scope_id", "generation_id", "meme_id", "field", name=op.f("pk_meme_embeddings")),
    )
    op.create_index(
        "ix_embeddings_generation_status", "meme_embeddings", ["scope_id", "generation_id", "item_status"], unique=False
    )
    op.create_table(
        "meme_search_documents",
        sa.Column("scope_id", sa.String(length=128), nullable=False),
        sa.Column("meme_id", sa.Uuid(), nullable=False),
        sa.Column("metadata_hash", sa.String(length=64), nullable=False),
        sa.Column("folded_text", sa.Text(), nullable=False),
        sa.Column("term_count", sa.Float(), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["scope_id", "meme_id"],
            ["memes.scope_id", "memes.id"],
            name=op.f("fk_meme_search_documents_scope_id_memes"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("scope_id", "meme_id", name=op.f("pk_meme_search_documents")),
    )
    op.create_index(
        "ix_meme_search_documents_folded_trgm",
        "meme_search_documents",
        ["folded_text"],
        unique=False,
        postgresql_using="gin",
        postgresql_ops={"folded_text": "gin_trgm_ops"},
    )
    op.create_table(
        "meme_text_embeddings",
        sa.Column("scope_id", sa.String(length=128), nullable=False),
        sa.Column("meme_id", sa.Uuid(), nullable=False),
        sa.Column("image_sha256", sa.String(length=64), nullable=False),
        sa.Column("metadata_hash", sa.String(length=64), nullable=False),
        sa.Column("embedding_model_version", sa.String(length=255), nullable=False),
        sa.Column("dimensions", sa.Integer(), nullable=False),
        sa.Column("semantic_document", sa.String(length=6000), nullable=False),
        sa.Column("embedding", pgvector.sqlalchemy.vector.VECTOR(), nullable=True),
        sa.Column("status", sa.String(length=32), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.CheckConstraint("status IN ('pending','ready','failed')", name="ck_meme_text_embedding_status"),
        sa.CheckConstraint(
            "dimensions > 0 AND (embedding IS NULL OR vector_dims(embedding) = dimensions)",
            name="ck_meme_text_embedding_dimensions",
        ),
        sa.ForeignKeyConstraint(
            ["scope_id", "meme_id"],
            ["memes.scope_id", "memes.id"],
            name=op.f("fk_meme_text_embeddings_scope_id_memes"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["scope_id"], ["scopes.id"], name=op.f("fk_meme_text_embeddings_scope_id_scopes"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint(
            "scope_id",
            "meme_id",
            "image_sha256",
            "metadata_hash",
            "embedding_model_version",
            name=op.f("pk_meme_text_embeddings"),
        ),
    )
    op.create_index(
        "ix_meme_text_embeddings_current",
        "meme_text_embeddings",
        ["scope_id", "meme_id", "image_sha256", "metadata_hash", "embedding_model_version", "status"],
        unique=False,
    )
    op.create_table(
        "meme_visual_embeddings",
        sa.Column("scope_id", sa.String(length=128), nullable=False),
        sa.Column("meme_id", sa.Uuid(), nullable=False),
        sa.Column("model", sa.String(length=255), nullable=False),
        sa.Column("preprocess_version", sa.String(length=128), nullable=False),
        sa.Column("dimensions", sa.Integer(), nullable=False),
        sa.Column("image_sha256", sa.String(length=64), nullable=False),
        sa.Column("embedding", pgvector.sqlalchemy.vector.VECTOR(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.CheckConstraint(
            "dimensions > 0 AND vector_dims(embedding) = dimensions", name="ck_visual_embedding_dimensions"
        ),
        sa.CheckConstraint("length(image_sha256) = 64", name="ck_visual_embedding_sha256"),
        sa.ForeignKeyConstraint(
            ["scope_id", "meme_id"],
            ["memes.scope_id", "memes.id"],
            name=op.f("fk_meme_visual_embeddings_scope_id_memes"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["scope_id"], ["scopes.id"], name=op.f("fk_meme_visual_embeddings_scope_id_scopes"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint(
            "scope_id", "meme_id", "model", "preprocess_version", name=op.f("pk_meme_visual_embeddings")
        ),
        sa.UniqueConstraint("scope_id", "meme_id", "model", "preprocess_version", name="uq_visual_embedding_identity"),
    )
    op.create_index(
        "ix_visual_embeddings_match",
        "meme_visual_embeddings",
        ["scope_id", "model", "preprocess_version", "meme_id"],
        unique=False,
    )
    op.create_table(
        "search_heads",
        sa.Column("scope_id", sa.String(length=128), nullable=False),
        sa.Column("model", sa.String(length=255), nullable=False),
        sa.Column("active_generation_id", sa.Uuid(), nullable=True),
        sa.Column("active_generation_model", sa.String(length=255), nullable=True),
        sa.ForeignKeyConstraint(
            ["scope_id", "active_generation_model", "active_generation_id"],
            ["search_generations.scope_id", "search_generations.model", "search_generations.id"],
            name=op.f("fk_search_heads_scope_id_search_generations"),
        ),
        sa.ForeignKeyConstraint(
            ["scope_id"], ["scopes.id"], name=op.f("fk_search_heads_scope_id_scopes"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("scope_id", "model", name=op.f("pk_search_heads")),
    )
    op.create_table(
        "storage_operations",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("scope_id", sa.String(length=128), nullable=False),
        sa.Column("meme_id", sa.Uuid(), nullable=True),
        sa.Column("operation_type", sa.String(length=32), nullable=False),
        sa.Column("operation_token", sa.Uuid(), nullable=False),
        sa.Column("source_key", sa.String(length=1024), nullable=True),
        sa.Column("target_key", sa.String(length=1024), nullable=True),
        sa.Column("staging_key", sa.String(length=1024), nullable=True),
        sa.Column(
            "thumbnail_keys",
            postgresql.JSONB(astext_type=sa.Text()),
            server_default=sa.text("'[]'::jsonb"),
            nullable=False,
        ),
        sa.Column("before_sha256", sa.String(length=64), nullable=True),
        sa.Column("after_sha256", sa.String(length=64), nullable=True),
        sa.Column("before_size", sa.BigInteger(), nullable=True),
        sa.Column("after_size", sa.BigInteger(), nullable=True),
        sa.Column("expected_revision", sa.BigInteger(), nullable=True),
        sa.Column("claim_generation", sa.BigInteger(), nullable=True),
        sa.Column("attempt", sa.Integer(), nullable=True),
        sa.Column("task_id", sa.String(length=255), nullable=True),
        sa.Column("expected_title_fingerprint", sa.String(length=64), nullable=True),
        sa.Column("status", sa.String(length=32), nullable=False),
        sa.Column("error", postgresql.JSONB(astext_type=sa.Text()), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.CheckConstraint("operation_type IN ('upload','rename','delete')", name="ck_storage_operation_type"),
        sa.CheckConstraint(
            "status IN ('prepared','file_applied','completed','compensated','blocked')",
            name="ck_storage_operation_status",
        ),
        sa.CheckConstraint("attempt IS NULL OR attempt > 0", name="ck_storage_operation_attempt"),
        sa.CheckConstraint(
            "claim_generation IS NULL OR claim_generation > 0", name="ck_storage_operation_claim_generation"
        ),
        sa.CheckConstraint(
            "expected_revision IS NULL OR expected_revision >= 1", name="ck_storage_operation_expected_revision"
        ),
        sa.CheckConstraint(
            "expected_title_fingerprint IS NULL OR length(expected_title_fingerprint) = 64",
            name="ck_storage_operation_title_fingerprint",
        ),
        sa.ForeignKeyConstraint(
            ["scope_id", "meme_id"],
            ["memes.scope_id", "memes.id"],
            name=op.f("fk_storage_operations_scope_id_memes"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["scope_id"], ["scopes.id"], name=op.f("fk_storage_operations_scope_id_scopes"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_storage_operations")),
        sa.UniqueConstraint("operation_token"),
        sa.UniqueConstraint("scope_id", "meme_id", "operation_token", name="uq_storage_operation_token"),
    )
    op.create_index(
        "ix_storage_operations_recovery", "storage_operations", ["scope_id", "status", "updated_at"], unique=False
    )
    op.create_index(
        "uq_storage_operation_active",
        "storage_operations",
        ["scope_id", "meme_id"],
        unique=True,
        postgresql_where=sa.text("status IN ('prepared','file_applied') AND meme_id IS NOT NULL"),
    )
    op.create_table(
        "meme_search_terms",
        sa.Column("scope_id", sa.String(length=128), nullable=False),
        sa.Column("term", sa.String(length=255), nullable=False),
        sa.Column("meme_id", sa.Uuid(), nullable=False),
        sa.Column("tf", sa.Float(), nullable=False),
        sa.CheckConstraint("tf > 0", name="ck_meme_search_terms_tf"),
        sa.ForeignKeyConstraint(
            ["scope_id", "meme_id"],
            ["meme_search_documents.scope_id", "meme_search_documents.meme_id"],
            name=op.f("fk_meme_search_terms_scope_id_meme_search_documents"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("scope_id", "term", "meme_id", name=op.f("pk_meme_search_terms")),
    )
    op.create_index("ix_meme_search_terms_meme", "meme_search_terms", ["scope_id", "meme_id"], unique=False)
    op.create_table(
        "tasks",
        sa.Column("id", sa.String(length=255), nullable=False),
        sa.Column("scope_id", sa.String(length=128), nullable=False),
        sa.Column("task_type", sa.String(length=128), nullable=False),
        sa.Column("submission_mode", sa.String(length=16), nullable=True),
        sa.Column("image_stage", sa.String(length=32), nullable=True),
        sa.Column("processing_job_id", sa.Uuid(), nullable=True),
        sa.Column("target_meme_id", sa.Uuid(), nullable=True),
        sa.Column("target_image_sha256", sa.String(length=64), nullable=True),
        sa.Column("lane", sa.String(length=64), nullable=False),
        sa.Column("lane_resource_key", sa.String(length=128), server_default=sa.text("'__global__'"), nullable=False),
        sa.Column("payload", postgresql.JSONB(astext_type=sa.Text()), nullable=False),
        sa.Column("visual_match_snapshot", postgresql.JSONB(astext_type=sa.Text()), nullable=True),
        sa.Column("visual_snapshot_sha256", sa.String(length=64), nullable=True),
        sa.Column("visual_snapshot_protocol_version", sa.Integer(), nullable=True),
        sa.Column("visual_snapshot_matched_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("visual_snapshot_candidate_count", sa.Integer(), nullable=True),
        sa.Column("dedupe_key", sa.String(length=1024), nullable=True),
        sa.Column("status", sa.String(length=32), nullable=False),
        sa.Column("progress", sa.Float(), nullable=True),
        sa.Column("message", sa.String(length=500), nullable=True),
        sa.Column("result", postgresql.JSONB(astext_type=sa.Text()), nullable=True),
        sa.Column("error", postgresql.JSONB(astext_type=sa.Text()), nullable=True),
        sa.Column("resume_available", sa.Boolean(), server_default=sa.text("false"), nullable=False),
        sa.Column("analysis_policy", postgresql.JSONB(astext_type=sa.Text()), nullable=True),
        sa.Column("observed_cost", sa.Numeric(precision=20, scale=8), nullable=True),
        sa.Column("usage_checked_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("reminder_sent", sa.Boolean(), server_default=sa.text("false"), nullable=False),
        sa.Column("termination_reason", sa.String(length=64), nullable=True),
        sa.Column("termination_signal", sa.String(length=16), nullable=True),
        sa.Column("resume_reason", sa.String(length=64), nullable=True),
        sa.Column("resume_session_id", sa.String(length=255), nullable=True),
        sa.Column("executor_attempt_id", sa.String(length=255), nullable=True),
        sa.Column("workspace_selector", sa.String(length=128), nullable=True),
        sa.Column("resume_attempt_count", sa.Integer(), server_default=sa.text("0"), nullable=False),
        sa.Column("resume_started_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("first_error", postgresql.JSONB(astext_type=sa.Text()), nullable=True),
        sa.Column(
            "error_history",
            postgresql.JSONB(astext_type=sa.Text()),
            server_default=sa.text("'[]'::jsonb"),
            nullable=False,
        ),
        sa.Column("settings_version", sa.String(length=128), nullable=True),
        sa.Column("lease_owner", sa.String(length=255), nullable=True),
        sa.Column("lease_expires_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("claim_generation", sa.BigInteger(), nullable=False),
        sa.Column("attempt_count", sa.Integer(), nullable=False),
        sa.Column("max_attempts", sa.Integer(), nullable=False),
        sa.Column("available_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("completed_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.CheckConstraint(
            "image_stage IS NULL OR image_stage IN ('visual','agent','auto_rename','text_embedding')",
            name="ck_task_image_stage",
        ),
        sa.CheckConstraint("status IN ('queued','running','succeeded','failed')", name="ck_task_status"),
        sa.CheckConstraint(
            "submission_mode IS NULL OR (submission_mode = 'standalone' AND processing_job_id IS NULL) OR (submission_mode = 'pipeline' AND processing_job_id IS NOT NULL)",
            name="ck_task_submission_job_exclusivity",
        ),
        sa.CheckConstraint(
            "submission_mode IS NULL OR submission_mode IN ('pipeline','standalone')", name="ck_task_submission_mode"
        ),
        sa.CheckConstraint(
            "task_type NOT IN ('visual_embedding_generation','meme_context_generation','image_auto_rename','text_embedding_generation') OR submission_mode IS NULL OR (image_stage IS NOT NULL AND ((task_type = 'visual_embedding_generation' AND image_stage = 'visual') OR (task_type = 'meme_context_generation' AND image_stage = 'agent') OR (task_type = 'image_auto_rename' AND image_stage = 'auto_rename') OR (task_type = 'text_embedding_generation' AND image_stage = 'text_embedding')))",
            name="ck_task_image_stage_type",
        ),
        sa.CheckConstraint(
            "termination_reason IS NULL OR termination_reason IN ('analysis_cost_limit','unknown_execution','timeout','cancelled','process_failed')",
            name="ck_task_termination_reason",
        ),
        sa.CheckConstraint(
            "termination_signal IS NULL OR termination_signal IN ('SIGTERM','SIGKILL','already_exited')",
            name="ck_task_termination_signal",
        ),
        sa.CheckConstraint("attempt_count >= 0 AND max_attempts > 0", name="ck_task_attempts"),
        sa.CheckConstraint("length(lane_resource_key) > 0", name="ck_task_lane_resource_key"),
        sa.CheckConstraint("observed_cost IS NULL OR observed_cost >= 0", name="ck_task_observed_cost"),
        sa.CheckConstraint(
            "target_image_sha256 IS NULL OR length(target_image_sha256) = 64", name="ck_task_target_image_sha256"
        ),
        sa.CheckConstraint(
            "visual_snapshot_candidate_count IS NULL OR visual_snapshot_candidate_count >= 0",
            name="ck_task_visual_snapshot_candidate_count",
        ),
        sa.CheckConstraint(
            "visual_snapshot_protocol_version IS NULL OR visual_snapshot_protocol_version > 0",
            name="ck_task_visual_snapshot_protocol_version",
        ),
        sa.CheckConstraint(
            "visual_snapshot_sha256 IS NULL OR length(visual_snapshot_sha256) = 64",
            name="ck_task_visual_snapshot_sha256",
        ),
        sa.ForeignKeyConstraint(
            ["scope_id", "processing_job_id"],
            ["image_processing_jobs.scope_id", "image_processing_jobs.id"],
            name=op.f("fk_tasks_scope_id_image_processing_jobs"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["scope_id", "target_meme_id"],
            ["memes.scope_id", "memes.id"],
            name=op.f("fk_tasks_scope_id_memes"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(["scope_id"], ["scopes.id"], name=op.f("fk_tasks_scope_id_scopes"), ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_tasks")),
        sa.UniqueConstraint("scope_id", "id", name="uq_task_scope_id"),
    )
    op.create_index(
        "ix_tasks_active_dedupe",
        "tasks",
        ["scope_id", "task_type", "dedupe_key"],
        unique=True,
        postgresql_where=sa.text("status IN ('queued','running') AND dedupe_key IS NOT NULL"),
    )
    op.create_index(
        "ix_tasks_claimable", "tasks", ["scope_id", "status", "available_at", "lease_expires_at"], unique=False
    )
    op.create_index(
        "ix_tasks_image_submission",
        "tasks",
        ["scope_id", "submission_mode", "image_stage", "processing_job_id", "created_at"],
        unique=False,
    )
    op.create_index(
        "ix_tasks_image_target_active",
        "tasks",
        ["scope_id", "target_meme_id", "target_image_sha256", "status", "created_at"],
        unique=False,
    )
    op.create_index("ix_tasks_lane_queue", "tasks", ["lane", "status", "available_at"], unique=False)
    op.create_table(
        "agent_callback_requests",
        sa.Column("scope_id", sa.String(length=128), nullable=False),
        sa.Column("request_id", sa.String(length=128), nullable=False),
        sa.Column("task_id", sa.String(length=255), nullable=False),
        sa.Column("claim_generation", sa.BigInteger(), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("operation", sa.String(length=128), nullable=False),
        sa.Column("target_sha256", sa.String(length=64), nullable=False),
        sa.Column("input_digest", sa.String(length=64), nullable=False),
        sa.Column("state", sa.String(length=32), nullable=False),
        sa.Column("result", postgresql.JSONB(astext_type=sa.Text()), nullable=True),
        sa.Column("error", postgresql.JSONB(astext_type=sa.Text()), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("completed_at", sa.DateTime(timezone=True), nullable=True),
        sa.CheckConstraint(
            "state IN ('started','completed','failed','unknown_execution')", name="ck_agent_callback_request_state"
        ),
        sa.CheckConstraint("attempt > 0", name="ck_agent_callback_request_attempt"),
        sa.CheckConstraint("claim_generation > 0", name="ck_agent_callback_request_generation"),
        sa.CheckConstraint("length(input_digest) = 64", name="ck_agent_callback_request_input_digest"),
        sa.CheckConstraint("length(target_sha256) = 64", name="ck_agent_callback_request_target_sha"),
        sa.ForeignKeyConstraint(
            ["scope_id", "task_id"],
            ["tasks.scope_id", "tasks.id"],
            name=op.f("fk_agent_callback_requests_scope_id_tasks"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["scope_id"], ["scopes.id"], name=op.f("fk_agent_callback_requests_scope_id_scopes"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("scope_id", "request_id", name=op.f("pk_agent_callback_requests")),
        sa.UniqueConstraint(
            "scope_id",
            "task_id",
            "claim_generation",
            "attempt",
            "operation",
            "target_sha256",
            "input_digest",
            name="uq_agent_callback_requests_logical",
        ),
    )
    op.create_index(
        "ix_agent_callback_requests_scope_task",
        "agent_callback_requests",
        ["scope_id", "task_id", "created_at"],
        unique=False,
    )
    op.create_table(
        "image_processing_attempts",
        sa.Column("scope_id", sa.String(length=128), nullable=False),
        sa.Column("task_id", sa.String(length=255), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("attempt_id", sa.String(length=255), nullable=False),
        sa.Column("stage", sa.String(length=64), nullable=False),
        sa.Column("state", sa.String(length=32), nullable=False),
        sa.Column("request_id", sa.String(length=255), nullable=True),
        sa.Column("session_id", sa.String(length=255), nullable=True),
        sa.Column("executor_attempt_id", sa.String(length=255), nullable=True),
        sa.Column("resume_of_attempt_id", sa.String(length=255), nullable=True),
        sa.Column("workspace_selector", sa.String(length=128), nullable=True),
        sa.Column("processing_config_hash", sa.String(length=64), nullable=True),
        sa.Column("analysis_policy", postgresql.JSONB(astext_type=sa.Text()), nullable=True),
        sa.Column("observed_cost", sa.Numeric(precision=20, scale=8), nullable=True),
        sa.Column("usage_checked_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("reminder_sent", sa.Boolean(), server_default=sa.text("false"), nullable=False),
        sa.Column("termination_reason", sa.String(length=64), nullable=True),
        sa.Column("termination_signal", sa.String(length=16), nullable=True),
        sa.Column("process_reaped", sa.Boolean(), nullable=True),
        sa.Column("analysis_diagnostic", postgresql.JSONB(none_as_null=True, astext_type=sa.Text()), nullable=True),
        sa.Column("resume_available", sa.Boolean(), server_default=sa.text("false"), nullable=False),
        sa.Column("resume_reason", sa.String(length=64), nullable=True),
        sa.Column("error", postgresql.JSONB(astext_type=sa.Text()), nullable=True),
        sa.Column("input_digest", sa.String(length=64), nullable=False),
        sa.Column("target_sha256", sa.String(length=64), nullable=False),
        sa.Column("claim_generation", sa.BigInteger(), nullable=False),
        sa.Column("visual_snapshot_sha256", sa.String(length=64), nullable=True),
        sa.Column("visual_snapshot_protocol_version", sa.Integer(), nullable=True),
        sa.Column("visual_snapshot_matched_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("visual_snapshot_candidate_count", sa.Integer(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.CheckConstraint(
            "state IN ('prepared','grant_committed','external_started','completed','failed','unknown_execution')",
            name="ck_image_processing_attempt_state",
        ),
        sa.CheckConstraint(
            "termination_reason IS NULL OR termination_reason IN ('analysis_cost_limit','unknown_execution','timeout','cancelled','process_failed')",
            name="ck_attempt_termination_reason",
        ),
        sa.CheckConstraint(
            "termination_signal IS NULL OR termination_signal IN ('SIGTERM','SIGKILL','already_exited')",
            name="ck_attempt_termination_signal",
        ),
        sa.CheckConstraint(
            'analysis_diagnostic IS NULL OR analysis_diagnostic IN (\'{"check_stage":"analysis_monitor","trigger_reason":"agent_analysis_usage_unavailable"}\'::jsonb,\'{"check_stage":"analysis_monitor","trigger_reason":"agent_analysis_reminder_plugin_unavailable"}\'::jsonb,\'{"check_stage":"analysis_monitor","trigger_reason":"agent_maximum_analysis_depth_exceeded"}\'::jsonb)',
            name="ck_attempt_analysis_diagnostic",
        ),
        sa.CheckConstraint("observed_cost IS NULL OR observed_cost >= 0", name="ck_attempt_observed_cost"),
        sa.CheckConstraint(
            "visual_snapshot_candidate_count IS NULL OR visual_snapshot_candidate_count >= 0",
            name="ck_attempt_visual_snapshot_candidate_count",
        ),
        sa.CheckConstraint(
            "visual_snapshot_protocol_version IS NULL OR visual_snapshot_protocol_version > 0",
            name="ck_attempt_visual_snapshot_protocol_version",
        ),
        sa.CheckConstraint(
            "visual_snapshot_sha256 IS NULL OR length(visual_snapshot_sha256) = 64",
            name="ck_attempt_visual_snapshot_sha256",
        ),
        sa.ForeignKeyConstraint(
            ["scope_id", "task_id"],
            ["tasks.scope_id", "tasks.id"],
            name=op.f("fk_image_processing_attempts_scope_id_tasks"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("scope_id", "task_id", "attempt", name=op.f("pk_image_processing_attempts")),
        sa.UniqueConstraint("attempt_id"),
    )
    op.create_index(
        "ix_image_processing_attempts_resume",
        "image_processing_attempts",
        ["scope_id", "task_id", "resume_available", "updated_at"],
        unique=False,
    )
    op.create_index(
        "ix_image_processing_attempts_task",
        "image_processing_attempts",
        ["scope_id", "task_id", "attempt"],
        unique=False,
    )
    op.create_index(
        "uq_image_processing_attempt_executor_id",
        "image_processing_attempts",
        ["executor_attempt_id"],
        unique=True,
        postgresql_where=sa.text("executor_attempt_id IS NOT NULL"),
    )
    op.create_table(
        "image_processing_stages",
        sa.Column("scope_id", sa.String(length=128), nullable=False),
        sa.Column("job_id", sa.Uuid(), nullable=False),
        sa.Column("stage", sa.String(length=64), nullable=False),
        sa.Column("status", sa.String(length=32), nullable=False),
        sa.Column("planned", sa.Boolean(), server_default=sa.text("true"), nullable=False),
        sa.Column("skip_reason", sa.String(length=32), nullable=True),
        sa.Column("task_id", sa.String(length=255), nullable=True),
        sa.Column("attempt_count", sa.Integer(), nullable=False),
        sa.Column("error", postgresql.JSONB(astext_type=sa.Text()), nullable=True),
        sa.Column("retry_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.CheckConstraint(
            "(planned AND skip_reason IS NULL) OR (NOT planned AND skip_reason IN ('already_ready','disabled'))",
            name="ck_image_processing_stage_plan",
        ),
        sa.CheckConstraint(
            "(planned AND status <> 'skipped') OR (NOT planned AND status = 'skipped')",
            name="ck_image_processing_stage_plan_status",
        ),
        sa.CheckConstraint(
            "stage IN ('visual', 'agent', 'auto_rename', 'text_embedding')", name="ck_image_processing_stage_name"
        ),
        sa.CheckConstraint(
            "status IN ('queued','running','succeeded','failed','blocked','unknown_execution','skipped','warning')",
            name="ck_image_processing_stage_status",
        ),
        sa.ForeignKeyConstraint(
            ["scope_id", "job_id"],
            ["image_processing_jobs.scope_id", "image_processing_jobs.id"],
            name=op.f("fk_image_processing_stages_scope_id_image_processing_jobs"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["scope_id", "task_id"],
            ["tasks.scope_id", "tasks.id"],
            name=op.f("fk_image_processing_stages_scope_id_tasks"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("scope_id", "job_id", "stage", name=op.f("pk_image_processing_stages")),
    )
    op.create_index("ix_image_processing_stages_task", "image_processing_stages", ["scope_id", "task_id"], unique=False)
    op.create_table(
        "operation_grants",
        sa.Column("scope_id", sa.String(length=128), nullable=False),
        sa.Column("operation", sa.String(length=128), nullable=False),
        sa.Column("idempotency_key", sa.String(length=255), nullable=False),
        sa.Column("grant_id", sa.String(length=255), nullable=False),
        sa.Column("task_id", sa.String(length=255), nullable=True),
        sa.Column("resource_id", sa.String(length=255), nullable=True),
        sa.Column("source", sa.String(length=64), nullable=True),
        sa.Column("units", sa.Integer(), nullable=True),
        sa.Column("metering_units", sa.Integer(), nullable=True),
        sa.Column("state", sa.String(length=32), nullable=False),
        sa.Column("attempt_id", sa.String(length=255), nullable=True),
        sa.Column("input_digest", sa.String(length=64), nullable=True),
        sa.Column("request_fingerprint", sa.String(length=64), nullable=True),
        sa.Column("retry_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.CheckConstraint(
            "operation IN ('image.upload','analysis.agent','analysis.reverse_image_search','image.delete')",
            name="ck_operation_grant_operation",
        ),
        sa.CheckConstraint("state IN ('acquired','committed','released','unknown')", name="ck_operation_grant_state"),
        sa.CheckConstraint("metering_units IS NULL OR metering_units >= 0", name="ck_operation_grant_metering_units"),
        sa.CheckConstraint(
            "request_fingerprint IS NULL OR length(request_fingerprint) = 64", name="ck_operation_grant_fingerprint"
        ),
        sa.CheckConstraint(
            "source IS NULL OR (length(source) > 0 AND length(source) <= 64)", name="ck_operation_grant_source"
        ),
        sa.CheckConstraint("units IS NULL OR units > 0", name="ck_operation_grant_units"),
        sa.ForeignKeyConstraint(
            ["scope_id", "task_id"],
            ["tasks.scope_id", "tasks.id"],
            name=op.f("fk_operation_grants_scope_id_tasks"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["scope_id"], ["scopes.id"], name=op.f("fk_operation_grants_scope_id_scopes"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("scope_id", "operation", "idempotency_key", name=op.f("pk_operation_grants")),
        sa.UniqueConstraint("grant_id"),
    )
    op.create_index("ix_operation_grants_scope_task", "operation_grants", ["scope_id", "task_id"], unique=False)
    op.create_table(
        "reverse_image_usage_events",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("request_id", sa.String(length=128), nullable=False),
        sa.Column("scope_id", sa.String(length=128), nullable=False),
        sa.Column("task_id", sa.String(length=255), nullable=False),
        sa.Column("meme_id", sa.Uuid(), nullable=True),
        sa.Column("cache_key", sa.String(length=128), nullable=False),
        sa.Column("cache_status", sa.String(length=16), nullable=False),
        sa.Column("provider_called", sa.Boolean(), nullable=False),
        sa.Column("provider", sa.String(length=64), nullable=True),
        sa.Column("claim_generation", sa.BigInteger(), nullable=True),
        sa.Column("attempt", sa.Integer(), nullable=True),
        sa.Column("operation", sa.String(length=128), nullable=True),
        sa.Column("target_sha256", sa.String(length=64), nullable=True),
        sa.Column("input_digest", sa.String(length=64), nullable=True),
        sa.Column("outcome", sa.String(length=32), nullable=False),
        sa.Column("retryable", sa.Boolean(), nullable=False),
        sa.Column("result", postgresql.JSONB(astext_type=sa.Text()), nullable=True),
        sa.Column("error", postgresql.JSONB(astext_type=sa.Text()), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("provider_started_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("completed_at", sa.DateTime(timezone=True), nullable=True),
        sa.CheckConstraint("cache_status IN ('hit','miss','refresh')", name="ck_reverse_usage_cache_status"),
        sa.CheckConstraint(
            "outcome IN ('started','success','empty','failed','forbidden')", name="ck_reverse_usage_outcome"
        ),
        sa.CheckConstraint("attempt IS NULL OR attempt > 0", name="ck_reverse_usage_attempt"),
        sa.CheckConstraint(
            "claim_generation IS NULL OR claim_generation > 0", name="ck_reverse_usage_claim_generation"
        ),
        sa.CheckConstraint(
            "provider_called = false OR provider_started_at IS NOT NULL", name="ck_reverse_usage_provider_started"
        ),
        sa.CheckConstraint("target_sha256 IS NULL OR length(target_sha256) = 64", name="ck_reverse_usage_target_sha"),
        sa.ForeignKeyConstraint(
            ["scope_id", "meme_id"],
            ["memes.scope_id", "memes.id"],
            name=op.f("fk_reverse_image_usage_events_scope_id_memes"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["scope_id", "task_id"],
            ["tasks.scope_id", "tasks.id"],
            name=op.f("fk_reverse_image_usage_events_scope_id_tasks"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_reverse_image_usage_events")),
        sa.UniqueConstraint("request_id"),
    )
    op.create_index(
        "ix_reverse_usage_scope_created", "reverse_image_usage_events", ["scope_id", "created_at"], unique=False
    )
    op.create_index(
        "ix_reverse_usage_scope_task", "reverse_image_usage_events", ["scope_id", "task_id", "created_at"], unique=False
    )
    op.create_table(
        "task_batch_items",
        sa.Column("scope_id", sa.String(length=128), nullable=False),
        sa.Column("batch_id", sa.String(length=255), nullable=False),
        sa.Column("task_id", sa.String(length=255), nullable=False),
        sa.ForeignKeyConstraint(
            ["scope_id", "batch_id"],
            ["task_batches.scope_id", "task_batches.batch_id"],
            name=op.f("fk_task_batch_items_scope_id_task_batches"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["scope_id", "task_id"],
            ["tasks.scope_id", "tasks.id"],
            name=op.f("fk_task_batch_items_scope_id_tasks"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("scope_id", "batch_id", "task_id", name=op.f("pk_task_batch_items")),
    )
    op.create_table(
        "task_lane_resource_slots",
        sa.Column("lane", sa.String(length=64), nullable=False),
        sa.Column("resource_key", sa.String(length=128), nullable=False),
        sa.Column("slot_number", sa.Integer(), nullable=False),
        sa.Column("task_scope_id", sa.String(length=128), nullable=True),
        sa.Column("task_id", sa.String(length=255), nullable=True),
        sa.Column("lease_owner", sa.String(length=255), nullable=True),
        sa.Column("claim_generation", sa.BigInteger(), nullable=True),
        sa.Column("lease_expires_at", sa.DateTime(timezone=True), nullable=True),
        sa.CheckConstraint("length(resource_key) > 0", name="ck_task_lane_resource_key_value"),
        sa.CheckConstraint("slot_number >= 0", name="ck_resource_slot_number"),
        sa.ForeignKeyConstraint(
            ["task_scope_id", "task_id"],
            ["tasks.scope_id", "tasks.id"],
            name=op.f("fk_task_lane_resource_slots_task_scope_id_tasks"),
        ),
        sa.ForeignKeyConstraint(
            ["task_scope_id"],
            ["scopes.id"],
            name=op.f("fk_task_lane_resource_slots_task_scope_id_scopes"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("lane", "resource_key", "slot_number", name=op.f("pk_task_lane_resource_slots")),
        sa.UniqueConstraint("task_scope_id", "task_id", name="uq_task_lane_resource_slot_task"),
    )
    op.create_index(
        "ix_task_lane_resource_slot_dispatch",
        "task_lane_resource_slots",
        ["lane", "resource_key", "slot_number"],
        unique=False,
    )
    op.create_table(
        "task_lane_slots",
        sa.Column("lane", sa.String(length=64), nullable=False),
        sa.Column("slot_number", sa.Integer(), nullable=False),
        sa.Column("task_scope_id", sa.String(length=128), nullable=True),
        sa.Column("task_id", sa.String(length=255), nullable=True),
        sa.Column("lease_owner", sa.String(length=255), nullable=True),
        sa.Column("claim_generation", sa.BigInteger(), nullable=True),
        sa.Column("lease_expires_at", sa.DateTime(timezone=True), nullable=True),
        sa.CheckConstraint("slot_number >= 0", name="ck_slot_number"),
        sa.ForeignKeyConstraint(
            ["task_scope_id", "task_id"],
            ["tasks.scope_id", "tasks.id"],
            name=op.f("fk_task_lane_slots_task_scope_id_tasks"),
        ),
        sa.ForeignKeyConstraint(
            ["task_scope_id"], ["scopes.id"], name=op.f("fk_task_lane_slots_task_scope_id_scopes"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("lane", "slot_number", name=op.f("pk_task_lane_slots")),
        sa.UniqueConstraint("task_scope_id", "task_id", name="uq_task_lane_slot_task"),
    )


def downgrade() -> None:
    op.drop_table("task_lane_slots")
    op.drop_index("ix_task_lane_resource_slot_dispatch", table_name="task_lane_resource_slots")
    op.drop_table("task_lane_resource_slots")
    op.drop_table("task_batch_items")
    op.drop_index("ix_reverse_usage_scope_task", table_name="reverse_image_usage_events")
    op.drop_index("ix_reverse_usage_scope_created", table_name="reverse_image_usage_events")
    op.drop_table("reverse_image_usage_events")
    op.drop_index("ix_operation_grants_scope_task", table_name="operation_grants")
    op.drop_table("operation_grants")
    op.drop_index("ix_image_processing_stages_task", table_name="image_processing_stages")
    op.drop_table("image_processing_stages")
    op.drop_index(
        "uq_image_processing_attempt_executor_id",
        table_name="image_processing_attempts",
        postgresql_where=sa.text("executor_attempt_id IS NOT NULL"),
    )
    op.drop_index("ix_image_processing_attempts_task", table_name="image_processing_attempts")
    op.drop_index("ix_image_processing_attempts_resume", table_name="image_processing_attempts")
    op.drop_table("image_processing_attempts")
    op.drop_index("ix_agent_callback_requests_scope_task", table_name="agent_callback_requests")
    op.drop_table("agent_callback_requests")
    op.drop_index("ix_tasks_lane_queue", table_name="tasks")
    op.drop_index("ix_tasks_image_target_active", table_name="tasks")
    op.drop_index("ix_tasks_image_submission", table_name="tasks")
    op.drop_index("ix_tasks_claimable", table_name="tasks")
    op.drop_index(
        "ix_tasks_active_dedupe",
        table_name="tasks",
        postgresql_where=sa.text("status IN ('queued','running') AND dedupe_key IS NOT NULL"),
    )
    op.drop_table("tasks")
    op.drop_index("ix_meme_search_terms_meme", table_name="meme_search_terms")
    op.drop_table("meme_search_terms")
    op.drop_index(
        "uq_storage_operation_active",
        table_name="storage_operations",
        postgresql_where=sa.text("status IN ('prepared','file_applied') AND meme_id IS NOT NULL"),
    )
    op.drop_index("ix_storage_operations_recovery", table_name="storage_operations")
    op.drop_table("storage_operations")
    op.drop_table("search_heads")
    op.drop_index("ix_visual_embeddings_match", table_name="meme_visual_embeddings")
    op.drop_table("meme_visual_embeddings")
    op.drop_index("ix_meme_text_embeddings_current", table_name="meme_text_embeddings")
    op.drop_table("meme_text_embeddings")
    op.drop_index(
        "ix_meme_search_documents_folded_trgm",
        table_name="meme_search_documents",
        postgresql_using="gin",
        postgresql_ops={"folded_text": "gin_trgm_ops"},
    )
    op.drop_table("meme_search_documents")
    op.drop_index("ix_embeddings_generation_status", table_name="meme_embeddings")
    op.drop_table("meme_embeddings")
    op.drop_index("ix_meme_collection_items_page", table_name="meme_collection_items")
    op.drop_table("meme_collection_items")
    op.drop_index("ix_image_processing_jobs_active", table_name="image_processing_jobs")
    op.drop_table("image_processing_jobs")
    op.drop_index("ix_thumbnail_current", table_name="derived_image_thumbnails")
    op.drop_table("derived_image_thumbnails")
    op.drop_index("ix_task_lane_fairness_dispatch", table_name="task_lane_fairness")
    op.drop_table("task_lane_fairness")
    op.drop_table("task_batches")
    op.drop_table("search_migration_states")
    op.drop_index(
        "uq_search_generation_building",
        table_name="search_generations",
        postgresql_where=sa.text("status = 'building'"),
    )
    op.drop_table("search_generations")
    op.drop_index("ix_memes_scope_updated", table_name="memes")
    op.drop_index("ix_memes_scope_name_lower", table_name="memes")
    op.drop_index("ix_memes_scope_display_name", table_name="memes")
    op.drop_table("memes")
    op.drop_table("meme_collections")
    op.drop_table("scopes")
    op.execute("DROP FUNCTION scopes_storage_namespace_immutable()")
    op.drop_table("installation_state")
    op.drop_table("image_naming_pools")
