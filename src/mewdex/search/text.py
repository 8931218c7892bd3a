"""Text normalisation and tokenisation for the keyword leg of search (Chinese + English).

The same functions run on documents (OCR text, names, labels) at index time and on queries
at search time, so both sides produce comparable tokens. PostgreSQL then stores the tokens
space-joined in a ``tsvector`` built with the ``simple`` configuration (which does no further
stemming), and the exact-phrase boost compares ``fold(query)`` against ``fold(document)``.

* :func:`fold` — NFKC, Traditional Chinese as Simplified (OpenCC ``t2s``: 頭髮 → 头发, 什麼 → 什么),
  casefold, strip accents from Latin letters, collapse whitespace. Documents and queries both pass
  through it, so a query in either script finds a caption in the other.
* :func:`tokenize` — folded tokens: Chinese (Han) runs segmented with jieba in search mode
  (words plus the shorter words inside them), other scripts split into words; punctuation
  dropped; compound ASCII words split (``snake_case``, ``camelCase``, ``kebab-case``,
  letter/digit boundaries, and glued words such as ``grumpycat`` via ``wordninja``'s English
  unigram model) while the joined compound is kept as a token too.

Dependencies: ``jieba`` (dictionary bundled in the wheel; initialised once, quietly, under a
lock), ``opencc`` (the official binding; its dictionaries are in the wheel; loaded once) and
``wordninja==2.0.0`` (word list bundled; optional — without it glued words are not
split, everything else still works).
"""

from __future__ import annotations

import logging
import re
import threading
import unicodedata
from functools import lru_cache

from mewdex.library.generic_words import GENERIC_NAMES

__all__ = [
    "fold",
    "tokenize",
    "split_compound",
    "is_han",
    "has_han",
    "has_latin",
    "clean_query",
    "strip_request",
    "is_generic_segment",
    "readable_words",
]

_WS = re.compile(r"\s+")

# Han ideographs (CJK Unified + Ext A + compatibility), used to route runs to jieba.
_HAN_CLASS = "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
_HAN_RUN = re.compile(f"[{_HAN_CLASS}]+")
#: One Han ideograph, as a regular expression both Python and PostgreSQL (``~``) read the same way.
HAN_PATTERN = f"[{_HAN_CLASS}]"
# A "word" outside Han: letters/digits/marks of any script, plus in-word joiners we split later.
_RUN = re.compile(f"[{_HAN_CLASS}]+|[^\\W_{_HAN_CLASS}]+(?:['’_\\-.][^\\W_{_HAN_CLASS}]+)*", re.UNICODE)
_CAMEL = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|\d+|[^\W\d_A-Za-z]+", re.UNICODE)
_ASCII_ALPHA = re.compile(r"^[a-z]+$")

# Two-letter words wordninja may legitimately produce inside a glued compound.
_SHORT_OK = frozenset("me my to of in on is it no go do be we up so at or he us ok oh hi".split())
# Below this length a glued ASCII word is not split (``ams``, ``doge``, ``elmo`` are names).
_MIN_GLUED_LEN = 6


def _strip_latin_accents(text: str) -> str:
    # Only marks on Latin letters are removed, so Japanese dakuten (が) and Hangul stay intact.
    out: list[str] = []
    for ch in unicodedata.normalize("NFD", text):
        if unicodedata.category(ch) == "Mn" and out:
            base = out[-1]
            if base.isascii() or "\u00c0" <= base <= "\u024f" or "\u1e00" <= base <= "\u1eff":
                continue
        out.append(ch)
    return unicodedata.normalize("NFC", "".join(out))


_opencc_lock = threading.Lock()
_opencc = None


def _simplified(text: str) -> str:
    """``text`` with Traditional Chinese written in Simplified (OpenCC ``t2s``); Simplified text and other
    scripts unchanged. The converter is loaded once.

    ``t2s`` rather than ``tw2s``: on the corpus (935 memes) ``t2s`` changes the 49 texts that hold
    Traditional characters and nothing else; ``tw2s`` also rewrites Simplified 么 as 幺 (特么 → 特幺,
    Taiwan's variant rule) in 2 more. The price: Taiwan's 著 for 着 (看著) stays 著, itself Simplified."""
    global _opencc
    if not _HAN_RUN.search(text):
        return text
    if _opencc is None:
        with _opencc_lock:
            if _opencc is None:
                import opencc

                _opencc = opencc.OpenCC("t2s")
    return str(_opencc.convert(text))


