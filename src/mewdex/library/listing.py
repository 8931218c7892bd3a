"""Library queries shared by the API, the pages, search and the CLI: the meme filters (one SQL
predicate every caller uses), "the latest processing job of each meme" and the meme DTOs.

* :data:`LIVE_SQL` / :func:`live` / :func:`live_ids` — the one rule of a live meme (not in the trash,
  ``memes.deleted_at IS NULL``; defined in :mod:`mewdex.library.live`, re-exported here):
  :func:`filter_sql`, :func:`find`, :func:`memes_by_id`, the search service's fused ranking, the
  collections' listings and the tag counts all apply it, so a trashed meme is never listed, counted,
  found or sent (only :mod:`mewdex.library.trash` asks for trashed ones).
* :func:`filter_sql` — the filters of :class:`~mewdex.dto.search.SearchFilters` (plus a name
  substring) as one SQL predicate over the ``memes`` table; search legs embed it in their own SQL
  (``EXISTS (SELECT 1 FROM memes WHERE memes.scope_id = … AND memes.id = <leg>.meme_id AND …)``),
  listings use it in their ``WHERE``.
* :data:`LATEST_JOB_STATUS_SQL` / :func:`latest_jobs` — the latest job of a meme (by ``created_at``).
* :func:`meme_brief` / :func:`memes_full` — ORM rows to :mod:`mewdex.dto.memes` shapes.
* :func:`find` — the meme with this (scope, id), locked when asked (also ``library.memes.find``).
* The pages' reads: :class:`MemeCard` (:func:`cards`), one page of the library (:func:`library_page`),
  :func:`memes_by_id`, :func:`meme_count`, what is still being processed (:func:`processing`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any
from uuid import UUID

from sqlalchemy import Select, func, not_, select, text
from sqlalchemy.dialects.postgresql import distinct_on
from sqlalchemy.orm import Session

from mewdex.db.models import ImageProcessingJob, ImageProcessingStage, Meme, ScopeContext
from mewdex.dto.media import MOVING_EXTENSIONS
from mewdex.dto.memes import JobBrief, MemeBrief, MemeRef, NearDuplicate, StageStatus, WatchedFile
from mewdex.dto.memes import Meme as MemeDto
from mewdex.dto.search import SearchFilters
from mewdex.library import tags
from mewdex.library.images import EXTENSIONS, MEDIA_TYPES
from mewdex.library.live import LIVE_SQL as LIVE_SQL
from mewdex.library.live import live as live
from mewdex.library.live import live_ids as live_ids

MEDIA_TYPES_BY_EXTENSION = {EXTENSIONS[f]: MEDIA_TYPES[f] for f in EXTENSIONS}


def library_scopes(session: Session) -> list[str]:
    """The scopes that hold memes, sorted: every library a library-wide job covers (``mewdex reindex``,
    a search-recipe rebuild, a naming-rules repair)."""
    return list(session.execute(select(Meme.scope_id).distinct().order_by(Meme.scope_id)).scalars())


def find(
    session: Session,
    scope: ScopeContext,
    meme_id: UUID | str | None,
    *,
    lock: bool = False,
    key_share: bool = False,
    include_trashed: bool = False,
) -> Meme | None:
    """The meme ``meme_id`` (a UUID or its text) of the scope, or None (none there, no id, not a UUID, in the
    trash); the one "meme with this (scope, id)" lookup of every layer. ``lock``: ``SELECT … FOR UPDATE`` until
    the transaction ends; with ``key_share``, ``FOR NO KEY UPDATE`` (the lock an UPDATE of the row takes:
    rows that only reference the meme can still be written beside it). ``include_trashed``: a meme in the
    trash too (the trash itself, its media, the pipeline and the permanent delete)."""
    if meme_id is None:
        return None
    if not isinstance(meme_id, UUID):
        try:
            meme_id = UUID(str(meme_id))
        except ValueError:
            return None
    query = select(Meme).where(Meme.scope_id == scope.scope_id, Meme.id == meme_id)
    if not include_trashed:
        query = query.where(live())
    if lock:
        query = query.with_for_update(key_share=key_share)
    return session.execute(query).scalar_one_or_none()


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


# Animated: a GIF/WEBP/AVIF of more than one frame, and every clip and sticker (even a one-frame one:
# the page plays it as a clip), so "animated only" keeps them and "stills only" never shows one.
_ANIMATED_SQL = (
    "(COALESCE(CAST(memes.extensions -> 'image' ->> 'animated' AS boolean), false) OR memes.extension IN ("
    + ",".join(f"'{extension}'" for extension in MOVING_EXTENSIONS)
    + "))"
)


def escape_like(value: str) -> str:
    return value.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


_TAGGED = "SELECT 1 FROM meme_tags t WHERE t.scope_id = memes.scope_id AND t.meme_id = memes.id"


def filter_sql(filters: SearchFilters | None, *, name: str | None = None) -> tuple[str, dict[str, Any]]:
    """``(predicate, params)``: SQL over the ``memes`` table (unaliased) that is true for the memes the
    filters keep — always live ones (:data:`LIVE_SQL`); params are prefixed ``f_``. ``name``:
    case-insensitive substring of the display name."""
    parts: list[str] = [LIVE_SQL]
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
        for i, tag in enumerate(filters.tags or ()):  # every one of them (issue 43)
            parts.append(f"EXISTS ({_TAGGED} AND t.tag = :f_tag_{i})")
            params[f"f_tag_{i}"] = tag
        if filters.not_tags:
            parts.append(f"NOT EXISTS ({_TAGGED} AND t.tag = ANY(CAST(:f_not_tags AS varchar[])))")
            params["f_not_tags"] = list(filters.not_tags)
    return " AND ".join(parts), params


def exists_sql(filters: SearchFilters | None, meme_id_column: str) -> tuple[str, dict[str, Any]]:
    """``(" AND EXISTS (…)", params)`` narrowing rows whose ``meme_id_column`` (with ``:scope`` as
    scope) is a live meme the filters keep; ``("", {})`` without filters (the SQL stays as it was: the
    search service drops trashed memes from the fused ranking, :func:`live_ids`)."""
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


def _watched_file(meme: Meme) -> WatchedFile | None:
    """The meme's place in a watched folder (``extensions.watch``, :mod:`mewdex.library.watch`), or None."""
    watch = (meme.extensions or {}).get("watch")
    if not isinstance(watch, dict) or not watch.get("root"):
        return None
    return WatchedFile(
        folder=str(watch["root"]), path=str(watch.get("path") or ""), missing_since=watch.get("missing_since")
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
    tagged = tags.of_memes(session, memes[0].scope_id, [m.id for m in memes])
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
                template_id=(meme.provenance or {}).get("template_id"),
                watched_file=_watched_file(meme),
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
                tags=tagged.get(meme.id, []),
            )
        )
    return out


