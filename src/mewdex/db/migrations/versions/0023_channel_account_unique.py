"""An outside account belongs to one binding (issue 40, finding 8): ``channel_bindings.config``'s
``account_id`` (the Discord application a binding holds) is unique per channel among active
bindings, as ``identity`` already is. Two accounts connecting the same application at once both
passed the application-level check; the index decides, and the loser gets ``channel_identity_taken``.

The upgrade copies each Discord binding's ``application_id`` into ``account_id`` and, where two
active bindings already hold one application (the race above), keeps the one with a linked person
(then the oldest) and revokes the others — they answered nothing a signature could reach, since
interactions are verified against one binding only.

Revision ID: 0023
Revises: 0022
"""

import sqlalchemy as sa
from alembic import op

revision = "0023"
down_revision = "0022"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        "UPDATE channel_bindings SET config = config || jsonb_build_object('account_id', config -> 'application_id') "
        "WHERE channel = 'discord' AND (config ? 'application_id') AND NOT (config ? 'account_id')"
    )
    op.execute(
        """
        UPDATE channel_bindings AS b SET status = 'revoked', revoked_at = now(), updated_at = now()
          FROM (SELECT scope_id, channel,
                       row_number() OVER (PARTITION BY channel, config ->> 'account_id'
                                          ORDER BY identity IS NULL, created_at, scope_id) AS n
                  FROM channel_bindings
                 WHERE status = 'active' AND (config ? 'account_id')) AS d
         WHERE b.scope_id = d.scope_id AND b.channel = d.channel AND d.n > 1
        """
    )
    op.create_index(
        "uq_channel_bindings_active_account",
        "channel_bindings",
        ["channel", sa.text("(config ->> 'account_id')")],
        unique=True,
        postgresql_where=sa.text("status = 'active' AND (config ? 'account_id')"),
    )


def downgrade() -> None:
    op.drop_index("uq_channel_bindings_active_account", table_name="channel_bindings")
    op.execute("UPDATE channel_bindings SET config = config - 'account_id' WHERE (config ? 'account_id')")
