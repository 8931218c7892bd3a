"""``/``: the search page (a minimal one; the full web UI grows on it)."""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter, Request
from fastapi.templating import Jinja2Templates

router = APIRouter(include_in_schema=False)
templates = Jinja2Templates(directory=Path(__file__).parent.parent / "templates")


@router.get("/")
def index(request: Request):
    return templates.TemplateResponse(request, "index.html", {})
