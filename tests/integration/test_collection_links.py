"""Issue 43, item 6: public links to a collection. With ``MEWDEX_AUTH=required`` a link's URL shows the
collection's gallery without a sign-in (HTML without scripts), searches inside it (only its live
memes, never another of the owner's), serves its memes' files and no other meme's, dies at once when
deleted or expired (the same 404 as an unknown token), lists no tokens, is the owner's alone (another
scope gets 404 for the collection's link endpoints) and is rate limited per address. One owner scope,
one owner client and one signed-out client for the module."""

from __future__ import annotations

import os
import re
import uuid
from datetime import timedelta

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import text, update

from conftest import LOCAL_CLIENT, app_for, client_for, drop_scope, new_scope
from library_helpers import png
from mewdex.db.models import CollectionLink, Meme, utcnow
from mewdex.library import collections
from mewdex.library.memes import add_image
from mewdex.pipeline.context import build_meme_context
from mewdex.pipeline.stages import write_keyword_document


@pytest.fixture(scope="module")
def required(mewdex_env, sessions):
    from mewdex.config import get_settings

    saved = os.environ.get("MEWDEX_AUTH")
    os.environ["MEWDEX_AUTH"] = "required"
    get_settings.cache_clear()
    _forget_public_requests(sessions)
    yield
    if saved is None:
        os.environ.pop("MEWDEX_AUTH", None)
    else:
        os.environ["MEWDEX_AUTH"] = saved
    get_settings.cache_clear()


@pytest.fixture(scope="module")
def world(required, sessions, store):
    """``(owner scope, other scope, owner client, other client, public client, ids)``."""
    owner, other = new_scope(sessions, "share"), new_scope(sessions, "nosy")

    def meme(seed: int, ocr: str, scope=owner) -> str:
        result = add_image(sessions, store, scope, png(seed), filename=f"m{seed}.png", provenance={}, process=False)
        with sessions.begin() as session:
            row = session.get_one(Meme, uuid.UUID(result.meme_id))
            row.meme_context = build_meme_context(
                relative_path=f"m{seed}.png", display_name=row.display_name, ocr_lines=[{"text": ocr, "score": 0.95}]
            )
            row.context_status = "ready"
            write_keyword_document(session, row)
        return result.meme_id

    ids = {
        "in_cat": meme(4301, "zebracorn dances at noon"),
        "in_dog": meme(4302, "sleepy walrus on a sofa"),
        "outside": meme(4303, "zebracorn dances at midnight"),  # the owner's, not in the collection
        "trashed": meme(4304, "zebracorn in the bin"),
        "others": meme(4305, "zebracorn of someone else", scope=other),
    }
    with sessions.begin() as session:
        c = collections.create(session, owner, "Shared zoo")
        collections.add_members(session, owner, c.id, [ids["in_cat"], ids["in_dog"], ids["trashed"]])
        session.execute(update(Meme).where(Meme.id == uuid.UUID(ids["trashed"])).values(deleted_at=utcnow()))
        ids["collection"] = str(c.id)
    with client_for(owner) as oc, client_for(other) as xc:
        # The scope is given (dependency override); with sign-in required a write must still carry a
        # credential past the body guard, which never reads it.
        for c in (oc, xc):
            c.headers["Authorization"] = "Bearer overridden"
        public = TestClient(app_for(None), **LOCAL_CLIENT, raise_server_exceptions=False)
        with public:
            yield owner, other, oc, xc, public, ids
    drop_scope(sessions, owner)
    drop_scope(sessions, other)


def _token(url: str) -> str:
    match = re.search(r"/s/([A-Za-z0-9_-]+)$", url)
    assert match, url
    return match.group(1)


def _cards(html: str) -> set[str]:
    return set(re.findall(r'data-meme="([0-9a-f-]{36})"', html))


