"""Connectors API: admin definitions and grants, a user's connection with verification, revision
bump, visibility between users, audits, analysis policy; no answer carries a secret."""

from __future__ import annotations

import json

from sqlalchemy import text

from fakes.openai_server import FakeOpenAI


def test_connector_api_lifecycle(auth_app, settings_env, sessions, caplog):
    with FakeOpenAI(api_key="sk-user-key-abcd1234") as fake:
        settings_env(MEWDEX_EGRESS_ALLOW_HOSTS=json.dumps([fake.host_port]))
        admin, alice, bob = auth_app.new("adm", admin=True), auth_app.new("alice"), auth_app.new("bob")
        hdr = lambda a: {"X-CSRF-Token": a.csrf}  # noqa: E731  (cookie sessions; admin needs no token scope)
        r = admin.client.post(
            "/api/v1/admin/connectors",
            headers=hdr(admin),
            json={
                "provider": "openai_compatible",
                "name": "lab",
                "config": {"base_url": fake.base_url, "chat_model": "fake-chat"},
            },
        )
        assert r.status_code == 201, r.text
        definition = r.json()
        assert alice.client.post("/api/v1/admin/connectors", headers=hdr(alice), json={}).status_code == 404
        assert alice.client.get("/api/v1/connectors/definitions", headers=hdr(alice)).json()["definitions"] == []
        r = alice.client.post(
            "/api/v1/connectors/connections",
            headers=hdr(alice),
            json={"definition_id": definition["id"], "credentials": {"api_key": fake.api_key}},
        )
        assert r.status_code == 404  # not granted: looks missing
        r = admin.client.put(f"/api/v1/admin/connectors/{definition['id']}/grants/{alice.user_id}", headers=hdr(admin))
        assert r.status_code == 204
        r = alice.client.post(
            "/api/v1/connectors/connections",
            headers=hdr(alice),
            json={"definition_id": definition["id"], "credentials": {"api_key": fake.api_key}},
        )
        assert r.status_code == 201, r.text
        connection = r.json()
        assert connection["state"] == "verified" and connection["credential_hint"] == "sk-…1234"
        assert bob.client.get("/api/v1/connectors/connections", headers=hdr(bob)).json()["connections"] == []
        assert (
            bob.client.post(f"/api/v1/connectors/connections/{connection['id']}/verify", headers=hdr(bob)).status_code
            == 404
        )
        r = admin.client.patch(
            f"/api/v1/admin/connectors/{definition['id']}",
            headers=hdr(admin),
            json={"config": {"base_url": fake.base_url, "chat_model": "fake-vision"}},
        )
        assert r.json()["revision"] == 2
        [c] = alice.client.get("/api/v1/connectors/connections", headers=hdr(alice)).json()["connections"]
        assert c["state"] == "needs_verification" and c["verified_revision"] == 1
        r = alice.client.post(f"/api/v1/connectors/connections/{connection['id']}/verify", headers=hdr(alice))
        assert r.json()["state"] == "verified" and r.json()["verified_revision"] == 2
        audits = alice.client.get("/api/v1/connectors/audits", headers=hdr(alice)).json()["audits"]
        assert [a["event"] for a in audits] == ["verify", "verify"]
        assert bob.client.get("/api/v1/connectors/audits", headers=hdr(bob)).json()["audits"] == []
        r = alice.client.patch("/api/v1/analysis-policy", headers=hdr(alice), json={"vision": True})
        assert r.json() == {"vision": True, "reverse_image_search": "forbid", "llm_enhance": False, "llm_rerank": False}
        r = admin.client.delete(
            f"/api/v1/admin/connectors/{definition['id']}/grants/{alice.user_id}", headers=hdr(admin)
        )
        assert r.status_code == 204
        [c] = alice.client.get("/api/v1/connectors/connections", headers=hdr(alice)).json()["connections"]
        assert c["state"] == "revoked"
        everything = json.dumps(
            [
                admin.client.get("/api/v1/admin/connectors", headers=hdr(admin)).json(),
                admin.client.get("/api/v1/admin/connectors/audits", headers=hdr(admin)).json(),
                audits,
                c,
                connection,
            ]
        )
        assert fake.api_key not in everything and fake.api_key not in caplog.text
        with sessions.begin() as session:
            session.execute(
                text("DELETE FROM external_system_audits WHERE definition_id = :d"), {"d": definition["id"]}
            )
            session.execute(text("DELETE FROM external_systems WHERE definition_id = :d"), {"d": definition["id"]})
            session.execute(
                text("DELETE FROM external_system_definitions WHERE definition_id = :d"), {"d": definition["id"]}
            )
