"""Library management over HTTP against the real app, database and blob store: uploads (UP-01
streaming limits included), listing with cursor paging and filters, rename with optimistic
concurrency, delete (rows, files, shared blobs)."""

from __future__ import annotations

import hashlib
import os
import tempfile

import pytest
from sqlalchemy import select, text

from conftest import app_for, client_for
from library_helpers import asgi_post, check_storage_invariants, multipart, noise_png, png
from mewdex.db.models import ImageProcessingJob, ImageStageTask, Meme, Scope, StorageOperation
from mewdex.library import collections

MiB = 1024 * 1024


@pytest.fixture
def app(scope):
    """The real app answering as the test's scope, not started (for raw ASGI calls)."""
    return app_for(scope)


def upload(client, files, **fields):
    return client.post(
        "/api/v1/memes", files=[("files", (name, data, "image/png")) for name, data in files], data=fields
    )


def namespace(sessions, scope) -> str:
    with sessions.begin() as session:
        return str(session.get(Scope, scope.scope_id).storage_namespace)


# ---------------------------------------------------------------- upload


def test_upload_reports_each_file_and_starts_processing(client, sessions, store, scope):
    r = upload(
        client,
        [
            ("one.png", png(1)),
            ("bad.png", b"\x89PNG\r\n\x1a\nnot really"),
            ("two.png", png(2)),
            ("again.png", png(1)),
            ("notes.txt", b"hello, this is text"),
        ],
    )
    assert r.status_code == 201, r.text
    results = r.json()["results"]
    assert [(x["filename"], x["status"]) for x in results] == [
        ("one.png", "created"),
        ("bad.png", "rejected"),
        ("two.png", "created"),
        ("again.png", "duplicate"),
        ("notes.txt", "rejected"),
    ]
    assert results[1]["error"]["code"] == "image_corrupt" and results[1]["error"]["status"] == 422
    assert results[4]["error"] == {
        "code": "unsupported_media_type",
        "message": results[4]["error"]["message"],
        "status": 415,
    }
    created = results[0]["meme"]
    assert created["display_name"] == "one" and created["sha256"] == hashlib.sha256(png(1)).hexdigest()
    assert created["job"]["status"] == "queued"
    assert created["stages"]["visual"]["status"] == "queued"
    assert {s["status"] for s in created["stages"].values()} <= {"queued", "skipped"}
    assert results[3]["meme"]["id"] == created["id"]
    assert client.get(f"/media/{created['id']}").content == png(1)
    check_storage_invariants(sessions, store, scope)


def test_all_duplicates_answer_200(client):
    assert upload(client, [("a.png", png(3))]).status_code == 201
    r = upload(client, [("b.png", png(3)), ("c.png", png(3))])
    assert r.status_code == 200 and [x["status"] for x in r.json()["results"]] == ["duplicate", "duplicate"]


@pytest.mark.parametrize(
    "data,status,code",
    [
        (b"plain text, no image", 415, "unsupported_media_type"),
        (b"GIF89a\x01\x00garbage", 422, "image_corrupt"),
    ],
)
def test_the_only_file_rejected_answers_its_own_status(client, sessions, store, scope, data, status, code):
    r = upload(client, [("x.png", data)])
    assert r.status_code == status, r.text
    body = r.json()
    assert body["error"]["code"] == code and body["results"][0]["status"] == "rejected"
    check_storage_invariants(sessions, store, scope)


