"""The webhook channel's set-up shapes. No shape carries a secret except :class:`WebhookCreated` (the
one answer that shows it)."""

from __future__ import annotations

from pydantic import Field

from mewdex.channels.shapes import ChannelBinding
from mewdex.dto.common import Dto


class WebhookCreate(Dto):
    url: str = Field(max_length=2000)


class WebhookCreated(Dto):
    binding: ChannelBinding
    secret: str = Field(description="The whsec_ signing secret; shown this once")
