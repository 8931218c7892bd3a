"""The blob-store contract, held by both implementations: the local store and the S3 store against a
real S3-protocol server (moto, its own process). Content addressing, atomic and idempotent writes,
streamed and multipart uploads, ranged reads, validation, clean-up of interrupted writes, and the
store's own failures as ``OSError``."""

from __future__ import annotations

import errno
import hashlib
import io
import os
import threading
import uuid

import pytest

from mewdex.storage.blobs import BlobStoreError, LocalBlobStore
from mewdex.storage.s3 import MIN_PART_SIZE, S3BlobStore
from s3_helpers import unfinished_uploads

NS = "3f2b8c1e-7a4d-4e59-9c1a-2b6d8e0f1a23"


def key_for(data: bytes, ext: str = ".png") -> str:
    return hashlib.sha256(data).hexdigest() + ext


@pytest.fixture(params=["local", "s3"])
def any_store(request, tmp_path):
    if request.param == "local":
        return LocalBlobStore(tmp_path / "blobs")
    store = request.getfixturevalue("s3_store")
    store.part_size = MIN_PART_SIZE  # multipart from 5 MiB on, so the tests stay small
    return store


def nothing_half_written(store) -> bool:
    """No staging file (local) or unfinished multipart upload (S3) is left behind."""
    if isinstance(store, S3BlobStore):
        return unfinished_uploads(store) == []
    return list((store.root / ".staging").iterdir()) == []


def test_put_read_stat_and_list(any_store):
    data = b"\x89PNG fake bytes"
    key = key_for(data)
    assert any_store.stat(NS, key) is None and not any_store.exists(NS, key)
    any_store.put(NS, key, data)
    assert any_store.read_bytes(NS, key) == data
    with any_store.open(NS, key) as handle:
        assert handle.read() == data
    stat = any_store.stat(NS.upper(), key)
    assert stat is not None and stat.size == len(data) and stat.mtime > 0
    assert any_store.exists(uuid.UUID(NS), key)
    assert list(any_store.iter_keys(NS)) == [key]
    assert list(any_store.iter_keys(str(uuid.uuid4()))) == []  # namespaces are separate


def test_iter_keys_sorted_over_shards(any_store):
    keys = [key_for(bytes([i]) * 3, ext) for i, ext in enumerate([".png", ".jpg", ".gif", ".webp", ".png"])]
    for i, key in enumerate(keys):
        any_store.put(NS, key, bytes([i]) * 3)
    assert list(any_store.iter_keys(NS)) == sorted(keys)


def test_large_stream_is_uploaded_in_parts_and_reads_back(any_store):
    data = os.urandom(2 * MIN_PART_SIZE + 12345)  # three parts on S3
    key = key_for(data, ".jpg")
    any_store.put(NS, key, io.BytesIO(data))
    assert any_store.read_bytes(NS, key) == data
    assert any_store.stat(NS, key).size == len(data)
    assert nothing_half_written(any_store)


def test_ranged_reads_fetch_what_is_asked(any_store):
    data = os.urandom(700_000)
    key = key_for(data, ".webp")
    any_store.put(NS, key, data)
    with any_store.open(NS, key) as handle:
        handle.seek(123_456)
        assert handle.read(1000) == data[123_456:124_456]
        assert handle.read(10) == data[124_456:124_466]  # goes on where it stopped
        handle.seek(-50, io.SEEK_END)
        assert handle.read() == data[-50:]
        handle.seek(5)
        assert handle.read(5) == data[5:10]
        handle.seek(len(data) + 10)
        assert handle.read(10) == b""


@pytest.mark.parametrize("size", [100, 2 * MIN_PART_SIZE + 1], ids=["small", "multipart"])
def test_data_not_matching_its_key_is_not_stored(any_store, size):
    data = os.urandom(size)
    wrong = key_for(b"other bytes")
    with pytest.raises(ValueError, match="blob_digest_mismatch"):
        any_store.put(NS, wrong, io.BytesIO(data))
    with pytest.raises(ValueError, match="blob_digest_mismatch"):
        any_store.put(NS, wrong, data)
    assert not any_store.exists(NS, wrong)
    assert nothing_half_written(any_store)


def test_a_stream_failing_part_way_leaves_nothing(any_store):
    class Failing(io.RawIOBase):
        sent = 0

        def readable(self):
            return True

        def readinto(self, buffer):
            if self.sent > MIN_PART_SIZE + 10:
                raise OSError(errno.EIO, "source vanished")
            n = min(len(buffer), 64 * 1024)
            buffer[:n] = b"x" * n
            self.sent += n
            return n

    key = key_for(b"never")
    with pytest.raises(OSError, match="source vanished"):
        any_store.put(NS, key, Failing())
    assert not any_store.exists(NS, key)
    assert nothing_half_written(any_store)


def test_put_is_idempotent_and_delete_reports(any_store):
    data = b"same bytes"
    key = key_for(data, ".gif")
    any_store.put(NS, key, data)
    first = any_store.stat(NS, key)
    any_store.put(NS, key, io.BytesIO(data))
    assert any_store.stat(NS, key) == first  # not rewritten
    assert list(any_store.iter_keys(NS)) == [key]
    assert any_store.delete(NS, key) is True
    assert any_store.delete(NS, key) is False
    assert not any_store.exists(NS, key)
    with pytest.raises(FileNotFoundError):
        any_store.open(NS, key)
    with pytest.raises(FileNotFoundError):
        any_store.read_bytes(NS, key)


