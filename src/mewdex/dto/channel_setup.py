"""Shapes of the QQ (OneBot v11), WeCom and WeChat ClawBot set-up routes (issue 17).
No shape carries a secret except :class:`OneBotBound` (the one answer that shows the access token)."""

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


class WeComAppConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    corp_id: str = Field(max_length=64)
    agent_id: int = Field(gt=0)
    secret: str | None = Field(None, max_length=200, description="The app's Secret (omit to keep the stored one)")
    token: str | None = Field(None, max_length=64, description="Callback Token (omit to keep)")
    encoding_aes_key: str | None = Field(None, max_length=64, description="Callback EncodingAESKey (omit to keep)")
    base_url: str | None = Field(None, max_length=2000, description="API server (default https://qyapi.weixin.qq.com)")


class WeComAppStatus(Dto):
    configured: bool
    corp_id: str | None = None
    agent_id: int | None = None
    base_url: str | None = None
    secret_hint: str | None = Field(None, description="What may be shown of the Secret")
    callback_url: str = Field(description="The URL to enter as the app's API receive URL")


class WeComLink(Dto):
    code: str = Field(description="One-time bind code (valid 15 minutes): send it to the app in WeCom")
    instructions: str


class ClawBotQr(Dto):
    qrcode: str = Field(description="The login's id: poll GET /api/v1/channels/clawbot/login/{qrcode}")
    qr_svg: str = Field(description="The QR code to scan with WeChat, as SVG")
    qrcode_img_content: str = Field(description="What the QR code encodes")


class ClawBotLoginStatus(Dto):
    status: str = Field(description="wait | scaned | confirmed | expired | need_verifycode | binded_redirect")
    binding: dict[str, Any] | None = Field(None, description="The new binding once confirmed")
