"""Saving a meme from a chat (收 / 存 / save / ``/save``), written once for every channel.

The binding's owner saves the file of a message: the one that carries the word as its caption
(``Inbound.media``), the one it replies to (``Inbound.reply_media``, or the message ``reply_to``
names, looked up in the chat's memory below), else the last file the same person sent in that chat
within :data:`RECENT_SECONDS` (WeCom and ClawBot, whose replies carry no media). The file is fetched
through the adapter (:meth:`~mewdex.channels.base.Adapter.fetch_image`: the platform's API, under the
egress rules) and enters through the upload path (:func:`mewdex.library.memes.add_image`: quota,
duplicates, processing). The chat is told, in its language: saved (searchable in about N s), saved
and a variant of an existing meme (with its name: :func:`variant_of`, the new file's perceptual hash
against the library's at once; the processing's ``visual`` stage records the pair later), already
there (the same bytes, with its name), or why not.

Only the owner's own messages save: a guest's 收 saves nothing, and the chat is told why once a day
per guest. A binding whose config has :data:`SAVE_ALL_KEY` saves every file its owner sends without
a word (``/autosave on`` / ``自动收 开`` in the chat, or ``PUT /api/v1/channels/{channel}/save-all``:
:func:`save_all`).

The chat's memory (``config["recent_media"]``, a dict so that the API view leaves it out): the last
:data:`RECENT_KEEP` messages with files of the binding's chats, ``{"chat", "person", "mid", "refs",
"at"}``; it is what a reply (OneBot's reply segment), the "last media" rule and a Save button find.
"""

from __future__ import annotations

import logging
import time
from typing import Any
from uuid import UUID

from sqlalchemy import func, select, text
from sqlalchemy.orm import Session, sessionmaker

from mewdex.channels import bindings, delivery, pool
from mewdex.channels.base import Adapter, Button, DeliveryFailed, Inbound
from mewdex.channels.platform import PlatformError
from mewdex.db.models import ChannelBinding, ScopeContext, Task
from mewdex.dto.errors import DomainError
from mewdex.dto.i18n import translate
from mewdex.egress import EgressError
from mewdex.library import memes

log = logging.getLogger(__name__)
#: The words that save (the whole message, any case, trailing punctuation ignored).
SAVE_WORDS = frozenset({"收", "存", "save", "/save", "#save"})
#: How old the "last media" of a person may be for a bare 收 to take it.
RECENT_SECONDS = 600
#: How many messages with files the chat's memory keeps per binding.
RECENT_KEEP = 30
RECENT_KEY = "recent_media"
SAVE_ALL_KEY = "save_all"
#: The prefix of a Save button's action: ``save:<message id>``.
SAVE_ACTION = "save:"
#: How often a guest who asks to save is told why not (seconds, per guest and chat).
REFUSAL_EVERY = 86400
_AUTOSAVE = {"/autosave on": True, "/autosave off": False, "自动收 开": True, "自动收 关": False}


def _folded(text_: str) -> str:
    return " ".join(text_.strip().lower().rstrip(".!！。").split())


def is_save(text_: str) -> bool:
    """Whether a message's text asks to save (:data:`SAVE_WORDS`)."""
    return _folded(text_) in SAVE_WORDS


def autosave_command(text_: str) -> bool | None:
    """``/autosave on|off`` (``自动收 开|关``): True/False; None for any other text."""
    return _AUTOSAVE.get(_folded(text_))


def saves_all(row: ChannelBinding) -> bool:
    """Whether the binding saves every file its owner sends (:data:`SAVE_ALL_KEY`)."""
    return bool((row.config or {}).get(SAVE_ALL_KEY))


def set_save_all(session: Session, row: ChannelBinding, on: bool) -> None:
    """Turn "save every file the owner sends" on or off for the binding (the caller holds the row)."""
    bindings.update_config(session, row, {SAVE_ALL_KEY: bool(on)})


