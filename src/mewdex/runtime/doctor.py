"""``mewdex doctor``: the checks a self-hoster would ask for, each problem with the command that fixes it.

:func:`run_checks` returns ``[{"name", "status": "ok"|"warning"|"problem", "message", "fix": str |
None}]`` in this order: ``database``, ``migrations``, ``disk``, ``secrets``, ``models``, ``egress``,
``search_index``, ``backups``. A check that cannot run (the database is down) says so as a problem
of its own; no check raises.
"""

from __future__ import annotations

import logging
import shutil
from collections.abc import Callable
from functools import partial
from typing import Any

from mewdex.config import get_settings

log = logging.getLogger(__name__)
Check = dict[str, Any]


def _result(name: str, status: str, message: str, fix: str | None = None) -> Check:
    return {"name": name, "status": status, "message": message, "fix": fix}


def check_database() -> Check:
    from sqlalchemy import text

    from mewdex.db.engine import get_engine

    settings = get_settings()
    where = "MEWDEX_DATABASE_URL" if settings.database_url else f"the embedded server in {settings.pgdata}"
    try:
        with get_engine().connect() as connection:
            version = connection.execute(text("SHOW server_version")).scalar_one()
    except Exception as exc:
        fix = (
            "check MEWDEX_DATABASE_URL and that the server runs"
            if settings.database_url
            else f"read {settings.pgdata / 'log'}; `mewdex db stop`, then `mewdex serve` starts it again"
        )
        return _result("database", "problem", f"{where} does not answer ({type(exc).__name__})", fix)
    return _result("database", "ok", f"{where} answers (PostgreSQL {version.split()[0]})")


def check_migrations() -> Check:
    from alembic.runtime.migration import MigrationContext
    from alembic.script import ScriptDirectory

    from mewdex.db.engine import get_engine
    from mewdex.db.migrate import alembic_config

    script = ScriptDirectory.from_config(alembic_config())
    head = script.get_current_head()
    with get_engine().connect() as connection:
        current = MigrationContext.configure(connection).get_current_revision()
    known = {rev.revision for rev in script.walk_revisions()}
    if current == head:
        return _result("migrations", "ok", f"the schema is at the newest revision ({head})")
    if current is None:
        return _result("migrations", "problem", "the database has no mewdex schema yet", "mewdex migrate")
    if current not in known:
        return _result(
            "migrations",
            "problem",
            f"the schema ({current}) was made by a newer mewdex than this one",
            "upgrade mewdex to the version that wrote this database",
        )
    return _result("migrations", "problem", f"the schema is at {current}, the newest is {head}", "mewdex migrate")


def check_disk() -> Check:
    from mewdex.storage import blob_store

    settings = get_settings()
    low = settings.disk_low_bytes
    places = []
    free = blob_store().free_bytes()
    if free is not None:
        places.append(("the blob store", free))
    if not settings.database_url and settings.data_dir.exists():
        places.append(("the database", shutil.disk_usage(settings.data_dir.resolve()).free))
    short = [f"{what} has {free / 1024**3:.1f} GiB free" for what, free in places if free < low]
    if short:
        return _result(
            "disk",
            "problem",
            "; ".join(short) + f" (below MEWDEX_DISK_LOW_BYTES, {low / 1024**3:.1f} GiB): uploads will fail",
            f"free space on the disk of {settings.data_dir.resolve()}, or move blobs to an object store "
            "(MEWDEX_BLOB_STORE; `mewdex backup` + `mewdex restore` move a library)",
        )
    text = ", ".join(f"{what} {free / 1024**3:.1f} GiB free" for what, free in places) or "object store"
    return _result("disk", "ok", text)


def sealed_secrets(session) -> list[tuple[str, Callable[[], object]]]:
    """Every sealed secret stored now, as ``(where, open)``: ``open()`` decrypts it (raises when it
    cannot). Walks the registry of sealed columns (:data:`mewdex.providers.sealed_fields.SEALED_COLUMNS`),
    each value with the AAD it was sealed with, over the rows a rotation re-seals (a finished task's
    payload is history: a rotation leaves it, so its handle may stay under a dropped key)."""
    from sqlalchemy import select

    from mewdex.providers import secrets
    from mewdex.providers.sealed_fields import SEALED_COLUMNS

    out: list[tuple[str, Callable[[], object]]] = []
    for column in SEALED_COLUMNS:
        query: Any = select(column.model)
        if column.where is not None:  # the rows a rotation re-seals (tasks: only those still waiting)
            query = query.where(column.where())
        for row in session.execute(query).scalars():
            value = getattr(row, column.column)
            if not isinstance(value, dict):
                continue
            key = "/".join(str(getattr(row, k)) for k in column.key)
            for member, sealed in value.items():
                if secrets.is_sealed(sealed):
                    where = f"{column.name}[{key}].{member}"
                    out.append((where, partial(secrets.open_sealed, sealed, column.aad(row, member))))
    return out


