"""Settings: ``MEWDEX_*`` environment variables and an optional ``.env`` file.

Every setting is documented in the README's configuration table; keep the two in step.
"""

from __future__ import annotations

import ipaddress
import json
import os
import re
from functools import lru_cache
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar, cast, get_args
from urllib.parse import urlsplit

from pydantic import Field, PrivateAttr, SecretStr, ValidationError, field_validator, model_validator
from pydantic.fields import FieldInfo
from pydantic_settings import (
    BaseSettings,
    NoDecode,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    SettingsError,
)

#: A setting whose name holds one of these words is a secret: its value is never shown (in a
#: configuration error either), and it may be read from a file (``MEWDEX_<NAME>_FILE``).
SECRET_WORDS = ("key", "token", "secret", "password", "passphrase", "database_url")


def is_secret_setting(name: str) -> bool:
    """Whether setting ``name`` (a field name, ``oidc_client_secret``; a :class:`SettingsGroup`'s too)
    holds a secret: a text setting whose name holds one of :data:`SECRET_WORDS` (``password_login``, a
    switch, is none)."""
    field = setting_field(name)
    text = field is not None and bool({str, SecretStr} & {field.annotation, *get_args(field.annotation)})
    return text and any(word in name for word in SECRET_WORDS)


class SecretFilesSource(PydanticBaseSettingsSource):
    """Every secret setting (:func:`is_secret_setting`) may come from a file: ``MEWDEX_<NAME>_FILE``
    names it (a Docker/systemd credential, ``/run/secrets/…``); its text, less the trailing line
    break, is the value. Setting both ``MEWDEX_<NAME>`` and ``MEWDEX_<NAME>_FILE`` is an error, and so
    is a file that cannot be read (the error names the variable and the path, never the content)."""

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        return None, field_name, False  # everything is read in __call__

    def __call__(self) -> dict[str, Any]:
        prefix = str(self.config.get("env_prefix", "")).upper()
        values: dict[str, Any] = {}
        for name in self.settings_cls.model_fields:
            if not is_secret_setting(name):
                continue
            variable = f"{prefix}{name.upper()}"
            path = os.environ.get(f"{variable}_FILE")
            if not path:
                continue
            if os.environ.get(variable):
                raise SettingsError(f'field "{name}": set {variable} or {variable}_FILE, not both')
            try:
                values[name] = Path(path).read_text(encoding="utf-8").rstrip("\r\n")
            except (OSError, UnicodeDecodeError) as exc:
                reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else "not UTF-8 text"
                raise SettingsError(f'field "{name}": {variable}_FILE={path} cannot be read ({reason})') from None
        return values


def ipv4_form(entry: str) -> str:
    """An address/network entry of a setting as compared with client addresses, which are IPv4 when
    they are IPv4-mapped (``web.security.client_address``): ``::ffff:192.0.2.1`` → ``192.0.2.1``,
    ``::ffff:10.1.0.0/112`` → ``10.1.0.0/16``; any other entry stripped (of brackets too), as given."""
    entry = entry.strip().strip("[]")
    try:
        network = ipaddress.ip_network(entry, strict=False)
    except ValueError:
        return entry
    mapped = network.network_address.ipv4_mapped if isinstance(network, ipaddress.IPv6Network) else None
    if mapped is None or network.prefixlen < 96:
        return entry
    return str(ipaddress.ip_network(f"{mapped}/{network.prefixlen - 96}", strict=False))


class _FromEnvironment(BaseSettings):
    """Where every setting comes from (``MEWDEX_*``: arguments, the environment, ``*_FILE``, ``.env``)."""

    model_config = SettingsConfigDict(env_prefix="MEWDEX_", env_file=".env", extra="ignore")

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        """Where values come from, first wins: arguments, the environment, ``MEWDEX_<SECRET>_FILE``
        (:class:`SecretFilesSource`), ``.env``."""
        return init_settings, env_settings, SecretFilesSource(settings_cls), dotenv_settings, file_secret_settings


G = TypeVar("G", bound="SettingsGroup")


