"""The trash (issue 43): ``GET /api/v1/trash`` lists it, ``POST /api/v1/trash/{id}/restore`` brings a
meme back, ``DELETE /api/v1/trash/{id}`` purges one and ``DELETE /api/v1/trash`` empties it (each purge
a journaled permanent delete). ``DELETE /api/v1/memes/{id}`` puts a meme there. Service:
:mod:`mewdex.library.trash`."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Query
from fastapi.responses import JSONResponse, Response
from sqlalchemy.orm import Session

from mewdex.config import get_settings
from mewdex.db.engine import get_sessionmaker
from mewdex.dto.memes import Meme as MemeDto
from mewdex.dto.memes import TrashEmptied, TrashItem, TrashPage
from mewdex.dto.scopes import ScopeContext
from mewdex.library import trash
from mewdex.library.listing import meme_brief
from mewdex.storage import blob_store
from mewdex.web.deps import current_scope, db_session, parse_id
from mewdex.web.routers.memes import get_meme, meme_dict

router = APIRouter(tags=["trash"])


def trash_page(session: Session, scope: ScopeContext, *, limit: int = 50, cursor: str | None = None) -> TrashPage:
    """A page of the trash as :class:`~mewdex.dto.memes.TrashPage` (the API and the trash page)."""
    page = trash.list_trash(session, scope, limit=limit, cursor=cursor)
    return TrashPage(
        items=[
            TrashItem(
                **meme_brief(m).model_dump(),
                deleted_at=m.deleted_at.isoformat() if m.deleted_at else "",
                purge_at=trash.purge_time(m).isoformat(),
            )
            for m in page.memes
        ],
        next_cursor=page.next_cursor,
        total=page.total,
        total_bytes=page.total_bytes,
        trash_days=get_settings().trash_days,
    )


@router.get("/api/v1/trash", response_model=TrashPage)
def list_trash(
    limit: int = Query(50, ge=1, le=200),
    cursor: str | None = Query(None, description="``next_cursor`` of the previous page"),
    session: Session = Depends(db_session),
    scope: ScopeContext = Depends(current_scope),
):
    """The memes in the trash, most recently trashed first: ``{"items": [{…meme, "deleted_at", "purge_at"}],
    "next_cursor", "total", "total_bytes", "trash_days"}``. They count toward the quota until purged.
    422 ``invalid_cursor``."""
    return trash_page(session, scope, limit=limit, cursor=cursor)


@router.post("/api/v1/trash/{meme_id}/restore", response_model=MemeDto)
def restore_from_trash(meme_id: str, scope: ScopeContext = Depends(current_scope)):
    """Bring the meme back as it was (collections, tags, learning, search); returns the meme. 404
    ``not_found`` (not in the trash)."""
    revision = trash.restore(get_sessionmaker(), scope, parse_id(meme_id))
    with get_sessionmaker().begin() as session:
        return JSONResponse(meme_dict(session, get_meme(session, scope, meme_id)), headers={"ETag": f'"{revision}"'})


@router.delete("/api/v1/trash/{meme_id}", status_code=204)
def purge_from_trash(meme_id: str, scope: ScopeContext = Depends(current_scope)):
    """Delete the meme in the trash for good: its rows, then its files (unless another meme uses them),
    through the storage journal. 204; 404 ``not_found`` (not in the trash)."""
    trash.purge(get_sessionmaker(), blob_store(), scope, parse_id(meme_id))
    return Response(status_code=204)


@router.delete("/api/v1/trash", response_model=TrashEmptied)
def empty_trash(scope: ScopeContext = Depends(current_scope)):
    """Empty the trash: every meme in it deleted for good (as ``DELETE /api/v1/trash/{id}``);
    ``{"purged": n}``."""
    return TrashEmptied(purged=trash.empty(get_sessionmaker(), blob_store(), scope))
