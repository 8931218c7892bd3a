"""The message catalogues (``mewdex.dto.i18n``): complete in both languages, used for every string of
the pages and for what the channels and the assistant say; and the page language picked from the
cookie or Accept-Language (``mewdex.web.i18n``)."""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import get_args

import pytest
from starlette.requests import Request

import mewdex.assistant  # noqa: F401 - as backups
import mewdex.backups  # noqa: F401 - its words join the core ones when it is imported, as in the app
import mewdex.providers.connectors  # noqa: F401 - as backups
import mewdex.schedules  # noqa: F401 - as backups
from mewdex.channels import registry
from mewdex.dto import i18n
from mewdex.dto.media import MediaKind
from mewdex.web import i18n as web_i18n

registry.load()  # the channel packages' own catalogues join the core ones, as in the app

SRC = Path(i18n.__file__).parents[1]
WEB = SRC / "web"
TEMPLATES = sorted((WEB / "templates").rglob("*.html")) + sorted((SRC / "channels").rglob("*.html"))
TEMPLATES += sorted((SRC / "backups").rglob("*.html"))  # a capability package's card
TEMPLATES += sorted((SRC / "schedules").rglob("*.html"))  # and pages
TEMPLATES += sorted((SRC / "providers" / "connectors").rglob("*.html")) + sorted((SRC / "assistant").rglob("*.html"))
CJK = re.compile(r"[\u3000-\u303f\u4e00-\u9fff\uff00-\uffef]")


def test_catalogues_have_the_same_keys_and_no_empty_message():
    en, zh = i18n.catalogue("en"), i18n.catalogue("zh")
    assert set(en) == set(zh)
    assert all(v.strip() for v in [*en.values(), *zh.values()])
    # Placeholders match, so a formatted message never fails in one language only.
    for key in en:
        assert set(re.findall(r"\{(\w+)\}", en[key])) == set(re.findall(r"\{(\w+)\}", zh[key])), key


def test_a_channel_package_brings_its_own_words_and_never_rewords_the_core(tmp_path):
    # Discord's words live in its package (channels/discord/locales), in both languages once loaded.
    assert "channels.discord.help" not in i18n._read(SRC / "dto" / "locales" / "en.json")
    assert i18n.translate("zh", "channels.name.discord") == "Discord"
    assert i18n.translate("en", "bot.discord.none", query="x") != i18n.translate("zh", "bot.discord.none", query="x")
    for lang in i18n.LOCALES:
        (tmp_path / f"{lang}.json").write_text('{"nav.search": "reworded"}', encoding="utf-8")
    with pytest.raises(ValueError, match="nav.search"):
        i18n.add_messages(tmp_path)
    assert i18n.catalogue("en")["nav.search"] != "reworded"


def test_every_literal_key_in_templates_and_scripts_exists():
    keys = set(i18n.catalogue("en"))
    used = set()
    for path in TEMPLATES:
        used |= set(re.findall(r"""_\(\s*["']([a-z_.]+)["']""", path.read_text()))
    # Every page script, the shell's and the capability packages' (channels.js, schedules.js, …):
    # t("key") and any "js.…" literal (a key chosen by a condition).
    for path in sorted(SRC.rglob("static/*.js")):
        text = path.read_text()
        used |= set(re.findall(r"""\bt\(\s*["']([a-z_.]+)["']""", text))
        used |= set(re.findall(r"""["'`](js\.[a-z_.]+)["'`]""", text))
    assert {"js.copied", "js.channel_revoked", "js.channel_autosave_on", "js.sched_deleted"} <= used
    assert sorted(k for k in used - keys if not k.endswith((".", "_"))) == []  # "prefix." ~ value: see below


def test_each_catalogue_file_has_the_same_keys_in_both_languages():
    """The core's and every package's own (a key in one language of a package only would hide behind the
    merged catalogues)."""
    assert len(i18n._added) >= 8, "the packages' catalogues are loaded"
    for directory in [SRC / "dto" / "locales", *i18n._added]:
        en, zh = (i18n._read(directory / f"{lang}.json") for lang in i18n.LOCALES)
        assert sorted(set(en) ^ set(zh)) == [], directory


def test_the_channel_frameworks_words_are_its_own_and_load_with_the_package():
    """``channels/locales/`` holds the Channels page's, its cards', guides' and scripts' words and what a
    chat is told; importing ``mewdex.channels`` (as every process that uses one of its modules does)
    adds them, without :func:`registry.load`."""
    core = i18n._read(SRC / "dto" / "locales" / "en.json")
    framework = i18n._read(SRC / "channels" / "locales" / "en.json")
    assert [k for k in core if k.startswith(("channels.", "js.channel_", "error.channel_", "bot."))] == []
    assert {"channels.title", "nav.channels", "js.channel_revoked", "bot.no_answer", "lane.channel"} <= set(framework)
    wanted = [(lang, key) for lang in i18n.LOCALES for key in ("channels.title", "bot.no_answer", "nav.channels")]
    probe = (
        "import json, sys, mewdex.channels; from mewdex.dto.i18n import translate; "
        "print(json.dumps([translate(lang, key) for lang, key in json.loads(sys.argv[1])]))"
    )
    env = {**os.environ, "PYTHONPATH": str(SRC.parent)}  # this checkout's code
    run = subprocess.run([sys.executable, "-c", probe, json.dumps(wanted)], capture_output=True, text=True, env=env)
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout) == [i18n.catalogue(lang)[key] for lang, key in wanted]
    assert i18n.catalogue("zh")["channels.title"] != i18n.catalogue("en")["channels.title"]


