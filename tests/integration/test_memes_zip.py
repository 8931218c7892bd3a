"""``POST /api/v1/memes/zip`` (issue 43, bulk edit): a selection of the caller's memes as one streamed
``mewdex-collection`` ZIP holding exactly those files, in request order; another scope's meme, a trashed
one or a malformed id is 404 with nothing streamed; no ids or more than 500 is 422. The real app, database
and blob store."""

from __future__ import annotations

import hashlib
import io
import json
import uuid
import zipfile

import pytest

from conftest import client_for, drop_scope, new_scope
from library_helpers import png
from mewdex.library.memes import add_image


@pytest.fixture(scope="module")
def scopes(sessions):
    mine, other = new_scope(sessions, "zip-a"), new_scope(sessions, "zip-b")
    yield mine, other
    drop_scope(sessions, mine)
    drop_scope(sessions, other)


@pytest.fixture(scope="module")
def memes(sessions, store, scopes):
    """Three memes of the first scope (two share a name) and one of the other's: ``{key: (id, bytes)}``."""
    mine, other = scopes
    out = {}
    for key, scope, name, seed in (
        ("a", mine, "same name.png", 7101),
        ("b", mine, "same name.png", 7102),
        ("c", mine, "third.png", 7103),
        ("theirs", other, "theirs.png", 7104),
    ):
        data = png(seed)
        result = add_image(sessions, store, scope, data, filename=name, provenance={}, process=False)
        assert result.status == "created"
        out[key] = (str(result.meme_id), data)
    return out


@pytest.fixture(scope="module")
def client(scopes):
    with client_for(scopes[0]) as c:
        yield c


def test_zip_holds_the_selection_only_in_order(client, memes):
    ids = [memes["c"][0], memes["a"][0], memes["b"][0], memes["a"][0]]  # a repeated id counts once
    r = client.post("/api/v1/memes/zip", json={"ids": ids})
    assert r.status_code == 200, r.text
    assert r.headers["content-type"] == "application/zip"
    assert r.headers["content-disposition"].startswith('attachment; filename="mewdex ')
    archive = zipfile.ZipFile(io.BytesIO(r.content))
    manifest = json.loads(archive.read("manifest.json"))
    assert manifest["format"] == "mewdex-collection" and manifest["version"] == 1
    files = [item["file"] for item in manifest["items"]]
    assert files == ["images/third.png", "images/same name.png", "images/same name (1).png"]
    assert sorted(archive.namelist()) == sorted(["manifest.json", *files])
    for item, key in zip(manifest["items"], ("c", "a", "b"), strict=True):
        data = archive.read(item["file"])
        assert data == memes[key][1]
        assert item["sha256"] == hashlib.sha256(data).hexdigest()


@pytest.mark.parametrize(
    "ids,status,code",
    [
        (["theirs"], 404, "not_found"),  # another account's meme: as if it did not exist
        ([str(uuid.uuid4())], 404, "not_found"),
        (["not-a-uuid"], 404, "not_found"),
        ([], 422, "invalid_request"),
        ([str(uuid.uuid4()) for _ in range(501)], 422, "invalid_request"),
    ],
)
def test_refusals(client, memes, ids, status, code):
    ids = [memes["a"][0], *(memes[i][0] if i in memes else i for i in ids)] if ids else []
    if len(ids) > 500:
        ids = ids[:501]
    r = client.post("/api/v1/memes/zip", json={"ids": ids})
    assert r.status_code == status, r.text
    body = r.json()
    assert body["error"]["code"] == code
    if status == 404 and ids[-1] == memes["theirs"][0]:
        assert body["error"]["details"]["missing"] == [memes["theirs"][0]]


def test_a_trashed_meme_is_not_found(client, memes):
    victim = memes["c"][0]
    assert client.delete(f"/api/v1/memes/{victim}").status_code == 204
    try:
        r = client.post("/api/v1/memes/zip", json={"ids": [memes["a"][0], victim]})
        assert r.status_code == 404 and r.json()["error"]["details"]["missing"] == [victim]
    finally:
        assert client.post(f"/api/v1/trash/{victim}/restore").status_code in (200, 204)


def test_a_clip_named_with_its_extension_is_saved_under_that_name_once(client, sessions, store, scopes):
    from clip_helpers import clip

    made = add_image(
        sessions, store, scopes[0], clip("webm", "libvpx", "HOP"), filename="hop.webm", provenance={}, process=False
    )
    meme_id = str(made.meme_id)
    assert client.patch(f"/api/v1/memes/{meme_id}", json={"display_name": "dance.webm"}).status_code == 200
    r = client.post("/api/v1/memes/zip", json={"ids": [meme_id]})
    assert r.status_code == 200, r.text
    assert [i["file"] for i in json.loads(zipfile.ZipFile(io.BytesIO(r.content)).read("manifest.json"))["items"]] == [
        "images/dance.webm"
    ]
    download = client.get(f"/media/{meme_id}", params={"download": 1})
    assert download.headers["content-disposition"].endswith("filename*=UTF-8''dance.webm")
