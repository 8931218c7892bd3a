"""Names from meaning (issue 19, point 1): which file stems are generic, and what a new meme is called."""

from __future__ import annotations

import pytest

from mewdex.library.importer import collection_name_for
from mewdex.library.names import is_generic_stem, name_for_file


@pytest.mark.parametrize(
    "stem",
    [
        "default",
        "0",
        "images-1",
        "image (2)",
        "IMG_2034",
        "IMG_20240101_101010",
        "DSC01234",
        "PXL_20230101_123456789",
        "微信图片_20240101",
        "微信图片_20240101123456",
        "mmexport1700000000000",
        "download (3)",
        "download",
        "Screenshot 2024-01-01 at 10.00.00",
        "Screenshot_20240101-101010",
        "截图",
        "屏幕截图 2024-01-01 101010",
        "93b53fd3-1234-4567-89ab-0123456789ab",
        "0123456789abcdef0123",
        "a1b2c3d4e5f6a7b8c9d0",
        "images",
        "",
    ],
)
def test_generic_stems(stem):
    assert is_generic_stem(stem)


@pytest.mark.parametrize(
    "stem",
    [
        "drake",
        "yes",
        "3hd",
        "一个字我都不信",
        "I don't care 我们不在乎",
        "004_SmirkBoy",
        "KumamotoBear",
        "distracted boyfriend",
        "那年那兔那些事-不约",
        "cat_2020",
        "Drake Hotline Bling",
    ],
)
def test_meaningful_stems(stem):
    assert not is_generic_stem(stem)


def test_name_for_file():
    assert name_for_file("default.jpg", "drake") == ("drake", "automatic")
    assert name_for_file("IMG_2034.JPG", "猫猫") == ("猫猫", "automatic")
    assert name_for_file("yes.jpg", "drake") == ("yes", "uploaded")
    assert name_for_file("IMG_1.jpg", "images") == ("IMG_1", "automatic")  # nothing better yet: the title names it
    assert name_for_file("IMG_1.jpg", None) == ("IMG_1", "automatic")
    assert name_for_file("grumpy cat.png", None) == ("grumpy cat", "uploaded")


def test_collection_names_by_path():
    assert collection_name_for(("memegen", "images", "drake")) == "memegen/drake"
    assert collection_name_for(("vvquest", "images")) == "vvquest"
    assert collection_name_for(("images",)) is None
    assert collection_name_for(("猫猫", "deep")) == "猫猫/deep"


# --- names people can read (issue 35, item 4) ---------------------------------------------------


@pytest.mark.parametrize(
    "name, kind",
    [
        ("KumamotoBear00025", "serial"),
        ("Penguin00122", "serial"),
        ("037_LuXun", "serial"),
        ("004_SmirkBoy", "serial"),
        ("cat_2020", "serial"),
        ("小猪佩奇1", "serial"),  # Chinese: a name with a counter is a series
        ("小猪佩奇11", "serial"),
        ("熊猫头 003", "serial"),
        ("oag", "id"),
        ("ll", "id"),
        ("bd", "id"),
        ("tenguy", "id"),
        ("3hd", "id"),
        ("default", "generic"),
        ("IMG_2034", "generic"),
        ("drake", "words"),
        ("yes", "words"),
        ("grumpycat", "words"),
        ("sad-bush", "words"),
        ("Drake Hotline Bling 2", "words"),  # several words and a number: a title
        ("原神-一发1980包夜6480", "words"),
        ("一个字我都不信", "words"),  # Chinese words
        ("原神-害怕", "words"),
        ("那年那兔那些事-不约", "words"),
        ("第3集", "words"),
        ("2020年的我", "words"),
    ],
)
def test_name_kinds(name, kind):
    from mewdex.library.names import is_readable_name, name_kind

    assert name_kind(name) == kind
    assert is_readable_name(name) == (kind == "words")


def test_caption_names():
    from mewdex.pipeline.auto_rename import CAPTION_NAME_CHARS, caption_name

    lines = [{"text": "我没说过", "score": 0.9}, {"text": "这句话", "score": 0.9}]
    assert caption_name({"ocr_lines": lines, "language": "zh"}) == "我没说过 这句话"
    vision = {"title_en": "Cat judging you", "title_zh": "审视你的猫"}
    assert caption_name({"ocr_lines": [], "vision": vision, "language": "zh"}) == "审视你的猫"
    assert caption_name({"ocr_lines": [], "vision": vision, "language": "en"}) == "Cat judging you"
    assert caption_name({"ocr_lines": [{"text": "2020", "score": 0.9}]}) is None  # a number is no name
    assert caption_name({}) is None
    long = caption_name({"ocr_lines": [{"text": "when the build breaks on friday evening again and again"}]})
    assert long == "when the build breaks on friday evening…" and len(long) <= CAPTION_NAME_CHARS


def test_import_path_keeps_the_imported_folders_own_name():
    from mewdex.library.names import import_path

    direct = {"source": "folder_import", "root": "/data/memegen/images/grumpycat", "relative_path": "default.jpg"}
    parent = {"source": "folder_import", "root": "/data/memegen", "relative_path": "images/grumpycat/default.jpg"}
    assert import_path(direct) == "grumpycat/default.jpg"
    assert import_path(parent) == "images/grumpycat/default.jpg"
    assert import_path({"source": "upload", "relative_path": "x.png"}) == "x.png"
    assert import_path({}) == ""


def test_a_caption_names_only_with_sure_text_that_says_enough():
    """Issue 46: OCR noise ("CONI") or an unsure reading never names a meme; the vision title then does."""
    from mewdex.library.names import says_enough
    from mewdex.pipeline.auto_rename import caption_name

    assert not says_enough("CONI") and not says_enough("lI1") and not says_enough("这")
    assert says_enough("hello") and says_enough("WTF") and says_enough("我没说过")
    vision = {"title_en": "Cat judging you"}
    assert caption_name({"ocr_lines": [{"text": "CONI", "score": 0.99}], "vision": vision}) == "Cat judging you"
    assert caption_name({"ocr_lines": [{"text": "CONI", "score": 0.99}]}) is None
    assert caption_name({"ocr_lines": [{"text": "hello world", "score": 0.7}]}) is None  # unsure
    assert caption_name({"ocr_lines": [{"text": "hello world", "score": 0.9}]}) == "hello world"
