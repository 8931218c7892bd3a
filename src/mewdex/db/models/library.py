"""Library tables: scopes, memes, thumbnails, collections and the storage-operation journal.

Seed 000 is the spec. Deliberate change: ``.webp`` is an allowed meme extension (real folders
hold WEBP memes; ``.jpeg`` is normalised to ``.jpg`` before it reaches the row).
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any
from uuid import UUID

from sqlalchemy import (
    BigInteger,
    Boolean,
    CheckConstraint,
    DateTime,
    Float,
    ForeignKey,
    ForeignKeyConstraint,
    Index,
    Integer,
    String,
    UniqueConstraint,
    Uuid,
    func,
    text,
)
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.orm import Mapped, mapped_column

from mewdex.db.models.base import Base, created_at, updated_at, utcnow
from mewdex.dto.media import EXTENSIONS

# Stored extensions (mewdex.dto.media, the one list; migration 0027 added the clips, stickers, AVIF and HEIC:
# a format added there needs a migration, which the schema contract test asks for)
IMAGE_EXTENSIONS_SQL = "(" + ",".join(f"'{extension}'" for extension in EXTENSIONS.values()) + ")"


class Scope(Base):
    """A tenant's data boundary with its immutable blob-store namespace."""

    __tablename__ = "scopes"
    id: Mapped[str] = mapped_column(String(128), primary_key=True)
    storage_namespace: Mapped[UUID] = mapped_column(Uuid, unique=True, nullable=False, default=uuid.uuid4)
    created_at: Mapped[datetime] = created_at()


class InstallationState(Base):
    """Single-installation gate (schema revision, initialisation time)."""

    __tablename__ = "installation_state"
    key: Mapped[str] = mapped_column(String(64), primary_key=True)
    schema_revision: Mapped[str] = mapped_column(String(128), nullable=False)
    initialized_at: Mapped[datetime] = created_at()