def _fold_width_case(text: str) -> str:
    t = unicodedata.normalize("NFKC", text).casefold()
    t = _strip_latin_accents(t)
    return _WS.sub(" ", t).strip()


def fold(text: str) -> str:
    """Return ``text`` normalised for comparison: NFKC, Traditional Chinese as Simplified
    (:func:`_simplified`), casefold, Latin accents stripped, runs of whitespace collapsed to one
    space, stripped. ``Café``/``café``/``cafe`` -> ``cafe``; full-width ``ＡＢＣ`` -> ``abc``;
    ``頭髮`` -> ``头发``. Never raises for a ``str``; ``None`` -> ``""``. The keyword leg's one
    normalisation: documents (:func:`tokenize`, the phrase text) and queries go through it.
    """
    if not text:
        return ""
    return _simplified(_fold_width_case(text))


def is_han(ch: str) -> bool:
    return bool(_HAN_RUN.fullmatch(ch))


def has_han(text: str) -> bool:
    return bool(_HAN_RUN.search(text or ""))


def has_latin(text: str) -> bool:
    return bool(re.search(r"[A-Za-z]", unicodedata.normalize("NFKC", text or "")))


# ----------------------------------------------------------------------------- jieba

_jieba_lock = threading.Lock()
_jieba = None


def _get_jieba():
    """Initialise jieba once (quietly, thread-safe) and return the module."""
    global _jieba
    if _jieba is None:
        with _jieba_lock:
            if _jieba is None:
                import jieba

                jieba.setLogLevel(logging.WARNING)
                logging.getLogger("jieba").setLevel(logging.WARNING)
                jieba.initialize()
                _jieba = jieba
    return _jieba


@lru_cache(maxsize=4096)
def _segment_han(run: str) -> tuple[str, ...]:
    jb = _get_jieba()
    toks = [t for t in jb.lcut_for_search(run, HMM=True) if t.strip()]
    return tuple(dict.fromkeys(toks))


# ----------------------------------------------------------------------------- compounds

_ninja_lock = threading.Lock()
_ninja = None
_ninja_failed = False


def _get_ninja():
    global _ninja, _ninja_failed
    if _ninja is None and not _ninja_failed:
        with _ninja_lock:
            if _ninja is None and not _ninja_failed:
                try:
                    import wordninja

                    _ninja = wordninja
                except Exception:  # optional dependency
                    _ninja_failed = True
    return _ninja


@lru_cache(maxsize=8192)
def _split_glued(word: str) -> tuple[str, ...]:
    """Split a glued lower-case ASCII word (``grumpycat``) if every part looks like a word."""
    if len(word) < _MIN_GLUED_LEN or not _ASCII_ALPHA.match(word):
        return (word,)
    ninja = _get_ninja()
    if ninja is None:
        return (word,)
    parts = [p for p in ninja.split(word) if p]
    if len(parts) < 2 or "".join(parts) != word:
        return (word,)
    if any(len(p) < 2 or (len(p) == 2 and p not in _SHORT_OK) for p in parts):
        return (word,)
    return tuple(parts)


def split_compound(word: str) -> list[str]:
    """Split one non-Han word into folded parts: ``snake_case``, ``kebab-case``, ``camelCase``,
    ``HTTPServer``, ``abc123`` and glued ``grumpycat`` -> ``['grumpy', 'cat']``. Returns
    ``[fold(word)]`` when there is nothing to split. Does not add the compound itself.
    """
    # accents off first (keeping case) so ``Café`` stays one camel-case piece; don't -> dont
    word = re.sub(r"['’]", "", _strip_latin_accents(unicodedata.normalize("NFKC", word)))
    pieces: list[str] = []
    for chunk in re.split(r"[_\-.]+", word):
        if not chunk:
            continue
        for m in _CAMEL.finditer(chunk):
            pieces.append(m.group(0))
        if not any(True for _ in _CAMEL.finditer(chunk)):
            pieces.append(chunk)
    out: list[str] = []
    for p in pieces:
        f = fold(p)
        if not f:
            continue
        out.extend(_split_glued(f))
    return out


