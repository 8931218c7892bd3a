"""Admin endpoints (404 for non-admins, like a missing route):

* ``GET /api/v1/admin/users`` → ``{"users": [{…user, "quota", "disk", "analysis_cost_this_month"}]}``
* ``POST /api/v1/admin/users`` ``{email, name?, role?, password?}`` → 201 ``{"user", "reset_link"}``
* ``POST /api/v1/admin/users/{id}/reset-link`` → 201 ``{"url", "expires_at"}`` (one-time)
* ``GET /api/v1/admin/instance`` → accounts, memes, stored bytes, this month's analysis cost
* ``PATCH /api/v1/admin/users/{id}`` ``{role?, disabled?, quota?: {storage_bytes?, memes?,
  analysis_cost_per_month?}}`` (a quota field set to null returns to the configured default)
* ``DELETE /api/v1/admin/users/{id}`` → ``{"id", "email", "scope_id", "memes", "blobs"}``: the account
  and its whole library (rows and files); 409 ``cannot_delete_self``, ``last_admin``, ``account_busy``
* ``GET /api/v1/admin/usage?from=&to=&group_by=day|kind|model_profile|user`` (all users)
* ``GET|PATCH /api/v1/admin/settings`` ``{signup_enabled}``
* ``POST /api/v1/admin/disk-usage/rescan`` → ``{"corrected": {user_id: {"bytes", "files"}}}``
"""

from __future__ import annotations

import secrets
from datetime import datetime
from decimal import Decimal

from fastapi import APIRouter, Depends, Query, Request
from pydantic import BaseModel, Field
from sqlalchemy.orm import Session

from mewdex.db.engine import get_sessionmaker
from mewdex.dto.users import (
    AdminUser,
    AdminUserList,
    CreatedUser,
    DeletedUser,
    InstanceSettings,
    InstanceUsage,
    RescanResult,
    ResetLink,
    UsageSummary,
)
from mewdex.platform import password_reset, quotas, usage, users
from mewdex.platform.auth import Principal
from mewdex.platform.instance import get_setting, set_setting
from mewdex.platform.users import User
from mewdex.web.deps import db_session, parse_id, public_base_url, require_admin
from mewdex.web.errors import ApiError, error_responses
from mewdex.web.routers.usage import time_range

router = APIRouter(
    prefix="/api/v1/admin",
    tags=["admin"],
    dependencies=[Depends(require_admin)],
    responses=error_responses(401, 403, 404, 409, 422),
)


class QuotaPatch(BaseModel):
    storage_bytes: int | None = Field(None, ge=0, le=2**62)
    memes: int | None = Field(None, ge=0, le=2**31 - 1)
    analysis_cost_per_month: float | None = Field(None, ge=0, le=999_999)  # CNY; the column is NUMERIC(12, 6)


class UserPatch(BaseModel):
    role: str | None = None
    disabled: bool | None = None
    quota: QuotaPatch | None = None


class NewUser(BaseModel):
    email: str
    name: str | None = None
    role: str | None = None  # user (default) | admin
    password: str | None = None  # none: the answer carries a one-time link where the user sets it


class SettingsPatch(BaseModel):
    signup_enabled: bool | None = None
    #: run-time values of the schedule limits; null: back to the ``MEWDEX_SCHEDULE_…`` setting
    schedule_max_jobs_per_account: int | None = Field(None, ge=1, le=100000)
    schedule_min_interval_minutes: int | None = Field(None, ge=1, le=1440)


def admin_user_dict(session: Session, user: User) -> dict:
    return {
        **users.user_dict(user),
        "quota": quotas.limits_for(user).as_dict(),
        "disk": quotas.disk_usage(session, user),
        "analysis_cost_this_month": float(usage.month_cost(session, user.scope_id)),
    }


@router.get("/users", response_model=AdminUserList)
def list_users(session: Session = Depends(db_session)):
    return {"users": [admin_user_dict(session, u) for u in users.list_users(session)]}


def _reset_link(request: Request, session: Session, user: User, admin: Principal) -> dict:
    token, expires_at = password_reset.create_link(session, user, created_by=admin.user)
    return {"url": f"{public_base_url(request)}/reset#{token}", "expires_at": expires_at.isoformat()}


@router.post("/users", status_code=201, response_model=CreatedUser)
def create_user(
    body: NewUser,
    request: Request,
    admin: Principal = Depends(require_admin),
    session: Session = Depends(db_session),
):
    """A new account (sign-up need not be open; ``role`` default user, admin for an installation's
    first account). Without ``password`` the account gets an unusable
    random one and the answer's ``reset_link`` (one-time, 24 h) lets the person choose theirs.
    409 ``email_taken``; 422 ``email_invalid``, ``role_invalid``, the password rules."""
    if body.role is not None and body.role not in ("user", "admin"):
        raise ApiError(422, "role_invalid", "role must be user or admin")
    password = body.password if body.password is not None else secrets.token_urlsafe(32)
    user = users.create_user(session, body.email, password, name=body.name, role=body.role)
    link = _reset_link(request, session, user, admin) if body.password is None else None
    return {"user": admin_user_dict(session, user), "reset_link": link}


