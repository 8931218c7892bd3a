"""Assistant (issue 16): conversations, the message counter, the auto-title ABA guard, runs (cancel,
reaper), the retrieval-only reply and its follow-ups, the API (JSON and SSE) and scope isolation."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import uuid

import pytest
from sqlalchemy import func, select, text

from conftest import client_for, new_scope
from mewdex.assistant import chat, conversations, runs
from mewdex.db.models import Conversation, Meme, MemeCollection, MemeCollectionItem, Message
from mewdex.search import keyword

CATS = 10


def _meme(scope, name: str, **fields) -> Meme:
    sha = hashlib.sha256(f"{scope.scope_id}-{name}".encode()).hexdigest()
    values = dict(
        scope_id=scope.scope_id,
        storage_key=sha + ".png",
        display_name=name,
        name_source="uploaded",
        extension=".png",
        size_bytes=100,
        sha256=sha,
        provenance={},
        extensions={"image": {}},
    )
    values.update(fields)
    values["storage_key"] = sha + values["extension"]
    return Meme(**values)


@pytest.fixture
def library(sessions, scope):
    """The memes of :func:`add_library` in the test's scope."""
    return add_library(sessions, scope)


def add_library(sessions, scope) -> dict:
    """CATS memes matching "cat" (by rank: cat 0 best), one animated cat GIF, one "slacking" meme in
    the collection 摸鱼合集. Only the slacking meme's text is an exact-phrase field: the other
    memes are keyword hits alone, weak matches (:mod:`mewdex.search.confidence`). Returns their ids:
    ``{"cats": [...], "gif", "slack", "collection"}``."""
    with sessions.begin() as session:
        cats = [_meme(scope, f"cat {i}") for i in range(CATS)]
        gif = _meme(scope, "dancing cat", extension=".gif", extensions={"image": {"animated": True}})
        slack = _meme(scope, "slacking off at work")
        session.add_all([*cats, gif, slack])
        session.flush()
        for i, m in enumerate(cats):
            filler = " ".join(f"w{k}" for k in range(i))  # longer documents rank lower
            keyword.index_document(
                session, scope.scope_id, m.id, "h", {"name": f"cat {filler}", "ocr": "", "labels": "", "phrase": ""}
            )
        keyword.index_document(
            session,
            scope.scope_id,
            gif.id,
            "h",
            {"name": "cat dancing " + " ".join(f"z{k}" for k in range(40)), "ocr": "", "labels": "", "phrase": ""},
        )
        keyword.index_document(
            session,
            scope.scope_id,
            slack.id,
            "h",
            {"name": "slacking off at work", "ocr": "", "labels": "", "phrase": "slacking off at work"},
        )
        collection = MemeCollection(scope_id=scope.scope_id, name="摸鱼合集")
        session.add(collection)
        session.flush()
        session.add(MemeCollectionItem(scope_id=scope.scope_id, collection_id=collection.id, meme_id=cats[5].id))
        return {
            "cats": [str(m.id) for m in cats],
            "gif": str(gif.id),
            "slack": str(slack.id),
            "collection": str(collection.id),
        }


def _conversation(sessions, scope, name=None) -> str:
    with sessions.begin() as session:
        return str(conversations.create(session, scope, name=name).conversation_id)


