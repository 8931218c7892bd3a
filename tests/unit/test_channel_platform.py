"""The channel layer's shared parts: the registry (a missing built-in channel is an error, never
skipped; error codes declared by the packages reach the web layer) and the platform module (the
failure mapping, the one multipart encoder)."""

from __future__ import annotations

import email.parser
import email.policy
import types

import pytest

from mewdex.channels import platform, registry
from mewdex.channels.registry import Channel, ChannelMissing
from mewdex.egress import EgressError


@pytest.fixture
def fresh_registry(monkeypatch):
    """The registry as if nothing were loaded yet (restored afterwards)."""
    monkeypatch.setattr(registry, "_loaded", {})
    return registry


def test_every_built_in_channel_loads_with_its_adapter_and_error_codes():
    loaded = registry.load()
    assert list(loaded) == [p.rsplit(".", 1)[-1] for p in registry.BUILTIN]
    assert all(name in registry.ADAPTERS for name in loaded)
    from mewdex.web.errors import http_status

    assert http_status("wecom_ip_not_trusted") == 502 and http_status("onebot_not_connected") == 503
    assert http_status("channel_not_bound") == 404 and http_status("no_such_code") == 422


def test_a_missing_built_in_channel_stops_the_start_up(fresh_registry, monkeypatch):
    monkeypatch.setattr(registry, "BUILTIN", (*registry.BUILTIN, "mewdex.channels.nosuch"))
    with pytest.raises(ChannelMissing, match="mewdex.channels.nosuch is missing"):
        registry.load()


def test_a_package_without_its_declaration_or_adapter_is_refused(fresh_registry, monkeypatch):
    bare = types.ModuleType("mewdex.channels.bare")
    monkeypatch.setitem(__import__("sys").modules, "mewdex.channels.bare", bare)
    monkeypatch.setattr(registry, "BUILTIN", ("mewdex.channels.bare",))
    with pytest.raises(ChannelMissing, match="does not declare CHANNEL"):
        registry.load()
    bare.CHANNEL = Channel(name="bare", modules=())  # declared, but nothing registers its adapter
    with pytest.raises(ChannelMissing, match="registers the 'bare' adapter"):
        registry.load()


def test_failures_map_to_the_delivery_codes():
    unreachable = platform.failure(EgressError("egress_timeout", "no answer from api.example"))
    assert (unreachable.code, unreachable.platform_code, unreachable.retryable) == (
        "channel_unreachable",
        "egress_timeout",
        True,
    )
    refused = platform.failure(EgressError("egress_address_refused", "a private address"))
    assert refused.code == "channel_unreachable" and not refused.retryable
    own = platform.PlatformError("wecom_user_invalid", "not visible", 81013, "invalid user")
    blocked = platform.failure(own, {"wecom_user_invalid": "channel_blocked"})
    assert (blocked.code, blocked.platform_code, blocked.platform_error) == ("channel_blocked", "81013", "invalid user")
    window = platform.failure(platform.PlatformError("channel_window_closed", "write first", -2))
    assert window.code == "channel_window_closed" and window.platform_code == "-2"
    busy = platform.failure(platform.PlatformError("x_api_error", "slow down", 45009, retry_after=60))
    assert (busy.code, busy.retry_after, busy.retryable) == ("channel_platform_error", 60, True)


def test_one_multipart_encoder_for_fields_and_files():
    body, content_type = platform.multipart(
        {"chat_id": "42", "reply_markup": {"a": 1}},
        {"photo": ('me"me\r\n.png', b"\x89PNG\r\n\x00data", "image/png")},
        file_length=True,
    )
    message = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(
        f"Content-Type: {content_type}\r\n\r\n".encode() + body
    )
    parts = {part.get_param("name", header="content-disposition"): part for part in message.iter_parts()}
    assert parts["chat_id"].get_content() == "42" and parts["reply_markup"].get_content() == '{"a": 1}'
    photo = parts["photo"]
    assert photo.get_filename() == "meme.png" and photo.get_content_type() == "image/png"
    assert photo.get_payload(decode=True) == b"\x89PNG\r\n\x00data"
    assert photo.get_param("filelength", header="content-disposition") == str(len(b"\x89PNG\r\n\x00data"))
