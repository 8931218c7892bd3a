"""``mewdex secrets rotate|status`` and ``mewdex connectors …`` (list, create, grant, revoke, verify, audits):
acts on the local database as its admin, through :mod:`mewdex.providers.connectors`."""

from __future__ import annotations

import json

import typer

from mewdex.cli.common import ExitCode, _prepare, console, err, exit_for


def _sessions():
    from mewdex.db.engine import get_sessionmaker

    _prepare()
    return get_sessionmaker()


def secrets_rotate(
    resume: bool = typer.Option(
        False, "--resume", help="Finish an interrupted rotation with the current key (no new key)."
    ),
) -> None:
    """Make a new secret key and re-encrypt every sealed secret in the database with it (connector
    credentials, channel binding secrets, the WeCom app), in batches; a key is dropped only once
    nothing it sealed is left."""
    from mewdex.providers import sealed_fields

    def progress(column: str, done: int) -> None:
        err.print(f"{column}: {done} re-encrypted so far", markup=False, highlight=False)

    result = sealed_fields.rotate(_sessions(), new_key=not resume, progress=progress)
    console.print(
        f"active key {result['active']}; re-encrypted {result['reencrypted']} secret(s); "
        f"dropped {result['dropped_keys']} old key(s)",
        markup=False,
        highlight=False,
    )
    if result["unreadable"]:
        err.print(
            f"[yellow]warning:[/yellow] {result['unreadable']} stored secret(s) were sealed with a key that is "
            "gone and cannot be read (see `mewdex secrets status`); enter them again"
        )


def secrets_status(as_json: bool = typer.Option(False, "--json", help="Print JSON.")) -> None:
    """Each secret key (never the key itself) and how many stored secrets it still seals."""
    from mewdex.providers import sealed_fields

    found = sealed_fields.status(_sessions())
    if as_json:
        console.print_json(json.dumps(found))
        return
    for key in found["keys"]:
        columns = ", ".join(f"{name} {n}" for name, n in sorted(key["by_column"].items()))
        console.print(
            f"{key['kid']}  {'active' if key['active'] else '      '}  {key['source']:<11} "
            f"{key['secrets']:>6} secret(s)" + (f"  ({columns})" if columns else ""),
            markup=False,
            highlight=False,
        )
    missing = sum(k["secrets"] for k in found["keys"] if k["source"] == "missing")
    if missing:
        err.print(f"[yellow]warning:[/yellow] {missing} stored secret(s) name a key no key ring holds")


def connectors_list() -> None:
    """Every connector definition: id, provider, name, revision, visibility, enabled, credential hint."""
    from mewdex.providers import connectors

    with _sessions().begin() as session:
        for d in connectors.list_definitions(session):
            console.print(
                f"{d.definition_id}  {d.provider:<20} {d.name:<24} rev {d.revision:<3} {d.visibility:<8} "
                f"{'enabled' if d.enabled else 'disabled':<8} {d.credential_hint or '-'}",
                markup=False,
                highlight=False,
            )


def connectors_create(
    provider: str = typer.Argument(..., help="openai_compatible | serpapi_google_lens | yandex_image_search | webhook"),
    name: str = typer.Argument(...),
    config: str = typer.Option("{}", help='Config JSON, e.g. {"base_url": "...", "vision_model": "..."}.'),
    visibility: str = typer.Option("selected", help="all | selected (granted users only)."),
    api_key_env: str = typer.Option("", help="Name of an environment variable holding the platform's API key."),
) -> None:
    """Create a platform definition (its API key read from an environment variable, never argv)."""
    import os

    from mewdex.providers import connectors
    from mewdex.providers.errors import ProviderError

    credentials = {}
    if api_key_env:
        if not os.environ.get(api_key_env):
            err.print(f"[red]error:[/red] {api_key_env} is not set")
            raise typer.Exit(ExitCode.USAGE)
        credentials["api_key"] = os.environ[api_key_env]
    try:
        with _sessions().begin() as session:
            row = connectors.create_definition(
                session,
                provider=provider,
                name=name,
                config=json.loads(config),
                visibility=visibility,
                credentials=credentials or None,
            )
            console.print(str(row.definition_id))
    except (ProviderError, ValueError) as exc:
        err.print(f"[red]error:[/red] {getattr(exc, 'message', exc)}")
        raise typer.Exit(ExitCode.USAGE) from None


def connectors_grant(definition_id: str, email: str) -> None:
    """Let the account ``email`` see and connect a definition."""
    _grant(definition_id, email, revoke=False)


def connectors_revoke(definition_id: str, email: str) -> None:
    """Take a grant back (the account's connection stops being usable)."""
    _grant(definition_id, email, revoke=True)


def _grant(definition_id: str, email: str, *, revoke: bool) -> None:
    from mewdex.platform.users import find_by_email
    from mewdex.providers import connectors
    from mewdex.providers.errors import ProviderError

    try:
        with _sessions().begin() as session:
            user = find_by_email(session, email)
            if user is None:
                err.print("[red]error:[/red] no such account")
                raise typer.Exit(ExitCode.NOT_FOUND)
            (connectors.revoke if revoke else connectors.grant)(session, definition_id, user.user_id)
    except ProviderError as exc:
        err.print(f"[red]error:[/red] {exc.message}")
        raise typer.Exit(exit_for(exc.code, ExitCode.USAGE)) from None
    console.print("revoked" if revoke else "granted")


