"""The assistant's tools, each declared once: the chat model (:mod:`mewdex.assistant.agent`) and the
MCP server (:mod:`mewdex.mcp_server`) are both built from :data:`CATALOGUE`.

A :class:`Tool` is a name, a description, a pydantic arguments model (both surfaces take their
schema, defaults and bounds from it), its access (``read`` or ``write``: MCP asks the token for
that scope), where it is offered (``surfaces``), an output model (MCP's structured output) and a
handler ``handler(context, args)`` over :mod:`mewdex.assistant.tools`. :func:`find` picks a tool
by name for a surface; :func:`call` validates the arguments, runs the handler in the context's
scope and turns every expected failure into a :class:`ToolFailure` (``code``, ``message``) that
each surface reports as a tool error (never an exception to the chat model).
"""

from __future__ import annotations

import base64
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator
from sqlalchemy.orm import Session, sessionmaker

from mewdex.assistant import tools
from mewdex.db.models import ScopeContext
from mewdex.dto.errors import DomainError
from mewdex.inference.errors import BackendUnavailable
from mewdex.library.images import ImageError

SHOW_PER_CALL = 5  # show_memes: ids per call

Surface = Literal["agent", "mcp"]


class ToolFailure(Exception):
    """A tool call that failed in an expected way: bad arguments (``invalid_request``), an unknown
    tool, or the service's own code (``not_found``, ``image_corrupt``, ``backend_unavailable`` …)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code, self.message = code, message


@dataclass(frozen=True)
class ToolContext:
    """Who a tool runs for: the caller's scope (never taken from the arguments) and, for the chat
    model only, ``show`` (delivers memes to the reply: ``show(meme_ids) -> {"shown", …}``)."""

    sessions: sessionmaker[Session]
    scope: ScopeContext
    show: Callable[[list[str]], dict[str, Any]] | None = None


@dataclass(frozen=True)
class Pictured:
    """A result with a picture: ``value`` is the structured result; ``data``/``format`` the
    picture (``format`` ``webp``, ``png`` …), or None when there is none. MCP sends both; the chat
    model gets ``value`` only."""

    value: dict[str, Any]
    data: bytes | None
    format: str


# ---------------------------------------------------------------------------- arguments


class Arguments(BaseModel):
    """Base of the arguments models: unknown arguments are refused; an argument sent as null is one
    not sent (its default; a required one is missing): chat models send null for the optional
    arguments they do not use (``"n": null``)."""

    model_config = ConfigDict(extra="forbid")

    @model_validator(mode="before")
    @classmethod
    def _null_is_absent(cls, data: Any) -> Any:
        return {k: v for k, v in data.items() if v is not None} if isinstance(data, dict) else data


def _n() -> Any:
    return Field(tools.DEFAULT_RESULTS, ge=1, le=tools.MAX_RESULTS, description="how many results")


_MEME_ID = "a meme id that a tool returned"


class SearchMemesArgs(Arguments):
    query: str = Field(description="a few words: feeling, situation, text (any language)")
    n: int = _n()
    animated: bool | None = Field(None, description="true: only animated memes (GIFs, clips, stickers)")
    collection: str | None = Field(None, description="only this collection (name or id)")


class SearchByImageArgs(Arguments):
    image_base64: str = Field(
        description="the image, base64-encoded: PNG, JPEG, GIF, WEBP, AVIF, HEIC, an MP4/WebM clip or a TGS sticker"
    )
    n: int = _n()


class MoreLikeThisArgs(Arguments):
    meme_id: str = Field(description=_MEME_ID)
    n: int = _n()


class GetMemeArgs(Arguments):
    meme_id: str = Field(description=_MEME_ID)


class ShowMemesArgs(Arguments):
    meme_ids: list[str] = Field(min_length=1, max_length=SHOW_PER_CALL, description="meme ids, best first")


class NoArgs(Arguments):
    pass


class CreateCollectionArgs(Arguments):
    name: str = Field(description="the new collection's name")


class MakeMemeArgs(Arguments):
    caption: str = Field(description="the new text to write on the picture (a line break: one line per text block)")
    template: str | None = Field(None, description=f"{_MEME_ID}: the picture to re-caption")
    description: str | None = Field(
        None, description="without template: the picture to find and re-caption (panda head, drake, grumpy cat)"
    )


class AddToCollectionArgs(Arguments):
    collection: str = Field(description="a collection's name or id (a new name creates it)")
    meme_ids: list[str] = Field(min_length=1, max_length=tools.MAX_ADD_IDS, description="meme ids")


# ---------------------------------------------------------------------------- outputs


class Hit(BaseModel):
    id: str
    display_name: str
    media_url: str
    score: float
    snippet: str
    confidence: Literal["high", "medium", "low"] | None = Field(None, description="text search only")


class MemeFacts(BaseModel):
    id: str
    display_name: str
    media_url: str
    extension: str
    animated: bool
    context: dict[str, Any] = Field(description="title, ocr_text, description, emotions, tags, usage, labels")
    collections: list[str]


class CollectionSize(BaseModel):
    id: str
    name: str
    count: int


class CollectionAdded(BaseModel):
    collection_id: str
    name: str
    added: int


class MemeMade(BaseModel):
    id: str
    display_name: str
    media_url: str
    template_id: str
    status: str = Field(description="created, or duplicate (the same picture was already in the library)")


class CollectionCreated(BaseModel):
    collection_id: str
    name: str


# ---------------------------------------------------------------------------- tools


@dataclass(frozen=True)
class Tool:
    """One tool (module doc). ``attachment``: the argument that, in chat, carries the image the user
    attached to the message (the model does not write it; the tool is offered only with an image).
    ``output``: the result's type (a model, or a list of one) for MCP's output schema."""

    name: str
    description: str
    args: type[Arguments]
    access: Literal["read", "write"]
    handler: Callable[[ToolContext, Any], Any]
    output: Any = None
    surfaces: frozenset[Surface] = field(default_factory=lambda: frozenset({"agent", "mcp"}))
    attachment: str | None = None


def _search_memes(ctx: ToolContext, a: SearchMemesArgs) -> list[dict[str, Any]]:
    return tools.search_memes(ctx.sessions, ctx.scope, a.query, a.n, a.animated, a.collection)


def _search_by_image(ctx: ToolContext, a: SearchByImageArgs) -> list[dict[str, Any]]:
    return tools.search_by_image(ctx.sessions, ctx.scope, a.image_base64, a.n)


def _more_like_this(ctx: ToolContext, a: MoreLikeThisArgs) -> list[dict[str, Any]]:
    return tools.more_like_this(ctx.sessions, ctx.scope, a.meme_id, a.n)


def _get_meme(ctx: ToolContext, a: GetMemeArgs) -> Pictured:
    return Pictured(*tools.get_meme(ctx.sessions, ctx.scope, a.meme_id))


def _show_memes(ctx: ToolContext, a: ShowMemesArgs) -> dict[str, Any]:
    if ctx.show is None:
        raise ToolFailure("invalid_request", "memes can only be shown in a chat")
    return ctx.show(a.meme_ids)


def _make_meme(ctx: ToolContext, a: MakeMemeArgs) -> Pictured:
    return Pictured(*tools.make_meme(ctx.sessions, ctx.scope, a.caption, a.template, a.description))


def _list_collections(ctx: ToolContext, _a: NoArgs) -> list[dict[str, Any]]:
    return tools.list_collections(ctx.sessions, ctx.scope)


def _create_collection(ctx: ToolContext, a: CreateCollectionArgs) -> dict[str, Any]:
    return tools.create_collection(ctx.sessions, ctx.scope, a.name)


def _add_to_collection(ctx: ToolContext, a: AddToCollectionArgs) -> dict[str, Any]:
    return tools.add_to_collection(ctx.sessions, ctx.scope, a.collection, a.meme_ids)


CATALOGUE: tuple[Tool, ...] = (
    Tool(
        "search_memes",
        "Search the user's memes by what they should express, in any language (\"I don't believe a "
        'word", "monday morning"). Returns id, display_name, snippet (text in the image), score and '
        "confidence (high, medium, low), best first.",
        SearchMemesArgs,
        "read",
        _search_memes,
        list[Hit],
    ),
    Tool(
        "search_by_image",
        "Find the memes that look most like an image (in a chat: the image the user attached to the "
        "message); the score is the cosine similarity.",
        SearchByImageArgs,
        "read",
        _search_by_image,
        list[Hit],
        attachment="image_base64",
    ),
    Tool(
        "more_like_this",
        "Find memes that look like one of the user's memes (visual neighbours).",
        MoreLikeThisArgs,
        "read",
        _more_like_this,
        list[Hit],
    ),
    Tool(
        "get_meme",
        "Read one meme: name, text in the image, description, emotions, tags, usage, collections "
        "(and, over MCP, its picture).",
        GetMemeArgs,
        "read",
        _get_meme,
        MemeFacts,
    ),
    Tool(
        "show_memes",
        f"Show memes to the user as cards (1-{SHOW_PER_CALL} ids, best first). This is how the user "
        "gets memes: memes you only mention in text are not shown.",
        ShowMemesArgs,
        "read",
        _show_memes,
        surfaces=frozenset({"agent"}),
    ),
    Tool(
        "make_meme",
        "Make a meme: re-caption one of the user's memes — a template id, or a description of the "
        "picture to search for — with new text, saved as a new meme of the library (the original is "
        "kept). Returns the new meme's id (show it with show_memes) and, over MCP, its picture.",
        MakeMemeArgs,
        "write",
        _make_meme,
        MemeMade,
    ),
    Tool(
        "list_collections",
        "The user's collections with their sizes.",
        NoArgs,
        "read",
        _list_collections,
        list[CollectionSize],
    ),
    Tool(
        "create_collection",
        "Create an empty collection.",
        CreateCollectionArgs,
        "write",
        _create_collection,
        CollectionCreated,
    ),
    Tool(
        "add_to_collection",
        f"Add memes (1-{tools.MAX_ADD_IDS} ids) to a collection (name or id; a new name creates it).",
        AddToCollectionArgs,
        "write",
        _add_to_collection,
        CollectionAdded,
    ),
)
BY_NAME: dict[str, Tool] = {t.name: t for t in CATALOGUE}


def offered(surface: Surface) -> list[Tool]:
    """The catalogue's tools for one surface, in catalogue order."""
    return [t for t in CATALOGUE if surface in t.surfaces]


