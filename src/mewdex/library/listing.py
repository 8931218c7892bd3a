"""Library queries shared by the API, the pages, search and the CLI: the meme filters (one SQL
predicate every caller uses), "the latest processing job of each meme" and the meme DTOs.

* :func:`filter_sql` — the filters of :class:`~mewdex.dto.search.SearchFilters` (plus a name
  substring) as one SQL predicate over the ``memes`` table; search legs embed it in their own SQL
  (``EXISTS (SELECT 1 FROM memes WHERE memes.scope_id = … AND memes.id = <leg>.meme_id AND …)``),
  listings use it in their ``WHERE``.
* :data:`LATEST_JOB_STATUS_SQL` / :func:`latest_jobs` — the latest job of a meme (by ``created_at``).
* :func:`meme_brief` / :func:`memes_full` — ORM rows to :mod:`mewdex.dto.memes` shapes.
"""

from __future__ import annotations

from typing import Any
from uuid import UUID

from sqlalchemy import select, text
from sqlalchemy.dialects.postgresql import distinct_on
from sqlalchemy.orm import Session

from mewdex.db.models import ImageProcessingJob, ImageProcessingStage, Meme
from mewdex.dto.memes import JobBrief, MemeBrief, MemeRef, NearDuplicate, StageStatus
from mewdex.dto.memes import Meme as MemeDto
from mewdex.dto.search import SearchFilters
from mewdex.library.images import EXTENSIONS, MEDIA_TYPES

MEDIA_TYPES_BY_EXTENSION = {EXTENSIONS[f]: MEDIA_TYPES[f] for f in EXTENSIONS}


def latest_job_sql(column: str) -> str:
    """A column (``id``, ``status``) of the meme's latest processing job (NULL: none), correlated to the
    ``memes`` row: the one SQL definition of "the latest job of a meme"."""
    return (
        f"(SELECT j.{column} FROM image_processing_jobs j WHERE j.scope_id = memes.scope_id "
        "AND j.meme_id = memes.id ORDER BY j.created_at DESC LIMIT 1)"
    )


LATEST_JOB_STATUS_SQL = latest_job_sql("status")


def latest_stage_sql(statuses: tuple[str, ...]):
    """A predicate over ``memes``: its latest job has a planned stage in one of ``statuses``."""
    quoted = ", ".join("'" + s.replace("'", "''") + "'" for s in statuses)
    return text(
        f"EXISTS (SELECT 1 FROM image_processing_stages s WHERE s.scope_id = memes.scope_id "
        f"AND s.job_id = {latest_job_sql('id')} AND s.planned AND s.status IN ({quoted}))"
    )


_ANIMATED_SQL = "COALESCE(CAST(memes.extensions -> 'image' ->> 'animated' AS boolean), false)"


def escape_like(value: str) -> str:
    return value.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def filter_sql(filters: SearchFilters | None, *, name: str | None = None) -> tuple[str, dict[str, Any]]:
    """``(predicate, params)``: SQL over the ``memes`` table (unaliased) that is true for the memes the
    filters keep (``TRUE`` with no filter); params are prefixed ``f_``. ``name``: case-insensitive
    substring of the display name."""
    parts: list[str] = []
    params: dict[str, Any] = {}
    if name:
        parts.append("memes.display_name ILIKE :f_name ESCAPE '\\'")
        params["f_name"] = f"%{escape_like(name)}%"
    if filters is not None:
        if filters.collection_ids is not None:
            parts.append(
                "EXISTS (SELECT 1 FROM meme_collection_items ci WHERE ci.scope_id = memes.scope_id "
                "AND ci.meme_id = memes.id AND ci.collection_id = ANY(CAST(:f_collections AS uuid[])))"
            )
            params["f_collections"] = [str(c) for c in filters.collection_ids]
        if filters.animated is not None:
            parts.append(f"{_ANIMATED_SQL} = :f_animated")
            params["f_animated"] = filters.animated
        if filters.formats is not None:
            parts.append("memes.extension = ANY(CAST(:f_extensions AS text[]))")
            params["f_extensions"] = [EXTENSIONS[f] for f in filters.formats]
        if filters.status == "none":
            parts.append(f"{LATEST_JOB_STATUS_SQL} IS NULL")
        elif filters.status == "pending":
            parts.append(f"{LATEST_JOB_STATUS_SQL} IN ('queued', 'running')")
        elif filters.status is not None:
            parts.append(f"{LATEST_JOB_STATUS_SQL} = :f_status")
            params["f_status"] = filters.status
        if filters.created_from is not None:
            parts.append("memes.created_at >= :f_created_from")
            params["f_created_from"] = filters.created_from
        if filters.created_to is not None:
            parts.append("memes.created_at < :f_created_to")
            params["f_created_to"] = filters.created_to
    return (" AND ".join(parts) or "TRUE"), params


