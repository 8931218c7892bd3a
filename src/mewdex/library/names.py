"""Name rules for memes: normalized extensions and safe display names.

A display name is what a person sees and edits; it is never a file path or a
dedupe key (blobs are stored under their content hash). :func:`normalize_display_name`
produces exactly the strings the ``memes`` CHECK constraint
``ck_memes_display_name_safe`` accepts (seed 000's rule, plus ``octet_length``
and ``.webp`` as in ``mewdex.db.models.library``):

* NFC, no ``/`` or ``\\``, no control characters (nor lone surrogates or bidi
  controls, which cannot be stored or would disguise the name);
* no leading/trailing whitespace, spaces or dots (``btrim(display_name, ' .')``);
* no trailing image extension (``.png .jpg .jpeg .gif .webp``, any case);
* at most 255 UTF-8 bytes (hence at most 255 characters), cut on a grapheme
  cluster boundary so emoji ZWJ sequences, flags and combining marks stay whole;
* not empty and not ``.``, ``..``, ``.staging``, ``.quarantine``.

Grapheme clusters are found with an approximation of Unicode UAX #29 built on
:mod:`unicodedata` (the ``regex`` module is not a dependency): combining marks,
variation selectors, emoji modifiers and tags, ZWJ emoji sequences, regional
indicator pairs, Hangul jamo, prepended marks and the common Indic virama
conjuncts are kept together.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterator

ALLOWED_EXTENSIONS = (".png", ".jpg", ".gif", ".webp")
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".gif", ".webp")
RESERVED_NAMES = frozenset({".", "..", ".staging", ".quarantine"})
MAX_NAME_BYTES = 255
MAX_NAME_CHARS = 255
MAX_INPUT_CHARS = 16_384
FALLBACK_NAME = "image"

_SEPARATORS = {"/": "_", "\\": "_"}
_BREAKING_SPACES = frozenset("\t\n\v\f\r\x1c\x1d\x1e\x1f\x85\u2028\u2029")
_BIDI_CONTROLS = frozenset("\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")
_WHITESPACE_RUN = re.compile(r"\s+")
_FILE_SUFFIX = re.compile(r"\.(?=[A-Za-z0-9]{0,4}[A-Za-z])[A-Za-z0-9]{1,5}\Z")

_ZWJ = 0x200D
_VIRAMAS = frozenset({0x094D, 0x09CD, 0x0ACD, 0x0B4D, 0x0C4D, 0x0D4D})
_PREPEND = frozenset({*range(0x0600, 0x0606), 0x06DD, 0x070F, 0x0890, 0x0891, 0x08E2, 0x0D4E, 0x110BD, 0x110CD})


def normalize_extension(value: object) -> str:
    """Return the canonical extension for an image type.

    Args:
        value: e.g. ``"PNG"``, ``".Jpeg"``, ``"webp"``.
    Returns:
        one of ``.png .jpg .gif .webp`` (lower case, leading dot, ``.jpeg`` → ``.jpg``).
    Raises:
        ValueError("extension_invalid"): anything else, including non-strings.
    """
    if not isinstance(value, str):
        raise ValueError("extension_invalid")
    extension = value.strip().lower()
    if not extension.startswith("."):
        extension = "." + extension
    if extension == ".jpeg":
        extension = ".jpg"
    if extension not in ALLOWED_EXTENSIONS:
        raise ValueError("extension_invalid")
    return extension


def normalize_display_name(value: object) -> str:
    """Return the safe, storable form of a user-visible meme name.

    Args:
        value: any string (a typed name, a file stem, an analyzer's title).
    Returns:
        a string satisfying ``ck_memes_display_name_safe`` (see module docstring);
        applying the function again returns it unchanged.
    Input beyond ``MAX_INPUT_CHARS`` code points is ignored (bounds the work).

    Raises:
        ValueError("display_name_invalid"): not a string, or nothing is left.
    """
    if not isinstance(value, str):
        raise ValueError("display_name_invalid")
    name = value[:MAX_INPUT_CHARS]
    while True:
        previous = name
        name = _truncate(_trim(_strip_image_suffixes(_clean(name))))
        if name == previous:
            break
    if not name or name in RESERVED_NAMES:
        raise ValueError("display_name_invalid")
    return name


def display_name_from_filename(filename: str) -> str:
    """Derive a display name from an uploaded or imported file name.

    Takes the last path component (``/`` or ``\\``), drops one file suffix that
    looks like an extension (``.png``, ``.txt``; not ``. Bean`` or ``.5``) and
    applies :func:`normalize_display_name`.

    Returns:
        the display name, or ``"image"`` when nothing usable is left.
    """
    base = re.split(r"[/\\]", filename)[-1] if isinstance(filename, str) else ""
    try:
        return normalize_display_name(_FILE_SUFFIX.sub("", base))
    except ValueError:
        return FALLBACK_NAME


def is_valid_display_name(name: str) -> bool:
    """Mirror of the database CHECK ``ck_memes_display_name_safe`` (True if it would pass).

    That is seed 000's constraint plus ``octet_length <= 255`` and ``.webp``.
    """
    lowered = _pg_lower(name)
    return (
        name != ""
        and len(name) <= MAX_NAME_CHARS
        and len(name.encode("utf-8", "surrogatepass")) <= MAX_NAME_BYTES
        and name == name.strip(" .")
        and "/" not in name
        and "\\" not in name
        and not any(unicodedata.category(char) in ("Cc", "Cs") or char in "\u2028\u2029" for char in name)
        and name not in RESERVED_NAMES
        and not lowered.endswith(IMAGE_SUFFIXES)
    )


def _clean(name: str) -> str:
    """NFC; separators → ``_``; line breaks/tabs → space; other controls removed."""
    name = unicodedata.normalize("NFC", name)
    out = []
    for char in name:
        if char in _SEPARATORS:
            out.append(_SEPARATORS[char])
        elif char in _BREAKING_SPACES:
            out.append(" ")
        elif char not in _BIDI_CONTROLS and unicodedata.category(char) not in ("Cc", "Cs"):
            out.append(char)
    return _WHITESPACE_RUN.sub(" ", "".join(out))


def _trim(name: str) -> str:
    """Strip whitespace, spaces and dots from both ends until none are left."""
    while True:
        trimmed = name.strip().strip(" .")
        if trimmed == name:
            return name
        name = trimmed


def _rtrim(name: str) -> str:
    """Strip whitespace, spaces and dots from the end until none are left."""
    while True:
        trimmed = name.rstrip().rstrip(" .")
        if trimmed == name:
            return name
        name = trimmed


def _strip_image_suffixes(name: str) -> str:
    """Remove trailing image extensions (any case, repeated) with the dots and
    spaces around them; ``.png`` alone leaves nothing."""
    while True:
        name = _rtrim(name)
        lowered = _pg_lower(name)
        suffix = next((s for s in IMAGE_SUFFIXES if lowered.endswith(s)), None)
        if suffix is None:
            return name
        name = name[: -len(suffix)]


def _pg_lower(name: str) -> str:
    """Lower-case one code point at a time, as PostgreSQL's ``lower()`` does
    (``İ`` → ``i``, where Python's ``str.lower`` would add a combining dot)."""
    return "".join(char.lower()[0] for char in name)


def _truncate(name: str) -> str:
    """Cut to ``MAX_NAME_BYTES`` UTF-8 bytes and ``MAX_NAME_CHARS`` code points
    on a grapheme boundary; a single over-long cluster is cut by code point."""
    if len(name.encode("utf-8")) <= MAX_NAME_BYTES and len(name) <= MAX_NAME_CHARS:
        return name
    kept: list[str] = []
    size = chars = 0
    for cluster in _graphemes(name):
        cluster_size = len(cluster.encode("utf-8"))
        if size + cluster_size > MAX_NAME_BYTES or chars + len(cluster) > MAX_NAME_CHARS:
            break
        kept.append(cluster)
        size += cluster_size
        chars += len(cluster)
    if kept:
        return "".join(kept)
    return _truncate_code_points(name)


def _truncate_code_points(name: str) -> str:
    out = name[:MAX_NAME_CHARS]
    while len(out.encode("utf-8")) > MAX_NAME_BYTES:
        out = out[:-1]
    return out


def _graphemes(text: str) -> Iterator[str]:
    """Split ``text`` into (approximate UAX #29 extended) grapheme clusters."""
    start = 0
    for index in range(1, len(text) + 1):
        if index == len(text) or not _joins(text, start, index):
            yield text[start:index]
            start = index


def _joins(text: str, start: int, index: int) -> bool:
    """True when ``text[index]`` continues the cluster ``text[start:index]``."""
    prev, cur = ord(text[index - 1]), ord(text[index])
    if _is_extend(cur) or cur == _ZWJ or prev in _PREPEND:
        return True
    if _hangul_joins(prev, cur):
        return True
    if prev == _ZWJ and _is_pictographic(cur):
        return any(_is_pictographic(ord(char)) for char in text[start:index])
    if _is_regional(prev) and _is_regional(cur):
        return sum(1 for char in text[start:index] if _is_regional(ord(char))) % 2 == 1
    return prev in _VIRAMAS and unicodedata.category(chr(cur)) == "Lo" and (prev >> 7) == (cur >> 7)


def _is_extend(cp: int) -> bool:
    """Grapheme_Extend, SpacingMark, ZWNJ, variation selectors, emoji modifiers and tags."""
    return (
        unicodedata.category(chr(cp)) in ("Mn", "Me", "Mc")
        or cp == 0x200C
        or 0xFE00 <= cp <= 0xFE0F
        or 0x1F3FB <= cp <= 0x1F3FF
        or 0xE0020 <= cp <= 0xE007F
        or 0xE0100 <= cp <= 0xE01EF
        or 0xFF9E <= cp <= 0xFF9F
    )


def _is_pictographic(cp: int) -> bool:
    """Approximate Extended_Pictographic: emoji planes and symbol characters."""
    return 0x1F000 <= cp <= 0x1FAFF or (cp >= 0x2000 and unicodedata.category(chr(cp)) == "So")


def _is_regional(cp: int) -> bool:
    return 0x1F1E6 <= cp <= 0x1F1FF


def _hangul_joins(prev: int, cur: int) -> bool:
    """UAX #29 rules GB6-GB8 for conjoining jamo and precomposed syllables."""
    kind_prev, kind_cur = _hangul_kind(prev), _hangul_kind(cur)
    if kind_prev == "L":
        return kind_cur in ("L", "V", "LV", "LVT")
    if kind_prev in ("LV", "V"):
        return kind_cur in ("V", "T")
    if kind_prev in ("LVT", "T"):
        return kind_cur == "T"
    return False


def _hangul_kind(cp: int) -> str | None:
    if 0x1100 <= cp <= 0x115F or 0xA960 <= cp <= 0xA97C:
        return "L"
    if 0x1160 <= cp <= 0x11A7 or 0xD7B0 <= cp <= 0xD7C6:
        return "V"
    if 0x11A8 <= cp <= 0x11FF or 0xD7CB <= cp <= 0xD7FB:
        return "T"
    if 0xAC00 <= cp <= 0xD7A3:
        return "LV" if (cp - 0xAC00) % 28 == 0 else "LVT"
    return None
