"""Tags (issue 43) against the real app and database: ``PATCH /api/v1/memes/{id}`` sets normalised tags
(bad ones refused with their codes, nothing written), the bulk edit is all or nothing and another
library's meme is 404, ``tag:`` / ``-tag:`` narrow the search on the API, the CLI and the assistant's
``search_memes`` tool (MCP's), a search of only ``tag:`` lists that tag's memes, a plain search finds a
meme by its tag's word (re-indexed at once on every change), and rename and merge.

One library per module: memes written directly with their contexts and keyword documents (no image
processing; the keyword leg alone ranks: no vector generation exists in these scopes)."""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import select

from conftest import client_for, drop_scope, new_scope
from mewdex.db.models import Meme, MemeTag

# name -> OCR caption; created in this order, one minute apart (the last is the newest)
CAPTIONS = {
    "cat_a": "grumpy cat says no",
    "cat_b": "grumpy cat on monday",
    "dog": "happy dog running",
    "frog": "sad frog meme",
}


def _library(sessions, scope) -> dict[str, str]:
    from mewdex.search.tags import reindex

    ids = {}
    start = datetime(2024, 1, 1, tzinfo=UTC)
    with sessions.begin() as session:
        memes = []
        for i, (name, caption) in enumerate(CAPTIONS.items()):
            sha = hashlib.sha256(f"{scope.scope_id}-{name}".encode()).hexdigest()
            meme = Meme(
                scope_id=scope.scope_id,
                storage_key=sha + ".png",
                display_name=name,
                name_source="uploaded",
                extension=".png",
                size_bytes=10,
                sha256=sha,
                provenance={},
                extensions={"image": {}},
                meme_context={"ocr_text": caption, "name_text": name},
                created_at=start + timedelta(minutes=i),
            )
            session.add(meme)
            memes.append(meme)
        session.flush()
        reindex(session, scope.scope_id, memes)
        ids = {m.display_name: str(m.id) for m in memes}
    return ids


@pytest.fixture(scope="module")
def lib(sessions):
    """``(client, scope, ids, other_ids)``: a started app answering as a library of :data:`CAPTIONS`; a
    second library (another account's) beside it."""
    scope, other = new_scope(sessions, "t-tags"), new_scope(sessions, "t-tags-other")
    ids, other_ids = _library(sessions, scope), _library(sessions, other)
    with client_for(scope) as client:
        yield client, scope, ids, other_ids
    drop_scope(sessions, scope)
    drop_scope(sessions, other)


def _tags(client, meme_id):
    return client.get(f"/api/v1/memes/{meme_id}").json()["tags"]


def _put(client, meme_id, tags):
    r = client.patch(f"/api/v1/memes/{meme_id}", json={"tags": tags})
    assert r.status_code == 200, r.text
    return r.json()["tags"]


def _search(client, query, **extra):
    r = client.post("/api/v1/search", json={"query": query, "n_results": 10, **extra})
    assert r.status_code == 200, r.text
    return [h["display_name"] for h in r.json()["results"]]


def test_patch_sets_normalised_tags_shown_in_the_meme_json(lib):
    client, _scope, ids, _ = lib
    r = client.patch(f"/api/v1/memes/{ids['frog']}", json={"tags": ["  Reaction   Face ", "ＳＡＤ", "悲伤", "sad"]})
    assert r.status_code == 200, r.text
    assert r.json()["tags"] == ["reaction face", "sad", "悲伤"]
    assert r.headers["ETag"] == f'"{r.json()["revision"]}"'
    assert _tags(client, ids["frog"]) == ["reaction face", "sad", "悲伤"]
    listed = {m["display_name"]: m["tags"] for m in client.get("/api/v1/memes").json()["items"]}
    assert listed["frog"] == ["reaction face", "sad", "悲伤"] and listed["dog"] == []
    # a rename and the tags in one PATCH; then a stale If-Match is refused
    r = client.patch(f"/api/v1/memes/{ids['frog']}", json={"display_name": "frog", "tags": ["sad"]})
    assert r.status_code == 200 and r.json()["tags"] == ["sad"]
    stale = r.json()["revision"] - 1
    r = client.patch(f"/api/v1/memes/{ids['frog']}", json={"tags": []}, headers={"If-Match": str(stale)})
    assert r.status_code == 412 and r.json()["error"]["code"] == "revision_conflict"
    assert _put(client, ids["frog"], []) == []


