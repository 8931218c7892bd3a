"""Vision-LLM analysis: one meme's image (downscaled JPEG ≤ 768 px; first and middle frames of an
animation) plus its OCR text, file and folder names and nearest visual neighbours' titles go to
the scope's vision model (``openai_compatible``, purpose ``vision``), which answers a context
validated against :data:`CONTEXT_SCHEMA`.

Same SDK calls for the fake and a real endpoint: ``response_format`` ``json_schema`` (strict)
first; an endpoint that rejects it (400/422) gets JSON mode (``json_object``) with the schema in
the prompt; an answer that does not validate gets one repair request (JSON mode, the error
quoted). A refusal raises ``provider_refused``. The connection's SDK client is made for one analysis
(its one to three requests share a keep-alive connection) and closed when it ends, failures
included. All requests of one analysis are one metered call
(:func:`mewdex.providers.metering.metered_call`, operation ``analysis.agent``, usage kind
``analysis``, audit event ``vision_analysis``).
"""

from __future__ import annotations

import base64
import io
import json
import logging
from collections.abc import Callable
from decimal import Decimal
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from sqlalchemy.orm import sessionmaker

from mewdex.db.models import ScopeContext
from mewdex.library import listing
from mewdex.providers import metering, openai_compat
from mewdex.providers.errors import ProviderError

log = logging.getLogger(__name__)
MAX_SIDE = 768
VERSION = "vision-1"


class VisionContext(BaseModel):
    """What the model returns (every field required; lists may be empty)."""

    model_config = ConfigDict(extra="forbid")
    title_zh: str = Field(max_length=200)
    title_en: str = Field(max_length=200)
    description_zh: str = Field(max_length=2000)
    description_en: str = Field(max_length=2000)
    text_in_image: str = Field(max_length=2000)
    people: list[str] = Field(max_length=20)
    objects: list[str] = Field(max_length=30)
    emotions: list[str] = Field(max_length=20)
    usage_scenarios: list[str] = Field(max_length=20)
    tags_zh: list[str] = Field(max_length=30)
    tags_en: list[str] = Field(max_length=30)
    template: str | None = Field(max_length=200)
    safety: str = Field(pattern="^(safe|sensitive|unsafe)$")


def _schema() -> dict[str, Any]:
    strings = {"type": "array", "items": {"type": "string"}}
    props: dict[str, Any] = {
        k: {"type": "string"} for k in ("title_zh", "title_en", "description_zh", "description_en", "text_in_image")
    }
    props.update({k: strings for k in ("people", "objects", "emotions", "usage_scenarios", "tags_zh", "tags_en")})
    props["template"] = {"type": ["string", "null"]}
    props["safety"] = {"type": "string", "enum": ["safe", "sensitive", "unsafe"]}
    return {"type": "object", "properties": props, "required": list(props), "additionalProperties": False}


#: The JSON schema (strict-mode compatible) the model's answer must match.
CONTEXT_SCHEMA = _schema()

SYSTEM_PROMPT = (
    "You describe memes (reaction images) for a search index. Look at the image and answer with one JSON "
    "object matching the schema: short titles and a description in Chinese (zh) and English (en) that say "
    "what the image shows and means, the text written in the image, people or characters, objects, "
    "emotions, situations in which people send this meme, tags in zh and en, the meme template's name when "
    "it is a well-known template (else null), and a safety flag. Do not invent text that is not in the image."
)


def jpeg_data_urls(frames: list[Any], max_side: int = MAX_SIDE) -> list[str]:
    """``data:image/jpeg;base64,…`` of each PIL frame, downscaled to ≤ ``max_side`` px, no metadata."""
    urls = []
    for frame in frames:
        image = frame.convert("RGB")
        image.thumbnail((max_side, max_side))
        buffer = io.BytesIO()
        image.save(buffer, format="JPEG", quality=85)  # a fresh JPEG: no EXIF or other metadata
        urls.append("data:image/jpeg;base64," + base64.b64encode(buffer.getvalue()).decode())
    return urls