def test_twenty_concurrent_posts_get_indexes_without_gap_or_duplicate(sessions, scope, library):
    cid = _conversation(sessions, scope)
    errors: list[BaseException] = []

    def post(i):
        try:
            chat.post(sessions, scope, cid, f"cat {i}")
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=post, args=(i,)) for i in range(20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    with sessions.begin() as session:
        idx = sorted(session.execute(select(Message.idx).where(Message.conversation_id == uuid.UUID(cid))).scalars())
        conversation = session.get(Conversation, uuid.UUID(cid))
        assert idx == list(range(40)) and conversation.next_message_idx == 40
        roles = [
            m.payload["role"]
            for m in session.execute(select(Message).where(Message.conversation_id == uuid.UUID(cid))).scalars()
        ]
        assert roles.count("user") == 20 and roles.count("assistant") == 20


def test_another_pages_through_the_same_list_and_never_repeats(sessions, scope, library):
    cid = _conversation(sessions, scope)
    first = chat.post(sessions, scope, cid, "send me a meme for cat")
    shown = [m["meme_id"] for m in first["reply"]["memes"]]
    assert shown == library["cats"][:3]  # the best three, in the search's order
    for follow_up in ("another", "换一个", "另一个"):
        reply = chat.post(sessions, scope, cid, follow_up)["reply"]
        page = [m["meme_id"] for m in reply["memes"]]
        assert page and not set(page) & set(shown), follow_up
        shown += page
    assert shown == library["cats"] + [library["gif"]]  # the whole list in its order, no repeat
    # Once the list is used up, "more" says so instead of starting over.
    end = chat.post(sessions, scope, cid, "more")["reply"]
    assert end["memes"] == [] and "every meme" in end["content"]


def test_a_guests_turns_page_their_own_list_and_teach_the_owners_search_nothing(sessions, scope, library):
    """In a shared chat a guest's "another" pages through the guests' last list, not the owner's, and
    neither a guest's "another" nor a guest's new request records feedback in the owner's library."""
    from mewdex.db.models import SearchFeedbackEvent

    def events() -> int:
        with sessions.begin() as session:
            return session.execute(
                select(func.count())
                .select_from(SearchFeedbackEvent)
                .where(SearchFeedbackEvent.scope_id == scope.scope_id)
            ).scalar_one()

    cid = _conversation(sessions, scope)
    before = events()
    owner = [m["meme_id"] for m in chat.post(sessions, scope, cid, "send me a meme for cat")["reply"]["memes"]]
    assert owner == library["cats"][:3]
    guest = chat.post(sessions, scope, cid, "slacking off at work", guest=True)["reply"]["memes"]
    assert guest[0]["meme_id"] == library["slack"]
    again = [m["meme_id"] for m in chat.post(sessions, scope, cid, "another", guest=True)["reply"]["memes"]]
    assert not set(again) & set(library["cats"]), "the guest pages through the guests' list, not the owner's"
    assert events() == before, "a guest's turns teach the owner's search nothing"
    page = [m["meme_id"] for m in chat.post(sessions, scope, cid, "another")["reply"]["memes"]]
    assert page == library["cats"][3:6], "the owner's another continues the owner's list"
    assert events() > before, "the owner's own another is feedback"


def test_filters_parsed_from_the_message(sessions, scope, library):
    cid = _conversation(sessions, scope)
    gif = chat.post(sessions, scope, cid, "来个cat的动图")["reply"]
    assert [m["meme_id"] for m in gif["memes"]] == [library["gif"]]
    in_collection = chat.post(sessions, scope, cid, "摸鱼合集里的cat")["reply"]
    assert [m["meme_id"] for m in in_collection["memes"]] == [library["cats"][5]]
    chat_phrasing = chat.post(sessions, scope, cid, "来个slacking off at work的表情")["reply"]
    assert chat_phrasing["memes"][0]["meme_id"] == library["slack"]
    assert "找到" in chat_phrasing["content"]  # answered in the user's language


def test_a_request_searches_what_it_asks_for_and_weak_matches_are_told(sessions, scope, library):
    """Issue 35, item 6: "给我一张表示无语的表情包" searches 无语 (search's own query cleaning); when no
    result is a strong match the reply says so, in the page's language, with what would help."""
    from mewdex.providers import policy

    cid = _conversation(sessions, scope)
    nothing = chat.post(sessions, scope, cid, "给我一张表示无语的表情包")["reply"]
    assert nothing["memes"] == [] and nothing["content"].startswith("没有找到“无语”的表情。")
    assert "连接器" in nothing["content"] and "视觉模型" in nothing["content"]
    with sessions.begin() as session:
        state = session.execute(
            select(Message.payload).where(Message.conversation_id == uuid.UUID(cid), Message.idx == 1)
        ).scalar_one()["mewdex"]
    assert state["query"] == "无语"
    # Words the keyword leg finds, but never together as a phrase: every result is weak.
    weak = chat.post(sessions, scope, cid, "send me a meme about work cats", lang="en")["reply"]
    assert weak["memes"] and weak["content"].startswith("I'm not sure these fit “work cats”")
    assert "Connectors" in weak["content"] and "Here are memes" not in weak["content"]
    in_zh = chat.post(sessions, scope, cid, "send me a meme about work cats", lang="zh")["reply"]
    assert in_zh["content"].startswith("不确定这些是否符合“work cats”") and "找到了" not in in_zh["content"]
    with sessions.begin() as session:  # with a vision model on, uploading such memes is what is left
        policy.update(session, scope, vision=True)
    uploaded = chat.post(sessions, scope, cid, "send me a meme about work cats", lang="en")["reply"]
    assert "Upload a few memes like this" in uploaded["content"] and "Connectors" not in uploaded["content"]
    strong = chat.post(sessions, scope, cid, "来个slacking off at work的表情", lang="en")["reply"]
    assert strong["content"].startswith("Here are memes for “slacking off at work”")
    with client_for(scope) as c:  # the page's language: its cookie (or Accept-Language), else the message's
        c.cookies.set("mewdex_lang", "zh")
        page = c.post(f"/api/v1/conversations/{cid}/messages", json={"content": "slacking off at work"}).json()
        assert page["reply"]["content"].startswith("找到了“slacking off at work”的表情")


def test_a_title_that_arrives_after_the_conversation_was_cleared_is_dropped(sessions, scope):
    cid = _conversation(sessions, scope)
    with sessions.begin() as session:
        conversation = conversations.get(session, scope, cid, lock=True)
        version = conversations.take_auto_title(conversation)
        assert version is not None
    with sessions.begin() as session:
        conversations.clear(session, scope, cid)
    with sessions.begin() as session:
        assert conversations.apply_auto_title(session, scope, cid, version, "stale title") is False
        conversation = conversations.get(session, scope, cid, lock=True)
        assert conversation.name == conversations.DEFAULT_TITLE and conversation.auto_title_pending
        fresh = conversations.take_auto_title(conversation)
    with sessions.begin() as session:
        assert conversations.apply_auto_title(session, scope, cid, fresh, "fresh title") is True
        assert conversations.get(session, scope, cid).name == "fresh title"
    # A rename also outdates a title in flight.
    with sessions.begin() as session:
        conversations.rename(session, scope, cid, "mine")
    with sessions.begin() as session:
        assert conversations.apply_auto_title(session, scope, cid, fresh, "late") is False


def test_cancel_mid_stream_ends_the_run_cancelled(sessions, scope, library, monkeypatch):
    from mewdex.config import get_settings

    monkeypatch.setenv("MEWDEX_ASSISTANT_STREAM_DELAY_MS", "150")
    get_settings.cache_clear()
    try:
        cid = _conversation(sessions, scope)
        run = chat.begin(sessions, scope, cid, "cat")
        events = []
        for name, data in chat.stream(sessions, run):
            events.append((name, data))
            if name == "delta" and len([e for e in events if e[0] == "delta"]) == 1:
                with sessions.begin() as session:
                    assert runs.cancel(session, scope, cid).run_status == "cancelling"
    finally:
        get_settings.cache_clear()
    names = [n for n, _ in events]
    assert names[-1] == "done" and events[-1][1]["run_status"] == "cancelled"
    assert "meme" not in names  # stopped before the cards
    with sessions.begin() as session:
        conversation = conversations.get(session, scope, cid)
        assert conversation.run_status == "cancelled"
        with pytest.raises(Exception) as info:
            runs.cancel(session, scope, cid)
        assert info.value.code == "run_not_active"
    # The next "another" starts at the first meme not shown.
    again = chat.post(sessions, scope, cid, "another")
    assert [m["meme_id"] for m in again["reply"]["memes"]] == library["cats"][:3]
    assert again["run_status"] == "idle"


def test_a_run_whose_owner_was_sigkilled_is_reaped_to_error(sessions, scope, mewdex_env):
    cid = _conversation(sessions, scope)
    script = textwrap.dedent(f"""
        import sys, time
        from mewdex.assistant import chat
        from mewdex.db.engine import get_sessionmaker
        from mewdex.db.models import ScopeContext
        chat.begin(get_sessionmaker(), ScopeContext({scope.scope_id!r}), {cid!r}, "cat")
        print("started", flush=True)
        time.sleep(120)
    """)
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, env=os.environ.copy())
    try:
        assert proc.stdout.readline().strip() == "started"
        with sessions.begin() as session:
            assert runs.reap(session) == 0 or conversations.get(session, scope, cid).run_status == "running"
            assert conversations.get(session, scope, cid).run_status == "running"  # alive: left alone
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)
    finally:
        if proc.poll() is None:
            proc.kill()
    with sessions.begin() as session:
        assert runs.reap(session) >= 1
        conversation = conversations.get(session, scope, cid)
        assert (conversation.run_status, conversation.run_error) == ("error", "run_owner_died")


