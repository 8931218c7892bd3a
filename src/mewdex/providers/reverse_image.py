"""Reverse image search as an optional part of analysis: providers ``yandex_image_search`` (sends
the image bytes) and ``serpapi_google_lens`` (needs a public image URL: a signed thumbnail link valid
10 minutes under ``MEWDEX_PUBLIC_URL``; ``public_url_missing`` without it).

:func:`lookup` follows the scope's policy (``forbid``: no call at all), needs a usable connector (the
grant is checked before anything else), answers from the scope's own cache by image sha256 (a second
meme of the same account with the same bytes costs nothing; another account's lookups are never
read), otherwise makes one metered call
(operation ``analysis.reverse_image_search``, usage kind ``reverse_image_search``, price per request
``config.price_per_request`` CNY) and writes a ``reverse_image_usage_events`` row for every lookup:
cache hits, refusals (budget) and failures too. Results: ``{"titles": [...], "pages": [...]}``
(the best ≤ 5 of each; no API key or image URL is ever stored).
"""

from __future__ import annotations

import base64
import uuid
from decimal import Decimal
from typing import Any
from urllib.parse import urlencode, urlsplit

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from mewdex.config import get_settings
from mewdex.db.models import ReverseImageUsageEvent, ScopeContext, utcnow
from mewdex.egress import EgressError, fetch
from mewdex.providers import connectors
from mewdex.providers.connectors import Connection, ProviderSpec, register_provider
from mewdex.providers.errors import ProviderError

PROVIDERS = ("yandex_image_search", "serpapi_google_lens")
MAX_RESULTS = 5
LINK_TTL_SECONDS = 600


def _validate(default_base: str, *required: str):
    def validate(config: dict[str, Any]) -> dict[str, Any]:
        base = str(config.get("base_url") or default_base).rstrip("/")
        if urlsplit(base).scheme not in ("http", "https") or not urlsplit(base).hostname:
            raise ProviderError("connector_config_invalid", "base_url must be an http(s) URL")
        clean: dict[str, Any] = {"base_url": base}
        for key in required:
            if not config.get(key):
                raise ProviderError("connector_config_invalid", f"{key} is required")
            clean[key] = str(config[key])
        try:
            clean["price_per_request"] = str(Decimal(str(config.get("price_per_request") or 0)))
        except ArithmeticError:
            raise ProviderError("connector_config_invalid", "price_per_request must be a number") from None
        return clean

    return validate


register_provider(
    ProviderSpec(
        "yandex_image_search", _validate("https://searchapi.api.cloud.yandex.net", "folder_id"), ("api_key",), None
    )
)
register_provider(ProviderSpec("serpapi_google_lens", _validate("https://serpapi.com"), ("api_key",), None))


def _best(pairs: list[tuple[str, str]]) -> dict[str, list[str]]:
    titles = [t for t, _ in pairs if t]
    pages = [p for _, p in pairs if p]
    return {"titles": list(dict.fromkeys(titles))[:MAX_RESULTS], "pages": list(dict.fromkeys(pages))[:MAX_RESULTS]}


def _check_status(response) -> None:
    """A non-200 answer as a :class:`ProviderError` (never its body: it may echo the request):
    401/403 the key was refused; 429 rate limited or out of searches (retried later); 5xx failed
    (retried); any other status failed for good."""
    status = response.status
    if status == 200:
        return
    if status in (401, 403):
        raise ProviderError(
            "provider_failed", f"the reverse image search refused the credentials ({status})", status_code=status
        )
    if status == 429:
        raise ProviderError(
            "provider_rate_limited",
            "the reverse image search is rate limiting or out of searches (429)",
            retryable=True,
            status_code=429,
        )
    raise ProviderError(
        "provider_failed",
        f"the reverse image search answered {status}",
        retryable=status >= 500,
        status_code=status,
    )


def _timeout() -> float:
    return get_settings().provider_timeout_seconds


def _call_yandex(connection: Connection, image: bytes) -> tuple[dict[str, list[str]], int, int]:
    response = fetch(
        "POST",
        f"{connection.config['base_url']}/v2/image/search_by_image",
        headers={"Authorization": f"Api-Key {connection.credentials['api_key']}"},
        json={"folderId": connection.config["folder_id"], "data": base64.b64encode(image).decode()},
        content_types=("application/json",),
        max_bytes=2 * 1024 * 1024,
        timeout=_timeout(),
        deadline=2 * _timeout(),
        retries=0,  # a 429 is provider_rate_limited: metered as such and retried later by the task
    )
    _check_status(response)
    images = response.json().get("images") or []
    return (
        _best([(str(i.get("pageTitle") or ""), str(i.get("pageUrl") or "")) for i in images]),
        200,
        len(response.content),
    )


def _call_serpapi(connection: Connection, image_url: str) -> tuple[dict[str, list[str]], int, int]:
    """SerpApi's Google Lens engine: ``GET /search.json?engine=google_lens&url=…&api_key=…``.
    Results are ``visual_matches[].{title, link}``; a search Google Lens found nothing for answers
    200 with ``search_metadata.status`` ``Success`` and an ``error`` text (empty results); any
    other ``error`` in a 200 is a failure."""
    query = urlencode({"engine": "google_lens", "url": image_url, "api_key": connection.credentials["api_key"]})
    response = fetch(
        "GET",
        f"{connection.config['base_url']}/search.json?{query}",
        content_types=("application/json",),
        max_bytes=2 * 1024 * 1024,
        timeout=_timeout(),
        deadline=2 * _timeout(),
        retries=0,  # a 429 is provider_rate_limited: metered as such and retried later by the task
    )
    _check_status(response)
    body = response.json()
    matches = body.get("visual_matches") or []
    if not matches and body.get("error"):
        status = str((body.get("search_metadata") or {}).get("status") or "")
        if status != "Success":
            raise ProviderError("provider_failed", "the reverse image search reported an error", status_code=200)
    return _best([(str(m.get("title") or ""), str(m.get("link") or "")) for m in matches]), 200, len(response.content)


