"""The webhook channel's card on the Channels page, declared (:mod:`mewdex.channels.card`): the URL to
post to, its signing secret shown once with Copy."""

from mewdex.channels.card import Done, Field, Fill, Form, Reveal

CARD = (
    Form(
        "webhook-create",
        "POST",
        "/api/v1/channels/webhook",
        (Field("url", "channels.webhook.url", "url", required=True, max_length=2000, placeholder="=https://"),),
        "channels.webhook.save",
        Done(toast="js.channel_webhook_saved", reveal="webhook-secret", reset=True),
    ),
    Reveal(
        "webhook-secret",
        (Fill("secret", copy=("copy-secret", "channels.webhook.copy")),),
        lead="channels.webhook.secret_once",
    ),
)
