"""Search tables: generations, heads, text and visual embeddings, keyword documents.

Deliberate changes from seed 000:
- vector columns are ``vector`` with no fixed dimension, next to ``model`` and ``dimensions``
  columns; each (model, dimensions) gets its own partial HNSW expression index over half-precision
  copies (``embedding::halfvec(N)``, see :mod:`mewdex.search.vector_index`), so a model change
  never needs a column change.
- ``meme_embeddings`` holds one row per semantic *field* of a meme (name, OCR text, labels…):
  search takes the best field per meme, which measured better than one concatenated document. A
  text many memes share (a folder's words) keeps its vector in at most ``CARRIERS_PER_TEXT`` rows;
  the others' ``embedding`` is NULL (:func:`mewdex.search.vector_rows.write_vectors`).
- ``meme_search_documents`` and ``meme_search_terms`` are new: the keyword leg's BM25 inverted
  index (jieba / word terms, folded) and folded text for exact phrases.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from uuid import UUID

from pgvector.sqlalchemy import Vector
from sqlalchemy import (
    REAL,
    BigInteger,
    CheckConstraint,
    DateTime,
    Float,
    ForeignKeyConstraint,
    Index,
    Integer,
    PrimaryKeyConstraint,
    String,
    Text,
    UniqueConstraint,
    Uuid,
    text,
)
from sqlalchemy.orm import Mapped, mapped_column

from mewdex.db.models.base import Base, created_at, updated_at


class SearchGeneration(Base):
    """One build of a scope's vector index for one model; searched only once active."""

    __tablename__ = "search_generations"
    id: Mapped[UUID] = mapped_column(Uuid, primary_key=True, default=uuid.uuid4)
    scope_id: Mapped[str] = mapped_column(String(128), nullable=False)
    model: Mapped[str] = mapped_column(String(255), nullable=False)
    dimensions: Mapped[int] = mapped_column(Integer, nullable=False)
    status: Mapped[str] = mapped_column(String(32), nullable=False, default="building")
    source_snapshot_hash: Mapped[str] = mapped_column(String(64), nullable=False)
    created_at: Mapped[datetime] = created_at()
    activated_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))

    __table_args__ = (
        ForeignKeyConstraint(["scope_id"], ["scopes.id"], ondelete="CASCADE"),
        UniqueConstraint("scope_id", "id", name="uq_generations_scope_id"),
        UniqueConstraint("scope_id", "model", "id", name="uq_generations_scope_model_id"),
        CheckConstraint("dimensions > 0", name="ck_generation_dimensions"),
        CheckConstraint("status IN ('building','ready','active','failed','retired')", name="ck_generation_status"),
        Index(
            "uq_search_generation_building",
            "scope_id",
            "model",
            unique=True,
            postgresql_where=text("status = 'building'"),
        ),
    )


class SearchHead(Base):
    """Pointer to the generation a scope's searches read for one model; switched atomically."""

    __tablename__ = "search_heads"
    scope_id: Mapped[str] = mapped_column(String(128), primary_key=True)
    model: Mapped[str] = mapped_column(String(255), primary_key=True)
    active_generation_id: Mapped[UUID | None] = mapped_column(Uuid)
    active_generation_model: Mapped[str | None] = mapped_column(String(255))

    __table_args__ = (
        ForeignKeyConstraint(["scope_id"], ["scopes.id"], ondelete="CASCADE"),
        ForeignKeyConstraint(
            ["scope_id", "active_generation_model", "active_generation_id"],
            ["search_generations.scope_id", "search_generations.model", "search_generations.id"],
        ),
    )


