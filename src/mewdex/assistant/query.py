"""Reading a chat message as a search: chat phrasing stripped (by search's query cleaning, one
function for both), obvious filters parsed, follow-ups ("换一个", "another", "more") and the two
commands (issue 43: "热门"/"hot", the most used memes of the week; "随机"/"random", optionally with
``tag:NAME``, a collection or words, a random meme) recognised. Pure functions, no database."""

from __future__ import annotations

import re
from dataclasses import dataclass

from mewdex.search import tags as search_tags
from mewdex.search import text as search_text

FOLLOW_UPS = {
    "换一个",
    "换一张",
    "换个",
    "另一个",
    "另一张",
    "再来一个",
    "再来一张",
    "再来",
    "还有吗",
    "还有呢",
    "更多",
    "下一个",
    "下一张",
    "别的",
    "another",
    "another one",
    "more",
    "next",
    "one more",
    "something else",
    "show more",
    "more please",
    "next one",
    "different one",
}
#: Whole messages that ask for the account's most used memes of the week.
HOT_WORDS = {"热门", "热门表情", "热门表情包", "最热", "本周热门", "hot", "popular", "trending", "top", "/hot"}
#: A message that starts with one of these asks for a random meme (the rest narrows it: ``tag:NAME``,
#: a collection's name, words to search).
_RANDOM = re.compile(r"^\s*(?:随机(?!应变)(?:来?一[张个])?|随便来?一[张个]|/?random)(?=$|\s|[^a-z])", re.IGNORECASE)
_ANIMATED = re.compile(r"的?(?:动图|动态图)|\bgifs?\b|\banimated\b|\banimation\b", re.IGNORECASE)
_EDGE_PUNCT = " \t\n\"'“”‘’「」『』.,!?;:。，！？；：、…~～"
# A description longer than this keeps its "animated"/"gif" word: the word is part of what the picture
# shows ("animated line drawing of a cat …"), and the filter alone would change what the vectors read.
_SHORT_REQUEST_WORDS = 4


@dataclass
class ParsedMessage:
    """``query`` to search for ("" for a follow-up), ``animated`` (True or None), ``collection_id``
    (a collection named in the message) and ``follow_up`` (page on through the last result list)."""

    query: str
    animated: bool | None = None
    collection_id: str | None = None
    collection_name: str | None = None
    follow_up: bool = False


def _bare(text: str) -> str:
    return " ".join(text.strip(_EDGE_PUNCT).split()).lower()


def is_follow_up(text: str) -> bool:
    """Whether the whole message asks for more of the same ("换一个", "another one", "more!")."""
    return _bare(text) in FOLLOW_UPS


@dataclass(frozen=True)
class Command:
    """A chat command: ``kind`` ``hot`` or ``random``; ``rest`` the words after "随机"/"random"
    (``tag:猫``, a collection's name, words to search; "" for none)."""

    kind: str
    rest: str = ""


def command(text: str) -> Command | None:
    """The command the whole message is ("热门"/"hot", "随机 tag:猫"/"random tag:cat"), or None."""
    if _bare(text) in HOT_WORDS:
        return Command("hot")
    match = _RANDOM.match(text or "")
    if match is None:
        return None
    return Command("random", " ".join(text[match.end() :].strip(_EDGE_PUNCT).split()))


def strip_chat_phrasing(text: str, *, keep_if_empty: bool = True) -> str:
    """``text`` without the request around the query: search's own query cleaning
    (:func:`mewdex.search.text.strip_request`: "给我一张表示无语的表情包" → "无语"); ``tag:`` words
    (:func:`mewdex.search.tags.parse_query`) are kept whole for the search to read."""
    parsed = search_tags.parse_query(text)
    if not parsed.has_tags:
        return search_text.strip_request(text, keep_if_empty=keep_if_empty)
    rest = search_text.strip_request(parsed.text, keep_if_empty=False) if parsed.text else ""
    return f"{rest} {parsed.tag_words()}".strip()


def parse(text: str, collections: dict[str, str] | None = None) -> ParsedMessage:
    """Parse a chat message; ``collections`` maps a collection's name to its id (a name that occurs
    in the message, the longest first, becomes the collection filter and leaves the query)."""
    if is_follow_up(text):
        return ParsedMessage(query="", follow_up=True)
    query = text.strip()
    animated = None
    if _ANIMATED.search(query):
        animated = True
        without = _ANIMATED.sub(" ", query)
        if len(strip_chat_phrasing(without, keep_if_empty=False).split()) <= _SHORT_REQUEST_WORDS:
            query = without  # "来个猫的动图", "send me a cat gif": the word was the filter, not the subject
    collection_id = collection_name = None
    known = collections or {}
    for name in sorted(known, key=len, reverse=True):
        if len(name) >= 2 and name.lower() in query.lower():
            collection_id, collection_name = known[name], name
            # "摸鱼合集里的加班", "在摸鱼合集中", "cats from my-collection": the name and its little words go.
            query = re.sub(
                r"(?:(?:在|从)\s*)?" + re.escape(name) + r"(?:\s*(?:里面的|里的|中的|里|中|的))?",
                " ",
                query,
                count=1,
                flags=re.IGNORECASE,
            )
            query = re.sub(r"\b(?:from|in)\s*$", "", query.strip(), flags=re.IGNORECASE)
            break
    query = " ".join(query.split())
    stripped = (
        strip_chat_phrasing(query, keep_if_empty=animated is None and collection_id is None)
        if query.strip(_EDGE_PUNCT)
        else ""
    )
    # "来个动图" leaves nothing to search: the reply lists the newest memes that pass the filters.
    return ParsedMessage(
        query=stripped, animated=animated, collection_id=collection_id, collection_name=collection_name
    )
