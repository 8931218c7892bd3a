"""The assistant with a chat model: a tool-calling loop over :mod:`mewdex.assistant.tools`, the
context window (``context_base_idx`` + ``context_summary``) and the auto-title.

The model is the scope owner's ``openai_compatible`` connector with a ``chat_model``
(:func:`chat_model`); without one the assistant is retrieval-only (:mod:`.retrieval`).

One reply (:class:`Agent`, run in a thread of its own; :func:`mewdex.assistant.chat.stream`
consumes its :attr:`Agent.events` and sets :attr:`Agent.stop` on cancel):

1. the context: the system prompt, the folded summary of older turns, and the messages from
   ``context_base_idx`` on; past ``MEWDEX_ASSISTANT_CONTEXT_MESSAGES`` messages the older half is
   folded into ``context_summary`` by the model first (:meth:`Agent.fold`);
2. up to ``MEWDEX_ASSISTANT_MAX_STEPS`` streamed model calls; the last one may not call tools
   (``tool_choice`` ``none``). Tool calls
   run in the caller's scope; ``show_memes`` delivers memes (``meme`` events; they become the reply's
   ``artifact_refs``); text is streamed as ``delta`` events;
3. every model call is one :func:`~mewdex.providers.metering.metered_call` (operation
   ``provider.chat``, usage kind ``chat``, units with the tokens and ``conversation_id``): refused
   with ``quota_exceeded`` before any call once the owner's monthly budget is spent.

A failed or refused call ends the loop with :attr:`Agent.error` (a ``DomainError``); the caller then
answers retrieval-only with a note (:func:`fallback_note`).
"""

from __future__ import annotations

import json
import logging
import queue
import threading
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, cast
from uuid import UUID

from openai.types.chat import ChatCompletionMessageParam
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from mewdex.assistant import conversations, retrieval, tools
from mewdex.assistant.errors import AssistantError
from mewdex.config import get_settings
from mewdex.db.models import Message, ScopeContext
from mewdex.dto.errors import DomainError
from mewdex.dto.i18n import translate
from mewdex.dto.search import SearchHit
from mewdex.inference.errors import BackendUnavailable
from mewdex.library.images import ImageError
from mewdex.providers import metering, openai_compat
from mewdex.providers.errors import ProviderError
from mewdex.search import service as search_service

log = logging.getLogger(__name__)

SHOW_PER_CALL = 5
SHOW_PER_REPLY = 10
SEARCH_DEFAULT_N = 8
TITLE_MAX_TOKENS = 32
SUMMARY_MAX_TOKENS = 400
# Text the model gets back from a tool is cut here (a long context field must not eat the window).
TOOL_RESULT_CHARS = 6000

SYSTEM_PROMPT = (
    "You are mewdex, the assistant of the user's own meme library. Find the memes that fit what the "
    "user wants to say. Call search_memes with a few words of the feeling or situation (in the "
    "user's language; try other words or English when nothing fits), use get_meme to read a "
    "candidate's text and description when unsure, then call show_memes with the 1-3 best ids and "
    "say in one or two short sentences, in the user's language, why they fit. When the user asks for "
    'another one ("换一个", "another", "more"), show memes not shown before (earlier replies list '
    "what they showed). Use only ids that a tool returned. Each search result has a confidence: when "
    "none is high, nothing matches well; say so plainly instead of claiming a fit, and suggest what "
    "would help (a vision model under Connectors describes what memes mean; or uploading such memes). "
    "Manage collections only when asked (list_collections, create_collection, add_to_collection)."
)
FINAL_STEP_PROMPT = "No more tool calls are possible: answer the user now with what you have."
SUMMARY_PROMPT = (
    "Summarise the conversation below between a user and a meme assistant in at most 120 words, "
    "in the user's language: what the user was looking for, their preferences, the memes shown "
    "(keep their ids) and anything still open. Answer with the summary only."
)
TITLE_PROMPT = (
    "Write a short title (at most 6 words, or 12 characters of Chinese/Japanese) for a chat that "
    "starts with the user's message below. Use the language of the message ({language}). Answer "
    "with the title only, no quotes."
)


