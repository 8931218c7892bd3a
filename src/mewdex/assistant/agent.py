"""The assistant with a chat model: a tool-calling loop over the tools of
:mod:`mewdex.assistant.catalogue` and the context window (``context_base_idx`` +
``context_summary``). Its prompts are in :mod:`.prompts`, conversation titles in :mod:`.titles`.

The model is the scope owner's ``openai_compatible`` connector with a ``chat_model``
(:func:`chat_model`); without one the assistant is retrieval-only (:mod:`.retrieval`).

One reply (:class:`Agent`, run in a thread of its own; :func:`mewdex.assistant.chat.stream`
consumes its :attr:`Agent.events` and sets :attr:`Agent.stop` on cancel):

1. the context: the system prompt, the folded summary of older turns, and the messages from
   ``context_base_idx`` on; past ``MEWDEX_ASSISTANT_CONTEXT_MESSAGES`` messages the older half is
   folded into ``context_summary`` by the model first (:meth:`Agent.fold`);
2. up to ``MEWDEX_ASSISTANT_MAX_STEPS`` streamed model calls; the last one may not call tools
   (``tool_choice`` ``none``). Tool calls are dispatched by name through the catalogue (arguments
   validated by the tool's model; a refusal goes back to the model as the tool's error) and run
   in the caller's scope; ``show_memes`` delivers memes (``meme`` events; they become the reply's
   ``artifact_refs``); text is streamed as ``delta`` events;
3. every model call is one :func:`~mewdex.providers.metering.metered_call` (operation
   ``provider.chat``, usage kind ``chat``, units with the tokens and ``conversation_id``): refused
   with ``quota_exceeded`` before any call once the owner's monthly budget is spent.

A failed or refused call ends the loop with :attr:`Agent.error` (a ``DomainError``); the caller then
answers retrieval-only with a note (:func:`fallback_note`).
"""

from __future__ import annotations

import contextvars
import json
import logging
import queue
import threading
from dataclasses import dataclass, field
from decimal import Decimal
from typing import TYPE_CHECKING, Any, cast
from uuid import UUID

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from mewdex.assistant import catalogue, conversations, shared_collections
from mewdex.assistant.prompts import FINAL_STEP_PROMPT, SUMMARY_PROMPT, SYSTEM_PROMPT
from mewdex.assistant.settings import settings as assistant_settings
from mewdex.db.models import Message, ScopeContext
from mewdex.dto.errors import DomainError
from mewdex.dto.i18n import translate
from mewdex.dto.search import SearchHit
from mewdex.providers import metering, openai_compat
from mewdex.providers.errors import ProviderError

if TYPE_CHECKING:  # the SDK's types only; the SDK itself loads when a model is first called
    from openai.types.chat import ChatCompletionMessageParam

log = logging.getLogger(__name__)

SHOW_PER_REPLY = 10
SUMMARY_MAX_TOKENS = 400
# Text the model gets back from a tool is cut here (a long context field must not eat the window).
TOOL_RESULT_CHARS = 6000


def tool_definitions(*, with_image: bool) -> list[dict[str, Any]]:
    """The catalogue's chat tools in the Chat Completions shape: the arguments model's JSON Schema
    cleaned for function calling (:func:`function_parameters`); a tool that takes the attached image
    only when one is attached."""
    return [
        {
            "type": "function",
            "function": {"name": t.name, "description": t.description, "parameters": function_parameters(t)},
        }
        for t in catalogue.offered("agent")
        if with_image or t.attachment is None
    ]


def function_parameters(tool: catalogue.Tool) -> dict[str, Any]:
    """``tool.args``' JSON Schema as a function's parameters: no titles, no ``$ref`` (inlined), an
    optional argument as its plain type (``anyOf [X, null]`` with a null default becomes ``X``),
    and without the argument the chat fills itself (``tool.attachment``)."""
    schema = tool.args.model_json_schema()
    defs = schema.pop("$defs", {})

    def clean(node: Any) -> Any:
        if isinstance(node, list):
            return [clean(v) for v in node]
        if not isinstance(node, dict):
            return node
        if "$ref" in node:
            return clean({**defs[node["$ref"].rsplit("/", 1)[-1]], **{k: v for k, v in node.items() if k != "$ref"}})
        node = {k: v for k, v in node.items() if k != "title"}
        options = node.get("anyOf")
        if isinstance(options, list) and {"type": "null"} in options and len(options) == 2:
            (plain,) = (o for o in options if o != {"type": "null"})
            rest = {k: v for k, v in node.items() if k != "anyOf" and not (k == "default" and v is None)}
            node = {**plain, **rest}
        return {k: clean(v) for k, v in node.items()}

    params = clean(schema)
    if tool.attachment:
        params["properties"].pop(tool.attachment, None)
        params["required"] = [r for r in params.get("required", []) if r != tool.attachment]
    params.setdefault("properties", {})
    params.setdefault("required", [])
    return params


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
    "another one" can avoid them) or that the user attached an image. None for what the model does
    not see: a guest's turn and its reply (``conversations.GUEST_KEY``), tool rows."""
    if payload.get(conversations.GUEST_KEY):
        return None
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
        # the caller's context goes with it (a chat's pool: retrieval.answering_from)
        context = contextvars.copy_context()
        self._thread = threading.Thread(target=context.run, args=(self.run,), name="assistant-agent", daemon=True)
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
        settings = assistant_settings()
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
        limit = assistant_settings().assistant_context_messages
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
        """Run one tool call of the catalogue; the result (or ``{"error": {"code", "message"}}``: bad
        JSON, an unknown tool, arguments its model refuses, the service's error) as JSON text."""
        try:
            args = json.loads(arguments or "{}")
            if not isinstance(args, dict):
                raise ValueError
        except ValueError:
            return _json({"error": {"code": "invalid_request", "message": "the arguments are not a JSON object"}})
        try:
            tool = catalogue.find(name, "agent")
            context = catalogue.ToolContext(self.sessions, self.scope, self._show)
            result = catalogue.call(tool, context, catalogue.attach(tool, args, self.image))
        except catalogue.ToolFailure as exc:
            result = {"error": {"code": exc.code, "message": exc.message}}
        text = _json(_brief(result.value if isinstance(result, catalogue.Pictured) else result))
        return text if len(text) <= TOOL_RESULT_CHARS else text[:TOOL_RESULT_CHARS] + "…"

    def _show(self, meme_ids: list[str]) -> dict[str, Any]:
        """show_memes (1-``catalogue.SHOW_PER_CALL`` ids, checked by its arguments model): ``meme`` events
        for the caller's memes not shown before, at most ``SHOW_PER_REPLY`` per reply."""
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
            # the caller's memes, and those of the shared collections it chose
            hits: list[SearchHit] = shared_collections.hydrate(
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


def _brief(value: Any) -> Any:
    """A result as the model gets it: without ``media_url`` (in a dict, or the dicts of a list: URLs
    cost tokens and are no use to it)."""
    if isinstance(value, list):
        return [_brief(v) for v in value]
    if isinstance(value, dict):
        return {k: v for k, v in value.items() if k != "media_url"}
    return value


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, default=str)
