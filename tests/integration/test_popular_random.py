"""What is popular, and a surprise (issue 43 item 8) against the real app and database: ``GET
/api/v1/memes/popular`` counts only the caller's own use events (send, share, copy, download) in the
window, most used first, and never a trashed meme; the home page shows them as "Popular this week"; in
the assistant's chat (the web chat API) "热门"/"hot" answers with them and "随机"/"random" with a random
live meme — with ``tag:NAME`` only memes of that tag.

Memes are written directly (no image processing); events through :func:`mewdex.search.feedback.record`."""

from __future__ import annotations

import hashlib
from datetime import timedelta

import pytest
from sqlalchemy import update

from conftest import client_for, drop_scope, new_scope
from mewdex.db.models import Meme, utcnow
from mewdex.db.models.search_feedback import SearchFeedbackEvent
from mewdex.search import feedback


def _memes(sessions, scope, names) -> dict[str, str]:
    with sessions.begin() as session:
        rows = []
        for name in names:
            sha = hashlib.sha256(f"{scope.scope_id}-{name}".encode()).hexdigest()
            rows.append(
                Meme(
                    scope_id=scope.scope_id,
                    storage_key=sha + ".png",
                    display_name=name,
                    name_source="uploaded",
                    extension=".png",
                    size_bytes=10,
                    sha256=sha,
                    provenance={},
                    extensions={"image": {}},
                )
            )
        session.add_all(rows)
        session.flush()
        return {m.display_name: str(m.id) for m in rows}


def _use(sessions, scope, meme_id, kind, n=1, *, days_ago=0.0):
    with sessions.begin() as session:
        for _ in range(n):
            event = feedback.record(session, scope, "cat", meme_id, kind, "api", embed=False)
            if days_ago:
                session.execute(
                    update(SearchFeedbackEvent)
                    .where(SearchFeedbackEvent.event_id == event.event_id)
                    .values(created_at=utcnow() - timedelta(days=days_ago))
                )


@pytest.fixture
def two(sessions):
    mine, other = new_scope(sessions, "pop"), new_scope(sessions, "pop")
    yield mine, other
    drop_scope(sessions, mine)
    drop_scope(sessions, other)


def test_popular_counts_the_callers_uses_of_the_week_and_never_a_trashed_meme(sessions, two):
    mine, other = two
    m = _memes(sessions, mine, ["top", "second", "old", "marked", "trashed", "unused"])
    theirs = _memes(sessions, other, ["theirs"])
    _use(sessions, mine, m["top"], "send", 2)
    _use(sessions, mine, m["top"], "copy")
    _use(sessions, mine, m["second"], "download")
    _use(sessions, mine, m["second"], "share")
    _use(sessions, mine, m["old"], "send", 5, days_ago=8)  # outside the week
    _use(sessions, mine, m["marked"], "mark", 5)  # a judgement, not a use
    _use(sessions, mine, m["trashed"], "send", 9)
    _use(sessions, other, theirs["theirs"], "send", 9)  # another account's uses count nothing here
    with client_for(mine) as c:
        assert c.delete(f"/api/v1/memes/{m['trashed']}").status_code == 204
        body = c.get("/api/v1/memes/popular", params={"days": 7, "limit": 10}).json()
        assert body["days"] == 7
        assert [(i["id"], i["uses"]) for i in body["items"]] == [(m["top"], 3), (m["second"], 2)]
        month = c.get("/api/v1/memes/popular", params={"days": 30}).json()["items"]
        assert [i["id"] for i in month] == [m["old"], m["top"], m["second"]]
        assert [i["id"] for i in c.get("/api/v1/memes/popular", params={"limit": 1}).json()["items"]] == [m["top"]]
        assert c.get("/api/v1/memes/popular", params={"days": 0}).status_code == 422
        page = c.get("/").text
        assert "Popular this week" in page and m["top"] in page and m["trashed"] not in page
        zh = c.get("/", headers={"accept-language": "zh-CN"}).text
        assert "本周热门" in zh
    with client_for(other) as c:
        assert [i["id"] for i in c.get("/api/v1/memes/popular").json()["items"]] == [theirs["theirs"]]


def _ask(c, cid, text) -> list[str]:
    r = c.post(f"/api/v1/conversations/{cid}/messages", json={"content": text})
    assert r.status_code == 200, r.text
    return [x["meme_id"] for x in r.json()["reply"]["memes"]]


def test_hot_and_random_in_the_assistants_chat(sessions, scope):
    m = _memes(sessions, scope, ["cat one", "cat two", "dog", "frog"])
    _use(sessions, scope, m["dog"], "send", 3)
    _use(sessions, scope, m["cat one"], "copy")
    with client_for(scope) as c:
        for name in ("cat one", "cat two"):
            assert c.patch(f"/api/v1/memes/{m[name]}", json={"tags": ["猫"]}).status_code == 200
        assert c.delete(f"/api/v1/memes/{m['frog']}").status_code == 204
        cid = c.post("/api/v1/conversations", json={}).json()["id"]
        assert _ask(c, cid, "热门") == [m["dog"], m["cat one"]]
        assert _ask(c, cid, "hot") == [m["dog"], m["cat one"]]
        live = {m["cat one"], m["cat two"], m["dog"]}
        for _ in range(8):
            got = _ask(c, cid, "random")
            assert len(got) == 1 and got[0] in live  # never the trashed frog
        for text in ("随机 tag:猫", "random tag:猫", "随机 标签:猫"):
            got = _ask(c, cid, text)
            assert len(got) == 1 and got[0] in {m["cat one"], m["cat two"]}, text
        drawn = _ask(c, cid, "随机 tag:猫")
        assert _ask(c, cid, "换一个") == [({m["cat one"], m["cat two"]} - set(drawn)).pop()]  # the rest of the draw
        assert _ask(c, cid, "random tag:nosuchtag") == []