def test_link_shows_searches_serves_and_dies(world):
    _owner, _other, oc, _xc, public, ids = world
    cid = ids["collection"]
    assert public.get("/api/v1/collections").status_code == 401  # sign-in is required here

    r = oc.post(f"/api/v1/collections/{cid}/links", json={"expires_in_days": 7})
    assert r.status_code == 201, r.text
    link = r.json()
    assert set(link) >= {"id", "url", "expires_at"} and link["show_owner"] is False
    token = _token(link["url"])
    assert len(token) >= 43

    page = public.get(f"/s/{token}", headers={"Accept": "text/html"})
    assert page.status_code == 200, page.text
    assert "<script" not in page.text and "Shared zoo" in page.text
    assert _cards(page.text) == {ids["in_cat"], ids["in_dog"]}  # never the trashed one
    assert (
        page.headers["referrer-policy"] in ("same-origin", "no-referrer") and "noindex" in page.headers["x-robots-tag"]
    )
    assert "/media/" + ids["in_cat"] not in page.text.replace(f"/s/{token}/media/", "")  # only link-scoped URLs

    found = public.get(f"/s/{token}", params={"q": "zebracorn"})
    assert found.status_code == 200
    assert _cards(found.text) == {ids["in_cat"]}  # not the owner's other meme, the trashed one or another's

    media = public.get(f"/s/{token}/media/{ids['in_cat']}", params={"download": 1})
    assert media.status_code == 200 and media.content == png(4301)
    assert media.headers["content-disposition"].startswith("attachment")
    for other_meme in ("outside", "trashed", "others"):
        assert public.get(f"/s/{token}/media/{ids[other_meme]}").status_code == 404
    assert public.get(f"/media/{ids['in_cat']}").status_code == 401  # the owner's own URLs stay closed

    listed = oc.get(f"/api/v1/collections/{cid}/links").json()["links"]
    assert [x["id"] for x in listed] == [link["id"]] and token not in str(listed)

    assert oc.delete(f"/api/v1/collections/{cid}/links/{link['id']}").status_code == 204
    assert public.get(f"/s/{token}").status_code == 404
    assert public.get(f"/s/{token}/media/{ids['in_cat']}").status_code == 404
    assert oc.delete(f"/api/v1/collections/{cid}/links/{link['id']}").status_code == 404


def test_dead_and_unknown_tokens_answer_alike(world, sessions):
    _owner, _other, oc, _xc, public, ids = world
    cid = ids["collection"]
    link = oc.post(f"/api/v1/collections/{cid}/links", json={"show_owner": True}).json()
    token = _token(link["url"])
    assert public.get(f"/s/{token}").status_code == 200
    with sessions.begin() as session:
        session.execute(
            update(CollectionLink)
            .where(CollectionLink.id == uuid.UUID(link["id"]))
            .values(expires_at=utcnow() - timedelta(seconds=1))
        )
    answers = [
        public.get(f"/s/{t}", headers={"Accept": "application/json"})
        for t in (token, token[:-1] + ("A" if token[-1] != "A" else "B"), "x", "a" * 43)
    ]
    assert {a.status_code for a in answers} == {404}
    assert len({a.json()["error"]["code"] for a in answers}) == 1
    assert link["id"] not in [x["id"] for x in oc.get(f"/api/v1/collections/{cid}/links").json()["links"]]

    for bad in (0, 366, "7", 1.5, True):
        r = oc.post(f"/api/v1/collections/{cid}/links", json={"expires_in_days": bad})
        assert r.status_code == 422 and r.json()["error"]["code"] == "expiry_invalid", (bad, r.text)


def test_another_scope_gets_404_for_the_links(world):
    _owner, _other, oc, xc, _public, ids = world
    cid = ids["collection"]
    link = oc.post(f"/api/v1/collections/{cid}/links", json={}).json()
    assert xc.post(f"/api/v1/collections/{cid}/links", json={}).status_code == 404
    assert xc.get(f"/api/v1/collections/{cid}/links").status_code == 404
    assert xc.delete(f"/api/v1/collections/{cid}/links/{link['id']}").status_code == 404
    assert oc.delete(f"/api/v1/collections/{cid}/links/{link['id']}").status_code == 204


def _forget_public_requests(sessions) -> None:
    """The public-link counts per address (``share:…`` rows; every test client is one address)."""
    with sessions.begin() as session:
        session.execute(text("DELETE FROM login_failures WHERE key LIKE 'share:%'"))


