"""Outgoing HTTP: the one place mewdex calls out (a test fails when another module imports an HTTP client).

:func:`fetch` is for any address that did not come from the operator's own command line
(providers, channels, schedules, URLs in user content):

* ``https`` only; ``http`` just for hosts the admin names in ``MEWDEX_EGRESS_ALLOW_HOSTS``
  (``host:port`` entries, e.g. a vLLM on the LAN or a local test server) and for the ``host:port``
  of ``MEWDEX_OIDC_ISSUER`` (the admin named that provider too: an Authelia or Keycloak on the LAN).
* The name is resolved once; every address it resolves to must be public — loopback, private
  (RFC 1918), link-local (cloud metadata ``169.254.169.254``), CGNAT ``100.64/10``, ULA
  ``fc00::/7``, IPv4-mapped/6to4/Teredo forms of those, multicast, reserved and unspecified
  addresses are refused — unless ``host:port`` is allow-listed. The connection goes to the address
  that was checked (no second resolution: DNS rebinding cannot swap it), with the original name as
  ``Host`` and TLS SNI/certificate name.
* Redirects are followed by hand, at most :data:`MAX_REDIRECTS`, each one checked again. To another
  origin (scheme, host or port; ``http`` → ``https`` on the same host excepted, as httpx2 does) the
  credential headers are dropped (``Authorization``, ``Proxy-Authorization``, ``Cookie``,
  ``Api-Key``, ``X-Api-Key`` and any the caller names in ``secret_headers``), and a 307/308 that would
  re-send a body there is refused (``egress_redirect_refused``): the body may hold credentials too.
* ``trust_env=False`` (no proxy or netrc from the environment), connect/read timeouts (a wait past
  one: ``egress_timeout``), an overall
  ``deadline`` per call (:data:`DEFAULT_DEADLINE_SECONDS`, redirects and retries included; enforced on
  every socket read and write, so a server that trickles a byte at a time is cut there:
  ``egress_deadline``), a response size cap counted while streaming, an optional content-type
  allow-list.
* A 408 or 429 answer is retried (at most ``retries`` times) after its ``Retry-After`` (seconds or
  an HTTP date; a 408 without one after 1 s, then 2 s) when that wait fits in the deadline and
  :data:`MAX_RETRY_WAIT_SECONDS`; otherwise (or a 429 without ``Retry-After``) the answer is
  returned (:attr:`EgressResponse.retry_after` tells the caller how long to wait, e.g. to
  reschedule a task).
* Errors are :class:`EgressError` with a stable code; messages name the host, never headers,
  query strings or bodies (which may hold secrets).

:func:`operator_request` is for the address the operator typed (``mewdex search --server URL``):
no address checks, but the same ``trust_env=False`` and timeouts.

Imports only the standard library, ``httpx2``/``httpcore2`` and :mod:`mewdex.config`. One HTTP client stack:
``httpx2`` is the one the ``openai`` and ``mcp`` SDKs require, so :func:`fetch`, the SDK client
(:func:`guarded_client`) and the operator's client use it too; ``httpx`` is only a test tool
(Starlette's TestClient, python-telegram-bot and the OIDC provider mock need it).
"""

from __future__ import annotations

import email.utils
import ipaddress
import logging
import socket
import ssl
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from datetime import UTC, datetime
from urllib.parse import urljoin, urlsplit

import httpcore2
import httpx2

from mewdex.config import get_settings

log = logging.getLogger(__name__)
# httpx2 logs each request line with its full URL at INFO; URLs may carry secrets (a Telegram bot
# token is part of the path), so only its warnings reach the log.
logging.getLogger("httpx2").setLevel(logging.WARNING)
MAX_REDIRECTS = 3
DEFAULT_MAX_BYTES = 10 * 1024 * 1024
DEFAULT_TIMEOUT = httpx2.Timeout(connect=5.0, read=30.0, write=30.0, pool=5.0)
#: the whole of one :func:`fetch` (connects, redirects, retries, every byte), seconds
DEFAULT_DEADLINE_SECONDS = 60.0
#: the longest ``Retry-After`` :func:`fetch` waits itself; a longer one is the caller's to honour
MAX_RETRY_WAIT_SECONDS = 10.0
RETRY_STATUSES = (408, 429)
#: headers never sent to another origin on a redirect
CREDENTIAL_HEADERS = frozenset({"authorization", "proxy-authorization", "cookie", "api-key", "x-api-key"})
_DEFAULT_PORTS = {"http": 80, "https": 443}
#: the codes of a call the other side did not answer in time
TIMEOUT_CODES = ("egress_timeout", "egress_deadline")