def filtered_memes(scope_id: str, filters: SearchFilters | None, *, name: str | None = None):
    """A ``select(Meme)`` of the scope's live memes narrowed by :func:`filter_sql`."""
    predicate, params = filter_sql(filters, name=name)
    return select(Meme).where(Meme.scope_id == scope_id, text(predicate).bindparams(**params))


def random_memes(session: Session, scope_id: str, filters: SearchFilters | None = None, n: int = 1) -> list[Meme]:
    """Up to ``n`` live memes of the scope drawn at random among those the filters keep (a tag, a
    collection: :func:`filter_sql`); empty when none passes. What "随机"/"random" sends in a chat."""
    return list(session.execute(filtered_memes(scope_id, filters).order_by(func.random()).limit(max(1, n))).scalars())


# ------------------------------------------------------------------ the pages' cards and library page

MEME_STATES = ("ready", "processing", "failed")
#: The library page's sort orders (``?sort=``), the first the default.
PAGE_SORTS = {
    "newest": (Meme.created_at.desc(), Meme.id.desc()),
    "oldest": (Meme.created_at.asc(), Meme.id.asc()),
    "name": (func.lower(Meme.display_name).asc(), Meme.id.asc()),
    "updated": (Meme.updated_at.desc(), Meme.id.desc()),
}
_FAILED = ("failed", "blocked", "unknown_execution")
_PENDING = ("queued", "running")


@dataclass
class MemeCard:
    """A meme as a grid card or list row: name, media facts and its stage statuses."""

    id: str
    display_name: str
    extension: str
    animated: bool
    size_bytes: int
    width: int | None
    height: int | None
    created_at: Any
    stages: dict[str, dict[str, Any]] = field(default_factory=dict)
    group_size: int = 1  # with variants collapsed: the memes of its template group, itself included
    tags: list[str] = field(default_factory=list)

    @property
    def state(self) -> str:
        """``failed`` when a stage failed, ``processing`` while any is queued/running, else ``ready``."""
        statuses = {s["status"] for s in self.stages.values()}
        if statuses & set(_FAILED):
            return "failed"
        if statuses & set(_PENDING):
            return "processing"
        return "ready"


