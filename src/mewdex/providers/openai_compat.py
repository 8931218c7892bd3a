"""The ``openai_compatible`` provider: any OpenAI-compatible endpoint (a hosted API, vLLM, Ollama,
LM Studio) through the official ``openai`` SDK, whose HTTP client comes from
:func:`mewdex.egress.guarded_client` (every request passes the egress guard).

Definition config (``external_system_definitions.config``)::

    {"base_url": "https://api.example.com/v1", "chat_model": "...", "vision_model": "...",
     "embedding_model": "...", "price_version": "2026-12-01",
     "prices": {"<model>": {"input": CNY per 1M input tokens, "cached_input": …, "output": …,
                            "image": CNY per image}}}

Credentials: ``{"api_key": "..."}`` (sealed). Entry points:

* :func:`chat_client` ``(session, scope, purpose)`` → :class:`ModelClient` (the SDK client, the
  model for ``purpose`` ``chat`` | ``vision`` | ``embedding``, its :class:`Price`, the connection);
  the Assistant uses it for tool-calling chat.
* :func:`usage_units` — the usage units of an SDK answer (what
  :func:`mewdex.providers.metering.metered_call` meters).
* :func:`provider_error` — an SDK exception as a :class:`ProviderError` without secrets.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from sqlalchemy.orm import Session, sessionmaker

from mewdex.config import get_settings
from mewdex.db.models import ScopeContext
from mewdex.egress import EgressError, call_time_left, guarded_client, one_deadline
from mewdex.providers import connectors
from mewdex.providers.connectors import Connection, ProviderSpec, register_provider
from mewdex.providers.errors import ProviderError

if TYPE_CHECKING:
    import openai

log = logging.getLogger(__name__)
PROVIDER = "openai_compatible"
PURPOSES = {"chat": "chat_model", "vision": "vision_model", "embedding": "embedding_model"}
_PRICE_FIELDS = ("input", "cached_input", "output", "image")
_MILLION = Decimal(1_000_000)


@dataclass(frozen=True)
class Price:
    """CNY per 1M input / cached input / output tokens and per image, and the price table's version."""

    input: Decimal = Decimal(0)
    cached_input: Decimal = Decimal(0)
    output: Decimal = Decimal(0)
    image: Decimal = Decimal(0)
    version: str = "0"

    def cost(self, units: dict[str, Any]) -> Decimal:
        """Cost in CNY of ``units`` (``input_tokens`` incl. ``cached_input_tokens``, ``output_tokens``,
        ``images``)."""
        cached = Decimal(int(units.get("cached_input_tokens") or 0))
        fresh = Decimal(int(units.get("input_tokens") or 0)) - cached
        total = (
            fresh * self.input
            + cached * self.cached_input
            + Decimal(int(units.get("output_tokens") or 0)) * self.output
        ) / _MILLION + Decimal(int(units.get("images") or 0)) * self.image
        return total.quantize(Decimal("0.000001"))