def test_upload_request_errors(client):
    r = client.post("/api/v1/memes", json={"files": []})
    assert r.status_code == 415 and r.json()["error"]["code"] == "unsupported_media_type"
    r = client.post("/api/v1/memes", data={"auto_name": "true"}, files=[("other", ("x.png", png(4), "image/png"))])
    assert r.status_code == 422
    body, ctype = multipart([], {"auto_name": "1"})
    r = client.post("/api/v1/memes", content=body, headers={"Content-Type": ctype})
    assert r.status_code == 422 and r.json()["error"]["code"] == "no_files"
    r = upload(client, [(f"{i}.png", png(100 + i)) for i in range(21)])
    assert r.status_code == 422 and r.json()["error"]["code"] == "too_many_files"
    r = upload(client, [("a.png", png(5))], auto_name="maybe")
    assert r.status_code == 422
    truncated, ctype = multipart([("a.png", png(6))])
    r = client.post("/api/v1/memes", content=truncated[:-30], headers={"Content-Type": ctype})
    assert r.status_code == 422 and r.json()["error"]["code"] == "invalid_request"


def test_upload_options_auto_name_and_collection(client, sessions, scope):
    with sessions.begin() as session:
        collection_id = collections.get_or_create(session, scope, "favourites").id
    r = upload(client, [("x.png", png(7))], auto_name="true", collection_id=str(collection_id))
    assert r.status_code == 201, r.text
    meme = r.json()["results"][0]["meme"]
    assert meme["stages"]["auto_rename"]["planned"] is True
    with sessions.begin() as session:
        assert session.execute(select(ImageProcessingJob.auto_name)).scalars().first() is not None
        job = session.execute(
            select(ImageProcessingJob).where(ImageProcessingJob.scope_id == scope.scope_id)
        ).scalar_one()
        assert job.auto_name is True
    listed = client.get("/api/v1/memes", params={"collection_id": str(collection_id)}).json()["items"]
    assert [m["id"] for m in listed] == [meme["id"]]
    r = upload(client, [("y.png", png(8))], collection_id="00000000-0000-0000-0000-000000000000")
    assert r.status_code == 404


# ---------------------------------------------------------------- UP-01: streaming limits


@pytest.mark.parametrize("mode", ["true_length", "no_length", "false_small_length"])
def test_up01_oversize_upload_is_413_after_reading_at_most_limit_plus_a_chunk(
    app, settings_env, scope, sessions, store, mode, tmp_path, monkeypatch
):
    # The spooled upload's temporary files go to a folder of this test's (the machine-wide one also
    # holds what other processes, e.g. a package install beside the suite, create meanwhile).
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    settings_env(MEWDEX_MAX_UPLOAD_BYTES=str(2 * MiB))
    body, ctype = multipart([("big.png", noise_png(3 * MiB))])
    headers = {"content-type": ctype}
    if mode == "true_length":
        headers["content-length"] = str(len(body))
    elif mode == "false_small_length":
        headers["content-length"] = "1000"
    before = set(os.listdir(tempfile.gettempdir()))
    chunk = 64 * 1024
    r = asgi_post(app, "/api/v1/memes", body, headers, chunk=chunk)
    assert r["status"] == 413 and r["json"]["error"]["code"] == "upload_too_large", r
    assert r["received"] <= 2 * MiB + 2 * chunk + 1024  # the limit, the multipart head, one chunk
    assert set(os.listdir(tempfile.gettempdir())) - before == set()
    check_storage_invariants(sessions, store, scope)


def test_up01_request_limit_holds_over_many_small_files(app, monkeypatch, scope):
    from mewdex.web.routers import memes as router

    monkeypatch.setattr(router, "MAX_REQUEST_BYTES", 256 * 1024)
    body, ctype = multipart([(f"{i}.png", png(200 + i, size=(120, 120))) for i in range(12)])
    assert len(body) > 300 * 1024
    for headers in ({"content-type": ctype}, {"content-type": ctype, "content-length": str(len(body))}):
        r = asgi_post(app, "/api/v1/memes", body, headers, chunk=16 * 1024)
        assert r["status"] == 413 and r["json"]["error"]["details"]["limit"] == "request"
        assert r["received"] <= 256 * 1024 + 16 * 1024


def test_a_true_content_length_over_the_request_limit_is_refused_before_reading(app):
    body, ctype = multipart([("a.png", png(250))])
    r = asgi_post(app, "/api/v1/memes", body, {"content-type": ctype, "content-length": str(300 * MiB)})
    assert r["status"] == 413 and r["json"]["error"]["details"]["limit"] == "request"
    assert r["received"] == 0