class SettingsGroup(_FromEnvironment):
    """A capability's own settings, declared in its package (a channel's ``settings.py``) and provided
    to the hook ``settings``: each field is named as the whole setting (``<name>_api_url`` is
    ``MEWDEX_<NAME>_API_URL``), read from the same sources as :class:`Settings` and validated on
    first use (:meth:`Settings.group`); ``mewdex serve`` and ``worker`` validate every group at start
    (:func:`mewdex.runtime.load_plugins`), and the README's table lists them with the core's."""


def setting_groups() -> list[type[SettingsGroup]]:
    """The :class:`SettingsGroup` classes imported so far (``hooks.implementations("settings")``
    imports every declared one)."""
    found: list[type[SettingsGroup]] = []
    pending = list(SettingsGroup.__subclasses__())
    while pending:
        model = pending.pop(0)
        found.append(model)
        pending.extend(model.__subclasses__())
    return found


def setting_field(name: str) -> FieldInfo | None:
    """The field of setting ``name``: the core's (:class:`Settings`) or an imported group's; None."""
    models: list[type[BaseSettings]] = [Settings, *setting_groups()]
    for model in models:
        if name in model.model_fields:
            return model.model_fields[name]
    return None


class Settings(_FromEnvironment):
    """Process-wide configuration, read once per process (see :func:`get_settings`); a capability's own
    settings are its :class:`SettingsGroup` (:meth:`group`)."""

    _groups: dict[type[SettingsGroup], SettingsGroup] = PrivateAttr(default_factory=dict)

    def group(self, model: type[G]) -> G:
        """The settings of ``model`` (a :class:`SettingsGroup`), validated once per :class:`Settings`
        (so ``get_settings.cache_clear()`` reads them again). Raises :class:`ConfigError`."""
        found = self._groups.get(model)
        if found is None:
            found = self._groups[model] = _validated(model)
        return cast(G, found)

    data_dir: Path = Field(default=Path(".mewdex"), description="Blobs and the embedded database live here.")
    database_url: str | None = Field(
        default=None, description="External PostgreSQL ≥ 15 with pgvector; unset = embedded."
    )
    search_database_url: str | None = Field(
        default=None,
        description="A read replica (hot standby) of the database that the search legs read; unset = the main one.",
    )
    blob_store: str | None = Field(
        default=None, description="s3://bucket/prefix = blobs on an S3-compatible store; unset = the data dir."
    )
    s3_endpoint_url: str | None = Field(
        default=None, description="Endpoint of a non-AWS S3-compatible store (MinIO, Ceph…); unset = AWS."
    )
    s3_region: str | None = Field(default=None, description="Region of the bucket; unset = AWS_REGION's.")
    s3_addressing_style: Literal["auto", "path", "virtual"] = Field(
        default="auto", description="path = bucket in the URL path (most self-hosted stores)."
    )
    host: str = "127.0.0.1"
    port: int = 8275
    default_scope: str = "local"
    max_pixels: int = Field(
        default=24_000_000, ge=1, description="Largest width × height accepted (a 6000 × 4000 photo)."
    )
    max_upload_bytes: int = Field(default=20 * 1024 * 1024, ge=1)
    workers: int = Field(default=2, ge=0, le=32, description="Workers `mewdex serve` and `import --wait` start.")
    worker_mode: Literal["process", "thread"] = Field(
        default="process", description="process = one `mewdex worker` child each (faster); thread = inside the process."
    )
    worker_memory_limit_mb: int = Field(
        default=16384, ge=0, description="Address-space limit (RLIMIT_AS) of each `mewdex worker` process; 0 = none."
    )
    worker_nice: int = Field(
        default=10,
        ge=0,
        le=19,
        description="CPU niceness each `mewdex worker` process adds to itself (0 = none): background processing "
        "yields the CPU to interactive requests (search, pages) instead of sharing it evenly.",
    )
    web_processes: Annotated[int, Field(ge=1, le=16)] | Literal["auto"] = Field(
        default=1,
        description="Processes that answer on `serve`'s one port (`auto` = min(2, usable cores)): each runs its "
        "own interpreter, so the web app's Python uses more than one core; `serve` itself then runs the workers, "
        "the maintenance schedules and the database supervision. Each one loads the search models (≈ 0.5 GB "
        "resident) and has the request threads, search slots and connection pools below. On 2 cores it gained "
        "little (docs/scaling.md), hence 1.",
    )
    api_concurrency: int = Field(
        default=40,
        ge=1,
        le=1000,
        description="Requests one web process of `serve` works on at once (threads); sizes its database pool.",
    )
    warm_models: bool = Field(
        default=True,
        description="`serve` loads the search models (query embedders, image model, word splitter) as it starts, "
        "so the first search does not wait for them; false = at the first search (a server that never searches "
        "never loads them).",
    )
    search_concurrency: int = Field(
        default=8,
        ge=1,
        le=64,
        description="Searches one process (each web process of `serve`) runs at once; their legs have a pool of "
        "their own.",
    )
    pg_shared_buffers: str | None = Field(
        default=None,
        description="Embedded PostgreSQL shared_buffers (e.g. `2GB`); unset = 1/8 of the machine's memory.",
    )
    pg_work_mem: str | None = Field(
        default=None, description="Embedded PostgreSQL work_mem (e.g. `32MB`); unset = memory / 512, 4–64 MB."
    )
    search_wait_seconds: float = Field(
        default=5.0, ge=0, description="How long a search waits for a free slot before answering 503 `overloaded`."
    )
    queue_stall_seconds: float = Field(
        default=300.0, gt=0, description="/health is degraded when due work has had no consumer this long."
    )
    worker_lease_seconds: int = Field(default=120, ge=5)
    worker_heartbeat_seconds: int = Field(default=30, ge=1)
    worker_poll_seconds: float = Field(default=1.0, gt=0)
    task_max_attempts: int = Field(default=3, ge=1, le=100)
    retry_base_seconds: float = Field(default=2.0, ge=0)
    retry_max_seconds: float = Field(default=300.0, ge=0)
    ocr_threads: int = Field(default=1, ge=1)
    caption_font: str | None = Field(
        default=None,
        description="Font file re-captioning draws with (`path` or `path#face`); unset = Debian's Noto Sans CJK SC.",
    )
    query_embedding_threads: int | None = Field(
        default=None,
        ge=1,
        le=64,
        description="OpenMP threads that embed one search query with e5 while that many cores are free (else 1); "
        "unset = min(2, cores).",
    )
    query_cache_entries: int = Field(
        default=20_000,
        ge=0,
        le=10_000_000,
        description="Query embeddings `serve` and its workers share (`DATA_DIR/cache/query-vectors.sqlite3`, "
        "≈ 2 KB each; 0 = off): a query one process embedded is read by the others.",
    )
    log_level: str = "INFO"
    # Collection ZIP import (library.packages): limits on what an archive may inflate to.
    zip_max_items: int = Field(default=500, ge=1)
    zip_max_entries: int = Field(
        default=2000, ge=1, description="Entries of any kind (directories too) a ZIP may list."
    )
    zip_max_total_bytes: int = Field(default=512 * 1024 * 1024, ge=1)
    zip_max_ratio: float = Field(default=100.0, gt=1)
    # Search generations: the registered text embedder of each vector leg (JSON object).
    text_models: Annotated[dict[str, str], NoDecode] = Field(
        default_factory=lambda: {"e5": "e5", "use": "use"},
        description='Leg → registered embedder, as JSON {"e5": "e5"} or leg=model pairs (e5=e5,use=use).',
        examples=["e5=e5,use=use"],
    )

    # Processing control plane (queue lanes, back-pressure, analysis cost; issue 7).
    lane_concurrency_default: int = Field(
        default=8, ge=1, le=8, description="Running tasks at once in lane `default`, all processes."
    )
    lane_concurrency_visual: int = Field(default=8, ge=1, le=8)
    lane_concurrency_agent: int = Field(default=4, ge=1, le=8)
    lane_concurrency_embedding: int = Field(default=8, ge=1, le=8)
    channel_scope_concurrency: int = Field(
        default=2,
        ge=1,
        le=8,
        description="Channel tasks (deliveries, inbound messages) one account runs at once, all processes: "
        "its share of the `channel` lane.",
    )
    resource_concurrency: Annotated[dict[str, int], NoDecode] = Field(
        default_factory=dict,
        description='JSON {"lane/resource_key": n} or key=n pairs: slots of one resource key (default: the lane\'s).',
        examples=["visual/openai=2,agent/openai=1"],
    )
    agent_backpressure: int = Field(
        default=32, ge=1, description="Queued agent tasks per scope before interactive submissions get 429 queue_full."
    )
    worker_grace_seconds: float = Field(
        default=30.0, ge=0, description="SIGTERM: time to finish running tasks before they are released."
    )
    analysis_max_cost_per_image: float | None = Field(
        default=None, ge=0, description="Frozen into each job's analysis_policy."
    )
    analysis_max_cost_per_scope_day: float | None = Field(default=None, ge=0)
    task_modules: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="Extra plugin modules (task types, search legs, …), like entry points; comma-separated or JSON.",
        examples=["mypkg.tasks,otherpkg.tasks"],
    )

    def lane_concurrency(self, lane: str) -> int:
        """Concurrency of ``lane`` (1..8); lanes without a setting (tests, extensions) get 8."""
        return getattr(self, f"lane_concurrency_{lane}", 8)

    # Accounts, quotas and metering (platform).
    auth: Literal["auto", "none", "required"] = Field(
        default="auto", description="none = single-user, no login; auto = none on loopback with no users yet."
    )
    bcrypt_rounds: int = Field(default=12, ge=4, le=16)
    session_days: int = Field(default=30, ge=1, le=365)
    session_cookie_secure: bool = Field(
        default=False, description="Cookies only over TLS (automatic for https requests)."
    )
    session_idle_minutes: int = Field(default=7 * 24 * 60, ge=5, description="A session unused this long ends.")
    login_max_failures_per_account: int = Field(default=5, ge=1)
    login_max_failures_per_ip: int = Field(default=30, ge=1)
    login_failure_window_seconds: int = Field(default=900, ge=1)
    quota_storage_bytes: int | None = Field(default=None, ge=0, description="Per-user default; unset = unlimited.")
    quota_memes: int | None = Field(default=None, ge=0)
    quota_analysis_cost_per_month: float | None = Field(default=None, ge=0)
    prices: Annotated[dict[str, dict[str, float]], NoDecode] = Field(
        default_factory=dict,
        description='CNY per unit by model profile, e.g. {"gpt-4o-mini": {"tokens_in": 1e-6}}.',
        examples=['{"gpt-4o-mini": {"tokens_in": 1e-6}}'],
    )
    media_url_ttl_seconds: int = Field(default=3600, ge=1, le=86400)
    disk_rescan_seconds: int = Field(default=900, ge=10)
    watch_dirs: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description='Folders `mewdex serve` imports continuously (README "Watched folders"), comma-separated; '
        "`DIR=email` puts a folder's memes into that account's library (else the default library).",
        examples=["/srv/memes,/home/alice/Pictures/memes=alice@example.com"],
    )
    disk_low_bytes: int = Field(default=1024**3, ge=0, description="/health warns below this much free space.")
    search_replica_max_lag_seconds: float = Field(
        default=30.0,
        gt=0,
        description="The search legs read the main database while the replica is this far behind (or unreachable).",
    )

    # Operations (README "Monitoring"): who may scrape /metrics, and how long finished work is kept.
    metrics_allow: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="Addresses/networks that may read /metrics besides loopback and admin tokens, "
        "comma-separated or a JSON list.",
        examples=["10.0.0.5,10.1.0.0/16"],
    )
    retention_task_days: float = Field(
        default=14.0, gt=0, description="Succeeded tasks (and their attempts) are deleted this long after they ended."
    )
    retention_delivery_days: float = Field(
        default=90.0, gt=0, description="Sent and cancelled channel deliveries are deleted after this long."
    )
    trash_days: float = Field(
        default=30.0,
        gt=0,
        description="Memes in the trash are deleted for good (files too) this many days after they were trashed.",
    )
    retention_batch_rows: int = Field(
        default=1000, ge=10, le=100_000, description="Rows one retention statement deletes (one short transaction)."
    )

    @field_validator(
        "allowed_hosts",
        "trusted_proxies",
        "egress_allow_hosts",
        "metrics_allow",
        "task_modules",
        "watch_dirs",
        mode="before",
    )
    @classmethod
    def _list_setting(cls, value: Any) -> Any:
        """A list setting: a JSON list, or comma-separated items (``a:1, b:2``); empty = none."""
        if not isinstance(value, str):
            return value
        text = value.strip()
        if text.startswith("["):
            return json.loads(text)
        return [item.strip() for item in text.split(",") if item.strip()]

    @field_validator("text_models", "resource_concurrency", "prices", mode="before")
    @classmethod
    def _mapping_setting(cls, value: Any) -> Any:
        """A mapping setting: a JSON object, or comma-separated ``key=value`` pairs; empty = none."""
        if not isinstance(value, str):
            return value
        text = value.strip()
        if text.startswith("{"):
            return json.loads(text)
        pairs = [item.strip() for item in text.split(",") if item.strip()]
        if any("=" not in pair for pair in pairs):
            raise ValueError("expected a JSON object or key=value pairs separated by commas")
        return {key.strip(): val.strip() for key, val in (pair.split("=", 1) for pair in pairs)}

    @field_validator("proxy_client_header", mode="before")
    @classmethod
    def _header_name(cls, value: Any) -> Any:
        return value.strip().lower() if isinstance(value, str) else value

    @field_validator("trusted_proxies")
    @classmethod
    def _proxy_networks(cls, value: list[str]) -> list[str]:
        """Each entry an address or network (``127.0.0.1``, ``10.0.0.0/8``, ``::1``): a typo would trust no one."""
        for entry in value:
            try:
                ipaddress.ip_network(entry.strip().strip("[]"), strict=False)
            except ValueError:
                raise ValueError(f"MEWDEX_TRUSTED_PROXIES: {entry!r} is not an IP address or network") from None
        return [ipv4_form(entry) for entry in value]

    @field_validator("metrics_allow")
    @classmethod
    def _allowed_networks(cls, value: list[str]) -> list[str]:
        return [ipv4_form(entry) for entry in value]

    @field_validator("base_path", mode="before")
    @classmethod
    def _base_path(cls, value: Any) -> Any:
        """``/memes`` (one leading slash, no trailing one); ``""`` or ``/`` = the root; no query, no dots."""
        if not isinstance(value, str):
            return value
        text = "/" + value.strip().strip("/")
        if text == "/":
            return ""
        if any(part in ("", ".", "..") for part in text[1:].split("/")) or any(c in text for c in "?#%\\ \"'<>"):
            raise ValueError(f"MEWDEX_BASE_PATH: {value!r} is not a path like /memes")
        return text

    def public_base(self) -> str | None:
        """The public URL of mewdex's root, without a trailing slash: ``MEWDEX_PUBLIC_URL`` with
        ``MEWDEX_BASE_PATH`` appended unless it already ends with it; None when the URL is unset."""
        if not self.public_url:
            return None
        public = self.public_url.rstrip("/")
        if self.base_path and not public.endswith(self.base_path):
            public += self.base_path
        return public

    @field_validator("blob_store")
    @classmethod
    def _blob_store_url(cls, value: str | None) -> str | None:
        """``s3://bucket[/prefix]`` or unset (empty = unset); anything else is a configuration error."""
        if not value:
            return None
        parse_blob_store_url(value)
        return value

    @model_validator(mode="after")
    def _heartbeat_within_lease(self) -> Settings:
        """A worker must renew its lease before it expires: the heartbeat interval must be below the lease."""
        if self.worker_heartbeat_seconds >= self.worker_lease_seconds:
            raise ValueError(
                f"MEWDEX_WORKER_HEARTBEAT_SECONDS ({self.worker_heartbeat_seconds}) must be less than "
                f"MEWDEX_WORKER_LEASE_SECONDS ({self.worker_lease_seconds}): a task's lease would expire "
                "before its worker renews it"
            )
        return self

    # The assistant's own settings are declared in its package (mewdex/assistant/settings.py).

    # Security (README "Security"): who may reach the server and how much a request may send.
    allowed_hosts: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="Extra Host names served, comma-separated or a JSON list (localhost, 127.0.0.1, [::1] always "
        "are); others get 421.",
        examples=["memes.example.org,192.168.1.20"],
    )
    trusted_proxies: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="Proxy addresses/networks whose client header (MEWDEX_PROXY_CLIENT_HEADER) is believed "
        "(comma-separated or JSON); none: the client is the TCP peer and no request is forwarded.",
        examples=["127.0.0.1,10.0.0.0/8"],
    )
    proxy_client_header: Literal["x-forwarded-for", "forwarded", "x-real-ip"] = Field(
        default="x-forwarded-for",
        description="The header the trusted proxies set to name the client; its rightmost hop that is not a "
        "trusted proxy is the client.",
    )
    egress_allow_hosts: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="host:port pairs that outgoing requests may reach although private (http allowed), "
        "comma-separated or a JSON list.",
        examples=["127.0.0.1:9000,minio.lan:9000"],
    )
    signup_quota_storage_bytes: int = Field(
        default=1024**3, ge=0, description="Storage limit of an account made by sign-up."
    )
    signup_quota_memes: int = Field(default=5000, ge=0, description="Meme limit of an account made by sign-up.")
    signup_max_per_ip: int = Field(default=20, ge=1, description="Sign-up attempts per client address per hour.")
    share_max_per_minute: int = Field(
        default=600,
        ge=1,
        description="Requests to public collection links (pages, searches, files) per client address per minute.",
    )
    max_concurrent_uploads: int = Field(
        default=4,
        ge=1,
        description="Upload/import/image-search bodies one user may stream at once (counted per web process).",
    )
    max_json_bytes: int = Field(default=64 * 1024, ge=1024, description="Largest JSON/form body of a non-upload route.")

    # Channels (issue 17); each channel's own settings are declared in its package (SettingsGroup).
    channel_guest_messages_per_minute: int = Field(
        default=6,
        ge=0,
        le=600,
        description="Messages a minute per chat answered for people other than the binding's owner (0: none).",
    )

    # Outside systems (providers): secrets at rest, the env-configured OpenAI-compatible endpoint.
    secret_key: str | None = Field(
        default=None,
        description="32-byte key (base64 or hex) sealing stored secrets; unset = key ring under the data dir.",
    )
    public_url: str | None = Field(
        default=None,
        description="This server's public https URL: providers that need an image URL get signed links under it.",
    )
    base_path: str = Field(
        default="",
        description="Sub-path mewdex is served under behind a proxy that strips it (/memes); empty: the root.",
        examples=["/memes"],
    )
    openai_base_url: str | None = Field(
        default=None, description="OpenAI-compatible endpoint (…/v1) of the platform definition made at start."
    )
    openai_api_key: str | None = Field(
        default=None, description="Its API key (sealed into the database, never logged)."
    )
    chat_model: str | None = Field(default=None, description="Chat model of that endpoint.")
    vision_model: str | None = Field(
        default=None, description="Vision model; set = vision analysis on for the local scope's new memes."
    )
    embedding_model: str | None = Field(default=None, description="Embedding model of that endpoint.")
    provider_timeout_seconds: float = Field(default=60.0, gt=0, description="Read timeout of one provider call.")
    provider_max_retries: int = Field(
        default=2, ge=0, le=10, description="SDK retries (429 with Retry-After, 5xx, timeouts)."
    )
    eval_gate_margin: float = Field(
        default=0.02,
        ge=0,
        le=1,
        description="Largest loss of Recall@10 or MRR@10 a new search generation may show against the active "
        "one on the scope's query set (its 'meme I wanted' marks, plus MEWDEX_EVAL_QUERIES) before the "
        "switch is refused (unless forced).",
    )
    eval_queries: str | None = Field(
        default=None,
        description="A query set (JSON lines, as for `mewdex eval`) every scope's eval gate uses besides its marks.",
    )
    search_llm_timeout_seconds: float = Field(
        default=8.0,
        gt=0,
        le=120,
        description="Longest wait for an optional LLM search step (llm_enhance, rerank, remote query "
        "embedding); past it the search answers without that step.",
    )

    # Single sign-on (README "Single sign-on (OpenID Connect)"): the provider, how its users become
    # accounts, and whether passwords still sign in.
    oidc_issuer: str | None = Field(
        default=None,
        description="Issuer URL of an OpenID Connect provider (its discovery document is under it); "
        "set = the sign-in page offers it.",
        examples=["https://auth.example.org"],
    )
    oidc_client_id: str | None = Field(default=None, description="The client id mewdex has at the provider.")
    oidc_client_secret: str | None = Field(
        default=None, description="Its client secret (never logged); unset = a public client (PKCE only)."
    )
    oidc_name: str | None = Field(
        default=None, description="The provider's name on the sign-in button (unset: 'single sign-on')."
    )
    oidc_auto_create: bool = Field(
        default=False,
        description="A verified email with no account gets one even while sign-up is closed.",
    )
    oidc_admin_claim: str | None = Field(
        default=None,
        description="Claim (e.g. groups) whose value MEWDEX_OIDC_ADMIN_VALUE makes an account admin at each "
        "sign-in (and its absence a user); unset = roles are mewdex's own.",
    )
    oidc_admin_value: str = Field(default="admin", description="The admin claim's value (or one of its list's).")
    oidc_scopes: str = Field(
        default="openid email profile",
        description="Scopes asked of the provider, space-separated (add groups where the provider "
        "gives the groups claim only with it, e.g. Authelia); openid is always asked.",
    )
    password_login: bool = Field(
        default=True,
        description="false = email and password no longer sign in or sign up on the web (needs "
        "MEWDEX_OIDC_ISSUER); the CLI's `mewdex user` commands still work.",
    )

    @field_validator("oidc_issuer")
    @classmethod
    def _issuer_url(cls, value: str | None) -> str | None:
        """An http(s) URL with a host, without query or fragment (empty = unset); kept as written."""
        if not value or not value.strip():
            return None
        value = value.strip()
        parts = urlsplit(value)
        if parts.scheme not in ("http", "https") or not parts.hostname or parts.query or parts.fragment:
            raise ValueError("an http(s) URL such as https://auth.example.org")
        return value

    @field_validator("oidc_scopes")
    @classmethod
    def _scopes(cls, value: str) -> str:
        """Space-separated scope tokens (printable ASCII, no quotes or backslash), ``openid`` first."""
        scopes = value.split()
        if any(not re.fullmatch(r"[!#-\[\]-~]+", scope) for scope in scopes):
            raise ValueError("scopes are words separated by spaces, e.g. openid email profile groups")
        return " ".join(dict.fromkeys(["openid", *scopes]))

    @model_validator(mode="after")
    def _sign_in_possible(self) -> Settings:
        """The provider needs its client id, and password sign-in may be off only with a provider."""
        if self.oidc_issuer and not self.oidc_client_id:
            raise ValueError("MEWDEX_OIDC_ISSUER is set but MEWDEX_OIDC_CLIENT_ID is not: set the client id too")
        if not self.password_login and not self.oidc_issuer:
            raise ValueError(
                "MEWDEX_PASSWORD_LOGIN=false needs MEWDEX_OIDC_ISSUER: nobody could sign in on the web otherwise"
            )
        return self

    @property
    def blob_root(self) -> Path:
        return self.data_dir.resolve() / "blobs"

    @property
    def pgdata(self) -> Path:
        return self.data_dir.resolve() / "pgdata"

    @property
    def serving_processes(self) -> int:
        """``web_processes`` as a number: ``auto`` is min(2, the cores this process may run on)."""
        if self.web_processes == "auto":
            return min(2, usable_cores())
        return self.web_processes