def cards(session: Session, scope: ScopeContext, memes: list[Meme], *, with_stages: bool = True) -> list[MemeCard]:
    """Cards of ``memes`` (in order), with the stage statuses of each one's latest job when asked."""
    stages = stage_statuses(session, scope, [m.id for m in memes]) if with_stages else {}
    tagged = tags.of_memes(session, scope.scope_id, [m.id for m in memes])
    out = []
    for m in memes:
        image = m.extensions.get("image", {})
        out.append(
            MemeCard(
                id=str(m.id),
                display_name=m.display_name,
                extension=m.extension,
                animated=bool(image.get("animated")),
                size_bytes=m.size_bytes,
                width=image.get("width"),
                height=image.get("height"),
                created_at=m.created_at,
                stages=stages.get(m.id, {}),
                tags=tagged.get(m.id, []),
            )
        )
    return out


def stage_statuses(session: Session, scope: ScopeContext, meme_ids: list[UUID]) -> dict[UUID, dict[str, dict]]:
    """``{meme_id: {stage: {"status", "attempts", "error", "task_id"}}}`` of each meme's latest job (planned stages)."""
    _jobs, stages = latest_job_stages(session, scope.scope_id, list(meme_ids), planned_only=True)
    return {
        meme_id: {
            s.stage: {"status": s.status, "attempts": s.attempt_count, "error": s.error, "task_id": s.task_id}
            for s in rows
        }
        for meme_id, rows in stages.items()
    }


@dataclass
class LibraryPage:
    cards: list[MemeCard]
    total: int
    page: int
    pages: int
    per_page: int


def library_page(
    session: Session,
    scope: ScopeContext,
    *,
    name: str = "",
    state: str = "",
    collection_id: UUID | None = None,
    animated: bool = False,
    sort: str = "newest",
    page: int = 1,
    per_page: int = 48,
    groups: dict[UUID, tuple[UUID, int]] | None = None,
) -> LibraryPage:
    """One page of the scope's memes, filtered by name substring (case-insensitive), processing state
    (``ready`` | ``processing`` | ``failed``; anything else: all), collection and animated; sorted by
    :data:`PAGE_SORTS` (an unknown one: ``newest``); ``page`` clamped to ``1..pages``.
    ``groups`` (variants collapsed): ``{meme_id: (representative, group size)}`` of the template groups
    (:func:`mewdex.search.variants.template_groups`): one card per group, its representative, with the
    group's size in ``group_size``."""
    filters = SearchFilters(
        collection_ids=None if collection_id is None else [str(collection_id)], animated=True if animated else None
    )
    query: Select = filtered_memes(scope.scope_id, filters, name=name.strip() or None)
    if state == "failed":
        query = query.where(latest_stage_sql(_FAILED))
    elif state == "processing":
        query = query.where(latest_stage_sql(_PENDING))
    elif state == "ready":
        query = query.where(not_(latest_stage_sql(_FAILED + _PENDING)))
    groups = groups or {}
    hidden = [m for m, (representative, _size) in groups.items() if m != representative]
    if hidden:
        query = query.where(Meme.id.not_in(hidden))
    total = session.execute(select(func.count()).select_from(query.subquery())).scalar_one()
    pages = max(1, -(-total // per_page))
    page = min(max(page, 1), pages)
    memes = list(
        session.execute(
            query.order_by(*PAGE_SORTS.get(sort, PAGE_SORTS["newest"])).offset((page - 1) * per_page).limit(per_page)
        ).scalars()
    )
    page_cards = cards(session, scope, memes)
    for c in page_cards:
        c.group_size = groups.get(UUID(c.id), (None, 1))[1]
    return LibraryPage(page_cards, total, page, pages, per_page)


def meme_count(session: Session, scope: ScopeContext) -> int:
    """How many live memes the scope has (the trash not counted)."""
    return session.execute(
        select(func.count()).select_from(Meme).where(Meme.scope_id == scope.scope_id, live())
    ).scalar_one()


@dataclass
class Processing:
    """Memes whose processing is queued or running (``pending``) out of all the scope's memes (``total``)."""

    pending: int
    total: int


def processing(session: Session, scope: ScopeContext) -> Processing:
    """How many of the scope's memes are still being processed (a processing job queued or running)."""
    pending = session.execute(
        text(
            "SELECT count(DISTINCT meme_id) FROM image_processing_jobs "
            "WHERE scope_id = :s AND status IN ('queued', 'running')"
        ),
        {"s": scope.scope_id},
    ).scalar_one()
    return Processing(pending=pending, total=meme_count(session, scope) if pending else 0)


def memes_by_id(session: Session, scope: ScopeContext, ids: list[UUID]) -> dict[UUID, Meme]:
    """``{id: meme}`` of those of ``ids`` the scope has alive (not in the trash)."""
    if not ids:
        return {}
    return {
        m.id: m
        for m in session.execute(
            select(Meme).where(Meme.scope_id == scope.scope_id, Meme.id.in_(ids), live())
        ).scalars()
    }
