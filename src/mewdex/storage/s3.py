"""Content-addressed blob store on an S3-compatible object store (AWS S3, MinIO, Ceph, R2, …).

Chosen with ``MEWDEX_BLOB_STORE=s3://bucket/prefix``; the endpoint and region come from
``MEWDEX_S3_ENDPOINT_URL`` / ``MEWDEX_S3_REGION`` (``MEWDEX_S3_ADDRESSING_STYLE`` for stores that
want path-style URLs), the credentials from boto3's standard chain (``AWS_ACCESS_KEY_ID`` /
``AWS_SECRET_ACCESS_KEY`` / ``AWS_SESSION_TOKEN``, ``AWS_PROFILE`` and the shared files, instance
and container roles). The bucket must exist; mewdex never creates or configures it.

Layout: the local store's, under the prefix: ``<prefix>/<namespace>/<sha[0:2]>/<sha256><ext>``.

Guarantees, the local store's by the object store's own means:

* **No partial blob is ever visible.** An object appears only when its upload completes: a single
  ``PutObject`` up to :data:`PART_SIZE`, a multipart upload above it (streamed, one part in memory at
  a time). The SHA-256 is computed while sending and checked against the key before the upload is
  completed; on a mismatch or any failure the multipart upload is aborted and nothing is stored.
* **Idempotent.** An object already stored with the same SHA-256 (``x-amz-meta-sha256``) and size is
  not uploaded again.
* **What a killed writer leaves** is an unfinished multipart upload (invisible to readers, never an
  object); :meth:`S3BlobStore.clean_staging` aborts the ones older than its cut-off (the local
  store's staging clean-up). A bucket lifecycle rule ``AbortIncompleteMultipartUpload`` does the
  same on the store's side.
* **Reads are ranged.** :meth:`S3BlobStore.open` returns a seekable reader that issues ranged
  ``GetObject`` requests, so HTTP ``Range`` requests on the media routes fetch only what they send.

Failures of the store (unreachable endpoint, denied credentials, missing bucket) raise
:class:`~mewdex.storage.blobs.BlobStoreError` (an ``OSError``); a missing object raises
``FileNotFoundError`` like a missing file. The connection to the store is infrastructure configured by
the operator (like ``MEWDEX_DATABASE_URL``), not outgoing HTTP on a user's behalf: it does not go
through :mod:`mewdex.egress`.
"""

from __future__ import annotations

import hashlib
import io
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any, BinaryIO, TypeVar

from mewdex.config import parse_blob_store_url
from mewdex.storage import failpoints
from mewdex.storage.blobs import KEY_PATTERN, BlobData, BlobStat, BlobStoreError, check_key, check_namespace

#: Size of each part of a multipart upload, and the largest blob sent in one ``PutObject`` (S3's
#: minimum part size is 5 MiB).
PART_SIZE = 8 * 1024 * 1024
MIN_PART_SIZE = 5 * 1024 * 1024
READ_CHUNK = 256 * 1024
# The Content-Type of each stored extension (library.images.MEDIA_TYPES by extension; storage sits below it)
MEDIA_TYPES = {
    ".png": "image/png",
    ".jpg": "image/jpeg",
    ".gif": "image/gif",
    ".webp": "image/webp",
    ".avif": "image/avif",
    ".heic": "image/heic",
    ".mp4": "video/mp4",
    ".webm": "video/webm",
    ".tgs": "application/x-tgsticker",
}
_NOT_FOUND = {"404", "NoSuchKey", "NotFound"}
T = TypeVar("T")