class Meme(Base):
    """A meme: stable UUID identity, immutable content address, mutable display name and context."""

    __tablename__ = "memes"
    id: Mapped[UUID] = mapped_column(Uuid, primary_key=True, default=uuid.uuid4)
    scope_id: Mapped[str] = mapped_column(String(128), ForeignKey("scopes.id", ondelete="CASCADE"), nullable=False)
    storage_key: Mapped[str] = mapped_column(String(1024), nullable=False)
    display_name: Mapped[str] = mapped_column(String(255), nullable=False, server_default=text("'image'"))
    name_source: Mapped[str] = mapped_column(String(16), nullable=False, server_default=text("'unknown'"))
    text_input_status: Mapped[str] = mapped_column(
        String(32), nullable=False, server_default=text("'waiting_for_text'")
    )
    extension: Mapped[str] = mapped_column(String(16), nullable=False)
    size_bytes: Mapped[int] = mapped_column(BigInteger, nullable=False)
    sha256: Mapped[str] = mapped_column(String(64), nullable=False)
    metadata_schema_version: Mapped[int] = mapped_column(Integer, nullable=False, server_default=text("1"))
    context_status: Mapped[str] = mapped_column(String(32), nullable=False, default="pending")
    search_metadata_hash: Mapped[str | None] = mapped_column(String(64))
    meme_context: Mapped[dict[str, Any]] = mapped_column(JSONB, nullable=False, default=dict)
    provenance: Mapped[dict[str, Any]] = mapped_column(JSONB, nullable=False, default=dict)
    extensions: Mapped[dict[str, Any]] = mapped_column(JSONB, nullable=False, default=dict)
    revision: Mapped[int] = mapped_column(BigInteger, nullable=False, default=1)
    created_at: Mapped[datetime] = created_at()
    updated_at: Mapped[datetime] = updated_at()
    # When the meme went to the trash (migration 0025); NULL: live. Every listing and search keeps
    # only live memes (``mewdex.library.listing.live``).
    deleted_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))

    __table_args__ = (
        UniqueConstraint("scope_id", "id", name="uq_memes_scope_id"),
        UniqueConstraint("scope_id", "storage_key", name="uq_memes_scope_storage"),
        UniqueConstraint("scope_id", "sha256", "extension", name="uq_memes_scope_content"),
        Index("ix_memes_scope_display_name", "scope_id", "display_name", "id"),
        Index("ix_memes_scope_name_lower", "scope_id", func.lower(text("display_name")), "id"),
        Index("ix_memes_scope_updated", "scope_id", text("updated_at DESC"), text("id DESC")),
        Index("ix_memes_scope_created", "scope_id", text("created_at DESC"), text("id DESC")),
        Index(
            "ix_memes_scope_trash",
            "scope_id",
            text("deleted_at DESC"),
            text("id DESC"),
            postgresql_where=text("deleted_at IS NOT NULL"),
        ),
        CheckConstraint("size_bytes >= 0", name="ck_memes_size_nonnegative"),
        CheckConstraint("name_source IN ('uploaded','manual','automatic','unknown')", name="ck_memes_name_source"),
        CheckConstraint(
            "text_input_status IN ('eligible','waiting_for_text','repair_required')", name="ck_memes_text_input_status"
        ),
        CheckConstraint(
            "context_status IN ('pending','partial','ready','repair_required')", name="ck_memes_context_status"
        ),
        CheckConstraint(
            "search_metadata_hash IS NULL OR length(search_metadata_hash) = 64", name="ck_memes_search_metadata_hash"
        ),
        CheckConstraint(
            f"extension = lower(extension) AND extension IN {IMAGE_EXTENSIONS_SQL}",
            name="ck_memes_extension_normalized",
        ),
        CheckConstraint("sha256 ~ '^[0-9a-f]{64}$'", name="ck_memes_sha256_hex"),
        CheckConstraint("storage_key = sha256 || extension", name="ck_memes_storage_key_content_addressed"),
        CheckConstraint(
            "display_name <> '' AND char_length(display_name) <= 255 "
            "AND octet_length(display_name) <= 255 "
            "AND display_name = btrim(display_name, ' .') "
            "AND position('/' in display_name) = 0 "
            "AND position(chr(92) in display_name) = 0 "
            "AND display_name !~ '[[:cntrl:]]' "
            "AND display_name NOT IN ('.', '..', '.staging', '.quarantine') "
            "AND lower(display_name) !~ '\\.(png|jpe?g|gif|webp)$'",
            name="ck_memes_display_name_safe",
        ),
        CheckConstraint(
            "storage_key <> '' AND storage_key NOT IN ('.', '..', '.staging', '.quarantine') "
            "AND position('/' in storage_key) = 0 AND position(chr(92) in storage_key) = 0 "
            "AND storage_key !~ '[[:cntrl:]]'",
            name="ck_memes_storage_key_flat",
        ),
    )


