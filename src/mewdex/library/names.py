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

Grapheme clusters are Unicode UAX #29 extended clusters from the ``regex``
module's ``\\X``.
"""

from __future__ import annotations

import re
import unicodedata

import regex

# The one name rule lives below the library (accounts use it too); re-exported here for name code.
from mewdex.dto.media import EXTENSIONS
from mewdex.library import generic_words
from mewdex.platform.errors import _KEPT_FORMAT
from mewdex.platform.errors import strip_format_characters as strip_format_characters

ALLOWED_EXTENSIONS = tuple(EXTENSIONS.values())  # the stored ones: mewdex.dto.media
# A display name never ends in one of these (the mirror of ck_memes_display_name_safe)
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".gif", ".webp")
# File names that say "a meme file" (import and watched folders: a file so named that does not decode
# is reported, any other is ignored; a folder of them becomes a collection)
MEDIA_SUFFIXES = (*IMAGE_SUFFIXES, ".avif", ".heic", ".heif", ".mp4", ".m4v", ".mov", ".webm", ".tgs")
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

_GRAPHEME = regex.compile(r"\X")


def normalize_extension(value: object) -> str:
    """Return the canonical extension for an image type.

    Args:
        value: e.g. ``"PNG"``, ``".Jpeg"``, ``"webp"``.
    Returns:
        one of :data:`ALLOWED_EXTENSIONS` (lower case, leading dot, ``.jpeg`` → ``.jpg``).
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


def saved_stem(display_name: str, extension: str) -> str:
    """The stem of the file a meme is saved as (a download, a ZIP entry): its display name without a
    trailing ``extension`` (any case). A display name never ends in ``.png .jpg .gif .webp``, but may
    in a newer format's: a clip renamed ``dance.webm`` saves as ``dance.webm``, never ``dance.webm.webm``."""
    if extension and _pg_lower(display_name).endswith(extension.lower()) and len(display_name) > len(extension):
        return display_name[: -len(extension)]
    return display_name


def saved_name(display_name: str, extension: str) -> str:
    """The name of the file a meme is saved as: :func:`saved_stem` plus the stored ``extension``
    (``"dance"``, ``".webm"`` → ``"dance.webm"``; ``"dance.webm"``, ``".webm"`` → ``"dance.webm"``)."""
    return saved_stem(display_name, extension) + extension


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
        elif (
            char not in _BIDI_CONTROLS
            and unicodedata.category(char) not in ("Cc", "Cs")
            and (char in _KEPT_FORMAT or unicodedata.category(char) != "Cf")
        ):
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


def _graphemes(text: str) -> list[str]:
    """Extended grapheme clusters (UAX #29) of ``text``, via the ``regex`` module's ``\\X``."""
    return _GRAPHEME.findall(text)


#: Folder/file names that say nothing about the image: one list, in :mod:`mewdex.library.generic_words`.
GENERIC_NAMES = generic_words.GENERIC_NAMES


# File stems that say nothing about the picture: camera, messenger, download and screenshot names,
# numbers, hashes/UUIDs, and the placeholder words of template sites. Matched against the whole stem
# (case-insensitive, after NFC); a generic stem never becomes a meme's name when something better exists.
_GENERIC_STEM = regex.compile(
    r"""(?ix)\A(?:
        (?:default|image|images|img|pic|picture|photo|file|untitled|unnamed|download|downloads|temp|tmp|new|
           screenshot|screen\s?shot|截图|屏幕截图|图片|下载|未命名|image0|thumb|thumbnail|original|meme|sticker)
          (?:[\s_\-]*[(（\[]?\d+[)）\]]?)*
      | (?:img|dsc|dscn|dscf|pxl|mvimg|vid|p|photo|wp|image|screenshot|mmexport|wx_camera|微信图片|qq图片|
           signal|whatsapp\s?image|telegram|tg|snapchat|fb_img|received|inshot|faceapp|picsart|截屏|屏幕快照)
          [\s_\-]*[\d\s_\-.:年月日时分秒at]*(?:[\s_\-]*[(（]\d+[)）])?
      | [\d\s_\-.()]+                                            # numbers, dates, times
      | [0-9a-f]{8}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{12}  # UUIDs
      | [0-9a-f]{16,}                                            # hex hashes
      | (?=[A-Za-z0-9]*\d)(?=[A-Za-z0-9]*[A-Za-z])[A-Za-z0-9]{20,}  # random-looking ids (letters and digits)
    )\Z"""
)


def file_stem(filename: str) -> str:
    """The last path component of ``filename`` without one extension-like suffix."""
    base = re.split(r"[/\\]", filename)[-1] if isinstance(filename, str) else ""
    return _FILE_SUFFIX.sub("", base)


def is_generic_stem(stem: str) -> bool:
    """Whether a file stem (``IMG_2034``, ``微信图片_20240101``, ``download (3)``, ``default``, a UUID…)
    says nothing about the picture, so a meme should not be named by it."""
    stem = unicodedata.normalize("NFKC", stem or "").strip()
    if not stem or _GENERIC_STEM.match(stem):
        return True
    words = re.sub(r"[\d\s_\-.()（）\[\]]+", " ", stem.casefold()).split()
    return not words or all(w in GENERIC_NAMES for w in words)


