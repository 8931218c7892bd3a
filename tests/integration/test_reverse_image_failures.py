"""Reverse image search against a fake SerpApi that speaks its real response shapes (issue 15,
point 5): the signed thumbnail URL and key SerpApi gets, results and SerpApi's "no results"
answer (both cached by sha256 in the scope that paid for them; an account without a grant gets
nothing), and every branch that gives no result — refused by the budget
(no call), a refused key (401), out of searches (429), a server error (500), a timeout, no public
URL — each recorded as a failed lookup with its code (never the key or the signed URL), metered
and audited, never cached."""

from __future__ import annotations

import io
import json
import time
import uuid
from decimal import Decimal
from urllib.parse import parse_qs, urlsplit

import pytest
from PIL import Image
from sqlalchemy import select, text

from conftest import drop_scope, new_scope
from fakes.serpapi_server import FakeSerpApi

PUBLIC_URL = "https://memes.example.org"


def _png(seed: int) -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", (64, 48), (seed * 53 % 256, seed * 17 % 256, 200)).save(buffer, "PNG")
    return buffer.getvalue()


@pytest.fixture
def serpapi(settings_env, sessions):
    """A fake SerpApi, a platform ``serpapi_google_lens`` definition visible to all, a 1 s timeout."""
    from mewdex.providers import connectors

    with FakeSerpApi() as fake:
        settings_env(
            MEWDEX_EGRESS_ALLOW_HOSTS=json.dumps([fake.host_port]),
            MEWDEX_PUBLIC_URL=PUBLIC_URL,
            MEWDEX_PROVIDER_TIMEOUT_SECONDS="1",
        )
        with sessions.begin() as session:
            definition = connectors.create_definition(
                session,
                provider="serpapi_google_lens",
                name=f"lens-{uuid.uuid4().hex[:6]}",
                visibility="all",
                credentials={"api_key": fake.api_key},
                config={"base_url": fake.base_url, "price_per_request": "0.05"},
            )
            fake.definition_id = definition.definition_id
        try:
            yield fake
        finally:
            with sessions.begin() as session:
                for table in ("external_system_audits", "external_system_definitions"):
                    session.execute(text(f"DELETE FROM {table} WHERE definition_id = :d"), {"d": fake.definition_id})


class Meme:
    def __init__(self, sessions, store, scope, seed: int):
        from mewdex.db.models import ImageStageTask
        from mewdex.db.models import Meme as MemeRow
        from mewdex.library.memes import add_image

        self.data = _png(seed)
        result = add_image(sessions, store, scope, self.data, filename=f"m{seed}.png", provenance={"test": "ris"})
        with sessions.begin() as session:
            row = session.execute(select(MemeRow).where(MemeRow.id == result.meme_id)).scalar_one()
            self.id, self.sha256 = row.id, row.sha256
            # the meme's processing task (the lookup's usage row names it)
            self.task_id = session.execute(
                select(ImageStageTask.task_id).where(ImageStageTask.target_meme_id == row.id).limit(1)
            ).scalar_one()


def _lookup(sessions, scope, meme, policy="auto"):
    from mewdex.providers import reverse_image

    return reverse_image.lookup(
        sessions, scope, policy=policy, sha256=meme.sha256, image=meme.data, meme_id=meme.id, task_id=meme.task_id
    )


def _events(sessions, scope):
    from mewdex.db.models import ReverseImageUsageEvent

    with sessions.begin() as session:
        rows = session.execute(
            select(ReverseImageUsageEvent)
            .where(ReverseImageUsageEvent.scope_id == scope.scope_id)
            .order_by(ReverseImageUsageEvent.created_at)
        ).scalars()
        return [
            (e.cache_status, e.provider_called, e.outcome, (e.error or {}).get("code"), e.retryable, e.result)
            for e in rows
        ]


