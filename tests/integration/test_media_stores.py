"""Uploads, media, thumbnails and deletes through the real app with either blob store (the local one,
and the S3 store on a local S3-protocol server): the bytes land in the configured store, HTTP
``Range`` on the media routes answers the same (single, suffix, multiple ranges, 416, ``If-Range``,
``HEAD``), deletes remove the objects, and an unreachable object store is a 503, not a 500."""

from __future__ import annotations

import hashlib
import uuid

from sqlalchemy import select

from conftest import client_for
from library_helpers import check_storage_invariants, noise_png, png
from mewdex.db.models import Meme, Scope
from mewdex.library import thumbnails as th


def namespace(sessions, scope) -> str:
    with sessions.begin() as session:
        return str(session.get(Scope, scope.scope_id).storage_namespace)


def test_media_ranges_thumbnails_and_delete(app_store, sessions, scope):
    big = noise_png(400_000)
    with client_for(scope) as api:
        r = api.post("/api/v1/memes", files=[("files", ("big.png", big, "image/png"))])
        assert r.status_code == 201, r.text
        meme_id = r.json()["results"][0]["meme"]["id"]
        ns = namespace(sessions, scope)
        key = hashlib.sha256(big).hexdigest() + ".png"
        assert list(app_store.iter_keys(ns)) == [key]  # in the configured store

        whole = api.get(f"/media/{meme_id}")
        assert whole.status_code == 200 and whole.content == big
        assert whole.headers["content-length"] == str(len(big)) and whole.headers["accept-ranges"] == "bytes"
        assert whole.headers["content-type"] == "image/png"
        etag = whole.headers["etag"]

        part = api.get(f"/media/{meme_id}", headers={"Range": "bytes=1000-1999"})
        assert part.status_code == 206 and part.content == big[1000:2000]
        assert part.headers["content-range"] == f"bytes 1000-1999/{len(big)}"
        tail = api.get(f"/media/{meme_id}", headers={"Range": "bytes=-100"})
        assert tail.status_code == 206 and tail.content == big[-100:]
        several = api.get(f"/media/{meme_id}", headers={"Range": "bytes=0-9,300000-300009"})
        assert several.status_code == 206
        assert several.headers["content-type"].startswith("multipart/byteranges; boundary=")
        assert big[:10] in several.content and big[300000:300010] in several.content
        beyond = api.get(f"/media/{meme_id}", headers={"Range": f"bytes={len(big) + 5}-"})
        assert beyond.status_code == 416 and beyond.headers["content-range"] == f"bytes */{len(big)}"
        stale = api.get(f"/media/{meme_id}", headers={"Range": "bytes=0-9", "If-Range": '"something-else"'})
        assert stale.status_code == 200 and stale.content == big
        fresh = api.get(f"/media/{meme_id}", headers={"Range": "bytes=0-9", "If-Range": etag})
        assert fresh.status_code == 206 and fresh.content == big[:10]
        head = api.head(f"/media/{meme_id}")
        assert head.status_code == 200 and head.content == b"" and head.headers["content-length"] == str(len(big))
        assert api.get(f"/media/{meme_id}", headers={"If-None-Match": etag}).status_code == 304

        # Before the worker made thumbnails the original stands in; then the WEBP is served from the store.
        stand_in = api.get(f"/media/{meme_id}/thumbnail")
        assert stand_in.status_code == 200 and stand_in.content == big
        assert stand_in.headers["cache-control"] == "no-store"
        with sessions.begin() as session:
            meme = session.execute(select(Meme).where(Meme.scope_id == scope.scope_id)).scalar_one()
            th.store_thumbnails(session, app_store, ns, meme, th.make_thumbnails(big))
        thumb = api.get(f"/media/{meme_id}/thumbnail")
        assert thumb.status_code == 200 and thumb.headers["content-type"] == "image/webp"
        thumb_keys = list(app_store.iter_keys(th.thumbnail_namespace(ns)))
        assert len(thumb_keys) == 1
        assert thumb.content == app_store.read_bytes(th.thumbnail_namespace(ns), thumb_keys[0])
        thumb_part = api.get(f"/media/{meme_id}/thumbnail", headers={"Range": "bytes=2-5"})
        assert thumb_part.status_code == 206 and thumb_part.content == thumb.content[2:6]
        check_storage_invariants(sessions, app_store, scope)

        # A blob gone behind the app's back is a 404 blob_missing, not an error.
        app_store.delete(ns, key)
        gone = api.get(f"/media/{meme_id}")
        assert gone.status_code == 404 and gone.json()["error"]["code"] == "blob_missing"
        app_store.put(ns, key, big)

        assert api.delete(f"/api/v1/memes/{meme_id}").status_code == 204  # to the trash
        assert api.delete(f"/api/v1/trash/{meme_id}").status_code == 204  # for good
    assert list(app_store.iter_keys(ns)) == []
    assert list(app_store.iter_keys(th.thumbnail_namespace(ns))) == []
    check_storage_invariants(sessions, app_store, scope)


def test_an_unreachable_object_store_is_a_503_and_leaves_nothing_half_done(s3_server, settings_env, sessions, scope):
    from mewdex.storage import blob_store
    from s3_helpers import free_port

    prefix = f"down-{uuid.uuid4().hex[:12]}"
    settings_env(**s3_server.env(prefix))
    blob_store.cache_clear()
    try:
        with client_for(scope) as api:
            ok = api.post("/api/v1/memes", files=[("files", ("a.png", png(1), "image/png"))])
            assert ok.status_code == 201, ok.text
            meme_id = ok.json()["results"][0]["meme"]["id"]
            settings_env(MEWDEX_S3_ENDPOINT_URL=f"http://127.0.0.1:{free_port()}")  # the store goes away
            blob_store.cache_clear()
            blob_store().client.meta.config.retries["max_attempts"] = 1
            media = api.get(f"/media/{meme_id}")
            assert media.status_code == 503 and media.json()["error"]["code"] == "blob_store_unavailable"
            assert media.headers["retry-after"]
            r = api.post("/api/v1/memes", files=[("files", ("b.png", png(2), "image/png"))])
            assert r.status_code == 503, r.text
            assert r.json()["error"]["code"] == "blob_store_unavailable"
            assert r.json()["results"][0]["status"] == "failed"
            assert "secret" not in r.text
        settings_env(MEWDEX_S3_ENDPOINT_URL=s3_server.endpoint)  # back: recovery finishes what was left open
        blob_store.cache_clear()
        from mewdex.storage import journal

        with sessions.begin() as session:
            journal.recover(session, blob_store(), older_than_seconds=0)
        check_storage_invariants(sessions, blob_store(), scope)
        with sessions.begin() as session:
            assert [
                str(m) for m in session.execute(select(Meme.id).where(Meme.scope_id == scope.scope_id)).scalars()
            ] == [meme_id]
    finally:
        blob_store.cache_clear()
