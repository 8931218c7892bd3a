"""Small helpers for the integration tests: counting what a scope has stored."""

from __future__ import annotations

from sqlalchemy import func, select, text

from mewdex.db.models import ImageProcessingJob, Meme, Scope, StorageOperation, Task


def counts(sessions, scope) -> dict:
    """Rows and blobs the scope holds: memes, jobs, tasks, unfinished storage operations, blob files."""
    from mewdex.storage import blob_store

    with sessions.begin() as session:
        sid = scope.scope_id

        def n(model, *where):
            return session.execute(
                select(func.count()).select_from(model).where(model.scope_id == sid, *where)
            ).scalar_one()

        namespace = session.get(Scope, sid).storage_namespace
        return {
            "memes": n(Meme),
            "jobs": n(ImageProcessingJob),
            "tasks": n(Task),
            "open_ops": n(StorageOperation, StorageOperation.status.in_(("prepared", "file_applied"))),
            "blobs": len(list(blob_store().iter_keys(namespace))),
        }


def meme(sessions, scope, meme_id) -> Meme:
    with sessions.begin() as session:
        return session.execute(select(Meme).where(Meme.scope_id == scope.scope_id, Meme.id == meme_id)).scalar_one()


def collection_names(sessions, scope, meme_id) -> set[str]:
    with sessions.begin() as session:
        rows = session.execute(
            text(
                "SELECT c.name FROM meme_collections c JOIN meme_collection_items i "
                "ON i.scope_id = c.scope_id AND i.collection_id = c.id "
                "WHERE c.scope_id = :s AND i.meme_id = :m"
            ),
            {"s": scope.scope_id, "m": meme_id},
        ).scalars()
        return set(rows)


def stage_states(sessions, scope, meme_id) -> dict[str, str]:
    """Planned stage -> status of the meme's latest job."""
    with sessions.begin() as session:
        rows = session.execute(
            text(
                "SELECT s.stage, s.status FROM image_processing_stages s JOIN image_processing_jobs j "
                "ON j.scope_id = s.scope_id AND j.id = s.job_id "
                "WHERE j.scope_id = :s AND j.meme_id = :m AND s.planned "
                "ORDER BY j.created_at"
            ),
            {"s": scope.scope_id, "m": meme_id},
        ).all()
        return {stage: status for stage, status in rows}
