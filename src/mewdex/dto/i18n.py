"""Message catalogues (``dto/locales/{en,zh}.json``, package data) and :func:`translate`: every
string a person reads, in the web UI and below it (chat replies of the channels, the assistant's
own words), is a key here in both languages. A package that brings its own words (a channel
package's ``locales/``) adds them with :func:`add_messages`.

A low layer (standard library only), so channels and the assistant translate without the web
stack. Choosing the language is the caller's: the web layer negotiates it per request
(:mod:`mewdex.web.i18n`), a channel reply uses the language of the message it answers, the
assistant the page's language or the message's.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path

LOCALES = ("en", "zh")
DEFAULT_LOCALE = "en"
_DIR = Path(__file__).parent / "locales"


#: Directories of ``{locale}.json`` catalogues added to the core one (:func:`add_messages`).
_added: list[Path] = []


def add_messages(directory: Path) -> None:
    """Add the catalogues ``directory/{en,zh}.json`` (a package's own words) to every locale's.

    Raises ``FileNotFoundError`` when a locale's file is missing and ``ValueError`` when a key is
    already in the catalogue (a package never rewords another's). Adding the same directory twice
    does nothing."""
    if directory in _added:
        return
    for locale in LOCALES:
        clash = set(_read(directory / f"{locale}.json")) & set(catalogue(locale))
        if clash:
            raise ValueError(f"{directory}: keys already in the catalogue: {sorted(clash)}")
    _added.append(directory)
    catalogue.cache_clear()


def _read(path: Path) -> dict[str, str]:
    return json.loads(path.read_text(encoding="utf-8"))


@cache
def catalogue(locale: str) -> dict[str, str]:
    """The flat ``{key: message}`` catalogue of ``locale`` (one of :data:`LOCALES`; raises
    ``FileNotFoundError`` for another): the core file, then each :func:`add_messages` directory's."""
    merged = _read(_DIR / f"{locale}.json")
    for directory in _added:
        merged.update(_read(directory / f"{locale}.json"))
    return merged


def translate(locale: str, key: str, /, **values: object) -> str:
    """The message ``key`` in ``locale``, formatted with ``values`` (``str.format`` placeholders).

    ``n=1`` picks the singular ``<key>.one`` where the catalogue has one. A missing message falls
    back to English, then to the key's last segment (a dynamic key such as ``task_type.<new type>``
    still shows the raw value rather than nothing). A locale outside :data:`LOCALES` reads as English.
    """
    locale = locale if locale in LOCALES else DEFAULT_LOCALE
    if values.get("n") == 1:
        key = key + ".one" if (key + ".one") in catalogue(DEFAULT_LOCALE) else key
    message = catalogue(locale).get(key) or catalogue(DEFAULT_LOCALE).get(key)
    if message is None:
        return key.rsplit(".", 1)[-1]
    return message.format(**values) if values else message


def error_text(locale: str, error: dict | None) -> str:
    """Words for a stored ``{"code", "message"}`` error: the catalogue's ``error.<code>``, else its
    message, else the code; ``""`` for no error."""
    if not error:
        return ""
    locale = locale if locale in LOCALES else DEFAULT_LOCALE
    code = str(error.get("code") or "")
    return (
        catalogue(locale).get(f"error.{code}")
        or catalogue(DEFAULT_LOCALE).get(f"error.{code}")
        or error.get("message")
        or code
    )
