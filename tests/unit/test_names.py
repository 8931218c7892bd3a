"""Name rules of the seed: extensions and display names (CASES.md FN-01, FN-02)."""

from __future__ import annotations

import json
import random
import unicodedata
import zipfile
from pathlib import Path

import pytest

from mewdex.library.names import (
    display_name_from_filename,
    is_valid_display_name,
    normalize_display_name,
    normalize_extension,
    saved_name,
)

CASES = Path(__file__).resolve().parents[1] / "cases"


def passes_db_check(name: str) -> bool:
    """``ck_memes_display_name_safe`` (seed 000 + octet_length + .webp), written out independently."""
    lowered = "".join(c.lower()[0] for c in name)  # PostgreSQL lower() is per code point
    return (
        name != ""
        and len(name) <= 255
        and len(name.encode("utf-8")) <= 255
        and name == name.strip(" .")
        and "/" not in name
        and "\\" not in name
        and not any(unicodedata.category(c) == "Cc" for c in name)
        and name not in {".", "..", ".staging", ".quarantine"}
        and not any(lowered.endswith(s) for s in (".png", ".jpg", ".jpeg", ".gif", ".webp"))
    )


def assert_storable(name: str) -> None:
    assert passes_db_check(name), repr(name)
    assert is_valid_display_name(name), repr(name)
    assert len(name.encode("utf-8")) <= 255
    assert unicodedata.is_normalized("NFC", name)
    assert normalize_display_name(name) == name  # idempotent
    name.encode("utf-8")  # no lone surrogates


# --- extensions ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("png", ".png"),
        (".PNG", ".png"),
        ("jpg", ".jpg"),
        (".jpeg", ".jpg"),
        ("JPEG", ".jpg"),
        (" .Gif ", ".gif"),
        ("webp", ".webp"),
    ],
)
def test_normalize_extension(value, expected):
    assert normalize_extension(value) == expected


@pytest.mark.parametrize("value", ["", ".", "bmp", ".svg", ".png.exe", "..png", None, 3, b".png", ".jpe", "png/"])
def test_normalize_extension_rejects(value):
    with pytest.raises(ValueError, match="extension_invalid"):
        normalize_extension(value)


# --- display names ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("drake", "drake"),
        ("  Drake yes  ", "Drake yes"),
        ("..hidden", "hidden"),
        ("end. . .", "end"),
        (" . x . ", "x"),
        ("\u3000全角空格\u3000", "全角空格"),
        ("cat.png", "cat"),
        ("cat.PNG", "cat"),
        ("cat.Jpeg", "cat"),
        ("cat.jpg.png.gif.webp", "cat"),
        ("cat .png", "cat"),
        ("cat..png", "cat"),
        ("cat.png.", "cat"),
        ("x.GİF", "x"),  # PostgreSQL lower('İ') is 'i'
        ("cat.pngx", "cat.pngx"),
        ("cat.txt", "cat.txt"),
        ("a/b", "a_b"),
        ("a\\b", "a_b"),
        ("../../etc/passwd", "_.._etc_passwd"),
        ("line\nbreak\ttab", "line break tab"),
        ("nul\x00del\x7fc1\x9f", "nuldelc1"),
        ("many     spaces", "many spaces"),
        ("\u202egnp.exe", "gnp.exe"),  # bidi override removed
        ("lone\udc80surrogate", "lonesurrogate"),
        ("I don't care 我们不在乎", "I don't care 我们不在乎"),
        ("image", "image"),
        ("staging", "staging"),
    ],
)
def test_normalize_display_name(value, expected):
    result = normalize_display_name(value)
    assert result == expected
    assert_storable(result)


@pytest.mark.parametrize(
    "value",
    ["", "   ", ".", "..", "...", " . . ", ".png", ".jpeg.gif", "\x00\x01", "\u202e", None, 5, b"name"],
)
def test_normalize_display_name_rejects(value):
    with pytest.raises(ValueError, match="display_name_invalid"):
        normalize_display_name(value)


def test_reserved_names_cannot_survive():
    for reserved in (".staging", ".quarantine"):
        assert normalize_display_name(reserved) == reserved.lstrip(".")


def test_fn01_nfc_and_nfd_cafe_become_the_same_nfc_name():
    names = [info.filename for info in zipfile.ZipFile(CASES / "fn01_nfc_nfd.zip").infolist()]
    assert len(names) == 2 and names[0] != names[1]
    assert {unicodedata.is_normalized("NFC", n) for n in names} == {True, False}
    display = {display_name_from_filename(n) for n in names}
    assert display == {"Caf\u00e9"}


def _fn02_names() -> list[str]:
    uploads = json.loads((CASES / "fn02_upload_filenames.json").read_text(encoding="utf-8"))
    zipped = [info.filename for info in zipfile.ZipFile(CASES / "fn02_long_names.zip").infolist()]
    return [v["filename"] for v in uploads.values()] + zipped