def name_for_file(filename: str, folder: str | None = None) -> tuple[str, str]:
    """The display name of a new meme from its file name and the folder it came from.

    Returns ``(name, name_source)``: the stem's name, ``"uploaded"``, when the stem means something;
    for a generic stem the folder's name (``memegen/images/drake/default.jpg`` → ``drake``) when the folder
    name is not generic itself, else the stem's name, both ``"automatic"`` (the context title may replace
    an automatic name later; a manual rename always wins)."""
    stem = file_stem(filename)
    if not is_generic_stem(stem):
        return display_name_from_filename(filename), "uploaded"
    if folder and not is_generic_stem(folder):
        try:
            return normalize_display_name(folder), "automatic"
        except ValueError:
            pass
    return display_name_from_filename(filename), "automatic"


def folder_named(name: str, folder: str | None) -> bool:
    """Whether ``name`` is the (normalized) folder name, i.e. :func:`name_for_file` named by the folder."""
    if not folder:
        return False
    try:
        return normalize_display_name(folder) == name
    except ValueError:
        return False


# ----------------------------------------------------------------------------- what a name says

#: ``words`` (a person can read what the meme is: ``drake``, ``一个字我都不信``, ``Drake Hotline Bling 2``),
#: ``generic`` (says nothing: :func:`is_generic_stem`), ``serial`` (a numbered series: ``KumamotoBear00025``,
#: ``037_LuXun``, ``小猪佩奇1``, ``cat_2020``) or ``id`` (a short template id: memegen's ``oag``, ``ll``, ``bd``,
#: ``tenguy``).
NAME_KINDS = ("words", "generic", "serial", "id")
# A counter in front: ``037_LuXun``, ``004-SmirkBoy`` (two digits or more, then a separator).
_NUMBERED_PREFIX = regex.compile(r"\A\d{2,}[\s_\-.]+\S")
# A counter behind: ``KumamotoBear00025``, ``小猪佩奇1``, ``cat_2020``, ``Penguin 12 (2)``.
_NUMBERED_SUFFIX = regex.compile(r"\A(?P<words>.*?[^\d\s_\-.#])[\s_\-.#]*(?P<n>\d+)(?:\s*[(（]\d+[)）])?\Z")
_TOKEN_SEPARATORS = regex.compile(r"[\s_\-.·]")
# A template id is short: ``tenguy`` is one, ``grumpycat`` already reads as words (split as they are searched).
_MAX_ID_CHARS = 8


def _dictionary_word(token: str) -> bool:
    """Whether ``token`` (lower-case ASCII) is one word of ``wordninja``'s English word list."""
    try:
        import wordninja
    except ImportError:  # optional, as for search: without it only very short tokens count as ids
        return len(token) > 2
    return token in wordninja.DEFAULT_LANGUAGE_MODEL._wordcost  # the list it splits with


def name_kind(name: str) -> str:
    """What a file stem or display name says (:data:`NAME_KINDS`). A numbered series has a zero-padded
    counter (``003``), or any counter behind one word (``小猪佩奇11``; ``Drake Hotline Bling 2`` and
    ``原神-一发1980包夜6480`` are words); a template id is one lower-case ASCII token of
    at most 2 characters, or of at most 8 that is no English word (``oag``, ``3hd``, ``tenguy``; not
    ``drake``, ``yes``). Pure; Chinese names are words unless numbered (``小猪佩奇1``)."""
    text = unicodedata.normalize("NFKC", name or "").strip()
    if is_generic_stem(text):
        return "generic"
    if _NUMBERED_PREFIX.match(text):
        return "serial"
    if (m := _NUMBERED_SUFFIX.match(text)) and any(ch.isalpha() for ch in m["words"]):
        if (len(m["n"]) >= 2 and m["n"].startswith("0")) or not _TOKEN_SEPARATORS.search(m["words"].strip()):
            return "serial"
    if regex.fullmatch(r"[a-z0-9]+", text) and (
        len(text) <= 2 or (len(text) <= _MAX_ID_CHARS and not _dictionary_word(text))
    ):
        return "id"
    return "words"


_CJK = regex.compile(r"[\p{Han}\p{Hiragana}\p{Katakana}\p{Hangul}]")
_LATIN_WORD = regex.compile(r"[A-Za-z]+")


def says_enough(text: str) -> bool:
    """Whether recognised ``text`` (an OCR caption) says enough to name a meme by: two CJK characters
    or more, or Latin words of which at least half are English words (:func:`_dictionary_word`) with
    three letters or more among those. OCR noise does not (``CONI``, ``lI1``, ``ZX Q``); ``hello``,
    ``WTF``, ``我没说过`` do. Pure."""
    text = unicodedata.normalize("NFKC", text or "")
    if len(_CJK.findall(text)) >= 2:
        return True
    words = [w.lower() for w in _LATIN_WORD.findall(text) if len(w) >= 2]
    known = [w for w in words if _dictionary_word(w)]
    return bool(words) and 2 * len(known) >= len(words) and sum(len(w) for w in known) >= 3


def is_readable_name(name: str) -> bool:
    """Whether ``name`` is made of words (:func:`name_kind`), not a generic stem, a serial or an id."""
    return name_kind(name) == "words"


def import_path(provenance: dict | None) -> str:
    """The path a meme was imported under (``provenance.relative_path``, ``/``-separated), with the import
    root's own folder name in front when the file lay directly in it: importing ``…/memegen/images/grumpycat``
    gives its files the folder words ``grumpycat``, as importing ``…/memegen`` does. ``""`` when unknown."""
    provenance = provenance or {}
    relative = provenance.get("relative_path")
    if not isinstance(relative, str) or not relative:
        return ""
    relative = relative.replace("\\", "/")
    root = provenance.get("root")
    if "/" not in relative and provenance.get("source") == "folder_import" and isinstance(root, str) and root:
        folder = re.split(r"[/\\]", root.rstrip("/\\"))[-1]
        if folder:
            return f"{folder}/{relative}"
    return relative
