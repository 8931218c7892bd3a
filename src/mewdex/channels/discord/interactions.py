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
  target message's ``content`` is the query) → type 5 (DEFERRED_CHANNEL_MESSAGE_WITH_SOURCE), and a
  ``discord_interaction`` task fills the message in (``PATCH …/messages/@original``) with the best
  meme as an attachment and an "Another" button (component type 2, ``custom_id``
  ``another:<n>:<query>``);
- "Another" → type 6 (DEFERRED_UPDATE_MESSAGE) and the task edits that message to the next meme;
  when there is none, an ephemeral follow-up (``POST /webhooks/{app}/{token}``) says so.

The interaction token (valid 15 minutes) travels sealed in the task's payload, a field of the
sealed-field registry (the hook ``sealed_task_payloads``, provided below): ``mewdex secrets
rotate`` re-seals a waiting one, so it still opens after the old key is dropped. It is never logged.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from mewdex import hooks
from mewdex.channels import bindings, inbound, pool, replay
from mewdex.channels.base import Inbound
from mewdex.channels.delivery import LANE
from mewdex.channels.discord import api
from mewdex.channels.errors import ChannelError
from mewdex.channels.platform import PlatformError
from mewdex.db.models import ChannelBinding
from mewdex.dto.i18n import translate
from mewdex.platform import owners
from mewdex.providers import sealed_fields, secrets
from mewdex.queue import registry
from mewdex.queue.registry import RetryPolicy, TaskContext, TaskError, task_type

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
        },
        dedupe_key=f"discord:{interaction.get('id')}",
    )
    return answer


# ------------------------------------------------------------------ the follow-up task


def _still_linked(sessions: sessionmaker[Session], scope_id: str, application_id: str, person: str) -> bool:
    """The binding still holds the application, links this person, and its owner is enabled."""
    with sessions.begin() as session:
        row = bindings.get(session, scope_id, NAME)
        return bool(
            bindings.in_force(session, row)
            and row is not None
            and (row.config or {}).get("application_id") == application_id
            and row.identity == identity(application_id, person)
        )


def answer(
    sessions: sessionmaker[Session], scope_id: str, payload: dict[str, Any], started: Callable[[], None] = lambda: None
) -> dict[str, Any]:
    """Fill in one interaction's answer (module doc): ``{"outcome": "meme"|"none"|"no_more"|
    "unavailable", "meme_id"?}``; ``started`` is called before the first API call. Raises
    :class:`PlatformError` from the API."""
    app = payload["application_id"]
    try:
        token = secrets.open_sealed(payload["token"], TOKEN_AAD)
    except secrets.SecretError:  # its key was dropped by a rotation within the token's 15 minutes
        log.warning("discord: an interaction token cannot be opened any more; not answered")
        return {"outcome": "token_unreadable"}
    query, index, lang = payload["query"], int(payload["index"]), language_of(payload.get("locale"))
    if not _still_linked(sessions, scope_id, app, payload["person"]):
        started()
        api.edit_original(app, token, {"content": say(lang, "unavailable"), "attachments": [], "components": []})
        return {"outcome": "unavailable"}
    with sessions.begin() as session:  # a pool limits the binding's answers (channels.pool)
        row = bindings.get(session, scope_id, NAME)
        pool_id = pool.pool_of(row) if row is not None else None
    found = inbound.search_memes(sessions, scope_id, query, start=index, pool_id=pool_id)
    meme = found[0] if found else None
    started()
    if meme is None:
        if index == 0:
            api.edit_original(app, token, {"content": say(lang, "none", query=query), "components": []})
            return {"outcome": "none"}
        api.follow_up(app, token, {"content": say(lang, "no_more", query=query), "flags": EPHEMERAL})
        return {"outcome": "no_more"}
    button = {"type": 2, "style": 2, "label": say(lang, "another"), "custom_id": another_id(index + 1, query)}
    message = {
        "content": meme.display_name[:200],
        "allowed_mentions": {},
        "components": [{"type": 1, "components": [button]}] if index + 1 < MAX_RESULTS else [],
    }
    api.edit_original(app, token, message, meme)
    return {"outcome": "meme", "meme_id": meme.meme_id, "index": index}


@task_type(
    TASK_TYPE,
    lane=LANE,
    resource_per_scope=True,
    external=True,
    retry=RetryPolicy(max_attempts=3, cap_seconds=60.0),  # base: MEWDEX_RETRY_BASE_SECONDS (2 s)
)
def interaction_task(ctx: TaskContext) -> dict[str, Any]:
    """Answer one deferred interaction (:func:`answer`); a platform error is retried while Discord
    asks (rate limits, 5xx), within the token's 15 minutes."""
    try:
        return answer(ctx.sessions, ctx.claim.scope_id, ctx.payload, ctx.external_started)
    except PlatformError as exc:
        log.warning("discord: answering an interaction failed (%s %s)", exc.code, exc.platform_code)
        raise TaskError(exc.code, exc.message, retryable=exc.retryable) from None