def connectors_verify(definition_id: str) -> None:
    """Verify a definition's own (platform) credentials with one cheap call (audited)."""
    from mewdex.config import get_settings
    from mewdex.db.models import ScopeContext
    from mewdex.providers import connectors
    from mewdex.providers.errors import ProviderError

    try:
        connectors.verify_definition(_sessions(), definition_id, ScopeContext(get_settings().default_scope))
    except ProviderError as exc:
        err.print(f"[red]verification failed:[/red] {exc.code}: {exc.message}")
        raise typer.Exit(ExitCode.FAILED) from None
    console.print("verified")


def connectors_audits(limit: int = typer.Option(50, min=1, max=500)) -> None:
    """The newest outside-call audits (event, outcome, status, duration; never secrets)."""
    from mewdex.providers import connectors

    with _sessions().begin() as session:
        for a in connectors.list_audits(session, scope_id=None, limit=limit)[0]:
            console.print(
                f"{a.created_at:%Y-%m-%d %H:%M:%S}  {a.scope_id:<16} {a.event:<10} {a.outcome:<8} "
                f"{a.status_code or '-':<4} {a.duration_ms:>6} ms  {json.dumps(a.detail)}",
                markup=False,
                highlight=False,
            )


def reanalyze(
    all_memes: bool = typer.Option(False, "--all", help="Every meme, not only those without a vision context."),
) -> None:
    """Re-run the analysis of the local scope's memes (mode full_retry: every stage again) under its
    current analysis policy, e.g. after configuring a vision model. Without --all only memes whose
    context has no vision analysis yet. The workers (`mewdex serve` / `mewdex worker`) process them."""
    from sqlalchemy import select

    from mewdex.db.models import Meme
    from mewdex.library.scopes import default_scope
    from mewdex.pipeline import processing

    scope = default_scope()
    with _sessions().begin() as session:
        query = select(Meme.id).where(Meme.scope_id == scope.scope_id)
        if not all_memes:
            query = query.where(~Meme.meme_context.has_key("vision"))
        ids = list(session.execute(query).scalars())
        if not ids:
            console.print("nothing to re-analyse")
            return
        result = processing.submit(session, scope, meme_ids=ids, mode="full_retry")
    console.print(f"queued {len(result['jobs'])} meme(s); {len(result['skipped'])} already in progress")


def eval_(
    queries: str = typer.Argument(
        "", help='JSON lines: {"query": "...", "ids": [...]} or "sha256": [...]. Optional with --marks.'
    ),
    legs: str = typer.Option("", help="Comma-separated legs (keyword,e5,use,remote); default all, fused."),
    marks: bool = typer.Option(False, "--marks", help="Add the local scope's 'meme I wanted' marks to the set."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Recall@10 and MRR@10 of the local scope's search (its active generations) on a query set."""
    from pathlib import Path

    from mewdex.library.scopes import default_scope
    from mewdex.search.evaluation import evaluate, load_queries
    from mewdex.search.marks import query_set

    if not queries and not marks:
        err.print("[red]error:[/red] give a QUERIES file, --marks, or both")
        raise typer.Exit(ExitCode.USAGE)
    try:
        rows = load_queries(Path(queries)) if queries else []
    except (OSError, ValueError) as exc:
        err.print(f"[red]error:[/red] {exc}")
        raise typer.Exit(ExitCode.USAGE) from None
    with _sessions().begin() as session:
        if marks:
            rows += query_set(session, default_scope().scope_id)
        result = evaluate(session, default_scope(), rows, tuple(x for x in legs.split(",") if x) or None)
    if as_json:
        print(json.dumps(result))
    else:
        console.print(
            f"{result['evaluated']} of {result['queries']} queries evaluated ({result['skipped']} skipped): "
            f"Recall@10 {result['recall_at_10']}, MRR@10 {result['mrr_at_10']}"
        )


def generations_activate(
    generation_id: str = typer.Argument(..., help="The generation's id (see GET /api/v1/search/status)."),
    force: bool = typer.Option(False, "--force", help="Switch even when the eval gate measures it worse."),
) -> None:
    """Make a complete search generation active through the eval gate (Recall@10 / MRR@10 on the
    local scope's "meme I wanted" marks and MEWDEX_EVAL_QUERIES; MEWDEX_EVAL_GATE_MARGIN)."""
    import uuid as _uuid

    from mewdex.library.scopes import default_scope
    from mewdex.providers.search_steps import activate_generation

    try:
        verdict = activate_generation(_sessions(), default_scope(), _uuid.UUID(generation_id), force=force)
    except ValueError as exc:
        err.print(f"[red]error:[/red] {exc}")
        raise typer.Exit(ExitCode.USAGE) from None
    console.print(json.dumps(verdict))
    if not verdict["passed"]:
        err.print("[red]refused by the eval gate[/red] (use --force to switch anyway)")
        raise typer.Exit(ExitCode.FAILED)


def generations_remote(
    force: bool = typer.Option(False, "--force", help="Switch even when the eval gate measures it worse."),
    rebuild: bool = typer.Option(False, "--rebuild", help="Build a fresh generation even if one exists."),
) -> None:
    """Build (or bring up to date) the local scope's remote embedding leg with the embedding model of
    its openai_compatible connector (MEWDEX_EMBEDDING_MODEL); runs in `mewdex serve` or `mewdex worker`."""
    from mewdex.library.scopes import default_scope
    from mewdex.providers.search_steps import start_remote_build

    with _sessions().begin() as session:
        start_remote_build(session, default_scope(), force=force, rebuild=rebuild)
    console.print("queued remote_embedding_sync; progress: mewdex tasks list --type remote_embedding_sync")
