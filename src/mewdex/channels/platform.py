"""What every chat platform call shares: one error, one JSON call, one mapping to a failed delivery,
one multipart encoder, one inbound image fetch. Every request goes through :mod:`mewdex.egress`.

* :class:`PlatformError`: a failed call. ``code`` is ours (``<channel>_*`` such as
  ``wecom_ip_not_trusted``, ``channel_window_closed``, :data:`NOT_JSON`, or the ``egress_*`` code of
  a call that got no answer); ``platform_code`` / ``platform_error`` are the platform's own (an
  errcode, a ``ret``, a ``retcode``, an HTTP status) and are what the delivery log shows.
* :func:`call_json`: one request whose answer is JSON. The retry rule, the same for every channel
  (and for the providers, through :attr:`mewdex.egress.EgressError.retryable`): no answer
  (``egress_failed``), a timeout (``egress_timeout``, ``egress_deadline``), an HTTP 5xx and a
  408/429 that egress did not wait out (after its ``Retry-After``) are retryable; another refusal
  (4xx, an address the guard refuses) is not.
* :func:`failure`: a :class:`PlatformError` as :class:`~mewdex.channels.base.DeliveryFailed`
  (``egress_*`` → ``channel_unreachable``; the channel's own codes through its map; anything else
  ``channel_platform_error``).
* :func:`multipart`: a ``multipart/form-data`` body (fields and files).
* :func:`fetch_image`: the bytes of an inbound image at a platform's URL.
"""

from __future__ import annotations

import json as _json
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from mewdex.channels.base import DeliveryFailed, MemeFile
from mewdex.egress import RETRY_STATUSES, EgressError, fetch

#: ``code`` of an answer that is not JSON (or not the JSON shape asked for)
NOT_JSON = "platform_not_json"
#: ``code`` of an HTTP 429 (a delivery's ``channel_rate_limited``)
RATE_LIMITED = "channel_rate_limited"
#: the largest inbound image :func:`fetch_image` takes by default (bytes)
IMAGE_MAX_BYTES = 20 * 1024 * 1024


class PlatformError(Exception):
    """A failed platform call (module doc): ``code``, ``message`` (names the platform and the call,
    never a token), ``platform_code`` (the platform's own code, as it sent it, or None),
    ``platform_error`` (its text), ``retryable``, ``retry_after`` (seconds the platform asked to wait)."""

    def __init__(
        self,
        code: str,
        message: str,
        platform_code: int | str | None = None,
        platform_error: str = "",
        *,
        retryable: bool = False,
        retry_after: float | None = None,
    ):
        super().__init__(message)
        self.code, self.message = code, message
        self.platform_code, self.platform_error = platform_code, platform_error
        self.retryable, self.retry_after = retryable or retry_after is not None, retry_after


@dataclass(frozen=True)
class Answer:
    """A platform's JSON answer: the HTTP ``status``, the parsed ``data`` (a dict; a JSON value of
    another shape is :data:`NOT_JSON`) and the response ``headers`` (lower-case names)."""

    status: int
    data: dict[str, Any]
    headers: Mapping[str, str]


def call_json(
    method: str,
    url: str,
    *,
    platform: str,
    what: str,
    error_code: str,
    headers: dict[str, str] | None = None,
    json: Any = None,
    content: bytes | None = None,
    timeout: float = 15.0,
    max_bytes: int | None = None,
    refused: Mapping[int, str] | None = None,
    errors_in_body: bool = False,
) -> Answer:
    """One call whose answer is a JSON object. ``platform`` (``"WeCom"``) and ``what`` (the call's
    name) word the messages; ``error_code`` is the code of a refusal.

    Raises :class:`PlatformError`: the ``egress_*`` code when there was no answer (retryable per
    :attr:`EgressError.retryable`); ``refused[status]`` for a status the caller names (401/403: a
    stale token); ``error_code`` for an HTTP 5xx (retryable) and for any other HTTP ≥ 400 unless
    ``errors_in_body`` (the platform explains a refusal in a JSON body the caller reads), but
    :data:`RATE_LIMITED` for a 429 (retryable, ``retry_after`` from its ``Retry-After``; a 408 is
    retryable too); :data:`NOT_JSON` for an answer that is not a JSON object (retryable after a 5xx,
    408 or 429). ``platform_code`` is the HTTP status in each case that had an answer."""
    kw: dict[str, Any] = {} if max_bytes is None else {"max_bytes": max_bytes}
    try:
        response = fetch(method, url, headers=headers, json=json, content=content, timeout=timeout, **kw)
    except EgressError as exc:
        raise PlatformError(exc.code, f"{platform} {what} failed: {exc.message}", retryable=exc.retryable) from None
    status = response.status
    # a 408/429 egress did not wait out: try again later, after its Retry-After when it gave one
    later = status >= 500 or status in RETRY_STATUSES
    wait = response.retry_after if status in RETRY_STATUSES else None
    if refused and status in refused:
        raise PlatformError(refused[status], f"{platform} refused {what} ({status})", status)
    if status >= 500 or (status >= 400 and not errors_in_body):
        code = RATE_LIMITED if status == 429 else error_code
        message = f"{platform} {what} answered HTTP {status}"
        raise PlatformError(code, message, status, retryable=later, retry_after=wait)
    try:
        data = response.json()
    except (ValueError, RecursionError):  # not JSON, or nested deeper than the parser goes
        data = None
    if not isinstance(data, dict):
        message = f"{platform} {what} did not answer a JSON object (HTTP {status})"
        raise PlatformError(NOT_JSON, message, status, retryable=later, retry_after=wait)
    return Answer(status, data, response.headers)


