"""QQ's (OneBot v11) card on the Channels page, declared (:mod:`mewdex.channels.card`): connect a bot
(its reverse-WebSocket URL and access token shown once), then "waiting for the bot" until it has
connected and proved its number."""

from mewdex.channels.card import Done, Field, Fill, Form, Reveal, Text, Wait

CARD = (
    Wait(
        "onebot",
        flag="connected",
        text=(("channels.onebot.waiting", ("!binding.identity",)), ("channels.onebot.disconnected", ())),
        waiting="js.onebot_waiting",
        done="js.onebot_connected",
        after="onebot-bind",
    ),
    Text(("channels.onebot.help",)),
    Form(
        "onebot-bind",
        "POST",
        "/api/v1/channels/onebot",
        (
            Field(
                "owner_qq",
                "channels.onebot.owner_qq",
                numeric=True,
                pattern="[1-9][0-9]{4,14}",
                max_length=15,
                blank="null",
            ),
        ),
        "channels.onebot.connect",
        Done(reveal="onebot-secret"),
        fixed={"mode": "ws"},
    ),
    Reveal(
        "onebot-secret",
        (
            Fill("ws_url", label="channels.onebot.ws_url", ref="onebot-ws"),
            Fill(
                "access_token",
                label="channels.onebot.token",
                ref="onebot-token",
                copy=("copy-onebot-token", "channels.webhook.copy"),
            ),
        ),
        lead="channels.onebot.once",
    ),
)
