"""DTO round trips (JSON in, the same JSON out) and the cursor codec."""

from __future__ import annotations

import base64
import json
from datetime import UTC, datetime
from uuid import UUID, uuid4

import pytest
from pydantic import ValidationError

from mewdex.dto.collections import Collection, CollectionBrief
from mewdex.dto.cursor import (
    MAX_CURSOR_CHARS,
    CursorInvalid,
    decode_cursor,
    encode_cursor,
)
from mewdex.dto.memes import Meme, MemeBrief
from mewdex.dto.search import SearchFilters, SearchHit, SearchRequest, SearchResults
from mewdex.dto.tasks import Batch, Task
from mewdex.dto.users import Me, UsageSummary

NOW = "2026-12-01T03:45:29.123456+00:00"
BRIEF = {
    "id": str(uuid4()),
    "display_name": "cat",
    "sha256": "a" * 64,
    "extension": ".png",
    "size_bytes": 10,
    "media_url": "/media/x",
    "thumbnail_url": "/media/x/thumbnail",
    "created_at": NOW,
}
FULL = {
    **BRIEF,
    "media_type": "image/png",
    "width": 4,
    "height": 3,
    "frames": 1,
    "duration_ms": None,
    "animated": False,
    "animated_preview_url": None,
    "thumbnails": {"still": "available"},
    "near_duplicates": [
        {**BRIEF, "relation": "duplicate_of", "kind": "duplicate", "phash_distance": 2, "cosine": 0.97}
    ],
    "context_status": "ready",
    "meme_context": {"ocr_text": "hi"},
    "provenance": {"source": "recaption", "template_id": "m0"},
    "template_id": "m0",
    "watched_file": {"folder": "/srv/memes", "path": "cats/a.png", "missing_since": None},
    "job": {"id": str(uuid4()), "status": "succeeded", "error": None},
    "stages": {"visual": {"status": "succeeded", "planned": True, "skip_reason": None, "attempts": 1, "error": None}},
    "revision": 2,
    "updated_at": NOW,
    "tags": ["cat"],
}
TASK = {
    "id": "t1",
    "type": "image.visual",
    "status": "queued",
    "stage": "visual",
    "lane": "visual",
    "resource_key": None,
    "submission_mode": "interactive",
    "job_id": None,
    "meme_id": None,
    "batch_id": None,
    "progress": 0.0,
    "message": None,
    "error": None,
    "attempts": 0,
    "max_attempts": 3,
    "termination_reason": None,
    "resume_available": False,
    "observed_cost": None,
    "parked": False,
    "available_at": NOW,
    "lease_expires_at": None,
    "created_at": NOW,
    "started_at": None,
    "completed_at": None,
}


@pytest.mark.parametrize(
    "model,value",
    [
        (MemeBrief, BRIEF),
        (Meme, FULL),
        (
            CollectionBrief,
            {
                "id": "c",
                "name": "n",
                "item_count": 1,
                "created_at": NOW,
                "updated_at": NOW,
                "role": "owner",
                "owner": None,
                "use_in_chat": None,
            },
        ),
        (
            Collection,
            {
                "id": "c",
                "name": "n",
                "item_count": 1,
                "created_at": NOW,
                "updated_at": NOW,
                "role": "viewer",
                "owner": "friend@example.com",
                "use_in_chat": True,
                "items": [BRIEF],
            },
        ),
        (
            SearchResults,
            {
                "results": [
                    {
                        "id": "m",
                        "display_name": "d",
                        "sha256": "s",
                        "score": 0.5,
                        "media_url": "/media/m",
                        "snippet": "",
                        "confidence": "medium",
                        "why": None,
                        "why_query": None,
                    }
                ],
                "took_ms": 1.5,
            },
        ),
        (Task, TASK),
        (
            Batch,
            {
                "id": "b",
                "state": "open",
                "sealed": False,
                "created_at": NOW,
                "finalized_at": None,
                "summary": None,
                "progress": {"queued": 1},
            },
        ),
        (
            Me,
            {
                "user": None,
                "auth": {"mode": "none", "via": "none"},
                "scope_id": "default",
                "quota": None,
                "disk": None,
                "analysis_cost_this_month": 0.0,
            },
        ),
        (
            UsageSummary,
            {
                "from": NOW,
                "to": NOW,
                "group_by": "day",
                "groups": [{"key": "k", "events": 1, "cost": 0.1}],
                "total": {"events": 1, "cost": 0.1},
            },
        ),
    ],
)
def test_round_trip_keeps_the_json(model, value):
    parsed = model.model_validate_json(json.dumps(value))
    assert json.loads(parsed.model_dump_json(by_alias=True)) == value


def test_unknown_fields_are_refused_in_responses():
    with pytest.raises(ValidationError):
        MemeBrief.model_validate({**BRIEF, "surprise": 1})
    with pytest.raises(ValidationError):
        SearchHit.model_validate({**BRIEF, "score": 1.0, "snippet": ""})  # a hit has only the reference fields


def test_search_request_splits_into_filters():
    request = SearchRequest.model_validate(
        {
            "query": "q",
            "formats": ["gif"],
            "created_from": "2020-01-01T00:00:00",
            "collection_ids": [str(uuid4()).upper()],
        }
    )
    filters = request.filters()
    assert filters.formats == ["gif"] and filters.created_from == datetime(2020, 1, 1, tzinfo=UTC)
    assert filters.collection_ids == [request.collection_ids[0].lower()] and not filters.empty
    assert SearchFilters().empty and SearchRequest(query="q").filters().empty


def test_cursor_round_trip():
    when, ident = datetime.now(UTC), uuid4()
    cursor = encode_cursor(["name", "a[b]{c}\u00e9", when, ident, 3])
    assert decode_cursor(cursor, (str, str, datetime, UUID, int)) == ["name", "a[b]{c}\u00e9", when, ident, 3]
    assert "=" not in cursor and cursor.isascii()


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


@pytest.mark.parametrize(
    "cursor",
    [
        "",
        "\x00",
        "abc\x00",
        "[" * 1500,
        _b64(b"[" * 1500),
        _b64(b'{"a":' * 1500 + b"1" + b"}" * 1500)[:2000],
        "!!!",
        "a",
        _b64(b"\xff\xfe"),
        _b64(b"null"),
        _b64(b'"x"'),
        _b64(b"[1]"),
        _b64(b'["x", 1]'),
        _b64(b'["x", true]'),
        _b64(b'["x\\u0000", "y"]'),
        "A" * (MAX_CURSOR_CHARS + 1),
        "\u6e38\u6807",
    ],
)
def test_malformed_cursors_raise_cursor_invalid(cursor):
    with pytest.raises(CursorInvalid) as info:
        decode_cursor(cursor, (str, str))
    assert info.value.code == "invalid_cursor"


@pytest.mark.parametrize(
    "raw,types",
    [
        (b'["not a date"]', (datetime,)),
        (b'["not-a-uuid"]', (UUID,)),
        (b"[1.5]", (int,)),
        (b"[true]", (int,)),
        (b"[1e999]", (str,)),
    ],
)
def test_wrong_types_raise_cursor_invalid(raw, types):
    with pytest.raises(CursorInvalid):
        decode_cursor(_b64(raw), types)
