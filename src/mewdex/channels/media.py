"""A meme's file as the channels send it: :func:`meme_file`, the one way every path (a delivery,
Telegram inline, a Discord answer, the OneBot relay) loads a meme's bytes; :func:`remade`, an unsaved
re-captioned image made again from its recipe (:mod:`mewdex.channels.captioning`)."""

from __future__ import annotations

import hashlib
from typing import Any
from uuid import UUID

from sqlalchemy.orm import Session

from mewdex.channels.base import MemeFile
from mewdex.db.models import ScopeContext
from mewdex.db.scopes import storage_namespace
from mewdex.library import sharing


def meme_file(session: Session, scope_id: str, meme_id: Any, *, data: bool = True) -> MemeFile | None:
    """The live meme ``meme_id`` that the account of ``scope_id`` may send as a :class:`MemeFile`
    (its blob read from the store; ``data=False``: without the bytes, ``data`` empty): its own, or one
    of a shared collection it chose for its chat answers (:func:`mewdex.library.sharing.sendable_meme`,
    read from the owner's store). None when it may send no such meme (also once that choice ended)."""
    from mewdex.storage import blob_store

    try:
        found = sharing.sendable_meme(session, scope_id, UUID(str(meme_id)))
    except ValueError:
        return None
    if found is None:
        return None
    meme, holder = found
    content = b""
    if data:
        with blob_store().open(storage_namespace(session, holder.scope_id), meme.storage_key) as handle:
            content = handle.read()
    return MemeFile(str(meme.id), content, meme.extension.lower(), meme.sha256, meme.display_name)


def render_recipe(scope_id: str, recipe: dict[str, Any], *, save: bool, provenance: dict[str, Any] | None = None):
    """Re-caption what ``recipe`` names (``{"caption", "meme_id"}``: a meme of ``scope_id``, or
    ``{"caption", "ref", "channel"}``: a chat's file fetched through its adapter) with
    :mod:`mewdex.pipeline.recaption` (every frame; ``save``: a new meme of the scope); a picture
    without text boxes gets the caption in a band at its bottom. Returns its ``Recaptioned``. Raises
    ``DomainError`` (the re-caption, image and upload codes) and the fetch's errors
    (``DeliveryFailed``, ``PlatformError``, ``EgressError``)."""
    from mewdex.channels.registry import adapter
    from mewdex.db.engine import get_sessionmaker
    from mewdex.pipeline import recaption as service
    from mewdex.storage import blob_store

    sessions, store, scope = get_sessionmaker(), blob_store(), ScopeContext(scope_id)
    caption = str(recipe["caption"])
    data = None if recipe.get("meme_id") else adapter(str(recipe["channel"])).fetch_image(str(recipe["ref"]))

    def once(place: str | None):
        if data is None:
            return service.recaption(
                sessions, store, scope, recipe["meme_id"], caption, save=save, all_frames=True, place=place
            )
        return service.recaption_image(
            sessions, store, scope, data, caption, save=save, place=place, provenance=provenance
        )

    try:
        return once(None)
    except service.RecaptionError as exc:
        if exc.code != "no_text_boxes":
            raise
        return once("bottom")


def remade(scope_id: str, recipe: dict[str, Any]) -> MemeFile:
    """The unsaved re-captioned image of ``recipe`` (:func:`render_recipe`) as a :class:`MemeFile`
    that carries the recipe (``remake``): what the delivery task and OneBot's relay send. Raises as
    :func:`render_recipe`."""
    rendered = render_recipe(scope_id, recipe, save=False).rendered
    sha = hashlib.sha256(rendered.data).hexdigest()
    name = str(recipe["caption"])[:80]
    return MemeFile(str(recipe.get("meme_id") or ""), rendered.data, rendered.extension, sha, name, dict(recipe))