def check_secrets() -> Check:
    from mewdex.db.engine import get_sessionmaker
    from mewdex.providers import secrets

    settings = get_settings()
    with get_sessionmaker().begin() as session:
        places = sealed_secrets(session)
        broken = []
        for where, open_it in places:
            try:
                open_it()
            except Exception:  # SecretError, or a provider error wrapping it; never the secret itself
                broken.append(where)
    if broken:
        source = "MEWDEX_SECRET_KEY" if settings.secret_key else str(secrets.keyring_path())
        return _result(
            "secrets",
            "problem",
            f"{len(broken)} of {len(places)} sealed secrets cannot be read with the key ring ({source}): "
            + ", ".join(broken[:5])
            + (" …" if len(broken) > 5 else ""),
            "put back the secret.keys this data dir had (`mewdex restore` of a backup restores it) or set "
            "MEWDEX_SECRET_KEY to the key that sealed them; otherwise enter those credentials again",
        )
    return _result("secrets", "ok", f"{len(places)} sealed secrets readable")


def check_models() -> Check:
    from mewdex.inference import models

    try:
        embedders = models.text_embedders()
        for embedder in embedders.values():
            embedder.embed_query("doctor")
    except Exception as exc:
        return _result(
            "models",
            "problem",
            f"a text model does not load: {exc}",
            "check MEWDEX_TEXT_MODELS; reinstall mewdex (`pip install --force-reinstall mewdex`) for missing weights",
        )
    try:
        from mewdex.pipeline.visual import visual_model

        visual_model().load()
    except Exception as exc:
        return _result(
            "models",
            "problem",
            f"the visual model does not load: {exc}",
            "reinstall mewdex (`pip install --force-reinstall mewdex`) for missing weights",
        )
    return _result("models", "ok", f"text models {', '.join(sorted(embedders))} and the visual model load")


def check_egress() -> Check:
    from urllib.parse import urlsplit

    from sqlalchemy import select

    from mewdex import egress
    from mewdex.db.engine import get_sessionmaker
    from mewdex.db.models import ExternalSystemDefinition

    settings = get_settings()
    problems, warnings = [], []
    for entry in settings.egress_allow_hosts:
        host, _, port = entry.strip().rpartition(":")
        if not host or not port.isdigit():
            problems.append(f"MEWDEX_EGRESS_ALLOW_HOSTS entry {entry!r} is not host:port")
    if settings.public_url and urlsplit(settings.public_url).scheme != "https":
        warnings.append("MEWDEX_PUBLIC_URL is not https: providers and chat apps may refuse its links")
    with get_sessionmaker().begin() as session:
        definitions = list(
            session.execute(select(ExternalSystemDefinition).where(ExternalSystemDefinition.enabled)).scalars()
        )
    for definition in definitions:
        url = (definition.config or {}).get("base_url")
        if not isinstance(url, str) or not url:
            continue
        try:
            egress.check_url(url)
        except egress.EgressError as exc:
            if exc.code == "egress_unresolvable":
                warnings.append(f"connector {definition.name!r}: {exc.message}")
            else:
                problems.append(f"connector {definition.name!r}: {exc.message}")
    if problems:
        return _result(
            "egress",
            "problem",
            "; ".join(problems + warnings),
            "list the private hosts mewdex may call as MEWDEX_EGRESS_ALLOW_HOSTS='[\"host:port\"]', or give the "
            "connector an https URL (`mewdex connectors create`)",
        )
    if warnings:
        return _result("egress", "warning", "; ".join(warnings))
    allowed = len(settings.egress_allow_hosts)
    return _result(
        "egress", "ok", f"https only, {allowed} private host(s) allowed; {len(definitions)} connector(s) pass"
    )


