"""Memes of a scope: add (validate, content-address, journal, store, create the row and its job),
list with cursor paging, rename and delete — each change journaled in ``storage_operations``."""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any
from uuid import UUID

from sqlalchemy import SQLColumnExpression, String, cast, select
from sqlalchemy.exc import IntegrityError, OperationalError
from sqlalchemy.orm import Session, sessionmaker

from mewdex import hooks
from mewdex.config import get_settings
from mewdex.db.models import Meme, Scope, ScopeContext, StorageOperation, utcnow
from mewdex.dto.cursor import CursorInvalid, decode_cursor, encode_cursor
from mewdex.dto.errors import DomainError
from mewdex.library import collections
from mewdex.library.images import ImageError, ImageInfo, probe

# The one "meme with this (scope, id)" lookup; it lives in listing so that search, which may not reach
# the platform this module imports, can use it too.
from mewdex.library.listing import find as find
from mewdex.library.listing import live
from mewdex.library.names import folder_named, name_for_file
from mewdex.library.scopes import ensure_scope
from mewdex.platform import quotas
from mewdex.platform.errors import PlatformError
from mewdex.storage import failpoints, journal
from mewdex.storage.blobs import BlobStoreError, is_disk_full

log = logging.getLogger(__name__)


# The image pipeline provides how a new meme's processing job is created (``pipeline.jobs.create_job``,
# the ``processing_submitters`` hook of :mod:`mewdex.hooks`): the library sits below the pipeline and
# must not import it (dependency inversion). Signature: ``submit(session, meme, *, auto_name, batch_id,
# new_meme)``, in the caller's transaction.


def set_processing_submitter(submit: Callable[..., Any]) -> None:
    """Called once by :mod:`mewdex.pipeline.jobs` when it is imported."""
    hooks.provide("processing_submitters", getattr(submit, "__name__", "submit"), submit, stacklevel=2)


def processing_submitter() -> Callable[..., Any]:
    """The provided job creator (its plugin, ``pipeline.jobs``, imported on first use); RuntimeError
    when no plugin provides one."""
    submit: Callable[..., Any] | None = hooks.single("processing_submitters")
    if submit is None:
        raise RuntimeError("no processing submitter: no plugin provides the processing_submitters hook")
    return submit


@dataclass
class AddResult:
    """Outcome for one file: ``created`` | ``duplicate`` | ``skipped`` (bad input, with an error code) |
    ``failed`` (``insufficient_storage``: the disk is full, or ``blob_store_unavailable``: the object store
    failed; nothing stored, trying again later can work) |
    ``ignored`` (folder import: not an image file at all, e.g. ``notes.txt``, ``metadata.jsonl``)."""

    status: str
    meme_id: str | None = None
    error: str | None = None
    message: str | None = None
    info: ImageInfo | None = None


def find_by_sha256(session: Session, scope: ScopeContext, sha256: str) -> Meme | None:
    return session.execute(
        select(Meme).where(Meme.scope_id == scope.scope_id, Meme.sha256 == sha256).limit(1)
    ).scalar_one_or_none()


def known_sha256(session: Session, scope: ScopeContext, digests: Sequence[str]) -> dict[str, str]:
    """``{sha256: meme id}`` for those of ``digests`` (hex, any case) that live memes of the scope hold:
    what a remote import skips before sending a byte. One indexed statement; other scopes' memes never
    count, nor trashed ones (their file is sent, and the upload brings the meme back, as a local import
    does)."""
    wanted = sorted({d.lower() for d in digests})
    if not wanted:
        return {}
    rows = session.execute(
        select(Meme.sha256, Meme.id).where(Meme.scope_id == scope.scope_id, Meme.sha256.in_(wanted), live())
    ).all()
    return {sha: str(meme_id) for sha, meme_id in rows}


