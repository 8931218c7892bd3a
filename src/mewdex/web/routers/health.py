"""``GET /health``: liveness and database reachability."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import JSONResponse
from sqlalchemy import text

from mewdex.db.engine import get_engine

router = APIRouter(tags=["health"])


@router.get("/health")
def health():
    try:
        with get_engine().connect() as connection:
            connection.execute(text("SELECT 1"))
    except Exception as exc:
        return JSONResponse({"status": "unavailable", "database": str(exc)[:200]}, status_code=503)
    return {"status": "ok", "database": "ok"}
