"""An export → import round trip of a 200-meme corpus collection restores every name, order and byte."""

from __future__ import annotations

import hashlib
import io
import random
from uuid import UUID

import pytest

from conftest import CORPUS, drop_scope, new_scope
from mewdex.library import collections, packages
from mewdex.library.memes import add_image
from mewdex.library.scopes import storage_namespace
from package_helpers import corpus_images

pytestmark = pytest.mark.corpus
N = 200


def _members(sessions, store, scope, collection_id):
    with sessions.begin() as session:
        namespace = storage_namespace(session, scope.scope_id)
        return [
            (m.display_name, m.sha256, store.path(namespace, m.storage_key).read_bytes())
            for m in collections.members(session, scope, collection_id)
        ]


def test_round_trip_of_200_corpus_memes(sessions, store):
    if not (CORPUS / "vvquest" / "images").is_dir():
        pytest.skip(f"corpus not found at {CORPUS}")
    source, target = new_scope(sessions, "t-rt-src"), new_scope(sessions, "t-rt-dst")
    try:
        ids = []
        for path in corpus_images(CORPUS, N):
            result = add_image(
                sessions,
                store,
                source,
                path.read_bytes(),
                filename=path.name,
                provenance={"source": "test"},
                process=False,
            )
            if result.status == "created":
                ids.append(UUID(result.meme_id))
            if len(ids) == N:
                break
        assert len(ids) == N
        random.Random(4).shuffle(ids)  # member order is not creation order
        with sessions.begin() as session:
            collection = collections.create(session, source, "corpus 200")
            collections.add_items(session, source, collection.id, ids)
            plan = packages.plan_export(session, store, source, collection.id)
        archive = io.BytesIO(b"".join(packages.stream_zip(plan)))
        result = packages.import_package(sessions, store, target, archive, source_name="corpus.zip", process=False)
        assert [i.status for i in result.items] == ["created"] * N
        assert result.collection["name"] == "corpus 200" and result.collection["item_count"] == N

        before = _members(sessions, store, source, collection.id)
        after = _members(sessions, store, target, UUID(result.collection["id"]))
        assert [(n, s) for n, s, _ in after] == [(n, s) for n, s, _ in before]
        assert all(
            a[2] == b[2] and hashlib.sha256(a[2]).hexdigest() == a[1] for a, b in zip(after, before, strict=False)
        )
        assert len({n for n, _, _ in before}) > 150  # real, varied names went through
    finally:
        drop_scope(sessions, source)
        drop_scope(sessions, target)