def add_image(
    sessions: sessionmaker[Session],
    store,
    scope: ScopeContext,
    data: bytes,
    *,
    filename: str,
    provenance: dict[str, Any],
    collection_names: Sequence[str] = (),
    collection_ids: Sequence[Any] = (),
    process: bool = True,
    auto_name: bool = False,
    probed: ImageInfo | None = None,
    batch_id: str | None = None,
    folder: str | None = None,
) -> AddResult:
    """Add one image: ``skipped`` with a stable error code for bad bytes or ``quota_exceeded`` (the
    owner's storage/meme limit; nothing written), ``duplicate`` (the existing
    meme, added to the collections too; one in the trash comes back from it) for bytes already in the scope,
    else ``created``.

    ``collection_names`` are created when missing; ``collection_ids`` must be collections of the
    scope (the caller checks). ``auto_name``: the job's ``auto_rename`` stage names the meme from
    its context title. ``probed``: what :func:`probe` already said about exactly these bytes (skips
    decoding them again). ``folder``: the name of the folder the file came from (names a meme whose
    file stem is generic, see :func:`~mewdex.library.names.name_for_file`; a generic stem with no usable
    folder turns ``auto_name`` on). ``batch_id``: a created meme's processing joins this task batch (its first
    task parked until the batch feeds it, see :mod:`mewdex.queue.batches`).

    Crash-safe: the upload is journaled before the blob is written and completed in the same
    transaction that creates the meme row, its collection memberships and its processing job.
    """
    try:
        info = probed or probe(data, max_pixels=get_settings().max_pixels)
    except ImageError as exc:
        return AddResult("skipped", error=exc.code, message=str(exc))
    sha256 = hashlib.sha256(data).hexdigest()
    key = sha256 + info.extension

    with sessions.begin() as session:
        scope_row = session.get(Scope, scope.scope_id) or ensure_scope(session, scope)  # no write when it exists
        namespace = str(scope_row.storage_namespace)
        existing = find_by_sha256(session, scope, sha256)
        if existing is not None:
            if existing.deleted_at is not None:  # the same bytes again: the meme comes back from the trash
                existing.deleted_at = None
                existing.updated_at = utcnow()
            _add_to_collections(session, scope, existing, collection_names, collection_ids)
            return AddResult("duplicate", meme_id=str(existing.id), info=info)
        try:  # before anything is written; an exact duplicate (above) adds nothing
            quotas.check_upload(session, scope, len(data))
        except PlatformError as exc:
            return AddResult("skipped", error=exc.code, message=exc.message)
        op_id = journal.prepare_upload(session, scope.scope_id, key, sha256, len(data)).id
    failpoints.hit("upload.after_prepare")

    try:
        store.put(namespace, key, data)
    except OSError as exc:
        try:
            _undo_upload(sessions, store, scope, namespace, key, op_id)
        except BlobStoreError:  # the store is still away: the journal's recovery finishes the undo later
            log.warning("upload of %s not undone yet (the blob store is unavailable); recovery will", key)
        if is_disk_full(exc):
            return AddResult("failed", error="insufficient_storage", message=f"the disk is full: {exc.strerror}")
        if isinstance(exc, BlobStoreError):
            return AddResult("failed", error="blob_store_unavailable", message=str(exc.strerror))
        raise
    failpoints.hit("upload.after_blob_write")
    display_name, name_source = name_for_file(filename, folder)
    if name_source == "automatic" and not folder_named(display_name, folder):
        auto_name = True  # nothing better than a generic stem yet: the context title names it
    try:
        with sessions.begin() as session:
            meme = Meme(
                scope_id=scope.scope_id,
                storage_key=key,
                display_name=display_name,
                name_source=name_source,
                extension=info.extension,
                size_bytes=len(data),
                sha256=sha256,
                provenance=provenance,
                extensions={"image": dataclasses.asdict(info)},
            )
            session.add(meme)
            session.flush()
            _add_to_collections(session, scope, meme, collection_names, collection_ids)
            if process:
                processing_submitter()(session, meme, auto_name=auto_name, batch_id=batch_id, new_meme=True)
            journal.complete(session, op_id, meme.id)
            meme_id = str(meme.id)
        failpoints.hit("upload.after_commit")
        return AddResult("created", meme_id=meme_id, info=info)
    except IntegrityError:
        # Another writer added the same bytes meanwhile: theirs is the meme; ours never existed.
        with sessions.begin() as session:
            existing = find_by_sha256(session, scope, sha256)
            if existing is not None:
                journal.compensate(session, op_id)
                _add_to_collections(session, scope, existing, collection_names, collection_ids)
                return AddResult("duplicate", meme_id=str(existing.id), info=info)
        _undo_upload(sessions, store, scope, namespace, key, op_id)
        raise
    except Exception:
        _undo_upload(sessions, store, scope, namespace, key, op_id)
        raise


def _undo_upload(sessions: sessionmaker[Session], store, scope: ScopeContext, namespace: str, key: str, op_id) -> None:
    """Compensate an upload whose meme row was never created: remove its blob unless a meme uses it."""
    with sessions.begin() as session:
        if journal.removal_deferred(session):  # a backup runs: finished when it ends
            journal.defer(session, op_id)
            return
        journal.remove_blob_if_unused(session, store, scope.scope_id, namespace, key, except_op=op_id)
        journal.compensate(session, op_id)


