"""The assistant's tools over mewdex's own services: the handlers of :mod:`mewdex.assistant.catalogue`,
which the MCP server and the chat model (:mod:`mewdex.assistant.agent`) are built from.

Every tool takes ``sessions`` and the caller's :class:`ScopeContext` (never from the arguments), so a
tool only ever sees the caller's memes and collections. Errors are ``AssistantError`` /
``DomainError`` codes: ``not_found``, ``invalid_request``, ``image_corrupt`` … (a tool's caller
reports them as a tool error).
"""

from __future__ import annotations

import base64
import binascii
from typing import Any
from uuid import UUID

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from mewdex.assistant import query as chat_query
from mewdex.assistant import shared_collections
from mewdex.assistant.errors import AssistantError
from mewdex.assistant.pool import pooled
from mewdex.config import get_settings
from mewdex.db.models import Meme, MemeCollection, MemeCollectionItem, ScopeContext
from mewdex.dto.search import SearchFilters
from mewdex.library import collections as library_collections
from mewdex.library import memes as library_memes
from mewdex.library import sharing
from mewdex.library import thumbnails as thumbs
from mewdex.library.scopes import storage_namespace
from mewdex.search import image_search
from mewdex.search import service as search_service
from mewdex.storage import blob_store

MAX_RESULTS = 20
DEFAULT_RESULTS = 8  # n when the caller gives none (the catalogue's arguments models use it too)
MAX_ADD_IDS = 100  # add_to_collection: ids per call
MAX_IMAGE_BYTES = 1024 * 1024  # get_meme's image: the still thumbnail, or the original when it is small


def _n(n: Any) -> int:
    try:
        n = int(n)
    except (TypeError, ValueError):
        raise AssistantError("invalid_request", "n must be an integer") from None
    if not 1 <= n <= MAX_RESULTS:
        raise AssistantError("invalid_request", f"n must be between 1 and {MAX_RESULTS}")
    return n


def _filters(session: Session, scope: ScopeContext, animated: bool | None, collection: str | None) -> SearchFilters:
    collection_ids = None
    if collection:
        collection_ids = [str(library_collections.find_by_name_or_id(session, scope, collection).id)]
    return pooled(SearchFilters(animated=animated, collection_ids=collection_ids)) or SearchFilters()


def _hits(results) -> list[dict[str, Any]]:
    return [
        {"id": h.id, "display_name": h.display_name, "media_url": h.media_url, "score": h.score, "snippet": h.snippet}
        | ({"confidence": h.confidence} if h.confidence is not None else {})
        for h in results
    ]


def search_memes(
    sessions: sessionmaker[Session],
    scope: ScopeContext,
    query: str,
    n: int = DEFAULT_RESULTS,
    animated: bool | None = None,
    collection: str | None = None,
) -> list[dict[str, Any]]:
    """The ``n`` (1–20) best memes for ``query`` (chat phrasing stripped), optionally only animated
    ones or one collection's (name or id), beside the caller's own library also the collections shared
    with it that it chose for its chats (:mod:`.shared_collections`; their ``media_url`` is the member route):
    ``[{"id", "display_name", "media_url", "score", "snippet", "confidence"}]`` (``confidence``: high |
    medium | low, :mod:`mewdex.search.confidence`). The search page's ranking: what a person passed
    over with "another" in a chat hides nothing here."""
    n = _n(n)
    text = chat_query.strip_chat_phrasing((query or "").strip())[: search_service.MAX_QUERY_CHARS]
    if not text:
        raise AssistantError("invalid_request", "the query is empty")
    with sessions.begin() as session:
        filters = _filters(session, scope, animated, collection)
    with sessions.begin() as session:
        own = search_service.search(session, scope, text, n, filters=filters).results
    return _hits(shared_collections.search(sessions, scope, text, n, own, filters))  # and the shared collections chosen