def find(name: str, surface: Surface) -> Tool:
    """The tool ``name`` offered on ``surface``. Raises :class:`ToolFailure` ``invalid_request``."""
    tool = BY_NAME.get(name)
    if tool is None or surface not in tool.surfaces:
        raise ToolFailure("invalid_request", f"there is no tool {name!r}")
    return tool


def call(tool: Tool, context: ToolContext, arguments: dict[str, Any]) -> Any:
    """Run ``tool`` with raw ``arguments`` (validated by its model) in ``context``'s scope: the
    handler's result (:class:`Pictured` for a picture). Raises :class:`ToolFailure`:
    ``invalid_request`` (arguments the model refuses) or the service's code."""
    try:
        args = tool.args.model_validate(arguments)
    except ValidationError as exc:
        raise ToolFailure("invalid_request", _problems(tool.name, exc)) from None
    try:
        return tool.handler(context, args)
    except (DomainError, ImageError) as exc:
        raise ToolFailure(exc.code, exc.message) from None
    except BackendUnavailable as exc:
        raise ToolFailure("backend_unavailable", str(exc)) from None


def attach(tool: Tool, arguments: dict[str, Any], image: bytes | None) -> dict[str, Any]:
    """``arguments`` with the chat's attached ``image`` in the tool's ``attachment`` argument (what
    the model sent there is ignored). Raises :class:`ToolFailure` when no image is attached."""
    if tool.attachment is None:
        return arguments
    if image is None:
        raise ToolFailure("invalid_request", "no image is attached to this message")
    return {**arguments, tool.attachment: base64.b64encode(image).decode()}


def _problems(name: str, exc: ValidationError) -> str:
    """A validation error in one line: ``wrong arguments for search_memes: n: Input should be …``."""
    parts = [f"{'.'.join(str(p) for p in e['loc']) or 'arguments'}: {e['msg']}" for e in exc.errors()[:5]]
    return f"wrong arguments for {name}: " + "; ".join(parts)