def _add_to_collections(session: Session, scope: ScopeContext, meme: Meme, names, ids=()) -> None:
    for name in names:
        collection = collections.get_or_create(session, scope, name)
        collections.add_items(session, scope, collection.id, [meme.id])
    for collection_id in ids:
        collections.add_items(session, scope, collection_id, [meme.id])


# ---------------------------------------------------------------- changes


class MemeError(DomainError):
    """A meme change refused with a stable code: ``not_found``, ``revision_conflict``,
    ``operation_in_progress``, ``display_name_invalid``."""


#: The shortest id prefix :func:`resolve_meme_id` accepts (8 hex digits: the first group of a UUID).
MIN_ID_PREFIX = 8


def resolve_meme_id(session: Session, scope: ScopeContext, value: str) -> UUID:
    """A meme id of the scope from its full UUID or a prefix of at least :data:`MIN_ID_PREFIX` characters
    (``93b53fd3``, ``93b53fd3-1c2d``; case and hyphens as printed). Raises MemeError ``not_found`` (no such
    meme, or too short a prefix) or ``ambiguous_id`` (the prefix fits several memes: give more characters)."""
    text_value = (value or "").strip().lower()
    try:
        return UUID(text_value)
    except ValueError:
        pass
    if len(text_value.replace("-", "")) < MIN_ID_PREFIX or not re.fullmatch(r"[0-9a-f-]+", text_value):
        raise MemeError("not_found", f"no meme {value!r} (give the full id or at least {MIN_ID_PREFIX} characters)")
    found = (
        session.execute(
            select(Meme.id)
            .where(Meme.scope_id == scope.scope_id, cast(Meme.id, String).like(text_value + "%"), live())
            .order_by(Meme.id)
            .limit(2)
        )
        .scalars()
        .all()
    )
    if not found:
        raise MemeError("not_found", f"no meme with an id starting {value!r}")
    if len(found) > 1:
        raise MemeError("ambiguous_id", f"several memes have ids starting {value!r}; give more characters")
    return found[0]


def _locked_meme(session: Session, scope: ScopeContext, meme_id, *, in_trash: bool = False) -> Meme:
    """The live meme locked (``in_trash``: the meme in the trash); MemeError ``not_found`` otherwise."""
    meme = find(session, scope, meme_id, lock=True, include_trashed=in_trash)
    if meme is None or (in_trash and meme.deleted_at is None):
        raise MemeError("not_found", "meme not found" if not in_trash else "no such meme in the trash")
    return meme


def _check_revision(meme: Meme, expected_revision: int | None) -> None:
    if expected_revision is not None and meme.revision != expected_revision:
        raise MemeError(
            "revision_conflict",
            "the meme was changed since that revision",
            {"expected_revision": expected_revision, "current_revision": meme.revision},
        )


def normalized_name(name: str) -> str:
    """``name`` under the name rules (:func:`mewdex.library.names.normalize_display_name`); MemeError
    ``display_name_invalid`` when nothing usable is left."""
    from mewdex.library.names import normalize_display_name

    try:
        return normalize_display_name(name)
    except ValueError:
        raise MemeError("display_name_invalid", "the name is empty or not allowed") from None


def rename_locked(session: Session, meme: Meme, new_name: str) -> None:
    """Rename the live ``meme`` (locked by the caller's transaction) to ``new_name`` (from
    :func:`normalized_name`) in that transaction, journaled as a ``rename`` operation that commits
    ``completed`` with it (nothing to recover: the transaction holds both). The caller checked the
    revision and that no operation is open (:func:`mewdex.storage.journal.open_operation`)."""
    op = journal.prepare_rename(session, meme, new_name, meme.revision)
    meme.display_name = new_name
    meme.name_source = "manual"
    meme.revision += 1
    meme.updated_at = utcnow()
    op.after_sha256 = meme.sha256
    op.status = "completed"