class S3BlobStore:
    """Blobs in ``bucket`` under ``prefix``; see the module docstring for layout and guarantees.

    ``client``: a boto3 S3 client (thread-safe; one per process). Build one from the settings with
    :func:`from_settings`.
    """

    def __init__(self, client: Any, bucket: str, prefix: str = "", *, part_size: int = PART_SIZE) -> None:
        if part_size < MIN_PART_SIZE:
            raise ValueError(f"part_size must be at least {MIN_PART_SIZE} bytes (S3's smallest part)")
        self.client, self.bucket, self.prefix, self.part_size = client, bucket, prefix, part_size

    def __repr__(self) -> str:
        return f"S3BlobStore(s3://{self.bucket}/{self.prefix})"

    def object_key(self, namespace: str | uuid.UUID, key: str) -> str:
        """The object's key in the bucket. Raises ValueError for an invalid namespace/key."""
        key = check_key(key)
        return f"{self.prefix}{check_namespace(namespace)}/{key[:2]}/{key}"

    # ------------------------------------------------------------ writes

    def put(self, namespace: str | uuid.UUID, key: str, data: BlobData) -> str:
        """Store the bytes (or a stream, read one part at a time) under ``key``; returns the object key.

        Raises:
            ValueError: invalid namespace/key, or ``blob_digest_mismatch`` (nothing stored).
            BlobStoreError: the store failed (an unfinished multipart upload is aborted).
        """
        object_key = self.object_key(namespace, key)
        stream = io.BytesIO(data) if isinstance(data, (bytes, bytearray, memoryview)) else data
        first = _read_full(stream, self.part_size)
        if len(first) < self.part_size:  # it all fits in one request
            digest = hashlib.sha256(first).hexdigest()
            if digest != key[:64]:
                raise ValueError("blob_digest_mismatch")
            if self._stored(object_key, digest, len(first)):
                return object_key
            failpoints.disk_full("blob.write")
            self._call(
                self.client.put_object,
                Bucket=self.bucket,
                Key=object_key,
                Body=first,
                ContentType=MEDIA_TYPES[key[64:]],
                Metadata={"sha256": digest},
            )
            return object_key
        self._put_multipart(object_key, key, first, stream)
        return object_key

    def _put_multipart(self, object_key: str, key: str, first: bytes, stream: BinaryIO) -> None:
        upload_id = self._call(
            self.client.create_multipart_upload,
            Bucket=self.bucket,
            Key=object_key,
            ContentType=MEDIA_TYPES[key[64:]],
            Metadata={"sha256": key[:64]},  # checked below before the object can appear
        )["UploadId"]
        try:
            digest, part = hashlib.sha256(), first
            parts: list[dict[str, Any]] = []
            while part:
                digest.update(part)
                failpoints.disk_full("blob.write")
                answer = self._call(
                    self.client.upload_part,
                    Bucket=self.bucket,
                    Key=object_key,
                    UploadId=upload_id,
                    PartNumber=len(parts) + 1,
                    Body=part,
                )
                parts.append({"PartNumber": len(parts) + 1, "ETag": answer["ETag"]})
                part = _read_full(stream, self.part_size)
            if digest.hexdigest() != key[:64]:
                raise ValueError("blob_digest_mismatch")
            self._call(
                self.client.complete_multipart_upload,
                Bucket=self.bucket,
                Key=object_key,
                UploadId=upload_id,
                MultipartUpload={"Parts": parts},
            )
        except BaseException:
            try:
                self.client.abort_multipart_upload(Bucket=self.bucket, Key=object_key, UploadId=upload_id)
            except Exception:  # noqa: BLE001 - clean_staging aborts it later; the first error is the one to raise
                pass
            raise

    def delete(self, namespace: str | uuid.UUID, key: str) -> bool:
        """Remove the blob; True if it existed. Raises ValueError (invalid namespace/key), BlobStoreError."""
        object_key = self.object_key(namespace, key)
        if self._head(object_key) is None:
            return False
        self._call(self.client.delete_object, Bucket=self.bucket, Key=object_key)
        return True

    def clean_staging(self, older_than_seconds: float) -> int:
        """Abort the unfinished multipart uploads under the prefix started more than
        ``older_than_seconds`` ago (what killed writers left); returns how many."""
        cutoff = time.time() - older_than_seconds
        aborted = 0
        pages = self.client.get_paginator("list_multipart_uploads").paginate(Bucket=self.bucket, Prefix=self.prefix)
        for page in self._call(lambda: list(pages)):
            for upload in page.get("Uploads") or []:
                if upload["Initiated"].timestamp() >= cutoff:
                    continue
                try:
                    self.client.abort_multipart_upload(
                        Bucket=self.bucket, Key=upload["Key"], UploadId=upload["UploadId"]
                    )
                except Exception as exc:  # noqa: BLE001 - finished or aborted concurrently
                    if _code(exc) != "NoSuchUpload":
                        raise _wrap("AbortMultipartUpload", exc) from exc
                    continue
                aborted += 1
        return aborted

    # ------------------------------------------------------------ reads

    def open(self, namespace: str | uuid.UUID, key: str) -> BinaryIO:
        """A seekable, buffered reader of the blob (ranged ``GetObject`` requests; the caller closes it).

        Raises:
            ValueError: invalid namespace/key. FileNotFoundError: no such blob. BlobStoreError.
        """
        raw = _RangedReader(self, self.object_key(namespace, key))
        return io.BufferedReader(raw, READ_CHUNK)  # type: ignore[return-value]

    def read_bytes(self, namespace: str | uuid.UUID, key: str) -> bytes:
        """The blob's bytes (one ``GetObject``). Raises ValueError, FileNotFoundError, BlobStoreError."""
        body = self._call(self.client.get_object, Bucket=self.bucket, Key=self.object_key(namespace, key))["Body"]
        with body:
            return self._call(body.read)

    def stat(self, namespace: str | uuid.UUID, key: str) -> BlobStat | None:
        """Size and last modification of the blob (``HeadObject``), None when there is none."""
        head = self._head(self.object_key(namespace, key))
        return None if head is None else BlobStat(head["ContentLength"], head["LastModified"].timestamp())

    def exists(self, namespace: str | uuid.UUID, key: str) -> bool:
        """True if the blob is stored (``HeadObject``). Raises ValueError, BlobStoreError."""
        return self._head(self.object_key(namespace, key)) is not None

    def iter_keys(self, namespace: str | uuid.UUID) -> Iterator[str]:
        """Every valid key stored in ``namespace``, sorted; stray objects are skipped."""
        base = f"{self.prefix}{check_namespace(namespace)}/"
        pages = self.client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=base)
        found = []
        for page in self._call(lambda: list(pages)):
            for entry in page.get("Contents") or []:
                shard, _, name = entry["Key"][len(base) :].partition("/")
                if KEY_PATTERN.fullmatch(name) and name[:2] == shard:
                    found.append(name)
        yield from sorted(found)

    def free_bytes(self) -> int | None:
        """None: an object store has no free-space figure (quotas still apply per account)."""
        return None

    # ------------------------------------------------------------ helpers

    def _head(self, object_key: str) -> dict[str, Any] | None:
        try:
            return self._call(self.client.head_object, Bucket=self.bucket, Key=object_key)
        except FileNotFoundError:
            return None

    def _stored(self, object_key: str, digest: str, size: int) -> bool:
        head = self._head(object_key)
        return head is not None and head["ContentLength"] == size and head.get("Metadata", {}).get("sha256") == digest

    def _call(self, fn: Callable[..., T], **kwargs: Any) -> T:
        """``fn(**kwargs)`` with the store's errors as FileNotFoundError / BlobStoreError."""
        try:
            return fn(**kwargs)
        except (OSError, ValueError):
            raise
        except Exception as exc:
            if _code(exc) in _NOT_FOUND:
                raise FileNotFoundError(f"no such blob: s3://{self.bucket}/{kwargs.get('Key', '')}") from None
            raise _wrap(getattr(fn, "__name__", "request"), exc) from exc