def _audits(sessions, definition_id):
    from mewdex.db.models import ExternalSystemAudit

    with sessions.begin() as session:
        return [
            (a.outcome, a.status_code, a.detail.get("code"))
            for a in session.execute(
                select(ExternalSystemAudit)
                .where(ExternalSystemAudit.definition_id == definition_id)
                .order_by(ExternalSystemAudit.created_at)
            ).scalars()
        ]


def _usage(sessions, scope):
    from mewdex.db.models import UsageEvent

    with sessions.begin() as session:
        return [
            (u.units.get("outcome"), u.cost_cny)
            for u in session.execute(
                select(UsageEvent)
                .where(UsageEvent.scope_id == scope.scope_id, UsageEvent.kind == "reverse_image_search")
                .order_by(UsageEvent.created_at)
            ).scalars()
        ]


def test_serpapi_gets_a_signed_thumbnail_url_and_its_results_are_cached(serpapi, sessions, store):
    scope = new_scope(sessions, "t-lens")
    try:
        meme = Meme(sessions, store, scope, 1)
        found = _lookup(sessions, scope, meme)
        assert found["titles"][0] == "Admiral Ackbar It's a trap meme"
        assert found["pages"][0] == "https://knowyourmeme.example/memes/its-a-trap"
        [request] = serpapi.requests
        params = request["params"]
        assert params["engine"] == "google_lens" and params["api_key"] == serpapi.api_key
        image_url = urlsplit(params["url"])
        assert f"{image_url.scheme}://{image_url.netloc}" == PUBLIC_URL
        assert image_url.path == f"/media/{meme.id}/thumbnail"
        link = parse_qs(image_url.query)
        assert {"exp", "kid", "u", "sig"} <= set(link)
        assert time.time() < int(link["exp"][0]) <= time.time() + 600  # valid 10 minutes at most

        # Same bytes in another account: the cache is the scope's own. Without a grant it gets
        # nothing (no cached result, no row telling the image was looked up, no call); granted, it
        # makes (and pays for) its own call.
        from accounts_helpers import delete_users, own_scope_users
        from mewdex.db.models import ScopeContext
        from mewdex.providers import connectors

        with sessions.begin() as session:
            (user,), other_ids = own_scope_users(session, ["lens"], role="user")
            other, other_id = ScopeContext(user.scope_id), str(user.user_id)
            session.execute(
                text("UPDATE external_system_definitions SET visibility = 'selected' WHERE definition_id = :d"),
                {"d": serpapi.definition_id},
            )
        try:
            twin = Meme(sessions, store, other, 1)
            assert _lookup(sessions, other, twin) is None and len(serpapi.requests) == 1
            assert _events(sessions, other) == [] and _usage(sessions, other) == []
            with sessions.begin() as session:
                connectors.grant(session, serpapi.definition_id, other_id)
            assert _lookup(sessions, other, twin) == found and len(serpapi.requests) == 2
            assert [e[:3] for e in _events(sessions, other)] == [("miss", True, "success")]
            assert _usage(sessions, other) == [("ok", Decimal("0.050000"))]
            # ... and the same bytes again in that account come from its own cache
            assert _lookup(sessions, other, twin) == found and len(serpapi.requests) == 2
        finally:
            delete_users(sessions, other_ids)

        # SerpApi's "no results" answer (200 + error + status Success) is an empty result, cached too.
        blank = Meme(sessions, store, scope, 2)
        serpapi.script(FakeSerpApi.no_results())
        assert _lookup(sessions, scope, blank) == {"titles": [], "pages": []}
        assert _lookup(sessions, scope, blank) == {"titles": [], "pages": []} and len(serpapi.requests) == 3
        assert [e[:3] for e in _events(sessions, scope)] == [
            ("miss", True, "success"),
            ("miss", True, "empty"),
            ("hit", False, "empty"),
        ]
        assert _usage(sessions, scope) == [("ok", Decimal("0.050000")), ("ok", Decimal("0.050000"))]
        stored = json.dumps(_events(sessions, scope), default=str) + json.dumps(
            _audits(sessions, serpapi.definition_id)
        )
        assert serpapi.api_key not in stored and "sig=" not in stored
    finally:
        drop_scope(sessions, scope)


