"""Discord's interactions: Ed25519 verification, the three-second answer, and the queued follow-up.

Discord POSTs every interaction of an application to the endpoint URL its owner set in the
developer portal, ``<public url>/channels/discord/<application id>/interactions``, signed with the
application's key: ``X-Signature-Ed25519`` (hex) over ``X-Signature-Timestamp`` + the raw body,
checked against the ``verify_key`` stored on the binding that holds the application
(:func:`accept`). A missing or wrong signature is 401 ``channel_webhook_secret_invalid`` (Discord
sends such requests on purpose when the URL is saved, and refuses an endpoint that accepts them); a
request outside the replay window or seen before is refused too.

The verified binding is the account; the person is the interaction's ``member.user.id`` (a server)
or ``user.id`` (a DM), and only the binding's linked person is answered from the library — never an
id a field of the payload names. Answers (interaction types 1 PING, 2 APPLICATION_COMMAND, 3
MESSAGE_COMPONENT):

- PING → ``{"type": 1}`` (PONG);
- ``/link code:<code>`` → the code is checked (this account's, unexpired, unused) before it is used
  up (:func:`mewdex.channels.bindings.redeem_bind_code`: a code of another account stays usable),
  and the person's link waits for their confirmation, as every channel's does
  (:func:`mewdex.channels.bindings.pending`): an ephemeral message (type 4, flags 64) names the
  account and carries a "Yes, link" button (``custom_id`` ``link:confirm``); only that person's
  press puts the link in force (type 7 UPDATE_MESSAGE says so). Until then the link answers
  nothing from the library;
- a person not linked → the ephemeral how-to-link reply (:func:`texts`), nothing else; a disabled
  owner's application → an ephemeral "not available", nothing from the library;
- ``/meme query:<text>`` and the message command "Find a meme for this" (command type 3: the
  target message's ``content`` is the query) → type 5 (DEFERRED_CHANNEL_MESSAGE_WITH_SOURCE) within
  the three seconds, and a ``discord_interaction`` task takes the request down the shared inbound
  path as a reply mode (:func:`mewdex.channels.inbound.handle` with a
  :class:`~mewdex.channels.base.ReplyMode` ``interaction``): the owner check, the search, and a
  delivery (logged, paced) that fills the message in (``PATCH …/messages/@original``, the adapter's
  ``send``) with the best meme as an attachment and an "Another" button (component type 2,
  ``custom_id`` ``another:<n>:<query>``; :func:`answer`);
- "Another" → type 6 (DEFERRED_UPDATE_MESSAGE) and the same path edits that message to the next meme;
  when there is none, an ephemeral follow-up (``POST /webhooks/{app}/{token}``) says so.

The interaction token (valid 15 minutes) travels sealed in the task's payload, a field of the
sealed-field registry (the hook ``sealed_task_payloads``, provided below), and then sealed in the
delivery's (:mod:`mewdex.channels.delivery`): ``mewdex secrets rotate`` re-seals a waiting one, so
it still opens after the old key is dropped. It is never logged.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import replace
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from sqlalchemy import select
from sqlalchemy.orm import Session

from mewdex import hooks
from mewdex.channels import bindings, inbound, replay
from mewdex.channels.base import Button, Inbound, MemeFile, Reply, ReplyMode
from mewdex.channels.delivery import LANE
from mewdex.channels.discord import api
from mewdex.channels.errors import ChannelError
from mewdex.db.models import ChannelBinding
from mewdex.dto.i18n import translate
from mewdex.platform import owners
from mewdex.providers import sealed_fields, secrets
from mewdex.queue import registry
from mewdex.queue.registry import RetryPolicy, TaskContext, task_type

log = logging.getLogger(__name__)
NAME = "discord"
TASK_TYPE = "discord_interaction"
hooks.provide("sealed_task_payloads", TASK_TYPE, ("token",))  # the interaction token, while the task waits
EPHEMERAL = 64
PING, COMMAND, COMPONENT = 1, 2, 3
CHAT_INPUT, MESSAGE_COMMAND = 1, 3
PONG, MESSAGE, DEFERRED, DEFERRED_UPDATE, UPDATE_MESSAGE = 1, 4, 5, 6, 7
MEME_COMMAND, LINK_COMMAND, CONTEXT_COMMAND = "meme", "link", "Find a meme for this"
SAVE_COMMAND = "Save to mewdex"
ANOTHER = "another"
CONFIRM_LINK = "link:confirm"
MAX_QUERY = 200
MAX_RESULTS = 50  # how far "Another" pages (the search's result list)
CUSTOM_ID_MAX = 100
TOKEN_AAD = sealed_fields.task_payload_aad(TASK_TYPE, "token")
#: An interaction token answers for 15 minutes; an answer not sent by then is given up (a margin kept).
TOKEN_LIFE = 15 * 60 - 30


def language_of(locale: str | None) -> str:
    """Our language of a Discord ``locale`` (``zh-CN``, ``zh-TW`` → ``zh``; anything else → ``en``)."""
    return "zh" if str(locale or "").lower().startswith("zh") else "en"


def say(lang: str, key: str, **values: str) -> str:
    """The bot's text ``key`` in ``lang`` (``en``/``zh``): catalogue key ``bot.discord.<key>``
    (the how-to-link reply is ``bot.bind_help.discord``)."""
    return translate(lang, "bot.bind_help.discord" if key == "help" else f"bot.discord.{key}", **values)


# ------------------------------------------------------------------ verification


def verify(public_key_hex: str, signature_hex: str | None, timestamp: str | None, body: bytes) -> bool:
    """Whether ``signature_hex`` is the application's Ed25519 signature of ``timestamp + body``."""
    if not signature_hex or not timestamp:
        return False
    try:
        key = Ed25519PublicKey.from_public_bytes(bytes.fromhex(public_key_hex))
        key.verify(bytes.fromhex(signature_hex), timestamp.encode() + body)
    except (ValueError, InvalidSignature):
        return False
    return True


