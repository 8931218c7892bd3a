"""WeCom's routes (imported by the web layer only):

* ``GET``/``PUT /api/v1/channels/wecom/app`` (admin) — the self-built app, and the callback URL to enter;
* ``POST /api/v1/channels/wecom/link`` — a one-time code to send to the app;
* ``GET``/``POST /channels/wecom/callback`` — URL verification and encrypted messages (WeCom's signature).
"""

from __future__ import annotations

from fastapi import APIRouter, Depends, Query, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import PlainTextResponse
from sqlalchemy.orm import Session, sessionmaker

from mewdex.channels import bindings
from mewdex.channels.errors import ChannelError
from mewdex.channels.registry import web_kit
from mewdex.channels.wecom import inbound, setup
from mewdex.channels.wecom import shapes as dto
from mewdex.channels.wecom.crypto import WeComCryptoError
from mewdex.dto.scopes import ScopeContext

#: The web layer's dependencies (lent once per process: channels.registry.lend).
web = web_kit()
router = APIRouter(tags=["channels"])


def status_view(base: str, status: dict) -> dict:
    """The app's state with the callback URL (``base``: the request's app's public base URL)."""
    return {
        **{k: v for k, v in status.items() if k != "callback_path"},
        "callback_url": base + setup.CALLBACK_PATH,
    }


@router.get("/api/v1/channels/wecom/app", response_model=dto.WeComAppStatus)
def wecom_app(
    base: str = Depends(web.public_base_url),
    session: Session = Depends(web.db_session),
    _admin=Depends(web.require_admin),
):
    """The installation's WeCom app (admin), without its secrets, and the callback URL to enter."""
    return status_view(base, setup.app_status(session))


@router.put("/api/v1/channels/wecom/app", response_model=dto.WeComAppStatus)
def wecom_app_set(
    body: dto.WeComAppConfig,
    base: str = Depends(web.public_base_url),
    session: Session = Depends(web.db_session),
    _admin=Depends(web.require_admin),
):
    """Set the self-built app (admin): corp id, agent id, Secret, callback Token and EncodingAESKey."""
    status = setup.configure_app(
        session, corp_id=body.corp_id, agent_id=body.agent_id, secret=body.secret, token=body.token,
        encoding_aes_key=body.encoding_aes_key, base_url=body.base_url,
    )  # fmt: skip
    return status_view(base, status)


@router.post("/api/v1/channels/wecom/link", response_model=dto.WeComLink)
def wecom_link(session: Session = Depends(web.db_session), scope: ScopeContext = Depends(web.current_scope)):
    """A one-time code (15 minutes): the WeCom member who sends it to the app is bound to the caller."""
    return setup.link(session, scope_id=scope.scope_id, user_id=bindings.owner_user_id(session, scope.scope_id))


@router.get(setup.CALLBACK_PATH, include_in_schema=False)
async def wecom_verify(
    msg_signature: str = Query(..., max_length=64),
    timestamp: str = Query(..., max_length=32),
    nonce: str = Query(..., max_length=64),
    echostr: str = Query(..., max_length=4096),
    sessions: sessionmaker[Session] = Depends(web.sessions),
):
    """WeCom's callback URL check: the decrypted ``echostr``, as plain text."""

    def work() -> str:
        with sessions.begin() as session:
            return inbound.verify_callback_url(session, msg_signature, timestamp, nonce, echostr)

    try:
        return PlainTextResponse(await run_in_threadpool(work))
    except WeComCryptoError as exc:
        raise ChannelError("channel_webhook_secret_invalid", exc.message) from None


@router.post(setup.CALLBACK_PATH, include_in_schema=False)
async def wecom_callback(
    request: Request,
    msg_signature: str = Query(..., max_length=64),
    timestamp: str = Query(..., max_length=32),
    nonce: str = Query(..., max_length=64),
    sessions: sessionmaker[Session] = Depends(web.sessions),
):
    """An encrypted message: verified, queued for the assistant; an empty 200 at once (WeCom retries
    after 5 s; the meme goes out as an active message)."""
    body = await request.body()

    def work() -> str:
        with sessions.begin() as session:
            return inbound.accept_callback(session, msg_signature, timestamp, nonce, body)

    try:
        await run_in_threadpool(work)
    except WeComCryptoError as exc:
        raise ChannelError("channel_webhook_secret_invalid", exc.message) from None
    return PlainTextResponse("")