def rename(
    sessions: sessionmaker[Session], scope: ScopeContext, meme_id, name: str, *, expected_revision: int | None = None
) -> int:
    """Set a meme's display name by hand (``name_source = manual``); returns the new revision.

    ``name`` is normalized under the name rules (:func:`mewdex.library.names.normalize_display_name`).
    With ``expected_revision`` the rename applies only if the meme is still at that revision.
    Journaled: a ``rename`` operation is ``prepared`` first and ``completed`` in the transaction
    that changes the name (``compensated`` when refused or interrupted).

    Raises:
        MemeError: ``display_name_invalid`` (nothing usable is left), ``not_found``,
            ``revision_conflict`` (details: expected and current revision).
    """
    new_name = normalized_name(name)
    with sessions.begin() as session:
        meme = _locked_meme(session, scope, meme_id)
        _check_revision(meme, expected_revision)
        if journal.open_operation(session, meme) is not None:  # a concurrent rename, or one a crash left open
            raise MemeError("operation_in_progress", "the meme is being changed right now; try again in a moment")
        op_id = journal.prepare_rename(session, meme, new_name, meme.revision).id
    failpoints.hit("rename.after_prepare")
    try:
        with sessions.begin() as session:
            meme = _locked_meme(session, scope, meme_id)
            op = session.get_one(StorageOperation, op_id)
            _check_revision(meme, op.expected_revision)
            meme.display_name = new_name
            meme.name_source = "manual"
            meme.revision += 1
            meme.updated_at = utcnow()
            op.after_sha256 = meme.sha256
            op.status = "completed"
            revision = meme.revision
            failpoints.hit("rename.before_commit")
    except MemeError as exc:
        with sessions.begin() as session:
            if session.get(StorageOperation, op_id) is not None:  # gone with the meme if it was deleted
                journal.compensate(session, op_id, {"code": exc.code, "message": exc.message})
        raise
    failpoints.hit("rename.after_commit")
    return revision


def delete(
    sessions: sessionmaker[Session],
    store,
    scope: ScopeContext,
    meme_id,
    *,
    expected_revision: int | None = None,
    in_trash: bool = False,
) -> None:
    """Delete a meme for good (the API's delete moves it to the trash, :mod:`mewdex.library.trash`, whose
    purge calls this with ``in_trash``: only a meme in the trash): its row and everything hanging off it
    (jobs, stages, tasks, embeddings, thumbnails, search documents and terms, collection memberships,
    near-duplicate pairs), then its blob and thumbnail files unless another meme (or an upload in
    flight) still uses them.

    Journaled: the rows go in the transaction that records a ``delete`` operation with the file
    keys; the files are removed after it commits and the operation completed — recovery finishes
    the file removals if the process dies in between.

    Raises:
        MemeError: ``not_found`` (with ``in_trash``: not in the trash), ``revision_conflict``.
    """
    from mewdex.db.models import ImageStageTask, Task

    def meme_tasks(session: Session) -> list:
        return list(
            session.execute(
                select(Task.id)
                .join(ImageStageTask, ImageStageTask.task_id == Task.id)
                .where(ImageStageTask.scope_id == scope.scope_id, ImageStageTask.target_meme_id == meme_id)
                .order_by(Task.id)
                .with_for_update(of=Task)
            ).scalars()
        )

    for attempt in range(1, DELETE_ATTEMPTS + 1):
        try:
            op_id, key, namespace = _delete_rows(sessions, scope, meme_id, expected_revision, meme_tasks, in_trash)
            break
        except OperationalError as exc:
            # A deadlock with a worker that holds a task of the meme and waits for the meme row:
            # PostgreSQL aborts one of the two; the delete starts over (the worker's work is fenced).
            if getattr(exc.orig, "sqlstate", None) not in ("40P01", "40001") or attempt == DELETE_ATTEMPTS:
                raise
            time.sleep(0.05 * attempt)
    failpoints.hit("delete.after_rows_deleted")
    with sessions.begin() as session:
        op = session.get_one(StorageOperation, op_id, with_for_update=True)
        if journal.removal_deferred(session):  # a backup runs: its snapshot may still need the files
            journal.defer(session, op_id)
            return
        journal.remove_blob_if_unused(session, store, scope.scope_id, namespace, key)
        failpoints.hit("delete.after_blob_delete")
        journal.remove_thumbnails_if_unused(session, store, scope.scope_id, namespace, op.thumbnail_keys)
        op.status = "completed"
    failpoints.hit("delete.after_complete")


DELETE_ATTEMPTS = 3


