"""Issue 43, item 5: a collection shared with accounts. With sign-in required and three real accounts:
the owner shares a collection with a viewer; the viewer sees it in its list (with the owner and its
role), reads it and its items' media (never another meme of the owner's, never a trashed one) and
searches inside it (only its memes); a third account gets 404 for the collection, its media, a search
with its id, and the member and link endpoints; removal ends it at once. One app for the module's
test (the accounts fixture)."""

from __future__ import annotations

import uuid

from sqlalchemy import update

from accounts_helpers import bearer
from library_helpers import png
from mewdex.db.models import Meme, ScopeContext, utcnow
from mewdex.library import collections
from mewdex.library.memes import add_image
from mewdex.pipeline.context import build_meme_context
from mewdex.pipeline.stages import write_keyword_document


def _meme(sessions, store, scope_id: str, seed: int, ocr: str) -> str:
    result = add_image(
        sessions, store, ScopeContext(scope_id), png(seed), filename=f"m{seed}.png", provenance={}, process=False
    )
    with sessions.begin() as session:
        row = session.get_one(Meme, uuid.UUID(result.meme_id))
        row.meme_context = build_meme_context(
            relative_path=f"m{seed}.png", display_name=row.display_name, ocr_lines=[{"text": ocr, "score": 0.95}]
        )
        row.context_status = "ready"
        write_keyword_document(session, row)
    return result.meme_id


def test_members_read_search_and_removal(auth_app, sessions, store):
    owner, viewer, third = auth_app.new("owner"), auth_app.new("viewer"), auth_app.new("third")
    inside = _meme(sessions, store, owner.scope_id, 4321, "quokka grins widely")
    outside = _meme(sessions, store, owner.scope_id, 4322, "quokka grins at night")
    trashed = _meme(sessions, store, owner.scope_id, 4323, "quokka in the trash")
    with sessions.begin() as session:
        c = collections.create(session, ScopeContext(owner.scope_id), "Quokkas")
        collections.add_members(session, ScopeContext(owner.scope_id), c.id, [inside, trashed])
        session.execute(update(Meme).where(Meme.id == uuid.UUID(trashed)).values(deleted_at=utcnow()))
    cid = str(c.id)
    o, v, t = bearer(owner.token), bearer(viewer.token), bearer(third.token)
    api = auth_app.client()

    # only the owner shares, lists and unshares
    assert (
        api.put(f"/api/v1/collections/{cid}/members/{viewer.email}", json={"role": "viewer"}, headers=t).status_code
        == 404
    )
    r = api.put(f"/api/v1/collections/{cid}/members/{viewer.email}", json={"role": "viewer"}, headers=o)
    assert r.status_code == 200 and r.json()["role"] == "viewer", r.text
    assert (
        api.put(f"/api/v1/collections/{cid}/members/{viewer.email}", json={"role": "boss"}, headers=o).status_code
        == 422
    )
    assert api.put(f"/api/v1/collections/{cid}/members/nobody-{uuid.uuid4().hex}@example.com", json={"role": "viewer"},
                   headers=o).status_code == 404  # fmt: skip
    assert [m["email"] for m in api.get(f"/api/v1/collections/{cid}/members", headers=o).json()["members"]] == [
        viewer.email
    ]
    assert api.get(f"/api/v1/collections/{cid}/members", headers=v).status_code == 404

    # the viewer sees, reads, fetches and searches it
    listed = {x["id"]: x for x in api.get("/api/v1/collections", headers=v).json()["collections"]}
    assert listed[cid]["role"] == "viewer" and listed[cid]["owner"] == owner.email and listed[cid]["item_count"] == 1
    body = api.get(f"/api/v1/collections/{cid}", headers=v).json()
    assert [i["id"] for i in body["items"]] == [inside]
    assert body["items"][0]["media_url"] == f"/api/v1/collections/{cid}/media/{inside}"
    media = api.get(body["items"][0]["media_url"], headers=v)
    assert media.status_code == 200 and media.content == png(4321)
    for meme in (outside, trashed):
        assert api.get(f"/api/v1/collections/{cid}/media/{meme}", headers=v).status_code == 404
    assert api.get(f"/media/{inside}", headers=v).status_code == 404  # the owner's URLs stay the owner's
    found = api.post("/api/v1/search", json={"query": "quokka", "filters": {"collection": cid}}, headers=v)
    assert found.status_code == 200, found.text
    assert [h["id"] for h in found.json()["results"]] == [inside]
    assert found.json()["results"][0]["media_url"].startswith(f"/api/v1/collections/{cid}/media/")
    own = api.post("/api/v1/search", json={"query": "quokka"}, headers=v).json()["results"]
    assert own == []  # the viewer's own library does not gain the owner's memes

    # a third account: 404 everywhere
    assert cid not in {x["id"] for x in api.get("/api/v1/collections", headers=t).json()["collections"]}
    assert api.get(f"/api/v1/collections/{cid}", headers=t).status_code == 404
    assert api.get(f"/api/v1/collections/{cid}/media/{inside}", headers=t).status_code == 404
    r = api.post("/api/v1/search", json={"query": "quokka", "filters": {"collection": cid}}, headers=t)
    assert r.status_code == 404 and r.json()["error"]["code"] == "not_found"
    assert api.get(f"/api/v1/collections/{cid}/links", headers=t).status_code == 404
    assert api.post(f"/api/v1/collections/{cid}/links", json={}, headers=t).status_code == 404
    assert api.post(f"/api/v1/collections/{cid}/links", json={}, headers=v).status_code == 404  # a member's neither

    # a viewer cannot add; an editor adds a meme of its own: a copy lands in the owner's library
    mine = _meme(sessions, store, viewer.scope_id, 4324, "my own quokka")
    assert api.post(f"/api/v1/collections/{cid}/items", json={"meme_ids": [mine]}, headers=v).status_code == 404
    assert (
        api.put(f"/api/v1/collections/{cid}/members/{viewer.email}", json={"role": "editor"}, headers=o).status_code
        == 200
    )
    assert api.post(f"/api/v1/collections/{cid}/items", json={"meme_ids": [outside]}, headers=v).status_code == 422
    r = api.post(f"/api/v1/collections/{cid}/items", json={"meme_ids": [mine]}, headers=v)
    assert r.status_code == 200, r.text
    assert r.json()["added"] == 1 and r.json()["item_count"] == 2
    copy = r.json()["items"][0]["meme_id"]
    assert copy != mine
    with sessions.begin() as session:
        row = session.get_one(Meme, uuid.UUID(copy))
        assert row.scope_id == owner.scope_id and row.provenance["origin"]["source_meme_id"] == mine
    assert {i["id"] for i in api.get(f"/api/v1/collections/{cid}", headers=o).json()["items"]} == {inside, copy}
    assert api.get(f"/api/v1/memes/{mine}", headers=v).status_code == 200  # the editor keeps its own

    # removal ends it at once
    assert api.delete(f"/api/v1/collections/{cid}/members/{viewer.email}", headers=o).status_code == 204
    assert api.get(f"/api/v1/collections/{cid}", headers=v).status_code == 404
    assert api.get(f"/api/v1/collections/{cid}/media/{inside}", headers=v).status_code == 404
    assert (
        api.post("/api/v1/search", json={"query": "quokka", "filters": {"collection": cid}}, headers=v).status_code
        == 404
    )
    assert cid not in {x["id"] for x in api.get("/api/v1/collections", headers=v).json()["collections"]}
    assert api.delete(f"/api/v1/collections/{cid}/members/{viewer.email}", headers=o).status_code == 404
