"""Re-captioning a meme from a chat (改字 / ``/caption``, issue 44), written once for every channel
with replies.

The binding's owner replies ``改字 新文字`` (``/caption new text``) to a meme the bot sent, or to an
image message (or sends it as an image's caption): the bot sends the re-captioned image back, not
saved. ``改字 收 新文字`` (``/caption save new text``) saves it too, as a new meme naming the original
as its template, and sends that meme; a later 收 reply to a sent result saves it where the reply
carries the file (Telegram). The pixels are :mod:`mewdex.pipeline.recaption`'s (the OCR's boxes; a
text-free picture gets the caption in a band at its bottom).

Which image: the meme of the bot's message the reply names (``Inbound.reply_to`` matched against the
delivery log's ``platform_message_id``), else the file :func:`mewdex.channels.saving.refs_to_save`
finds (the message's own, the replied one's, the person's last in the chat).

An unsaved result goes through the delivery path (log, pacing, retries) as a delivery of kind
``meme`` whose task payload carries the recipe (``remake``: ``{"caption", "meme_id"|"ref",
"channel"}``); the delivery task (and OneBot's relay) remakes the image from it
(:func:`mewdex.channels.media.remade`), so nothing is stored. A guest's 改字 does nothing (the chat
is told once a day, as for 收).
"""

from __future__ import annotations

import logging
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from mewdex.channels import bindings, delivery, pool, saving
from mewdex.channels.base import Adapter, DeliveryFailed, Inbound
from mewdex.channels.media import render_recipe
from mewdex.channels.platform import PlatformError
from mewdex.db.models import ChannelBinding, ChannelDelivery
from mewdex.dto.errors import DomainError
from mewdex.dto.i18n import error_text, translate
from mewdex.egress import EgressError
from mewdex.library.recaption import clean_text

log = logging.getLogger(__name__)
#: The words that start a re-caption (then, optionally, a save word, then the caption).
CAPTION_WORDS = ("改字", "/caption", "#caption")
SAVE_FIRST = frozenset({"收", "存", "save"})


def parse(text_: str) -> tuple[str, bool] | None:
    """``(caption, save)`` of a re-caption command (``改字 [收] 文字``, ``/caption [save] text``); the
    caption may be empty (the chat is told how); None for any other text."""
    stripped = text_.strip()
    for word in CAPTION_WORDS:
        if not stripped.lower().startswith(word):
            continue
        rest = stripped[len(word) :]
        if word.startswith(("/", "#")) and rest and not rest[0].isspace():
            continue  # /captions, #captioned: not the command
        first, _, after = rest.strip().partition(" ")
        if first.lower() in SAVE_FIRST:
            return after.strip(), True
        return rest.strip(), False
    return None


def source_of(session: Session, row: ChannelBinding, inbound: Inbound) -> tuple[str | None, str | None]:
    """``(meme_id, ref)``: the library meme of the bot's message ``inbound`` replies to, else the
    platform reference of the file it means (:func:`.saving.refs_to_save`); ``(None, None)``."""
    if inbound.reply_to:
        ids = {inbound.reply_to, inbound.reply_to.rpartition(":")[2]}  # OneBot's are "<bot>:<message id>"
        found = session.execute(
            select(ChannelDelivery.meme_id)
            .where(
                ChannelDelivery.scope_id == row.scope_id,
                ChannelDelivery.channel == row.channel,
                ChannelDelivery.target == inbound.chat,
                ChannelDelivery.platform_message_id.in_(ids),
                ChannelDelivery.meme_id.is_not(None),
            )
            .order_by(ChannelDelivery.created_at.desc())
            .limit(1)
        ).scalar_one_or_none()
        if found is not None:
            return str(found), None
    refs = saving.refs_to_save(row, inbound)
    return None, (refs[0] if refs else None)


def handle(
    session: Session, row: ChannelBinding, inbound: Inbound, lang: str, caption: str, save: bool
) -> dict[str, Any]:
    """Answer the owner's re-caption command in the caller's transaction: queue the unsaved result
    (``{"outcome": "captioned"}``), or hand a save back to the caller (``{"outcome": "caption_save",
    "recipe"}``: :func:`save_and_send` runs it outside the transaction); tell the chat when there is
    no caption or no image (``caption_usage``, ``nothing_to_caption``)."""
    if not caption:
        delivery.reply_text(session, row, inbound.channel, inbound.chat, translate(lang, "bot.caption.usage"))
        return {"outcome": "caption_usage"}
    try:
        clean_text(caption)  # an over-long caption is told now, not at the send
    except DomainError as exc:
        words = translate(
            lang, "bot.caption.failed", reason=error_text(lang, {"code": exc.code, "message": exc.message})
        )
        delivery.reply_text(session, row, inbound.channel, inbound.chat, words)
        return {"outcome": "caption_failed"}
    meme_id, ref = source_of(session, row, inbound)
    if meme_id is None and ref is None:
        delivery.reply_text(session, row, inbound.channel, inbound.chat, translate(lang, "bot.caption.nothing"))
        return {"outcome": "nothing_to_caption"}
    recipe = {"caption": caption, "meme_id": meme_id, "ref": ref, "channel": inbound.channel}
    if save:
        return {"outcome": "caption_save", "recipe": recipe}
    delivery.reply_remade(session, row, inbound.chat, recipe)
    return {"outcome": "captioned", "meme_id": meme_id}


def save_and_send(
    sessions: sessionmaker[Session], channel: Adapter, scope_id: str, inbound: Inbound, recipe: dict, lang: str
) -> dict[str, Any]:
    """Re-caption and save (a new meme of the scope, through the upload path), then send that meme
    with the save's words; or tell the chat why not. ``{"outcome": "caption_saved"|"caption_failed"}``."""
    made, reason = None, None
    try:
        made = render_recipe(scope_id, recipe, save=True, provenance={"channel": inbound.channel})
    except DomainError as exc:
        reason = error_text(lang, {"code": exc.code, "message": exc.message}) or exc.message
    except (EgressError, PlatformError, DeliveryFailed) as exc:
        log.warning("%s: a file to re-caption could not be fetched (%s)", inbound.channel, getattr(exc, "code", exc))
        reason = translate(lang, "bot.save.unreadable")
    with sessions.begin() as session:
        row = bindings.get(session, scope_id, inbound.channel)
        if row is None or not bindings.in_force(session, row):
            return {"outcome": "unbound"}
        if made is None or made.meme_id is None:
            words = translate(lang, "bot.caption.failed", reason=reason or "")
            delivery.reply_text(session, row, inbound.channel, inbound.chat, words)
            return {"outcome": "caption_failed"}
        words = translate(lang, "bot.save.saved", seconds=str(saving.searchable_in(session, scope_id)))
        delivery.reply_meme(session, row, inbound.chat, made.meme_id, words, None)
        pool.add_saved(session, row, made.meme_id)
        return {"outcome": "caption_saved", "meme_id": made.meme_id}