def test_the_reaper_is_a_scheduled_task_type():
    from mewdex import runtime
    from mewdex.queue import registry
    from mewdex.runtime import maintenance

    runtime.load_plugins()
    assert registry.get("conversation_run_reaping") is not None
    assert "conversation_run_reaping" in {s.task_type for s in maintenance.schedules()}


def test_nul_characters_are_removed_at_the_orm_boundary(sessions, scope):
    cid = _conversation(sessions, scope)
    with sessions.begin() as session:
        conversation = conversations.get(session, scope, cid, lock=True)
        conversations.append_message(session, conversation, {"role": "user", "content": "a\x00b", "k\x00": ["\x00"]})
    with sessions.begin() as session:
        payload = session.execute(select(Message.payload).where(Message.conversation_id == uuid.UUID(cid))).scalar_one()
        assert payload == {"role": "user", "content": "ab", "k": [""]}


def _sse(body: str) -> list[tuple[str, dict]]:
    events = []
    for block in body.strip().split("\n\n"):
        lines = dict(line.split(": ", 1) for line in block.splitlines())
        events.append((lines["event"], json.loads(lines["data"])))
    return events


def test_api_conversation_lifecycle_json_and_sse(scope, library):
    with client_for(scope) as c:
        created = c.post("/api/v1/conversations", json={})
        assert created.status_code == 201 and created.json()["title_source"] == "auto"
        cid = created.json()["id"]
        answer = c.post(f"/api/v1/conversations/{cid}/messages", json={"content": "cat"})
        assert answer.status_code == 200, answer.text
        body = answer.json()
        assert body["user_message"]["idx"] == 0 and body["reply"]["idx"] == 1 and body["run_status"] == "idle"
        assert [m["meme_id"] for m in body["reply"]["memes"]] == library["cats"][:3]
        assert all(m["artifact_id"] for m in body["reply"]["memes"])
        streamed = c.post(
            f"/api/v1/conversations/{cid}/messages",
            json={"content": "another"},
            headers={"accept": "text/event-stream"},
        )
        assert streamed.headers["content-type"].startswith("text/event-stream")
        events = _sse(streamed.text)
        names = [n for n, _ in events]
        assert names[0] == "message" and names[-1] == "done" and "delta" in names
        assert [d["meme_id"] for n, d in events if n == "meme"] == library["cats"][3:6]
        assert c.get(f"/api/v1/conversations/{cid}").json()["name"] == "cat"  # titled by its first message
        page = c.get(f"/api/v1/conversations/{cid}/messages", params={"limit": 2}).json()
        assert [m["idx"] for m in page["items"]] == [2, 3] and page["next_cursor"]
        older = c.get(f"/api/v1/conversations/{cid}/messages", params={"cursor": page["next_cursor"]}).json()
        assert [m["idx"] for m in older["items"]] == [0, 1] and older["next_cursor"] is None
        bad = c.get(f"/api/v1/conversations/{cid}/messages", params={"cursor": "2"})
        assert bad.status_code == 422 and bad.json()["error"]["code"] == "invalid_cursor"
        assert c.patch(f"/api/v1/conversations/{cid}", json={"name": "cats"}).json()["title_source"] == "manual"
        assert [x["id"] for x in c.get("/api/v1/conversations", params={"q": "anoth"}).json()["items"]] == [cid]
        assert c.post(f"/api/v1/conversations/{cid}/cancel").json()["error"]["code"] == "run_not_active"
        assert c.post(f"/api/v1/conversations/{cid}/restore").status_code == 409
        assert c.delete(f"/api/v1/conversations/{cid}").status_code == 200
        assert c.get(f"/api/v1/conversations/{cid}").status_code == 404
        assert [x["id"] for x in c.get("/api/v1/conversations", params={"deleted": True}).json()["items"]] == [cid]
        assert c.post(f"/api/v1/conversations/{cid}/restore").json()["deleted_at"] is None
        assert (
            c.post(f"/api/v1/conversations/{cid}/messages", json={"content": " "}).json()["error"]["code"]
            == "message_empty"
        )
        assert c.post(f"/api/v1/conversations/{cid}/messages", json={"content": "x" * 2001}).status_code == 422