def usable_cores() -> int:
    """Cores this process may run on (its CPU affinity, e.g. a container's cpuset; else the count)."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):  # no sched_getaffinity (macOS)
        return os.cpu_count() or 1


def parse_blob_store_url(url: str) -> tuple[str, str]:
    """``s3://bucket/some/prefix`` → ``("bucket", "some/prefix/")`` (prefix ``""`` when none).

    Raises:
        ValueError: not an ``s3://`` URL, no bucket, or a prefix with empty, ``.`` or ``..`` segments.
    """
    parts = urlsplit(url)
    if parts.scheme != "s3" or not parts.netloc or parts.query or parts.fragment:
        raise ValueError(f"MEWDEX_BLOB_STORE must look like s3://bucket/prefix, not {url!r}")
    segments = parts.path.strip("/").split("/") if parts.path.strip("/") else []
    if any(s in ("", ".", "..") for s in segments):
        raise ValueError(f"MEWDEX_BLOB_STORE has an invalid prefix: {url!r}")
    return parts.netloc, "".join(s + "/" for s in segments)


class ConfigError(ValueError):
    """Settings that cannot be used; ``str()`` is one line per bad setting: its variable, the value given
    (hidden for secrets) and an example of what is expected."""

    def __init__(self, lines: list[str]) -> None:
        super().__init__("\n".join(lines))
        self.lines = lines


def _expected(name: str) -> str:
    """An example value of setting ``name`` (its ``examples``, else its default, else its type)."""
    field = setting_field(name)
    if field is None:
        return "a value"
    if field.examples:
        return str(field.examples[0])
    default = field.get_default(call_default_factory=True)
    if isinstance(default, bool):
        return "true" if not default else "false"
    if default not in (None, [], {}) and not isinstance(default, (list, dict)):
        return str(default)
    kinds = [field.annotation, *get_args(field.annotation)]
    names = {getattr(kind, "__name__", "") for kind in kinds}
    for kind, example in (("bool", "true"), ("int", "10"), ("float", "2.5"), ("Path", "/srv/mewdex")):
        if kind in names:
            return example
    return "a value"


def describe_config_error(exc: ValidationError) -> list[str]:
    """One line per bad setting of a :class:`Settings` validation error: ``MEWDEX_X='given' is not valid
    (why); expected e.g. MEWDEX_X=example``. Cross-setting checks keep their own message."""
    lines = []
    for error in exc.errors(include_url=False):
        loc = error.get("loc") or ()
        name = str(loc[0]) if loc else ""
        reason = str(error.get("msg", "invalid")).removeprefix("Value error, ")
        if setting_field(name) is None:
            lines.append(reason)
            continue
        variable = f"MEWDEX_{name.upper()}"
        given = error.get("input")
        if len(loc) > 1:  # an item inside a list/mapping: show the whole value given and where it failed
            given = os.environ.get(variable, given)
            reason = ".".join(str(part) for part in loc[1:]) + ": " + reason
        lines.append(_bad_setting(name, given, reason))
    return list(dict.fromkeys(lines)) or [str(exc).splitlines()[0]]


def _bad_setting(name: str, given: Any, reason: str) -> str:
    """``MEWDEX_X='given' is not valid (reason); expected e.g. MEWDEX_X=example`` (a secret's value
    hidden, an empty list or mapping shown as unset)."""
    variable = f"MEWDEX_{name.upper()}"
    shown = "(hidden)" if is_secret_setting(name) else f"'{given}'"
    if isinstance(given, (dict, list)) and not given:
        shown = "(unset)"
    expected = _expected(name)
    example = expected if expected == "a value" else f"{variable}={expected}"
    return f"{variable}={shown} is not valid ({reason}); expected e.g. {example}"


def describe_settings_error(exc: SettingsError) -> list[str]:
    """The one line of a value pydantic-settings could not decode before validation (a list or mapping
    setting without ``NoDecode``): the same shape as :func:`describe_config_error`'s."""
    match = re.search(r'field "(\w+)"', str(exc))
    if match is None or setting_field(match.group(1)) is None:
        return [str(exc).splitlines()[0]]
    name = match.group(1)
    given = os.environ.get(f"MEWDEX_{name.upper()}", "")
    return [_bad_setting(name, given, str(exc.__cause__ or exc).splitlines()[0])]


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    """The settings of this process; tests call ``get_settings.cache_clear()`` after changing env.

    Raises:
        ConfigError: a setting (environment or ``.env``) is not valid; one line per bad setting.
    """
    try:
        return Settings()
    except ValidationError as exc:
        raise ConfigError(describe_config_error(exc)) from None
    except SettingsError as exc:
        raise ConfigError(describe_settings_error(exc)) from None


def _validated(model: type[G]) -> G:
    """``model()`` (a :class:`SettingsGroup` read from the environment); :class:`ConfigError` as
    :func:`get_settings`'s."""
    try:
        return model()
    except ValidationError as exc:
        raise ConfigError(describe_config_error(exc)) from None
    except SettingsError as exc:
        raise ConfigError(describe_settings_error(exc)) from None


def package_version() -> str:
    """mewdex's version (``"1.0.0"``) from the installed package's metadata, whose one source is
    ``version`` in pyproject.toml; ``"unknown"`` when mewdex runs from sources that were never
    installed. Shown by ``mewdex --version``, the OpenAPI document and a backup's manifest."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("mewdex")
    except PackageNotFoundError:
        return "unknown"