def test_up01_a_19_mib_image_still_works(app, sessions, store, scope):
    data = noise_png(19 * MiB)
    assert 19 * MiB <= len(data) <= 20 * MiB
    body, ctype = multipart([("big.png", data)])
    r = asgi_post(app, "/api/v1/memes", body, {"content-type": ctype}, chunk=1024 * 1024)
    assert r["status"] == 201, r
    assert r["json"]["results"][0]["meme"]["size_bytes"] == len(data)
    check_storage_invariants(sessions, store, scope)


# ---------------------------------------------------------------- listing


def test_listing_pages_through_every_sort_without_gaps(client, sessions, scope):
    names = ["delta", "Alpha", "charlie", "bravo", "echo"]
    r = upload(client, [(f"{n}.png", png(300 + i)) for i, n in enumerate(names)])
    assert r.status_code == 201
    ids = {x["meme"]["display_name"]: x["meme"]["id"] for x in r.json()["results"]}
    for sort, expected in [
        ("name", ["Alpha", "bravo", "charlie", "delta", "echo"]),
        ("created", None),
        ("updated", None),
    ]:
        seen, cursor = [], None
        while True:
            params = {"sort": sort, "limit": 2, **({"cursor": cursor} if cursor else {})}
            page = client.get("/api/v1/memes", params=params)
            assert page.status_code == 200, page.text
            seen += [m["display_name"] for m in page.json()["items"]]
            cursor = page.json()["next_cursor"]
            if cursor is None:
                break
        assert sorted(seen) == sorted(names) and len(seen) == 5
        if expected:
            assert seen == expected
    assert [m["id"] for m in client.get("/api/v1/memes", params={"name": "RAV"}).json()["items"]] == [ids["bravo"]]
    assert client.get("/api/v1/memes", params={"name": "%"}).json()["items"] == []
    assert len(client.get("/api/v1/memes", params={"status": "pending"}).json()["items"]) == 5
    assert client.get("/api/v1/memes", params={"status": "succeeded"}).json()["items"] == []
    assert client.get("/api/v1/memes", params={"animated": "true"}).json()["items"] == []
    assert len(client.get("/api/v1/memes", params={"animated": "false"}).json()["items"]) == 5
    for bad in ({"cursor": "garbage"}, {"sort": "size"}, {"status": "sleeping"}, {"limit": 0}, {"limit": 201}):
        r = client.get("/api/v1/memes", params=bad)
        assert r.status_code == 422, (bad, r.text)
    name_cursor = client.get("/api/v1/memes", params={"sort": "name", "limit": 1}).json()["next_cursor"]
    assert client.get("/api/v1/memes", params={"sort": "created", "cursor": name_cursor}).status_code == 422
    assert client.get("/api/v1/memes", params={"collection_id": "nope"}).status_code == 404


def test_a_page_of_the_library_costs_the_same_statements_for_2_or_8_memes(client):
    """Listing loads jobs, stages, thumbnails and near-duplicates per page, not per meme (202
    statements and 358 ms for a page of 50 before; 6 now)."""
    import threading

    from sqlalchemy import event

    from mewdex.db.engine import get_engine

    r = upload(client, [(f"page-{i}.png", png(700 + i)) for i in range(8)])
    assert r.status_code == 201
    statements: list[str] = []

    def record(_conn, _cursor, statement, *_args) -> None:
        # the request's statements, not those the app's own threads (its scheduler's ticks, the
        # database supervisor's checks) happen to run meanwhile
        if threading.current_thread().name not in ("scheduler", "database-supervisor", "warm-models"):
            statements.append(statement)

    counts = {}
    event.listen(get_engine(), "before_cursor_execute", record)
    try:
        # the fewest of three requests: a cache of the process expiring under load (a setting, a
        # grant) adds its own statements to one request now and then, never per meme
        for limit in (2, 8):
            for _ in range(3):
                statements.clear()
                page = client.get("/api/v1/memes", params={"limit": limit})
                assert page.status_code == 200 and len(page.json()["items"]) == limit
                counts[limit] = min(counts.get(limit, len(statements)), len(statements))
    finally:
        event.remove(get_engine(), "before_cursor_execute", record)
    assert counts[2] == counts[8] <= 8, counts
    item = page.json()["items"][0]
    assert item["job"]["status"] == "queued" and item["thumbnails"] == {} and item["near_duplicates"] == []


