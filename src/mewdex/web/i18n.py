"""Message catalogues of the web UI (``web/locales/{en,zh}.json``) and the request's language.

Every string a page shows comes from a catalogue: templates call ``_("key", name=value)``
(``str.format`` placeholders), and the page scripts get the ``js.*``, ``error.*``, ``status.*``
and ``stage.*`` keys as JSON. The language is the ``mewdex_lang`` cookie when set (the switch
in the header sets it), else the best match of ``Accept-Language``, else English.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path

from starlette.requests import Request

LOCALES = ("en", "zh")
DEFAULT_LOCALE = "en"
COOKIE = "mewdex_lang"
HTML_LANG = {"en": "en", "zh": "zh-CN"}
CLIENT_PREFIXES = ("js.", "error.", "status.", "stage.")
_DIR = Path(__file__).parent / "locales"


@cache
def catalogue(locale: str) -> dict[str, str]:
    """The flat ``{key: message}`` catalogue of ``locale`` (one of :data:`LOCALES`)."""
    return json.loads((_DIR / f"{locale}.json").read_text(encoding="utf-8"))


def translate(locale: str, key: str, /, **values: object) -> str:
    """The message ``key`` in ``locale``, formatted with ``values``.

    A missing message falls back to English, then to the key's last segment (a dynamic key such as
    ``task_type.<new type>`` still shows the raw value rather than nothing).
    """
    if values.get("n") == 1:  # singular form when the catalogue has one ("<key>.one")
        key = key + ".one" if (key + ".one") in catalogue(DEFAULT_LOCALE) else key
    message = catalogue(locale).get(key) or catalogue(DEFAULT_LOCALE).get(key)
    if message is None:
        return key.rsplit(".", 1)[-1]
    return message.format(**values) if values else message


def error_text(locale: str, error: dict | None) -> str:
    """Words for a stored ``{"code", "message"}`` error: the catalogue's ``error.<code>``, else its message, else
    the code."""
    if not error:
        return ""
    code = str(error.get("code") or "")
    return (
        catalogue(locale).get(f"error.{code}")
        or catalogue(DEFAULT_LOCALE).get(f"error.{code}")
        or error.get("message")
        or code
    )


def parse_accept_language(header: str | None) -> str | None:
    """The best supported locale of an ``Accept-Language`` header (q-values honoured), or None."""
    best: tuple[float, int, str] | None = None
    for index, part in enumerate((header or "").split(",")):
        tag, _, params = part.strip().partition(";")
        q = 1.0
        if params.strip().startswith("q="):
            try:
                q = float(params.strip()[2:])
            except ValueError:
                continue
        primary = tag.strip().lower().split("-")[0]
        if primary in LOCALES and q > 0 and (best is None or (q, -index) > (best[0], best[1])):
            best = (q, -index, primary)
    return best[2] if best else None


def request_locale(request: Request) -> str:
    """The cookie's locale when valid, else Accept-Language's best supported one, else English."""
    cookie = request.cookies.get(COOKIE)
    if cookie in LOCALES:
        return cookie
    return parse_accept_language(request.headers.get("accept-language")) or DEFAULT_LOCALE


def page_language(request: Request) -> str | None:
    """The language the page that sent ``request`` shows (the cookie's, else Accept-Language's best
    supported one), or None when the request names none (a script): the caller then decides."""
    cookie = request.cookies.get(COOKIE)
    if cookie in LOCALES:
        return cookie
    return parse_accept_language(request.headers.get("accept-language"))


def client_messages(locale: str) -> dict[str, str]:
    """The messages the page scripts need (``js.*``, ``error.*``, ``status.*``, ``stage.*``)."""
    merged = {**catalogue(DEFAULT_LOCALE), **catalogue(locale)}
    return {k: v for k, v in merged.items() if k.startswith(CLIENT_PREFIXES)}
