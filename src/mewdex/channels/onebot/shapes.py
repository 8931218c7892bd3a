"""Shapes of QQ's (OneBot v11) set-up route. No shape carries a secret except :class:`OneBotBound`
(the one answer that shows the access token)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from mewdex.dto.common import Dto


class OneBotBind(BaseModel):
    model_config = ConfigDict(extra="forbid")
    mode: str = Field("ws", description="ws: NapCat/LLOneBot dial mewdex's reverse WebSocket; http: HTTP POST + API")
    owner_qq: str | None = Field(None, max_length=16, description="Your QQ number: where proactive sends go")
    api_url: str | None = Field(None, max_length=2000, description="http mode: the OneBot HTTP API's URL")
    self_id: str | None = Field(None, max_length=16, description="http mode: the bot's QQ number")


class OneBotBound(Dto):
    binding: dict[str, Any] = Field(description="The binding (as in GET /api/v1/channels)")
    access_token: str = Field(description="Paste into NapCat/LLOneBot as its token; shown this once")
    ws_url: str = Field(description="The reverse WebSocket URL (ws mode)")
    events_url: str = Field(description="The HTTP POST URL (http mode; signed with the token)")