BAD_TAGS = [
    (["ok", "   "], "tag_empty"),
    (["x" * 65], "tag_too_long"),
    (['say "hi"'], "tag_invalid"),
    (["a,b"], "tag_invalid"),
    (["bell\x07"], "tag_invalid"),
    ([f"t{i}" for i in range(51)], "too_many_tags"),
    ([1, 2], "invalid_request"),
    ("funny", "invalid_request"),
]


def test_bad_tags_are_refused_with_their_code_and_nothing_written(lib):
    client, _scope, ids, _ = lib
    _put(client, ids["dog"], ["good boy"])
    for tags, code in BAD_TAGS:
        r = client.patch(f"/api/v1/memes/{ids['dog']}", json={"tags": tags, "display_name": "renamed"})
        assert (r.status_code, r.json()["error"]["code"]) == (422, code), (tags, r.text)
    meme = client.get(f"/api/v1/memes/{ids['dog']}").json()
    assert meme["tags"] == ["good boy"] and meme["display_name"] == "dog"  # neither half written
    assert client.patch(f"/api/v1/memes/{ids['dog']}", json={}).json()["error"]["code"] == "invalid_request"
    assert _put(client, ids["dog"], []) == []


def test_another_librarys_meme_is_404_and_the_bulk_edit_all_or_nothing(lib, sessions):
    client, scope, ids, other_ids = lib
    r = client.patch(f"/api/v1/memes/{other_ids['dog']}", json={"tags": ["mine"]})
    assert r.status_code == 404 and r.json()["error"]["code"] == "not_found"
    r = client.post("/api/v1/memes/tags", json={"ids": [ids["dog"], other_ids["dog"]], "add": ["mine"]})
    assert r.status_code == 404 and r.json()["error"]["code"] == "not_found"
    assert client.post("/api/v1/memes/tags", json={"ids": ["nope"], "add": ["x"]}).status_code == 404
    with sessions.begin() as session:  # nothing of either library was tagged
        assert session.execute(select(MemeTag).where(MemeTag.tag == "mine")).first() is None

    r = client.post("/api/v1/memes/tags", json={"ids": [ids["cat_b"], ids["cat_a"]], "add": ["Cats", "mono"]})
    assert r.status_code == 200, r.text
    assert r.json()["items"] == [
        {"id": ids["cat_b"], "tags": ["cats", "mono"]},
        {"id": ids["cat_a"], "tags": ["cats", "mono"]},
    ]
    _put(client, ids["cat_a"], [*_tags(client, ids["cat_a"]), *(f"t{i}" for i in range(48))])  # 50: full
    r = client.post("/api/v1/memes/tags", json={"ids": [ids["cat_b"], ids["cat_a"]], "add": ["one more"]})
    assert r.status_code == 422 and r.json()["error"]["code"] == "too_many_tags"
    assert "one more" not in _tags(client, ids["cat_b"])  # the meme that had room got nothing either
    r = client.post(
        "/api/v1/memes/tags",
        json={"ids": [ids["cat_a"], ids["cat_b"]], "remove": ["mono", *(f"t{i}" for i in range(48))]},
    )
    assert [i["tags"] for i in r.json()["items"]] == [["cats"], ["cats"]]
    r = client.post("/api/v1/memes/tags", json={"ids": [ids["cat_a"]], "add": [""]})
    assert r.status_code == 422 and r.json()["error"]["code"] == "tag_empty"
    client.post("/api/v1/memes/tags", json={"ids": [ids["cat_a"], ids["cat_b"]], "remove": ["cats"]})


def test_tag_narrows_search_excludes_and_lists(lib, mewdex_env, sessions):
    """``tag:`` keeps only tagged memes with the other words ranking within them, ``-tag:`` excludes,
    ``tag:`` alone lists newest first, on the API, the CLI and the assistant's ``search_memes`` tool
    (MCP's); a plain search finds a meme by its tag word, and stops when the tag goes."""
    from mewdex.assistant import tools

    client, scope, ids, _ = lib
    _put(client, ids["cat_a"], ["keeper", "two words"])
    _put(client, ids["dog"], ["keeper"])
    assert sorted(_search(client, "grumpy cat")) == ["cat_a", "cat_b"]
    assert _search(client, "tag:keeper grumpy cat") == ["cat_a"]
    assert _search(client, 'tag:"Two  Words" grumpy') == ["cat_a"]
    assert _search(client, "-tag:keeper grumpy cat") == ["cat_b"]
    assert _search(client, "tag:keeper") == ["dog", "cat_a"]  # only tags: newest first
    assert _search(client, 'tag:keeper -tag:"two words"') == ["dog"]
    assert _search(client, "tag:nobody-has-it") == []
    assert _search(client, "grumpy", tags=["KEEPER"]) == ["cat_a"]  # the filter field, folded the same way
    assert _search(client, "keeper")[:2] in (["cat_a", "dog"], ["dog", "cat_a"])  # a tag is a keyword

    found = json.loads(mewdex_env.cli("search", "tag:keeper grumpy", "--json", scope=scope.scope_id, check=True).stdout)
    assert [h["display_name"] for h in found["results"]] == ["cat_a"]
    assert [h["display_name"] for h in tools.search_memes(sessions, scope, 'send me tag:"two words" cat')] == ["cat_a"]
    assert [h["display_name"] for h in tools.search_memes(sessions, scope, "-tag:keeper cat")] == ["cat_b"]

    _put(client, ids["dog"], [])  # re-indexed at once: the tag word no longer finds it
    assert _search(client, "keeper") == ["cat_a"]
    _put(client, ids["cat_a"], [])


