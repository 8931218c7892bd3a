"""Issue 46: one pagination style. The listings that paged by ``before`` (feedback), ``offset``
(duplicate clusters) or ``before_idx`` (a conversation's messages) take ``cursor`` and answer
``next_cursor`` as memes and tasks do; walking the pages yields every row once, even rows that share
a timestamp at a page's edge (which ``before=<time>`` skipped)."""

from __future__ import annotations

from datetime import UTC, datetime
from uuid import UUID

from library_helpers import png
from mewdex.db.models import MemeNearDuplicate, SearchFeedbackEvent


def _memes(client, n: int, seed: int) -> list[str]:
    files = [("files", (f"page {seed + i}.png", png(seed + i), "image/png")) for i in range(n)]
    r = client.post("/api/v1/memes", files=files)
    assert r.status_code == 201, r.text
    return [item["meme"]["id"] for item in r.json()["results"]]


def _walk(client, path: str, key: str, limit: int) -> list[dict]:
    seen, cursor, pages = [], None, 0
    while True:
        params = {"limit": limit} | ({"cursor": cursor} if cursor else {})
        page = client.get(path, params=params)
        assert page.status_code == 200, page.text
        body = page.json()
        seen += body[key]
        pages += 1
        cursor = body["next_cursor"]
        if cursor is None:
            return seen
        assert pages < 50


def test_feedback_pages_by_cursor_without_losing_events_that_share_a_time(client, sessions, scope):
    memes = _memes(client, 5, 4600)
    same = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    with sessions.begin() as session:
        for i, meme_id in enumerate(memes):  # three at one instant: a page edge falls among them
            when = same if i < 3 else same.replace(minute=10 + i)
            session.add(
                SearchFeedbackEvent(
                    scope_id=scope.scope_id, meme_id=UUID(meme_id), query=f"q{i}", query_key=f"q{i}",
                    kind="mark", source="api", created_at=when,
                )
            )  # fmt: skip
    events = _walk(client, "/api/v1/feedback", "events", 2)
    assert sorted(e["meme_id"] for e in events) == sorted(memes) and len(events) == 5
    assert [e["created_at"] for e in events] == sorted((e["created_at"] for e in events), reverse=True)
    bad = client.get("/api/v1/feedback", params={"cursor": "2026-01-02T03:04:05Z"})
    assert bad.status_code == 422 and bad.json()["error"]["code"] == "invalid_cursor"
    assert client.get("/api/v1/feedback", params={"before": "2026-01-02T03:04:05Z"}).json()["events"]  # ignored


def test_duplicate_clusters_page_by_cursor(client, sessions, scope):
    memes = _memes(client, 7, 4700)
    groups = [memes[0:3], memes[3:5], memes[5:7]]  # clusters of 3, 2 and 2
    with sessions.begin() as session:
        for original, *copies in groups:
            for copy in copies:
                session.add(MemeNearDuplicate(scope_id=scope.scope_id, meme_id=UUID(copy), duplicate_of=UUID(original)))
    whole = client.get("/api/v1/duplicates").json()
    assert whole["total"] == 3 and whole["next_cursor"] is None
    clusters = _walk(client, "/api/v1/duplicates", "clusters", 1)
    assert [c["original"] for c in clusters] == [c["original"] for c in whole["clusters"]]
    assert [c["size"] for c in clusters] == [3, 2, 2]
    bad = client.get("/api/v1/duplicates", params={"cursor": "1"})
    assert bad.status_code == 422 and bad.json()["error"]["code"] == "invalid_cursor"
