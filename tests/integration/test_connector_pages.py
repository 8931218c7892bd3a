"""Connector pages (issue 15, point 8): the user's page shows granted connectors, the connection's
hint and state (never the key) and this month's usage by model; admins get the definitions and
grants page; the audit viewer filters and pages (user: their own; admin: all); non-admins get 404
on admin pages. Also the audit API's filters and cursor."""

from __future__ import annotations

import json
from decimal import Decimal
from uuid import UUID

from sqlalchemy import text

from fakes.openai_server import FakeOpenAI


def _cleanup(sessions, definition_id: str) -> None:
    with sessions.begin() as session:
        for table in ("external_system_audits", "external_systems", "external_system_definitions"):
            session.execute(text(f"DELETE FROM {table} WHERE definition_id = :d"), {"d": definition_id})


def test_connector_pages_and_audit_viewer(auth_app, settings_env, sessions, caplog):
    from mewdex.platform import usage
    from mewdex.providers import connectors

    with FakeOpenAI(api_key="sk-page-key-wxyz9876") as fake:
        settings_env(MEWDEX_EGRESS_ALLOW_HOSTS=json.dumps([fake.host_port]))
        admin, alice, bob = auth_app.new("padm", admin=True), auth_app.new("palice"), auth_app.new("pbob")
        hdr = lambda a: {"X-CSRF-Token": a.csrf}  # noqa: E731
        r = admin.client.post(
            "/api/v1/admin/connectors",
            headers=hdr(admin),
            json={
                "provider": "openai_compatible",
                "name": "page-lab",
                "config": {"base_url": fake.base_url, "chat_model": "fake-chat", "vision_model": "fake-vision"},
            },
        )
        assert r.status_code == 201, r.text
        definition = r.json()
        try:
            # Not granted: alice's page does not list it; the admin pages are 404 for her.
            page = alice.client.get("/connectors")
            assert page.status_code == 200 and "page-lab" not in page.text
            assert alice.client.get("/admin/connectors").status_code == 404
            assert alice.client.get("/admin/connectors/audits").status_code == 404

            assert (
                admin.client.put(
                    f"/api/v1/admin/connectors/{definition['id']}/grants/{alice.user_id}", headers=hdr(admin)
                ).status_code
                == 204
            )
            page = admin.client.get("/admin/connectors")
            assert page.status_code == 200
            assert f'data-definition="{definition["id"]}"' in page.text and alice.email in page.text
            assert 'data-connector-action="revoke"' in page.text

            page = alice.client.get("/connectors")
            assert "page-lab" in page.text and 'data-connector-form="connect"' in page.text
            r = alice.client.post(
                "/api/v1/connectors/connections",
                headers=hdr(alice),
                json={"definition_id": definition["id"], "credentials": {"api_key": fake.api_key}},
            )
            assert r.json()["state"] == "verified"
            with sessions.begin() as session:  # one metered call of alice's this month
                usage.record(
                    session,
                    scope_id=alice.scope_id,
                    kind="analysis",
                    model_profile="page-lab/fake-vision",
                    units={"outcome": "ok"},
                    idempotency_key=f"page-test:{alice.user_id}",
                    cost=Decimal("0.0125"),
                )
            page = alice.client.get("/connectors")
            assert 'data-state="verified"' in page.text and "sk-…9876" in page.text
            assert 'data-model="page-lab/fake-vision"' in page.text and "¥0.0125" in page.text
            assert fake.api_key not in page.text
            assert "page-lab" not in bob.client.get("/connectors").text

            # The revision bump shows as "verify again".
            admin.client.patch(
                f"/api/v1/admin/connectors/{definition['id']}",
                headers=hdr(admin),
                json={"config": {"base_url": fake.base_url, "chat_model": "fake-chat"}},
            )
            page = alice.client.get("/connectors")
            assert 'data-state="needs_verification"' in page.text

            # 60 more audits of alice's (3 failed): the viewer pages by 50 and filters.
            with sessions.begin() as session:
                system_id = session.execute(
                    text("SELECT external_system_id FROM external_systems WHERE definition_id = :d"),
                    {"d": definition["id"]},
                ).scalar_one()
                conn = connectors.Connection(
                    definition["id"],
                    "openai_compatible",
                    "page-lab",
                    2,
                    {},
                    system_id,
                    {},
                    alice.scope_id,
                    UUID(alice.user_id),
                )
                for i in range(60):
                    connectors.audit(
                        session,
                        conn,
                        event="vision_analysis",
                        outcome="failed" if i % 20 == 0 else "ok",
                        duration_ms=i,
                        detail={"model": "fake-vision"},
                    )
            page = alice.client.get("/connectors/audits")
            assert page.text.count("data-audit=") == 50 and 'rel="next"' in page.text
            next_href = page.text.split('rel="next"')[0].rsplit('href="', 1)[1].split('"')[0].replace("&amp;", "&")
            page2 = alice.client.get(next_href)
            assert page2.text.count("data-audit=") == 11 and 'rel="next"' not in page2.text  # 60 + 1 verify
            failed = alice.client.get("/connectors/audits?outcome=failed")
            assert failed.text.count('data-outcome="failed"') == 3 and 'data-outcome="ok"' not in failed.text
            verify = alice.client.get("/connectors/audits?event=verify")
            assert verify.text.count("data-audit=") == 1
            assert bob.client.get("/connectors/audits").text.count("data-audit=") == 0
            broken = alice.client.get("/connectors/audits?cursor=not-a-cursor")
            assert broken.status_code == 200 and 'id="bad-cursor"' in broken.text

            everyone = admin.client.get(f"/admin/connectors/audits?user={alice.user_id}&outcome=failed")
            assert everyone.status_code == 200 and everyone.text.count("data-audit=") == 3
            assert alice.email in everyone.text

            # The API: the same filters, and a cursor that pages without overlap.
            r = alice.client.get("/api/v1/connectors/audits?limit=40", headers=hdr(alice)).json()
            r2 = alice.client.get(
                f"/api/v1/connectors/audits?limit=40&cursor={r['next_cursor']}", headers=hdr(alice)
            ).json()
            first, second = [a["id"] for a in r["audits"]], [a["id"] for a in r2["audits"]]
            assert len(first) == 40 and len(second) == 21 and not set(first) & set(second)
            assert r2["next_cursor"] is None
            r = alice.client.get("/api/v1/connectors/audits?outcome=failed", headers=hdr(alice)).json()
            assert [a["outcome"] for a in r["audits"]] == ["failed"] * 3
            assert alice.client.get("/api/v1/connectors/audits?cursor=xyz", headers=hdr(alice)).status_code == 422
            r = admin.client.get(
                f"/api/v1/admin/connectors/audits?user_id={alice.user_id}&event=verify", headers=hdr(admin)
            ).json()
            assert len(r["audits"]) == 1 and r["audits"][0]["user_id"] == alice.user_id
            assert fake.api_key not in caplog.text
        finally:
            _cleanup(sessions, definition["id"])
