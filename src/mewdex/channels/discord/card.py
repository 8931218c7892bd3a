"""Discord's card on the Channels page, declared (:mod:`mewdex.channels.card`): connect the application by
its bot token, its Interactions Endpoint URL to copy, register the commands, the link code, the channel
for scheduled memes."""

from mewdex.channels.card import (
    Action,
    Callout,
    Done,
    Field,
    Fill,
    Form,
    Reveal,
    Row,
    Section,
    Shown,
    Step,
    Steps,
    Text,
)

CONNECTED = ("binding.config.application_id",)

CARD = (
    Text(("channels.discord.help",)),
    # Discord calls back from the start: warn before the application is connected, not only after.
    Callout("channels.loopback.discord"),
    Text(
        ("channels.discord.application",),
        values=("!binding.config.application_name", "binding.config.application_id"),
        cls="",
        when=CONNECTED,
    ),
    Shown(
        "discord-endpoint",
        value="{base_url}/channels/discord/{binding.config.application_id}/interactions",
        label="channels.discord.endpoint",
        marker="data-discord-endpoint",
        when=CONNECTED,
    ),
    Text(("channels.discord.install",), when=CONNECTED),
    Text(
        ("channels.discord.commands_done",),
        cls="ok",
        marker="data-discord-commands",
        when=(*CONNECTED, "binding.config.commands_registered"),
    ),
    Text(
        ("channels.discord.commands_missing",),
        marker="data-discord-commands",
        when=(*CONNECTED, "!binding.config.commands_registered"),
    ),
    Row(
        (
            Action(
                "discord-commands",
                "channels.discord.commands",
                "POST",
                "/api/v1/channels/discord/commands",
                Done(toast="js.discord_commands_registered", reload=True),
            ),
            Action(
                "bind-code",
                "channels.discord.link",
                "POST",
                "/api/v1/channels/{channel}/code",
                Done(reveal="bind-code"),
            ),
        ),
        when=CONNECTED,
    ),
    Reveal("bind-code", (Fill("code"),), lead=None, note="channels.discord.link_note", when=CONNECTED),
    Text(
        ("channels.discord.not_linked",),
        alt=(("channels.discord.linked", ("binding.identity",)),),
        marker="data-discord-linked",
        when=CONNECTED,
    ),
    Form(
        "discord-channel",
        "PUT",
        "/api/v1/channels/discord/channel",
        (
            Field(
                "channel_id",
                "channels.discord.channel",
                numeric=True,
                pattern="[0-9]{15,21}",
                max_length=21,
                blank="null",
                value="binding.config.channel_id",
            ),
        ),
        "channels.discord.channel_save",
        Done(toast="js.discord_channel_saved", reset=True, reload=True),
        style="secondary",
        when=CONNECTED,
    ),
    Section(
        "discord-connect",
        summary=(("channels.discord.replace", CONNECTED), ("channels.discord.connect_title", ())),
        open=("!binding.config.application_id",),
        blocks=(
            Steps(
                (
                    Step(
                        "channels.discord.step1",
                        link="https://discord.com/developers/applications",
                        text="discord.com/developers",
                    ),
                    Step("channels.discord.step2"),
                    Step("channels.discord.step3"),
                )
            ),
            Form(
                "discord-connect",
                "PUT",
                "/api/v1/channels/discord",
                (Field("bot_token", "channels.discord.token", "secret", required=True, max_length=200),),
                "channels.discord.connect",
                Done(toast="js.discord_connected", reset=True, reload=True),
            ),
        ),
    ),
)