# ---------------------------------------------------------------- rename


def created_id(client, seed: int, name: str = "x.png") -> str:
    r = upload(client, [(name, png(seed))])
    assert r.status_code == 201, r.text
    return r.json()["results"][0]["meme"]["id"]


def test_rename_with_if_match_and_conflict(client, sessions, scope):
    meme_id = created_id(client, 400, "old name.png")
    assert client.get(f"/api/v1/memes/{meme_id}").headers["etag"] == '"1"'
    r = client.patch(f"/api/v1/memes/{meme_id}", json={"display_name": "  new name.PNG "}, headers={"If-Match": '"1"'})
    assert r.status_code == 200, r.text
    assert r.json()["display_name"] == "new name" and r.json()["revision"] == 2 and r.headers["etag"] == '"2"'
    stale = client.patch(f"/api/v1/memes/{meme_id}", json={"display_name": "other"}, headers={"If-Match": "1"})
    assert stale.status_code == 412 and stale.json()["error"]["code"] == "revision_conflict"
    assert stale.json()["error"]["details"] == {"expected_revision": 1, "current_revision": 2}
    stale_delete = client.delete(f"/api/v1/memes/{meme_id}", headers={"If-Match": '"1"'})
    assert stale_delete.status_code == 412 and stale_delete.json()["error"]["code"] == "revision_conflict"
    patch = client.app.openapi()["paths"]["/api/v1/memes/{meme_id}"]
    assert "412" in patch["patch"]["responses"] and "412" in patch["delete"]["responses"]
    assert client.get(f"/api/v1/memes/{meme_id}").json()["display_name"] == "new name"
    assert client.patch(f"/api/v1/memes/{meme_id}", json={"display_name": "third"}).json()["revision"] == 3
    with sessions.begin() as session:
        meme = session.get(Meme, meme_id)
        assert meme.name_source == "manual"
        ops = (
            session.execute(
                select(StorageOperation.status)
                .where(StorageOperation.meme_id == meme.id, StorageOperation.operation_type == "rename")
                .order_by(StorageOperation.created_at)
            )
            .scalars()
            .all()
        )
        assert ops == ["completed", "completed"]  # a stale If-Match is refused before journaling


@pytest.mark.parametrize(
    "body",
    [
        {"display_name": " .. "},
        {"display_name": ".png"},
        {"display_name": ""},
        {"display_name": 5},
        {"name": "x"},
        {"display_name": "x", "extra": 1},
    ],
)
def test_rename_rejects_bad_names(client, body):
    meme_id = created_id(client, 410)
    r = client.patch(f"/api/v1/memes/{meme_id}", json=body)
    assert r.status_code == 422, r.text
    assert client.get(f"/api/v1/memes/{meme_id}").json()["revision"] == 1


def test_rename_and_delete_of_unknown_or_foreign_memes_are_404(client, sessions):
    from conftest import drop_scope, new_scope

    other = new_scope(sessions)
    try:
        with client_for(other) as foreign:
            foreign_id = created_id(foreign, 420)
        for meme_id in (foreign_id, "00000000-0000-0000-0000-000000000000", "not-an-id"):
            assert client.patch(f"/api/v1/memes/{meme_id}", json={"display_name": "x"}).status_code == 404
            assert client.delete(f"/api/v1/memes/{meme_id}").status_code == 404
    finally:
        drop_scope(sessions, other)
    assert (
        client.patch(
            "/api/v1/memes/" + created_id(client, 421), json={"display_name": "x"}, headers={"If-Match": "abc"}
        ).status_code
        == 422
    )


