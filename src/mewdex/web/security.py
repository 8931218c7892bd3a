"""Security middleware, outermost first (README "Security"; ``create_app`` installs them in this order).

1. :class:`HostAllowList` — the ``Host`` header must name this server: ``localhost``,
   ``127.0.0.1``, ``[::1]``, the bind address when it is a concrete IP, or a name in
   ``MEWDEX_ALLOWED_HOSTS``. Anything else gets **421** ``host_not_allowed`` before any other
   work. This defeats DNS rebinding: a page on ``rebind.example:8275`` whose name is re-pointed at
   127.0.0.1 still sends ``Host: rebind.example:8275``. The probes (:data:`PROBE_PATHS`) answer any Host.
2. :class:`PeerRule` — the one place that decides who is calling. ``scope["state"]["mewdex_client_ip"]``
   is :func:`client_address`: the TCP peer, or — only when the peer is in ``MEWDEX_TRUSTED_PROXIES`` —
   the rightmost hop of that proxy's header (``MEWDEX_PROXY_CLIENT_HEADER``) that is not a trusted
   proxy. ``scope["state"]["mewdex_local"]`` is :func:`is_this_machine`: a loopback peer, no proxy
   configured and none of ``Forwarded``, ``X-Forwarded-*``, ``X-Real-IP``; only such requests may use
   no-login mode (see :func:`mewdex.web.deps.current_principal`). uvicorn's own proxy handling is off
   wherever mewdex starts it (``mewdex serve``: ``proxy_headers=False``), so ``scope["client"]`` is the
   TCP peer; behind a trusted proxy ``scope["scheme"]`` follows its ``X-Forwarded-Proto`` (or
   ``Forwarded: proto=``).
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
from mewdex.web.base_path import route_path
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
SESSION_COOKIES = tuple(p + SESSION_COOKIE for p in ("", "__Host-", "__Secure-"))  # platform.sessions.cookie_names
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
        if scope["type"] in ("http", "websocket") and route_path(scope) not in PROBE_PATHS:
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
        if "]" not in value:
            return None
        value = value[1 : value.find("]")]
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


def _trusted_ip(ip: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    return any(ip in ipaddress.ip_network(entry, strict=False) for entry in get_settings().trusted_proxies)


def trusted_proxy(peer: str | None) -> bool:
    """Whether ``peer`` is in ``MEWDEX_TRUSTED_PROXIES`` (entries validated by the settings)."""
    ip = _ip(peer or "")
    return ip is not None and _trusted_ip(ip)


def _split(value: str, sep: str) -> list[str] | None:
    """``value`` split at ``sep`` outside double quotes (RFC 7230 quoted-string); None when a quote is open."""
    parts: list[str] = []
    current: list[str] = []
    quoted = escaped = False
    for char in value:
        if escaped:
            escaped = False
        elif quoted and char == "\\":
            escaped = True
        elif char == '"':
            quoted = not quoted
        elif char == sep and not quoted:
            parts.append("".join(current))
            current = []
            continue
        current.append(char)
    if quoted:
        return None
    parts.append("".join(current))
    return parts


def _forwarded_elements(value: str) -> list[dict[str, str]] | None:
    """RFC 7239 ``Forwarded``: one ``{param: value}`` per hop, left to right; None when malformed."""
    elements = _split(value, ",")
    if elements is None:
        return None
    out = []
    for element in elements:
        pairs = _split(element, ";") or []
        params: dict[str, str] = {}
        for pair in pairs:
            name, eq, raw = pair.strip().partition("=")
            if not eq or not name.strip() or not raw.strip():
                return None
            raw = raw.strip()
            if raw.startswith('"'):
                if len(raw) < 2 or not raw.endswith('"'):
                    return None
                raw = re.sub(r"\\(.)", r"\1", raw[1:-1])
            params[name.strip().lower()] = raw
        out.append(params)
    return out


def _header_values(headers: Sequence[tuple[bytes, bytes]], name: bytes) -> str | None:
    """Every ``name`` line joined with ``,`` in the order received (RFC 7230 §3.2.2), or None."""
    values = [v.decode("latin-1") for k, v in headers if k.lower() == name]
    return ",".join(values) if values else None


def _hops(headers: Sequence[tuple[bytes, bytes]]) -> list[str] | None:
    """The client chain the proxy header (``MEWDEX_PROXY_CLIENT_HEADER``) names, left to right; [] when
    absent, None when malformed."""
    name = get_settings().proxy_client_header
    value = _header_values(headers, name.encode())
    if value is None:
        return []
    if name == "forwarded":
        # Line by line: a quote a client left open ends with its line (a quoted-string never spans
        # lines), so the proxy's own line after it is still read. A malformed line is one hop that
        # is no address: reached from the right, the client is the peer.
        hops: list[str] = []
        for line in (v.decode("latin-1") for k, v in headers if k.lower() == b"forwarded"):
            elements = _forwarded_elements(line)
            if elements is None or any("for" not in e for e in elements):
                hops.append("")
            else:
                hops += [e["for"] for e in elements]
        return hops
    hops = [h.strip() for h in value.split(",")]
    if name == "x-real-ip" and len(hops) != 1:  # one address, replaced (not appended) by the proxy
        return None
    return hops


def client_address(peer: str | None, headers: Sequence[tuple[bytes, bytes]]) -> str:
    """The client of a request: THE one decision (rate limits, the sign-in limiter, the metrics
    allow-list and logs all use it through :func:`client_ip`).

    * The TCP ``peer`` is not in ``MEWDEX_TRUSTED_PROXIES`` (always so when none are set): the peer.
      Forwarding headers never change it.
    * From a trusted proxy: only the header ``MEWDEX_PROXY_CLIENT_HEADER`` names (default
      ``X-Forwarded-For``; ``Forwarded`` is parsed per RFC 7239; ``X-Real-IP`` must hold one address),
      read right to left, past the hops that are trusted proxies themselves: the first other hop is
      the client, so what a client wrote at the left of the header never wins. Every hop trusted:
      the leftmost. No header, or a malformed hop before the client is found (a name, ``unknown``,
      an obfuscated ``_id``, an open quote): the peer — still a proxy, never "this machine".

    Returns a normalised IP address (IPv4-mapped IPv6 as IPv4), or ``peer`` as given when it is not
    one (``"unknown"`` when empty).
    """
    peer_ip = _ip(peer or "")
    if peer_ip is None:
        return peer or "unknown"
    if not _trusted_ip(peer_ip):
        return str(peer_ip)
    hops = _hops(headers)
    if not hops:
        return str(peer_ip)
    found = None
    for hop in reversed(hops):
        found = _ip(hop)
        if found is None:
            return str(peer_ip)
        if not _trusted_ip(found):
            return str(found)
    return str(found)


def _proxy_scheme(headers: Sequence[tuple[bytes, bytes]]) -> str | None:
    """``http``/``https`` as a trusted proxy says it received the request (the last hop's
    ``Forwarded: proto=``, else ``X-Forwarded-Proto``), or None."""
    if get_settings().proxy_client_header == "forwarded":
        value = _header_values(headers, b"forwarded")
        elements = _forwarded_elements(value) if value else None
        proto = elements[-1].get("proto", "") if elements else ""
    else:
        proto = (_header_values(headers, b"x-forwarded-proto") or "").split(",")[-1]
    proto = proto.strip().lower()
    return proto if proto in ("http", "https") else None


def is_this_machine(peer: str | None, headers: Sequence[tuple[bytes, bytes]]) -> bool:
    """Whether a request comes from *this machine* (no-login mode, the metrics' loopback rule): a
    loopback TCP peer, no ``MEWDEX_TRUSTED_PROXIES`` configured, and none of the forwarding headers
    (:data:`FORWARDED_HEADERS`). A TCP tunnel (``ssh -R``, socat) that connects from loopback adds no
    header: it *is* this machine here, so no-login mode must never be exposed through one (README)."""
    return (
        is_loopback_ip(peer)
        and not get_settings().trusted_proxies
        and not any(k.lower() in FORWARDED_HEADERS for k, _ in headers)
    )


class PeerRule:
    """Marks the request local or not, and its client address (module doc, 2)."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] in ("http", "websocket"):
            peer = (scope.get("client") or ("", 0))[0]
            headers = scope["headers"]
            state = scope.setdefault("state", {})
            state["mewdex_local"] = is_this_machine(peer, headers)
            state["mewdex_client_ip"] = client_address(peer, headers)
            if trusted_proxy(peer) and (scheme := _proxy_scheme(headers)):  # TLS ended at the proxy
                scope["scheme"] = scheme.replace("http", "ws") if scope["type"] == "websocket" else scheme
        await self.app(scope, receive, send)


def is_local(request) -> bool:
    """True for a request from this machine (:func:`is_this_machine`, recorded by :class:`PeerRule`)."""
    state = request.scope.get("state", {})
    if "mewdex_local" in state:
        return bool(state["mewdex_local"])
    return is_this_machine((request.scope.get("client") or ("", 0))[0], request.scope.get("headers", []))


def client_ip(request) -> str:
    """The request's client address (:func:`client_address`, recorded by :class:`PeerRule`)."""
    state = request.scope.get("state", {})
    if state.get("mewdex_client_ip"):
        return state["mewdex_client_ip"]
    return client_address((request.scope.get("client") or ("", 0))[0], request.scope.get("headers", []))


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
        path = route_path(scope)  # under the base path (web.base_path)
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
        path = route_path(scope)  # under the base path (web.base_path)

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