class MemeEmbedding(Base):
    """A meme field's text vector inside a generation, with the source snapshot it came from."""

    __tablename__ = "meme_embeddings"
    scope_id: Mapped[str] = mapped_column(String(128), primary_key=True)
    generation_id: Mapped[UUID] = mapped_column(Uuid, primary_key=True)
    meme_id: Mapped[UUID] = mapped_column(Uuid, primary_key=True)
    field: Mapped[str] = mapped_column(String(32), primary_key=True, server_default=text("'document'"))
    model: Mapped[str] = mapped_column(String(255), nullable=False)
    dimensions: Mapped[int] = mapped_column(Integer, nullable=False)
    embedding = mapped_column(Vector(), nullable=True)
    semantic_document: Mapped[str] = mapped_column(String(6000), nullable=False)
    semantic_document_hash: Mapped[str] = mapped_column(String(64), nullable=False)
    metadata_hash: Mapped[str] = mapped_column(String(64), nullable=False)
    image_sha256: Mapped[str] = mapped_column(String(64), nullable=False)
    meme_revision: Mapped[int] = mapped_column(BigInteger, nullable=False)
    item_status: Mapped[str] = mapped_column(String(32), nullable=False, default="pending")
    #: The inserting transaction's 64-bit id (NULL: written before migration 0032); what a process
    #: holding the generation in memory reads news by (mewdex.search.exact_scan).
    written_xid: Mapped[int | None] = mapped_column(
        BigInteger, server_default=text("(pg_current_xact_id())::text::bigint")
    )

    __table_args__ = (
        ForeignKeyConstraint(["scope_id"], ["scopes.id"], ondelete="CASCADE"),
        ForeignKeyConstraint(
            ["scope_id", "generation_id"], ["search_generations.scope_id", "search_generations.id"], ondelete="CASCADE"
        ),
        ForeignKeyConstraint(["scope_id", "meme_id"], ["memes.scope_id", "memes.id"], ondelete="CASCADE"),
        CheckConstraint("item_status IN ('pending','ready','failed')", name="ck_embedding_item_status"),
        CheckConstraint(
            "dimensions > 0 AND (embedding IS NULL OR vector_dims(embedding) = dimensions)",
            name="ck_embedding_dimensions",
        ),
        Index("ix_embeddings_generation_status", "scope_id", "generation_id", "item_status"),
        # A shared text's carriers (rows with the vector) and members (NULL: not in the HNSW graph);
        # see mewdex.search.vector_rows.write_vectors and migration 0015.
        Index(
            "ix_meme_embeddings_text_carriers",
            "scope_id",
            "generation_id",
            "field",
            text("left(semantic_document_hash, 16)"),
            postgresql_where=text("embedding IS NOT NULL"),
        ),
        Index(
            "ix_meme_embeddings_text_members",
            "scope_id",
            "generation_id",
            "field",
            text("left(semantic_document_hash, 16)"),
            postgresql_where=text("embedding IS NULL AND item_status = 'ready'"),
        ),
        Index(
            "ix_meme_embeddings_written",
            "scope_id",
            "generation_id",
            "written_xid",
        ),
    )


class MemeVisualEmbedding(Base):
    """A meme's image vector for one (model, preprocess version); kept apart from text vectors."""

    __tablename__ = "meme_visual_embeddings"
    scope_id: Mapped[str] = mapped_column(String(128), primary_key=True)
    meme_id: Mapped[UUID] = mapped_column(Uuid, primary_key=True)
    model: Mapped[str] = mapped_column(String(255), primary_key=True)
    preprocess_version: Mapped[str] = mapped_column(String(128), primary_key=True)
    dimensions: Mapped[int] = mapped_column(Integer, nullable=False)
    image_sha256: Mapped[str] = mapped_column(String(64), nullable=False)
    embedding = mapped_column(Vector(), nullable=False)
    created_at: Mapped[datetime] = created_at()
    updated_at: Mapped[datetime] = updated_at()

    __table_args__ = (
        ForeignKeyConstraint(["scope_id"], ["scopes.id"], ondelete="CASCADE"),
        ForeignKeyConstraint(["scope_id", "meme_id"], ["memes.scope_id", "memes.id"], ondelete="CASCADE"),
        CheckConstraint(
            "dimensions > 0 AND vector_dims(embedding) = dimensions", name="ck_visual_embedding_dimensions"
        ),
        CheckConstraint("length(image_sha256) = 64", name="ck_visual_embedding_sha256"),
        # The seed's uq_visual_embedding_identity repeated the primary key's columns; PostgreSQL folds
        # a UNIQUE identical to the primary key into it at CREATE TABLE, so no database ever had it.
        Index("ix_visual_embeddings_match", "scope_id", "model", "preprocess_version", "meme_id"),
    )


class MemeTextEmbedding(Base):
    """Incremental per-meme text vector keyed by image, context hash and model version."""

    __tablename__ = "meme_text_embeddings"
    scope_id: Mapped[str] = mapped_column(String(128), primary_key=True)
    meme_id: Mapped[UUID] = mapped_column(Uuid, primary_key=True)
    image_sha256: Mapped[str] = mapped_column(String(64), primary_key=True)
    metadata_hash: Mapped[str] = mapped_column(String(64), primary_key=True)
    embedding_model_version: Mapped[str] = mapped_column(String(255), primary_key=True)
    dimensions: Mapped[int] = mapped_column(Integer, nullable=False)
    semantic_document: Mapped[str] = mapped_column(String(6000), nullable=False)
    embedding = mapped_column(Vector(), nullable=True)
    status: Mapped[str] = mapped_column(String(32), nullable=False, default="pending")
    created_at: Mapped[datetime] = created_at()
    updated_at: Mapped[datetime] = updated_at()

    __table_args__ = (
        ForeignKeyConstraint(["scope_id"], ["scopes.id"], ondelete="CASCADE"),
        ForeignKeyConstraint(["scope_id", "meme_id"], ["memes.scope_id", "memes.id"], ondelete="CASCADE"),
        CheckConstraint(
            "dimensions > 0 AND (embedding IS NULL OR vector_dims(embedding) = dimensions)",
            name="ck_meme_text_embedding_dimensions",
        ),
        CheckConstraint("status IN ('pending','ready','failed')", name="ck_meme_text_embedding_status"),
        Index(
            "ix_meme_text_embeddings_current",
            "scope_id",
            "meme_id",
            "image_sha256",
            "metadata_hash",
            "embedding_model_version",
            "status",
        ),
    )