# ---------------------------------------------------------------- delete


def test_delete_removes_rows_and_files(app_store, client, sessions, scope):
    store = app_store
    with sessions.begin() as session:
        collection_id = collections.get_or_create(session, scope, "c").id
    meme_id = created_id(client, 500)
    keep_id = created_id(client, 501)
    with sessions.begin() as session:
        collections.add_items(session, scope, collection_id, [meme_id, keep_id])
    assert client.delete(f"/api/v1/memes/{meme_id}", headers={"If-Match": "7"}).status_code == 412  # a stale If-Match
    with sessions.begin() as session:
        task_ids = list(
            session.execute(
                text("SELECT task_id FROM image_stage_tasks WHERE target_meme_id = :m"), {"m": meme_id}
            ).scalars()
        )
    assert task_ids  # the meme's processing queued a task
    assert client.delete(f"/api/v1/memes/{meme_id}").status_code == 204
    assert client.get(f"/api/v1/memes/{meme_id}").status_code == 404
    assert client.delete(f"/api/v1/memes/{meme_id}").status_code == 404  # already in the trash
    assert client.delete(f"/api/v1/trash/{meme_id}").status_code == 204  # deleted for good
    with sessions.begin() as session:
        for table in ("memes", "image_processing_jobs", "image_stage_tasks", "meme_collection_items"):
            column = "id" if table == "memes" else ("target_meme_id" if table == "image_stage_tasks" else "meme_id")
            assert (
                session.execute(text(f"SELECT count(*) FROM {table} WHERE {column} = :m"), {"m": meme_id}).scalar_one()
                == 0
            ), table
        assert session.execute(text("SELECT count(*) FROM tasks WHERE id = ANY(:t)"), {"t": task_ids}).scalar_one() == 0
        op = session.execute(
            select(StorageOperation).where(
                StorageOperation.scope_id == scope.scope_id, StorageOperation.operation_type == "delete"
            )
        ).scalar_one()
        assert op.status == "completed" and op.before_sha256 == hashlib.sha256(png(500)).hexdigest()
    assert [
        m["id"] for m in client.get("/api/v1/memes", params={"collection_id": str(collection_id)}).json()["items"]
    ] == [keep_id]
    check_storage_invariants(sessions, store, scope)


def test_delete_keeps_a_blob_an_upload_in_flight_uses(app_store, client, sessions, scope):
    store = app_store
    from mewdex.storage import journal

    data = png(510)
    meme_id = created_id(client, 510)
    key = hashlib.sha256(data).hexdigest() + ".png"
    with sessions.begin() as session:  # another request is uploading the same bytes right now
        op_id = journal.prepare_upload(session, scope.scope_id, key, key[:64], len(data)).id
    assert client.delete(f"/api/v1/memes/{meme_id}").status_code == 204
    assert client.delete(f"/api/v1/trash/{meme_id}").status_code == 204
    assert store.exists(namespace(sessions, scope), key)
    with sessions.begin() as session:  # that upload died; recovery removes the blob nobody uses now
        journal.recover(session, store, older_than_seconds=0)
        assert session.get(StorageOperation, op_id).status == "compensated"
    assert not store.exists(namespace(sessions, scope), key)
    check_storage_invariants(sessions, store, scope)