def save_all(session: Session, scope_id: str, channel: str, on: bool) -> ChannelBinding:
    """The API's switch of :data:`SAVE_ALL_KEY` on the scope's confirmed binding of ``channel``;
    ``channel_not_bound`` (404) without one. Returns the binding."""
    row = bindings.active(session, scope_id, channel, lock=True)
    set_save_all(session, row, on)
    return row


def save_button(lang: str, inbound: Inbound) -> tuple[Button, ...]:
    """The Save button under the answer to an image alone (its action names the message)."""
    if not inbound.message_id:
        return ()
    return (Button(translate(lang, "bot.save.button"), f"{SAVE_ACTION}{inbound.message_id}"[:64]),)


# ------------------------------------------------------------------ the chat's memory


def _entries(row: ChannelBinding) -> list[dict[str, Any]]:
    found = ((row.config or {}).get(RECENT_KEY) or {}).get("entries") or []
    return [e for e in found if isinstance(e, dict)]


def remember(session: Session, row: ChannelBinding, inbound: Inbound) -> None:
    """Keep the files of ``inbound`` in the binding's memory (module doc); the caller holds the row."""
    if not inbound.files:
        return
    entry = {
        "chat": inbound.chat,
        "person": inbound.person,
        "mid": inbound.message_id,
        "refs": list(inbound.files),
        "at": time.time(),
    }
    kept = [*_entries(row), entry][-RECENT_KEEP:]
    bindings.update_config(session, row, {RECENT_KEY: {"entries": kept}})


def refs_to_save(row: ChannelBinding, inbound: Inbound) -> tuple[str, ...]:
    """The files a save word in ``inbound`` means: its own, the replied message's, the remembered
    message it replies to (``reply_to``) or a Save button names, else the same person's last in
    the chat within :data:`RECENT_SECONDS`; () when there is none."""
    if inbound.files:
        return inbound.files
    if inbound.reply_media:
        return inbound.reply_media
    entries = [e for e in _entries(row) if e.get("chat") == inbound.chat]
    wanted = inbound.reply_to or inbound.extra.get("button_of")
    if wanted:
        return next((tuple(e["refs"]) for e in reversed(entries) if e.get("mid") == wanted), ())
    now = time.time()
    for entry in reversed(entries):
        if entry.get("person") == inbound.person and now - float(entry.get("at") or 0) <= RECENT_SECONDS:
            return tuple(entry["refs"])
    return ()


# ------------------------------------------------------------------ answering


def refuse_once(session: Session, row: ChannelBinding, inbound: Inbound, lang: str) -> bool:
    """A guest asked to save: tell the chat why not, once per :data:`REFUSAL_EVERY` per guest and
    chat (a row of ``channel_chat_pacing``). Returns whether it was said now."""
    said = session.execute(
        text(
            """
            INSERT INTO channel_chat_pacing AS p (channel, target, next_at)
            VALUES (:c, :t, clock_timestamp() + make_interval(secs => :i))
            ON CONFLICT (channel, target) DO UPDATE SET next_at = clock_timestamp() + make_interval(secs => :i)
             WHERE p.next_at <= clock_timestamp()
            RETURNING 1
            """
        ),
        {
            "c": f"save-refused:{row.scope_id}:{row.channel}",
            "t": f"{inbound.chat}:{inbound.person}"[:200],
            "i": REFUSAL_EVERY,
        },  # fmt: skip
    ).scalar_one_or_none()
    if said is not None:
        delivery.reply_text(session, row, inbound.channel, inbound.chat, translate(lang, "bot.save.owner_only"))
    return said is not None


def searchable_in(session: Session, scope_id: str) -> int:
    """About how many seconds until a meme saved now is found by search: the scope's waiting tasks
    ahead of it, a few seconds each (at least 10)."""
    waiting = session.execute(
        select(func.count())
        .select_from(Task)
        .where(Task.scope_id == scope_id, Task.status.in_(("queued", "running", "retrying")))
    ).scalar_one()
    return int(10 + 3 * min(int(waiting), 200))