def check_search_index() -> Check:
    from mewdex.db.engine import get_sessionmaker
    from mewdex.inference import models
    from mewdex.search import generations

    try:
        embedders = models.text_embedders()
    except ValueError as exc:
        return _result("search_index", "problem", str(exc), "fix MEWDEX_TEXT_MODELS")
    from mewdex.platform.instance import get_setting
    from mewdex.runtime import SEARCH_RECIPE_SETTING
    from mewdex.search.documents import recipe

    with get_sessionmaker().begin() as session:
        stale = generations.configured_mismatches(session, embedders)
        old_recipe = get_setting(session, SEARCH_RECIPE_SETTING, None) not in (None, recipe())
        running = generations.builds(session)
    failed = [b for b in running if b["task_status"] == "failed"]
    refused = [b for b in running if b["status"] == "ready"]
    if failed:
        return _result(
            "search_index",
            "problem",
            f"{len(failed)} search index rebuild(s) failed: "
            + ", ".join(f"{b['scope_id']} {b['model']} ({(b['error'] or {}).get('code')})" for b in failed[:5]),
            "mewdex reindex --wait",
        )
    if stale or old_recipe:
        return _result(
            "search_index",
            "problem",
            "vectors of an older model or search recipe are searched and no rebuild is queued",
            "mewdex reindex --wait",
        )
    if refused:
        return _result(
            "search_index",
            "warning",
            f"{len(refused)} rebuilt index(es) refused by the eval gate (search keeps the old ones): "
            + ", ".join(f"{b['scope_id']} {b['model']}" for b in refused[:5]),
            "mewdex generations activate GENERATION --force",
        )
    if running:
        done = sum(b["memes_done"] for b in running)
        total = sum(b["memes_total"] for b in running)
        return _result("search_index", "ok", f"{len(running)} rebuild(s) running: {done}/{total} memes")
    return _result("search_index", "ok", "every library's vectors use the configured models and recipe")


def check_backups() -> Check:
    from mewdex.backups import service as backups
    from mewdex.db.engine import get_sessionmaker

    settings = backups.settings()
    with get_sessionmaker().begin() as session:
        state = backups.health(session)
    last = state["last"]
    if last and last.get("status") == "failed":
        return _result(
            "backups",
            "problem",
            f"the last backup ({last.get('finished_at')}) failed: {last.get('code')}: {last.get('message')}",
            f"mewdex backup {settings.backup_dest or 'DEST'}",
        )
    if last and last.get("status") == "incomplete":
        return _result(
            "backups",
            "problem",
            f"the last backup ({last.get('finished_at')}, {last.get('snapshot')}) is incomplete: {last.get('message')}",
            f"put the files back or delete their memes, then mewdex backup {settings.backup_dest or 'DEST'}",
        )
    if not settings.backup_dest:
        when = f"the last one {last['finished_at']}" if last else "none yet"
        return _result(
            "backups",
            "warning",
            f"no scheduled backups ({when})",
            "set MEWDEX_BACKUP_DEST (a directory or s3://bucket/prefix) for nightly backups, "
            "or run `mewdex backup DEST`",
        )
    if state["stale"]:
        return _result(
            "backups",
            "problem",
            f"no recent backup (the last good one: {(last or {}).get('last_ok_at') or 'never'})",
            f"mewdex backup {settings.backup_dest}",
        )
    return _result("backups", "ok", f"the last backup {last['finished_at'] if last else '-'} succeeded")


CHECKS: list[Callable[[], Check]] = [
    check_database,
    check_migrations,
    check_disk,
    check_secrets,
    check_models,
    check_egress,
    check_search_index,
    check_backups,
]
NEEDS_SCHEMA = {"check_secrets", "check_egress", "check_search_index", "check_backups"}


def run_checks() -> list[Check]:
    """Run every check (see the module docstring); checks that need the database are reported as not
    run when it does not answer, those that need the schema when it is not at the newest revision."""
    out: list[Check] = []
    database_ok = schema_ok = True
    for check in CHECKS:
        name = check.__name__.removeprefix("check_")
        if not database_ok and check is not check_database and check is not check_disk and check is not check_models:
            out.append(_result(name, "problem", "not checked: the database does not answer", None))
            continue
        if not schema_ok and check.__name__ in NEEDS_SCHEMA:
            out.append(
                _result(name, "warning", "not checked: the schema is not at its newest revision", "mewdex migrate")
            )
            continue
        try:
            result = check()
        except Exception as exc:
            log.debug("doctor: %s failed", name, exc_info=True)
            result = _result(name, "problem", f"the check failed: {type(exc).__name__}: {exc}", None)
        out.append(result)
        if check is check_database and result["status"] != "ok":
            database_ok = False
        if check is check_migrations and result["status"] != "ok":
            schema_ok = False
    return out