class EgressError(Exception):
    """A refused or failed outgoing request. ``code``: ``egress_scheme_refused``,
    ``egress_address_refused``, ``egress_unresolvable``, ``egress_too_many_redirects``,
    ``egress_redirect_refused``, ``egress_too_large``, ``egress_content_type``, ``egress_timeout``
    (a connect/read/write wait ran past its timeout), ``egress_deadline`` (the call's overall deadline
    passed), ``egress_failed`` (no answer for another reason: refused connection, reset, TLS)."""

    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code, self.message = code, message

    @property
    def retryable(self) -> bool:
        """True for failures worth another try later (no answer, a timeout, or the deadline passed)."""
        return self.code in TIMEOUT_CODES or self.code == "egress_failed"


@dataclass
class EgressResponse:
    """A finished response: ``status``, ``headers``, the body bytes (≤ the cap) and the final ``url``."""

    status: int
    headers: dict[str, str]
    content: bytes
    url: str
    redirects: list[str] = field(default_factory=list)

    @property
    def retry_after(self) -> float | None:
        """Seconds the server asked to wait (``Retry-After``: seconds or an HTTP date), or None."""
        return parse_retry_after(self.headers.get("retry-after"))

    @property
    def content_type(self) -> str:
        return self.headers.get("content-type", "").split(";")[0].strip().lower()

    def json(self):
        import json

        return json.loads(self.content)


def forbidden_address(ip: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    """True for an address outgoing requests may not reach (see the module doc)."""
    if isinstance(ip, ipaddress.IPv6Address):
        embedded = ip.ipv4_mapped or ip.sixtofour or (ip.teredo[1] if ip.teredo else None)
        if embedded is not None and forbidden_address(embedded):
            return True
        if ip.ipv4_mapped is not None:
            return forbidden_address(ip.ipv4_mapped)
    return (
        (not ip.is_global)
        or ip.is_multicast
        or ip.is_reserved
        or ip.is_unspecified
        or ip.is_link_local
        or ip.is_loopback
        or ip.is_private
        or ip in ipaddress.ip_network("100.64.0.0/10")
    )


def admin_named_hosts() -> set[str]:
    """The ``host:port`` entries outgoing requests may reach although private (and over http): those of
    ``MEWDEX_EGRESS_ALLOW_HOSTS`` and the origin of ``MEWDEX_OIDC_ISSUER`` (lower case; an IPv6
    address in brackets)."""
    settings = get_settings()
    entries = {e.strip().lower() for e in settings.egress_allow_hosts if e.strip()}
    if settings.oidc_issuer:
        parts = urlsplit(settings.oidc_issuer)
        host = (parts.hostname or "").lower()
        if host:
            port = parts.port or _DEFAULT_PORTS.get(parts.scheme.lower(), 443)
            entries.add(f"[{host}]:{port}" if ":" in host else f"{host}:{port}")
    return entries


def _allow_listed(host: str, port: int) -> bool:
    entries = admin_named_hosts()
    name = host.lower()
    return f"{name}:{port}" in entries or f"[{name}]:{port}" in entries


@dataclass(frozen=True)
class Target:
    """A checked destination: the URL's ``scheme``/``host``/``port`` and the ``address`` to connect to."""

    scheme: str
    host: str
    port: int
    address: str


def _resolve(host: str, port: int) -> list[str]:
    try:
        return [ipaddress.ip_address(host).compressed]
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as exc:
        raise EgressError("egress_unresolvable", f"cannot resolve {host}") from exc
    addresses = list(dict.fromkeys(str(info[4][0]).split("%")[0] for info in infos))
    if not addresses:
        raise EgressError("egress_unresolvable", f"cannot resolve {host}")
    return addresses


def check_url(url: str) -> Target:
    """Resolve and check ``url`` once; raises :class:`EgressError` when it may not be fetched."""
    parts = urlsplit(url)
    scheme = (parts.scheme or "").lower()
    host = (parts.hostname or "").lower()
    if scheme not in _DEFAULT_PORTS or not host:
        raise EgressError("egress_scheme_refused", "only https URLs can be fetched")
    try:
        port = parts.port or _DEFAULT_PORTS[scheme]
    except ValueError:
        raise EgressError("egress_scheme_refused", "the URL's port is not valid") from None
    listed = _allow_listed(host, port)
    if scheme != "https" and not listed:
        raise EgressError(
            "egress_scheme_refused",
            f"only https URLs can be fetched ({host}:{port} is not in MEWDEX_EGRESS_ALLOW_HOSTS)",
        )
    addresses = _resolve(host, port)
    if not listed:
        for address in addresses:
            if forbidden_address(ipaddress.ip_address(address)):
                log.warning("egress refused: %s resolves to a non-public address", host)
                raise EgressError(
                    "egress_address_refused", f"{host} resolves to a private, loopback or link-local address"
                )
    return Target(scheme, host, port, addresses[0])


def _pinned_url(url: str, target: Target) -> str:
    parts = urlsplit(url)
    address = f"[{target.address}]" if ":" in target.address else target.address
    path = parts.path or "/"
    return f"{target.scheme}://{address}:{target.port}{path}" + (f"?{parts.query}" if parts.query else "")


def parse_retry_after(value: str | None) -> float | None:
    """A ``Retry-After`` value in seconds (≥ 0), from seconds or an HTTP date; None when absent or unreadable."""
    if not value:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - datetime.now(UTC)).total_seconds())