def test_every_conversation_route_answers_404_for_another_scope(sessions, scope, library):
    other = new_scope(sessions, "other")
    cid = _conversation(sessions, scope, name="private")
    with client_for(other) as c:
        for method, path, body in [
            ("GET", f"/api/v1/conversations/{cid}", None),
            ("PATCH", f"/api/v1/conversations/{cid}", {"name": "x"}),
            ("DELETE", f"/api/v1/conversations/{cid}", None),
            ("POST", f"/api/v1/conversations/{cid}/restore", None),
            ("POST", f"/api/v1/conversations/{cid}/cancel", None),
            ("GET", f"/api/v1/conversations/{cid}/messages", None),
            ("POST", f"/api/v1/conversations/{cid}/messages", {"content": "cat"}),
            ("POST", f"/api/v1/conversations/{cid}/messages", {}),
            ("GET", f"/api/v1/conversations/{uuid.uuid4()}", None),
            ("GET", "/api/v1/conversations/not-a-uuid", None),
        ]:
            r = c.request(method, path, json=body)
            assert r.status_code == 404 and r.json()["error"]["code"] == "not_found", (method, path, r.text)
        assert c.get("/api/v1/conversations").json()["items"] == []
        # A conversation of this scope never shows the other scope's memes.
        mine = c.post("/api/v1/conversations", json={}).json()["id"]
        assert c.post(f"/api/v1/conversations/{mine}/messages", json={"content": "cat"}).json()["reply"]["memes"] == []
    with sessions.begin() as session:
        assert conversations.get(session, scope, cid).name == "private"
        assert session.execute(select(Message).where(Message.conversation_id == uuid.UUID(cid))).first() is None
        session.execute(text("DELETE FROM scopes WHERE id = :s"), {"s": other.scope_id})


