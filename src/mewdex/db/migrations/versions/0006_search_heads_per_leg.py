"""Search heads are keyed by vector leg (``e5``, ``use``), no longer by model id.

``search_heads.model`` now names the leg and ``active_generation_model`` the model of the
generation it points at, so a leg can switch models (mewdex.search.generations). Heads written
by earlier builds (keyed by the model id) are renamed to their leg. Data only; no DDL.

Revision ID: 0006
Revises: 0005
"""

from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

_LEGS = {"e5": "multilingual-e5-small%", "use": "use-multilingual%"}


def upgrade() -> None:
    for leg, pattern in _LEGS.items():
        op.execute(f"UPDATE search_heads SET model = '{leg}' WHERE model LIKE '{pattern}'")


def downgrade() -> None:
    op.execute(
        "UPDATE search_heads SET model = active_generation_model "
        "WHERE model IN ('e5', 'use') AND active_generation_model IS NOT NULL"
    )