def _schema(properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {"type": "object", "properties": properties, "required": required, "additionalProperties": False}


_N = {"type": "integer", "minimum": 1, "maximum": tools.MAX_RESULTS, "description": "how many results"}
_ID = {"type": "string", "description": "a meme id that a tool returned"}
_IDS = {"type": "array", "items": _ID, "minItems": 1}
TOOL_SPECS: dict[str, tuple[str, dict[str, Any]]] = {
    "search_memes": (
        "Search the user's memes by what they should express (any language). Returns id, "
        "display_name, snippet (text in the image), score and confidence (high, medium, low), best first.",
        _schema(
            {
                "query": {"type": "string", "description": "a few words: feeling, situation, text"},
                "n": _N,
                "animated": {"type": "boolean", "description": "true: only GIFs/animations"},
                "collection": {"type": "string", "description": "only this collection (name or id)"},
            },
            ["query"],
        ),
    ),
    "search_by_image": (
        "Find the memes that look most like the image the user attached to this message.",
        _schema({"n": _N}, []),
    ),
    "more_like_this": (
        "Find memes that look like one meme (visual neighbours).",
        _schema({"meme_id": _ID, "n": _N}, ["meme_id"]),
    ),
    "get_meme": (
        "Read one meme: name, text in the image, description, emotions, tags, usage, collections.",
        _schema({"meme_id": _ID}, ["meme_id"]),
    ),
    "show_memes": (
        f"Show memes to the user as cards (1-{SHOW_PER_CALL} ids, best first). This is how the user "
        "gets memes: memes you only mention in text are not shown.",
        _schema({"meme_ids": {**_IDS, "maxItems": SHOW_PER_CALL}}, ["meme_ids"]),
    ),
    "list_collections": ("The user's collections with their sizes.", _schema({}, [])),
    "create_collection": ("Create an empty collection.", _schema({"name": {"type": "string"}}, ["name"])),
    "add_to_collection": (
        "Add memes to a collection (name or id; a new name creates it).",
        _schema({"collection": {"type": "string"}, "meme_ids": {**_IDS, "maxItems": 100}}, ["collection", "meme_ids"]),
    ),
}


def tool_definitions(*, with_image: bool) -> list[dict[str, Any]]:
    """The tools in the Chat Completions shape (``search_by_image`` only when an image is attached)."""
    return [
        {"type": "function", "function": {"name": name, "description": text, "parameters": params}}
        for name, (text, params) in TOOL_SPECS.items()
        if with_image or name != "search_by_image"
    ]


def chat_model(
    sessions: sessionmaker[Session], scope: ScopeContext
) -> tuple[openai_compat.ModelClient | None, str | None]:
    """The scope's chat model and None, or ``(None, None)`` when none is configured (retrieval-only),
    or ``(None, code)`` when one is configured but cannot be used (``connector_unverified``,
    ``secret_undecryptable``: the reply says so)."""
    try:
        with sessions.begin() as session:
            return openai_compat.chat_client(session, scope, "chat"), None
    except ProviderError as exc:
        if exc.code == "connector_unavailable":
            return None, None
        return None, exc.code


def fallback_note(code: str, lang: str, *, search: bool = True) -> str:
    """The line a reply starts with when the chat model could not answer it (``search``: a plain
    search answers instead), or ends with when it failed after showing memes."""
    key = "assistant.fallback." + ("quota" if code == "quota_exceeded" else "failed") + ("_search" if search else "")
    return translate(lang, key, code=code)


@dataclass
class Usage:
    """Tokens and cost (CNY) of one reply's model calls, and the model profile."""

    model_profile: str
    tokens_in: int = 0
    tokens_out: int = 0
    cost: Decimal = Decimal(0)
    calls: int = 0

    def add(self, model: openai_compat.ModelClient, units: dict[str, Any]) -> None:
        self.tokens_in += int(units.get("input_tokens") or 0)
        self.tokens_out += int(units.get("output_tokens") or 0)
        self.cost += model.price.cost(units)
        self.calls += 1


def _estimate_tokens(text: str) -> int:
    return max(1, len(text) // 4) if text else 0


@dataclass
class _Step:
    text: str = ""
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    refusal: str | None = None


def _history_message(payload: dict[str, Any], refs: list[dict[str, Any]] | None) -> dict[str, Any] | None:
    """A stored message as the model sees it: the text, plus which memes a reply showed (so that
    "another one" can avoid them) or that the user attached an image."""
    role = payload.get("role")
    content = str(payload.get("content") or "")
    if role == "user":
        if payload.get("attachments"):
            content = (content + "\n" if content else "") + "[the user attached an image]"
        return {"role": "user", "content": content}
    if role == "assistant":
        if refs:
            shown = "; ".join(f"{r.get('meme_id')} “{r.get('display_name') or ''}”" for r in refs)
            content = (content + "\n" if content else "") + f"[memes shown: {shown}]"
        return {"role": "assistant", "content": content} if content else None
    return None


class Agent:
    """One reply by the chat model (module doc). ``events`` receives ``("delta", {"text"})``,
    ``("meme", SearchHit)`` and finally ``("end", None)``; set ``stop`` to end it early (it stops
    between streamed chunks and tool calls). After the end: ``usage``, ``error`` (a DomainError or
    None), ``capped`` (the step cap ended it), ``steps``, ``tools_called``."""

    def __init__(
        self,
        sessions: sessionmaker[Session],
        scope: ScopeContext,
        conversation_id: UUID,
        message_idx: int,
        model: openai_compat.ModelClient,
        *,
        image: bytes | None = None,
        run_key: str = "",
    ) -> None:
        self.sessions, self.scope, self.conversation_id = sessions, scope, conversation_id
        self.message_idx, self.model, self.image = message_idx, model, image
        self.run_key = run_key or conversation_id.hex
        self.events: queue.Queue[tuple[str, Any]] = queue.Queue()
        self.stop = threading.Event()
        self.usage = Usage(model.model_profile)
        self.error: DomainError | None = None
        self.capped = False
        self.tools_called: list[str] = []
        self.steps = 0  # model calls of the loop (a summary call is not one)
        self.shown: list[str] = []
        self._text = ""
        self._calls = 0
        self._thread: threading.Thread | None = None
        self._open_stream: Any = None

    # ------------------------------------------------------------------ running

    def start(self) -> None:
        self._thread = threading.Thread(target=self.run, name="assistant-agent", daemon=True)
        self._thread.start()

    def join(self, timeout: float | None = None) -> None:
        if self._thread is not None:
            self._thread.join(timeout)

    def abort(self) -> None:
        """Stop now: set ``stop`` and cut the model's stream being read (a stalled model does not
        hold the stop up)."""
        self.stop.set()
        stream, self._open_stream = self._open_stream, None
        if stream is not None:
            try:
                stream.close()
            except Exception:  # noqa: BLE001 — closing from another thread is best effort
                pass

    def run(self) -> None:
        """The whole reply; never raises (failures end up in ``error``)."""
        try:
            self._loop()
        except DomainError as exc:
            self.error = exc
        except Exception as exc:  # noqa: BLE001 — a bug must not leave the consumer waiting
            log.exception("assistant agent failed")
            self.error = ProviderError("provider_failed", f"the assistant failed ({type(exc).__name__})")
        finally:
            self.events.put(("end", None))

    def _loop(self) -> None:
        settings = get_settings()
        messages = self.context()
        tools_offered = tool_definitions(with_image=self.image is not None)
        steps = settings.assistant_max_steps
        for step in range(1, steps + 1):
            if self.stop.is_set():
                return
            last = step == steps
            if last and steps > 1:
                messages.append({"role": "system", "content": FINAL_STEP_PROMPT})
            self.steps = step
            result = self._model_step(messages, tools_offered, purpose="reply", tool_choice="none" if last else None)
            if self.stop.is_set():
                return
            if result.refusal and not result.text:
                self._say(result.refusal)
            if not result.tool_calls:
                return
            if last:
                self.capped = True
                return
            messages.append({"role": "assistant", "content": result.text or None, "tool_calls": result.tool_calls})
            for call in result.tool_calls:
                if self.stop.is_set():
                    return
                name = call["function"]["name"]
                self.tools_called.append(name)
                messages.append(
                    {
                        "role": "tool",
                        "tool_call_id": call["id"],
                        "content": self._tool(name, call["function"]["arguments"]),
                    }
                )

    # ------------------------------------------------------------------ context

    def context(self) -> list[dict[str, Any]]:
        """The messages sent to the model: system prompt, folded summary, the window up to this
        reply's user message (folding older ones first when the window is long)."""
        with self.sessions.begin() as session:
            conversation = conversations.get(session, self.scope, self.conversation_id, include_deleted=True)
            base, summary = conversation.context_base_idx, conversation.context_summary
            rows = session.execute(
                select(Message.idx, Message.payload, Message.artifact_refs)
                .where(
                    Message.conversation_id == self.conversation_id,
                    Message.idx >= base,
                    Message.idx <= self.message_idx,
                )
                .order_by(Message.idx)
            ).all()
        window = [(idx, m) for idx, payload, refs in rows if (m := _history_message(payload, refs)) is not None]
        limit = get_settings().assistant_context_messages
        if len(window) > limit:
            keep = max(2, limit // 2)
            old, window = window[:-keep], window[-keep:]
            summary = self.fold(base, summary, [m for _i, m in old], window[0][0]) or summary
        messages: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM_PROMPT}]
        if summary:
            messages.append({"role": "system", "content": "Summary of the earlier conversation:\n" + summary})
        messages.extend(m for _i, m in window)
        if self.image is not None:
            messages[-1] = {
                **messages[-1],
                "content": messages[-1]["content"] + "\n(search_by_image searches with that image)",
            }
        return messages

    def fold(self, base: int, summary: str | None, old: list[dict[str, Any]], new_base: int) -> str | None:
        """Fold ``old`` (and the previous ``summary``) into a new summary by the model and move
        ``context_base_idx`` to ``new_base`` — unless the window moved meanwhile ("new topic", a
        clear). The new summary, or None when the model could not make one (the reply goes on with
        the recent window only)."""
        transcript = "\n".join(f"{m['role']}: {m['content']}" for m in old)
        if summary:
            transcript = f"Earlier summary:\n{summary}\n\n{transcript}"
        try:
            result = self._model_step(
                [{"role": "system", "content": SUMMARY_PROMPT}, {"role": "user", "content": transcript}],
                None,
                purpose="summary",
                stream=False,
                max_tokens=SUMMARY_MAX_TOKENS,
            )
        except DomainError as exc:
            log.info("context summary failed: %s", exc.code)
            return None
        text = result.text.strip()
        if not text:
            return None
        with self.sessions.begin() as session:
            conversation = conversations.get(session, self.scope, self.conversation_id, lock=True, include_deleted=True)
            if conversation.context_base_idx == base:
                conversation.context_summary = text
                conversation.context_base_idx = new_base
        return text

    # ------------------------------------------------------------------ model calls

    def _model_step(
        self,
        messages: list[dict[str, Any]],
        tool_defs: list[dict[str, Any]] | None,
        *,
        purpose: str,
        stream: bool = True,
        max_tokens: int | None = None,
        tool_choice: str | None = None,
    ) -> _Step:
        """One metered model call (streamed text goes to ``events`` as it comes). ``tool_choice``
        ``none``: the tools stay declared (the history holds calls to them) but may not be called."""
        self._calls += 1
        model = self.model
        client = model.client
        assert client is not None  # an openai_compatible connection always has its SDK client
        extra: dict[str, Any] = {}
        if tool_defs:
            extra["tools"] = tool_defs
            if tool_choice:
                extra["tool_choice"] = tool_choice
        if max_tokens:
            extra["max_tokens"] = max_tokens
        sdk_messages = cast("list[ChatCompletionMessageParam]", messages)  # plain dicts of that shape

        def call() -> metering.CallResult:
            if not stream:
                answer = client.chat.completions.create(model=model.model, messages=sdk_messages, **extra)
                message = answer.choices[0].message
                step = _Step(text=message.content or "", refusal=getattr(message, "refusal", None))
                return metering.CallResult(step, self._units(openai_compat.usage_units(answer.usage), purpose))
            step, usage, sent = _Step(), None, ""
            try:
                with client.chat.completions.stream(
                    model=model.model, messages=sdk_messages, stream_options={"include_usage": True}, **extra
                ) as events:
                    self._open_stream = events
                    for event in events:
                        if self.stop.is_set():
                            break
                        if event.type == "content.delta" and event.delta:
                            sent += event.delta
                            self._say(event.delta)
                        elif event.type == "chunk" and event.chunk.usage is not None:
                            usage = event.chunk.usage
                    self._open_stream = None
                    snapshot = events.current_completion_snapshot
            except Exception:
                if not self.stop.is_set():
                    raise
                snapshot = None  # stopped: the connection was cut under the stream
            if snapshot is not None and snapshot.choices:
                message = snapshot.choices[0].message
                step.text = message.content or ""
                step.refusal = getattr(message, "refusal", None)
                step.tool_calls = [
                    {
                        "id": c.id,
                        "type": "function",
                        "function": {"name": c.function.name, "arguments": c.function.arguments or "{}"},
                    }
                    for c in (message.tool_calls or [])
                    if c.type == "function"
                ]
            if usage is not None:
                units = openai_compat.usage_units(usage)
            else:  # stopped before the usage chunk: an estimate, marked as one
                prompt = "".join(str(m.get("content") or "") for m in messages)
                units = {
                    "input_tokens": _estimate_tokens(prompt),
                    "cached_input_tokens": 0,
                    "output_tokens": _estimate_tokens(sent),
                    "images": 0,
                    "requests": 1,
                    "estimated": True,
                }
            return metering.CallResult(step, self._units(units, purpose))

        result = metering.metered_call(
            self.sessions,
            self.scope,
            model,
            call,
            operation="provider.chat",
            idempotency_key=f"chat:{self.run_key}:{self._calls}",
            kind="chat",
            event="chat",
            resource_id=str(self.conversation_id),
        )
        self.usage.add(model, result.units)
        return result.value

    def _units(self, units: dict[str, Any], purpose: str) -> dict[str, Any]:
        return {**units, "purpose": purpose, "conversation_id": str(self.conversation_id)}

    def _say(self, text: str) -> None:
        if not self._text and not text.strip():
            return
        self._text += text
        self.events.put(("delta", {"text": text}))

    # ------------------------------------------------------------------ tools

    def _tool(self, name: str, arguments: str) -> str:
        """Run one tool call; the result (or ``{"error": {"code", "message"}}``) as JSON text."""
        try:
            args = json.loads(arguments or "{}")
            if not isinstance(args, dict):
                raise ValueError
        except ValueError:
            return _json({"error": {"code": "invalid_request", "message": "the arguments are not a JSON object"}})
        try:
            result = self._dispatch(name, args)
        except (DomainError, ImageError) as exc:
            result = {"error": {"code": exc.code, "message": exc.message}}
        except BackendUnavailable as exc:
            result = {"error": {"code": "backend_unavailable", "message": str(exc)}}
        except TypeError:
            result = {"error": {"code": "invalid_request", "message": f"wrong arguments for {name}"}}
        text = _json(result)
        return text if len(text) <= TOOL_RESULT_CHARS else text[:TOOL_RESULT_CHARS] + "…"

    def _dispatch(self, name: str, args: dict[str, Any]) -> Any:
        s, scope = self.sessions, self.scope
        if name == "search_memes":
            return _brief(
                tools.search_memes(
                    s,
                    scope,
                    str(args.get("query") or ""),
                    args.get("n") or SEARCH_DEFAULT_N,
                    args.get("animated"),
                    args.get("collection"),
                )
            )
        if name == "search_by_image":
            if self.image is None:
                raise AssistantError("invalid_request", "no image is attached to this message")
            return _brief(self._image_search(int(args.get("n") or SEARCH_DEFAULT_N)))
        if name == "more_like_this":
            return _brief(
                tools.more_like_this(s, scope, str(args.get("meme_id") or ""), args.get("n") or SEARCH_DEFAULT_N)
            )
        if name == "get_meme":
            facts, _data, _fmt = tools.get_meme(s, scope, str(args.get("meme_id") or ""))
            facts.pop("media_url", None)
            return facts
        if name == "show_memes":
            return self._show(args.get("meme_ids"))
        if name == "list_collections":
            return tools.list_collections(s, scope)
        if name == "create_collection":
            return tools.create_collection(s, scope, str(args.get("name") or ""))
        if name == "add_to_collection":
            return tools.add_to_collection(
                s, scope, str(args.get("collection") or ""), list(args.get("meme_ids") or [])
            )
        raise AssistantError("invalid_request", f"there is no tool {name!r}")

    def _image_search(self, n: int) -> list[dict[str, Any]]:
        import base64

        assert self.image is not None
        return tools.search_by_image(self.sessions, self.scope, base64.b64encode(self.image).decode(), n)

    def _show(self, meme_ids: Any) -> dict[str, Any]:
        if not isinstance(meme_ids, list) or not 1 <= len(meme_ids) <= SHOW_PER_CALL:
            raise AssistantError("invalid_request", f"meme_ids must hold 1-{SHOW_PER_CALL} ids")
        wanted, not_found, again = [], [], []
        for raw in meme_ids:
            try:
                uid = UUID(str(raw))
            except ValueError:
                not_found.append(str(raw))
                continue
            if str(uid) in self.shown or uid in wanted:
                again.append(str(uid))
            else:
                wanted.append(uid)
        room = SHOW_PER_REPLY - len(self.shown)
        with self.sessions.begin() as session:
            hits: list[SearchHit] = search_service.hydrate(
                session, self.scope, wanted[: max(room, 0)], dict.fromkeys(wanted, 0.0)
            )
        found = {h.id for h in hits}
        not_found += [str(u) for u in wanted[: max(room, 0)] if str(u) not in found]
        for hit in hits:
            if self.stop.is_set():
                break
            self.shown.append(hit.id)
            self.events.put(("meme", hit))
        result: dict[str, Any] = {"shown": [h.id for h in hits]}
        if not_found:
            result["not_found"] = not_found
        if again:
            result["already_shown"] = again
        if len(wanted) > room:
            result["note"] = f"at most {SHOW_PER_REPLY} memes per reply"
        return result


def _brief(hits: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Search hits as the model gets them (no URLs: they cost tokens and are no use to it)."""
    return [{k: v for k, v in h.items() if k != "media_url"} for h in hits]


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, default=str)


# ---------------------------------------------------------------------- titles


def title_model(sessions: sessionmaker[Session], scope: ScopeContext) -> openai_compat.ModelClient | None:
    """The model that titles conversations: ``MEWDEX_ASSISTANT_TITLE_MODEL`` on the chat connector
    (its price from the connector's price table), else the chat model; None when titles are off
    (``MEWDEX_ASSISTANT_LLM_TITLES=false``) or there is no chat model."""
    settings = get_settings()
    if not settings.assistant_llm_titles:
        return None
    model, _problem = chat_model(sessions, scope)
    if model is None:
        return None
    if settings.assistant_title_model:
        name = settings.assistant_title_model
        model = openai_compat.ModelClient(
            model.client, name, openai_compat.price_for(model.connection, name), model.connection, "chat"
        )
    return model


def clean_title(text: str) -> str:
    """The model's answer as a title: one line, no surrounding quotes, "Title:" or trailing dot."""
    line = next((ln for ln in (text or "").splitlines() if ln.strip()), "")
    line = line.strip().removeprefix("Title:").removeprefix("标题：").removeprefix("标题:").strip()
    return line.strip(" \"'“”‘’「」『』*#").rstrip("。.").strip()


def auto_title(
    sessions: sessionmaker[Session],
    scope: ScopeContext,
    conversation_id: UUID,
    version: int,
    text: str,
    model: openai_compat.ModelClient,
) -> bool:
    """Title the conversation from its first message ``text`` with ``model`` (one metered call) and
    store it only if the conversation is still on auto-title ``version`` (a rename or a clear in
    the meantime drops it: :func:`conversations.apply_auto_title`). True if stored; a failed call
    leaves the provisional title (the message itself)."""
    language = "Chinese" if retrieval.language(text) == "zh" else "the message's language"

    client = model.client
    assert client is not None

    def call() -> metering.CallResult:
        answer = client.chat.completions.create(
            model=model.model,
            messages=[
                {"role": "system", "content": TITLE_PROMPT.format(language=language)},
                {"role": "user", "content": text[:1000]},
            ],
            max_tokens=TITLE_MAX_TOKENS,
        )
        units = {**openai_compat.usage_units(answer.usage), "purpose": "title", "conversation_id": str(conversation_id)}
        return metering.CallResult(answer.choices[0].message.content or "", units)

    result = metering.optional_call(
        sessions,
        scope,
        model,
        call,
        operation="provider.chat",
        idempotency_key=f"title:{conversation_id}:{version}",
        kind="chat",
        event="chat",
        resource_id=str(conversation_id),
    )
    if result is None:
        return False
    title = clean_title(result.value)
    cost = model.price.cost(result.units)
    with sessions.begin() as session:
        stored = conversations.apply_auto_title(session, scope, conversation_id, version, title) if title else False
        conversation = conversations.get(session, scope, conversation_id, lock=True, include_deleted=True)
        conversation.tokens_prompt += int(result.units.get("input_tokens") or 0)
        conversation.tokens_completion += int(result.units.get("output_tokens") or 0)
        conversation.cost_cny = (conversation.cost_cny or Decimal(0)) + cost
    return stored