def failure(exc: PlatformError | EgressError, codes: Mapping[str, str] | None = None) -> DeliveryFailed:
    """``exc`` as the framework's :class:`DeliveryFailed`: ``codes`` maps the channel's own codes to
    the delivery's (``{"wecom_user_invalid": "channel_blocked"}``; a code mapped to itself stays);
    ``egress_*`` codes (no answer) become ``channel_unreachable``, ``channel_*`` codes stay, any other
    ``channel_platform_error``. The platform's code (else ours) and text go to the delivery log."""
    if isinstance(exc, EgressError):
        exc = PlatformError(exc.code, exc.message, retryable=exc.retryable)
    if codes and exc.code in codes:
        code = codes[exc.code]
    elif exc.code.startswith("egress_"):
        code = "channel_unreachable"
    elif exc.code.startswith("channel_"):
        code = exc.code
    else:
        code = "channel_platform_error"
    return DeliveryFailed(
        code,
        exc.message,
        platform_code=exc.platform_code if exc.platform_code is not None else exc.code,
        platform_error=exc.platform_error or exc.message,
        retry_after=exc.retry_after,
        retryable=exc.retryable,
    )


def _quoted(value: str) -> str:
    """A header parameter value without the characters that would end it (quotes, line breaks)."""
    return value.replace('"', "").replace("\r", "").replace("\n", "")


def multipart(
    fields: Mapping[str, Any] | None = None,
    files: Mapping[str, tuple[str, bytes, str]] | None = None,
    *,
    file_length: bool = False,
) -> tuple[bytes, str]:
    """A ``multipart/form-data`` body and its ``content-type`` header value. ``fields``: name →
    value (a string as it is, anything else as JSON); ``files``: name → ``(file name, bytes,
    content type)``; ``file_length`` adds ``filelength=<bytes>`` to each file's disposition (WeCom's
    media upload asks for it)."""
    boundary = f"mewdex-{uuid.uuid4().hex}"
    out = bytearray()
    for name, value in (fields or {}).items():
        text = value if isinstance(value, str) else _json.dumps(value, ensure_ascii=False)
        out += f'--{boundary}\r\nContent-Disposition: form-data; name="{_quoted(name)}"\r\n\r\n'.encode()
        out += text.encode() + b"\r\n"
    for name, (filename, data, content_type) in (files or {}).items():
        length = f"; filelength={len(data)}" if file_length else ""
        out += (
            f'--{boundary}\r\nContent-Disposition: form-data; name="{_quoted(name)}"; '
            f'filename="{_quoted(filename)}"{length}\r\nContent-Type: {content_type}\r\n\r\n'
        ).encode()
        out += data + b"\r\n"
    out += f"--{boundary}--\r\n".encode()
    return bytes(out), f"multipart/form-data; boundary={boundary}"


def fetch_image(
    url: str, max_bytes: int = IMAGE_MAX_BYTES, *, content_types: tuple[str, ...] | None = ("image/",)
) -> bytes:
    """The bytes of an inbound image at ``url``: a 200 answer of at most ``max_bytes``, of one of
    ``content_types`` (None: any; Telegram serves files as ``application/octet-stream``). Raises
    :class:`~mewdex.egress.EgressError`, or :class:`PlatformError` ``platform_download_failed`` for
    another status (the inbound task then answers without the image)."""
    response = fetch("GET", url, content_types=content_types, max_bytes=max_bytes)
    if response.status != 200:
        raise PlatformError("platform_download_failed", f"the image download answered HTTP {response.status}")
    return response.content


def loopback(url: str | None) -> bool:
    """The loopback rule, for every callback a platform must reach: whether ``url`` (a public base
    URL or an endpoint under it) is this machine only: none, ``localhost`` / ``*.localhost``,
    ``127.*`` or ``::1``. WeCom, Discord and Telegram's webhook mode cannot call such a URL."""
    host = (urlsplit(url or "").hostname or "").lower()
    return host in ("", "localhost", "::1") or host.startswith("127.") or host.endswith(".localhost")


def picture_bytes(meme: MemeFile) -> bytes:
    """A meme's bytes for a platform that shows only pictures (QQ, WeCom, ClawBot):
    :meth:`MemeFile.as_picture` (a clip as a GIF, AVIF/HEIC as PNG). Raises :class:`PlatformError`
    ``channel_platform_error`` when its file cannot be decoded."""
    from mewdex.library.images import ImageError

    try:
        return meme.as_picture()
    except ImageError as exc:
        raise PlatformError("channel_platform_error", f"the meme cannot be sent as a picture ({exc.code})") from None
