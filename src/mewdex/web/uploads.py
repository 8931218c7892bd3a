"""Streaming ``multipart/form-data`` reader with hard limits that do not trust ``Content-Length``.

The body is read chunk by chunk from the ASGI receive channel and fed to python-multipart's
streaming parser. The bytes actually received are counted, whatever the header says (true, false
or absent): as soon as a file part passes the per-file limit or the body passes the request limit,
reading stops and :class:`ApiError` 413 ``upload_too_large`` is raised — at most the limit plus one
chunk is ever read. A true ``Content-Length`` above the request limit is refused before reading.

File parts are spooled (memory up to 1 MiB, then an anonymous temporary file that the OS removes
when it is closed or the process dies), so no temporary file outlives the request. A full disk
while spooling is 507 ``insufficient_storage``.

Memory: the bytes of a file are read into memory only to add it, inside :func:`memory_slot`, which
bounds the file bytes held at once by all requests of the process to :data:`IN_FLIGHT_BYTES` (one
larger file still proceeds alone); when the last slot is given back, freed memory is returned to the
OS (``malloc_trim``), so the process shrinks back to its baseline after a burst.
"""

from __future__ import annotations

import ctypes
import hashlib
import tempfile
import threading
import unicodedata
from collections.abc import Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from typing import IO, TYPE_CHECKING

from fastapi import Request
from python_multipart.exceptions import MultipartParseError
from python_multipart.multipart import MultipartParser, parse_options_header

if TYPE_CHECKING:
    from python_multipart.multipart import MultipartCallbacks

from mewdex.config import get_settings
from mewdex.storage.blobs import is_disk_full
from mewdex.web.errors import ApiError

SPOOL_BYTES = 1024 * 1024
IN_FLIGHT_BYTES = 32 * 1024 * 1024
MAX_FIELD_BYTES = 4096
MAX_FIELDS = 32


_in_flight: dict[str, int] = {}  # streamed uploads per scope in this process (one event loop)


@asynccontextmanager
async def upload_slot(scope_id: str):
    """One of the scope's ``MEWDEX_MAX_CONCURRENT_UPLOADS`` slots while a body streams in; 429
    ``too_many_uploads`` (``Retry-After: 1``) when all are taken."""
    limit = get_settings().max_concurrent_uploads
    if _in_flight.get(scope_id, 0) >= limit:
        raise ApiError(
            429, "too_many_uploads", f"at most {limit} uploads at once per user; try again shortly", {"limit": limit}
        )
    _in_flight[scope_id] = _in_flight.get(scope_id, 0) + 1
    try:
        yield
    finally:
        _in_flight[scope_id] -= 1
        if not _in_flight[scope_id]:
            del _in_flight[scope_id]


@dataclass
class UploadedFile:
    """One ``files`` part: the client's file name, its declared type, size and spooled bytes."""

    filename: str
    content_type: str | None
    size: int
    file: IO[bytes]

    def read(self) -> bytes:
        self.file.seek(0)
        return self.file.read()

    def sha256(self) -> bytes:
        """The SHA-256 digest of the bytes, read from the spool in 1 MiB chunks."""
        digest = hashlib.sha256()
        self.file.seek(0)
        while chunk := self.file.read(SPOOL_BYTES):
            digest.update(chunk)
        return digest.digest()


class _MemoryBudget:
    """File bytes held in memory by uploads of this process, bounded (see :func:`memory_slot`)."""

    def __init__(self, limit: int):
        self.limit, self.used, self.holders = limit, 0, 0
        self.changed = threading.Condition()

    @contextmanager
    def slot(self, size: int) -> Iterator[None]:
        with self.changed:
            self.changed.wait_for(lambda: self.holders == 0 or self.used + size <= self.limit)
            self.used += size
            self.holders += 1
        try:
            yield
        finally:
            with self.changed:
                self.used -= size
                self.holders -= 1
                idle = self.holders == 0
                self.changed.notify_all()
            if idle:
                _trim_heap()


