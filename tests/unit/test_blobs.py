"""Content-addressed local blob store: layout, atomic writes, key/namespace validation."""

from __future__ import annotations

import hashlib
import io
import os
import threading
import time
import uuid

import pytest

from mewdex.storage.blobs import LocalBlobStore

NS = "3f2b8c1e-7a4d-4e59-9c1a-2b6d8e0f1a23"


def key_for(data: bytes, ext: str = ".png") -> str:
    return hashlib.sha256(data).hexdigest() + ext


@pytest.fixture
def store(tmp_path):
    return LocalBlobStore(tmp_path / "blobs")


def test_put_layout_and_read_back(store, tmp_path):
    data = b"\x89PNG fake bytes"
    key = key_for(data)
    path = store.put(NS, key, data)
    assert path == tmp_path / "blobs" / NS / key[:2] / key
    assert path.read_bytes() == data
    assert store.path(NS, key) == path
    assert store.exists(NS, key)
    with store.open(NS, key) as handle:
        assert handle.read() == data


def test_put_from_file_like_in_chunks(store):
    data = os.urandom(3 * 1024 * 1024 + 17)
    key = key_for(data, ".jpg")
    store.put(NS, key, io.BytesIO(data))
    assert store.path(NS, key).read_bytes() == data


def test_put_accepts_uuid_objects_and_canonicalizes(store):
    data = b"gif"
    key = key_for(data, ".gif")
    store.put(uuid.UUID(NS), key, data)
    assert store.exists(NS.upper(), key)
    assert store.path(NS.upper(), key) == store.path(NS, key)


def test_put_is_idempotent(store):
    data = b"same bytes"
    key = key_for(data)
    first = store.put(NS, key, data)
    mtime = first.stat().st_mtime_ns
    inode = first.stat().st_ino
    second = store.put(NS, key, io.BytesIO(data))
    assert first == second
    assert (second.stat().st_ino, second.stat().st_mtime_ns) == (inode, mtime)
    assert list(store.iter_keys(NS)) == [key]


def test_put_repairs_a_damaged_existing_blob(store):
    data = b"good bytes"
    key = key_for(data)
    path = store.put(NS, key, data)
    path.write_bytes(b"bit rot")
    store.put(NS, key, data)
    assert path.read_bytes() == data


def test_put_rejects_data_not_matching_key(store, tmp_path):
    with pytest.raises(ValueError, match="blob_digest_mismatch"):
        store.put(NS, key_for(b"other"), b"these bytes")
    assert not store.exists(NS, key_for(b"other"))
    assert list((tmp_path / "blobs" / ".staging").iterdir()) == []


def test_failed_write_leaves_no_staging_file(store, tmp_path):
    class Exploding(io.RawIOBase):
        def read(self, _size=-1):
            raise OSError("disk on fire")

    with pytest.raises(OSError, match="disk on fire"):
        store.put(NS, key_for(b"x"), Exploding())
    assert list((tmp_path / "blobs" / ".staging").iterdir()) == []


def test_namespaces_are_separate(store):
    other = str(uuid.uuid4())
    data = b"shared content"
    key = key_for(data)
    store.put(NS, key, data)
    assert not store.exists(other, key)
    assert list(store.iter_keys(other)) == []


@pytest.mark.parametrize(
    "key",
    [
        "",
        "../../etc/passwd",
        "a" * 64,
        "a" * 64 + ".PNG",
        "A" * 64 + ".png",
        "a" * 64 + ".jpeg",
        "a" * 64 + ".bmp",
        "a" * 63 + ".png",
        "a" * 65 + ".png",
        "a" * 64 + ".png\n",
        "a" * 64 + ".png/..",
        "/" + "a" * 63 + ".png",
        "g" * 64 + ".png",
        ".staging",
        None,
        b"a" * 64 + b".png",
    ],
)
def test_invalid_keys_rejected(store, key):
    for call in (store.path, store.exists, store.delete, store.open):
        with pytest.raises(ValueError, match="blob_key_invalid"):
            call(NS, key)
    with pytest.raises(ValueError, match="blob_key_invalid"):
        store.put(NS, key, b"x")


@pytest.mark.parametrize(
    "namespace",
    [
        "",
        ".",
        "..",
        ".staging",
        "../" + NS,
        NS + "/x",
        NS + "\n",
        "scope-1",
        NS.replace("-", ""),
        "{" + NS + "}",
        "urn:uuid:" + NS,
        None,
        42,
    ],
)
def test_invalid_namespaces_rejected(store, namespace):
    key = key_for(b"x")
    for call in (store.path, store.exists, store.delete, store.open):
        with pytest.raises(ValueError, match="storage_namespace_invalid"):
            call(namespace, key)
    with pytest.raises(ValueError, match="storage_namespace_invalid"):
        list(store.iter_keys(namespace))


def test_delete_and_missing(store):
    data = b"to delete"
    key = key_for(data, ".webp")
    store.put(NS, key, data)
    assert store.delete(NS, key) is True
    assert not store.exists(NS, key)
    assert store.delete(NS, key) is False
    with pytest.raises(FileNotFoundError):
        store.open(NS, key)


def test_iter_keys_sorted_and_skips_strays(store, tmp_path):
    keys = sorted(key_for(bytes([i]), ext) for i, ext in enumerate([".png", ".jpg", ".gif", ".webp", ".png"]))
    for i, ext in enumerate([".png", ".jpg", ".gif", ".webp", ".png"]):
        store.put(NS, key_for(bytes([i]), ext), bytes([i]))
    shard = store.path(NS, keys[0]).parent
    (shard / "notes.txt").write_text("stray")
    (shard.parent / "zz").mkdir()
    (shard.parent / "zz" / keys[1]).write_bytes(b"wrong shard")
    (shard.parent / "loose-file").write_text("stray")
    assert list(store.iter_keys(NS)) == keys
    assert list(store.iter_keys(str(uuid.uuid4()))) == []


def test_clean_staging_removes_only_old_files(store, tmp_path):
    staging = tmp_path / "blobs" / ".staging"
    old = staging / "old.tmp"
    new = staging / "new.tmp"
    old.write_bytes(b"x")
    new.write_bytes(b"y")
    past = time.time() - 3600
    os.utime(old, (past, past))
    assert store.clean_staging(older_than_seconds=600) == 1
    assert not old.exists() and new.exists()
    assert store.clean_staging(older_than_seconds=600) == 0


def test_concurrent_puts_of_same_key(store):
    data = os.urandom(256 * 1024)
    key = key_for(data)
    errors = []

    def put():
        try:
            store.put(NS, key, data)
        except Exception as exc:  # noqa: BLE001 - collected for the assertion
            errors.append(exc)

    threads = [threading.Thread(target=put) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert store.path(NS, key).read_bytes() == data
    assert list(store.iter_keys(NS)) == [key]
