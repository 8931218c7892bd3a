"""Small shared pieces of the DTOs."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field

Timestamp = Annotated[str, Field(description="ISO 8601 date-time with offset")]
JsonObject = dict[str, Any]


class Dto(BaseModel):
    """Base of every response DTO: built from plain values, serialised with the field names as given."""

    model_config = ConfigDict(extra="forbid")


class OpenDto(BaseModel):
    """A response DTO that may carry fields beyond the documented ones (kept as they come)."""

    model_config = ConfigDict(extra="allow")


class HealthReason(Dto):
    code: str
    message: str


class HealthStatus(OpenDto):
    """``GET /health``: ``status`` ``ok`` (200) or ``degraded`` (503), the public ``reasons`` when the
    database is unreachable; an admin gets the details beside them (workers, queues, disk, backup)."""

    status: str = Field(description="ok | degraded")
    reasons: list[HealthReason] | None = None
