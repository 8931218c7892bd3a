"""An example mewdex channel plugin: the postbox, a chat "app" that is a JSON-lines file. Imported by
mewdex through the entry point ``mewdex.plugins: postbox``; it provides its adapter and declares its
channel, whose card on the Channels page is a setup schema (data), rendered by mewdex's generic card."""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path

from mewdex.channels.base import Adapter, Sent
from mewdex.channels.card import Text, code_card
from mewdex.channels.registry import Channel, declare, register_adapter

NAME = "postbox"


def _post(record: dict) -> Sent:
    with Path(os.environ.get("MEWDEX_POSTBOX_FILE", "postbox.jsonl")).open("a", encoding="utf-8") as out:
        out.write(json.dumps(record, ensure_ascii=False) + "\n")
    return Sent(platform_message_id=uuid.uuid4().hex)


class Postbox(Adapter):
    """Binds by the framework's one-time code; a send is a line of the postbox file."""

    name = NAME
    min_send_interval = 0.0
    binds_by_code = True

    def target_of(self, binding) -> str:
        return str(binding.identity)

    def send_meme(self, binding, target, meme, caption) -> Sent:
        return _post({"to": target, "meme": meme.display_name, "caption": caption})

    def send_text(self, binding, target, text) -> Sent:
        return _post({"to": target, "text": text})


register_adapter(Postbox())
CHANNEL = declare(
    Channel(
        name=NAME,
        modules=(),
        locales=Path(__file__).parent / "locales",
        card=(Text(("channels.postbox.help",), marker="data-postbox-help"), *code_card()),
    )
)
