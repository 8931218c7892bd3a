"""Adding memes to a scope: validate, content-address, journal, store, create the row and its job."""

from __future__ import annotations

import dataclasses
import hashlib
import logging
from dataclasses import dataclass
from typing import Any

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, sessionmaker

from mewdex.config import get_settings
from mewdex.db.models import Meme, ScopeContext
from mewdex.library import collections
from mewdex.library.images import ImageError, ImageInfo, probe
from mewdex.library.names import display_name_from_filename
from mewdex.library.scopes import ensure_scope
from mewdex.pipeline.jobs import create_job
from mewdex.platform import quotas
from mewdex.platform.errors import PlatformError
from mewdex.storage import journal

log = logging.getLogger(__name__)


@dataclass
class AddResult:
    """Outcome for one file: ``created`` | ``duplicate`` | ``skipped`` (with an error code)."""

    status: str
    meme_id: str | None = None
    error: str | None = None
    message: str | None = None
    info: ImageInfo | None = None


def find_by_sha256(session: Session, scope: ScopeContext, sha256: str) -> Meme | None:
    return session.execute(
        select(Meme).where(Meme.scope_id == scope.scope_id, Meme.sha256 == sha256).limit(1)
    ).scalar_one_or_none()


def add_image(sessions: sessionmaker[Session], store, scope: ScopeContext, data: bytes, *, filename: str,
              provenance: dict[str, Any], collection_names: list[str] = (), process: bool = True) -> AddResult:
    """Add one image: ``skipped`` with a stable error code for bad bytes or ``quota_exceeded`` (the
    owner's storage/meme limit; nothing written), ``duplicate`` (the existing
    meme, added to the collections too) for bytes already in the scope, else ``created``.

    Crash-safe: the upload is journaled before the blob is written and completed in the same
    transaction that creates the meme row, its collection memberships and its processing job.
    """
    try:
        info = probe(data, max_pixels=get_settings().max_pixels)
    except ImageError as exc:
        return AddResult("skipped", error=exc.code, message=str(exc))
    sha256 = hashlib.sha256(data).hexdigest()
    key = sha256 + info.extension

    with sessions.begin() as session:
        namespace = str(ensure_scope(session, scope).storage_namespace)
        existing = find_by_sha256(session, scope, sha256)
        if existing is not None:
            _add_to_collections(session, scope, existing, collection_names)
            return AddResult("duplicate", meme_id=str(existing.id), info=info)
        try:  # before anything is written; an exact duplicate (above) adds nothing
            quotas.check_upload(session, scope, len(data))
        except PlatformError as exc:
            return AddResult("skipped", error=exc.code, message=exc.message)
        op_id = journal.prepare_upload(session, scope.scope_id, key, sha256, len(data)).id

    store.put(namespace, key, data)
    try:
        with sessions.begin() as session:
            meme = Meme(
                scope_id=scope.scope_id,
                storage_key=key,
                display_name=display_name_from_filename(filename),
                name_source="uploaded",
                extension=info.extension,
                size_bytes=len(data),
                sha256=sha256,
                provenance=provenance,
                extensions={"image": dataclasses.asdict(info)},
            )
            session.add(meme)
            session.flush()
            _add_to_collections(session, scope, meme, collection_names)
            if process:
                create_job(session, meme)
            journal.complete(session, op_id, meme.id)
            return AddResult("created", meme_id=str(meme.id), info=info)
    except IntegrityError:
        # Another writer added the same bytes meanwhile: theirs is the meme; ours never existed.
        with sessions.begin() as session:
            existing = find_by_sha256(session, scope, sha256)
            if existing is not None:
                journal.compensate(session, op_id)
                _add_to_collections(session, scope, existing, collection_names)
                return AddResult("duplicate", meme_id=str(existing.id), info=info)
        _undo_upload(sessions, store, scope, namespace, key, op_id)
        raise
    except Exception:
        _undo_upload(sessions, store, scope, namespace, key, op_id)
        raise


def _undo_upload(sessions: sessionmaker[Session], store, scope: ScopeContext, namespace: str, key: str,
                 op_id) -> None:
    """Compensate an upload whose meme row was never created: remove its blob unless a meme uses it."""
    with sessions.begin() as session:
        if not journal.blob_in_use(session, scope.scope_id, key):
            store.delete(namespace, key)
        journal.compensate(session, op_id)


def _add_to_collections(session: Session, scope: ScopeContext, meme: Meme, names) -> None:
    for name in names:
        collection = collections.get_or_create(session, scope, name)
        collections.add_items(session, scope, collection.id, [meme.id])