class _Deadline:
    """The instant a call must be over (``time.monotonic``); None: no deadline."""

    def __init__(self, seconds: float | None) -> None:
        self.at = None if seconds is None else time.monotonic() + seconds

    def left(self) -> float | None:
        return None if self.at is None else self.at - time.monotonic()

    def expired(self) -> bool:
        left = self.left()
        return left is not None and left <= 0

    def bound(self, timeout: float | None, error: type[Exception]) -> float | None:
        """``timeout`` cut to what is left; ``error`` (an httpcore2 timeout) when nothing is."""
        left = self.left()
        if left is None:
            return timeout
        if left <= 0:
            raise error("the call's deadline passed")
        return left if timeout is None else min(timeout, left)


class _DeadlineStream(httpcore2.NetworkStream):
    """A socket stream whose every read, write and TLS handshake ends by the call's deadline."""

    def __init__(self, inner: httpcore2.NetworkStream, deadline: _Deadline) -> None:
        self._inner, self._deadline = inner, deadline

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self._inner.read(max_bytes, self._deadline.bound(timeout, httpcore2.ReadTimeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._inner.write(buffer, self._deadline.bound(timeout, httpcore2.WriteTimeout))

    def close(self) -> None:
        self._inner.close()

    def start_tls(self, ssl_context, server_hostname=None, timeout=None) -> httpcore2.NetworkStream:
        inner = self._inner.start_tls(
            ssl_context, server_hostname, self._deadline.bound(timeout, httpcore2.ConnectTimeout)
        )
        return _DeadlineStream(inner, self._deadline)

    def get_extra_info(self, info: str):
        return self._inner.get_extra_info(info)


class _DeadlineBackend(httpcore2.NetworkBackend):
    def __init__(self, deadline: _Deadline) -> None:
        self._inner, self._deadline = httpcore2.SyncBackend(), deadline

    def connect_tcp(self, host, port, timeout=None, local_address=None, socket_options=None):
        timeout = self._deadline.bound(timeout, httpcore2.ConnectTimeout)
        return _DeadlineStream(
            self._inner.connect_tcp(host, port, timeout, local_address, socket_options), self._deadline
        )

    def connect_unix_socket(self, path, timeout=None, socket_options=None):  # pragma: no cover - never used
        raise httpcore2.ConnectError("unix sockets are not reachable through egress")

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)


_thread_tls = threading.local()


def tls_context() -> ssl.SSLContext:
    """This thread's client TLS context (certificate checks on, the default CA roots, no environment
    settings), shared by the :func:`fetch` and :func:`guarded_client` transports the thread builds: building
    one reads the whole CA bundle (20-40 ms of CPU), which each outgoing call used to pay twice. One per
    thread, not per process: httpcore sets the context's ALPN protocols at every connect, which OpenSSL
    does not allow while another thread creates a connection from the same context."""
    context = getattr(_thread_tls, "context", None)
    if context is None:
        context = _thread_tls.context = httpx2.create_ssl_context(verify=True, trust_env=False)
    return context


class _DeadlineTransport(httpx2.HTTPTransport):
    """httpx2's transport over a connection pool whose sockets honour one :class:`_Deadline`."""

    def __init__(self, deadline: _Deadline) -> None:
        super().__init__(verify=tls_context(), trust_env=False)
        self._pool = httpcore2.ConnectionPool(
            ssl_context=tls_context(),
            network_backend=_DeadlineBackend(deadline),
        )


def _origin(url: str) -> tuple[str, str, int | None]:
    parts = urlsplit(url)
    scheme = (parts.scheme or "").lower()
    try:
        port = parts.port or _DEFAULT_PORTS.get(scheme)
    except ValueError:
        port = None
    return scheme, (parts.hostname or "").lower(), port


def _keeps_credentials(old: str, new: str) -> bool:
    """Same origin, or the same host moving from ``http`` to ``https`` on the default ports (httpx2's rule)."""
    a, b = _origin(old), _origin(new)
    return a == b or (a[1] == b[1] and a[0] == "http" and b[0] == "https" and a[2] == 80 and b[2] == 443)


def fetch(
    method: str,
    url: str,
    *,
    headers: dict[str, str] | None = None,
    content: bytes | None = None,
    json=None,
    max_bytes: int = DEFAULT_MAX_BYTES,
    content_types: tuple[str, ...] | None = None,
    timeout: httpx2.Timeout | float = DEFAULT_TIMEOUT,
    deadline: float | None = DEFAULT_DEADLINE_SECONDS,
    secret_headers: tuple[str, ...] = (),
    retries: int = 2,
) -> EgressResponse:
    """One guarded request (module doc). ``content_types``: accepted media types of the final
    response (e.g. ``("application/json",)``; ``"image/"`` accepts any image). ``timeout``: per
    connect/read/write; ``deadline``: seconds for the whole call (None: none); ``secret_headers``:
    more header names to drop on a cross-origin redirect; ``retries``: 408/429 retries. Raises
    :class:`EgressError`."""
    redirects: list[str] = []
    budget = _Deadline(deadline)
    dropped = CREDENTIAL_HEADERS | {h.lower() for h in secret_headers}
    current = dict(headers or {})
    attempts = 0
    with httpx2.Client(
        transport=_DeadlineTransport(budget), trust_env=False, timeout=timeout, follow_redirects=False
    ) as client:
        hops = 0
        while hops <= MAX_REDIRECTS:
            target = check_url(url)
            request_headers = {
                **current,
                "Host": target.host if target.port == _DEFAULT_PORTS[target.scheme] else f"{target.host}:{target.port}",
            }
            request = client.build_request(
                method,
                _pinned_url(url, target),
                headers=request_headers,
                content=content,
                json=json,
                extensions={"sni_hostname": target.host} if target.scheme == "https" else {},
            )
            try:
                response = client.send(request, stream=True)
            except httpx2.HTTPError as exc:
                raise _failed(target, exc, budget) from None
            try:
                if response.is_redirect and "location" in response.headers:
                    hops += 1
                    redirects.append(url)
                    new_url = urljoin(url, response.headers["location"])
                    if response.status_code in (301, 302, 303) and method.upper() != "HEAD":
                        method, content, json = "GET", None, None
                        current = {k: v for k, v in current.items() if k.lower() != "content-type"}
                    if not _keeps_credentials(url, new_url):
                        if content is not None or json is not None:
                            raise EgressError(
                                "egress_redirect_refused",
                                f"{target.host} redirected a request with a body to another origin",
                            )
                        current = {k: v for k, v in current.items() if k.lower() not in dropped}
                    url = new_url
                    continue
                body = bytearray()
                for chunk in response.iter_bytes():
                    body.extend(chunk)
                    if len(body) > max_bytes:
                        raise EgressError(
                            "egress_too_large", f"the response from {target.host} is over {max_bytes} bytes"
                        )
                result = EgressResponse(
                    response.status_code,
                    {k.lower(): v for k, v in response.headers.items()},
                    bytes(body),
                    url,
                    redirects,
                )
            except httpx2.HTTPError as exc:
                raise _failed(target, exc, budget) from None
            finally:
                response.close()
            if result.status in RETRY_STATUSES and attempts < retries:
                wait = result.retry_after
                if wait is None and result.status == 408:
                    wait = float(2**attempts)
                left = budget.left()
                # a 429 without Retry-After is the caller's (a platform may say how long in its body)
                if wait is not None and wait <= MAX_RETRY_WAIT_SECONDS and (left is None or wait < left):
                    attempts += 1
                    log.info("egress: %s answered %s, retry %d in %.1f s", target.host, result.status, attempts, wait)
                    time.sleep(wait)
                    continue
            if content_types is not None and not any(
                result.content_type == t or (t.endswith("/") and result.content_type.startswith(t))
                for t in content_types
            ):
                raise EgressError("egress_content_type", f"{target.host} answered {result.content_type or 'no type'}")
            return result
    raise EgressError("egress_too_many_redirects", f"more than {MAX_REDIRECTS} redirects")


def _failed(target: Target, exc: Exception, budget: _Deadline) -> EgressError:
    if budget.expired():
        return EgressError("egress_deadline", f"the call to {target.host} ran past its deadline")
    if isinstance(exc, httpx2.TimeoutException):
        return EgressError("egress_timeout", f"{target.host} did not answer in time ({type(exc).__name__})")
    return EgressError("egress_failed", f"request to {target.host} failed: {type(exc).__name__}")


class _Bounded(float):
    """A per-request timeout (seconds) that carries its request's :class:`_Deadline`: httpcore2 hands
    a request's ``timeout`` extension to every socket connect, read and write of that request (its
    streamed body included), where :class:`_BoundedBackend` cuts it to what the deadline leaves."""

    deadline: _Deadline

    def __new__(cls, value: float, deadline: _Deadline) -> _Bounded:
        made = super().__new__(cls, value)
        made.deadline = deadline
        return made


def _left(timeout: float | None, error: type[Exception]) -> float | None:
    return timeout.deadline.bound(float(timeout), error) if isinstance(timeout, _Bounded) else timeout


#: The deadline of the SDK call in progress in this context (:func:`one_deadline`), or None.
_CALL_DEADLINE: ContextVar[_Deadline | None] = ContextVar("mewdex_egress_call_deadline", default=None)


@contextmanager
def one_deadline(seconds: float) -> Iterator[None]:
    """Inside, every request of the :func:`guarded_client` clients ends by one deadline ``seconds``
    from now (or by an enclosing one that ends sooner): the wrapper of one SDK call opens it around
    the call, so its retries, and the SDK's waits between them (:func:`call_time_left`), share the
    deadline that started with the call, as :func:`fetch`'s covers its redirects and retries. A body
    streamed after the call returned still ends by it (each request carries its deadline)."""
    outer, mine = _CALL_DEADLINE.get(), _Deadline(seconds)
    sooner = outer is not None and outer.at is not None and mine.at is not None and outer.at <= mine.at
    token = _CALL_DEADLINE.set(outer if sooner else mine)
    try:
        yield
    finally:
        _CALL_DEADLINE.reset(token)


def call_time_left() -> float | None:
    """Seconds left to the deadline of the :func:`one_deadline` in progress (≤ 0: passed), or None."""
    deadline = _CALL_DEADLINE.get()
    return None if deadline is None else deadline.left()


def _bounded_backend_class():
    """An httpcore2 network backend whose sockets honour the deadline a request's timeouts carry."""

    class BoundedStream(httpcore2.NetworkStream):
        def __init__(self, inner: httpcore2.NetworkStream) -> None:
            self._inner = inner

        def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
            return self._inner.read(max_bytes, _left(timeout, httpcore2.ReadTimeout))

        def write(self, buffer: bytes, timeout: float | None = None) -> None:
            self._inner.write(buffer, _left(timeout, httpcore2.WriteTimeout))

        def close(self) -> None:
            self._inner.close()

        def start_tls(self, ssl_context, server_hostname=None, timeout=None):
            return BoundedStream(
                self._inner.start_tls(ssl_context, server_hostname, _left(timeout, httpcore2.ConnectTimeout))
            )

        def get_extra_info(self, info: str):
            return self._inner.get_extra_info(info)

    class BoundedBackend(httpcore2.SyncBackend):
        def connect_tcp(self, host, port, timeout=None, local_address=None, socket_options=None):
            inner = super().connect_tcp(
                host, port, _left(timeout, httpcore2.ConnectTimeout), local_address, socket_options
            )
            return BoundedStream(inner)

    return BoundedBackend


def _guarded_transport_class():
    """The ``httpx2`` transport SDK clients use (the ``openai`` SDK ≥ 3 speaks ``httpx2``): it checks
    every request like :func:`fetch` (scheme, allow-list, public addresses) and connects to the
    checked address, with the original ``Host`` and TLS SNI name; each request ends by its
    ``deadline`` (seconds from its start: connects, every read and write, the whole streamed body),
    or by the deadline of the SDK call it belongs to (:func:`one_deadline`) when that ends sooner."""

    class GuardedTransport(httpx2.HTTPTransport):
        def __init__(self, deadline: float) -> None:
            super().__init__(verify=tls_context(), trust_env=False)
            self.deadline = deadline
            self._pool = httpcore2.ConnectionPool(
                ssl_context=tls_context(),
                max_connections=100,
                max_keepalive_connections=20,
                keepalive_expiry=5.0,
                network_backend=_bounded_backend_class()(),
            )

        def handle_request(self, request):
            target = check_url(str(request.url))
            request.headers["Host"] = (
                target.host if target.port == _DEFAULT_PORTS[target.scheme] else f"{target.host}:{target.port}"
            )
            request.url = request.url.copy_with(host=target.address, port=target.port)
            deadline, call = _Deadline(self.deadline), _CALL_DEADLINE.get()
            if call is not None and call.at is not None and deadline.at is not None and call.at < deadline.at:
                deadline = call  # the SDK call's own deadline (one_deadline), retries included
            timeouts = request.extensions.get("timeout") or {}
            bounded = {
                k: _Bounded(self.deadline if timeouts.get(k) is None else timeouts[k], deadline)
                for k in ("connect", "read", "write", "pool")
            }
            request.extensions = {**request.extensions, "timeout": bounded}
            if target.scheme == "https":
                request.extensions = {**request.extensions, "sni_hostname": target.host}
            try:
                return super().handle_request(request)
            except httpx2.HTTPError:
                raise
            except OSError as exc:  # never a raw socket error with an address in it
                raise httpx2.ConnectError(f"request to {target.host} failed: {type(exc).__name__}") from None

    return GuardedTransport


def guarded_client(timeout: float = 60.0, connect_timeout: float = 5.0, deadline: float | None = None):
    """An ``httpx2.Client`` for SDKs (pass it as the ``openai`` SDK's ``http_client=``): every
    request it sends passes the checks of :func:`fetch` (a refused one raises
    :class:`EgressError` out of the SDK call, which the SDK does not retry); no redirects followed,
    ``trust_env=False``; ``timeout``: read/write seconds; ``deadline``: the overall seconds of each
    request, its streamed body included, as :func:`fetch`'s (default: twice ``timeout``, the
    providers' rule; past it the SDK sees a timeout). One SDK call with retries shares one deadline
    when its wrapper opens :func:`one_deadline` (``providers.openai_compat.sdk_client`` does)."""
    return httpx2.Client(
        transport=_guarded_transport_class()(deadline if deadline is not None else 2 * timeout),
        trust_env=False,
        follow_redirects=False,
        timeout=httpx2.Timeout(timeout, connect=connect_timeout),
    )


#: What :func:`operator_client`'s requests raise: any transport failure, and the refused connection
#: among them (a caller tells "no server there" from other failures without importing the client).
OperatorError = httpx2.HTTPError
OperatorConnectError = httpx2.ConnectError


def operator_client(timeout: float = 60.0) -> httpx2.Client:
    """A client for the server the operator named (no address checks, ``trust_env=False``, cookies
    kept across its requests: a sign-in then a call with the session). Close it (``with``)."""
    return httpx2.Client(trust_env=False, timeout=timeout)


def operator_request(
    method: str, url: str, *, headers: dict[str, str] | None = None, timeout: float = 60.0, **kw
) -> EgressResponse:
    """A request to the server the operator named on the command line (no address checks; the
    same ``trust_env=False`` and timeouts). Raises :class:`EgressError` ``egress_failed``."""
    try:
        with httpx2.Client(trust_env=False, timeout=timeout) as client:
            response = client.request(method, url, headers=headers, **kw)
    except httpx2.HTTPError as exc:
        raise EgressError("egress_failed", f"cannot reach {urlsplit(url).hostname}: {type(exc).__name__}") from None
    return EgressResponse(
        response.status_code, {k.lower(): v for k, v in response.headers.items()}, response.content, str(response.url)
    )