class _RangedReader(io.RawIOBase):
    """A seekable reader of one object: a ``GetObject`` from the current position to the end, read as
    far as the caller reads; a seek elsewhere starts a new ranged request."""

    def __init__(self, store: S3BlobStore, object_key: str) -> None:
        super().__init__()
        self._store, self._key = store, object_key
        answer = store._call(store.client.get_object, Bucket=store.bucket, Key=object_key)
        self._body: Any = answer["Body"]
        self._size: int = answer["ContentLength"]
        self._pos = self._body_pos = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self._size}[whence]
        self._pos = max(0, base + offset)
        return self._pos

    def readinto(self, buffer: Any) -> int:
        if self._pos >= self._size or len(buffer) == 0:
            return 0
        if self._body is None or self._body_pos != self._pos:
            self._close_body()
            store = self._store
            answer = store._call(
                store.client.get_object, Bucket=store.bucket, Key=self._key, Range=f"bytes={self._pos}-"
            )
            self._body, self._body_pos = answer["Body"], self._pos
        data = self._store._call(self._body.read, amt=min(len(buffer), self._size - self._pos))
        if not data:
            raise BlobStoreError(f"s3://{self._store.bucket}/{self._key} ended early at byte {self._pos}")
        buffer[: len(data)] = data
        self._pos += len(data)
        self._body_pos = self._pos
        return len(data)

    def _close_body(self) -> None:
        if self._body is not None:
            self._body.close()
            self._body = None

    def close(self) -> None:
        self._close_body()
        super().close()


def from_settings(url: str, *, endpoint_url: str | None, region: str | None, addressing_style: str) -> S3BlobStore:
    """The store of ``MEWDEX_BLOB_STORE=url`` with a boto3 client made from the S3 settings and the
    standard AWS credential chain. Raises ValueError for a malformed URL."""
    import boto3
    from botocore.config import Config

    bucket, prefix = parse_blob_store_url(url)
    config = Config(
        retries={"max_attempts": 4, "mode": "standard"},
        connect_timeout=5,
        read_timeout=60,
        max_pool_connections=64,  # the API's request threads and the upload threads share one client
        s3={"addressing_style": addressing_style},
    )
    client = boto3.session.Session().client("s3", endpoint_url=endpoint_url, region_name=region, config=config)
    return S3BlobStore(client, bucket, prefix)


def _read_full(stream: BinaryIO, size: int) -> bytes:
    """Up to ``size`` bytes of ``stream``, fewer only at its end."""
    out = bytearray()
    while len(out) < size:
        chunk = stream.read(size - len(out))
        if not chunk:
            break
        out += chunk
    return bytes(out)


def _code(exc: BaseException) -> str:
    """The S3 error code of a botocore ClientError (``""`` for anything else)."""
    response = getattr(exc, "response", None)
    return str(((response or {}).get("Error") or {}).get("Code") or "") if isinstance(response, dict) else ""


def _wrap(operation: str, exc: BaseException) -> BlobStoreError:
    code = _code(exc)
    detail = code or type(exc).__name__
    return BlobStoreError(f"the object store failed ({operation}: {detail})")