def public_thumbnail_url(meme_id: str, user) -> str:
    """A signed thumbnail link (downscaled, re-encoded: no metadata) valid 10 minutes under
    ``MEWDEX_PUBLIC_URL``; ``public_url_missing`` when it is not set."""
    from mewdex.platform import media_urls

    public = get_settings().public_base() or ""
    if not public:
        raise ProviderError(
            "public_url_missing",
            "serpapi_google_lens needs an image URL: set MEWDEX_PUBLIC_URL to this server's public https address",
        )
    signed, _ = media_urls.sign(user, f"/media/{meme_id}/thumbnail", LINK_TTL_SECONDS)
    return f"{public}{signed}"


def lookup(
    sessions: sessionmaker,
    scope: ScopeContext,
    *,
    policy: str,
    sha256: str,
    image: bytes,
    meme_id,
    task_id: str,
    before_call=None,
) -> dict[str, Any] | None:
    """The reverse-image results for one meme (module doc); None when the policy forbids it or no
    reverse-image connector is usable. Raises :class:`ProviderError` for failures worth retrying."""
    if policy != "auto":
        return None
    from mewdex.platform.errors import PlatformError
    from mewdex.providers.metering import CallResult, metered_call
    from mewdex.providers.openai_compat import ModelClient, Price

    with sessions.begin() as session:
        # The grant first: a scope that may not use any reverse-image connector learns nothing, not
        # even that an image was looked up before.
        connection = None
        for provider in PROVIDERS:
            try:
                connection = connectors.resolve(session, scope, provider)
                break
            except ProviderError:
                continue
        if connection is None:
            return None
        # The cache is the scope's own: results another account paid for are never handed out.
        cached = session.execute(
            select(ReverseImageUsageEvent.result, ReverseImageUsageEvent.provider)
            .where(
                ReverseImageUsageEvent.scope_id == scope.scope_id,
                ReverseImageUsageEvent.cache_key == sha256,
                ReverseImageUsageEvent.outcome.in_(("success", "empty")),
                ReverseImageUsageEvent.provider_called.is_(True),
            )
            .order_by(ReverseImageUsageEvent.created_at.desc())
            .limit(1)
        ).first()
        if cached is not None:
            _event(
                session,
                scope,
                task_id,
                meme_id,
                sha256,
                "hit",
                cached.provider,
                False,
                "success" if (cached.result or {}).get("titles") else "empty",
                cached.result,
            )
            return dict(cached.result or {})
        provider = connection.provider

        def _failed(session: Session, called: bool, code: str, retryable: bool = False) -> None:
            """Record a lookup that did not give results (``called``: the provider was reached)."""
            _event(
                session,
                scope,
                task_id,
                meme_id,
                sha256,
                "miss",
                provider,
                called,
                "failed",
                None,
                {"code": code},
                retryable,
            )

        image_url = None
        if connection.provider == "serpapi_google_lens":
            from mewdex.platform.owners import user_for_scope

            try:
                image_url = public_thumbnail_url(str(meme_id), user_for_scope(session, scope.scope_id))
            except ProviderError as exc:
                _failed(session, False, exc.code)
                return None
    price = Price(image=Decimal(connection.config.get("price_per_request") or 0), version="1")
    model = ModelClient(None, connection.provider, price, connection, "reverse_image")

    def call() -> CallResult:
        try:
            results, status, size = (
                _call_serpapi(connection, image_url) if image_url else _call_yandex(connection, image)
            )
        except EgressError as exc:
            raise ProviderError(exc.code, exc.message, retryable=exc.retryable) from None
        return CallResult(results, {"images": 1, "requests": 1}, status, size)

    try:
        result = metered_call(
            sessions,
            scope,
            model,
            call,
            operation="analysis.reverse_image_search",
            idempotency_key=f"task:{task_id}:reverse",
            kind="reverse_image_search",
            event="reverse_image_search",
            task_id=task_id,
            resource_id=str(meme_id),
            before_call=before_call,
        )
    except PlatformError as exc:  # refused before any call (budget)
        with sessions.begin() as session:
            _failed(session, False, exc.code)
        return None
    except ProviderError as exc:
        with sessions.begin() as session:
            _failed(session, True, exc.code, exc.retryable)
        raise
    with sessions.begin() as session:
        _event(
            session,
            scope,
            task_id,
            meme_id,
            sha256,
            "miss",
            connection.provider,
            True,
            "success" if result.value["titles"] else "empty",
            result.value,
        )
    return result.value


def _event(
    session,
    scope,
    task_id,
    meme_id,
    sha256,
    cache_status,
    provider,
    called,
    outcome,
    result,
    error=None,
    retryable=False,
):
    now = utcnow()
    session.add(
        ReverseImageUsageEvent(
            request_id=f"{task_id}:{uuid.uuid4().hex[:12]}",
            scope_id=scope.scope_id,
            task_id=task_id,
            meme_id=meme_id,
            cache_key=sha256,
            cache_status=cache_status,
            provider_called=called,
            provider=provider,
            operation="analysis.reverse_image_search",
            target_sha256=sha256,
            outcome=outcome,
            retryable=retryable,
            result=result,
            error=error,
            provider_started_at=now if called else None,
            completed_at=now,
        )
    )
