"""WeChat ClawBot's card on the Channels page, declared (:mod:`mewdex.channels.card`): the login QR (an
SVG the server makes), its state polled until the person confirms in WeChat (then the page reloads,
the chat linked) or it expires."""

from mewdex.channels.card import Action, Done, Fill, Poll, Reveal, Text

CARD = (
    Text(("channels.clawbot.help",)),
    Action(
        "clawbot-login",
        "channels.clawbot.show_qr",
        "POST",
        "/api/v1/channels/clawbot/login",
        Done(reveal="clawbot-qr"),
        then=Poll(
            "/api/v1/channels/clawbot/login/{qrcode}",
            field="status",
            words="js.clawbot_",
            stop={"confirmed": "reload", "expired": "stop"},
            every_ms=2000,
            tries=120,
        ),
    ),
    Reveal("clawbot-qr", (Fill("qr_svg", "svg"), Fill("status", "status", ref="clawbot-status"))),
)
