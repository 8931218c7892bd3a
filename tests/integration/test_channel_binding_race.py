"""An outside identity belongs to one binding, also when two accounts bind it at the same moment
(issue 40, finding 8), on every channel: the first transaction binds a chat / bot number / WeCom
member / WeChat user and has not committed yet; the second, for another account, waits on the
unique index and is refused with ``channel_identity_taken`` once the first commits — never an
IntegrityError (a 500, a failed task) and never two bindings. The Discord application's case is in
test_channels_discord.py (it needs Discord's answer to a bot token)."""

from __future__ import annotations

import threading
import uuid

import pytest
from sqlalchemy import text

from conftest import drop_scope, new_scope


def _bind(session, scope, channel: str, identity: str):
    from mewdex.channels import bindings

    return bindings.bind(
        session,
        scope_id=scope.scope_id,
        user_id=None,
        channel=channel,
        identity=identity,
        config={"owner_id": identity},
    )


@pytest.mark.parametrize("channel", ["telegram", "onebot", "wecom", "clawbot"])
def test_the_loser_of_two_accounts_binding_one_identity_gets_a_clear_error(sessions, channel):
    from mewdex.channels.errors import ChannelError

    first_scope, second_scope = new_scope(sessions, "t-race"), new_scope(sessions, "t-race")
    identity = str(uuid.uuid4().int)[:12]
    try:
        first = sessions()
        first.begin()
        _bind(first, first_scope, channel, identity)
        outcome: dict = {}

        def second() -> None:
            try:
                with sessions.begin() as session:
                    _bind(session, second_scope, channel, identity)
                outcome["result"] = "bound"
            except ChannelError as exc:
                outcome["result"] = exc.code
            except Exception as exc:  # noqa: BLE001 — the old failure: the unique index's IntegrityError
                outcome["result"] = type(exc).__name__

        thread = threading.Thread(target=second)
        thread.start()
        thread.join(timeout=2)
        assert thread.is_alive(), "the second waits for the first's uncommitted binding"
        first.commit()
        first.close()
        thread.join(timeout=30)
        assert outcome["result"] == "channel_identity_taken", outcome
        with sessions.begin() as session:
            holders = (
                session.execute(
                    text(
                        "SELECT scope_id FROM channel_bindings"
                        " WHERE channel = :c AND identity = :i AND status = 'active'"
                    ),
                    {"c": channel, "i": identity},
                )
                .scalars()
                .all()
            )
        assert holders == [first_scope.scope_id]
    finally:
        drop_scope(sessions, first_scope)
        drop_scope(sessions, second_scope)