class DerivedImageThumbnail(Base):
    """A thumbnail bound to its source content (sha256 + size) and a fixed profile."""

    __tablename__ = "derived_image_thumbnails"
    scope_id: Mapped[str] = mapped_column(String(128), primary_key=True)
    meme_id: Mapped[UUID] = mapped_column(Uuid, primary_key=True)
    source_sha256: Mapped[str] = mapped_column(String(64), primary_key=True)
    source_size_bytes: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    profile: Mapped[str] = mapped_column(String(128), primary_key=True)
    output_key: Mapped[str | None] = mapped_column(String(1024))
    output_sha256: Mapped[str | None] = mapped_column(String(64))
    output_size_bytes: Mapped[int | None] = mapped_column(BigInteger)
    width: Mapped[int | None] = mapped_column(Integer)
    height: Mapped[int | None] = mapped_column(Integer)
    media_type: Mapped[str | None] = mapped_column(String(128))
    status: Mapped[str] = mapped_column(String(32), nullable=False, default="pending")
    diagnostic: Mapped[dict[str, Any] | None] = mapped_column(JSONB)
    generated_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    created_at: Mapped[datetime] = created_at()
    updated_at: Mapped[datetime] = updated_at()

    __table_args__ = (
        ForeignKeyConstraint(["scope_id", "meme_id"], ["memes.scope_id", "memes.id"], ondelete="CASCADE"),
        CheckConstraint("length(source_sha256) = 64", name="ck_thumbnail_source_sha256"),
        CheckConstraint("source_size_bytes >= 0", name="ck_thumbnail_source_size_nonnegative"),
        CheckConstraint("status IN ('available','pending','failed','stale')", name="ck_thumbnail_status"),
        CheckConstraint("output_sha256 IS NULL OR length(output_sha256) = 64", name="ck_thumbnail_output_sha256"),
        CheckConstraint(
            "output_size_bytes IS NULL OR output_size_bytes >= 0", name="ck_thumbnail_output_size_nonnegative"
        ),
        CheckConstraint("width IS NULL OR width > 0", name="ck_thumbnail_width"),
        CheckConstraint("height IS NULL OR height > 0", name="ck_thumbnail_height"),
        Index("ix_thumbnail_current", "scope_id", "meme_id", "profile", "status", "updated_at"),
        Index("ix_thumbnails_output_key", "scope_id", "output_key"),
    )


class MemeCollection(Base):
    """A named, scope-local set of memes; it owns no files."""

    __tablename__ = "meme_collections"
    id: Mapped[UUID] = mapped_column(Uuid, primary_key=True, default=uuid.uuid4)
    scope_id: Mapped[str] = mapped_column(String(128), nullable=False)
    name: Mapped[str] = mapped_column(String(100), nullable=False)
    created_at: Mapped[datetime] = created_at()
    updated_at: Mapped[datetime] = updated_at()

    __table_args__ = (
        ForeignKeyConstraint(["scope_id"], ["scopes.id"], ondelete="CASCADE"),
        UniqueConstraint("scope_id", "id", name="uq_meme_collections_scope_id"),
        UniqueConstraint("scope_id", "name", name="uq_meme_collections_scope_name"),
    )


class MemeCollectionItem(Base):
    """Scope-safe membership of a meme in a collection."""

    __tablename__ = "meme_collection_items"
    scope_id: Mapped[str] = mapped_column(String(128), primary_key=True)
    collection_id: Mapped[UUID] = mapped_column(Uuid, primary_key=True)
    meme_id: Mapped[UUID] = mapped_column(Uuid, primary_key=True)
    added_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow, nullable=False)

    __table_args__ = (
        ForeignKeyConstraint(
            ["scope_id", "collection_id"], ["meme_collections.scope_id", "meme_collections.id"], ondelete="CASCADE"
        ),
        ForeignKeyConstraint(["scope_id", "meme_id"], ["memes.scope_id", "memes.id"], ondelete="CASCADE"),
        Index("ix_meme_collection_items_page", "scope_id", "collection_id", "added_at", "meme_id"),
    )


class CollectionMember(Base):
    """An account a collection is shared with (issue 43): ``viewer`` reads it, its items' media and
    searches inside it; ``editor`` also adds memes to it (copies into the owner's library). New table
    (the seeds name none); ends with the collection or the account."""

    __tablename__ = "collection_members"
    scope_id: Mapped[str] = mapped_column(String(128), nullable=False)
    collection_id: Mapped[UUID] = mapped_column(Uuid, primary_key=True)
    user_id: Mapped[UUID] = mapped_column(Uuid, ForeignKey("users.user_id", ondelete="CASCADE"), primary_key=True)
    role: Mapped[str] = mapped_column(String(16), nullable=False)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), nullable=False, server_default=func.now())
    #: The member's choice: its assistant answers from this collection too (migration 0027).
    use_in_chat: Mapped[bool] = mapped_column(Boolean, nullable=False, default=False, server_default=text("false"))

    __table_args__ = (
        ForeignKeyConstraint(
            ["scope_id", "collection_id"],
            ["meme_collections.scope_id", "meme_collections.id"],
            ondelete="CASCADE",
            name="fk_collection_members_collection",
        ),
        CheckConstraint("role IN ('viewer','editor')", name="ck_collection_members_role"),
        Index("ix_collection_members_user", "user_id"),
    )