def tokenize(text: str) -> list[str]:
    """Folded tokens of ``text`` in order of appearance, duplicates removed.

    * Han runs -> jieba search-mode words (``老板又让我周末加班`` -> 老板, 又, 让, 我, 周末, 加班).
    * Other runs -> words; compound words contribute their parts *and* the joined compound
      (``grumpycat`` -> grumpycat, grumpy, cat; ``SmirkBoy00004`` -> smirkboy00004, smirk,
      boy, 00004).
    * Punctuation, symbols and whitespace never become tokens.
    Returns ``[]`` for empty input. Pure function, thread-safe.
    """
    if not text:
        return []
    # Simplified before jieba segments it (its dictionary is Simplified); fold() below is then a no-op for it.
    t = _simplified(unicodedata.normalize("NFKC", text))
    out: list[str] = []
    for m in _RUN.finditer(t):
        run = m.group(0)
        if _HAN_RUN.fullmatch(run):
            out.extend(fold(x) for x in _segment_han(run))
            continue
        parts = split_compound(run)
        joined = fold(re.sub(r"['’_\-.]+", "", run))
        if joined and (len(parts) != 1 or parts[0] != joined):
            out.append(joined)
        out.extend(parts)
    return [x for x in dict.fromkeys(out) if x]


# ----------------------------------------------------------------------------- queries

# Words that name the medium, not what a meme shows or says ("cat meme", "熊猫头表情包", "picture of a
# dog"): in a library of memes they match nothing specific, so the legs search without them.
_MEDIUM_WORDS = re.compile(
    r"\b(?:(?:an?|the)\s+)?(?:image|picture|photo|pic|screenshot)s?\s+of\b|"
    r"\b(?:reaction\s+)?(?:memes?|gifs?|templates?)(?:\s+of)?\b|"
    r"表情包|表情图|表情|动图|图片",
    re.I,
)
# The request around the thing asked for ("给我一张……的表情包", "send me a meme for …"); each applies once.
_EN_REQUEST = re.compile(
    r"^(?:(?:please|pls)\s+)?(?:(?:can|could|would) you\s+)?(?:(?:send|give|show|find|get)(?:\s+me)?"
    r"|i need|i want|need|want)\s+(?:(?:a|an|some|the)\s+)?(?:(?:meme|memes|gif|gifs|image|picture|sticker|"
    r"reaction|reaction image)\s+)?(?:(?:for|about|of|that says|saying|with|when)\s+)?"
    # "a meme about mondays", "memes for when the build breaks"
    r"|^(?:(?:a|an|some|the)\s+)?(?:meme|memes|gif|gifs|sticker|stickers|reaction|reactions)\s+"
    r"(?:for|about|that says|saying|when)\s+",
    re.IGNORECASE,
)
_ZH_REQUEST = re.compile(
    r"^(?:请|麻烦)?你?(?:给我|帮我)?(?:来|发|找|搜|要|整)(?:一?个|一?张|点|些|一下)(?:关于)?"
    r"|^(?:请|麻烦)?(?:给我|帮我)(?:来|发|找|搜|要|整)?(?:一?个|一?张|点|些)"
)
_REQUEST_SUFFIX = re.compile(
    r"(?:的)?(?:表情包?|梗图|图片)(?:吧|呗|啊|呀)?$|的(?:图|动图)(?:吧|呗|啊|呀)?$"
    r"|\s+(?:meme|memes|reaction|gif|please|pls)$",
    re.IGNORECASE,
)
# "表示无语" asks for 无语: before a word (a feeling, a reaction) 表示/表达 only says "that means";
# before a clause ("表示对方说的话完全不可信") it is part of the description and stays.
_MEANING = re.compile(r"^(?:用来)?(?:表示|表达|形容|代表)(?=\S{1,4}$)")
_EDGE_PUNCT = " \t\n\"'“”‘’「」『』.,!?;:。，！？；：、…~～"
_QUOTE_PAIRS = {"'": "'", '"': '"', "“": "”", "‘": "’", "「": "」", "『": "』"}


