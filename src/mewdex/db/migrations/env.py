"""Alembic environment: runs on the connection mewdex hands it (see :mod:`mewdex.db.migrate`)."""

from alembic import context

from mewdex.db.models import Base

config = context.config
connection = config.attributes["connection"]
context.configure(connection=connection, target_metadata=Base.metadata, compare_type=True)
with context.begin_transaction():
    context.run_migrations()
