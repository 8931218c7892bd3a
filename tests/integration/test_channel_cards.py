"""The Channels page's cards (issue 35, item 9): the Telegram bot token the admin saves on the page
(sealed in ``platform_settings``, used at once, ``MEWDEX_TELEGRAM_BOT_TOKEN`` still wins and the card
says so), the loopback public-URL warning on the cards that need a callback, and the channel guides
served as pages (raw HTML in the markdown escaped; a clear 404 page when the docs are not there)."""

from __future__ import annotations

import json

import pytest
from sqlalchemy import text

from conftest import client_for

PAGE_TOKEN = "987654321:AAPageSavedTokenForTests_0123456789xyz"
ENV_TOKEN = "111222333:AAEnvironmentTokenForTests_9876543210"


@pytest.fixture
def page_client(scope, sessions, settings_env):
    # the single-user admin on this machine, whatever accounts other tests of this process left
    settings_env(MEWDEX_TELEGRAM_BOT_TOKEN="", MEWDEX_PUBLIC_URL="", MEWDEX_AUTH="none")
    with client_for(scope) as c:
        yield c
    with sessions.begin() as session:
        session.execute(text("DELETE FROM platform_settings WHERE key = 'channel_telegram_bot'"))


def _telegram(client) -> dict:
    return next(c for c in client.get("/api/v1/channels").json()["channels"] if c["name"] == "telegram")


def test_token_saved_on_the_page_is_sealed_used_at_once_and_the_environment_wins(page_client, sessions, settings_env):
    from mewdex.channels.errors import ChannelError
    from mewdex.channels.telegram import api as telegram
    from mewdex.providers import secrets

    assert _telegram(page_client)["configured"] is False
    bad = page_client.put("/api/v1/channels/telegram/token", json={"token": "not a token"})
    assert bad.status_code == 422 and bad.json()["error"]["code"] == "channel_config_invalid"

    saved = page_client.put("/api/v1/channels/telegram/token", json={"token": PAGE_TOKEN})
    assert saved.status_code == 200, saved.text
    assert saved.json() == {"configured": True, "source": "settings", "hint": "…9xyz"}
    with sessions.begin() as session:
        stored = session.execute(
            text("SELECT value FROM platform_settings WHERE key = 'channel_telegram_bot'")
        ).scalar_one()
    assert secrets.is_sealed(stored["token"]) and PAGE_TOKEN not in json.dumps(stored)
    assert telegram.token() == PAGE_TOKEN and telegram.bot_id() == "987654321"  # no restart
    info = _telegram(page_client)
    assert info["configured"] and info["token_source"] == "settings"
    page = page_client.get("/settings/channels").text
    assert PAGE_TOKEN not in page and "data-token-saved" in page and "data-token-env" not in page
    assert "telegram-link" in page  # the card now offers linking

    settings_env(MEWDEX_TELEGRAM_BOT_TOKEN=ENV_TOKEN)
    assert telegram.token() == ENV_TOKEN
    assert _telegram(page_client)["token_source"] == "environment"
    page = page_client.get("/settings/channels").text
    assert "data-token-env" in page and "MEWDEX_TELEGRAM_BOT_TOKEN" in page and ENV_TOKEN not in page
    again = page_client.put("/api/v1/channels/telegram/token", json={"token": PAGE_TOKEN})
    assert again.json()["source"] == "environment" and PAGE_TOKEN not in again.text

    settings_env(MEWDEX_TELEGRAM_BOT_TOKEN="")
    assert telegram.token() == PAGE_TOKEN
    removed = page_client.put("/api/v1/channels/telegram/token", json={"token": ""})
    assert removed.json() == {"configured": False, "source": None, "hint": ""}
    with pytest.raises(ChannelError) as caught:
        telegram.token()
    assert caught.value.code == "channel_not_configured"
    assert 'data-telegram-state="not-configured"' in page_client.get("/settings/channels").text


