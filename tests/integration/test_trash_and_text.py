"""Issue 43, items 2 and 3: a corrected text re-indexes the meme at once (the new words find it, the old
ones no longer do; ``"text": null`` undoes it), and the trash: a trashed meme is in no listing, search,
similar-image result or collection, comes back with its collections and learning, and is purged
through the storage journal (a purge killed mid-way leaves no orphan file), by hand or after
``MEWDEX_TRASH_DAYS`` by the ``retention`` task; the quota counts it until then. One scope and one
client for the module; the memes are real files with a context written as the analysis writes it."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from datetime import timedelta

import numpy as np
import pytest
from sqlalchemy import func, select, text

from conftest import drop_scope, module_scope_fixtures, new_scope
from library_helpers import check_storage_invariants, png
from mewdex.db.models import Meme, MemeVisualEmbedding, SearchFeedbackEvent, utcnow
from mewdex.dto.memes import MAX_TEXT_CHARS
from mewdex.library import collections, trash
from mewdex.library.memes import add_image
from mewdex.pipeline import visual
from mewdex.pipeline.context import build_meme_context
from mewdex.pipeline.stages import write_keyword_document
from mewdex.search import feedback
from mewdex.storage import journal
from mewdex.storage.failpoints import EXIT_CODE

DIMS = 16


scope, client = module_scope_fixtures("trash")


def analysed(sessions, store, scope, seed: int, ocr: str, name: str = "IMG_0001.png", vector=None) -> str:
    """A meme with real bytes whose context says ``ocr`` (as the analysis stage leaves it: context
    ready, keyword document written) and, with ``vector``, a visual embedding."""
    result = add_image(sessions, store, scope, png(seed), filename=name, provenance={"relative_path": name},
                       process=False)  # fmt: skip
    with sessions.begin() as session:
        meme = session.get_one(Meme, uuid.UUID(result.meme_id))
        meme.meme_context = build_meme_context(
            relative_path=name, display_name=meme.display_name, ocr_lines=[{"text": ocr, "score": 0.95}]
        )
        meme.context_status = "ready"
        write_keyword_document(session, meme)
        if vector is not None:
            session.add(
                MemeVisualEmbedding(
                    scope_id=scope.scope_id, meme_id=meme.id, model=visual.MODEL_ID,
                    preprocess_version=visual.PREPROCESS_VERSION, dimensions=DIMS, image_sha256=meme.sha256,
                    embedding=np.asarray(vector, dtype=np.float32),
                )
            )  # fmt: skip
    return result.meme_id


def found(client, query: str) -> list[str]:
    """The memes the API's search finds for ``query`` as a match of its words (a vector leg ranks every
    meme of a small library, so only ``high``/``medium`` hits count as found)."""
    r = client.post("/api/v1/search", json={"query": query, "n_results": 50})
    assert r.status_code == 200, r.text
    return [hit["id"] for hit in r.json()["results"] if hit["confidence"] != "low"]


def keyword_found(sessions, scope, query: str) -> list[str]:
    """The keyword leg's hits (the postings alone)."""
    from mewdex.search import service

    with sessions() as session:
        return [h.id for h in service.search(session, scope, query, 50, ("keyword",), learn=False).results]


# ------------------------------------------------------------------ the text


