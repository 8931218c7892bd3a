"""Reading a chat message as a search: chat phrasing stripped, obvious filters parsed, follow-ups
("换一个", "another", "more") recognised. Pure functions, no database."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

FOLLOW_UPS = {
    "换一个", "换一张", "换个", "另一个", "另一张", "再来一个", "再来一张", "再来", "还有吗", "还有呢", "更多",
    "下一个", "下一张", "别的", "another", "another one", "more", "next", "one more", "something else", "show more",
    "more please", "next one", "different one",
}
_ANIMATED = re.compile(r"动图|动态图|\bgifs?\b|\banimated\b|\banimation\b", re.IGNORECASE)
# Chat phrasing around the thing asked for ("来个……的表情", "send me a meme for …").
_CHAT_PREFIXES = re.compile(
    r"^(?:请|麻烦)?(?:给我|帮我)?(?:来|发|找|搜|要|整)?(?:一?个|一?张|点|些)?(?:(?:关于|表示)\s*)?"
    r"|^(?:(?:please|pls)\s+)?(?:can you\s+|could you\s+)?(?:send|give|show|find|get)(?:\s+me)?\s+"
    r"(?:(?:a|an|some|the)\s+)?(?:(?:meme|memes|gif|gifs|image|picture|sticker|reaction)\s+)?"
    r"(?:(?:for|about|of|that says|saying|with|when)\s+)?"
    r"|^(?:i need|i want|need|want)\s+(?:(?:a|an|some)\s+)?(?:(?:meme|memes|reaction)\s+)?(?:(?:for|about|of)\s+)?",
    re.IGNORECASE)
_CHAT_SUFFIXES = re.compile(
    r"(?:的)?(?:表情包?|梗图|图片?|动图)(?:吧|呗|啊|呀)?$|(?:的)$"
    r"|\s+(?:meme|memes|reaction|gif|please|pls)$",
    re.IGNORECASE)
_EDGE_PUNCT = " \t\n\"'“”‘’「」『』.,!?;:。，！？；：、…~～"


@dataclass
class ParsedMessage:
    """``query`` to search for ("" for a follow-up), ``animated`` (True or None), ``collection_id``
    (a collection named in the message) and ``follow_up`` (page on through the last result list)."""

    query: str
    animated: bool | None = None
    collection_id: str | None = None
    collection_name: str | None = None
    follow_up: bool = False
    notes: list[str] = field(default_factory=list)


def _bare(text: str) -> str:
    return " ".join(text.strip(_EDGE_PUNCT).split()).lower()


def is_follow_up(text: str) -> bool:
    """Whether the whole message asks for more of the same ("换一个", "another one", "more!")."""
    return _bare(text) in FOLLOW_UPS


def strip_chat_phrasing(text: str) -> str:
    """``text`` without the request around the query ("来个摸鱼的表情" → "摸鱼"; "send me a meme for
    monday mornings" → "monday mornings"); the text itself when nothing would remain."""
    query = text.strip(_EDGE_PUNCT)
    for _ in range(3):
        before = query
        query = _CHAT_PREFIXES.sub("", query, count=1).strip(_EDGE_PUNCT)
        query = _CHAT_SUFFIXES.sub("", query, count=1).strip(_EDGE_PUNCT)
        if query == before:
            break
    return query or text.strip()


def parse(text: str, collections: dict[str, str] | None = None) -> ParsedMessage:
    """Parse a chat message; ``collections`` maps a collection's name to its id (a name that occurs
    in the message, the longest first, becomes the collection filter and leaves the query)."""
    if is_follow_up(text):
        return ParsedMessage(query="", follow_up=True)
    query = text.strip()
    animated = None
    if _ANIMATED.search(query):
        animated = True
        query = _ANIMATED.sub(" ", query)
    collection_id = collection_name = None
    for name in sorted(collections or {}, key=len, reverse=True):
        if len(name) >= 2 and name.lower() in query.lower():
            collection_id, collection_name = collections[name], name
            query = re.sub(re.escape(name), " ", query, count=1, flags=re.IGNORECASE)
            query = re.sub(r"(?:在|从)?\s*(?:collection|收藏夹|合集)?\s*(?:里|中)?的?", "", query) \
                if not query.strip(_EDGE_PUNCT) else query
            break
    query = " ".join(query.split())
    stripped = strip_chat_phrasing(query) if query.strip(_EDGE_PUNCT) else ""
    # "来个动图" leaves nothing to search: ask for anything animated from the text itself.
    return ParsedMessage(query=stripped, animated=animated, collection_id=collection_id,
                         collection_name=collection_name)