LOOPBACK_CASES = [
    ("", True, False),  # no public URL: WeCom cannot call back; Telegram polls (no callback needed)
    ("http://127.0.0.1:8275", True, True),  # Telegram's webhook mode at a loopback URL
    ("http://localhost:8275/", True, True),
    ("https://memes.example.org", False, False),
]


def test_loopback_public_url_warns_on_the_cards_that_need_a_callback(page_client, settings_env):
    for public_url, wecom_warned, telegram_warned in LOOPBACK_CASES:
        settings_env(MEWDEX_PUBLIC_URL=public_url)
        page = page_client.get("/settings/channels")
        assert page.status_code == 200
        # Discord needs its callback as WeCom does: its card warns before an application is connected
        # too (issue 46: a newcomer read the README's promise and saw no warning on the empty card).
        expected = {"wecom": wecom_warned, "telegram": telegram_warned, "discord": wecom_warned}
        assert _warnings(page.text) == expected, public_url
        if wecom_warned:
            assert "MEWDEX_PUBLIC_URL" in page.text


def _warnings(html: str) -> dict[str, bool]:
    from html.parser import HTMLParser

    found = {"wecom": False, "telegram": False, "discord": False}

    class Walk(HTMLParser):
        card: str | None = None

        def handle_starttag(self, tag, attrs):
            a = dict(attrs)
            if tag == "section" and "data-channel" in a:
                self.card = a["data-channel"]
            if a.get("data-warning") == "public-url" and self.card in found:
                found[self.card] = True

    Walk().feed(html)
    return found


def test_guides_are_pages_with_raw_html_escaped_and_a_404_page_without_docs(page_client, monkeypatch, tmp_path):
    from mewdex.channels import registry
    from mewdex.channels import routes as channel_routes

    for name in (c.name for c in registry.channels()):
        page = page_client.get(f"/help/channels/{name}")
        assert page.status_code == 200 and page.headers["content-type"].startswith("text/html"), name
        assert 'class="guide"' in page.text and "<h1>" in page.text and "<header" in page.text
    assert "BotFather" in page_client.get("/help/channels/telegram").text
    unknown = page_client.get("/help/channels/../../README")
    assert unknown.status_code == 404
    nope = page_client.get("/help/channels/myspace")  # no such channel
    assert nope.status_code == 404 and nope.headers["content-type"].startswith("text/html")
    assert "data-guide-missing" in nope.text

    (tmp_path / "webhook.md").write_text(
        "# Hook\n\n<script>alert(1)</script>\n\n<b onclick=x()>bold</b> see [QQ](onebot.md)\n"
    )
    monkeypatch.setattr(channel_routes, "guides_dir", lambda: tmp_path)
    page = page_client.get("/help/channels/webhook")
    assert page.status_code == 200
    assert "<script>alert(1)" not in page.text and "&lt;script&gt;alert(1)&lt;/script&gt;" in page.text
    assert "<b onclick" not in page.text
    assert 'href="onebot"' in page.text  # a sibling guide's link points at its page (relative: under any base path)
    missing = page_client.get("/help/channels/telegram")  # not in the (monkeypatched) guides folder
    assert missing.status_code == 404 and "comes without a set-up guide" in missing.text