def test_corrected_text_is_found_and_the_old_one_is_not_and_null_undoes_it(client, sessions, store, scope):
    meme_id = analysed(sessions, store, scope, 1, "helo wrold zebrafish")
    assert meme_id in found(client, "zebrafish")
    assert client.patch(f"/api/v1/memes/{meme_id}", json={"tags": ["wombat"]}).status_code == 200

    r = client.patch(f"/api/v1/memes/{meme_id}", json={"text": "hello world\nquokka"})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["meme_context"]["ocr_text"] == "hello world\nquokka"
    assert body["meme_context"]["text_correction"]["ocr_text"] == "helo wrold zebrafish"
    assert r.headers["ETag"] == f'"{body["revision"]}"'
    assert meme_id in found(client, "quokka")
    assert meme_id not in found(client, "zebrafish")
    assert meme_id in keyword_found(sessions, scope, "quokka")
    assert meme_id not in keyword_found(sessions, scope, "zebrafish")
    # the name came from the serial file name: it follows the caption
    assert body["display_name"] != "IMG_0001"
    # the re-index kept the tag's word (tags are words of the keyword leg)
    assert body["tags"] == ["wombat"]
    assert meme_id in keyword_found(sessions, scope, "wombat") and meme_id in found(client, "tag:wombat")

    r = client.patch(f"/api/v1/memes/{meme_id}", json={"text": None})
    assert r.status_code == 200, r.text
    assert r.json()["meme_context"]["ocr_text"] == "helo wrold zebrafish"
    assert "text_correction" not in r.json()["meme_context"]
    assert meme_id in found(client, "zebrafish")
    assert meme_id not in found(client, "quokka")
    assert meme_id not in keyword_found(sessions, scope, "quokka")
    assert meme_id in keyword_found(sessions, scope, "wombat")

    # one PATCH renames, corrects and tags; If-Match holds for the whole request
    revision = r.json()["revision"]
    both = {"display_name": "numbat", "text": "echidna", "tags": ["bilby"]}
    r = client.patch(f"/api/v1/memes/{meme_id}", json=both, headers={"If-Match": str(revision - 1)})
    assert (r.status_code, r.json()["error"]["code"]) == (412, "revision_conflict")
    r = client.patch(f"/api/v1/memes/{meme_id}", json=both, headers={"If-Match": str(revision)})
    assert r.status_code == 200, r.text
    body = r.json()
    assert (body["display_name"], body["meme_context"]["ocr_text"], body["tags"]) == ("numbat", "echidna", ["bilby"])
    assert r.headers["ETag"] == f'"{body["revision"]}"' and body["revision"] > revision
    assert meme_id in keyword_found(sessions, scope, "echidna") and meme_id in keyword_found(sessions, scope, "bilby")
    assert meme_id not in keyword_found(sessions, scope, "wombat")


@pytest.mark.parametrize(
    "body,status,code",
    [
        ({"text": "x" * (MAX_TEXT_CHARS + 1)}, 422, "text_too_long"),
        ({"text": 12}, 422, "invalid_request"),
        ({"text": "bell\x07"}, 422, "text_invalid"),
        ({}, 422, "invalid_request"),
        ({"display_name": None, "text": "new words"}, 422, "invalid_request"),
        ({"text": "new words", "tags": ["ok", ""]}, 422, "tag_empty"),
    ],
    ids=["too_long", "not_a_string", "control_character", "no_field", "null_name", "bad_tag_beside"],
)
def test_bad_text_is_refused_with_its_code(client, sessions, store, scope, body, status, code):
    meme_id = analysed(sessions, store, scope, 100 + len(str(body)) % 97, "unchanged words")
    r = client.patch(f"/api/v1/memes/{meme_id}", json=body)
    assert (r.status_code, r.json()["error"]["code"]) == (status, code), r.text
    with sessions.begin() as session:
        assert session.get_one(Meme, uuid.UUID(meme_id)).meme_context["ocr_text"] == "unchanged words"


def test_text_of_a_meme_not_analysed_yet_is_409_and_another_accounts_meme_404(client, sessions, store, scope):
    pending = add_image(sessions, store, scope, png(30), filename="p.png", provenance={}, process=False).meme_id
    r = client.patch(f"/api/v1/memes/{pending}", json={"text": "words"})
    assert (r.status_code, r.json()["error"]["code"]) == (409, "text_not_ready")
    # with a rename and tags beside it, nothing of the request is written
    before = client.get(f"/api/v1/memes/{pending}").json()
    r = client.patch(f"/api/v1/memes/{pending}", json={"display_name": "renamed", "text": "words", "tags": ["x"]})
    assert (r.status_code, r.json()["error"]["code"]) == (409, "text_not_ready")
    after = client.get(f"/api/v1/memes/{pending}").json()
    assert (after["display_name"], after["tags"], after["revision"]) == (
        before["display_name"],
        before["tags"],
        before["revision"],
    )

    other = new_scope(sessions, "trash-other")
    try:
        theirs = analysed(sessions, store, other, 31, "their words")
        for method, path, body in [
            ("PATCH", f"/api/v1/memes/{theirs}", {"text": "mine now"}),
            ("DELETE", f"/api/v1/memes/{theirs}", None),
        ]:
            r = client.request(method, path, json=body)
            assert (r.status_code, r.json()["error"]["code"]) == (404, "not_found")
        trash.move_to_trash(sessions, other, theirs)
        for method, path in [("POST", f"/api/v1/trash/{theirs}/restore"), ("DELETE", f"/api/v1/trash/{theirs}")]:
            r = client.request(method, path)
            assert (r.status_code, r.json()["error"]["code"]) == (404, "not_found")
        assert theirs not in [i["id"] for i in client.get("/api/v1/trash").json()["items"]]
    finally:
        drop_scope(sessions, other)