def test_delivered_memes_are_artifacts_with_trash_and_restore(sessions, scope, library):
    from mewdex.assistant import artifacts

    cid = _conversation(sessions, scope)
    reply = chat.post(sessions, scope, cid, "cat")["reply"]
    refs = reply["artifact_refs"]
    assert [r["meme_id"] for r in refs] == library["cats"][:3]
    other = new_scope(sessions, "other")
    try:
        with sessions.begin() as session:
            picked = artifacts.list_artifacts(session, scope, conversation_id=uuid.UUID(cid))
            assert {str(a.meme_id) for a in picked} == set(library["cats"][:3])
            assert all(a.kind == "meme_pick" for a in picked)
            with pytest.raises(Exception) as info:
                artifacts.trash(session, other, refs[0]["artifact_id"])
            assert info.value.code == "not_found"
            artifacts.trash(session, scope, refs[0]["artifact_id"])
        with sessions.begin() as session:
            assert [str(a.artifact_id) for a in artifacts.list_artifacts(session, scope, status="trashed")] == [
                refs[0]["artifact_id"]
            ]
            artifacts.restore(session, scope, refs[0]["artifact_id"])
        with sessions.begin() as session:
            assert artifacts.list_artifacts(session, scope, status="trashed") == []
    finally:
        with sessions.begin() as session:
            session.execute(text("DELETE FROM scopes WHERE id = :s"), {"s": other.scope_id})
