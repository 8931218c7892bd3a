"""Reverse image search (issue 15): a fake Yandex image search, results cached by sha256 (the
second lookup of the same bytes costs nothing), usage rows for every lookup, `forbid` makes no
call, titles reach the keyword leg, the API key never reaches a row."""

from __future__ import annotations

import json
import shutil
import threading
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from sqlalchemy import select, text

from conftest import CORPUS, corpus_available, drain_queue

pytestmark = pytest.mark.corpus
API_KEY = "yandex-secret-key-7788"


@pytest.fixture
def yandex(settings_env):
    calls = []

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *a):
            pass

        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            calls.append({"path": self.path, "auth": self.headers.get("Authorization"), "body": body})
            answer = json.dumps(
                {
                    "images": [
                        {
                            "pageTitle": "Zanzibar hornbill sticker collection",
                            "pageUrl": "https://example.org/hornbill",
                        },
                        {"pageTitle": "hornbill meme origin", "pageUrl": "https://example.org/origin"},
                    ]
                }
            ).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    settings_env(MEWDEX_EGRESS_ALLOW_HOSTS=json.dumps([f"127.0.0.1:{server.server_address[1]}"]))
    yield f"http://127.0.0.1:{server.server_address[1]}", calls
    server.shutdown()
    server.server_close()


def test_reverse_image_lookup_is_cached_per_account_metered_and_forbid_makes_no_call(yandex, sessions, store, tmp_path):
    if not corpus_available():
        pytest.skip("corpus not found")
    from accounts_helpers import delete_users, own_scope_users
    from mewdex.db.models import Meme, ReverseImageUsageEvent, ScopeContext, UsageEvent
    from mewdex.library.importer import collect, import_paths
    from mewdex.pipeline import jobs
    from mewdex.providers import connectors, policy
    from mewdex.search.service import search

    base_url, calls = yandex
    with sessions.begin() as session:
        users, ids = own_scope_users(session, ["rev0", "rev1"], role="user")
        scopes = [ScopeContext(u.scope_id) for u in users]
        d = connectors.create_definition(
            session,
            provider="yandex_image_search",
            name=f"ya-{uuid.uuid4().hex[:6]}",
            visibility="all",
            credentials={"api_key": API_KEY},
            config={"base_url": base_url, "folder_id": "b1g", "price_per_request": "0.02"},
        )
        definition_id = d.definition_id
        for scope in scopes:
            policy.update(session, scope, reverse_image_search="auto")
    try:
        for n, scope in enumerate(scopes):
            folder = tmp_path / f"in{n}"
            folder.mkdir()
            shutil.copyfile(CORPUS / "memegen" / "images" / "ackbar" / "default.jpg", folder / "pic.jpg")
            import_paths(sessions, store, scope, collect([folder]))
            drain_queue(sessions, scope, timeout=300)
        # The cache is per account (issue 31, finding 9): the same bytes in another library are its own call.
        assert len(calls) == 2
        assert calls[0]["auth"] == f"Api-Key {API_KEY}" and calls[0]["body"]["folderId"] == "b1g"
        with sessions.begin() as session:
            for scope in scopes:
                meme = session.execute(select(Meme).where(Meme.scope_id == scope.scope_id)).scalar_one()
                assert meme.meme_context["reverse_image"]["titles"][0] == "Zanzibar hornbill sticker collection"
                hits = search(session, scope, "zanzibar hornbill", legs=("keyword",)).results
                assert hits and hits[0].id == str(meme.id)
            events = (
                session.execute(
                    select(ReverseImageUsageEvent)
                    .where(ReverseImageUsageEvent.scope_id.in_([s.scope_id for s in scopes]))
                    .order_by(ReverseImageUsageEvent.created_at)
                )
                .scalars()
                .all()
            )
            assert [(e.cache_status, e.provider_called, e.outcome) for e in events] == [
                ("miss", True, "success"),
                ("miss", True, "success"),
            ]
            costs = session.execute(
                select(UsageEvent.cost_cny).where(
                    UsageEvent.kind == "reverse_image_search", UsageEvent.scope_id.in_([s.scope_id for s in scopes])
                )
            ).all()
            assert [float(c[0]) for c in costs] == [0.02, 0.02]
            stored = json.dumps([e.result for e in events]) + json.dumps([e.error for e in events])
            assert API_KEY not in stored
            # the same account analysing the same bytes again: a cache hit, no call, nothing metered
            again = session.execute(select(Meme).where(Meme.scope_id == scopes[1].scope_id)).scalar_one()
            jobs.create_job(session, again, mode="full_retry")
        drain_queue(sessions, scopes[1], timeout=300)
        assert len(calls) == 2
        with sessions.begin() as session:
            last = (
                session.execute(
                    select(ReverseImageUsageEvent)
                    .where(ReverseImageUsageEvent.scope_id == scopes[1].scope_id)
                    .order_by(ReverseImageUsageEvent.created_at.desc())
                )
                .scalars()
                .first()
            )
            assert (last.cache_status, last.provider_called) == ("hit", False)
            # forbid: re-analysis makes no call and writes no lookup
            policy.update(session, scopes[0], reverse_image_search="forbid")
            meme = session.execute(select(Meme).where(Meme.scope_id == scopes[0].scope_id)).scalar_one()
            session.execute(text("DELETE FROM reverse_image_usage_events WHERE cache_key = :k"), {"k": meme.sha256})
            jobs.create_job(session, meme, mode="full_retry")
        drain_queue(sessions, scopes[0], timeout=300)
        assert len(calls) == 2
        with sessions.begin() as session:
            assert (
                session.execute(
                    select(ReverseImageUsageEvent).where(ReverseImageUsageEvent.scope_id == scopes[0].scope_id)
                ).first()
                is None
            )
    finally:
        with sessions.begin() as session:
            session.execute(text("DELETE FROM external_system_audits WHERE definition_id = :d"), {"d": definition_id})
            session.execute(
                text("DELETE FROM external_system_definitions WHERE definition_id = :d"), {"d": definition_id}
            )
        delete_users(sessions, [str(i) for i in ids])
