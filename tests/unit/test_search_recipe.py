"""The search recipe without the corpus or a database: folding and tokenising (jieba for Chinese,
words and compound splitting with wordninja for the rest), OCR line cleaning, the meme context,
the semantic fields each embedder scores, the keyword document, and reciprocal-rank fusion.

Each test checks what the function's docstring promises, on the kind of text memes carry.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from mewdex.pipeline import context as ctx
from mewdex.pipeline.context import (
    FIELDS_BY_EMBEDDER,
    OCR_MIN_SCORE,
    build_meme_context,
    clean_ocr_lines,
    detect_language,
    keyword_document,
    name_parts,
    semantic_fields,
)
from mewdex.search import text as search_text
from mewdex.search.fusion import rrf
from mewdex.search.keyword import phrase_worthy
from mewdex.search.text import fold, has_han, has_latin, is_han, split_compound, tokenize

# ----------------------------------------------------------------------------- fold


@pytest.mark.parametrize("raw", ["Café", "CAFÉ", "cafe", "Cafe\u0301", "ｃａｆé"])
def test_fold_case_accents_and_width_compare_equal(raw):
    assert fold(raw) == "cafe"


def test_fold_collapses_whitespace_and_keeps_non_latin_marks():
    assert fold("  一个字\t\n我都不信  ") == "一个字 我都不信"
    assert fold("ＡＢＣ　def") == "abc def"  # full-width letters and the ideographic space
    assert fold("がんばって") == "がんばって"  # the dakuten is not a Latin accent
    assert fold("한국어") == "한국어"
    assert fold("") == "" and fold(None) == ""


def test_traditional_chinese_folds_to_simplified_for_the_keyword_leg():
    assert fold("頭髮亂了") == fold("头发乱了") == "头发乱了"
    assert fold("什麼") == "什么" and fold("後來") == "后来"
    # Simplified text is never rewritten (OpenCC's tw2s would turn 特么 into 特幺)
    assert fold("谁特么当你女朋友 为什么") == "谁特么当你女朋友 为什么" and fold("著名") == "著名"
    assert tokenize("電腦壞掉了") == tokenize("电脑坏掉了")
    assert fold("Café 臺灣") == "cafe 台湾" and fold("ＡＢＣ") == "abc"
    # the words embedded and shown keep the script they were written in
    assert search_text.readable_words("頭髮亂了") == ["頭髮亂了"]


def test_script_predicates():
    assert is_han("信") and not is_han("a") and not is_han("が")
    assert has_han("I don't care 我们不在乎") and not has_han("distracted boyfriend") and not has_han(None)
    assert has_latin("ＡＢ") and has_latin("drake 耶") and not has_latin("一个字我都不信")


# ----------------------------------------------------------------------------- tokenize


def test_chinese_is_segmented_with_jieba_search_mode():
    # The docstring's own example: jieba words, in order.
    assert tokenize("老板又让我周末加班") == ["老板", "又", "让", "我", "周末", "加班"]
    tokens = tokenize("一个字我都不信")
    assert "不信" in tokens and "一个" in tokens
    assert "".join(tokens) == "一个字我都不信"  # words cover the run once, in order
    # search mode adds the shorter words inside a long one
    assert {"不在乎", "在乎"} <= set(tokenize("我们不在乎"))


def test_mixed_text_routes_each_script_and_drops_punctuation():
    tokens = tokenize("I don't care 我们不在乎！！")
    assert tokens[:3] == ["i", "dont", "care"]
    assert "我们" in tokens and "不在乎" in tokens
    assert not any(ch in t for t in tokens for ch in "！!'’ ")
    assert tokenize("hello, world!! ... ——") == ["hello", "world"]
    assert tokenize("") == [] and tokenize("！？。") == []


def test_tokens_are_folded_and_unique():
    assert tokenize("Café CAFE cafe ＣＡＦＥ") == ["cafe"]
    assert tokenize("Ünïcode naïve") == ["unicode", "naive"]


@pytest.mark.parametrize(
    ("name", "compound", "parts"),
    [
        ("distractedboyfriend", "distractedboyfriend", ["distracted", "boyfriend"]),
        ("grumpycat", "grumpycat", ["grumpy", "cat"]),
        ("SmirkBoy00004", "smirkboy00004", ["smirk", "boy", "00004"]),
        ("KumamotoBear00001", "kumamotobear00001", ["kumamoto", "bear", "00001"]),
        ("HTTPServer", "httpserver", ["http", "server"]),
        ("snake_case-and-kebab", "snakecaseandkebab", ["snake", "case", "and", "kebab"]),
    ],
)
def test_compound_names_give_their_parts_and_the_joined_compound(name, compound, parts):
    assert split_compound(name) == parts  # the parts only
    tokens = tokenize(name)
    assert tokens[0] == compound and tokens[1:] == parts


def test_short_or_unwordlike_glued_words_stay_whole():
    # below the glued-word minimum length: names such as doge and elmo are not split
    assert split_compound("doge") == ["doge"] and tokenize("elmo") == ["elmo"]
    # wordninja would cut these into one-letter or non-word pieces: kept whole
    assert split_compound("xqzvbnmk") == ["xqzvbnmk"]
    assert split_compound("asdfgh") == ["asdfgh"]
    # a plain word that needs no split yields no separate compound token
    assert tokenize("boyfriend") == ["boyfriend"]


def test_camel_case_and_digits_split_without_wordninja(monkeypatch):
    """wordninja is optional: without it glued words stay whole, every other split still works."""
    search_text._split_glued.cache_clear()
    monkeypatch.setattr(search_text, "_get_ninja", lambda: None)
    try:
        assert split_compound("distractedboyfriend") == ["distractedboyfriend"]
        assert split_compound("camelCaseWord") == ["camel", "case", "word"]
        assert split_compound("abc123") == ["abc", "123"]
        assert tokenize("grumpy_cat") == ["grumpycat", "grumpy", "cat"]
    finally:
        search_text._split_glued.cache_clear()
    monkeypatch.undo()
    assert split_compound("distractedboyfriend") == ["distracted", "boyfriend"]


def test_apostrophes_join_rather_than_split():
    assert split_compound("don't") == ["dont"]
    assert tokenize("I don’t care") == ["i", "dont", "care"]


# ----------------------------------------------------------------------------- OCR lines


def line(text, score=0.9, box=None):
    return {"text": text, "score": score, "box": box}


def box(x0, y0, x1, y1):
    return [[x0, y0], [x1, y0], [x1, y1], [x0, y1]]


def test_low_score_lines_are_dropped():
    kept = clean_ocr_lines(
        [line("一个字我都不信", 0.98), line("模糊的字", OCR_MIN_SCORE - 0.01), line("刚好够", OCR_MIN_SCORE)]
    )
    assert [x["text"] for x in kept] == ["一个字我都不信", "刚好够"]
    assert [x["text"] for x in clean_ocr_lines([line("模糊的字", 0.3)], min_score=0.2)] == ["模糊的字"]


@pytest.mark.parametrize(
    "noise",
    [
        "@meme_factory",
        "知乎@小明同学",
        "https://t.cn/abc",
        "www.example.com",
        "更多表情 example.com",
        "BV1xx411c7mD",
        "av1234567",
        "01:23 / 04:56",
        "bilibili",
        "哔哩哔哩",
        "抖音号：12345",
        "微博 @某某",
        "小红书",
        "imgflip.com",
    ],
)
def test_watermark_like_lines_are_dropped(noise):
    kept = clean_ocr_lines([line(noise, 0.99), line("我不信", 0.99)])
    assert [x["text"] for x in kept] == ["我不信"], noise


def test_stray_characters_and_letterless_lines_are_dropped():
    lines = [line("x", 0.99), line("123 456", 0.99), line("!!!", 0.99), line("。", 0.99)]
    assert clean_ocr_lines(lines) == []
    # one ideograph survives only when it was read with high confidence
    assert [x["text"] for x in clean_ocr_lines([line("信", 0.96)])] == ["信"]
    assert clean_ocr_lines([line("信", 0.9)]) == []


def test_lines_are_normalised_deduplicated_and_kept_in_order():
    kept = clean_ocr_lines(
        [
            line("ＡＢＣ   text", 0.9),
            line("一个字我都不信", 0.98),
            line("abc TEXT!", 0.95),  # the same line once folded (punctuation aside)
            line("  一个字我都不信 ", 0.9),
        ]
    )
    assert kept == [{"text": "ABC text", "score": 0.9}, {"text": "一个字我都不信", "score": 0.98}]


def test_ocr_line_objects_are_accepted_and_scores_rounded():
    @dataclass
    class OcrLine:  # the shape of mewdex.pipeline.ocr.OcrLine
        text: str
        score: float
        box: list | None = None

    kept = clean_ocr_lines([OcrLine("when the code compiles", 0.912345678)])
    assert kept == [{"text": "when the code compiles", "score": 0.9123}]
    assert clean_ocr_lines(None) == [] and clean_ocr_lines([]) == []


def test_small_corner_text_is_a_logo_only_when_the_image_size_is_known():
    lines = [
        line("东方卫视", 0.99, box(20, 20, 150, 60)),  # top-left corner of a 1000×800 frame
        line("一个字我都不信", 0.99, box(200, 650, 800, 720)),
    ]  # the caption, centred
    assert [x["text"] for x in clean_ocr_lines(lines, image_size=(1000, 800))] == ["一个字我都不信"]
    assert [x["text"] for x in clean_ocr_lines(lines)] == ["东方卫视", "一个字我都不信"]


def test_three_lines_in_one_corner_are_a_caption_not_a_logo():
    bubble = [
        line("第一行字", 0.99, box(20, 20, 150, 60)),
        line("第二行字", 0.99, box(20, 62, 150, 100)),
        line("第三行字", 0.99, box(20, 102, 150, 140)),
    ]
    assert len(clean_ocr_lines(bubble, image_size=(1000, 800))) == 3
    assert len(clean_ocr_lines(bubble[:2], image_size=(1000, 800))) == 0


def test_language_from_script_shares():
    assert detect_language(["一个字我都不信"]) == "zh"
    assert detect_language(["when the code compiles"]) == "en"
    assert detect_language(["hello 世界 this is mixed"]) == "mixed"
    assert detect_language(["123", ""]) == "unknown"


# ----------------------------------------------------------------------------- names and context


def test_name_parts_drop_counters_and_generic_names():
    assert name_parts("004_SmirkBoy/SmirkBoy00004.gif") == {
        "stem": "SmirkBoy00004",
        "folders": ["004_SmirkBoy"],
        "stem_words": ["smirk", "boy"],
        "folder_words": [],
    }
    generic = name_parts("images/IMG_1234.jpg")
    assert generic["stem_words"] == [] and generic["folders"] == []
    chinese = name_parts("nanian_natu/那年那兔那些事-不约.jpg")
    assert chinese["stem_words"] == ["那年那兔那些事", "不约"]  # Han text kept whole for the embedders
    assert chinese["folder_words"] == ["nanian", "natu"]
    renamed = name_parts("memes/IMG_0001.png", display_name="distractedboyfriend.png")
    assert renamed["stem"] == "distractedboyfriend" and renamed["stem_words"] == ["distracted", "boyfriend"]
    assert name_parts("..\\a\\..\\drake\\yes.jpg")["folders"] == ["a", "drake"]


def test_context_of_a_chinese_caption_meme():
    c = build_meme_context(
        relative_path="vvquest/一个字我都不信.png",
        display_name="一个字我都不信.png",
        ocr_lines=[line("一个字我都不信", 0.98), line("@vvquest", 0.99)],
    )
    assert c["version"] == ctx.CONTEXT_VERSION
    assert c["title"] == "一个字我都不信"
    assert c["ocr_text"] == "一个字我都不信" and c["ocr_line_count_raw"] == 2
    assert c["language"] == "zh" and c["folder"] == "vvquest"
    assert {"不信", "vvquest"} <= set(c["source_name_tokens"])


def test_context_title_prefers_folder_and_stem_then_ocr():
    drake = build_meme_context(relative_path="drake/yes.jpg", display_name="yes.jpg", ocr_lines=[])
    assert drake["title"] == "drake yes"  # a one-word stem gets its folder in front
    nameless = build_meme_context(
        relative_path="IMG_0001.png",
        display_name="IMG_0001.png",
        ocr_lines=[line("short", 0.9), line("the longest caption line", 0.9)],
    )
    assert nameless["title"] == "the longest caption line" and nameless["name_text"] == ""
    empty = build_meme_context(relative_path="", display_name="", ocr_lines=[])
    assert empty["title"] == "" and empty["language"] == "unknown" and empty["source_name_tokens"] == []


def test_context_tokens_carry_the_joined_compound_and_no_counters():
    c = build_meme_context(
        relative_path="009_KumamotoBear/KumamotoBear00004.gif", display_name="KumamotoBear00004.gif", ocr_lines=[]
    )
    assert {"kumamotobear", "kumamoto", "bear"} <= set(c["source_name_tokens"])
    assert not any(t.isdigit() or any(ch.isdigit() for ch in t) for t in c["source_name_tokens"])


# ----------------------------------------------------------------------------- semantic fields


@pytest.fixture
def drake():
    return build_meme_context(
        relative_path="drake/yes.jpg",
        display_name="yes.jpg",
        ocr_lines=[line("when the code compiles", 0.97), line("@imgflip", 0.99)],
        labels=[{"label": "cat", "zh": "猫", "score": 0.5}, "dog"],
    )


def test_semantic_fields_each_text_once(drake):
    fields = semantic_fields(drake)
    assert fields == {
        "name": "yes drake",
        "ocr": "when the code compiles",
        "name_ocr": "yes drake; when the code compiles",
        "labels": "cat, 猫, dog",
        "folder": "drake",
    }


@pytest.mark.parametrize(
    ("path", "name", "folder"),
    [
        # the import's top folders are not the meme's name, only its nearest folder is
        ("vvquest/images/我也喜欢你.png", "我也喜欢你 vvquest", "vvquest"),
        ("chinesebqb/images/genshin/原神-不了不了这伤身体.jpg", "原神 不了不了这伤身体 genshin", "chinesebqb genshin"),
        # a generic stem: the name is the nearest folder's words
        ("memes/memegen/images/grumpycat/default.jpg", "grumpy cat", "gen grumpy cat"),
        ("drake/drake.jpg", "drake", "drake"),
        # a stem word that a farther folder repeats stays in the name
        ("cats/funny/cats_sleeping.jpg", "cats sleeping funny", "cats funny"),
        ("IMG_2034.JPG", "", ""),
    ],
)
def test_name_field_is_the_memes_own_words_and_folders_are_a_field_of_their_own(path, name, folder):
    c = build_meme_context(relative_path=path, display_name=path.rsplit("/", 1)[-1], ocr_lines=[])
    fields = semantic_fields(c)
    assert fields.get("name", "") == name
    assert fields.get("folder", "") == folder


def test_a_renamed_meme_keeps_its_name_even_when_a_folder_repeats_it():
    c = build_meme_context(relative_path="cats/funny/IMG_1.jpg", display_name="cats", ocr_lines=[])
    assert semantic_fields(c)["name"] == "cats funny"


@pytest.mark.parametrize(
    "path",
    ["cats/funny/cats_sleeping.jpg", "memegen/grumpycat/default.jpg", "drake/yes.jpg", "vvquest/images/不屑.png"],
)
def test_contexts_stored_before_stem_words_give_the_same_fields(path):
    c = build_meme_context(relative_path=path, display_name=path.rsplit("/", 1)[-1], ocr_lines=[])
    old = {k: v for k, v in c.items() if k != "stem_words"}
    assert semantic_fields(old) == semantic_fields(c)


def test_name_without_folders_keeps_the_whole_name_text():
    assert semantic_fields({"name_text": "grumpy cat"}) == {"name": "grumpy cat"}


def test_semantic_fields_per_embedder_follow_the_measured_field_sets(drake):
    for embedder, model_id in (("e5", "multilingual-e5-small@2"), ("use", "use-multilingual-v3@1")):
        expected = set(FIELDS_BY_EMBEDDER[embedder])
        described = {**drake, "vision": {"description_en": "a man turns one thing down and likes another"}}
        assert set(semantic_fields(described, embedder)) == expected  # vision: only with a provider's analysis
        assert set(semantic_fields(drake, embedder)) == expected - {"vision"}
        assert semantic_fields(drake, model_id) == semantic_fields(drake, embedder)
    with pytest.raises(ValueError):
        semantic_fields(drake, "clip")


def test_semantic_fields_omit_empty_fields_and_cap_ocr():
    assert semantic_fields(build_meme_context(relative_path="", display_name="", ocr_lines=[])) == {}
    ocr_only = {"name_text": "", "ocr_lines": [{"text": "第一行"}, {"text": ""}, {"text": "第二行"}], "labels": []}
    assert semantic_fields(ocr_only) == {"ocr": "第一行; 第二行"}
    long = {"name_text": "x", "ocr_lines": [{"text": "字" * 3000}]}
    assert len(semantic_fields(long)["ocr"]) == 1000


@pytest.mark.parametrize(
    ("query", "cleaned"),
    [
        ("grumpy cat meme", "grumpy cat"),
        ("reaction gif of a man tapping his temple", "a man tapping his temple"),
        ("a picture of a dog at a computer", "a dog at a computer"),
        ("熊猫头表情包", "熊猫头"),
        ("卡通兔子的动图", "卡通兔子"),
        # the request around what is asked for goes too (issue 35, item 6)
        ("给我一张表示无语的表情包", "无语"),
        ("来一张表示无语的", "无语"),
        ("表示无语", "无语"),
        ("send me a meme for monday mornings", "monday mornings"),
        ("a meme about cats", "cats"),
        ("来个表示对方说的话完全不可信的表情", "表示对方说的话完全不可信"),  # 表示 before a clause stays
        ("给我滚", "给我滚"),  # meme phrases that only look like requests stay whole
        ("不值得同情的", "不值得同情的"),
        ("我说这叫做严重的脑残’", "我说这叫做严重的脑残’"),  # no request: the words as typed
        ("meme", "meme"),  # nothing else left: the query itself
        ("表情包", "表情包"),
        ("gifted memento templeton", "gifted memento templeton"),  # whole words only
    ],
)
def test_clean_query_drops_words_that_only_name_the_medium(query, cleaned):
    assert search_text.clean_query(query) == cleaned


# ----------------------------------------------------------------------------- keyword document


def test_keyword_document_matches_query_tokens(drake):
    doc = keyword_document(drake)
    assert set(doc) == {"name", "ocr", "labels", "phrase"}
    assert set(tokenize("code compiles")) <= set(doc["ocr"].split())
    assert {"drake", "yes"} <= set(doc["name"].split())
    assert "猫" in doc["labels"].split()
    assert fold("The Code COMPILES") in doc["phrase"]  # the exact-phrase boost compares folded text


def test_image_labels_are_indexed_in_both_languages_with_their_general_word():
    # as the visual stage stored them before the translations were corrected: 风筝 (the toy) for the bird
    stored = {"name_text": "", "labels": ["风筝", "kite", "虎斑猫", "tabby", "电脑键盘", "computer keyboard"]}
    words = set(keyword_document(stored)["labels"].split())
    assert {"鸢", "鸟", "bird", "猫", "cat", "键盘", "keyboard"} <= words and "风筝" not in words
    for query in ("猫 在 键盘上", "a cat on the keyboard", "一只鸟"):
        assert {"猫", "cat", "键盘", "keyboard", "鸟"} & set(tokenize(query)) & words, query
    labels = semantic_fields(stored, embedder="use")["labels"]
    assert labels.split(", ")[:4] == ["鸢", "kite", "鸟", "bird"] and "猫" in labels and "风筝" not in labels


def test_keyword_document_of_a_chinese_meme_finds_its_words():
    c = build_meme_context(
        relative_path="vvquest/一个字我都不信.png",
        display_name="一个字我都不信.png",
        ocr_lines=[line("一个字我都不信", 0.98)],
    )
    doc = keyword_document(c)
    for query in ("一个字我都不信！", "我都不信", "一个字"):
        assert set(tokenize(query)) <= set(doc["ocr"].split()), query
    # jieba cuts a bare 不信 into 不 / 信, not the document's 不信: the exact-phrase tier finds it
    assert phrase_worthy(fold("不信")) and fold("不信") in doc["phrase"]
    assert fold("一个字我都不信") in doc["phrase"].split("\n")
    assert keyword_document({}) == {}


def test_phrase_worthy_needs_two_ideographs_or_four_letters():
    assert phrase_worthy("不信") and not phrase_worthy("信")
    assert phrase_worthy("drake") and not phrase_worthy("cat")


# ----------------------------------------------------------------------------- fusion


def test_rrf_sums_weight_over_k_plus_rank():
    scores = rrf({"bm25": ["a", "b", "c"], "e5": ["b", "a"]}, k=60)
    assert scores["a"] == pytest.approx(1 / 61 + 1 / 62)
    assert scores["b"] == pytest.approx(1 / 62 + 1 / 61)
    assert scores["c"] == pytest.approx(1 / 63)
    assert rrf({}) == {} and rrf({"bm25": []}) == {}


def test_rrf_agreement_beats_a_single_first_place():
    scores = rrf({"bm25": ["solo", "both"], "e5": ["x", "both"], "use": ["y", "both"]})
    assert scores["both"] > scores["solo"]


def test_rrf_weights_and_k():
    weighted = rrf({"bm25": ["a"], "use": ["b"]}, weights={"bm25": 2.0})  # unnamed legs weigh 1
    assert weighted["a"] == pytest.approx(2 / 61) and weighted["b"] == pytest.approx(1 / 61)
    sharp = rrf({"l": ["a", "b"]}, k=1)
    assert sharp["a"] / sharp["b"] == pytest.approx(3 / 2)
