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