def test_public_requests_are_rate_limited(world, sessions):
    from mewdex.config import get_settings

    _owner, _other, _oc, _xc, public, _ids = world
    os.environ["MEWDEX_SHARE_MAX_PER_MINUTE"] = "3"
    get_settings.cache_clear()
    _forget_public_requests(sessions)
    try:
        codes = [public.get("/s/" + "b" * 43).status_code for _ in range(4)]
        assert codes == [404, 404, 404, 429]
        assert 1 <= int(public.get("/s/" + "b" * 43).headers["Retry-After"]) <= 60
    finally:
        os.environ.pop("MEWDEX_SHARE_MAX_PER_MINUTE")
        get_settings.cache_clear()
        _forget_public_requests(sessions)


def test_a_disabled_owners_links_answer_404(required, sessions):
    from accounts_helpers import delete_users, own_scope_users
    from mewdex.db.models import User
    from mewdex.dto.scopes import ScopeContext
    from mewdex.library import sharing

    with sessions.begin() as session:
        (user,), made = own_scope_users(session, ["linker"], role="user")
        scope = ScopeContext(user.scope_id)
        collection = collections.create(session, scope, "Mine")
        _link, token = sharing.create_link(session, scope, collection.id)
    public = TestClient(app_for(None), **LOCAL_CLIENT, raise_server_exceptions=False)
    try:
        with public:
            assert public.get(f"/s/{token}").status_code == 200
            with sessions.begin() as session:
                session.execute(update(User).where(User.user_id == user.user_id).values(disabled=True))
            assert public.get(f"/s/{token}").status_code == 404
    finally:
        delete_users(sessions, made)


def test_the_gallery_grid_shows_link_scoped_thumbnails_and_originals_only_when_opened(world, sessions, store):
    """The grid's pictures are the thumbnail store's stills through the link
    (``/s/{token}/media/{id}/thumbnail``); the original goes out only when a meme is opened or
    downloaded. A meme whose thumbnail the worker has not made yet shows its original (``no-store``);
    a meme outside the collection, or a deleted link, is 404."""
    from mewdex.library import thumbnails as th
    from mewdex.library.scopes import storage_namespace

    owner, _other, oc, _xc, public, ids = world
    with sessions.begin() as session:
        namespace = storage_namespace(session, owner.scope_id)
        meme = session.get_one(Meme, uuid.UUID(ids["in_cat"]))
        th.store_thumbnails(session, store, namespace, meme, th.make_thumbnails(png(4301)))
        still = th.current_thumbnail(session, meme, th.STILL_PROFILE)
        assert still is not None
        still_bytes = store.read_bytes(th.thumbnail_namespace(namespace), still.output_key)
    link = oc.post(f"/api/v1/collections/{ids['collection']}/links", json={"expires_in_days": 1}).json()
    token = _token(link["url"])
    page = public.get(f"/s/{token}").text
    pictures = set(re.findall(r'<img src="([^"]+)"', page))
    assert pictures == {f"/s/{token}/media/{ids[k]}/thumbnail" for k in ("in_cat", "in_dog")}
    assert f'href="/s/{token}/media/{ids["in_cat"]}"' in page  # opening a card gets the original

    r = public.get(f"/s/{token}/media/{ids['in_cat']}/thumbnail")
    assert r.status_code == 200 and r.content == still_bytes and r.content != png(4301)
    assert r.headers["content-type"] == "image/webp" and "noindex" in r.headers["x-robots-tag"]
    assert (
        public.get(
            f"/s/{token}/media/{ids['in_cat']}/thumbnail", headers={"If-None-Match": r.headers["etag"]}
        ).status_code
        == 304
    )
    fallback = public.get(f"/s/{token}/media/{ids['in_dog']}/thumbnail")
    assert (
        fallback.status_code == 200
        and fallback.content == png(4302)
        and fallback.headers["cache-control"] == "no-store"
    )
    for other_meme in ("outside", "trashed", "others"):
        assert public.get(f"/s/{token}/media/{ids[other_meme]}/thumbnail").status_code == 404
    assert oc.delete(f"/api/v1/collections/{ids['collection']}/links/{link['id']}").status_code == 204
    assert public.get(f"/s/{token}/media/{ids['in_cat']}/thumbnail").status_code == 404
