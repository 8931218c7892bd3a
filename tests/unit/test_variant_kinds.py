"""Duplicates vs variants (issue 19 point 4): the caption decides; folding keeps one per group."""

from __future__ import annotations

from uuid import uuid4

import pytest

from mewdex.search.variants import caption_key, fold, pair_kind


def test_caption_key_folds_case_width_spacing_and_punctuation():
    assert caption_key("Ｈｅｌｌｏ, World!") == caption_key("hello world") == "helloworld"
    assert caption_key("他这里边 一个字我都不信。") == "他这里边一个字我都不信"
    assert caption_key(None) == ""


@pytest.mark.parametrize(
    "a,b,kind",
    [
        ("", None, "duplicate"),  # the same picture without text
        ("ONE DOES NOT SIMPLY", "one does not simply", "duplicate"),
        ("只要你自信 怎么表达都可以", "只要你自信怎么表达都可以", "duplicate"),
        ("我说这太荒谬了让人笑掉大牙", "我说这太荒缪了让人笑掉大牙", "duplicate"),  # one OCR slip
        ("在吗? 借我十块钱 我要买奥利奥", "在吗? 借我20块钱 我要红茶玛奇朵+波霸", "variant"),
        ("他肯定要被炒鱿鱼了", "谈谈 不允许他说出真相", "variant"),
        ("GREAT AGAIN", "", "variant"),  # a caption added to the blank template
    ],
)
def test_pair_kind(a, b, kind):
    assert pair_kind(a, b) == kind
    assert pair_kind(b, a) == kind


def test_fold_keeps_the_best_ranked_of_each_group():
    a, b, c, d, e = (uuid4() for _ in range(5))
    groups = {a: (b, 3), b: (b, 3), c: (b, 3), d: (d, 2), e: (d, 2)}
    other = uuid4()
    assert fold([c, other, a, e, b, d], groups) == [c, other, e]
    assert fold([str(a), str(b)], groups) == [str(a)]
