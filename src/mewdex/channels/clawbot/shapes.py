"""Shapes of WeChat ClawBot's set-up routes (the QR login). No shape carries the bot token."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from mewdex.dto.common import Dto


class ClawBotQr(Dto):
    qrcode: str = Field(description="The login's id: poll GET /api/v1/channels/clawbot/login/{qrcode}")
    qr_svg: str = Field(description="The QR code to scan with WeChat, as SVG")
    qrcode_img_content: str = Field(description="What the QR code encodes")


class ClawBotLoginStatus(Dto):
    status: str = Field(description="wait | scaned | confirmed | expired | need_verifycode | binded_redirect")
    binding: dict[str, Any] | None = Field(None, description="The new binding once confirmed")