def binding_of_application(session: Session, application_id: str) -> ChannelBinding | None:
    """The active binding that holds the application ``application_id`` (at most one: setup refuses
    an application another account holds)."""
    if not application_id.isdigit():
        return None
    return session.execute(
        select(ChannelBinding).where(
            ChannelBinding.channel == NAME,
            ChannelBinding.status == "active",
            ChannelBinding.config["application_id"].astext == application_id,
        )
    ).scalar_one_or_none()


# ------------------------------------------------------------------ answering


def _message(text: str, *, ephemeral: bool = True) -> dict[str, Any]:
    return {
        "type": MESSAGE,
        "data": {"content": text[: api.MAX_CONTENT], "flags": EPHEMERAL if ephemeral else 0, "allowed_mentions": {}},
    }


def person_of(interaction: dict[str, Any]) -> str | None:
    """The Discord user id of whoever triggered the interaction (``member.user.id`` in a server,
    ``user.id`` in a DM)."""
    user = (interaction.get("member") or {}).get("user") or interaction.get("user") or {}
    value = str(user.get("id") or "")
    return value if value.isdigit() else None


def identity(application_id: str, user_id: str) -> str:
    """A binding's identity: the person *through this application* (one Discord user may link
    different applications to different accounts)."""
    return f"{application_id}:{user_id}"


def _option(data: dict[str, Any], name: str) -> str:
    for option in data.get("options") or ():
        if isinstance(option, dict) and option.get("name") == name:
            return str(option.get("value") or "").strip()
    return ""


def _query_of(data: dict[str, Any]) -> str | None:
    """The query of a command: ``/meme``'s ``query`` option, or the target message's content of the
    message command; None for a command this channel does not have."""
    if data.get("type") == MESSAGE_COMMAND:
        messages = (data.get("resolved") or {}).get("messages") or {}
        target = messages.get(str(data.get("target_id"))) or {}
        return str(target.get("content") or "").strip()
    if data.get("name") == MEME_COMMAND:
        return _option(data, "query")
    return None


def another_id(index: int, query: str) -> str:
    """The ``custom_id`` of the "Another" button that shows result ``index`` of ``query``
    (the query cut to fit Discord's 100 characters)."""
    head = f"{ANOTHER}:{index}:"
    return head + query[: CUSTOM_ID_MAX - len(head)]


def _parse_another(custom_id: str) -> tuple[int, str] | None:
    kind, _, rest = custom_id.partition(":")
    index, _, query = rest.partition(":")
    if kind != ANOTHER or not index.isdigit() or not query or int(index) >= MAX_RESULTS:
        return None
    return int(index), query


def _link(session: Session, row: ChannelBinding, person: str, code: str, lang: str) -> dict[str, Any]:
    """``/link``: the code (this account's, unexpired, once; checked before it is used up) links
    ``person`` pending their confirmation (:func:`_confirm_question`)."""
    try:
        with session.begin_nested():  # a link that fails leaves the code as it was
            bindings.redeem_bind_code(session, NAME, code[:64], scope_id=row.scope_id)
            bindings.bind(
                session,
                scope_id=row.scope_id,
                user_id=row.user_id,
                channel=NAME,
                identity=identity(row.config["application_id"], person),
                config={**row.config, "owner_id": person, bindings.PENDING_KEY: True},
            )
    except ChannelError as exc:
        return _message(say(lang, "taken" if exc.code == "channel_identity_taken" else "code_invalid"))
    return _confirm_question(session, row, lang)


