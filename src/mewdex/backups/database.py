"""The configured database as the PostgreSQL client programs and psycopg reach it (backup and restore
run ``pg_dump``/``pg_restore``: the embedded server's own binaries, also against
``MEWDEX_DATABASE_URL``)."""

from __future__ import annotations

import os

from mewdex.config import get_settings


def _pg_binary(name: str) -> str:
    from mewdex.db.embedded import client_binary

    return str(client_binary(name))


def _libpq() -> tuple[str, dict[str, str]]:
    """(libpq URL without the password, environment with ``PGPASSWORD``) of the configured database."""
    from sqlalchemy.engine import make_url

    from mewdex.db.engine import database_url

    url = make_url(database_url(get_settings()))
    env = {**os.environ}
    if url.password:
        env["PGPASSWORD"] = str(url.password)
    plain = url.set(drivername="postgresql")._replace(password=None)
    return plain.render_as_string(hide_password=False), env


def _connect(url: str, env: dict[str, str]):
    import psycopg

    return psycopg.connect(url, password=env.get("PGPASSWORD"), autocommit=True, application_name="mewdex backup")