def user_prompt(
    *, ocr_text: str, file_name: str, folders: list[str], neighbours: list[str], web_titles: list[str] | None = None
) -> str:
    """The text part of the request: file and folder names, OCR text, the titles of the nearest
    memes of the library (``neighbours``, ≤ 5) and of pages showing the image (``web_titles``, from
    reverse image search, ≤ 5) as hints."""
    lines = [
        f"File name: {file_name or '-'}",
        f"Folders: {' / '.join(folders) or '-'}",
        f"OCR text (may be incomplete): {ocr_text or '-'}",
    ]
    if neighbours:
        lines.append("Titles of visually similar memes in this library (hints): " + "; ".join(neighbours[:5]))
    if web_titles:
        lines.append("Titles of web pages showing this image (hints): " + "; ".join(web_titles[:5]))
    return "\n".join(lines)


#: Neighbours whose image embeddings are at least this similar (cosine) give their titles as hints:
#: same-template images sit above it, unrelated pictures below (EfficientNet features; the
#: near-duplicate threshold is 0.94).
NEIGHBOUR_MIN_COSINE = 0.75
MAX_NEIGHBOURS = 5


def meme_title(meme: Any) -> str | None:
    """The best short title a meme has for another meme's prompt: its vision template name or
    titles (en / zh), else its context title, else its display name when that is not a generic
    file name (``IMG_2034``); None when it has none."""
    from mewdex.library.names import is_generic_stem

    context = meme.meme_context or {}
    vision = context.get("vision") or {}
    parts = [vision.get("template"), vision.get("title_en"), vision.get("title_zh")]
    found = [str(p).strip() for p in parts if p and str(p).strip()]
    if found:
        return " / ".join(dict.fromkeys(found))[:200]
    title = str(context.get("title") or "").strip()
    if title:
        return title[:200]
    name = str(meme.display_name or "").strip()
    return name[:200] if name and not is_generic_stem(name) else None


def neighbour_titles(session: Any, scope_id: str, meme_id: Any, limit: int = MAX_NEIGHBOURS) -> list[str]:
    """Titles (:func:`meme_title`) of the scope's memes that look most like ``meme_id`` (visual
    embeddings, cosine ≥ :data:`NEIGHBOUR_MIN_COSINE`), nearest first, without repeats; ``[]`` when
    the meme has no visual embedding yet."""

    from mewdex.inference import visual_model as visual
    from mewdex.search.image_search import meme_vector
    from mewdex.search.vector import nearest_images

    vector = meme_vector(session, scope_id, meme_id)
    if vector is None:
        return []
    hits = [
        (m, c)
        for m, c in nearest_images(
            session,
            scope_id,
            vector,
            limit * 2,
            model=visual.MODEL_ID,
            preprocess_version=visual.PREPROCESS_VERSION,
            exclude=meme_id,
        )
        if c >= NEIGHBOUR_MIN_COSINE
    ]
    if not hits:
        return []
    memes = listing.memes_by_id(session, ScopeContext(scope_id), [m for m, _ in hits])
    titles: list[str] = []
    for meme_id_, _ in hits:
        title = meme_title(memes[meme_id_]) if meme_id_ in memes else None
        if title and title not in titles:
            titles.append(title)
    return titles[:limit]


def _parse(content: str | None) -> VisionContext:
    if not content:
        raise ValueError("empty answer")
    text = content.strip()
    if text.startswith("```"):
        text = text.strip("`").split("\n", 1)[-1]
    return VisionContext.model_validate(json.loads(text))


