"""Schema migrations (Alembic), run by ``mewdex migrate`` and on every start (``serve``, ``worker``,
each CLI command). A database already at the newest revision costs one query: Alembic and the
migration scripts are loaded only when there is something to run."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from sqlalchemy import Engine, text

if TYPE_CHECKING:
    from alembic.config import Config

MIGRATIONS = Path(__file__).parent / "migrations"
# Serialises concurrent `migrate` calls from several processes on one database.
_ADVISORY_LOCK = 0x6D657764


def alembic_config() -> Config:
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    return cfg


def head_revision() -> str:
    """The newest migration's revision, from the scripts' file names: a revision is its file's
    four-digit prefix (``0030_queue_without_stage_columns.py`` is ``0030``) and the history is one
    line (``tests/unit/test_migrations_head.py`` holds both against Alembic's own reading)."""
    return max(path.name[:4] for path in (MIGRATIONS / "versions").glob("[0-9][0-9][0-9][0-9]_*.py"))


def current_revision(engine: Engine) -> str | None:
    """The database's revision (None: never migrated)."""
    with engine.connect() as connection:
        if connection.execute(text("SELECT to_regclass('alembic_version')")).scalar() is None:
            return None
        return connection.execute(text("SELECT version_num FROM alembic_version")).scalar()


def upgrade(engine: Engine, revision: str = "head") -> str:
    """Upgrade the schema to ``revision``; returns the revision now current. Safe to call concurrently."""
    if revision == "head" and (current := current_revision(engine)) == head_revision():
        return current
    from alembic import command
    from alembic.runtime.migration import MigrationContext

    cfg = alembic_config()
    with engine.begin() as connection:
        connection.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": _ADVISORY_LOCK})
        cfg.attributes["connection"] = connection
        command.upgrade(cfg, revision)
        current = MigrationContext.configure(connection).get_current_revision() or ""
    # Pooled connections opened before the vector extension existed lack its type adapters.
    engine.dispose()
    return current
