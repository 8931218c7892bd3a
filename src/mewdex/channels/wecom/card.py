"""WeCom's card on the Channels page, declared (:mod:`mewdex.channels.card`): a member's one-time code to
send to the app; the admin's self-built app (secrets kept when left empty) and the callback URL to enter."""

from mewdex.channels.card import Action, Callout, Done, Field, Fill, Form, Reveal, Section, Shown, Text

KEEP = "channels.wecom.keep"  # the secret boxes' placeholder: empty keeps the stored one

CARD = (
    Callout("channels.loopback.wecom"),
    Text(("channels.wecom.help",), when=("configured",)),
    Action(
        "wecom-link",
        "channels.wecom.link",
        "POST",
        "/api/v1/channels/wecom/link",
        Done(reveal="wecom-code"),
        when=("configured",),
    ),
    Reveal("wecom-code", (Fill("code"),), note="channels.wecom.code_note", when=("configured",)),
    Text(("channels.wecom.not_configured",), when=("!configured",)),
    Section(
        "wecom-admin",
        summary=(("channels.wecom.admin", ()),),
        when=("admin",),
        blocks=(
            Form(
                "wecom-app",
                "PUT",
                "/api/v1/channels/wecom/app",
                (
                    Field("corp_id", "channels.wecom.field.corp_id", required=True, max_length=64),
                    Field("agent_id", "channels.wecom.field.agent_id", "number", required=True, pattern="[0-9]+"),
                    Field(
                        "secret",
                        "channels.wecom.field.secret",
                        "secret",
                        max_length=200,
                        blank="omit",
                        placeholder=KEEP,
                    ),
                    Field(
                        "token", "channels.wecom.field.token", "secret", max_length=64, blank="omit", placeholder=KEEP
                    ),
                    Field(
                        "encoding_aes_key",
                        "channels.wecom.field.encoding_aes_key",
                        "secret",
                        max_length=64,
                        blank="omit",
                        placeholder=KEEP,
                    ),
                ),
                "channels.wecom.save",
                Done(toast="js.channel_wecom_saved", reload=True),
                load="/api/v1/channels/wecom/app",
            ),
            Shown(
                "wecom-callback", fetch=("/api/v1/channels/wecom/app", "callback_url"), label="channels.wecom.callback"
            ),
            Text(("channels.wecom.trusted_ip",)),
        ),
    ),
)