def _confirm_question(session: Session, row: ChannelBinding, lang: str) -> dict[str, Any]:
    """The ephemeral "Link your Discord account to mewdex account …?" with its "Yes, link" button."""
    answer = _message(say(lang, "confirm", account=inbound.account_label(session, row.scope_id, lang)))
    button = {"type": 2, "style": 3, "label": say(lang, "confirm_button"), "custom_id": CONFIRM_LINK}
    answer["data"]["components"] = [{"type": 1, "components": [button]}]
    return answer


def _confirmed(session: Session, row: ChannelBinding, lang: str) -> dict[str, Any]:
    """The linked person pressed "Yes, link": the link is in force; the question becomes the answer."""
    bindings.confirm(session, row)
    text = say(lang, "linked", account=inbound.account_label(session, row.scope_id, lang))
    return {"type": UPDATE_MESSAGE, "data": {"content": text, "components": [], "allowed_mentions": {}}}


def attachments_of(data: dict[str, Any]) -> tuple[str, ...]:
    """The URLs of the images and clips attached to a message command's target message."""
    messages = (data.get("resolved") or {}).get("messages") or {}
    target = messages.get(str(data.get("target_id"))) or {}
    return tuple(
        str(a["url"])
        for a in target.get("attachments") or ()
        if isinstance(a, dict)
        and str(a.get("url") or "").startswith(("https://", "http://"))
        and str(a.get("content_type") or "image/").startswith(("image/", "video/"))
    )


def _save(session: Session, row: ChannelBinding, interaction: dict[str, Any], person: str, lang: str) -> dict[str, Any]:
    """The message command "Save to mewdex" by the linked person: the target message's attachment
    goes the shared way (:func:`mewdex.channels.inbound.submit` → :mod:`mewdex.channels.saving`), and
    the chat is told the outcome in the channel; the command itself is answered "Saving…" (ephemeral)."""
    data = interaction.get("data") or {}
    found = attachments_of(data)
    if not found:
        return _message(translate(lang, "bot.save.nothing"))
    inbound.submit(
        session,
        Inbound(
            channel=NAME,
            sender=str(row.identity),
            chat=str(interaction.get("channel_id") or ""),
            text="/save",
            reply_media=found[:1],
            mentioned=True,
            message_id=f"interaction:{interaction.get('id')}",
            extra={"lang": lang},
            scope_id=row.scope_id,
            author=person,
        ),
    )
    return _message(translate(lang, "bot.save.saving"))


def accept(
    session: Session, application_id: str, signature: str | None, timestamp: str | None, body: bytes
) -> dict[str, Any]:
    """The route's work, in its transaction: verify (module doc), then the interaction response to
    answer with (a follow-up task queued where one is due). Errors: ``channel_webhook_secret_invalid``
    (401: unknown application or a bad signature), ``channel_request_expired`` (401),
    ``channel_request_replayed`` (409), ``invalid_request`` (422: not an interaction)."""
    row = binding_of_application(session, application_id)
    if row is None or not verify(str((row.config or {}).get("public_key") or ""), signature, timestamp, body):
        raise ChannelError("channel_webhook_secret_invalid", "the interaction's X-Signature-Ed25519 does not match")
    replay.check_time(timestamp)
    try:
        interaction = json.loads(body)
    except ValueError:
        raise ChannelError("invalid_request", "the interaction is not JSON") from None
    if not isinstance(interaction, dict) or str(interaction.get("application_id")) != application_id:
        raise ChannelError("invalid_request", "not an interaction of this application")
    replay.remember(session, f"discord:{application_id}", str(interaction.get("id")))
    kind = interaction.get("type")
    if kind == PING:
        return {"type": PONG}
    lang = language_of(interaction.get("locale"))
    if not owners.owner_active(session, row.scope_id):
        return _message(say(lang, "unavailable"))
    person = person_of(interaction)
    data = interaction.get("data") or {}
    if person is None or kind not in (COMMAND, COMPONENT):
        raise ChannelError("invalid_request", "an interaction this application does not answer")
    if kind == COMMAND and data.get("name") == LINK_COMMAND:
        return _link(session, row, person, _option(data, "code"), lang)
    saving_asked = kind == COMMAND and data.get("type") == MESSAGE_COMMAND and data.get("name") == SAVE_COMMAND
    if row.identity != identity(application_id, person):
        return _message(translate(lang, "bot.save.owner_only") if saving_asked and row.identity else say(lang, "help"))
    if bindings.pending(row):  # linked by /link, not yet confirmed by its person's press
        if kind == COMPONENT and data.get("custom_id") == CONFIRM_LINK:
            return _confirmed(session, row, lang)
        return _confirm_question(session, row, lang)
    if saving_asked:
        return _save(session, row, interaction, person, lang)
    if kind == COMPONENT:
        parsed = _parse_another(str(data.get("custom_id") or ""))
        if parsed is None:
            return {"type": DEFERRED_UPDATE}
        index, query = parsed
        answer: dict[str, Any] = {"type": DEFERRED_UPDATE}
    else:
        found = _query_of(data)
        if found is None:
            raise ChannelError("invalid_request", "a command this application does not have")
        if not found:
            return _message(say(lang, "no_text"))
        index, query, answer = 0, found[:MAX_QUERY], {"type": DEFERRED}
    registry.submit(
        session,
        scope_id=row.scope_id,
        task_type=TASK_TYPE,
        payload={
            "application_id": application_id,
            "person": person,
            "token": secrets.seal(str(interaction.get("token") or ""), TOKEN_AAD),
            "query": query,
            "index": index,
            "locale": interaction.get("locale"),
            "channel_id": str(interaction.get("channel_id") or ""),
            "received_at": time.time(),
        },
        dedupe_key=f"discord:{interaction.get('id')}",
    )
    return answer