def analyze(
    sessions: sessionmaker,
    scope: ScopeContext,
    *,
    frames: list[Any],
    ocr_text: str,
    file_name: str,
    folders: list[str],
    neighbours: list[str] | None = None,
    web_titles: list[str] | None = None,
    task_id: str | None = None,
    resource_id: str | None = None,
    before_call: Callable[[], None] | None = None,
    max_cost: Decimal | None = None,
) -> dict[str, Any]:
    """Analyse one meme (module doc). Returns the validated context as a dict plus ``model``,
    ``model_profile``, ``version``, ``cost`` (CNY, str) and ``usage`` units.

    Raises :class:`ProviderError` (``connector_unavailable`` before anything is reserved,
    ``provider_failed``/``provider_rate_limited`` (retryable), ``provider_invalid_output``,
    ``provider_refused``) or ``PlatformError`` ``quota_exceeded`` (refused before any call)."""
    images = jpeg_data_urls(frames)
    content: list[dict[str, Any]] = [
        {
            "type": "text",
            "text": user_prompt(
                ocr_text=ocr_text,
                file_name=file_name,
                folders=folders,
                neighbours=neighbours or [],
                web_titles=web_titles or [],
            ),
        }
    ]
    content += [{"type": "image_url", "image_url": {"url": url, "detail": "low"}} for url in images]
    messages = [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": content}]

    def call() -> metering.CallResult:
        totals = {"input_tokens": 0, "cached_input_tokens": 0, "output_tokens": 0, "images": len(images), "requests": 0}
        modes: list[str] = []

        def request(response_format: dict[str, Any], extra: list[dict[str, Any]] | None = None):
            assert model.client is not None
            # Plain dicts in the SDK's message and response-format shapes (its TypedDicts are not inferred).
            answer = model.client.chat.completions.create(  # type: ignore[call-overload]
                model=model.model, messages=messages + (extra or []), response_format=response_format, temperature=0
            )
            units = openai_compat.usage_units(answer.usage)
            for key in ("input_tokens", "cached_input_tokens", "output_tokens"):
                totals[key] += units[key]
            totals["requests"] += 1
            message = answer.choices[0].message
            if getattr(message, "refusal", None):
                raise ProviderError("provider_refused", "the model declined to describe this image")
            return message.content

        strict = {
            "type": "json_schema",
            "json_schema": {"name": "meme_context", "strict": True, "schema": CONTEXT_SCHEMA},
        }
        json_mode = {"type": "json_object"}
        schema_hint = {
            "role": "system",
            "content": "Answer with JSON only, matching this JSON schema: " + json.dumps(CONTEXT_SCHEMA),
        }
        try:
            text = request(strict)
            modes.append("json_schema")
        except Exception as exc:  # an endpoint without structured outputs answers 400/422
            import openai

            if not (isinstance(exc, openai.APIStatusError) and exc.status_code in (400, 422)):
                raise
            text = request(json_mode, [schema_hint])
            modes.append("json_object")
        try:
            parsed = _parse(text)
        except (ValueError, ValidationError) as exc:
            problem = str(exc).splitlines()[0][:300] if str(exc) else "invalid JSON"
            repair = [
                {"role": "assistant", "content": (text or "")[:4000]},
                schema_hint,
                {
                    "role": "user",
                    "content": f"That answer is not valid ({problem}). Answer again with corrected JSON only.",
                },
            ]
            text = request(json_mode, repair)
            modes.append("repair")
            try:
                parsed = _parse(text)
            except (ValueError, ValidationError):
                raise ProviderError(
                    "provider_invalid_output",
                    "the model's answer does not match the schema after one repair",
                    retryable=True,
                ) from None
        return metering.CallResult(parsed.model_dump(), totals, detail={"modes": modes})

    with sessions.begin() as session:
        model = openai_compat.chat_client(session, scope, "vision")
    with model:  # one client for the analysis's requests, closed with its pool whatever happens
        result = metering.metered_call(
            sessions,
            scope,
            model,
            call,
            operation="analysis.agent",
            kind="analysis",
            event="vision_analysis",
            idempotency_key=f"task:{task_id}:vision" if task_id else None,
            task_id=task_id,
            resource_id=resource_id,
            before_call=before_call,
            max_cost=max_cost,
        )
    cost = model.price.cost(result.units)
    return {
        **result.value,
        "model": model.model,
        "model_profile": model.model_profile,
        "version": VERSION,
        "cost": str(cost),
        "usage": result.units,
    }