def test_tag_list_rename_and_merge(lib, sessions):
    from mewdex.pipeline.keyword_rebuild import rebuild_keyword_documents

    client, scope, ids, _ = lib
    client.post("/api/v1/memes/tags", json={"ids": [ids["cat_a"], ids["cat_b"]], "add": ["kitty"]})
    client.post("/api/v1/memes/tags", json={"ids": [ids["cat_a"], ids["dog"]], "add": ["pet"]})
    client.post("/api/v1/memes/tags", json={"ids": [ids["frog"]], "add": ["猫猫"]})
    assert client.get("/api/v1/tags").json()["items"] == [
        {"name": "kitty", "count": 2},
        {"name": "pet", "count": 2},
        {"name": "猫猫", "count": 1},
    ]
    assert client.get("/api/v1/tags", params={"prefix": "P"}).json()["items"] == [{"name": "pet", "count": 2}]

    r = client.patch("/api/v1/tags/kitty", json={"name": "Cat Pics"})
    assert r.status_code == 200 and r.json() == {"name": "cat pics", "count": 2, "merged": False}
    assert _search(client, "tag:kitty") == [] and sorted(_search(client, 'tag:"cat pics"')) == ["cat_a", "cat_b"]
    assert "cat_b" in _search(client, "pics")  # the new name is indexed, the old one gone
    assert "cat_b" not in _search(client, "kitty")

    r = client.patch("/api/v1/tags/%E7%8C%AB%E7%8C%AB", json={"name": "pet"})  # 猫猫 merges into pet
    assert r.status_code == 200 and r.json() == {"name": "pet", "count": 3, "merged": True}
    r = client.patch("/api/v1/tags/pet", json={"name": "cat pics"})  # cat_a had both: it keeps one
    assert r.json() == {"name": "cat pics", "count": 4, "merged": True}
    assert _tags(client, ids["cat_a"]) == ["cat pics"]
    assert client.get("/api/v1/tags").json()["items"] == [{"name": "cat pics", "count": 4}]
    rebuild_keyword_documents(sessions, scope.scope_id)  # a keyword-recipe rebuild keeps the tags' words
    assert sorted(_search(client, "pics")) == ["cat_a", "cat_b", "dog", "frog"]

    r = client.patch("/api/v1/tags/nothing-here", json={"name": "x"})
    assert r.status_code == 404 and r.json()["error"]["code"] == "not_found"
    r = client.patch("/api/v1/tags/cat%20pics", json={"name": "  "})
    assert r.status_code == 422 and r.json()["error"]["code"] == "tag_empty"


def test_suggested_tags_name_the_folder_and_caption_words_never_a_tag_it_has(lib, sessions):
    import uuid

    from sqlalchemy import update

    client, _scope, ids, other_ids = lib
    with sessions.begin() as session:
        session.execute(
            update(Meme)
            .where(Meme.id == uuid.UUID(ids["dog"]))
            .values(provenance={"source": "folder_import", "root": "/x/memes", "relative_path": "Good Dogs/1.png"})
        )
    before = _tags(client, ids["dog"])
    _put(client, ids["dog"], ["happy"])
    try:
        r = client.get(f"/api/v1/memes/{ids['dog']}/tag-suggestions", params={"lang": "en"})
        assert r.status_code == 200, r.text
        got = [(s["name"], s["source"]) for s in r.json()["items"]]
        assert got[0] == ("good dogs", "folder") and ("running", "caption") in got
        assert "happy" not in [name for name, _ in got]  # a tag it has is never suggested
        assert client.get(f"/api/v1/memes/{other_ids['dog']}/tag-suggestions").status_code == 404
    finally:
        _put(client, ids["dog"], before)
