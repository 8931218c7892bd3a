"""QQ (OneBot v11), WeCom and WeChat ClawBot (issue 17): their set-up routes under
``/api/v1/channels/…`` and their inbound endpoints under ``/channels/…`` (no session: each checks
its platform's own token or signature). The generic channel routes (list, deliveries, revoke) are
in :mod:`mewdex.web.routers.channels`.

* ``POST /api/v1/channels/onebot`` — bind the caller's QQ bot; answers the access token once.
* ``WS /channels/onebot/ws`` — the reverse WebSocket (``Authorization: Bearer <token>``,
  ``X-Self-ID``); ``POST /channels/onebot/events`` — HTTP POST mode (``X-Signature``).
* ``GET``/``PUT /api/v1/channels/wecom/app`` (admin) — the self-built app;
  ``POST /api/v1/channels/wecom/link`` — a one-time code to send to the app;
  ``GET``/``POST /channels/wecom/callback`` — URL verification and encrypted messages.
* ``POST /api/v1/channels/clawbot/login`` — a login QR; ``GET …/login/{qrcode}`` — its state
  (``confirmed`` binds the caller).
"""

from __future__ import annotations

import asyncio
import json
import logging

from fastapi import APIRouter, Depends, Header, Query, Request, WebSocket, WebSocketDisconnect
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import PlainTextResponse, Response
from sqlalchemy.orm import Session

from mewdex.channels import bindings, clawbot, onebot, wecom
from mewdex.channels.errors import ChannelError
from mewdex.channels.wecom_crypto import WeComCryptoError
from mewdex.db.engine import get_sessionmaker
from mewdex.db.models import ScopeContext
from mewdex.dto import channel_setup as dto
from mewdex.platform import owners
from mewdex.web.deps import current_scope, db_session, require_admin
from mewdex.web.errors import ApiError
from mewdex.web.routers.channels import binding_view

log = logging.getLogger(__name__)
router = APIRouter(tags=["channels"])
CHECK_REVOKED_SECONDS = 5.0
PROOF_TIMEOUT_SECONDS = 15.0


def _user_id(session: Session, scope: ScopeContext):
    owner = owners.user_for_scope(session, scope.scope_id)
    return owner.user_id if owner is not None else None


def _base_url(request: Request) -> str:
    from mewdex.web.deps import public_base_url

    return public_base_url(request)


def _platform_error(exc: clawbot.ClawBotError) -> ApiError:
    """502 ``channel_platform_error``: iLink refused or could not be reached (its reason, no secret)."""
    return ApiError(502, "channel_platform_error", exc.message)


# ------------------------------------------------------------------ OneBot v11


@router.post("/api/v1/channels/onebot", response_model=dto.OneBotBound, status_code=201)
def onebot_bind(
    body: dto.OneBotBind,
    request: Request,
    session: Session = Depends(db_session),
    scope: ScopeContext = Depends(current_scope),
):
    """Bind (or re-key) the caller's QQ bot: a new access token, shown this once, with the URLs to
    paste into NapCat/LLOneBot (an earlier token stops working; its connection is closed)."""
    row, token = onebot.create_binding(
        session, scope_id=scope.scope_id, user_id=_user_id(session, scope), mode=body.mode, owner_qq=body.owner_qq,
        api_url=body.api_url, self_id=body.self_id,
    )  # fmt: skip
    base = _base_url(request)
    ws_base = "ws" + base[len("http") :] if base.startswith("http") else base
    return {
        "binding": binding_view(row),
        "access_token": token,
        "ws_url": ws_base + onebot.WS_PATH,
        "events_url": base + onebot.EVENTS_PATH,
    }