@router.post("/users/{user_id}/reset-link", status_code=201, response_model=ResetLink)
def reset_link(
    user_id: str, request: Request, admin: Principal = Depends(require_admin), session: Session = Depends(db_session)
):
    """A one-time link (24 h) where the user sets a new password (``/reset#mdr_…``; shown only here);
    an older unused link of the user stops working. Using it ends the user's sessions and revokes
    their API tokens. 409 ``user_disabled`` (enable the account first)."""
    user = users.get_user(session, parse_id(user_id, "user"))
    if user is None:
        raise ApiError(404, "not_found", "user not found")
    return _reset_link(request, session, user, admin)


@router.get("/instance", response_model=InstanceUsage)
def instance(session: Session = Depends(db_session)):
    """The whole instance: ``{"users", "users_disabled", "memes", "storage_bytes",
    "analysis_cost_this_month"}`` (memes and bytes of every account; cost in CNY, this month)."""
    return usage.instance_usage(session)


@router.patch("/users/{user_id}", response_model=AdminUser)
def patch_user(user_id: str, body: UserPatch, session: Session = Depends(db_session)):
    """409 ``last_admin`` when the change would leave no enabled admin; 422 ``role_invalid``."""
    user = users.get_user(session, parse_id(user_id, "user"))
    if user is None:
        raise ApiError(404, "not_found", "user not found")
    if body.role is not None:
        users.set_role(session, user, body.role)
    if body.disabled is not None:
        users.set_disabled(session, user, body.disabled)
    if body.quota is not None:
        fields = body.quota.model_fields_set
        if "storage_bytes" in fields:
            user.quota_storage_bytes = body.quota.storage_bytes
        if "memes" in fields:
            user.quota_memes = body.quota.memes
        if "analysis_cost_per_month" in fields:
            cost = body.quota.analysis_cost_per_month
            user.quota_analysis_cost_per_month = None if cost is None else Decimal(str(cost))
    session.flush()
    return admin_user_dict(session, user)


@router.delete("/users/{user_id}", response_model=DeletedUser)
def delete_user(user_id: str, admin: Principal = Depends(require_admin)):
    """Delete the account and its library: its memes, collections, conversations, schedules, channel
    bindings, tasks and usage rows, then its blobs and thumbnails (:mod:`mewdex.library.accounts`).
    404 ``not_found``; 409 ``cannot_delete_self`` (an admin deletes another account),
    ``last_admin``, ``account_busy`` (a task of the account is running: disable it and retry)."""
    from mewdex.library import accounts

    uid = parse_id(user_id, "user")
    if admin.user is not None and admin.user.user_id == uid:
        raise ApiError(409, "cannot_delete_self", "you cannot delete your own account; another admin can")
    deleted = accounts.delete_account_now(get_sessionmaker(), uid)
    return {"id": str(uid), **deleted.as_dict()}


@router.get("/usage", response_model=UsageSummary)
def all_usage(
    start: datetime | None = Query(None, alias="from"),
    end: datetime | None = Query(None, alias="to"),
    group_by: str = Query("day", pattern="^(day|kind|model_profile|user)$"),
    session: Session = Depends(db_session),
):
    """Every user's usage: the ``/api/v1/usage`` shape, ``group_by=user`` keys by user id."""
    start, end = time_range(start, end)
    return usage.summary(session, start=start, end=end, group_by=group_by)


def _instance_settings(session: Session) -> dict:
    from mewdex.schedules import service as jobs

    return {"signup_enabled": bool(get_setting(session, "signup_enabled", False)), **jobs.limits(session)}


@router.get("/settings", response_model=InstanceSettings)
def read_settings(session: Session = Depends(db_session)):
    """Instance settings an admin changes at run time: sign-up, and the schedule limits in force."""
    return _instance_settings(session)


@router.patch("/settings", response_model=InstanceSettings)
def patch_settings(body: SettingsPatch, session: Session = Depends(db_session)):
    from mewdex.schedules import service as jobs

    if body.signup_enabled is not None:
        set_setting(session, "signup_enabled", body.signup_enabled)
    for key in jobs.LIMIT_SETTINGS:
        if key in body.model_fields_set:
            set_setting(session, key, getattr(body, key))
    return _instance_settings(session)


@router.post("/disk-usage/rescan", response_model=RescanResult)
def rescan(_principal: Principal = Depends(require_admin)):
    return {"corrected": quotas.rescan(get_sessionmaker())}
