"""The meme page, ``/memes/{id}``, and its detail fragment (``?fragment=1``, the search page's panel):
the meme's facts, stages with their tasks, context, similar memes, duplicates and variants, its
collections.

Reads: :func:`mewdex.library.memes.find`, the meme shape of :mod:`mewdex.web.routers.memes`,
:func:`mewdex.search.image_search.similar`, :mod:`mewdex.library.listing` and :mod:`mewdex.library.collections`.
"""

from __future__ import annotations

from typing import Any
from uuid import UUID

from fastapi import APIRouter, Depends, Request
from sqlalchemy.orm import Session

from mewdex.dto.memes import MAX_TEXT_CHARS
from mewdex.dto.scopes import ScopeContext
from mewdex.inference import visual_model
from mewdex.library import collections, listing, memes
from mewdex.library.recaption import MAX_TEXT_CHARS as MAX_CAPTION_CHARS
from mewdex.pipeline.jobs import STAGES
from mewdex.search import image_search, tags
from mewdex.web import i18n
from mewdex.web.deps import current_scope, db_session
from mewdex.web.routers.memes import meme_dict
from mewdex.web.templating import not_found, render

router = APIRouter(include_in_schema=False)
SIMILAR_RESULTS = 12


def meme_detail(
    meme_id: str,
    request: Request,
    session: Session = Depends(db_session),
    scope: ScopeContext = Depends(current_scope),
) -> dict[str, Any] | None:
    """What the page and the fragment show of the meme; None when the scope has no such meme."""
    meme = memes.find(session, scope, meme_id)
    if meme is None:
        return None
    data = meme_dict(session, meme)
    try:
        similar = image_search.similar(session, scope, meme.id, SIMILAR_RESULTS)
        ids = [UUID(r.id) for r in similar.results]
        found = listing.memes_by_id(session, scope, ids)
        similar_cards = listing.cards(session, scope, [found[i] for i in ids if i in found])
    except image_search.MemeNotEmbedded:
        similar_cards = None
    stages = [
        {"stage": s, **data["stages"][s], "task_id": None}
        for s in STAGES
        if s in data["stages"] and data["stages"][s]["planned"]
    ]
    task_ids = listing.stage_statuses(session, scope, [meme.id]).get(meme.id, {})
    for stage in stages:
        stage["task_id"] = task_ids.get(stage["stage"], {}).get("task_id")
    context = meme.meme_context or {}
    # a re-captioned meme or a template copy: the meme it was made from, while it is in the library
    template = memes.find(session, scope, data["template_id"]) if data.get("template_id") else None
    visual_labels = ((meme.extensions or {}).get("visual") or {}).get("labels") or []
    return {
        "meme": data,
        "stages": stages,
        "ocr_text": context.get("ocr_text") or "",
        "max_text_chars": MAX_TEXT_CHARS,
        "max_caption_chars": MAX_CAPTION_CHARS,
        "context": context,
        # "Looks like" in the page's language only (the context keeps both for search)
        "labels_by_lang": {lang: visual_model.labels_in(visual_labels, lang) for lang in ("en", "zh")},
        "similar": similar_cards,
        "duplicates": [d for d in data["near_duplicates"] if d["kind"] == "duplicate"],
        "variants": [d for d in data["near_duplicates"] if d["kind"] == "variant"],
        "in_collections": collections.of_meme(session, scope, meme.id),
        "template": template,
        "collections": collections.overview(session, scope),
        "tag_suggestions": tags.suggestions(session, scope, meme, i18n.request_locale(request)),
    }


@router.get("/memes/{meme_id}")
def meme_page(request: Request, fragment: bool = False, detail: dict[str, Any] | None = Depends(meme_detail)):
    if detail is None:
        return not_found(request)
    if fragment:
        return render(request, "partials/meme_detail.html", detail)
    return render(request, "meme.html", {"page": "meme", **detail})