class SearchMigrationState(Base):
    """Per scope and model: where a re-embed (backfill) stands."""

    __tablename__ = "search_migration_states"
    scope_id: Mapped[str] = mapped_column(String(128), primary_key=True)
    model: Mapped[str | None] = mapped_column(String(255))
    mode: Mapped[str] = mapped_column(String(32), nullable=False, default="legacy_only")
    epoch: Mapped[int] = mapped_column(BigInteger, nullable=False, default=0)
    legacy_generation_id: Mapped[UUID | None] = mapped_column(Uuid)
    completed_count: Mapped[int] = mapped_column(Integer, nullable=False, default=0)
    total_count: Mapped[int] = mapped_column(Integer, nullable=False, default=0)
    updated_at: Mapped[datetime] = updated_at()

    __table_args__ = (
        ForeignKeyConstraint(["scope_id"], ["scopes.id"], ondelete="CASCADE"),
        CheckConstraint("mode IN ('legacy_only','backfill','incremental_only')", name="ck_search_migration_mode"),
    )


class MemeSearchDocument(Base):
    """The keyword leg's view of a meme: folded text for exact-phrase matches and its length in terms.

    Its terms live in ``meme_search_terms``; together they form a BM25 inverted index per scope.
    """

    __tablename__ = "meme_search_documents"
    scope_id: Mapped[str] = mapped_column(String(128), primary_key=True)
    meme_id: Mapped[UUID] = mapped_column(Uuid, primary_key=True)
    metadata_hash: Mapped[str] = mapped_column(String(64), nullable=False)
    folded_text: Mapped[str] = mapped_column(Text, nullable=False)
    term_count: Mapped[float] = mapped_column(Float, nullable=False)
    updated_at: Mapped[datetime] = updated_at()

    __table_args__ = (
        ForeignKeyConstraint(["scope_id", "meme_id"], ["memes.scope_id", "memes.id"], ondelete="CASCADE"),
        Index(
            "ix_meme_search_documents_folded_trgm",
            "folded_text",
            postgresql_using="gin",
            postgresql_ops={"folded_text": "gin_trgm_ops"},
        ),
        # Chinese phrases (two characters included) by their scope-prefixed Han bigrams (migration 0012).
        Index(
            "ix_meme_search_documents_bigrams",
            text("mewdex_han_bigram_keys(scope_id, folded_text)"),
            postgresql_using="gin",
        ),
    )


class MemeSearchTerm(Base):
    """One keyword term of a meme with its field-weighted term frequency (inverted-index posting),
    the document's length and the posting's ``impact`` (BM25's term-frequency part with the scope's
    ``impact_avgdl``), read in ``impact`` order a bounded number of rows per term."""

    __tablename__ = "meme_search_terms"
    scope_id: Mapped[str] = mapped_column(String(128), primary_key=True)
    term: Mapped[str] = mapped_column(String(255), primary_key=True)
    meme_id: Mapped[UUID] = mapped_column(Uuid, primary_key=True)
    tf: Mapped[float] = mapped_column(Float, nullable=False)
    doc_length: Mapped[float] = mapped_column(REAL, nullable=False)
    impact: Mapped[float] = mapped_column(REAL, nullable=False)

    __table_args__ = (
        ForeignKeyConstraint(
            ["scope_id", "meme_id"],
            ["meme_search_documents.scope_id", "meme_search_documents.meme_id"],
            ondelete="CASCADE",
        ),
        CheckConstraint("tf > 0", name="ck_meme_search_terms_tf"),
        # keyed by meme (migration 0022): a term's postings have one path, the impact index
        PrimaryKeyConstraint("scope_id", "meme_id", "term"),
        Index(
            "ix_meme_search_terms_impact",
            "scope_id",
            "term",
            text("impact DESC"),
            "meme_id",
            postgresql_include=["tf", "doc_length"],
        ),
    )
