"""Security middleware, outermost first (README "Security"; ``create_app`` installs them in this order).

1. :class:`HostAllowList` — the ``Host`` header must name this server: ``localhost``,
   ``127.0.0.1``, ``[::1]``, the bind address when it is a concrete IP, or a name in
   ``MEWDEX_ALLOWED_HOSTS``. Anything else gets **421** ``host_not_allowed`` before any other
   work. This defeats DNS rebinding: a page on ``rebind.example:8275`` whose name is re-pointed at
   127.0.0.1 still sends ``Host: rebind.example:8275``. The probes (:data:`PROBE_PATHS`) answer any Host.
2. :class:`PeerRule` — decides whether the request comes from *this machine*: the TCP peer is a
   loopback address and the request carries none of ``Forwarded``, ``X-Forwarded-*``,
   ``X-Real-IP`` (a reverse proxy, tunnel or ``ssh -R`` on 127.0.0.1 adds them or is a trusted
   proxy). Only such requests may use no-login mode (see :func:`mewdex.web.deps.current_principal`).
   It records ``scope["state"]["mewdex_local"]`` and ``["mewdex_client_ip"]`` (the forwarded
   client when the peer is in ``MEWDEX_TRUSTED_PROXIES``, else the peer).
3. :class:`BodyLimit` — before any body byte is read: a request that changes state without any
   credential (no ``Authorization``, no session cookie) and that is not a local no-login request
   gets 401 ``auth_required`` (sign-in and sign-up excepted). Then the body is bounded per route
   class: uploads by their own limits, every other route ``MEWDEX_MAX_JSON_BYTES`` (64 KiB); a
   larger ``Content-Length`` or a stream that passes the limit is answered 413
   ``request_too_large`` while streaming (the route sees a disconnect).
4. :class:`SecurityHeaders` — ``X-Content-Type-Options: nosniff`` and ``Referrer-Policy`` on every
   answer; pages get a strict CSP with ``frame-ancestors 'none'`` (``/redoc`` also allows inline
   styles and blob workers: :data:`REDOC_CSP`); ``/media/`` a sandbox CSP and
   ``Cross-Origin-Resource-Policy: same-origin``.
"""

from __future__ import annotations

import ipaddress
import json
import re
from collections.abc import Sequence
from urllib.parse import urlsplit

from mewdex.config import get_settings
from mewdex.web.errors import error_body

LOCAL_HOSTS = frozenset({"localhost", "127.0.0.1", "[::1]", "::1"})
FORWARDED_HEADERS = frozenset(
    {
        b"forwarded",
        b"x-forwarded-for",
        b"x-forwarded-host",
        b"x-forwarded-proto",
        b"x-forwarded-port",
        b"x-forwarded-server",
        b"x-forwarded-prefix",
        b"x-real-ip",
    }
)
# The Web Share Target's fallback (web/routers/pwa.py): reads no body, stores nothing, redirects.
SHARE_TARGET_PATH = "/share-target"
SESSION_COOKIE = "mewdex_session"  # platform.sessions.COOKIE_NAME (kept here: this module sits below platform)
SESSION_COOKIES = (SESSION_COOKIE, "__Host-" + SESSION_COOKIE)  # plain http / Secure (platform.sessions.cookie_names)
# State changes that need no credential: they are how one gets one.
ANONYMOUS_BODY_PATHS = frozenset(
    {"/api/v1/auth/login", "/api/v1/auth/signup", "/api/v1/auth/logout", "/api/v1/auth/reset", SHARE_TARGET_PATH}
)
# Chat platforms' inbound endpoints: no session; each route checks its platform's own secret or signature.
CHANNEL_CALLBACK_PREFIX = "/channels/"
# Liveness and readiness probes answer whatever the Host: an orchestrator probes the pod's address,
# and they carry no data a rebinding page could want (README "Monitoring").
PROBE_PATHS = frozenset({"/livez", "/readyz"})
UPLOAD_OVERHEAD_BYTES = 1024 * 1024  # multipart headers and boundaries around the files
UPLOAD_REQUEST_BYTES = 200 * 1024 * 1024  # one upload request (1–20 files), POST /api/v1/memes

PAGE_CSP = (
    "default-src 'self'; img-src 'self' blob: data:; object-src 'none'; base-uri 'none'; "
    "frame-ancestors 'none'; form-action 'self'"
)
MEDIA_CSP = "default-src 'none'; sandbox"
# ReDoc (/redoc, web/routers/api_docs.py) writes its styles into <style> elements at run time
# (styled-components, no nonce support in its standalone bundle) and runs its search index in a
# worker made from a blob of its own script: inline styles and blob workers are allowed there,
# scripts still only this server's.
REDOC_CSP = PAGE_CSP + "; style-src 'self' 'unsafe-inline'; worker-src 'self' blob:"


