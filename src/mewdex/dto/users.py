"""Account shapes: user (brief and full), tokens, quotas, ``/me``, the admin views and usage."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from mewdex.dto.common import Dto, Timestamp


class UserBrief(Dto):
    id: str
    email: str
    name: str | None = None


class User(UserBrief):
    role: str
    disabled: bool
    scope_id: str
    created_at: Timestamp | None = None
    time_zone: str | None = Field(None, description="IANA zone the pages show times in; null: the browser's")
    language: Literal["en", "zh"] | None = Field(None, description="page language; null: the browser's")


class Quota(Dto):
    """Limits; null = unlimited."""

    storage_bytes: int | None = None
    memes: int | None = None
    analysis_cost_per_month: float | None = None


class DiskUsage(Dto):
    bytes_used: int
    file_count: int
    scanned_at: Timestamp


class AdminUser(User):
    quota: Quota
    disk: DiskUsage
    analysis_cost_this_month: float


class AdminUserList(Dto):
    users: list[AdminUser]


class DeletedUser(Dto):
    """An account deleted with its library: what went."""

    id: str
    email: str
    scope_id: str
    memes: int = Field(description="memes of the account's library deleted with it")
    blobs: int = Field(description="files removed from the blob store (originals and thumbnails)")


class SignedIn(Dto):
    user: User
    csrf_token: str


class AuthInfo(Dto):
    mode: str
    via: str


class Me(Dto):
    user: User | None = None
    auth: AuthInfo
    scope_id: str
    quota: Quota | None = None
    disk: DiskUsage | None = None
    analysis_cost_this_month: float


class Token(Dto):
    id: str
    name: str
    prefix: str
    scopes: list[str] = Field(default_factory=list, description="``read``, ``write``, ``admin``")
    created_at: Timestamp | None = None
    expires_at: Timestamp | None = None
    last_used_at: Timestamp | None = None
    revoked_at: Timestamp | None = None


class NewToken(Token):
    token: str = Field(description="the ``mdx_…`` secret; shown only once")


class TokenList(Dto):
    tokens: list[Token]


class SignedUrl(Dto):
    url: str
    expires_at: Timestamp


class UsageGroup(Dto):
    key: str
    events: int
    cost: float


class UsageTotal(Dto):
    events: int
    cost: float


class UsageSummary(Dto):
    """Metered usage in ``[from, to)``; cost in CNY."""

    from_: Timestamp = Field(alias="from")
    to: Timestamp
    group_by: Literal["day", "kind", "model_profile", "user"]
    groups: list[UsageGroup]
    total: UsageTotal


class ResetLink(Dto):
    """A one-time password reset link (shown once; works once, until ``expires_at``)."""

    url: str = Field(description="``<base>/reset#mdr_…``")
    expires_at: Timestamp


class CreatedUser(Dto):
    user: AdminUser
    reset_link: ResetLink | None = Field(None, description="made when no password was given: the user sets one")


class InstanceUsage(Dto):
    """The whole instance: accounts, memes and stored bytes, this month's analysis cost (CNY)."""

    users: int
    users_disabled: int
    memes: int
    storage_bytes: int
    analysis_cost_this_month: float


class InstanceSettings(Dto):
    signup_enabled: bool
    schedule_max_jobs_per_account: int
    schedule_min_interval_minutes: int


class RescanResult(Dto):
    corrected: dict[str, dict[str, int]]
