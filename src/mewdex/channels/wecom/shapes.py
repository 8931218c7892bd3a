"""Shapes of WeCom's set-up routes. No shape carries a secret."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from mewdex.dto.common import Dto


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