class CollectionLink(Base):
    """A public link to a collection (issue 43): only the sha256 of its token is kept (like API tokens),
    it ends at ``expires_at`` or when deleted. ``show_owner``: the gallery names the owner. New table."""

    __tablename__ = "collection_links"
    id: Mapped[UUID] = mapped_column(Uuid, primary_key=True, default=uuid.uuid4)
    scope_id: Mapped[str] = mapped_column(String(128), nullable=False)
    collection_id: Mapped[UUID] = mapped_column(Uuid, nullable=False)
    token_hash: Mapped[str] = mapped_column(String(64), nullable=False, unique=True)
    show_owner: Mapped[bool] = mapped_column(Boolean, nullable=False, default=False)
    expires_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), nullable=False)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), nullable=False, server_default=func.now())

    __table_args__ = (
        ForeignKeyConstraint(
            ["scope_id", "collection_id"],
            ["meme_collections.scope_id", "meme_collections.id"],
            ondelete="CASCADE",
            name="fk_collection_links_collection",
        ),
        Index("ix_collection_links_collection", "scope_id", "collection_id"),
    )


class MemeTag(Base):
    """A tag on a meme (issue 43): its normalised name (:func:`mewdex.library.tags.normalize_tag`), unique
    per meme, scoped like the meme. New table (the seeds name none)."""

    __tablename__ = "meme_tags"
    scope_id: Mapped[str] = mapped_column(String(128), primary_key=True)
    meme_id: Mapped[UUID] = mapped_column(Uuid, primary_key=True)
    tag: Mapped[str] = mapped_column(String(64), primary_key=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), nullable=False, server_default=func.now())

    __table_args__ = (
        ForeignKeyConstraint(
            ["scope_id", "meme_id"], ["memes.scope_id", "memes.id"], ondelete="CASCADE", name="fk_meme_tags_meme"
        ),
        CheckConstraint("tag <> '' AND tag = btrim(tag) AND tag !~ '[[:cntrl:]]'", name="ck_meme_tags_tag"),
        Index("ix_meme_tags_scope_tag", "scope_id", "tag", "meme_id"),
    )