# ------------------------------------------------------------------ the trash


def test_trash_hides_everywhere_and_restore_brings_everything_back(client, sessions, store, scope):
    rng = np.random.default_rng(3)
    base = rng.normal(size=DIMS)
    gone = analysed(sessions, store, scope, 40, "platypus umbrella", vector=base)
    kept = analysed(sessions, store, scope, 41, "platypus raincoat", vector=base + 0.05 * rng.normal(size=DIMS))
    with sessions.begin() as session:
        collection = collections.create(session, scope, "keepers")
        collections.add_items(session, scope, collection.id, [uuid.UUID(gone), uuid.UUID(kept)])
        feedback.record(session, scope, "platypus", gone, "copy", "search", embed=False)
        events = session.execute(
            select(func.count()).select_from(SearchFeedbackEvent).where(SearchFeedbackEvent.meme_id == uuid.UUID(gone))
        ).scalar_one()
    assert events == 1
    cid = str(collection.id)
    tag = "monotreme"  # on both memes: the trashed one leaves its counts and its listing
    r = client.post("/api/v1/memes/tags", json={"ids": [gone, kept], "add": [tag]})
    assert r.status_code == 200, r.text

    def tag_count(name: str) -> int:
        return {t["name"]: t["count"] for t in client.get("/api/v1/tags").json()["items"]}.get(name, 0)

    def visible() -> dict[str, bool]:
        listed = [m["id"] for m in client.get("/api/v1/memes", params={"limit": 200}).json()["items"]]
        members = [m["id"] for m in client.get(f"/api/v1/collections/{cid}").json()["items"]]
        similar = [h["id"] for h in client.get(f"/api/v1/memes/{kept}/similar").json()["results"]]
        page = client.get("/library").text
        return {
            "list": gone in listed,
            "get": client.get(f"/api/v1/memes/{gone}").status_code == 200,
            "search": gone in found(client, "platypus"),
            "filtered_search": gone
            in [
                h["id"]
                for h in client.post("/api/v1/search", json={"query": "platypus", "collection_ids": [cid]}).json()[
                    "results"
                ]
            ],
            "similar": gone in similar,
            "collection": gone in members,
            "library_page": gone in page,
            "tag_count": tag_count(tag) == 2,
            "tag_listing": gone in found(client, f'tag:"{tag}"'),
            "tag_search": gone in found(client, f'tag:"{tag}" platypus'),
        }

    assert all(visible().values()), visible()
    assert client.delete(f"/api/v1/memes/{gone}").status_code == 204
    assert not any(visible().values()), visible()
    assert client.delete(f"/api/v1/memes/{gone}").status_code == 404  # already in the trash
    assert tag_count(tag) == 1 and kept in found(client, f"tag:{tag}")  # the live one still counts
    assert client.patch(f"/api/v1/memes/{gone}", json={"tags": ["x"]}).status_code == 404
    # a tag renamed while the meme is in the trash: the restore brings it back under the new name
    r = client.patch(f"/api/v1/tags/{tag}", json={"name": "egg layer"})
    assert (r.status_code, r.json()["count"], r.json()["merged"]) == (200, 1, False), r.text
    tag = "egg layer"
    overview = {c["id"]: c for c in client.get("/api/v1/collections").json()["collections"]}
    assert overview[cid]["item_count"] == 1
    r = client.get("/api/v1/trash")
    assert r.status_code == 200, r.text
    listed = r.json()
    item = next(i for i in listed["items"] if i["id"] == gone)
    assert item["purge_at"] > item["deleted_at"] and listed["trash_days"] == 30
    assert client.get(f"/media/{gone}").status_code == 200  # files kept: the trash page shows it
    assert client.get("/trash").status_code == 200 and gone in client.get("/trash").text

    r = client.post(f"/api/v1/trash/{gone}/restore")
    assert r.status_code == 200 and r.json()["id"] == gone and r.json()["tags"] == [tag]
    assert all(visible().values()), visible()
    with sessions.begin() as session:
        assert (
            session.execute(
                select(func.count())
                .select_from(SearchFeedbackEvent)
                .where(SearchFeedbackEvent.meme_id == uuid.UUID(gone))
            ).scalar_one()
            == events
        )
    assert gone not in [i["id"] for i in client.get("/api/v1/trash").json()["items"]]