def test_a_channel_that_binds_by_a_code_gets_the_generic_card_and_its_code(page_client, scope, sessions, monkeypatch):
    """A channel package whose adapter says ``binds_by_code`` needs no card or route of its own: the
    page shows the generic block, ``POST /api/v1/channels/<name>/code`` gives a code that binds to the
    caller; a channel that binds another way, one not set up and an unknown one are refused."""
    from mewdex.channels import bindings, registry
    from mewdex.channels.base import Adapter
    from mewdex.channels.registry import Channel

    class CodeChat(Adapter):  # every other hook is the base adapter's default
        name, min_send_interval = "codechat", 0.0
        binds_by_code, ready = True, True

        def configured(self) -> bool:
            return self.ready

    chat = CodeChat()
    monkeypatch.setitem(registry.ADAPTERS, "codechat", chat)
    builtin = registry.channels
    monkeypatch.setattr(registry, "channels", lambda: [*builtin(), Channel(name="codechat", modules=())])

    page = page_client.get("/settings/channels").text
    card = page[page.index('id="channel-codechat"') :]
    card = card[: card.index("</section>")]
    assert 'data-action="bind-code"' in card and 'class="bind-code" hidden' in card
    listed = {c["name"]: c for c in page_client.get("/api/v1/channels").json()["channels"]}
    assert listed["codechat"]["bind_code"] is True and listed["telegram"]["bind_code"] is False

    made = page_client.post("/api/v1/channels/codechat/code")
    assert made.status_code == 201 and made.json()["expires_in"] == 15 * 60
    with sessions.begin() as session:
        assert bindings.redeem_bind_code(session, "codechat", made.json()["code"]).scope_id == scope.scope_id
    assert page_client.post("/api/v1/channels/telegram/code").json()["error"]["code"] == "channel_config_invalid"
    assert page_client.post("/api/v1/channels/nosuch/code").status_code == 404
    chat.ready = False
    refused = page_client.post("/api/v1/channels/codechat/code")
    assert refused.status_code == 409 and refused.json()["error"]["code"] == "channel_not_configured"
    page = page_client.get("/settings/channels").text
    card = page[page.index('id="channel-codechat"') :]
    assert 'data-action="bind-code"' not in card[: card.index("</section>")]


PLUGIN_CHANNEL = '''
"""A third-party channel (a test's plugin module): an adapter and a declared card, nothing else."""
from mewdex.channels.base import Adapter
from mewdex.channels.card import Done, Field, Fill, Form, Reveal, Text
from mewdex.channels.registry import Channel, declare, register_adapter


class Parrot(Adapter):
    name, min_send_interval = "{name}", 0.0


register_adapter(Parrot())
CHANNEL = declare(Channel(
    name="{name}",
    modules=(),
    card=(
        Text(("channels.code.note",), marker="data-parrot-help"),
        Form("parrot-room", "PUT", "/api/v1/channels/{{channel}}/room",
             (Field("room", "channels.webhook.url", "url", required=True, max_length=300, blank="null"),),
             "channels.webhook.save", Done(reveal="parrot-done")),
        Reveal("parrot-done", (Fill("room"),)),
        Text(("channels.code.not_configured",), when=("!configured",), marker="data-never"),
    ),
))
'''


def test_a_channel_from_a_plugin_is_listed_with_its_card_from_its_schema(
    page_client, settings_env, tmp_path, monkeypatch
):
    """A channel that comes in through a plugin (here ``MEWDEX_TASK_MODULES``, the entry points' path)
    is listed by ``GET /api/v1/channels`` and gets the generic card its declared schema says."""
    import sys
    import uuid

    from mewdex import hooks
    from mewdex.channels import registry

    name = f"parrot{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{name}_plugin.py").write_text(PLUGIN_CHANNEL.format(name=name), encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    settings_env(MEWDEX_TASK_MODULES=f"{name}_plugin")
    try:
        listed = [c["name"] for c in page_client.get("/api/v1/channels").json()["channels"]]
        built_in = [p.rsplit(".", 1)[-1] for p in registry.packages()]
        assert listed[-1] == name and listed[: len(built_in)] == built_in
        page = page_client.get("/settings/channels").text
        card = page[page.index(f'id="channel-{name}"') :]
        card = card[: card.index("</section>")]
        assert "data-parrot-help" in card and "data-never" not in card
        assert f'data-path="/api/v1/channels/{name}/room"' in card and 'data-channel-form="parrot-room"' in card
        assert '<input name="room" type="url" data-blank="null" required maxlength="300"' in card
        assert '<div class="parrot-done" hidden>' in card and 'data-fill="room"' in card
    finally:
        registry._plugins.pop(name, None)
        hooks.withdraw("channel_adapters", name)
        hooks.withdraw("capabilities", name)
        sys.modules.pop(f"{name}_plugin", None)
