"""The web UI's message catalogues: complete in both languages, used for every string, and the
language picked from the cookie or Accept-Language."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from starlette.requests import Request

from mewdex.web import i18n

WEB = Path(i18n.__file__).parent
TEMPLATES = sorted((WEB / "templates").rglob("*.html"))


def test_catalogues_have_the_same_keys_and_no_empty_message():
    en, zh = i18n.catalogue("en"), i18n.catalogue("zh")
    assert set(en) == set(zh)
    assert all(v.strip() for v in [*en.values(), *zh.values()])
    # Placeholders match, so a formatted message never fails in one language only.
    for key in en:
        assert set(re.findall(r"\{(\w+)\}", en[key])) == set(re.findall(r"\{(\w+)\}", zh[key])), key


def test_every_literal_key_in_templates_and_scripts_exists():
    keys = set(i18n.catalogue("en"))
    used = set()
    for path in TEMPLATES:
        used |= set(re.findall(r"""_\(\s*["']([a-z_.]+)["']""", path.read_text()))
    used |= set(re.findall(r"""\bt\(\s*["']([a-z_.]+)["']""", (WEB / "static" / "app.js").read_text()))
    assert used, "no keys found"
    assert sorted(k for k in used - keys if not k.endswith(".")) == []  # "prefix." ~ value: see below


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
    assert i18n.request_locale(_request({"Accept-Language": header})) == expected


def test_cookie_wins_over_accept_language_and_bad_cookie_is_ignored():
    assert i18n.request_locale(_request({"Accept-Language": "zh-CN", "Cookie": "mewdex_lang=en"})) == "en"
    assert i18n.request_locale(_request({"Accept-Language": "zh-CN", "Cookie": "mewdex_lang=xx"})) == "zh"


def test_translate_formats_and_falls_back():
    assert i18n.translate("zh", "library.count", n=3) == "共 3 个表情包"
    assert i18n.translate("en", "task_type.some_new_type") == "some_new_type"
    assert (
        i18n.error_text("zh", {"code": "image_corrupt", "message": "x"}) == i18n.catalogue("zh")["error.image_corrupt"]
    )
    assert i18n.error_text("en", {"code": "weird_code", "message": "it broke"}) == "it broke"


def test_no_message_shows_markdown_backticks():
    """Pages print messages as text: a backtick would show literally (write “…” or <code> in the template)."""
    from mewdex.web import i18n

    for locale in i18n.LOCALES:
        literal = [k for k, v in i18n.catalogue(locale).items() if "`" in v]
        assert literal == [], (locale, literal)