async def refuse(
    send, status: int, code: str, message: str, headers: Sequence[tuple[bytes, bytes]] = (), details: dict | None = None
) -> None:
    """Answer ``status`` with the JSON error body (``{"error": {"code", "message", "details"}}``)."""
    body = json.dumps(error_body(code, message, details)).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                (b"x-content-type-options", b"nosniff"),
                *headers,
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


def host_name(host_header: str) -> str:
    """The name part of a ``Host`` header, lower-cased (``[::1]:8275`` → ``[::1]``, ``a.b:80`` → ``a.b``)."""
    host = host_header.strip().lower()
    if host.startswith("["):
        return host[: host.find("]") + 1] if "]" in host else host
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host


def allowed_hosts(bind_host: str | None = None) -> frozenset[str]:
    """The Host names this server answers (see the module doc)."""
    names = set(LOCAL_HOSTS) | {h.strip().lower() for h in get_settings().allowed_hosts if h.strip()}
    public = urlsplit(get_settings().public_url or "").hostname
    if public:  # this server's own public name (chat platforms post their webhooks to it)
        names.add(public.lower())
    if bind_host:
        try:
            ip = ipaddress.ip_address(bind_host.strip("[]"))
        except ValueError:
            names.add(bind_host.lower())
        else:
            if not ip.is_unspecified:
                names.add(f"[{ip}]" if ip.version == 6 else str(ip))
    return frozenset(names)


def host_allowed(host_header: str, allowed: frozenset[str]) -> bool:
    if "*" in allowed:
        return True
    name = host_name(host_header)
    if name in allowed:
        return True
    # "*.example.com" entries allow subdomains.
    return any(a.startswith("*.") and name.endswith(a[1:]) for a in allowed)


class HostAllowList:
    """421 ``host_not_allowed`` for a ``Host`` outside :func:`allowed_hosts` (module doc, 1)."""

    def __init__(self, app, bind_host: str | None = None):
        self.app, self.bind_host = app, bind_host

    async def __call__(self, scope, receive, send):
        if scope["type"] in ("http", "websocket") and scope.get("path") not in PROBE_PATHS:
            host = next((v.decode("latin-1") for k, v in scope["headers"] if k == b"host"), "")
            if not host_allowed(host, allowed_hosts(self.bind_host)):
                if scope["type"] == "websocket":
                    return await send({"type": "websocket.close", "code": 1008})
                return await refuse(
                    send,
                    421,
                    "host_not_allowed",
                    "this server does not answer to that host name; add it to MEWDEX_ALLOWED_HOSTS",
                )
        await self.app(scope, receive, send)