@dataclass
class ModelClient:
    """What :func:`chat_client` gives: ``client`` (``openai.OpenAI``), ``model``, ``price``,
    ``connection`` (definition id/revision, no secret in its repr) and ``purpose``. It owns an HTTP
    connection pool: use it as a context manager (or call :meth:`close`) when the work is done."""

    client: openai.OpenAI | None  # None: a provider called over plain HTTP (reverse image search)
    model: str
    price: Price
    connection: Connection
    purpose: str

    @property
    def model_profile(self) -> str:
        return f"{self.connection.name}/{self.model}"

    def close(self) -> None:
        """Close the SDK client and its connection pool (idempotent)."""
        if self.client is not None:
            self.client.close()

    def __enter__(self) -> ModelClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _validate_config(config: dict[str, Any]) -> dict[str, Any]:
    base_url = str(config.get("base_url") or "").strip().rstrip("/")
    parts = urlsplit(base_url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ProviderError("connector_config_invalid", "base_url must be an http(s) URL")
    if parts.username or parts.password or parts.query:
        raise ProviderError("connector_config_invalid", "base_url may not hold credentials or a query")
    clean: dict[str, Any] = {"base_url": base_url}
    for key in PURPOSES.values():
        value = config.get(key)
        if value is not None and value != "":
            if not isinstance(value, str) or len(value) > 200:
                raise ProviderError("connector_config_invalid", f"{key} must be a model name")
            clean[key] = value.strip()
    prices = config.get("prices") or {}
    if not isinstance(prices, dict):
        raise ProviderError("connector_config_invalid", "prices must map model names to prices")
    clean_prices = {}
    for model, table in prices.items():
        if not isinstance(table, dict) or set(table) - set(_PRICE_FIELDS):
            raise ProviderError("connector_config_invalid", f"prices of {model} take only {', '.join(_PRICE_FIELDS)}")
        try:
            values = {k: str(Decimal(str(v))) for k, v in table.items()}
        except ArithmeticError:
            raise ProviderError("connector_config_invalid", f"prices of {model} must be numbers") from None
        if any(Decimal(v) < 0 for v in values.values()):
            raise ProviderError("connector_config_invalid", "prices cannot be negative")
        clean_prices[str(model)] = values
    clean["prices"] = clean_prices
    clean["price_version"] = str(config.get("price_version") or "1")[:64]
    return clean


@functools.cache
def _one_deadline_client() -> Callable[..., openai.OpenAI]:
    """``openai.OpenAI`` whose every call ends by one deadline (``call_deadline`` seconds from the
    call's start): all its tries, the waits between them and a streamed body
    (:func:`mewdex.egress.one_deadline`); a retry wait is cut to what the deadline leaves, and the tries
    after it fail at once as timeouts. Made on first use: the SDK takes most of a second to import,
    which a command or process that never calls a model should not pay."""
    import openai

    class OneDeadlineOpenAI(openai.OpenAI):
        def __init__(self, *, call_deadline: float | None = None, **kwargs: Any) -> None:
            super().__init__(**kwargs)
            timeout = kwargs.get("timeout")
            # copy()/with_options() build a new client without call_deadline: twice its timeout again
            self.call_deadline = call_deadline or (2 * timeout if isinstance(timeout, int | float) else 120.0)

        def request(self, *args: Any, **kwargs: Any) -> Any:  # type: ignore[override]  # every SDK call comes here
            with one_deadline(self.call_deadline):
                return super().request(*args, **kwargs)

        def _calculate_retry_timeout(self, *args: Any, **kwargs: Any) -> float:
            wait = super()._calculate_retry_timeout(*args, **kwargs)
            left = call_time_left()
            return wait if left is None else max(0.0, min(wait, left))

    return OneDeadlineOpenAI


def sdk_client(
    connection: Connection, *, timeout: float | None = None, max_retries: int | None = None
) -> openai.OpenAI:
    """The ``openai.OpenAI`` client of a connection (egress-guarded HTTP, the configured timeout and
    retries: the SDK retries connection errors, 408/409/429/5xx honouring ``Retry-After``). Every
    call also has an overall deadline, twice ``timeout`` as for the other provider calls
    (:func:`mewdex.egress.guarded_client`), that starts with the call and covers all its retries and
    the waits between them (:func:`_one_deadline_client`): a server that trickles its answer (a
    streamed one included) or keeps asking for retries is cut there, and the call fails as a timeout."""
    settings = get_settings()
    seconds = timeout or settings.provider_timeout_seconds
    return _one_deadline_client()(
        api_key=connection.credentials.get("api_key") or "none",
        base_url=connection.config["base_url"],
        http_client=guarded_client(timeout=seconds, deadline=2 * seconds),
        max_retries=settings.provider_max_retries if max_retries is None else max_retries,
        timeout=seconds,
        call_deadline=2 * seconds,
    )


def price_for(connection: Connection, model: str) -> Price:
    table = (connection.config.get("prices") or {}).get(model, {})
    return Price(
        **{k: Decimal(str(table.get(k, 0))) for k in _PRICE_FIELDS},
        version=str(connection.config.get("price_version") or "1"),
    )


def chat_client(
    session: Session,
    scope: ScopeContext,
    purpose: str = "chat",
    *,
    timeout: float | None = None,
    max_retries: int | None = None,
) -> ModelClient:
    """The client, model and price a call for ``purpose`` (``chat`` | ``vision`` | ``embedding``) in
    ``scope`` uses (:func:`connectors.resolve`); ``timeout`` / ``max_retries`` override the
    configured ones (a search step's short budget). Raises :class:`ProviderError`
    ``connector_unavailable`` / ``connector_unverified``."""
    if purpose not in PURPOSES:
        raise ValueError(f"purpose must be one of {sorted(PURPOSES)}")
    connection = connectors.resolve(session, scope, PROVIDER, needs=PURPOSES[purpose])
    model = connection.config[PURPOSES[purpose]]
    client = sdk_client(connection, timeout=timeout, max_retries=max_retries)
    return ModelClient(client, model, price_for(connection, model), connection, purpose)


def provider_error(exc: BaseException) -> ProviderError:
    """An SDK/egress exception as a :class:`ProviderError` (codes in its doc); the message names
    the kind of failure and the status, never the request, key or body."""
    if isinstance(exc, ProviderError):
        return exc
    cause = exc.__cause__ or exc.__context__
    egress = exc if isinstance(exc, EgressError) else cause
    if isinstance(egress, EgressError):
        return ProviderError(egress.code, egress.message)
    import openai

    if isinstance(exc, openai.APITimeoutError):
        return ProviderError("provider_failed", "the provider did not answer in time", retryable=True)
    if isinstance(exc, openai.RateLimitError):
        return ProviderError(
            "provider_rate_limited", "the provider is rate limiting (429)", retryable=True, status_code=429
        )
    if isinstance(exc, openai.AuthenticationError):
        return ProviderError("provider_failed", "the provider refused the credentials (401)", status_code=401)
    if isinstance(exc, openai.APIStatusError):
        return ProviderError(
            "provider_failed",
            f"the provider answered {exc.status_code}",
            retryable=exc.status_code >= 500,
            status_code=exc.status_code,
        )
    if isinstance(exc, openai.APIResponseValidationError) or isinstance(exc, ValueError):
        return ProviderError("provider_invalid_output", "the provider's answer is not valid", retryable=True)
    if isinstance(exc, openai.APIConnectionError):
        return ProviderError("provider_failed", "cannot reach the provider", retryable=True)
    return ProviderError("provider_failed", f"the provider call failed ({type(exc).__name__})", retryable=True)


def _verify(connection: Connection) -> tuple[int | None, int | None]:
    client = sdk_client(connection, timeout=15.0, max_retries=0)
    try:
        models = client.models.list()
        names = [m.id for m in models.data]
    except Exception as exc:  # noqa: BLE001 — every failure is a verification failure
        raise provider_error(exc) from None
    finally:
        client.close()
    wanted = [connection.config[k] for k in PURPOSES.values() if connection.config.get(k)]
    missing = [m for m in wanted if names and m not in names]
    if missing:
        raise ProviderError("provider_failed", f"the endpoint does not list {', '.join(missing)}", status_code=200)
    return 200, None


register_provider(ProviderSpec(PROVIDER, _validate_config, ("api_key",), _verify))


def usage_units(usage: Any, *, images: int = 0, requests: int = 1) -> dict[str, int]:
    """Units of an SDK ``usage`` object (None: zeros)."""
    details = getattr(usage, "prompt_tokens_details", None)
    return {
        "input_tokens": int(getattr(usage, "prompt_tokens", 0) or 0),
        "cached_input_tokens": int(getattr(details, "cached_tokens", 0) or 0) if details else 0,
        "output_tokens": int(getattr(usage, "completion_tokens", 0) or 0),
        "images": images,
        "requests": requests,
    }


def configure_from_env(sessions: sessionmaker) -> str | None:
    """Create or update the platform definition ``env`` from ``MEWDEX_OPENAI_BASE_URL`` /
    ``MEWDEX_OPENAI_API_KEY`` / ``MEWDEX_CHAT_MODEL`` / ``MEWDEX_VISION_MODEL`` /
    ``MEWDEX_EMBEDDING_MODEL`` (visibility ``all``); a changed value bumps its revision. Returns its
    id, or None when ``MEWDEX_OPENAI_BASE_URL`` is unset."""
    from sqlalchemy import select

    from mewdex.db.models import ExternalSystemDefinition

    settings = get_settings()
    if not settings.openai_base_url:
        return None
    config = {
        "base_url": settings.openai_base_url,
        "chat_model": settings.chat_model,
        "vision_model": settings.vision_model,
        "embedding_model": settings.embedding_model,
    }
    credentials = {"api_key": settings.openai_api_key} if settings.openai_api_key else {}
    with sessions.begin() as session:
        row = session.execute(
            select(ExternalSystemDefinition)
            .where(
                ExternalSystemDefinition.owner_type == "platform",
                ExternalSystemDefinition.provider == PROVIDER,
                ExternalSystemDefinition.name == "env",
            )
            .with_for_update()
        ).scalar_one_or_none()
        if row is None:
            row = connectors.create_definition(
                session, provider=PROVIDER, name="env", config=config, visibility="all", credentials=credentials or None
            )
        else:
            merged = {
                **config,
                "prices": row.config.get("prices", {}),
                "price_version": row.config.get("price_version", "1"),
            }
            connectors.update_definition(session, row.definition_id, config=merged, credentials=credentials)
        return str(row.definition_id)
