"""The request's language, and what the pages need of the message catalogues.

The catalogues and :func:`~mewdex.dto.i18n.translate` live in :mod:`mewdex.dto.i18n` (below the
web layer, so the channels and the assistant use them too); they are re-exported here for the
pages. Every string a page shows comes from a catalogue: templates call ``_("key", name=value)``
(``str.format`` placeholders), and the page scripts get the ``js.*``, ``error.*``, ``status.*``
and ``stage.*`` keys as JSON. The language is the ``mewdex_lang`` cookie when set (the switch in
the header and signing in with an account's language set it), else the best match of
``Accept-Language``, else English.
"""

from __future__ import annotations

from starlette.requests import Request

from mewdex.dto.i18n import DEFAULT_LOCALE, LOCALES, catalogue, error_text, translate

__all__ = [
    "CLIENT_PREFIXES",
    "COOKIE",
    "DEFAULT_LOCALE",
    "HTML_LANG",
    "LOCALES",
    "catalogue",
    "client_messages",
    "error_text",
    "page_language",
    "parse_accept_language",
    "request_locale",
    "translate",
]

COOKIE = "mewdex_lang"
HTML_LANG = {"en": "en", "zh": "zh-CN"}
CLIENT_PREFIXES = ("js.", "error.", "status.", "stage.")


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
