"""A chat's pool (issue 43 item 7) in Telegram, against the fake Bot API: a binding limited to one
collection (``PUT /api/v1/channels/{channel}/pool`` or ``/pool NAME`` in the chat) answers only with
that collection's memes, and the owner's 收 there adds the saved meme to it too."""

from __future__ import annotations

import hashlib
import uuid

import pytest

from channel_helpers import bind_telegram, image_bytes, new_user_id, saved_memes
from conftest import client_for, drain_queue
from mewdex.db.models import ScopeContext

pytestmark = pytest.mark.usefixtures("quick_pacing")

SYSTEM = ScopeContext("__system__")


def run(sessions, account) -> None:
    from mewdex.channels.telegram import inbound as tg

    tg.poll_once(sessions, timeout=0)
    drain_queue(sessions, account.scope, SYSTEM, timeout=60)


def collection(sessions, account, name: str, *members: str) -> str:
    from mewdex.library import collections

    with sessions.begin() as session:
        made = collections.get_or_create(session, account.scope, name)
        collections.add_items(session, account.scope, made.id, [uuid.UUID(account.memes[m]) for m in members])
        return str(made.id)


def members(sessions, account, collection_id: str) -> set[str]:
    from sqlalchemy import select

    from mewdex.db.models import Meme, MemeCollectionItem

    with sessions.begin() as session:
        rows = session.execute(
            select(Meme.sha256)
            .join(MemeCollectionItem, MemeCollectionItem.meme_id == Meme.id)
            .where(MemeCollectionItem.collection_id == uuid.UUID(collection_id))
        )
        return set(rows.scalars())


def sent_shas(telegram, uid, start: int) -> list[str]:
    media = [m for m in telegram.sent_to(uid)[start:] if m["method"] in ("sendPhoto", "sendAnimation")]
    return [hashlib.sha256(telegram.files[m["file_id"]]).hexdigest() for m in media]


def test_a_pool_answers_only_from_its_collection_and_keeps_what_is_saved(sessions, account, telegram):
    uid = new_user_id()
    bind_telegram(sessions, account, uid)
    everything = saved_memes(sessions, account)  # sha -> name
    pool_id = collection(sessions, account, "clean pool", "cat two")
    cat_two = next(sha for sha, name in everything.items() if name == "cat two")

    start = len(telegram.sent_to(uid))
    telegram.user_message(uid, "cat")
    run(sessions, account)
    assert len(set(sent_shas(telegram, uid, start))) == 3, "without a pool: all three cats"

    with client_for(account.scope) as client:
        put = client.put("/api/v1/channels/telegram/pool", json={"collection_id": pool_id})
        assert put.status_code == 200 and put.json()["config"]["pool"] == pool_id, put.text
        missing = client.put("/api/v1/channels/telegram/pool", json={"collection_id": str(uuid.uuid4())})
        assert missing.status_code == 404 and missing.json()["error"]["code"] == "not_found"
        assert client.put("/api/v1/channels/discord/pool", json={"collection_id": None}).status_code == 404

    start = len(telegram.sent_to(uid))
    telegram.user_message(uid, "cat")
    run(sessions, account)
    assert sent_shas(telegram, uid, start) == [cat_two], "only the pool's cat"

    data = image_bytes("png", seed=4501)
    telegram.user_message(uid, "收", photo=data)
    run(sessions, account)
    assert hashlib.sha256(data).hexdigest() in members(sessions, account, pool_id), "收 adds to the pool"

    telegram.user_message(uid, "/pool off")
    run(sessions, account)
    assert "whole library" in telegram.sent_to(uid)[-1]["text"]
    telegram.user_message(uid, "/pool clean pool")  # set again in the chat, by its name
    run(sessions, account)
    assert "clean pool" in telegram.sent_to(uid)[-1]["text"]
    with client_for(account.scope) as client:
        [binding] = [b for b in client.get("/api/v1/channels").json()["bindings"] if b["channel"] == "telegram"]
    assert binding["config"]["pool"] == pool_id
