"""Crash-safety proof of upload, rename and delete: each runs in a real subprocess that dies with
``os._exit`` at one step boundary (``MEWDEX_FAILPOINT``); then recovery runs (as the next start-up
would) and the test checks that every meme row has its blob, no blob is left without a row, no
storage operation is left open, and the user-visible state is exactly before or after the
operation — never in between. One embedded database for the whole matrix; a fresh scope per case.
The matrix runs against both blob stores: the local one and the S3 store on a local S3-protocol server.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import uuid

import pytest
from sqlalchemy import func, select

from library_helpers import check_storage_invariants, png
from mewdex.db.models import (
    DerivedImageThumbnail,
    ImageProcessingJob,
    Meme,
    MemeCollectionItem,
    Scope,
    StorageOperation,
    Task,
)
from mewdex.library import thumbnails as th
from mewdex.library.memes import add_image
from mewdex.storage import journal
from mewdex.storage.failpoints import EXIT_CODE, FAILPOINTS

# The operation, run the way any mewdex process runs it: its own engine, the real blob store.
DRIVER = """
import sys
from pathlib import Path
from mewdex.db.engine import get_sessionmaker
from mewdex.db.models import ScopeContext
from mewdex.library import memes
from mewdex.runtime import load_plugins
from mewdex.storage import blob_store

load_plugins()  # what every mewdex process does at start-up (the pipeline creates each upload's job)
op, scope_id, arg = sys.argv[1:4]
scope = ScopeContext(scope_id)
if op == "upload":
    result = memes.add_image(get_sessionmaker(), blob_store(), scope, Path(arg).read_bytes(), filename="crash.png",
                             provenance={"relative_path": "crash.png"})
    assert result.status == "created", result
elif op == "rename":
    memes.rename(get_sessionmaker(), scope, arg, "renamed after the crash test")
else:
    memes.delete(get_sessionmaker(), blob_store(), scope, arg)
"""

# Every step boundary of every operation (the last one of each is "after it finished"; the API tests
# cover the uninterrupted runs).
CASES = [(op, step) for op, steps in FAILPOINTS.items() for step in steps]
NEW_NAME = "renamed after the crash test"


@pytest.fixture(params=["local", "s3"])
def blobs(request, store):
    """``(store, env)``: the blob store of the case and what the driver process needs to use it."""
    if request.param == "local":
        return store, {}
    server = request.getfixturevalue("s3_server")
    prefix = f"crash-{uuid.uuid4().hex[:12]}"
    return server.store(prefix), server.env(prefix)


def run_driver(mewdex_env, op: str, scope, arg: str, failpoint: str, store_env: dict[str, str]) -> None:
    env = {**os.environ, **mewdex_env.env, **store_env, "MEWDEX_FAILPOINT": failpoint}
    proc = subprocess.run(
        [sys.executable, "-c", DRIVER, op, scope.scope_id, arg], env=env, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == EXIT_CODE, (proc.returncode, proc.stdout, proc.stderr)


def snapshot(sessions, scope) -> dict:
    """What a user can see of the scope: memes with name and revision, and what hangs off them."""
    sid = scope.scope_id
    with sessions.begin() as session:

        def n(model):
            return session.execute(select(func.count()).select_from(model).where(model.scope_id == sid)).scalar_one()

        return {
            "memes": {
                str(m.id): (m.display_name, m.revision, m.storage_key)
                for m in session.execute(select(Meme).where(Meme.scope_id == sid)).scalars()
            },
            "jobs": n(ImageProcessingJob),
            "tasks": n(Task),
            "thumbnails": n(DerivedImageThumbnail),
            "collection_items": n(MemeCollectionItem),
        }


def existing_meme(sessions, store, scope, data: bytes) -> str:
    """A processed-looking meme: row, job and tasks, thumbnails (rows and blobs), a collection."""
    result = add_image(
        sessions,
        store,
        scope,
        data,
        filename="before.png",
        provenance={"relative_path": "before.png"},
        collection_names=["kept"],
    )
    with sessions.begin() as session:
        meme = session.get(Meme, result.meme_id)
        namespace = str(session.get(Scope, scope.scope_id).storage_namespace)
        th.store_thumbnails(session, store, namespace, meme, th.make_thumbnails(data))
    return result.meme_id


@pytest.mark.parametrize("op,failpoint", CASES, ids=[fp for _, fp in CASES])
def test_crash_at_every_step_leaves_before_or_after(mewdex_env, sessions, blobs, scope, tmp_path, op, failpoint):
    store, store_env = blobs
    data = png(1000 + CASES.index((op, failpoint)), size=(160, 120))
    if op == "upload":
        path = tmp_path / "crash.png"
        path.write_bytes(data)
        arg = str(path)
    else:
        arg = existing_meme(sessions, store, scope, data)
    before = snapshot(sessions, scope)

    run_driver(mewdex_env, op, scope, arg, failpoint, store_env)
    with sessions.begin() as session:  # the next start-up's recovery pass
        journal.recover(session, store, older_than_seconds=0)

    check_storage_invariants(sessions, store, scope)
    after = snapshot(sessions, scope)
    key = hashlib.sha256(data).hexdigest() + ".png"
    if op == "upload":
        if after["memes"]:
            assert [v[2] for v in after["memes"].values()] == [key] and after["jobs"] == 1 and after["tasks"] == 1
        else:
            assert after == before
    elif op == "rename":
        ((name, revision, _),) = after["memes"].values()
        assert (name, revision) in {("before", 1), (NEW_NAME, 2)}
        assert {k: v for k, v in after.items() if k != "memes"} == {k: v for k, v in before.items() if k != "memes"}
    else:
        assert after == before or after == {"memes": {}, "jobs": 0, "tasks": 0, "thumbnails": 0, "collection_items": 0}
    # Where the crash happened decides which side it lands on.
    applied = failpoint.endswith(("after_commit", "after_rows_deleted", "after_blob_delete", "after_complete"))
    changed = after != before
    assert changed == applied, (failpoint, before, after)
    with sessions.begin() as session:
        statuses = (
            session.execute(
                select(StorageOperation.status).where(
                    StorageOperation.scope_id == scope.scope_id, StorageOperation.operation_type == op
                )
            )
            .scalars()
            .all()
        )
    assert set(statuses) <= {"completed", "compensated"}
