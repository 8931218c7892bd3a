"""Storage recovery and the system scope: what every start-up runs, kept apart from the maintenance
task types (:mod:`mewdex.runtime.maintenance`, which load the channels, the schedules and the
assistant) so that a light command does not import them."""

from __future__ import annotations

#: The scope of the queue's upkeep and the built-in schedules (no user reaches it).
SYSTEM_SCOPE = "__system__"

# A staging file older than this belongs to a write that died (writes take milliseconds).
STAGING_MAX_AGE_SECONDS = 3600


def recover_storage() -> None:
    """Complete or compensate interrupted uploads, renames and deletes; remove stale staging files
    (at every start-up, and every 300 s as the ``storage_recovery`` task)."""
    from mewdex.db.engine import get_sessionmaker
    from mewdex.storage import blob_store, journal

    with get_sessionmaker().begin() as session:
        journal.recover(session, blob_store())
    blob_store().clean_staging(older_than_seconds=STAGING_MAX_AGE_SECONDS)