@pytest.mark.parametrize("filename", _fn02_names())
def test_fn02_long_names_cut_on_grapheme_boundary(filename):
    name = display_name_from_filename(filename)
    assert_storable(name)
    stem = filename.removesuffix(".png")
    assert stem.startswith(name)
    if "\U0001f602" in stem:  # 😂 × 70 = 280 bytes → 63 whole emoji
        assert name == "\U0001f602" * 63
    elif "\U0001f3f4" in stem:  # Scotland flag tag sequences are 28 bytes each
        assert len(name.encode()) % 28 == 0 and name.count("\U0001f3f4") == len(name.encode()) // 28
    else:
        assert name == "猫" * 84


SCOTLAND = "\U0001f3f4\U000e0067\U000e0062\U000e0073\U000e0063\U000e0074\U000e007f"
FAMILY = "\U0001f468\u200d\U0001f469\u200d\U0001f467\u200d\U0001f466"
THUMB_DARK = "\U0001f44d\U0001f3ff"
FLAG_CN = "\U0001f1e8\U0001f1f3"
HEART_VS = "\u2764\ufe0f"
E_ACUTES = "e" + "\u0301\u0302\u0303"  # stays decomposed under NFC beyond the first mark
HANGUL_JAMO = "\u1100\u1161\u11a8\u1100"  # would compose to 각 + ᄀ; check it is whole after NFC
DEVANAGARI_KSHA = "\u0915\u094d\u0937"


@pytest.mark.parametrize(
    "unit",
    [SCOTLAND, FAMILY, THUMB_DARK, FLAG_CN, HEART_VS, E_ACUTES, DEVANAGARI_KSHA, "猫", "a", "é"],
)
@pytest.mark.parametrize("prefix", ["", "x", "xy", "xyz"])
def test_truncation_keeps_clusters_whole(unit, prefix):
    unit = unicodedata.normalize("NFC", unit)
    name = normalize_display_name(prefix + unit * 300)
    assert_storable(name)
    assert name.startswith(prefix)
    body = name[len(prefix) :]
    assert body == unit * (len(body) // len(unit))
    assert len(name.encode()) > 255 - len(unit.encode())  # nothing cut needlessly


def test_regional_indicator_pairs_are_not_split_across_odd_prefix():
    name = normalize_display_name(FLAG_CN * 100)
    assert len(name) % 2 == 0


def test_single_overlong_cluster_is_cut_by_code_point():
    zalgo = "Z" + "\u0301" * 400
    name = normalize_display_name(zalgo)
    assert name.startswith("\u0179") and len(name.encode()) <= 255  # NFC composes Z + acute
    assert_storable(name)


def test_hangul_jamo_after_nfc():
    name = normalize_display_name(HANGUL_JAMO * 100)
    assert_storable(name)


def test_cut_exposing_extension_or_dot_is_handled():
    """Truncation can leave '.png' or a trailing dot at the end; the rules apply again."""
    for tail in (".png", ". ", "...", ".JPG"):
        value = "a" * (255 - len(tail)) + tail + "b" * 50
        assert_storable(normalize_display_name(value))


def test_huge_input_is_bounded():
    assert len(normalize_display_name("名" * 1_000_000).encode()) <= 255


def test_random_hostile_names_always_storable():
    alphabet = list(" ./\\\t\n\x00\x7f\u202e\u200d\ufe0f\u0301\U000e0067ÉéİaZ猫😂\U0001f1e8\U0001f1f3\U0001f3ff") + [
        ".png",
        ".JPEG",
        ".gif",
        ".webp",
        ".staging",
        "..",
    ]
    rng = random.Random(1234)
    for _ in range(3000):
        value = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 120)))
        try:
            name = normalize_display_name(value)
        except ValueError as err:
            assert str(err) == "display_name_invalid"
        else:
            assert_storable(name)


# --- from file names -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("filename", "expected"),
    [
        ("drake/yes.jpg", "yes"),
        ("C:\\Users\\me\\cat.png", "cat"),
        ("Mr. Bean.jpg", "Mr. Bean"),
        ("meme.jpg.png", "meme"),
        ("一个字我都不信.png", "一个字我都不信"),
        ("notes.txt", "notes"),
        ("v1.5", "v1.5"),
        ("archive.tar.gz", "archive.tar"),
        (".png", "image"),
        ("...", "image"),
        ("", "image"),
        ("dir/", "image"),
        ("\x00.png", "image"),
        (".hidden.gif", "hidden"),
    ],
)
def test_display_name_from_filename(filename, expected):
    assert display_name_from_filename(filename) == expected


@pytest.mark.parametrize(
    "name,extension,expected",
    [
        ("dance", ".webm", "dance.webm"),
        ("dance.webm", ".webm", "dance.webm"),  # a clip renamed with its extension: never doubled
        ("Dance.WEBM", ".webm", "Dance.webm"),
        ("dance.mp4", ".webm", "dance.mp4.webm"),  # another format's suffix is part of the name
        (".tgs", ".tgs", ".tgs.tgs"),  # nothing would be left of the name
    ],
)
def test_saved_name_adds_the_extension_once(name, extension, expected):
    assert saved_name(name, extension) == expected