def test_concurrent_puts_of_the_same_key(any_store):
    data = os.urandom(256 * 1024)
    key = key_for(data)
    errors = []

    def put():
        try:
            any_store.put(NS, key, data)
        except Exception as exc:  # noqa: BLE001 - collected for the assertion
            errors.append(exc)

    threads = [threading.Thread(target=put) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert any_store.read_bytes(NS, key) == data
    assert list(any_store.iter_keys(NS)) == [key]


@pytest.mark.parametrize("key", ["", "../../etc/passwd", "a" * 64, "A" * 64 + ".png", "a" * 64 + ".png/..", None])
def test_invalid_keys_rejected_before_the_store(any_store, key):
    for call in (any_store.stat, any_store.exists, any_store.delete, any_store.open, any_store.read_bytes):
        with pytest.raises(ValueError, match="blob_key_invalid"):
            call(NS, key)
    with pytest.raises(ValueError, match="blob_key_invalid"):
        any_store.put(NS, key, b"x")


@pytest.mark.parametrize("namespace", ["", "..", ".staging", "../" + NS, NS + "/x", "scope-1", None])
def test_invalid_namespaces_rejected_before_the_store(any_store, namespace):
    key = key_for(b"x")
    for call in (any_store.stat, any_store.exists, any_store.delete, any_store.open, any_store.read_bytes):
        with pytest.raises(ValueError, match="storage_namespace_invalid"):
            call(namespace, key)
    with pytest.raises(ValueError, match="storage_namespace_invalid"):
        list(any_store.iter_keys(namespace))


def test_s3_objects_are_laid_out_like_the_local_store(s3_store):
    data = b"layout"
    key = key_for(data)
    s3_store.put(NS, key, data)
    head = s3_store.client.head_object(Bucket=s3_store.bucket, Key=f"{s3_store.prefix}{NS}/{key[:2]}/{key}")
    assert head["ContentType"] == "image/png" and head["Metadata"] == {"sha256": key[:64]}
    # a stray object in the namespace (not a blob key, wrong shard) is not listed
    s3_store.client.put_object(Bucket=s3_store.bucket, Key=f"{s3_store.prefix}{NS}/{key[:2]}/notes.txt", Body=b"x")
    s3_store.client.put_object(Bucket=s3_store.bucket, Key=f"{s3_store.prefix}{NS}/zz/{key}", Body=b"x")
    assert list(s3_store.iter_keys(NS)) == [key]


def test_s3_clean_staging_aborts_what_killed_writers_left(s3_store):
    key = f"{s3_store.prefix}{NS}/ab/" + "ab" * 32 + ".png"
    s3_store.client.create_multipart_upload(Bucket=s3_store.bucket, Key=key)  # a writer that died mid-upload
    assert len(unfinished_uploads(s3_store)) == 1
    assert s3_store.clean_staging(older_than_seconds=10**9) == 0  # not old enough
    assert s3_store.clean_staging(older_than_seconds=0) == 1
    assert unfinished_uploads(s3_store) == []
    assert list(s3_store.iter_keys(NS)) == []


def test_s3_store_failures_are_os_errors_without_secrets(s3_server):
    from mewdex.storage import s3
    from s3_helpers import CREDENTIALS, free_port

    down = s3.from_settings(
        "s3://mewdex-test/x",
        endpoint_url=f"http://127.0.0.1:{free_port()}",
        region="us-east-1",
        addressing_style="path",
    )
    down.client.meta.config.retries["max_attempts"] = 1
    data = b"nowhere to go"
    with pytest.raises(BlobStoreError) as caught:
        down.put(NS, key_for(data), data)
    assert isinstance(caught.value, OSError) and caught.value.errno == errno.EIO
    assert CREDENTIALS["AWS_SECRET_ACCESS_KEY"] not in str(caught.value)
    missing_bucket = s3_server.store("x")
    missing_bucket.bucket = "no-such-bucket"
    with pytest.raises(BlobStoreError, match="NoSuchBucket"):
        missing_bucket.put(NS, key_for(data), data)


@pytest.mark.parametrize(
    "url,expected",
    [
        ("s3://bucket", ("bucket", "")),
        ("s3://bucket/", ("bucket", "")),
        ("s3://bucket/a/b", ("bucket", "a/b/")),
        ("s3://bucket/a/b/", ("bucket", "a/b/")),
    ],
)
def test_blob_store_url(url, expected):
    from mewdex.config import parse_blob_store_url

    assert parse_blob_store_url(url) == expected


@pytest.mark.parametrize(
    "url", ["bucket/prefix", "file:///tmp/x", "s3://", "s3://b/a//c", "s3://b/../c", "s3://b/x?y=1"]
)
def test_blob_store_url_rejected_at_start(url, monkeypatch):
    from pydantic import ValidationError

    from mewdex.config import Settings

    monkeypatch.setenv("MEWDEX_BLOB_STORE", url)
    with pytest.raises(ValidationError, match="MEWDEX_BLOB_STORE"):
        Settings()


def test_the_setting_chooses_the_store(s3_server, monkeypatch, tmp_path):
    from mewdex.config import get_settings
    from mewdex.storage import blob_store

    try:
        for key, value in s3_server.env("chosen").items():
            monkeypatch.setenv(key, value)
        get_settings.cache_clear()
        blob_store.cache_clear()
        chosen = blob_store()
        assert isinstance(chosen, S3BlobStore) and (chosen.bucket, chosen.prefix) == (s3_server.bucket, "chosen/")
        monkeypatch.delenv("MEWDEX_BLOB_STORE")
        monkeypatch.setenv("MEWDEX_DATA_DIR", str(tmp_path))
        get_settings.cache_clear()
        blob_store.cache_clear()
        assert isinstance(blob_store(), LocalBlobStore)
    finally:
        monkeypatch.undo()
        get_settings.cache_clear()
        blob_store.cache_clear()