def search_by_image(
    sessions: sessionmaker[Session], scope: ScopeContext, image_base64: str, n: int = DEFAULT_RESULTS
) -> list[dict[str, Any]]:
    """The ``n`` memes that look most like the image (base64, ≤ ``MEWDEX_MAX_UPLOAD_BYTES``); the
    score is the cosine similarity. Errors: ``invalid_request`` (not base64), the image's codes."""
    n = _n(n)
    try:
        data = base64.b64decode(image_base64 or "", validate=True)
    except (binascii.Error, ValueError):
        raise AssistantError("invalid_request", "image_base64 is not base64") from None
    settings = get_settings()
    if not data:
        raise AssistantError("image_corrupt", "the image is empty")
    if len(data) > settings.max_upload_bytes:
        raise AssistantError("upload_too_large", "the image is too large")
    with sessions.begin() as session:
        return _hits(image_search.search_by_image(session, scope, data, n, max_pixels=settings.max_pixels).results)


def more_like_this(
    sessions: sessionmaker[Session], scope: ScopeContext, meme_id: str, n: int = DEFAULT_RESULTS
) -> list[dict[str, Any]]:
    """The ``n`` memes that look most like the caller's meme ``meme_id`` (itself excluded; score =
    cosine similarity of the image embeddings). Errors: ``not_found``, ``meme_not_embedded`` (its
    visual stage has not run yet)."""
    n = _n(n)
    with sessions.begin() as session:
        meme = _meme(session, scope, meme_id)
        try:
            return _hits(image_search.similar(session, scope, meme.id, n).results)
        except image_search.MemeNotEmbedded:
            raise AssistantError("meme_not_embedded", "this meme has no image embedding yet") from None


def _meme(session: Session, scope: ScopeContext, meme_id: Any) -> Meme:
    meme = library_memes.find(session, scope, meme_id)
    if meme is None:
        raise AssistantError("not_found", "no such meme")
    return meme


def get_meme(
    sessions: sessionmaker[Session], scope: ScopeContext, meme_id: str
) -> tuple[dict[str, Any], bytes | None, str]:
    """The meme's facts and context (``{"id", "display_name", "media_url", "extension", "animated",
    "context", "collections"}``), a picture of it (the still thumbnail, else the original when ≤ 1 MiB;
    None when neither is at hand) and that picture's format (``webp``, ``png`` …). A meme of a shared
    collection the caller chose for its chats (:mod:`.shared_collections`) is read from its owner's
    store, with the member route as ``media_url`` and that collection as its only one. Errors:
    ``not_found``."""
    with sessions.begin() as session:
        meme = library_memes.find(session, scope, meme_id)
        if meme is not None:
            holder, media_url = scope, f"/media/{meme.id}"
            names = [
                c.name
                for c in session.execute(
                    select(MemeCollection)
                    .join(MemeCollectionItem, MemeCollectionItem.collection_id == MemeCollection.id)
                    .where(MemeCollectionItem.meme_id == meme.id, MemeCollection.scope_id == scope.scope_id)
                ).scalars()
            ]
        else:
            shared = sharing.chosen_meme(session, scope.scope_id, _uuid(meme_id))
            if shared is None:
                raise AssistantError("not_found", "no such meme")
            meme, granted = shared
            holder, names = granted.owner, [granted.collection.name]
            media_url = sharing.member_media_path(granted.collection.id, meme.id)
        context = meme.meme_context or {}
        facts = {
            "id": str(meme.id),
            "display_name": meme.display_name,
            "media_url": media_url,
            "extension": meme.extension,
            "animated": bool((meme.extensions or {}).get("image", {}).get("animated")),
            "context": {
                k: context.get(k)
                for k in ("title", "ocr_text", "description", "emotions", "tags", "usage", "labels")
                if context.get(k)
            },
            "collections": names,
        }
        namespace = storage_namespace(session, holder.scope_id)
        store = blob_store()
        row = thumbs.current_thumbnail(session, meme, thumbs.STILL_PROFILE)
        if row is not None and row.output_key:
            try:
                return facts, store.read_bytes(thumbs.thumbnail_namespace(namespace), row.output_key), "webp"
            except FileNotFoundError:
                pass
        if meme.size_bytes <= MAX_IMAGE_BYTES:
            try:
                data = store.read_bytes(namespace, meme.storage_key)
            except FileNotFoundError:
                return facts, None, ""
            return facts, data, meme.extension.lstrip(".").replace("jpg", "jpeg")
        return facts, None, ""