@router.websocket(onebot.WS_PATH)
async def onebot_ws(websocket: WebSocket, access_token: str | None = Query(None)):
    """The reverse WebSocket. The token (``Authorization: Bearer`` or ``?access_token=``) decides
    the binding, once, for the life of the connection; ``X-Self-ID`` is only a claim until the bot
    proves it with a ``get_login_info`` answer on this socket (then the number becomes the binding's
    identity). Every event is that binding's: one naming another bot (``self_id``) is dropped and
    logged. A revoked or re-keyed binding, or a disabled owner, closes the socket."""
    token = onebot.bearer_token(websocket.headers.get("authorization"), access_token)
    claimed = (websocket.headers.get("x-self-id") or "").strip()
    role = (websocket.headers.get("x-client-role") or "Universal").strip().lower()
    sessions = get_sessionmaker()

    def authenticate() -> str | None:
        with sessions.begin() as session:
            row = onebot.binding_for_token(session, token)
            if row is None or not owners.owner_active(session, row.scope_id):
                return None
            return row.scope_id

    scope_id = None
    if token and role in ("universal", "event") and onebot.QQ_NUMBER.fullmatch(claimed):
        scope_id = await run_in_threadpool(authenticate)
    if scope_id is None:
        log.warning("onebot: connection claiming QQ %s refused (token, role or number)", claimed[:20] or "?")
        await websocket.close(code=1008)
        return
    await websocket.accept()

    async def hang_up(reason: str = "") -> None:
        try:
            await websocket.close(code=1008, reason=reason[:120])
        except RuntimeError:  # already closed
            pass

    channel = onebot.ActionChannel(claimed, websocket.send_text, scope_id, hang_up)
    proven = asyncio.Event()

    async def prove() -> None:
        """Ask the bot who it is; only a matching answer makes the claim the binding's identity."""
        try:
            info = await channel.call("get_login_info", {}, PROOF_TIMEOUT_SECONDS)
        except onebot.OneBotError as exc:
            log.warning("onebot: QQ %s did not answer get_login_info (%s); closing", claimed, exc.code)
            await hang_up("get_login_info unanswered")
            return
        if str(info.get("user_id", "")) != claimed:
            log.warning(
                "onebot: the bot logged in as %s claimed QQ %s; closing", str(info.get("user_id"))[:20], claimed
            )
            await hang_up("X-Self-ID is not the logged-in QQ")
            return

        def record() -> str | None:
            with sessions.begin() as session:
                row = bindings.get(session, scope_id, onebot.NAME, lock=True)
                if row is None or row.status != "active" or not owners.owner_active(session, scope_id):
                    return "the binding is gone"
                try:
                    onebot.attach(session, row, claimed)
                except ChannelError as exc:
                    return exc.message
            return None

        problem = await run_in_threadpool(record)
        if problem is not None:
            log.warning("onebot: QQ %s not linked to scope %s: %s", claimed, scope_id, problem)
            await hang_up(problem)
            return
        onebot.registry.add(channel)
        onebot.relay.ensure_started()
        proven.set()

    proof = asyncio.create_task(prove())
    checked = asyncio.get_running_loop().time()
    try:
        while True:
            try:
                message = await asyncio.wait_for(websocket.receive(), CHECK_REVOKED_SECONDS)
            except TimeoutError:
                message = None
            if message is not None and message["type"] == "websocket.disconnect":
                break
            raw = (
                None
                if message is None
                else message.get("text") or (message.get("bytes") or b"").decode(errors="replace")
            )
            now = asyncio.get_running_loop().time()
            if now - checked >= CHECK_REVOKED_SECONDS:
                checked = now
                if not await run_in_threadpool(onebot.still_active, sessions, scope_id, token):
                    await hang_up()
                    break
            if raw is None:
                continue
            try:
                frame = json.loads(raw)
            except ValueError:
                continue
            if not isinstance(frame, dict) or channel.resolve(frame):
                continue
            if frame.get("post_type") == "message":
                if not proven.is_set():
                    log.warning(
                        "onebot: a message on the connection of QQ %s before it proved its number; dropped", claimed
                    )
                    continue

                def queue(event=frame) -> str:
                    if not onebot.still_active(sessions, scope_id, token):
                        return "revoked"
                    with sessions.begin() as session:
                        return onebot.accept_event(session, event, scope_id=scope_id, self_id=claimed)

                if await run_in_threadpool(queue) == "revoked":
                    await hang_up()
                    break
    except WebSocketDisconnect:
        pass
    finally:
        proof.cancel()
        onebot.registry.remove(channel)
        if proven.is_set() and onebot.registry.get(claimed) is None:  # not replaced by a newer connection
            await run_in_threadpool(onebot.detach, sessions, scope_id)


@router.post(onebot.EVENTS_PATH, include_in_schema=False)
async def onebot_events(
    request: Request,
    self_id: str | None = Header(None, alias="X-Self-ID"),
    signature: str | None = Header(None, alias="X-Signature"),
):
    """HTTP POST mode: a signed event; queued for the assistant, 204 at once (no quick operation)."""
    body = await request.body()

    def work() -> str:
        with get_sessionmaker().begin() as session:
            return onebot.accept_http_event(session, self_id, signature, body)

    await run_in_threadpool(work)
    return Response(status_code=204)


# ------------------------------------------------------------------ WeCom


def _wecom_status(request: Request, status: dict) -> dict:
    return {
        **{k: v for k, v in status.items() if k != "callback_path"},
        "callback_url": _base_url(request) + wecom.CALLBACK_PATH,
    }


@router.get("/api/v1/channels/wecom/app", response_model=dto.WeComAppStatus)
def wecom_app(request: Request, session: Session = Depends(db_session), _admin=Depends(require_admin)):
    """The installation's WeCom app (admin), without its secrets, and the callback URL to enter."""
    return _wecom_status(request, wecom.app_status(session))