class StorageOperation(Base):
    """Journal of an upload/rename/delete spanning the database and the blob store."""

    __tablename__ = "storage_operations"
    id: Mapped[UUID] = mapped_column(Uuid, primary_key=True, default=uuid.uuid4)
    scope_id: Mapped[str] = mapped_column(String(128), nullable=False)
    meme_id: Mapped[UUID | None] = mapped_column(Uuid)
    operation_type: Mapped[str] = mapped_column(String(32), nullable=False)
    operation_token: Mapped[UUID] = mapped_column(Uuid, unique=True, nullable=False, default=uuid.uuid4)
    source_key: Mapped[str | None] = mapped_column(String(1024))
    target_key: Mapped[str | None] = mapped_column(String(1024))
    staging_key: Mapped[str | None] = mapped_column(String(1024))
    # Derived-file keys survive the meme row so recovery can still clean them up after a delete.
    thumbnail_keys: Mapped[list[str]] = mapped_column(
        JSONB, nullable=False, default=list, server_default=text("'[]'::jsonb")
    )
    before_sha256: Mapped[str | None] = mapped_column(String(64))
    after_sha256: Mapped[str | None] = mapped_column(String(64))
    before_size: Mapped[int | None] = mapped_column(BigInteger)
    after_size: Mapped[int | None] = mapped_column(BigInteger)
    expected_revision: Mapped[int | None] = mapped_column(BigInteger)
    claim_generation: Mapped[int | None] = mapped_column(BigInteger)
    attempt: Mapped[int | None] = mapped_column(Integer)
    task_id: Mapped[str | None] = mapped_column(String(255))
    expected_title_fingerprint: Mapped[str | None] = mapped_column(String(64))
    status: Mapped[str] = mapped_column(String(32), nullable=False, default="prepared")
    error: Mapped[dict[str, Any] | None] = mapped_column(JSONB)
    created_at: Mapped[datetime] = created_at()
    updated_at: Mapped[datetime] = updated_at()

    __table_args__ = (
        ForeignKeyConstraint(["scope_id"], ["scopes.id"], ondelete="CASCADE"),
        ForeignKeyConstraint(["scope_id", "meme_id"], ["memes.scope_id", "memes.id"], ondelete="CASCADE"),
        UniqueConstraint("scope_id", "meme_id", "operation_token", name="uq_storage_operation_token"),
        CheckConstraint("operation_type IN ('upload','rename','delete')", name="ck_storage_operation_type"),
        CheckConstraint(
            "status IN ('prepared','file_applied','completed','compensated','blocked')",
            name="ck_storage_operation_status",
        ),
        CheckConstraint(
            "expected_revision IS NULL OR expected_revision >= 1", name="ck_storage_operation_expected_revision"
        ),
        CheckConstraint(
            "claim_generation IS NULL OR claim_generation > 0", name="ck_storage_operation_claim_generation"
        ),
        CheckConstraint("attempt IS NULL OR attempt > 0", name="ck_storage_operation_attempt"),
        CheckConstraint(
            "expected_title_fingerprint IS NULL OR length(expected_title_fingerprint) = 64",
            name="ck_storage_operation_title_fingerprint",
        ),
        Index("ix_storage_operations_recovery", "scope_id", "status", "updated_at"),
        Index(
            "ix_storage_operations_open_key",
            "scope_id",
            "target_key",
            postgresql_where=text("status IN ('prepared', 'file_applied')"),
        ),
        Index(
            "uq_storage_operation_active",
            "scope_id",
            "meme_id",
            unique=True,
            postgresql_where=text("status IN ('prepared','file_applied') AND meme_id IS NOT NULL"),
        ),
    )


class MemeNearDuplicate(Base):
    """A meme recorded as a near-duplicate of an older meme of its scope (same picture, other bytes).

    New table (not in seed 000): the pair, the perceptual-hash Hamming distance and the cosine of
    their image embeddings under ``model``.
    """

    __tablename__ = "meme_near_duplicates"
    scope_id: Mapped[str] = mapped_column(String(128), primary_key=True)
    meme_id: Mapped[UUID] = mapped_column(Uuid, primary_key=True)
    duplicate_of: Mapped[UUID] = mapped_column(Uuid, primary_key=True)
    phash_distance: Mapped[int | None] = mapped_column(Integer)
    cosine: Mapped[float | None] = mapped_column(Float)
    model: Mapped[str | None] = mapped_column(String(255))
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), nullable=False, server_default=func.now())

    __table_args__ = (
        ForeignKeyConstraint(
            ["scope_id", "meme_id"],
            ["memes.scope_id", "memes.id"],
            ondelete="CASCADE",
            name="fk_meme_near_duplicates_scope_id_memes",
        ),
        ForeignKeyConstraint(
            ["scope_id", "duplicate_of"],
            ["memes.scope_id", "memes.id"],
            ondelete="CASCADE",
            name="fk_meme_near_duplicates_duplicate_of_memes",
        ),
        CheckConstraint("meme_id <> duplicate_of", name="ck_meme_near_duplicates_distinct"),
        CheckConstraint(
            "phash_distance IS NULL OR phash_distance BETWEEN 0 AND 64", name="ck_meme_near_duplicates_phash"
        ),
        CheckConstraint("cosine IS NULL OR cosine BETWEEN -1.0001 AND 1.0001", name="ck_meme_near_duplicates_cosine"),
        Index("ix_meme_near_duplicates_of", "scope_id", "duplicate_of"),
    )
