"""Reading chat messages as searches (mewdex.assistant.query): chat phrasing stripped, filters and
follow-ups recognised, meme phrases that look like phrasing left alone."""

from __future__ import annotations

import pytest

from mewdex.assistant import query
from mewdex.assistant.query import is_follow_up, parse, strip_chat_phrasing


@pytest.mark.parametrize(
    "message,query",
    [
        ("来个摸鱼的表情", "摸鱼"),
        ("来个摸鱼的表情包", "摸鱼"),
        ("给我一个加班的表情", "加班"),
        ("来张不屑的图", "不屑"),
        ("来个一个字我都不信的表情", "一个字我都不信"),
        ("send me a meme for monday mornings", "monday mornings"),
        ("can you find me a meme about cats please", "cats"),
        ("send me a meme for 一个字我都不信", "一个字我都不信"),
        ("给我一张表示无语的表情包", "无语"),
        ("来一张表示无语的表情", "无语"),
        ("a meme about mondays", "mondays"),
        # meme phrases that only look like chat phrasing stay whole
        ("来日方长", "来日方长"),
        ("给我滚", "给我滚"),
        ("不值得同情的", "不值得同情的"),
        ("change my mind", "change my mind"),
    ],
)
def test_chat_phrasing_is_stripped(message, query):
    assert strip_chat_phrasing(message) == query


@pytest.mark.parametrize("message", ["换一个", "另一个", "another", "Another one!", "more", "再来一个。"])
def test_follow_ups(message):
    assert is_follow_up(message) and parse(message).follow_up


def test_not_follow_ups():
    assert not is_follow_up("another day another dollar") and not is_follow_up("更多的钱")


def test_animated_and_collection_filters():
    gif = parse("来个cat的动图")
    assert (gif.query, gif.animated) == ("cat", True)
    assert parse("a dancing cat gif").animated is True
    only_filter = parse("发个动图")
    assert (only_filter.query, only_filter.animated) == ("", True)
    named = parse("摸鱼合集里的加班", {"摸鱼合集": "c1", "合集": "c2"})
    assert (named.collection_id, named.query) == ("c1", "加班")
    assert parse("cats from Work Memes", {"work memes": "c3"}).query == "cats"


@pytest.mark.parametrize(
    ("message", "query"),
    [
        # 表示 is part of the description, not chat phrasing (bench/assistant.py lost q057 to it)
        ("来个表示对方说的话完全不可信的表情", "表示对方说的话完全不可信"),
        # a closing quote that closes a quotation stays; the apostrophe inside opens nothing
        ("send me a meme for news anchor screaming 'we'll do it live'", "news anchor screaming 'we'll do it live'"),
        ("I need a reaction for “do it live”!", "do it live"),  # quotes around the whole query go
        ("来个他说“我不信”的表情", "他说“我不信”"),
        ("can you find me a meme about it's fine'", "it's fine"),
    ],
)
def test_the_description_survives_the_chat_phrasing(message, query):
    assert parse(message).query == query


def test_a_long_description_keeps_its_animated_word_and_still_filters():
    long = parse("send me a meme for animated line drawing of a cat slapping a table like a drummer")
    assert (long.query, long.animated) == ("animated line drawing of a cat slapping a table like a drummer", True)
    short = parse("send me an animated dancing cat")
    assert (short.query, short.animated) == ("dancing cat", True)


def test_the_assistant_and_search_clean_queries_with_one_function():
    from mewdex.search.text import clean_query

    for message in ("给我一张表示无语的表情包", "send me a meme for monday mornings", "来个摸鱼的表情"):
        assert clean_query(message) == parse(message).query == clean_query(parse(message).query)


@pytest.mark.parametrize(
    ("message", "kind", "rest"),
    [
        ("热门", "hot", ""),
        ("hot!", "hot", ""),
        ("随机", "random", ""),
        ("随机 tag:猫", "random", "tag:猫"),
        ("random tag:cat", "random", "tag:cat"),
        ("随机来一张猫", "random", "猫"),
        ("/random 摸鱼合集", "random", "摸鱼合集"),
    ],
)
def test_commands_are_read(message, kind, rest):
    assert query.command(message) == query.Command(kind, rest)


@pytest.mark.parametrize("message", ["randomly", "随机应变", "hot dog", "热门电影里的猫", "another"])
def test_other_messages_are_no_command(message):
    assert query.command(message) is None