def test_dynamic_keys_used_by_templates_exist():
    en = i18n.catalogue("en")
    for prefix, values in {
        "status.": [
            "queued",
            "running",
            "succeeded",
            "failed",
            "blocked",
            "unknown_execution",
            "skipped",
            "created",
            "duplicate",
            "rejected",
            "none",
        ],
        "stage.": ["visual", "agent", "auto_rename", "text_embedding"],
        "lane.": ["visual", "agent", "default", "embedding"],
        "library.sort.": ["newest", "oldest", "name", "updated"],
        "library.state.": ["ready", "processing", "failed"],
        "nav.": ["search", "library", "upload", "collections", "tasks"],
        "error.": ["image_corrupt", "unsupported_media_type", "image_too_large", "blob_missing", "unsafe_path"],
        "meme.kind.": get_args(MediaKind),  # a card's and a meme page's badge
        "meme.frames.": get_args(MediaKind),
    }.items():
        for value in values:
            assert prefix + value in en, prefix + value


@pytest.mark.parametrize("path", TEMPLATES, ids=lambda p: p.name)
def test_templates_hold_no_hard_coded_words(path):
    """Outside Jinja expressions, tags and attribute values no letters remain (symbols like ›, ✕, × are fine)."""
    text = path.read_text()
    text = re.sub(r"\{#.*?#\}|\{\{.*?\}\}|\{%.*?%\}", " ", text, flags=re.S)
    text = re.sub(r"<script\b.*?</script>|<style\b.*?</style>|<svg\b.*?</svg>", " ", text, flags=re.S)
    text = re.sub(r"<[^>]*>", " ", text, flags=re.S)
    words = [w for w in re.findall(r"[^\W\d_]+", text) if w not in {"mewdex"}]
    assert words == [], f"hard-coded text in {path.name}: {words[:10]}"


def _request(headers: dict[str, str]) -> Request:
    raw = [(k.lower().encode(), v.encode()) for k, v in headers.items()]
    return Request({"type": "http", "method": "GET", "path": "/", "headers": raw, "query_string": b""})


@pytest.mark.parametrize(
    "header,expected",
    [
        ("zh-CN,zh;q=0.9,en;q=0.8", "zh"),
        ("en-US,en;q=0.9,zh-CN;q=0.8", "en"),
        ("fr-FR,zh-TW;q=0.5", "zh"),
        ("de-DE", "en"),
        ("", "en"),
        ("en;q=0.2, zh;q=0.7", "zh"),
        ("zh;q=0, en", "en"),
        ("zh;q=abc, en", "en"),
    ],
)
def test_language_from_accept_language(header, expected):
    assert web_i18n.request_locale(_request({"Accept-Language": header})) == expected


def test_cookie_wins_over_accept_language_and_bad_cookie_is_ignored():
    assert web_i18n.request_locale(_request({"Accept-Language": "zh-CN", "Cookie": "mewdex_lang=en"})) == "en"
    assert web_i18n.request_locale(_request({"Accept-Language": "zh-CN", "Cookie": "mewdex_lang=xx"})) == "zh"


def test_translate_formats_and_falls_back():
    assert i18n.translate("zh", "library.count", n=3) == "共 3 个表情包"
    assert i18n.translate("en", "task_type.some_new_type") == "some_new_type"
    assert (
        i18n.error_text("zh", {"code": "image_corrupt", "message": "x"}) == i18n.catalogue("zh")["error.image_corrupt"]
    )
    assert i18n.error_text("en", {"code": "weird_code", "message": "it broke"}) == "it broke"


def test_no_message_shows_markdown_backticks():
    """Pages print messages as text: a backtick would show literally (write “…” or <code> in the template)."""
    for locale in i18n.LOCALES:
        literal = [k for k, v in i18n.catalogue(locale).items() if "`" in v]
        assert literal == [], (locale, literal)


def test_the_pages_use_the_same_catalogues():
    assert web_i18n.translate is i18n.translate and web_i18n.catalogue is i18n.catalogue
    assert web_i18n.client_messages("zh")["js.copied"] == i18n.catalogue("zh")["js.copied"]
    # a package's script words reach its page too (the Channels page's channels.js)
    assert web_i18n.client_messages("zh")["js.channel_revoked"] == i18n.catalogue("zh")["js.channel_revoked"]
    assert i18n.translate("xx", "assistant.first") == i18n.catalogue("en")["assistant.first"], "unknown: English"