def _trim_heap() -> None:
    """Give freed heap memory back to the OS (glibc; a no-op elsewhere)."""
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


_memory = _MemoryBudget(IN_FLIGHT_BYTES)


def memory_slot(size: int):
    """Context manager: wait until ``size`` more bytes of uploaded files may be held in memory by this
    process (or none are), hold them while the block runs; the bytes are read inside the block."""
    return _memory.slot(size)


@dataclass
class UploadForm:
    """The parsed form: file parts (of field ``files_field``) in order, and small text fields
    (``fields``: the last value per name; ``values``: every value per name, in order)."""

    files: list[UploadedFile] = field(default_factory=list)
    fields: dict[str, str] = field(default_factory=dict)
    values: dict[str, list[str]] = field(default_factory=dict)

    def close(self) -> None:
        for f in self.files:
            f.file.close()


def _too_large(what: str, limit: int, filename: str | None = None) -> ApiError:
    details = {"limit_bytes": limit, "limit": what}
    if filename is not None:
        details["filename"] = filename
    return ApiError(413, "upload_too_large", f"the {what} is larger than {limit} bytes", details)


class _Collector:
    """python-multipart callbacks building an :class:`UploadForm` under the limits."""

    def __init__(self, form: UploadForm, *, files_field: str, max_file_bytes: int, max_files: int):
        self.form, self.files_field = form, files_field
        self.max_file_bytes, self.max_files = max_file_bytes, max_files
        self.header_field = bytearray()
        self.header_value = bytearray()
        self.headers: dict[str, bytes] = {}
        self.current: UploadedFile | None = None
        self.field_name: str | None = None
        self.field_value = bytearray()
        self.ended = False

    def callbacks(self) -> MultipartCallbacks:
        return {
            "on_part_begin": self.part_begin,
            "on_header_field": lambda d, s, e: self.header_field.extend(d[s:e]),
            "on_header_value": lambda d, s, e: self.header_value.extend(d[s:e]),
            "on_header_end": self.header_end,
            "on_headers_finished": self.headers_finished,
            "on_part_data": self.part_data,
            "on_part_end": self.part_end,
            "on_end": self.end,
        }

    def part_begin(self) -> None:
        self.headers = {}
        self.current, self.field_name = None, None
        self.field_value = bytearray()

    def header_end(self) -> None:
        self.headers[bytes(self.header_field).decode("latin-1").lower()] = bytes(self.header_value)
        self.header_field.clear()
        self.header_value.clear()

    def headers_finished(self) -> None:
        _, options = parse_options_header(self.headers.get("content-disposition", b""))
        name = options.get(b"name", b"").decode("utf-8", "replace")
        filename = options.get(b"filename")
        if filename is not None or name == self.files_field:
            if name != self.files_field:
                raise ApiError(422, "invalid_request", f"files must be sent in the field {self.files_field!r}")
            if len(self.form.files) >= self.max_files:
                raise ApiError(
                    422, "too_many_files", f"at most {self.max_files} files per request", {"max_files": self.max_files}
                )
            content_type = self.headers.get("content-type")
            self.current = UploadedFile(
                filename="".join(
                    ch for ch in (filename or b"").decode("utf-8", "replace") if unicodedata.category(ch) != "Cc"
                ),  # no NUL/newline reaches a row or log
                content_type=content_type.decode("latin-1") if content_type else None,
                size=0,
                file=tempfile.SpooledTemporaryFile(max_size=SPOOL_BYTES),
            )
            self.form.files.append(self.current)
        else:
            if sum(map(len, self.form.values.values())) >= MAX_FIELDS:
                raise ApiError(422, "invalid_request", "too many form fields")
            self.field_name = name

    def part_data(self, data: bytes, start: int, end: int) -> None:
        if self.current is not None:
            self.current.size += end - start
            if self.current.size > self.max_file_bytes:
                raise _too_large("file", self.max_file_bytes, self.current.filename)
            self.current.file.write(data[start:end])
        elif self.field_name is not None:
            self.field_value.extend(data[start:end])
            if len(self.field_value) > MAX_FIELD_BYTES:
                raise ApiError(422, "invalid_request", f"the form field {self.field_name!r} is too long")

    def part_end(self) -> None:
        if self.field_name is not None:
            value = self.field_value.decode("utf-8", "replace")
            self.form.fields[self.field_name] = value
            self.form.values.setdefault(self.field_name, []).append(value)
        self.current, self.field_name = None, None

    def end(self) -> None:
        self.ended = True


