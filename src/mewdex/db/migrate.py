"""Schema migrations (Alembic), run by ``mewdex migrate`` and on ``serve``/``worker`` start."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Engine, text

MIGRATIONS = Path(__file__).parent / "migrations"
# Serialises concurrent `migrate` calls from several processes on one database.
_ADVISORY_LOCK = 0x6D657764


def alembic_config() -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    return cfg


def upgrade(engine: Engine, revision: str = "head") -> str:
    """Upgrade the schema to ``revision``; returns the revision now current. Safe to call concurrently."""
    cfg = alembic_config()
    with engine.begin() as connection:
        connection.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": _ADVISORY_LOCK})
        cfg.attributes["connection"] = connection
        command.upgrade(cfg, revision)
        current = MigrationContext.configure(connection).get_current_revision() or ""
    # Pooled connections opened before the vector extension existed lack its type adapters.
    engine.dispose()
    return current


def is_current(engine: Engine) -> bool:
    """Whether the database is at the newest revision."""
    head = ScriptDirectory.from_config(alembic_config()).get_current_head()
    with engine.connect() as connection:
        return MigrationContext.configure(connection).get_current_revision() == head