# ------------------------------------------------------------------ the answer (a reply mode)


def answer(mode: ReplyMode, found: list[MemeFile] | None) -> Reply:
    """The :class:`Reply` of an interaction (the adapter's ``answer``): the meme of ``mode.page``
    named, with an "Another" button (none past :data:`MAX_RESULTS`); "no meme for …" on the first
    page, an ephemeral follow-up "no more memes" on a later one; "not available" when the binding is
    not in force (``found`` None)."""
    lang, query = mode.lang, mode.query
    if found is None:
        return Reply(say(lang, "unavailable"), mode=mode)
    if not found:
        if mode.page == 0:
            return Reply(say(lang, "none", query=query), mode=mode)
        return Reply(say(lang, "no_more", query=query), mode=replace(mode, follow_up=True))
    meme, following = found[0], mode.page + 1
    buttons = (Button(say(lang, "another"), another_id(following, query)),) if following < MAX_RESULTS else ()
    return Reply(meme.display_name[:200], meme, buttons, mode=mode)


def send_answer(reply: Reply) -> dict[str, Any]:
    """Send an interaction's :class:`Reply` (its ``mode`` holds the token): edit the original response
    (the meme attached, the buttons as components; a text alone clears the attachments), or the
    ephemeral follow-up. Raises :class:`~mewdex.channels.platform.PlatformError`."""
    mode = reply.mode
    assert mode is not None
    text = (reply.text or "")[: api.MAX_CONTENT]
    if mode.follow_up:
        return api.follow_up(mode.app, mode.handle, {"content": text, "flags": EPHEMERAL})
    message: dict[str, Any] = {"content": text, "allowed_mentions": {}}
    buttons = [{"type": 2, "style": 2, "label": b.label, "custom_id": b.action} for b in reply.buttons]
    message["components"] = [{"type": 1, "components": buttons}] if buttons else []
    if reply.meme is None:
        message["attachments"] = []
    return api.edit_original(mode.app, mode.handle, message, reply.meme)


def request_of(scope_id: str, payload: dict[str, Any], token: str) -> tuple[Inbound, ReplyMode]:
    """The inbound path's view of a queued interaction: the message (its sender the person through
    this application, its binding the application's: ``scope_id``, authenticated by the signature)
    and its reply mode."""
    app, person = str(payload["application_id"]), str(payload["person"])
    lang = language_of(payload.get("locale"))
    message = Inbound(
        channel=NAME,
        sender=identity(app, person),
        chat=str(payload.get("channel_id") or f"interaction:{app}"),
        text=str(payload["query"]),
        mentioned=True,
        extra={"lang": lang},
        scope_id=scope_id,
        author=person,
    )
    received = float(payload.get("received_at") or time.time())
    mode = ReplyMode(
        "interaction",
        token,
        query=str(payload["query"]),
        page=int(payload["index"]),
        lang=lang,
        app=app,
        deadline=received + TOKEN_LIFE,
    )
    return message, mode


@task_type(TASK_TYPE, lane=LANE, resource_per_scope=True, retry=RetryPolicy(max_attempts=1))
def interaction_task(ctx: TaskContext) -> dict[str, Any]:
    """Take one deferred interaction down the shared path (:func:`mewdex.channels.inbound.handle`
    with its reply mode); the answer is a delivery. One attempt (a retry could answer twice; the
    delivery retries the platform)."""
    try:
        token = secrets.open_sealed(ctx.payload["token"], TOKEN_AAD)
    except secrets.SecretError:  # its key was dropped by a rotation within the token's 15 minutes
        log.warning("discord: an interaction token cannot be opened any more; not answered")
        return {"outcome": "token_unreadable"}
    message, mode = request_of(ctx.claim.scope_id, ctx.payload, token)
    return inbound.handle(ctx.sessions, message, mode)