def _delete_rows(sessions, scope: ScopeContext, meme_id, expected_revision: int | None, meme_tasks, in_trash: bool):
    """The row part of :func:`delete` (one transaction): returns the journal operation's id, the
    blob key and the storage namespace."""
    from sqlalchemy import text

    from mewdex.db.models import DerivedImageThumbnail
    from mewdex.library.scopes import storage_namespace
    from mewdex.queue import batches

    with sessions.begin() as session:
        # Same lock order as a worker (task rows, then the meme) so the two rarely deadlock.
        meme_tasks(session)
        meme = _locked_meme(session, scope, meme_id, in_trash=in_trash)
        _check_revision(meme, expected_revision)
        # Again under the meme's lock: a task queued for the meme (and claimed) after the first read
        # — a worker's next pipeline stage — holds a lane slot too; with the meme locked no new one
        # can appear (its foreign key check waits for this transaction).
        task_ids = meme_tasks(session)
        namespace = storage_namespace(session, scope.scope_id)
        thumbnail_keys = [
            key
            for key in session.execute(
                select(DerivedImageThumbnail.output_key).where(
                    DerivedImageThumbnail.scope_id == scope.scope_id,
                    DerivedImageThumbnail.meme_id == meme.id,
                    DerivedImageThumbnail.output_key.is_not(None),
                )
            ).scalars()
            if key is not None
        ]
        if task_ids:  # lane slots reference tasks without a cascade: free the ones the meme's tasks hold
            for table in ("task_lane_slots", "task_lane_resource_slots"):
                session.execute(
                    text(
                        f"UPDATE {table} SET task_scope_id = NULL, task_id = NULL, lease_owner = NULL, "
                        "claim_generation = NULL, lease_expires_at = NULL "
                        "WHERE task_scope_id = :s AND task_id = ANY(:ids)"
                    ),
                    {"s": scope.scope_id, "ids": list(task_ids)},
                )
        batch_ids = batches.batches_of(session, scope.scope_id, list(task_ids)) if task_ids else set()
        op = journal.record_delete(session, meme, thumbnail_keys)
        op_id, key = op.id, meme.storage_key
        session.delete(meme)
        session.flush()
        for batch_id in batch_ids:  # the meme's tasks left their batches: one may be complete now
            batches.finalize_if_done(session, scope.scope_id, batch_id)
        failpoints.hit("delete.before_rows_commit")
    return op_id, key, namespace


# ---------------------------------------------------------------- listing

SORTS = ("created", "updated", "name")
JOB_STATUSES = ("queued", "running", "succeeded", "failed", "blocked", "unknown_execution")


@dataclass
class MemePage:
    memes: list[Meme]
    next_cursor: str | None


def list_memes(
    session: Session,
    scope: ScopeContext,
    *,
    name: str | None = None,
    collection_id=None,
    status: str | None = None,
    animated: bool | None = None,
    sort: str = "created",
    limit: int = 50,
    cursor: str | None = None,
) -> MemePage:
    """One page of the scope's memes.

    Args:
        name: case-insensitive substring of the display name.
        collection_id: only members of this collection (a UUID of the scope).
        status: the latest processing job's status (one of :data:`JOB_STATUSES`), or ``pending``
            (queued or running) or ``none`` (no job).
        animated: only animated (True) or still (False) images.
        sort: ``created`` / ``updated`` (newest first) or ``name`` (A→Z, case-insensitive); ties by id.
        limit: page size, 1..200.
        cursor: ``next_cursor`` of the previous page (opaque; only valid with the same sort).
    Returns:
        the memes of the page and the cursor of the next one (None on the last page).
    Raises:
        CursorInvalid: (``invalid_cursor``) a cursor that is not one of ours or of another sort.
    """
    import uuid as uuid_mod
    from datetime import datetime

    from sqlalchemy import func, tuple_

    from mewdex.dto.search import SearchFilters
    from mewdex.library.listing import filtered_memes

    filters = SearchFilters(
        collection_ids=None if collection_id is None else [str(collection_id)], status=status, animated=animated
    )
    query = filtered_memes(scope.scope_id, filters, name=name)
    keys: tuple[SQLColumnExpression[Any], SQLColumnExpression[Any]]
    if sort == "name":
        keys = (func.lower(Meme.display_name), Meme.id)
        order = [keys[0].asc(), Meme.id.asc()]
    else:
        column = Meme.created_at if sort == "created" else Meme.updated_at
        keys = (column, Meme.id)
        order = [column.desc(), Meme.id.desc()]
    if cursor:
        cursor_sort, value, last_id = decode_cursor(cursor, (str, str, uuid_mod.UUID))
        if cursor_sort != sort:
            raise CursorInvalid()
        try:
            value = value if sort == "name" else datetime.fromisoformat(value)
        except ValueError:
            raise CursorInvalid() from None
        after = tuple_(*keys) > tuple_(value, last_id) if sort == "name" else tuple_(*keys) < tuple_(value, last_id)
        query = query.where(after)
    rows = session.execute(query.add_columns(keys[0]).order_by(*order).limit(limit + 1)).all()
    memes, more = [row[0] for row in rows[:limit]], len(rows) > limit
    next_cursor = None
    if more:
        last, value = rows[limit - 1]
        value = value if sort == "name" else value.isoformat()
        next_cursor = encode_cursor([sort, value, last.id])
    return MemePage(memes, next_cursor)