def _strip_edges(text: str) -> str:
    """``text`` without punctuation at its ends, except a closing quote that closes a quotation
    inside it ("… screaming 'we'll do it live'" keeps its last quote; an apostrophe opens nothing)."""
    stripped = text.strip(_EDGE_PUNCT)
    if not stripped:
        return stripped
    trailing = text[text.find(stripped) + len(stripped) :]
    for closing in (ch for ch in trailing if ch in _QUOTE_PAIRS.values()):
        for opener in (o for o, c in _QUOTE_PAIRS.items() if c == closing):
            # a paired opener anywhere; a straight quote only where a word starts (not "we'll")
            pattern = re.escape(opener) if opener != closing else r"(?:^|\s)" + re.escape(opener) + r"\S"
            if re.search(pattern, stripped):
                return stripped + closing
    return stripped


def strip_request(text: str, *, keep_if_empty: bool = True) -> str:
    """``text`` without the request around what is asked for ("给我一张表示无语的表情包" → "无语";
    "来个摸鱼的表情" → "摸鱼"; "send me a meme for monday mornings" → "monday mornings"); meme phrases
    that only look like requests ("来日方长", "给我滚") stay whole. When nothing would remain: the
    text itself (``keep_if_empty``) or ""."""
    query = _strip_edges(text or "")
    asked = _strip_edges(_ZH_REQUEST.sub("", _strip_edges(_EN_REQUEST.sub("", query, count=1)), count=1))
    query = _strip_edges(_REQUEST_SUFFIX.sub("", asked, count=1))
    if asked != _strip_edges(text or ""):  # "来一张无语的": after a request, a trailing 的 only ties it on
        query = _strip_edges(re.sub(r"的$", "", query))
    query = _strip_edges(_MEANING.sub("", query, count=1))
    return query or ((text or "").strip() if keep_if_empty else "")


def clean_query(query: str) -> str:
    """What the legs search for: ``query`` without the request around it (:func:`strip_request`) and
    without the words that only name the medium (``meme``, ``gif``, ``picture of``, ``表情包``,
    ``动图``…), whitespace collapsed; the query itself when nothing else would be left (fewer than
    two letters/ideographs), so ``"meme"`` still searches for ``meme``. The one query cleaning of
    search and the assistant."""
    asked = strip_request(query or "", keep_if_empty=False)
    if not asked or asked == _strip_edges(query or ""):  # no request around it: the words as typed
        asked = query or ""
    cleaned = _WS.sub(" ", _MEDIUM_WORDS.sub(" ", asked)).strip(" ,，、;；:：-")
    return cleaned if sum(ch.isalnum() for ch in cleaned) >= 2 else (query or "").strip()


# --------------------------------------------------------------------------- path segments

_COUNTER = re.compile(
    r"^(?:img|image|images|pic|photo|dsc|dscn|pxl|mmexport|wx|screenshot)?[\s_\-.()]*\d*[\s_\-.()]*\d*$", re.I
)


def is_generic_segment(segment: str) -> bool:
    """Whether a path segment (file stem or folder name) says nothing about the image: empty, a
    counter or camera/messenger pattern (``IMG_2034``, ``mmexport1699``), or only generic words."""
    f = fold(segment)
    if not f:
        return True
    if _COUNTER.match(f):
        return True
    core = re.sub(r"[\d\s_\-.()]+", " ", f).strip()
    if not core:
        return True
    return all(w in GENERIC_NAMES for w in core.split())


def readable_words(segment: str) -> list[str]:
    """Human-readable words of one path segment: ``004_SmirkBoy`` -> ['smirk', 'boy'],
    ``那年那兔那些事-万箭穿心的痛`` -> ['那年那兔那些事', '万箭穿心的痛'], counters dropped."""
    seg = unicodedata.normalize("NFKC", segment)
    words: list[str] = []
    for chunk in re.split(r"[\s_\-.,，。、()（）\[\]【】+&]+", seg):
        if not chunk:
            continue
        if has_han(chunk):
            # keep Han text whole (readable for the embedders); strip counters glued to it
            w = re.sub(r"^\d+|\d+$", "", chunk).strip()
            if w and not is_generic_segment(w):
                # the script as written: these words are embedded (and shown); the keyword leg folds them
                words.append(_fold_width_case(w))
            continue
        for part in split_compound(chunk):
            if part.isdigit() or part in GENERIC_NAMES:
                continue
            words.append(part)
    return words