@router.put("/api/v1/channels/wecom/app", response_model=dto.WeComAppStatus)
def wecom_app_set(
    body: dto.WeComAppConfig, request: Request, session: Session = Depends(db_session), _admin=Depends(require_admin)
):
    """Set the self-built app (admin): corp id, agent id, Secret, callback Token and EncodingAESKey."""
    status = wecom.configure_app(
        session, corp_id=body.corp_id, agent_id=body.agent_id, secret=body.secret, token=body.token,
        encoding_aes_key=body.encoding_aes_key, base_url=body.base_url,
    )  # fmt: skip
    return _wecom_status(request, status)


@router.post("/api/v1/channels/wecom/link", response_model=dto.WeComLink)
def wecom_link(session: Session = Depends(db_session), scope: ScopeContext = Depends(current_scope)):
    """A one-time code (15 minutes): the WeCom member who sends it to the app is bound to the caller."""
    return wecom.link(session, scope_id=scope.scope_id, user_id=_user_id(session, scope))


@router.get(wecom.CALLBACK_PATH, include_in_schema=False)
async def wecom_verify(
    msg_signature: str = Query(..., max_length=64),
    timestamp: str = Query(..., max_length=32),
    nonce: str = Query(..., max_length=64),
    echostr: str = Query(..., max_length=4096),
):
    """WeCom's callback URL check: the decrypted ``echostr``, as plain text."""

    def work() -> str:
        with get_sessionmaker().begin() as session:
            return wecom.verify_callback_url(session, msg_signature, timestamp, nonce, echostr)

    try:
        return PlainTextResponse(await run_in_threadpool(work))
    except WeComCryptoError as exc:
        raise ApiError(401, "channel_webhook_secret_invalid", exc.message) from None


@router.post(wecom.CALLBACK_PATH, include_in_schema=False)
async def wecom_callback(
    request: Request,
    msg_signature: str = Query(..., max_length=64),
    timestamp: str = Query(..., max_length=32),
    nonce: str = Query(..., max_length=64),
):
    """An encrypted message: verified, queued for the assistant; an empty 200 at once (WeCom retries
    after 5 s; the meme goes out as an active message)."""
    body = await request.body()

    def work() -> str:
        with get_sessionmaker().begin() as session:
            return wecom.accept_callback(session, msg_signature, timestamp, nonce, body)

    try:
        await run_in_threadpool(work)
    except WeComCryptoError as exc:
        raise ApiError(401, "channel_webhook_secret_invalid", exc.message) from None
    return PlainTextResponse("")


# ------------------------------------------------------------------ WeChat ClawBot


@router.post("/api/v1/channels/clawbot/login", response_model=dto.ClawBotQr)
async def clawbot_login(scope: ScopeContext = Depends(current_scope)):
    """A new WeChat login QR code to scan (the bot QR login of the iLink bot API)."""
    try:
        qr = await run_in_threadpool(clawbot.start_login)
    except clawbot.ClawBotError as exc:
        raise _platform_error(exc) from None

    def remember() -> None:  # only the caller may poll and complete this login
        with get_sessionmaker().begin() as session:
            bindings.issue_login(
                session,
                scope_id=scope.scope_id,
                user_id=_user_id(session, scope),
                channel=clawbot.NAME,
                login_id=qr["qrcode"],
            )

    await run_in_threadpool(remember)
    return qr


@router.get("/api/v1/channels/clawbot/login/{qrcode}", response_model=dto.ClawBotLoginStatus)
async def clawbot_login_status(qrcode: str, scope: ScopeContext = Depends(current_scope)):
    """The login's state; ``confirmed`` binds the scanning person to the caller (bot token sealed)."""

    def started_here() -> bool:
        with get_sessionmaker()() as session:
            return bindings.login_started_by(session, scope_id=scope.scope_id, channel=clawbot.NAME, login_id=qrcode)

    # Another account's (or an expired, finished or invented) login is not asked about upstream.
    if len(qrcode) > 200 or not await run_in_threadpool(started_here):
        raise ApiError(404, "not_found", "no such login")
    try:
        status = await run_in_threadpool(clawbot.login_status, qrcode)
    except clawbot.ClawBotError as exc:
        raise _platform_error(exc) from None
    if status["status"] != "confirmed":
        return {"status": status["status"], "binding": None}

    def bind() -> dict:
        with get_sessionmaker().begin() as session:
            row = clawbot.complete_login(
                session, scope_id=scope.scope_id, user_id=_user_id(session, scope), status=status
            )
            bindings.finish_login(session, channel=clawbot.NAME, login_id=qrcode)
            return binding_view(row)

    return {"status": "confirmed", "binding": await run_in_threadpool(bind)}