async def read_upload(
    request: Request, *, max_file_bytes: int, max_request_bytes: int, max_files: int, files_field: str = "files"
) -> UploadForm:
    """Read a ``multipart/form-data`` request body under the limits (see the module docstring).

    Returns:
        the form; the caller must ``close()`` it.
    Raises:
        ApiError: 413 ``upload_too_large`` (details: ``limit``, ``limit_bytes``, ``filename``);
            415 ``unsupported_media_type`` (not multipart/form-data); 422 ``invalid_request``
            (malformed or truncated body, a file in another field), ``too_many_files``.
    """
    content_type, options = parse_options_header(request.headers.get("content-type", ""))
    boundary = options.get(b"boundary")
    if content_type != b"multipart/form-data":
        raise ApiError(415, "unsupported_media_type", "send the files as multipart/form-data")
    if not boundary:
        raise ApiError(422, "invalid_request", "the multipart boundary is missing")
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > max_request_bytes:
        raise _too_large("request", max_request_bytes)

    form = UploadForm()
    collector = _Collector(form, files_field=files_field, max_file_bytes=max_file_bytes, max_files=max_files)
    parser = MultipartParser(boundary, collector.callbacks())
    received = 0
    try:
        async for chunk in request.stream():
            received += len(chunk)
            if received > max_request_bytes:
                raise _too_large("request", max_request_bytes)
            if chunk:
                parser.write(chunk)
            if collector.ended:
                break
        parser.finalize()
        if not collector.ended:
            raise ApiError(422, "invalid_request", "the multipart body is incomplete")
    except MultipartParseError as exc:
        form.close()
        raise ApiError(422, "invalid_request", f"the multipart body is malformed: {exc}") from None
    except OSError as exc:
        form.close()
        if is_disk_full(exc):  # the spool's temporary file could not grow
            raise ApiError(
                507, "insufficient_storage", "the disk is full: nothing of this request was stored"
            ) from None
        raise
    except BaseException:
        form.close()
        raise
    return form


# OpenAPI of a search-by-image body (the routes read it themselves, after authentication).
QUERY_IMAGE_OPENAPI = {
    "requestBody": {
        "required": True,
        "content": {
            "multipart/form-data": {
                "schema": {
                    "type": "object",
                    "required": ["file"],
                    "properties": {
                        "file": {"type": "string", "format": "binary"},
                        "n_results": {"type": "integer", "default": 10},
                        "collection": {"type": "string"},
                        "animated": {"type": "boolean"},
                    },
                }
            }
        },
    }
}


async def read_query_image(request: Request, *, max_bytes: int) -> tuple[bytes, str, dict[str, list[str]]]:
    """The image of a search by image (multipart field ``file``, ≤ ``max_bytes``) with its file name
    and the small text fields (every value per name), through :func:`read_upload` (bounded while streaming, nothing
    left on
    disk). Errors as :func:`read_upload`; 422 ``invalid_request`` without a ``file`` part."""
    form = await read_upload(
        request, max_file_bytes=max_bytes, max_request_bytes=max_bytes + SPOOL_BYTES, max_files=1, files_field="file"
    )
    try:
        if not form.files:
            raise ApiError(422, "invalid_request", "the multipart field 'file' (the image) is missing")
        return form.files[0].read(), form.files[0].filename, form.values
    finally:
        form.close()
