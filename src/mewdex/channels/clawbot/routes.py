"""ClawBot's routes (imported by the web layer only): ``POST /api/v1/channels/clawbot/login`` — a
login QR; ``GET /api/v1/channels/clawbot/login/{qrcode}`` — its state (``confirmed`` binds the caller)."""

from __future__ import annotations

from fastapi import APIRouter, Depends
from fastapi.concurrency import run_in_threadpool
from sqlalchemy.orm import Session, sessionmaker

from mewdex.channels import bindings
from mewdex.channels.clawbot import NAME, setup
from mewdex.channels.clawbot import shapes as dto
from mewdex.channels.errors import ChannelError
from mewdex.channels.platform import PlatformError
from mewdex.channels.registry import web_kit
from mewdex.dto.scopes import ScopeContext


def _platform_error(exc: PlatformError) -> ChannelError:
    """502 ``channel_platform_error``: iLink refused or could not be reached (its reason, no secret)."""
    return ChannelError("channel_platform_error", exc.message)


#: The web layer's dependencies (lent once per process: channels.registry.lend).
web = web_kit()
router = APIRouter(tags=["channels"])


@router.post("/api/v1/channels/clawbot/login", response_model=dto.ClawBotQr)
async def clawbot_login(
    scope: ScopeContext = Depends(web.current_scope), sessions: sessionmaker[Session] = Depends(web.sessions)
):
    """A new WeChat login QR code to scan (the bot QR login of the iLink bot API)."""
    try:
        qr = await run_in_threadpool(setup.start_login)
    except PlatformError as exc:
        raise _platform_error(exc) from None

    def remember() -> None:  # only the caller may poll and complete this login
        with sessions.begin() as session:
            bindings.issue_login(
                session,
                scope_id=scope.scope_id,
                user_id=bindings.owner_user_id(session, scope.scope_id),
                channel=NAME,
                login_id=qr["qrcode"],
            )

    await run_in_threadpool(remember)
    return qr


@router.get("/api/v1/channels/clawbot/login/{qrcode}", response_model=dto.ClawBotLoginStatus)
async def clawbot_login_status(
    qrcode: str,
    scope: ScopeContext = Depends(web.current_scope),
    sessions: sessionmaker[Session] = Depends(web.sessions),
):
    """The login's state; ``confirmed`` binds the scanning person to the caller (bot token sealed)."""

    def started_here() -> bool:
        with sessions() as session:
            return bindings.login_started_by(session, scope_id=scope.scope_id, channel=NAME, login_id=qrcode)

    # Another account's (or an expired, finished or invented) login is not asked about upstream.
    if len(qrcode) > 200 or not await run_in_threadpool(started_here):
        raise ChannelError("not_found", "no such login")
    try:
        status = await run_in_threadpool(setup.login_status, qrcode)
    except PlatformError as exc:
        raise _platform_error(exc) from None
    if status["status"] != "confirmed":
        return {"status": status["status"], "binding": None}

    def bind() -> dict:
        with sessions.begin() as session:
            # The login is used up first (checked: only its starter, once), then the person bound.
            bindings.finish_login(session, scope_id=scope.scope_id, channel=NAME, login_id=qrcode)
            user_id = bindings.owner_user_id(session, scope.scope_id)
            row = setup.complete_login(session, scope_id=scope.scope_id, user_id=user_id, status=status)
            return bindings.api_view(row)

    return {"status": "confirmed", "binding": await run_in_threadpool(bind)}