def test_purge_and_empty_remove_files_through_the_journal(client, sessions, store, scope):
    ids = [analysed(sessions, store, scope, 50 + i, f"purge me {i}") for i in range(3)]
    for meme_id in ids:
        assert client.delete(f"/api/v1/memes/{meme_id}").status_code == 204
    with sessions.begin() as session:
        keys = dict(session.execute(select(Meme.id, Meme.storage_key).where(Meme.id.in_(map(uuid.UUID, ids)))).all())
        namespace = session.execute(text("SELECT storage_namespace FROM scopes WHERE id = :s"),
                                    {"s": scope.scope_id}).scalar_one()  # fmt: skip
    assert client.delete(f"/api/v1/trash/{ids[0]}").status_code == 204
    assert client.delete(f"/api/v1/trash/{ids[0]}").status_code == 404
    assert client.delete("/api/v1/trash").json()["purged"] >= 2
    assert client.get("/api/v1/trash").json()["total"] == 0
    with sessions.begin() as session:
        assert session.execute(select(func.count()).select_from(Meme).where(Meme.id.in_(keys))).scalar_one() == 0
        ops = session.execute(
            text("SELECT count(*) FROM storage_operations WHERE scope_id = :s AND operation_type = 'delete' "
                 "AND status = 'completed'"), {"s": scope.scope_id}
        ).scalar_one()  # fmt: skip
    assert ops >= 3
    assert not any(store.exists(str(namespace), key) for key in keys.values())
    check_storage_invariants(sessions, store, scope)


PURGE = """
import sys
from mewdex.db.engine import get_sessionmaker
from mewdex.db.models import ScopeContext
from mewdex.library import trash
from mewdex.runtime import load_plugins
from mewdex.storage import blob_store

load_plugins()
trash.purge(get_sessionmaker(), blob_store(), ScopeContext(sys.argv[1]), sys.argv[2])
"""


@pytest.mark.parametrize("failpoint", ["delete.after_rows_deleted"])
def test_a_purge_killed_midway_leaves_no_orphan_file(mewdex_env, sessions, store, failpoint):
    scope = new_scope(sessions, "trash-crash")
    try:
        meme_id = analysed(sessions, store, scope, 60, "crash")
        trash.move_to_trash(sessions, scope, meme_id)
        env = {**os.environ, **mewdex_env.env, "MEWDEX_FAILPOINT": failpoint}
        proc = subprocess.run([sys.executable, "-c", PURGE, scope.scope_id, meme_id], env=env,
                              capture_output=True, text=True, timeout=120)  # fmt: skip
        assert proc.returncode == EXIT_CODE, proc.stderr
        with sessions.begin() as session:  # the next start-up's recovery
            journal.recover(session, store, older_than_seconds=0)
            assert session.get(Meme, uuid.UUID(meme_id)) is None
        check_storage_invariants(sessions, store, scope)
    finally:
        drop_scope(sessions, scope)


def test_the_retention_task_purges_what_is_older_than_trash_days(sessions, store, scope):
    from mewdex.runtime import retention

    old, recent = (analysed(sessions, store, scope, 70 + i, f"aged {i}") for i in range(2))
    for meme_id in (old, recent):
        trash.move_to_trash(sessions, scope, meme_id)
    with sessions.begin() as session:
        session.get_one(Meme, uuid.UUID(old)).deleted_at = utcnow() - timedelta(days=31)
    summary = retention.run(sessions)
    assert summary["deleted"]["trash"] >= 1
    with sessions.begin() as session:
        assert session.get(Meme, uuid.UUID(old)) is None
        assert session.get_one(Meme, uuid.UUID(recent)).deleted_at is not None


