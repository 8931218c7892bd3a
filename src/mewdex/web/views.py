"""Read models of the web UI pages: what each page shows, read straight from the database.

Pages render these on the server; every change (upload, rename, delete, retry, collections)
goes through the JSON API from the page scripts. All reads are confined to the caller's scope.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any
from uuid import UUID

from sqlalchemy import Select, and_, func, not_, select, text
from sqlalchemy.orm import Session

from mewdex.db.models import (
    ImageProcessingAttempt,
    Meme,
    MemeCollection,
    MemeCollectionItem,
    ScopeContext,
    Task,
)
from mewdex.dto.search import SearchFilters
from mewdex.library import listing
from mewdex.queue import registry
from mewdex.search import variants

BADGE_STAGES = ("visual", "agent", "text_embedding")
MEME_STATES = ("ready", "processing", "failed")
SORTS = {
    "newest": (Meme.created_at.desc(), Meme.id.desc()),
    "oldest": (Meme.created_at.asc(), Meme.id.asc()),
    "name": (func.lower(Meme.display_name).asc(), Meme.id.asc()),
    "updated": (Meme.updated_at.desc(), Meme.id.desc()),
}
TASK_STATUSES = ("queued", "running", "succeeded", "failed")
TASK_PAGE = 100


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

    @property
    def state(self) -> str:
        """``failed`` when a stage failed, ``processing`` while any is queued/running, else ``ready``."""
        statuses = {s["status"] for s in self.stages.values()}
        if statuses & {"failed", "blocked", "unknown_execution"}:
            return "failed"
        if statuses & {"queued", "running"}:
            return "processing"
        return "ready"


def cards(session: Session, scope: ScopeContext, memes: list[Meme], *, with_stages: bool = True) -> list[MemeCard]:
    """Cards of ``memes`` (in order), with the stage statuses of each one's latest job when asked."""
    stages = stage_statuses(session, scope, [m.id for m in memes]) if with_stages else {}
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
            )
        )
    return out