def test_delete_keeps_a_thumbnail_another_meme_shares(app_store, client, sessions, scope):
    """DUP-01-like: same pixels, different bytes → two memes with byte-identical thumbnails."""
    store = app_store
    import io

    from PIL import Image

    from mewdex.library import thumbnails as th

    image = Image.open(io.BytesIO(png(520, size=(200, 150))))
    other = io.BytesIO()
    image.save(other, "PNG", compress_level=1)
    a, b = png(520, size=(200, 150)), other.getvalue()
    assert a != b
    r = client.post("/api/v1/memes", files=[("files", ("a.png", a, "image/png")), ("files", ("b.png", b, "image/png"))])
    ids = [x["meme"]["id"] for x in r.json()["results"]]
    ns = namespace(sessions, scope)
    with sessions.begin() as session:
        for meme_id in ids:
            meme = session.get(Meme, meme_id)
            th.store_thumbnails(session, store, ns, meme, th.make_thumbnails(store.read_bytes(ns, meme.storage_key)))
    shared = set(store.iter_keys(th.thumbnail_namespace(ns)))
    assert shared
    assert client.delete(f"/api/v1/memes/{ids[0]}").status_code == 204
    assert client.delete(f"/api/v1/trash/{ids[0]}").status_code == 204
    assert set(store.iter_keys(th.thumbnail_namespace(ns))) == shared
    check_storage_invariants(sessions, store, scope)
    assert client.delete(f"/api/v1/memes/{ids[1]}").status_code == 204
    assert client.delete(f"/api/v1/trash/{ids[1]}").status_code == 204
    assert set(store.iter_keys(th.thumbnail_namespace(ns))) == set()
    check_storage_invariants(sessions, store, scope)


@pytest.mark.parametrize("chunked", [True, False])
def test_up01_a_real_server_answers_413_without_reading_the_whole_body(app, settings_env, chunked):
    """Through uvicorn on a socket: the client never gets to send most of a 64 MiB body."""
    import socket
    import threading

    import uvicorn

    settings_env(MEWDEX_MAX_UPLOAD_BYTES=str(2 * MiB))
    config = uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning", lifespan="off", proxy_headers=False)
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        while not server.started:
            threading.Event().wait(0.05)
        port = server.servers[0].sockets[0].getsockname()[1]
        boundary = "b0undary"
        head = (
            f'--{boundary}\r\nContent-Disposition: form-data; name="files"; filename="big.png"\r\n'
            f"Content-Type: image/png\r\n\r\n"
        ).encode()
        total = 64 * MiB
        framing = "Transfer-Encoding: chunked" if chunked else f"Content-Length: {total + len(head)}"
        sock = socket.create_connection(("127.0.0.1", port), timeout=30)
        sock.sendall(
            f"POST /api/v1/memes HTTP/1.1\r\nHost: 127.0.0.1\r\n{framing}\r\n"
            f"Content-Type: multipart/form-data; boundary={boundary}\r\n\r\n".encode()
        )
        sent = {"bytes": 0}

        def pump():
            piece = b"\x89PNG" + b"\0" * (64 * 1024 - 4)
            try:
                first = head
                while sent["bytes"] < total:
                    data = first + piece
                    first = b""
                    sock.sendall(b"%x\r\n%s\r\n" % (len(data), data) if chunked else data)
                    sent["bytes"] += len(piece)
            except OSError:
                pass  # the server closed the connection: what we want

        writer = threading.Thread(target=pump, daemon=True)
        writer.start()
        response = b""
        while b"\r\n\r\n" not in response:
            data = sock.recv(65536)
            if not data:
                break
            response += data
        assert response.startswith(b"HTTP/1.1 413"), response[:200]
        sock.close()
        writer.join(timeout=30)
        assert sent["bytes"] < total / 2, sent
    finally:
        server.should_exit = True
        thread.join(timeout=10)


def test_delete_while_a_worker_runs_the_memes_task(client, sessions, store, scope):
    """The worker's late write-back is fenced off (its task went with the meme), nothing is left behind."""
    from mewdex.queue import tasks as queue

    meme_id = created_id(client, 540)
    with sessions.begin() as session:
        claim = queue.claim(session, owner="pytest-delete", lanes=["visual"], lease_seconds=60)
    assert claim is not None and claim.scope_id == scope.scope_id
    with sessions.begin() as session:
        assert str(session.get(ImageStageTask, claim.task_id).target_meme_id) == meme_id
    assert client.delete(f"/api/v1/memes/{meme_id}").status_code == 204
    assert client.delete(f"/api/v1/trash/{meme_id}").status_code == 204
    with pytest.raises(queue.StaleClaim), sessions.begin() as session:
        queue.fenced(session, claim)
    check_storage_invariants(sessions, store, scope)


