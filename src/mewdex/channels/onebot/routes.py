"""OneBot's routes (imported by the web layer only):

* ``POST /api/v1/channels/onebot`` — bind the caller's QQ bot; answers the access token once.
* ``WS /channels/onebot/ws`` — the reverse WebSocket (``Authorization: Bearer <token>``, ``X-Self-ID``);
* ``POST /channels/onebot/events`` — HTTP POST mode (``X-Signature``).
"""

from __future__ import annotations

import asyncio
import json
import logging

from fastapi import APIRouter, Depends, Header, Query, Request, WebSocket, WebSocketDisconnect
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import Response
from sqlalchemy.orm import Session, sessionmaker

from mewdex.channels import bindings
from mewdex.channels.errors import ChannelError
from mewdex.channels.onebot import NAME, inbound, protocol, relay, setup, transport
from mewdex.channels.onebot import shapes as dto
from mewdex.channels.platform import PlatformError
from mewdex.channels.registry import web_kit
from mewdex.dto.scopes import ScopeContext
from mewdex.platform import owners

log = logging.getLogger(__name__)
CHECK_REVOKED_SECONDS = 5.0
PROOF_TIMEOUT_SECONDS = 15.0


#: The web layer's dependencies (lent once per process: channels.registry.lend).
web = web_kit()
router = APIRouter(tags=["channels"])


@router.post("/api/v1/channels/onebot", response_model=dto.OneBotBound, status_code=201)
def onebot_bind(
    body: dto.OneBotBind,
    base: str = Depends(web.public_base_url),
    session: Session = Depends(web.db_session),
    scope: ScopeContext = Depends(web.current_scope),
):
    """Bind (or re-key) the caller's QQ bot: a new access token, shown this once, with the URLs to
    paste into NapCat/LLOneBot (an earlier token stops working; its connection is closed)."""
    row, token = setup.create_binding(
        session, scope_id=scope.scope_id, user_id=bindings.owner_user_id(session, scope.scope_id),
        mode=body.mode, owner_qq=body.owner_qq, api_url=body.api_url, self_id=body.self_id,
    )  # fmt: skip
    ws_base = "ws" + base[len("http") :] if base.startswith("http") else base
    return {
        "binding": bindings.api_view(row),
        "access_token": token,
        "ws_url": ws_base + setup.WS_PATH,
        "events_url": base + setup.EVENTS_PATH,
    }


@router.websocket(setup.WS_PATH)
async def onebot_ws(
    websocket: WebSocket,
    access_token: str | None = Query(None),
    sessions: sessionmaker[Session] = Depends(web.sessions),
):
    """The reverse WebSocket. The token (``Authorization: Bearer`` or ``?access_token=``) decides
    the binding, once, for the life of the connection; ``X-Self-ID`` is only a claim until the bot
    proves it with a ``get_login_info`` answer on this socket (then the number becomes the binding's
    identity). Every event is that binding's: one naming another bot (``self_id``) is dropped and
    logged. A revoked or re-keyed binding, or a disabled owner, closes the socket."""
    token = protocol.bearer_token(websocket.headers.get("authorization"), access_token)
    claimed = (websocket.headers.get("x-self-id") or "").strip()
    role = (websocket.headers.get("x-client-role") or "Universal").strip().lower()

    def authenticate() -> str | None:
        with sessions.begin() as session:
            row = setup.binding_for_token(session, token)
            if row is None or not owners.owner_active(session, row.scope_id):
                return None
            return row.scope_id

    scope_id = None
    if token and role in ("universal", "event") and setup.QQ_NUMBER.fullmatch(claimed):
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

    channel = transport.ActionChannel(claimed, websocket.send_text, scope_id, hang_up)
    proven = asyncio.Event()

    async def prove() -> None:
        """Ask the bot who it is; only a matching answer makes the claim the binding's identity."""
        try:
            info = await channel.call("get_login_info", {}, PROOF_TIMEOUT_SECONDS)
        except PlatformError as exc:
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
                row = bindings.get(session, scope_id, NAME, lock=True)
                if row is None or row.status != "active" or not owners.owner_active(session, scope_id):
                    return "the binding is gone"
                try:
                    setup.attach(session, row, claimed)
                except ChannelError as exc:
                    return exc.message
            return None

        problem = await run_in_threadpool(record)
        if problem is not None:
            log.warning("onebot: QQ %s not linked to scope %s: %s", claimed, scope_id, problem)
            await hang_up(problem)
            return
        transport.registry.add(channel)
        relay.relay.ensure_started()
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
                if not await run_in_threadpool(setup.still_active, sessions, scope_id, token):
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
                    if not setup.still_active(sessions, scope_id, token):
                        return "revoked"
                    with sessions.begin() as session:
                        return inbound.accept_event(session, event, scope_id=scope_id, self_id=claimed)

                if await run_in_threadpool(queue) == "revoked":
                    await hang_up()
                    break
    except WebSocketDisconnect:
        pass
    finally:
        proof.cancel()
        transport.registry.remove(channel)
        if proven.is_set() and transport.registry.get(claimed) is None:  # not replaced by a newer connection
            await run_in_threadpool(setup.detach, sessions, scope_id)


@router.post(setup.EVENTS_PATH, include_in_schema=False)
async def onebot_events(
    request: Request,
    self_id: str | None = Header(None, alias="X-Self-ID"),
    signature: str | None = Header(None, alias="X-Signature"),
    sessions: sessionmaker[Session] = Depends(web.sessions),
):
    """HTTP POST mode: a signed event; queued for the assistant, 204 at once (no quick operation)."""
    body = await request.body()

    def work() -> str:
        with sessions.begin() as session:
            return inbound.accept_http_event(session, self_id, signature, body)

    await run_in_threadpool(work)
    return Response(status_code=204)