def _ip(value: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    value = value.strip().strip('"')
    if value.startswith("["):
        value = value[1 : value.find("]")] if "]" in value else value[1:]
    elif value.count(":") == 1:  # v4 with port
        value = value.split(":", 1)[0]
    try:
        ip = ipaddress.ip_address(value)
    except ValueError:
        return None
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped:
        return ip.ipv4_mapped
    return ip


def is_loopback_ip(value: str | None) -> bool:
    ip = _ip(value or "")
    return ip is not None and ip.is_loopback


def trusted_proxy(peer: str | None) -> bool:
    ip = _ip(peer or "")
    if ip is None:
        return False
    for entry in get_settings().trusted_proxies:
        try:
            if ip in ipaddress.ip_network(entry.strip(), strict=False):
                return True
        except ValueError:
            continue
    return False


_FOR_RE = re.compile(r'for=("?)([^";,]+)\1', re.I)


def forwarded_client(headers: dict[bytes, bytes]) -> str | None:
    """The client a trusted proxy names: the last ``Forwarded: for=`` / ``X-Forwarded-For`` entry."""
    fwd = headers.get(b"forwarded")
    if fwd:
        found = _FOR_RE.findall(fwd.decode("latin-1"))
        if found:
            return found[-1][1]
    xff = headers.get(b"x-forwarded-for") or headers.get(b"x-real-ip")
    if xff:
        return xff.decode("latin-1").split(",")[-1].strip()
    return None


class PeerRule:
    """Marks the request local or not, and its client address (module doc, 2)."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] in ("http", "websocket"):
            peer = (scope.get("client") or ("", 0))[0]
            headers = dict(scope["headers"])
            forwarded = any(k in FORWARDED_HEADERS for k in headers)
            client_ip = peer or "unknown"
            if forwarded and trusted_proxy(peer):
                client_ip = forwarded_client(headers) or client_ip
            state = scope.setdefault("state", {})
            state["mewdex_local"] = is_loopback_ip(peer) and not forwarded
            state["mewdex_client_ip"] = client_ip
        await self.app(scope, receive, send)


def is_local(request) -> bool:
    """True for a request from this machine with no forwarding headers (set by :class:`PeerRule`)."""
    return bool(request.scope.get("state", {}).get("mewdex_local", False))


def client_ip(request) -> str:
    return request.scope.get("state", {}).get("mewdex_client_ip") or (
        request.client.host if request.client else "unknown"
    )


def body_limit(method: str, path: str) -> tuple[int, str]:
    """``(most bytes, error code)`` of a request body to ``path`` (module doc, 3)."""
    settings = get_settings()
    if method == "POST":
        if path in ("/api/v1/memes", SHARE_TARGET_PATH):
            return UPLOAD_REQUEST_BYTES + UPLOAD_OVERHEAD_BYTES, "upload_too_large"
        if path in ("/api/v1/search/image", "/ui/search/image"):
            return settings.max_upload_bytes + UPLOAD_OVERHEAD_BYTES, "upload_too_large"
        if path == "/api/v1/collections/import":
            return settings.zip_max_total_bytes + UPLOAD_OVERHEAD_BYTES, "package_too_large"
    return settings.max_json_bytes, "request_too_large"


def _has_credential(headers: dict[bytes, bytes]) -> bool:
    if b"authorization" in headers:
        return True
    cookie = headers.get(b"cookie", b"").decode("latin-1")
    return any(part.strip().startswith(tuple(name + "=" for name in SESSION_COOKIES)) for part in cookie.split(";"))


def cookies_secure(scheme: str, host: str | None) -> bool:
    """Whether a request's session cookies are Secure (and so ``__Host-`` prefixed): over https, with
    ``MEWDEX_SESSION_COOKIE_SECURE``, or on a loopback host — browsers keep Secure cookies of
    ``http://localhost`` / ``http://127.0.0.1`` / ``http://[::1]`` (potentially trustworthy origins),
    but not of plain http on any other address."""
    return get_settings().session_cookie_secure or scheme == "https" or (host or "").lower() in LOCAL_HOSTS


def no_login_possible() -> bool:
    """False when the configuration requires sign-in whatever the database holds."""
    return get_settings().auth != "required"


class BodyLimit:
    """Authentication before the body, and a bounded body (module doc, 3)."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope["method"] in ("GET", "HEAD", "OPTIONS"):
            return await self.app(scope, receive, send)
        headers = dict(scope["headers"])
        path = scope.get("path", "")
        local = scope.get("state", {}).get("mewdex_local", False)
        anonymous = path in ANONYMOUS_BODY_PATHS or path.startswith(CHANNEL_CALLBACK_PREFIX)
        if not anonymous and not _has_credential(headers) and not (local and no_login_possible()):
            return await refuse(send, 401, "auth_required", "sign in or send an API token")
        limit, code = body_limit(scope["method"], path)
        details = {"limit": "request", "limit_bytes": limit}
        declared = headers.get(b"content-length", b"")
        if declared.isdigit() and int(declared) > limit:
            return await refuse(
                send, 413, code, f"the request body is larger than {limit} bytes", [(b"connection", b"close")], details
            )
        received = 0
        refused = False
        started = False

        async def bounded_receive():
            nonlocal received, refused
            if refused:
                return {"type": "http.disconnect"}
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    refused = True
                    if not started:
                        await refuse(
                            send,
                            413,
                            code,
                            f"the request body is larger than {limit} bytes",
                            [(b"connection", b"close")],
                            details,
                        )
                    return {"type": "http.disconnect"}
            return message

        async def guarded_send(message):
            nonlocal started
            if refused:
                return  # the 413 is the answer
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, bounded_receive, guarded_send)
        except Exception:
            if not refused:
                raise


class SecurityHeaders:
    """Hardening headers on every answer (module doc, 4)."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        path = scope.get("path", "")

        async def with_headers(message):
            if message["type"] == "http.response.start":
                headers = [
                    (k, v)
                    for k, v in message.get("headers", [])
                    if k.lower() not in (b"x-content-type-options", b"referrer-policy")
                ]
                headers += [(b"x-content-type-options", b"nosniff"), (b"referrer-policy", b"same-origin")]
                if path.startswith("/media/"):
                    headers += [
                        (b"content-security-policy", MEDIA_CSP.encode()),
                        (b"cross-origin-resource-policy", b"same-origin"),
                    ]
                else:
                    csp = REDOC_CSP if path == "/redoc" else PAGE_CSP
                    headers += [(b"content-security-policy", csp.encode()), (b"x-frame-options", b"DENY")]
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, with_headers)


def install(app, bind_host: str | None) -> None:
    """Add the middleware so that they run in the documented order (Starlette runs the last added first)."""
    app.add_middleware(SecurityHeaders)
    app.add_middleware(BodyLimit)
    app.add_middleware(PeerRule)
    app.add_middleware(HostAllowList, bind_host=bind_host)