def test_every_literal_key_translated_below_the_web_layer_exists():
    """``translate(lang, "key")`` in the channels, the assistant and the other layers under the web
    (with the channels' own catalogues, which :func:`mewdex.channels.registry.load` adds)."""
    from mewdex.channels.registry import load

    load()
    keys, used = set(i18n.catalogue("en")), set()
    for path in SRC.rglob("*.py"):
        if WEB not in path.parents:
            used |= set(re.findall(r"""\btranslate\(\s*[\w.()"' ]+,\s*["']([a-z_.]+)["']""", path.read_text()))
    assert {"bot.bind.confirm", "bot.save.owner_only", "assistant.capped"} <= used, "the scan finds the calls"
    assert sorted(k for k in used - keys if not k.endswith(".")) == []  # "prefix." + value: tested below


def test_what_channels_and_the_assistant_say_comes_from_both_catalogues():
    from mewdex.assistant import agent, retrieval
    from mewdex.channels.clawbot import adapter as clawbot
    from mewdex.channels.registry import adapter, load

    load()
    en, zh = i18n.catalogue("en"), i18n.catalogue("zh")
    for name in ("telegram", "onebot", "wecom", "clawbot"):
        assert adapter(name).bind_help("en") == en[f"bot.bind_help.{name}"]
        assert adapter(name).bind_help("zh") == zh[f"bot.bind_help.{name}"]
    for state in ("no_context", "expired", "quota"):
        assert clawbot.window_text(state) != clawbot.window_text(state, "zh")
    assert "20" in clawbot.window_text("expired", "zh") and "10" in clawbot.window_text("quota")
    notes = {
        (code, lang, search): agent.fallback_note(code, lang, search=search)
        for code in ("quota_exceeded", "provider_failed")
        for lang in i18n.LOCALES
        for search in (True, False)
    }
    assert len(set(notes.values())) == len(notes) == 8
    assert all(bool(CJK.search(note)) == (lang == "zh") for (_c, lang, _s), note in notes.items())
    # retrieval's t("key") are "assistant.<key>"
    for key in re.findall(r"""\bt\(["'](\w+)["']""", Path(retrieval.__file__).read_text()):
        assert f"assistant.{key}" in en, key


# CJK literals in channels and the assistant that are not words said to a person: what a message is
# parsed for (a whole module: assistant/query.py), the title's cleanup, protocol values.
PARSING_MODULES = {"assistant/query.py"}  # follow-ups and filters in the user's words
PARSING = {
    "标题:",  # the auto-title's cleanup
    "标题：",
    "。.",
    " \"'“”‘’「」『』*#",
    "是",  # a YES in the chat
    "是的",
    "确认",
    ".!！。",
    "[动画表情]",  # QQ's own summary of a sticker
    "收",  # the words that save a meme from a chat (channels/saving.py)
    "存",
    "自动收 开",
    "自动收 关",
    "改字",  # the word that re-captions a meme in a chat (channels/captioning.py)
    "表情池",  # a chat's pool (channels/pool.py) and the words that turn it off
    "关",
    "关闭",
    "无",
    r"^\s*(?:/?bind\s+|绑定\s*)?([A-Za-z0-9_-]{32})\s*$",  # a WeCom bind code
}


def test_channels_and_the_assistant_hold_no_hard_coded_chinese_words():
    """Every sentence a chat or the assistant's reply shows is a catalogue key (docstrings aside)."""
    found = []
    for package in ("channels", "assistant"):
        for path in sorted((SRC / package).rglob("*.py")):
            rel, tree = path.relative_to(SRC).as_posix(), ast.parse(path.read_text())
            if rel in PARSING_MODULES:
                continue
            skip = {  # docstrings and prompts to the model
                id(node.body[0].value)
                for node in ast.walk(tree)
                if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
                and node.body
                and isinstance(node.body[0], ast.Expr)
            } | {
                id(node.value)
                for node in ast.walk(tree)
                if isinstance(node, ast.Assign)
                and any(isinstance(t, ast.Name) and t.id.endswith("PROMPT") for t in node.targets)
            }
            for node in ast.walk(tree):
                if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skip:
                    if CJK.search(node.value) and node.value not in PARSING:
                        found.append((rel, node.lineno, node.value[:40]))
    assert found == [], found


def _card_keys(blocks) -> set[str]:
    """Every catalogue key a declared card names (labels, helps, notes, summaries, toasts)."""
    from dataclasses import fields, is_dataclass

    found: set[str] = set()

    def walk(value, name=""):
        if is_dataclass(value):
            for f in fields(value):
                walk(getattr(value, f.name), f.name)
        elif isinstance(value, (tuple, list)):
            for item in value:
                walk(item, name)
        elif isinstance(value, dict):
            for item in value.values():
                walk(item, name if name == "choices" else "")
        elif isinstance(value, str) and re.fullmatch(r"(channels|js)\.[a-z_.]+[a-z_]", value) and name != "words":
            found.add(value)

    walk(tuple(blocks))
    return found


def test_every_key_a_declared_channel_card_names_exists_in_both_languages():
    keys = {key for c in registry.channels() for key in _card_keys(registry.card(c))}
    assert {"channels.telegram.token.title", "js.discord_connected", "channels.wecom.keep"} <= keys
    for lang in i18n.LOCALES:
        assert sorted(keys - set(i18n.catalogue(lang))) == [], lang