def _uuid(value: Any) -> UUID:
    try:
        return value if isinstance(value, UUID) else UUID(str(value))
    except ValueError:
        raise AssistantError("not_found", "no such meme") from None


def list_collections(sessions: sessionmaker[Session], scope: ScopeContext) -> list[dict[str, Any]]:
    """The caller's collections: ``[{"id", "name", "count"}]`` by name."""
    with sessions.begin() as session:
        return [
            {"id": str(c.id), "name": c.name, "count": n}
            for c, n in library_collections.list_collections(session, scope)
        ]


def add_to_collection(
    sessions: sessionmaker[Session], scope: ScopeContext, collection: str, meme_ids: list[str]
) -> dict[str, Any]:
    """Add memes (1–``MAX_ADD_IDS`` ids) to a collection (name or id; created when the name is new):
    ``{"collection_id", "name", "added"}``. Errors: ``not_found`` (a meme not the caller's)."""
    if not meme_ids or len(meme_ids) > MAX_ADD_IDS:
        raise AssistantError("invalid_request", f"meme_ids must hold 1–{MAX_ADD_IDS} ids")
    with sessions.begin() as session:
        ids = [_meme(session, scope, m).id for m in meme_ids]
        try:
            target = library_collections.find_by_name_or_id(session, scope, collection)
        except library_collections.CollectionError:
            target = library_collections.get_or_create(session, scope, collection)
        added = library_collections.add_items(session, scope, target.id, ids)
        return {"collection_id": str(target.id), "name": target.name, "added": added}


def create_collection(sessions: sessionmaker[Session], scope: ScopeContext, name: str) -> dict[str, Any]:
    """A new empty collection: ``{"collection_id", "name"}``. Errors: ``collection_name_taken``,
    ``collection_name_invalid``."""
    with sessions.begin() as session:
        created = library_collections.create(session, scope, name)
        return {"collection_id": str(created.id), "name": created.name}


def make_meme(
    sessions: sessionmaker[Session],
    scope: ScopeContext,
    caption: str,
    template: str | None = None,
    description: str | None = None,
) -> tuple[dict[str, Any], bytes | None, str]:
    """Make a meme (issue 44): the meme ``template`` (an id), else the best search hit for
    ``description`` ("熊猫头", "panda head"), re-captioned with ``caption`` into a new meme of the
    library (:func:`mewdex.pipeline.recaption.recaption`). Returns ``({"id", "display_name",
    "media_url", "template_id", "status"}, image, format)``. Errors: ``invalid_request`` (neither a
    template nor a description), ``not_found`` (no such meme, or the search found none), the
    re-caption's codes (``caption_empty``, ``no_text_boxes``...)."""
    from mewdex.pipeline import recaption

    if template:
        with sessions.begin() as session:
            template_id = _meme(session, scope, template).id
    elif description and description.strip():
        hits = search_memes(sessions, scope, description, 1)
        if not hits:
            raise AssistantError("not_found", f"no meme matches {description!r}")
        template_id = hits[0]["id"]
    else:
        raise AssistantError("invalid_request", "give a template meme id or a description of the picture")
    made = recaption.recaption(sessions, blob_store(), scope, template_id, caption)
    with sessions.begin() as session:
        meme = _meme(session, scope, made.meme_id)
        facts = {
            "id": str(meme.id),
            "display_name": meme.display_name,
            "media_url": f"/media/{meme.id}",
            "template_id": made.template_id,
            "status": made.status,
        }
    assert made.rendered is not None
    return facts, made.rendered.data, made.rendered.extension.lstrip(".").replace("jpg", "jpeg")