def test_the_quota_counts_the_trash_until_it_is_purged(sessions, store):
    from accounts_helpers import delete_users, own_scope_users
    from mewdex.db.models import ScopeContext

    with sessions.begin() as session:
        (user,), made = own_scope_users(session, ["quota"])
        user.quota_memes = 1
        owner = ScopeContext(user.scope_id)
    try:
        first = add_image(sessions, store, owner, png(80), filename="a.png", provenance={}, process=False)
        trash.move_to_trash(sessions, owner, first.meme_id)
        refused = add_image(sessions, store, owner, png(81), filename="b.png", provenance={}, process=False)
        assert (refused.status, refused.error) == ("skipped", "quota_exceeded")
        trash.purge(sessions, store, owner, first.meme_id)
        assert add_image(sessions, store, owner, png(81), filename="b.png", provenance={}, process=False).status == (
            "created"
        )
    finally:
        delete_users(sessions, made)


def test_a_patch_of_name_text_and_tags_is_one_transaction(client, sessions, store, scope, monkeypatch):
    """``PATCH`` with a name, a text and tags: all written by one transaction (one revision check,
    the rename journaled ``completed`` in it); a failure in its last step or a change that lands
    between the request's checks and its transaction (412) leaves none of it written."""
    from mewdex.db.models import StorageOperation
    from mewdex.library import memes as library_memes
    from mewdex.library.memes import MemeError
    from mewdex.pipeline import corrections

    meme_id = analysed(sessions, store, scope, 4711, "axolotl smiles")
    start = client.get(f"/api/v1/memes/{meme_id}").json()

    def state() -> tuple:
        meme = client.get(f"/api/v1/memes/{meme_id}").json()
        with sessions.begin() as session:
            ops = session.execute(
                select(func.count()).select_from(StorageOperation).where(StorageOperation.meme_id == uuid.UUID(meme_id))
            ).scalar_one()
        return meme["display_name"], meme["meme_context"]["ocr_text"], meme["tags"], meme["revision"], ops

    before = state()
    body = {"display_name": "axolotl", "text": "axolotl waves", "tags": ["amphibian"]}

    def failing_tags(*_args, **_kwargs):  # the last step fails after the rename and the text were done
        raise MemeError("operation_in_progress", "injected")

    monkeypatch.setattr(corrections, "set_tags", failing_tags)
    r = client.patch(f"/api/v1/memes/{meme_id}", json=body, headers={"If-Match": str(start["revision"])})
    assert (r.status_code, r.json()["error"]["code"]) == (409, "operation_in_progress")
    assert state() == before  # nothing half-written: not the name, not the text, no journal row
    monkeypatch.undo()

    real_normalize = corrections.normalize_tags

    def concurrent_change(values):  # another request renames it after this one's checks began
        library_memes.rename(sessions, scope, uuid.UUID(meme_id), "someone else's name")
        return real_normalize(values)

    monkeypatch.setattr(corrections, "normalize_tags", concurrent_change)
    r = client.patch(f"/api/v1/memes/{meme_id}", json=body, headers={"If-Match": str(start["revision"])})
    assert (r.status_code, r.json()["error"]["code"]) == (412, "revision_conflict")
    monkeypatch.undo()
    name, text_now, tags, revision, ops = state()
    assert (name, text_now, tags, revision) == ("someone else's name", "axolotl smiles", [], start["revision"] + 1)

    r = client.patch(f"/api/v1/memes/{meme_id}", json=body, headers={"If-Match": str(revision)})
    assert r.status_code == 200, r.text
    assert r.headers["ETag"] == f'"{revision + 2}"'  # the rename and the text, as alone
    assert state()[:4] == ("axolotl", "axolotl waves", ["amphibian"], revision + 2)
    with sessions.begin() as session:
        statuses = (
            session.execute(
                select(StorageOperation.status).where(
                    StorageOperation.meme_id == uuid.UUID(meme_id), StorageOperation.operation_type == "rename"
                )
            )
            .scalars()
            .all()
        )
    assert statuses == ["completed", "completed"]  # the other request's rename and this one's
    assert meme_id in found(client, "waves") and meme_id not in keyword_found(sessions, scope, "smiles")