def exists_sql(filters: SearchFilters | None, meme_id_column: str) -> tuple[str, dict[str, Any]]:
    """``(" AND EXISTS (…)", params)`` narrowing rows whose ``meme_id_column`` (with ``:scope`` as
    scope) is a meme the filters keep; ``("", {})`` without filters (the SQL stays as it was)."""
    if filters is None or filters.empty:
        return "", {}
    predicate, params = filter_sql(filters)
    return (
        f" AND EXISTS (SELECT 1 FROM memes WHERE memes.scope_id = :scope AND memes.id = {meme_id_column}"
        f" AND {predicate})"
    ), params


def latest_jobs(session: Session, scope_id: str, meme_ids: list[UUID]) -> dict[UUID, ImageProcessingJob]:
    """``{meme_id: its latest processing job}`` (memes without a job are absent)."""
    if not meme_ids:
        return {}
    rows = session.execute(
        select(ImageProcessingJob)
        .where(ImageProcessingJob.scope_id == scope_id, ImageProcessingJob.meme_id.in_(list(meme_ids)))
        .ext(distinct_on(ImageProcessingJob.meme_id))
        .order_by(ImageProcessingJob.meme_id, ImageProcessingJob.created_at.desc())
    ).scalars()
    return {job.meme_id: job for job in rows}


def latest_job_stages(
    session: Session, scope_id: str, meme_ids: list[UUID], *, planned_only: bool = False
) -> tuple[dict[UUID, ImageProcessingJob], dict[UUID, list[ImageProcessingStage]]]:
    """The latest job of each meme and that job's stage rows (only the planned ones when asked)."""
    jobs = latest_jobs(session, scope_id, meme_ids)
    stages: dict[UUID, list[ImageProcessingStage]] = {}
    if jobs:
        by_job = {job.id: meme_id for meme_id, job in jobs.items()}
        query = select(ImageProcessingStage).where(
            ImageProcessingStage.scope_id == scope_id, ImageProcessingStage.job_id.in_(list(by_job))
        )
        if planned_only:
            query = query.where(ImageProcessingStage.planned)
        for stage in session.execute(query).scalars():
            stages.setdefault(by_job[stage.job_id], []).append(stage)
    return jobs, stages


def meme_ref(meme: Meme) -> MemeRef:
    return MemeRef(id=str(meme.id), display_name=meme.display_name, sha256=meme.sha256, media_url=f"/media/{meme.id}")


def meme_brief(meme: Meme) -> MemeBrief:
    return MemeBrief(
        id=str(meme.id),
        display_name=meme.display_name,
        sha256=meme.sha256,
        extension=meme.extension,
        size_bytes=meme.size_bytes,
        media_url=f"/media/{meme.id}",
        thumbnail_url=f"/media/{meme.id}/thumbnail",
        created_at=meme.created_at.isoformat(),
    )


def memes_full(
    session: Session, memes: list[Meme], *, near_duplicates: dict[UUID, list[dict[str, Any]]]
) -> list[MemeDto]:
    """The full meme DTOs of memes of one scope (one meme, or a page of the library), in order, with a
    fixed number of statements (jobs, stages, thumbnails), not a few per meme. ``near_duplicates``:
    ``{meme_id: pairs}`` from :func:`mewdex.search.image_search.near_duplicates_of_many`."""
    from mewdex.library.thumbnails import thumbnail_statuses

    if not memes:
        return []
    jobs, stages = latest_job_stages(session, memes[0].scope_id, [m.id for m in memes])
    thumbnails = thumbnail_statuses(session, memes)
    out = []
    for meme in memes:
        job = jobs.get(meme.id)
        image = meme.extensions.get("image", {})
        out.append(
            MemeDto(
                **meme_brief(meme).model_dump(),
                media_type=MEDIA_TYPES_BY_EXTENSION[meme.extension],
                **{k: image.get(k) for k in ("width", "height", "frames", "duration_ms", "animated")},
                animated_preview_url=f"/media/{meme.id}/thumbnail?animated=1" if image.get("animated") else None,
                thumbnails=thumbnails[meme.id],
                near_duplicates=[NearDuplicate(**d) for d in near_duplicates.get(meme.id, [])],
                context_status=meme.context_status,
                meme_context=meme.meme_context,
                provenance=meme.provenance,
                job=None if job is None else JobBrief(id=str(job.id), status=job.status, error=job.error),
                stages={
                    s.stage: StageStatus(
                        status=s.status,
                        planned=s.planned,
                        skip_reason=s.skip_reason,
                        attempts=s.attempt_count,
                        error=s.error,
                    )
                    for s in stages.get(meme.id, [])
                },
                revision=meme.revision,
                updated_at=meme.updated_at.isoformat(),
            )
        )
    return out


def filtered_memes(scope_id: str, filters: SearchFilters | None, *, name: str | None = None):
    """A ``select(Meme)`` of the scope narrowed by :func:`filter_sql`."""
    query = select(Meme).where(Meme.scope_id == scope_id)
    predicate, params = filter_sql(filters, name=name)
    if params or predicate != "TRUE":
        query = query.where(text(predicate).bindparams(**params))
    return query
