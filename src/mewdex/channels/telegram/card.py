"""Telegram's card on the Channels page, declared (:mod:`mewdex.channels.card`): the link to the bot (a
one-time start link) and the admin's bot token (saved sealed, used at once; the environment's wins)."""

from mewdex.channels.card import Action, Callout, Done, Field, Fill, Form, Reveal, Section, Step, Steps, Text

CARD = (
    Text(("channels.telegram.help", "channels.telegram.mode_polling"), when=("configured", "info.mode!=webhook")),
    Text(("channels.telegram.help", "channels.telegram.mode_webhook"), when=("configured", "info.mode=webhook")),
    Action(
        "telegram-link",
        "channels.telegram.link",
        "POST",
        "/api/v1/channels/telegram/link",
        Done(reveal="telegram-link"),
        when=("configured",),
    ),
    Reveal("telegram-link", (Fill("url", "link"),), note="channels.telegram.link_note", when=("configured",)),
    Text(("channels.telegram.not_configured",), when=("!configured",), marker='data-telegram-state="not-configured"'),
    Callout("channels.loopback.telegram", when=("info.mode=webhook",)),
    Section(
        "telegram-admin",
        summary=(("channels.telegram.token.title", ()),),
        open=("!configured",),
        when=("admin",),
        blocks=(
            Text(
                ("channels.telegram.token.env",),
                when=("info.token_source=environment",),
                cls="callout",
                marker="data-token-env",
            ),
            Steps(
                (
                    Step("channels.telegram.token.step1", link="https://t.me/BotFather"),
                    Step("channels.telegram.token.step2"),
                    Step("channels.telegram.token.step3"),
                )
            ),
            Text(
                ("channels.telegram.token.saved",),
                when=("info.token_source=settings",),
                params={"hint": "info.token_hint"},
                marker="data-token-saved",
            ),
            Form(
                "telegram-token",
                "PUT",
                "/api/v1/channels/telegram/token",
                (
                    Field(
                        "token",
                        "channels.telegram.token.field",
                        "secret",
                        required=True,
                        max_length=200,
                        placeholder="=123456789:AA…",
                    ),
                ),
                "channels.telegram.token.save",
                Done(toast="js.telegram_token_saved", reset=True, reload=True),
                actions=(
                    Action(
                        "telegram-token-remove",
                        "channels.telegram.token.remove",
                        "PUT",
                        "/api/v1/channels/telegram/token",
                        Done(toast="js.telegram_token_removed", reload=True),
                        body={"token": None},
                        style="secondary",
                        when=("info.token_source=settings",),
                    ),
                ),
            ),
        ),
    ),
)