def stage_statuses(session: Session, scope: ScopeContext, meme_ids: list[UUID]) -> dict[UUID, dict[str, dict]]:
    """``{meme_id: {stage: {"status", "attempts", "error", "task_id"}}}`` of each meme's latest job (planned stages)."""
    _jobs, stages = listing.latest_job_stages(session, scope.scope_id, list(meme_ids), planned_only=True)
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
    collection: str = "",
    animated: bool = False,
    sort: str = "newest",
    page: int = 1,
    per_page: int = 48,
    collapse: bool = False,
) -> LibraryPage:
    """One page of the scope's memes, filtered by name substring (case-insensitive), processing state
    (``ready`` | ``processing`` | ``failed``), collection id and animated; sorted by ``SORTS``.
    ``collapse``: one card per template group (its oldest meme, :mod:`mewdex.search.variants`) with
    the group's size in ``group_size``; the others of the group are left out."""
    collection_id = parse_uuid(collection)
    filters = SearchFilters(
        collection_ids=None if collection_id is None else [str(collection_id)], animated=True if animated else None
    )
    query: Select = listing.filtered_memes(scope.scope_id, filters, name=name.strip() or None)
    if state == "failed":
        query = query.where(listing.latest_stage_sql(("failed", "blocked", "unknown_execution")))
    elif state == "processing":
        query = query.where(listing.latest_stage_sql(("queued", "running")))
    elif state == "ready":
        query = query.where(
            not_(listing.latest_stage_sql(("failed", "blocked", "unknown_execution", "queued", "running")))
        )
    groups = variants.template_groups(session, scope.scope_id) if collapse else {}
    hidden = [m for m, (representative, _size) in groups.items() if m != representative]
    if hidden:
        query = query.where(Meme.id.not_in(hidden))
    total = session.execute(select(func.count()).select_from(query.subquery())).scalar_one()
    pages = max(1, -(-total // per_page))
    page = min(max(page, 1), pages)
    memes = list(
        session.execute(
            query.order_by(*SORTS.get(sort, SORTS["newest"])).offset((page - 1) * per_page).limit(per_page)
        ).scalars()
    )
    page_cards = cards(session, scope, memes)
    for c in page_cards:
        c.group_size = groups.get(UUID(c.id), (None, 1))[1]
    return LibraryPage(page_cards, total, page, pages, per_page)


def meme_count(session: Session, scope: ScopeContext) -> int:
    return session.execute(select(func.count()).select_from(Meme).where(Meme.scope_id == scope.scope_id)).scalar_one()


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
    if not ids:
        return {}
    return {
        m.id: m
        for m in session.execute(select(Meme).where(Meme.scope_id == scope.scope_id, Meme.id.in_(ids))).scalars()
    }


# ------------------------------------------------------------------ collections


@dataclass
class CollectionRow:
    id: str
    name: str
    count: int
    cover: str | None
    updated_at: Any


COLLECTION_SORTS = ("name", "size", "updated")
COLLECTIONS_PER_PAGE = 50


def collections(
    session: Session,
    scope: ScopeContext,
    *,
    q: str | None = None,
    sort: str = "name",
    limit: int | None = None,
    offset: int = 0,
) -> list[CollectionRow]:
    """The scope's collections with member counts and the first member as cover: all of them by name
    (menus), or those whose name contains ``q`` (case-insensitive), sorted by ``sort`` (one of
    :data:`COLLECTION_SORTS`: name A–Z, size largest first, updated newest first), ``limit`` from ``offset``."""
    count = (
        select(func.count())
        .where(MemeCollectionItem.scope_id == scope.scope_id, MemeCollectionItem.collection_id == MemeCollection.id)
        .scalar_subquery()
    )
    cover = (
        select(MemeCollectionItem.meme_id)
        .where(MemeCollectionItem.scope_id == scope.scope_id, MemeCollectionItem.collection_id == MemeCollection.id)
        .order_by(MemeCollectionItem.added_at, MemeCollectionItem.meme_id)
        .limit(1)
        .scalar_subquery()
    )
    order = {"size": (count.desc(),), "updated": (MemeCollection.updated_at.desc(),)}.get(sort, ())
    query = (
        select(MemeCollection, count, cover)
        .where(_collection_filter(scope, q))
        .order_by(*order, func.lower(MemeCollection.name), MemeCollection.id)
        .offset(offset)
    )
    if limit is not None:
        query = query.limit(limit)
    rows = session.execute(query).all()
    return [CollectionRow(str(c.id), c.name, n, str(cv) if cv else None, c.updated_at) for c, n, cv in rows]


def count_collections(session: Session, scope: ScopeContext, q: str | None = None) -> int:
    """How many collections :func:`collections` finds for ``q``."""
    return session.execute(
        select(func.count()).select_from(MemeCollection).where(_collection_filter(scope, q))
    ).scalar_one()


def _collection_filter(scope: ScopeContext, q: str | None):
    condition = MemeCollection.scope_id == scope.scope_id
    if q:
        condition = and_(condition, MemeCollection.name.ilike(f"%{listing.escape_like(q)}%", escape="\\"))
    return condition


def collection(session: Session, scope: ScopeContext, collection_id: UUID) -> MemeCollection | None:
    return session.execute(
        select(MemeCollection).where(MemeCollection.scope_id == scope.scope_id, MemeCollection.id == collection_id)
    ).scalar_one_or_none()


def collection_members(session: Session, scope: ScopeContext, collection_id: UUID) -> list[MemeCard]:
    """Members in the order they were added."""
    memes = list(
        session.execute(
            select(Meme)
            .join(
                MemeCollectionItem,
                and_(MemeCollectionItem.scope_id == Meme.scope_id, MemeCollectionItem.meme_id == Meme.id),
            )
            .where(Meme.scope_id == scope.scope_id, MemeCollectionItem.collection_id == collection_id)
            .order_by(MemeCollectionItem.added_at, Meme.id)
        ).scalars()
    )
    return cards(session, scope, memes)


def collections_of_meme(session: Session, scope: ScopeContext, meme_id: UUID) -> list[MemeCollection]:
    return list(
        session.execute(
            select(MemeCollection)
            .join(
                MemeCollectionItem,
                and_(
                    MemeCollectionItem.scope_id == MemeCollection.scope_id,
                    MemeCollectionItem.collection_id == MemeCollection.id,
                ),
            )
            .where(MemeCollection.scope_id == scope.scope_id, MemeCollectionItem.meme_id == meme_id)
            .order_by(func.lower(MemeCollection.name))
        ).scalars()
    )


# ------------------------------------------------------------------ tasks


def lane_depths(session: Session, scope: ScopeContext) -> list[dict[str, Any]]:
    """``[{"lane", "queued", "running"}]`` for every lane of the scope (zeros included)."""
    counts = {lane: {"lane": lane, "queued": 0, "running": 0} for lane in registry.lane_names(listed_only=True)}
    for lane, status, n in session.execute(
        select(Task.lane, Task.status, func.count())
        .where(Task.scope_id == scope.scope_id, Task.status.in_(("queued", "running")))
        .group_by(Task.lane, Task.status)
    ):
        counts.setdefault(lane, {"lane": lane, "queued": 0, "running": 0})[status] = n
    return list(counts.values())


@dataclass
class BatchProgress:
    """One bulk submission (an import, a retry of many memes) as the tasks page shows it: ``done`` of
    ``total`` memes processed (``unit`` ``memes``), or of tasks for a batch of other work (``tasks``)."""

    batch_id: str
    created_at: Any
    done: int
    total: int
    failed: int
    unit: str
    complete: bool


BATCHES_SHOWN = 5
# A finished batch stays on the tasks page this long, so its "x of x" is seen.
BATCH_SHOWN_AFTER_SECONDS = 600

_BATCH_PROGRESS_SQL = text(
    """
    SELECT b.batch_id, b.created_at, b.finalizer_state = 'complete' AS complete,
           count(DISTINCT j.id) AS jobs,
           count(DISTINCT j.id) FILTER (WHERE j.status NOT IN ('queued', 'running')) AS jobs_done,
           count(DISTINCT j.id) FILTER (WHERE j.status IN ('failed', 'blocked', 'unknown_execution')) AS jobs_failed,
           count(DISTINCT t.id) AS tasks,
           count(DISTINCT t.id) FILTER (WHERE t.status NOT IN ('queued', 'running')) AS tasks_done,
           count(DISTINCT t.id) FILTER (WHERE t.status = 'failed') AS tasks_failed
    FROM (SELECT * FROM task_batches
          WHERE scope_id = :s
            AND (finalizer_state <> 'complete' OR finalized_at > now() - make_interval(secs => :recent))
          ORDER BY created_at DESC LIMIT :n) b
    JOIN task_batch_items i ON i.scope_id = b.scope_id AND i.batch_id = b.batch_id
    JOIN tasks t ON t.scope_id = i.scope_id AND t.id = i.task_id
    LEFT JOIN image_processing_stages st ON st.scope_id = i.scope_id AND st.task_id = i.task_id
    LEFT JOIN image_processing_jobs j ON j.scope_id = st.scope_id AND j.id = st.job_id
    GROUP BY b.batch_id, b.created_at, b.finalizer_state
    ORDER BY b.created_at DESC
    """
)


def batch_progress(session: Session, scope: ScopeContext) -> list[BatchProgress]:
    """The scope's newest unfinished batches (and those finished in the last
    :data:`BATCH_SHOWN_AFTER_SECONDS`), newest first: image work counts memes (their processing jobs,
    a meme done when its job ended, failed or not); other work counts the batch's tasks."""
    rows = session.execute(
        _BATCH_PROGRESS_SQL, {"s": scope.scope_id, "recent": BATCH_SHOWN_AFTER_SECONDS, "n": BATCHES_SHOWN}
    ).mappings()
    out = []
    for r in rows:
        by_meme = r["jobs"] > 0
        out.append(
            BatchProgress(
                batch_id=r["batch_id"],
                created_at=r["created_at"],
                done=r["jobs_done"] if by_meme else r["tasks_done"],
                total=r["jobs"] if by_meme else r["tasks"],
                failed=r["jobs_failed"] if by_meme else r["tasks_failed"],
                unit="memes" if by_meme else "tasks",
                complete=r["complete"],
            )
        )
    return out


def task_types(session: Session, scope: ScopeContext) -> list[str]:
    return list(
        session.execute(
            select(Task.task_type).where(Task.scope_id == scope.scope_id).distinct().order_by(Task.task_type)
        ).scalars()
    )


def tasks(
    session: Session,
    scope: ScopeContext,
    *,
    status: str = "",
    task_type: str = "",
    stage: str = "",
    limit: int = TASK_PAGE,
) -> list[tuple[Task, str | None]]:
    """The newest tasks (by last update) with the target meme's display name, filtered."""
    query = (
        select(Task, Meme.display_name)
        .outerjoin(Meme, and_(Meme.scope_id == Task.scope_id, Meme.id == Task.target_meme_id))
        .where(Task.scope_id == scope.scope_id)
    )
    if status in TASK_STATUSES:
        query = query.where(Task.status == status)
    if task_type:
        query = query.where(Task.task_type == task_type)
    if stage:
        query = query.where(Task.image_stage == stage)
    rows = session.execute(query.order_by(Task.updated_at.desc(), Task.id).limit(limit)).all()
    return [(task, display_name) for task, display_name in rows]


def task(session: Session, scope: ScopeContext, task_id: str) -> tuple[Task, Meme | None, list] | None:
    """A task, its target meme and its attempts (oldest first); None when not in the scope."""
    row = session.execute(select(Task).where(Task.scope_id == scope.scope_id, Task.id == task_id)).scalar_one_or_none()
    if row is None:
        return None
    meme = None
    if row.target_meme_id is not None:
        meme = session.execute(
            select(Meme).where(Meme.scope_id == scope.scope_id, Meme.id == row.target_meme_id)
        ).scalar_one_or_none()
    attempts = list(
        session.execute(
            select(ImageProcessingAttempt)
            .where(ImageProcessingAttempt.scope_id == scope.scope_id, ImageProcessingAttempt.task_id == task_id)
            .order_by(ImageProcessingAttempt.attempt)
        ).scalars()
    )
    return row, meme, attempts


def parse_uuid(value: str) -> UUID | None:
    """``value`` as a UUID; None when empty or not one (a page filter that names nothing filters nothing)."""
    try:
        return UUID(value) if value else None
    except ValueError:
        return None


def operations_view(session: Session) -> dict[str, Any]:
    """The admin page's operations section: ``{"backup": mewdex.runtime.backup.health(), "schedule":
    {"dest", "cron", "keep"} | None, "rebuilds": mewdex.search.generations.builds()}``."""
    from mewdex.config import get_settings
    from mewdex.runtime.backup import health
    from mewdex.search.generations import builds

    settings = get_settings()
    schedule = None
    if settings.backup_dest:
        schedule = {"dest": settings.backup_dest, "cron": settings.backup_cron, "keep": settings.backup_keep}
    return {"backup": health(session), "schedule": schedule, "rebuilds": builds(session)}
