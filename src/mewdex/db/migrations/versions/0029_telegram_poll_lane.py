"""The channel kit's poller (``mewdex.channels.polling``) names each polling channel's lane
``<name>_poll``: Telegram's ``telegram_polling`` tasks ran in lane ``channel_poll`` before, and no
worker claims that lane any more. Queued and running (leased) ``telegram_polling`` tasks move to lane
``telegram_poll`` with the lane's slot rows (where the new lane has no row of that slot yet); the
old lane's round-robin rows go (they are rebuilt at the next claim). The task type kept its name.
The downgrade moves them back.

Revision ID: 0029
Revises: 0028
"""

from alembic import op
from sqlalchemy import text

revision = "0029"
down_revision = "0028"
branch_labels = None
depends_on = None

TASK_TYPE = "telegram_polling"
OLD_LANE = "channel_poll"
NEW_LANE = "telegram_poll"


def _move(old: str, new: str) -> None:
    params = {"old": old, "new": new, "task_type": TASK_TYPE}
    bind = op.get_bind()

    bind.execute(
        text(
            "UPDATE tasks SET lane = :new"
            " WHERE lane = :old AND task_type = :task_type AND status IN ('queued', 'running')"
        ),
        params,
    )
    for table in ("task_lane_slots", "task_lane_resource_slots"):
        key = "slot_number" if table == "task_lane_slots" else "resource_key, slot_number"
        match = " AND ".join(f"n.{column} = {table}.{column}" for column in key.split(", "))
        bind.execute(
            text(
                f"UPDATE {table} SET lane = :new WHERE lane = :old"  # noqa: S608 - fixed table names
                f" AND NOT EXISTS (SELECT 1 FROM {table} n WHERE n.lane = :new AND {match})"
            ),
            params,
        )
        bind.execute(text(f"DELETE FROM {table} WHERE lane = :old AND task_id IS NULL"), params)  # noqa: S608
    bind.execute(text("DELETE FROM task_lane_fairness WHERE lane = :old"), params)


def upgrade() -> None:
    _move(OLD_LANE, NEW_LANE)


def downgrade() -> None:
    _move(NEW_LANE, OLD_LANE)
