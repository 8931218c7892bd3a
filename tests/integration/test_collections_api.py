"""Collections API: CRUD, per-scope unique names, ordered all-or-nothing member adds, scope isolation."""

from __future__ import annotations

import uuid

import pytest

from conftest import client_for, drop_scope, new_scope
from it_helpers import counts
from package_helpers import add, error_code, png


@pytest.fixture
def api(client):
    """The shared client of the test's scope (conftest)."""
    return client


def test_create_list_rename_delete(api, sessions, store, scope):
    r = api.post("/api/v1/collections", json={"name": "  猫猫 cats  "})
    assert r.status_code == 201, r.text
    created = r.json()
    assert created["name"] == "猫猫 cats" and created["item_count"] == 0
    assert error_code(api.post("/api/v1/collections", json={"name": "猫猫 cats"})) == "collection_name_taken"
    assert api.post("/api/v1/collections", json={"name": "猫猫 cats"}).status_code == 409
    assert error_code(api.post("/api/v1/collections", json={"name": " \t "})) == "collection_name_invalid"
    assert api.post("/api/v1/collections", json={"nom": "x"}).status_code == 422
    other = api.post("/api/v1/collections", json={"name": "dogs"}).json()

    listed = api.get("/api/v1/collections").json()["collections"]
    assert [c["name"] for c in listed] == ["dogs", "猫猫 cats"]

    cid = created["id"]
    r = api.patch(f"/api/v1/collections/{cid}", json={"name": "dogs"})
    assert r.status_code == 409 and error_code(r) == "collection_name_taken"
    r = api.patch(f"/api/v1/collections/{cid}", json={"name": "cats"})
    assert r.status_code == 200 and r.json()["name"] == "cats"

    meme = add(sessions, store, scope, png((1, 2, 3)), "a.png")
    assert api.post(f"/api/v1/collections/{cid}/items", json={"meme_ids": [meme]}).status_code == 200
    assert api.delete(f"/api/v1/collections/{cid}").status_code == 204
    assert api.get(f"/api/v1/collections/{cid}").status_code == 404
    assert api.delete(f"/api/v1/collections/{cid}").status_code == 404
    assert counts(sessions, scope)["memes"] == 1  # deleting a collection never deletes memes
    assert api.get(f"/api/v1/memes/{meme}").status_code == 200
    assert api.get(f"/api/v1/collections/{other['id']}").status_code == 200


def test_items_keep_order_and_adds_are_all_or_nothing(api, sessions, store, scope):
    ids = [add(sessions, store, scope, png((i, 0, 0)), f"m{i}.png") for i in range(5)]
    cid = api.post("/api/v1/collections", json={"name": "ordered"}).json()["id"]
    order = [ids[3], ids[0], ids[4]]
    r = api.post(f"/api/v1/collections/{cid}/items", json={"meme_ids": order})
    assert r.status_code == 200 and r.json() == {"added": 3, "already_members": 0, "item_count": 3}
    r = api.post(f"/api/v1/collections/{cid}/items", json={"meme_ids": [ids[0], ids[1]]})
    assert r.json() == {"added": 1, "already_members": 1, "item_count": 4}
    body = api.get(f"/api/v1/collections/{cid}").json()
    assert [m["id"] for m in body["items"]] == [ids[3], ids[0], ids[4], ids[1]]
    assert body["item_count"] == 4 and body["items"][0]["display_name"] == "m3"

    missing = str(uuid.uuid4())
    r = api.post(f"/api/v1/collections/{cid}/items", json={"meme_ids": [ids[2], missing]})
    assert r.status_code == 422 and error_code(r) == "memes_not_found"
    assert r.json()["error"]["details"] == {"missing": [missing]}
    r = api.post(f"/api/v1/collections/{cid}/items", json={"meme_ids": [ids[2], "not-a-uuid", 7]})
    assert r.status_code == 422 and r.json()["error"]["details"] == {"invalid": ["not-a-uuid", 7]}
    assert api.post(f"/api/v1/collections/{cid}/items", json={"meme_ids": []}).status_code == 422
    assert api.get(f"/api/v1/collections/{cid}").json()["item_count"] == 4  # nothing half-added

    assert api.delete(f"/api/v1/collections/{cid}/items/{ids[0]}").status_code == 204
    assert api.delete(f"/api/v1/collections/{cid}/items/{ids[0]}").status_code == 404
    assert api.delete(f"/api/v1/collections/{cid}/items/nope").status_code == 404
    assert [m["id"] for m in api.get(f"/api/v1/collections/{cid}").json()["items"]] == [ids[3], ids[4], ids[1]]
    assert api.get(f"/api/v1/memes/{ids[0]}").status_code == 200


def test_another_scopes_collection_and_memes_answer_like_missing_ones(api, sessions, store, scope):
    other = new_scope(sessions, "t-other")
    try:
        foreign_meme = add(sessions, store, other, png((9, 9, 9)), "theirs.png")
        with client_for(other) as theirs:
            foreign = theirs.post("/api/v1/collections", json={"name": "shared name"}).json()["id"]
        # names are unique per scope only
        assert api.post("/api/v1/collections", json={"name": "shared name"}).status_code == 201
        for method, url in [
            ("get", f"/api/v1/collections/{foreign}"),
            ("delete", f"/api/v1/collections/{foreign}"),
            ("get", "/api/v1/collections/not-an-id"),
        ]:
            r = getattr(api, method)(url)
            assert r.status_code == 404 and error_code(r) == "not_found"
        assert api.patch(f"/api/v1/collections/{foreign}", json={"name": "x"}).status_code == 404
        mine = api.post("/api/v1/collections", json={"name": "mine"}).json()["id"]
        r = api.post(f"/api/v1/collections/{mine}/items", json={"meme_ids": [foreign_meme]})
        assert r.status_code == 422 and r.json()["error"]["details"] == {"missing": [foreign_meme]}
        assert counts(sessions, other)["memes"] == 1
    finally:
        drop_scope(sessions, other)


def test_collections_page_search_sort_and_bad_parameters(client, sessions, scope):
    """Issue 19, point 2: /collections filters by name, sorts, pages; odd parameters fall back, never 4xx/5xx."""
    from mewdex.db.models import MemeCollection

    with sessions.begin() as session:
        for name in ("alpha 100%", "beta", "alphabet"):
            session.add(MemeCollection(scope_id=scope.scope_id, name=name))
    page = client.get("/collections", params={"q": "ALPHA"})
    assert page.status_code == 200 and 'data-name="alpha 100%"' in page.text and 'data-name="alphabet"' in page.text
    assert 'data-name="beta"' not in page.text
    assert 'data-name="alpha 100%"' in client.get("/collections", params={"q": "100%"}).text
    assert 'data-name="alphabet"' not in client.get("/collections", params={"q": "100%"}).text  # % is literal
    for params in ({"sort": "bogus"}, {"page": "abc"}, {"page": "99999999999"}, {"page": "-1"}, {"created": "x"}):
        r = client.get("/collections", params=params)
        assert r.status_code == 200 and 'data-name="beta"' in r.text, params
