"""The WeChat login QR is a full QR code whatever its content's length (WeChat cannot scan Micro QR)."""

from __future__ import annotations

import segno

from mewdex.channels.clawbot.setup import qr_svg


def test_short_content_still_gives_a_full_qr_code():
    assert segno.make("abc123", error="m").is_micro  # what the plain factory would have chosen
    svg = qr_svg("abc123")
    # A full QR code has 21+ modules a side; Micro QR 11 to 17. The SVG's size is (modules + 2 × border) × scale.
    width = int(svg.split('width="', 1)[1].split('"', 1)[0])
    assert width == (21 + 2 * 2) * 4