def test_upload_429_queue_full_at_the_agent_limit_then_accepted(client, sessions, scope, settings_env, drain):
    from queue_helpers import enqueue_noops

    settings_env(MEWDEX_AGENT_BACKPRESSURE="2")
    enqueue_noops(sessions, scope, 2, lane="agent")  # the limit
    r = upload(client, [("one.png", png(41))])
    assert r.status_code == 429 and r.json()["error"]["code"] == "queue_full", r.text
    assert int(r.headers["Retry-After"]) >= 1
    with sessions.begin() as session:
        assert session.execute(select(Meme).where(Meme.scope_id == scope.scope_id)).first() is None
    drain(scope)
    assert upload(client, [("one.png", png(41))]).status_code == 201


def test_rename_while_another_is_open_is_409_and_a_forged_cursor_is_422(client, sessions):
    import base64
    import json as json_mod

    from mewdex.storage import journal

    meme_id = created_id(client, 410, "busy.png")
    with sessions.begin() as session:  # a rename another request has journaled but not applied yet
        journal.prepare_rename(session, session.get(Meme, meme_id), "elsewhere", 1)
    r = client.patch(f"/api/v1/memes/{meme_id}", json={"display_name": "mine"})
    assert r.status_code == 409 and r.json()["error"]["code"] == "operation_in_progress", r.text
    for value in (5, {"a": 1}, ["x"]):
        cursor = base64.urlsafe_b64encode(json_mod.dumps(["name", value, meme_id]).encode()).decode()
        r = client.get("/api/v1/memes", params={"sort": "name", "cursor": cursor})
        assert r.status_code == 422 and r.json()["error"]["code"] == "invalid_cursor", r.text


def test_deleting_the_last_pending_meme_of_an_import_completes_its_batch(client, sessions, store, scope, tmp_path):
    from mewdex.db.models import TaskBatch
    from mewdex.library.importer import collect, import_paths

    (tmp_path / "a.png").write_bytes(png(420))
    summary = import_paths(sessions, store, scope, collect([tmp_path]))
    with sessions.begin() as session:
        meme_id = session.execute(select(Meme.id).where(Meme.scope_id == scope.scope_id)).scalar_one()
        assert session.get(TaskBatch, (scope.scope_id, summary.batch_id)).finalizer_state != "complete"
    assert client.delete(f"/api/v1/memes/{meme_id}").status_code == 204
    assert client.delete(f"/api/v1/trash/{meme_id}").status_code == 204
    with sessions.begin() as session:
        batch = session.get(TaskBatch, (scope.scope_id, summary.batch_id))
        assert batch.finalizer_state == "complete" and batch.summary["tasks"] == 0


def test_admin_instance_counts_the_single_user_library(client, sessions, scope):
    """Issue 46: in single-user mode the admin page said "Memes 0" beside 935 imported; the instance's
    memes and bytes are every library's, the one that belongs to no account included."""
    from sqlalchemy import func

    created_id(client, 470, "counted.png")
    created_id(client, 471, "counted too.png")
    body = client.get("/api/v1/admin/instance").json()
    with sessions.begin() as session:
        memes, stored = session.execute(select(func.count(), func.sum(Meme.size_bytes)).select_from(Meme)).one()
        ours = session.execute(select(func.count()).select_from(Meme).where(Meme.scope_id == scope.scope_id)).scalar()
    assert ours == 2
    assert (body["memes"], body["storage_bytes"]) == (memes, stored)
    page = client.get("/admin", headers={"Accept": "text/html"}).text
    assert f"<dd>{memes}</dd>" in page