def variant_of(sessions: sessionmaker[Session], scope_id: str, meme_id: str, data: bytes) -> tuple[str, str] | None:
    """The live meme of the scope that the just-saved ``meme_id`` (file ``data``) looks like a variant
    of: the nearest by perceptual hash within the near-duplicate distance
    (:func:`mewdex.search.near_duplicates.closest_by_phash`, the hash the ``visual`` stage will store:
    :func:`mewdex.inference.visual_model.phash_of_file`). ``(meme_id, display name)``, or None (none
    close, or a file whose first frame cannot be decoded)."""
    from mewdex.config import get_settings
    from mewdex.inference.visual_model import phash_of_file
    from mewdex.library.images import ImageError
    from mewdex.search.near_duplicates import closest_by_phash

    try:
        phash = phash_of_file(data, max_pixels=get_settings().max_pixels)
    except ImageError:
        return None
    with sessions.begin() as session:
        found = closest_by_phash(session, scope_id, phash, UUID(str(meme_id)))
        meme = memes.find(session, ScopeContext(scope_id), found[0]) if found is not None else None
        return (str(meme.id), meme.display_name) if meme is not None else None


def save(
    sessions: sessionmaker[Session],
    adapter: Adapter,
    scope_id: str,
    inbound: Inbound,
    refs: tuple[str, ...],
    lang: str,
) -> dict[str, Any]:
    """Save the first of ``refs`` into ``scope_id``'s library through the upload path and answer in
    the chat. ``{"outcome": "saved"|"already_saved"|"save_failed", "meme_id"?, "variant_of"?}``
    (``variant_of``: the meme a saved one looks like a variant of, :func:`variant_of`)."""
    from mewdex.storage import blob_store

    result, variant = None, None
    try:
        data = adapter.fetch_image(refs[0])
        result = memes.add_image(
            sessions,
            blob_store(),
            ScopeContext(scope_id),
            data,
            filename="image",  # a generic name: the context title names the meme once analysed
            provenance={"source": "chat", "channel": inbound.channel, "message_id": inbound.message_id},
        )
        if result.status == "created" and result.meme_id is not None:
            variant = variant_of(sessions, scope_id, result.meme_id, data)
    except (EgressError, PlatformError, DeliveryFailed, DomainError) as exc:
        log.warning("%s: a file to save could not be fetched (%s)", inbound.channel, getattr(exc, "code", exc))
    with sessions.begin() as session:
        row = bindings.get(session, scope_id, inbound.channel)
        if row is None or not bindings.in_force(session, row):
            return {"outcome": "unbound"}
        if result is not None and result.status in ("created", "duplicate"):
            answer: dict[str, Any]
            if result.status == "duplicate":
                meme = memes.find(session, ScopeContext(scope_id), result.meme_id)
                words = translate(lang, "bot.save.already", name=meme.display_name if meme is not None else "")
                answer = {"outcome": "already_saved", "meme_id": result.meme_id}
            else:
                seconds = str(searchable_in(session, scope_id))
                if variant is None:
                    words = translate(lang, "bot.save.saved", seconds=seconds)
                else:
                    words = translate(lang, "bot.save.variant", name=variant[1], seconds=seconds)
                answer = {"outcome": "saved", "meme_id": result.meme_id, "variant_of": variant and variant[0]}
            delivery.reply_text(session, row, inbound.channel, inbound.chat, words)
            pool.add_saved(session, row, str(result.meme_id))  # a chat's pool keeps what its owner saves
            return answer
        reason = result.message if result is not None and result.message else translate(lang, "bot.save.unreadable")
        delivery.reply_text(
            session, row, inbound.channel, inbound.chat, translate(lang, "bot.save.failed", reason=reason)
        )
        return {"outcome": "save_failed", "error": result.error if result is not None else "fetch_failed"}