@pytest.mark.parametrize(
    "answer,code,retryable,status",
    [
        (FakeSerpApi.out_of_searches(), "provider_rate_limited", True, 429),
        (FakeSerpApi.server_error(), "provider_failed", True, 500),
        (FakeSerpApi.slow(3.0), "egress_timeout", True, None),
        ("bad-key", "provider_failed", False, 401),
    ],
    ids=["out-of-searches-429", "server-error-500", "timeout", "key-refused-401"],
)
def test_a_failed_lookup_is_recorded_metered_audited_and_not_cached(
    serpapi, sessions, store, answer, code, retryable, status
):
    from mewdex.db.models import ExternalSystemDefinition
    from mewdex.providers import connectors
    from mewdex.providers.errors import ProviderError

    if answer == "bad-key":
        with sessions.begin() as session:
            row = session.get(ExternalSystemDefinition, serpapi.definition_id)
            connectors.update_definition(session, row.definition_id, credentials={"api_key": "serpapi-wrong-key-0000"})
    else:
        serpapi.script(answer)
    scope = new_scope(sessions, "t-lens")
    try:
        meme = Meme(sessions, store, scope, 3)
        started = time.monotonic()
        with pytest.raises(ProviderError) as failure:
            _lookup(sessions, scope, meme)
        assert time.monotonic() - started < 10  # the 1 s provider timeout holds (no 60 s default)
        assert (failure.value.code, failure.value.retryable) == (code, retryable)
        assert serpapi.api_key not in failure.value.message and "sig=" not in failure.value.message
        assert _events(sessions, scope) == [("miss", True, "failed", code, retryable, None)]
        assert _usage(sessions, scope) == [("failed", Decimal(0))]
        assert _audits(sessions, serpapi.definition_id) == [("failed", status, code)]
        # Not cached: the next lookup calls again (and now succeeds).
        if answer == "bad-key":
            with sessions.begin() as session:
                connectors.update_definition(session, serpapi.definition_id, credentials={"api_key": serpapi.api_key})
        calls = len(serpapi.requests)
        assert _lookup(sessions, scope, meme)["titles"] and len(serpapi.requests) == calls + 1
    finally:
        drop_scope(sessions, scope)


def test_budget_refusal_and_missing_public_url_make_no_call(serpapi, sessions, store, settings_env):
    from accounts_helpers import delete_users, own_scope_users
    from mewdex.db.models import ScopeContext, User

    with sessions.begin() as session:
        (user,), ids = own_scope_users(session, ["lens"], role="user")
        scope = ScopeContext(user.scope_id)
        session.get(User, user.user_id).quota_analysis_cost_per_month = Decimal(0)
    try:
        meme = Meme(sessions, store, scope, 4)
        assert _lookup(sessions, scope, meme) is None
        assert serpapi.requests == []
        assert _events(sessions, scope) == [("miss", False, "failed", "quota_exceeded", False, None)]
        assert _usage(sessions, scope) == [("refused", Decimal(0))]
        assert _audits(sessions, serpapi.definition_id) == [("refused", None, "quota_exceeded")]

        settings_env(MEWDEX_PUBLIC_URL="")
        with sessions.begin() as session:
            session.get(User, user.user_id).quota_analysis_cost_per_month = None
        assert _lookup(sessions, scope, meme) is None and serpapi.requests == []
        assert _events(sessions, scope)[-1] == ("miss", False, "failed", "public_url_missing", False, None)

        # forbid: nothing at all, not even a lookup row
        before = len(_events(sessions, scope))
        assert _lookup(sessions, scope, meme, policy="forbid") is None
        assert len(_events(sessions, scope)) == before and serpapi.requests == []
    finally:
        delete_users(sessions, ids)
