"""Re-caption (改字) and templates (issue 44) against the real app, database, blob store and OCR: the
API makes a new meme that names the original and whose pixels read the new text (the original
unchanged), a GIF on every frame, a text-free template, the preview, the CLI, the assistant/MCP tool
``make_meme``, and bad input answered with clear codes and nothing stored. The memes are drawn here
(small, with the caption font) and added without processing; one OCR load serves the module."""

from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image, ImageDraw
from sqlalchemy import func, select

from conftest import client_for, drop_scope, module_scope_fixtures, new_scope
from library_helpers import check_storage_invariants
from mewdex.assistant import catalogue
from mewdex.db.models import Meme
from mewdex.inference import models
from mewdex.library import recaption as engine
from mewdex.library.images import load_frames
from mewdex.library.memes import add_image
from mewdex.pipeline.context import clean_ocr_lines

OLD, NEW = "今天加班", "准时下班"


def picture(caption: str | None, seed: int, size=(320, 200), frames: int = 1, outlined: bool = True) -> bytes:
    """A gradient picture (not flat: the text must be inpainted) with ``caption`` in white outlined
    (or dark plain) text at the bottom; a GIF of ``frames`` frames whose text moves a pixel a frame."""
    width, height = size
    rng = np.random.default_rng(seed)
    base = np.zeros((height, width, 3), np.uint8)
    base[..., 0] = np.linspace(40, 200, width)[None, :]
    base[..., 1] = np.linspace(90, 160, height)[:, None]
    base[..., 2] = rng.integers(60, 120)
    images = []
    for index in range(frames):
        image = Image.fromarray(base)
        if caption:
            draw = ImageDraw.Draw(image)
            font = engine.caption_font(40)
            fill, stroke = ((255, 255, 255), (0, 0, 0)) if outlined else ((20, 20, 20), None)
            draw.text(
                (width / 2 + index, height - 40),
                caption,
                font=font,
                fill=fill,
                anchor="mm",
                stroke_width=3 if outlined else 0,
                stroke_fill=stroke,
            )
        images.append(image)
    buffer = io.BytesIO()
    if frames > 1:
        images[0].save(buffer, "GIF", save_all=True, append_images=images[1:], duration=80, loop=0)
    else:
        images[0].save(buffer, "PNG")
    return buffer.getvalue()


def ocr(data: bytes) -> str:
    frames = load_frames(data, indices="first_middle")
    return "".join(line.text for line in models.ocr_engine().read(frames)).replace(" ", "")


scope, client = module_scope_fixtures("recap")


@pytest.fixture(scope="module")
def memes(sessions, store, scope):
    """The test memes' ids: a captioned still, a captioned GIF, a text-free still, a huge GIF."""

    def add(data: bytes, name: str) -> str:
        result = add_image(sessions, store, scope, data, filename=name, provenance={}, process=False)
        assert result.status == "created"
        return str(result.meme_id)

    huge = io.BytesIO()
    tiles = [Image.new("RGB", (8, 8), (i % 256, 0, 0)) for i in range(engine.MAX_FRAMES + 1)]
    tiles[0].save(huge, "GIF", save_all=True, append_images=tiles[1:], duration=20)
    return {
        "still": add(picture(OLD, 1), "still.png"),
        "gif": add(picture(OLD, 2, size=(240, 150), frames=4), "moving.gif"),
        "blank": add(picture(None, 3), "blank.png"),
        "huge": add(huge.getvalue(), "huge.gif"),
    }


def row(sessions, meme_id: str) -> tuple:
    with sessions.begin() as session:
        meme = session.get(Meme, meme_id)
        return meme.sha256, meme.revision, dict(meme.meme_context), meme.display_name


def meme_count(sessions, scope) -> int:
    with sessions.begin() as session:
        return session.execute(select(func.count()).select_from(Meme).where(Meme.scope_id == scope.scope_id)).scalar()


def test_recaption_makes_a_new_meme_that_reads_the_new_text(client, sessions, memes):
    before = row(sessions, memes["still"])
    original_bytes = client.get(f"/media/{memes['still']}").content
    r = client.post(f"/api/v1/memes/{memes['still']}/recaption", json={"text": NEW})
    assert r.status_code == 201, r.text
    made = r.json()
    assert made["id"] != memes["still"] and made["template_id"] == memes["still"]
    assert made["display_name"] == NEW and made["provenance"]["source"] == "recaption"
    assert made["job"]["status"] == "queued"  # processed like an upload
    assert row(sessions, memes["still"]) == before  # the original is never changed
    assert client.get(f"/media/{memes['still']}").content == original_bytes
    read = ocr(client.get(f"/media/{made['id']}").content)
    assert sum(ch in read for ch in NEW) >= 3 and not any(ch in read for ch in "今天加"), read
    # the same caption again is the same picture: the existing meme, 200
    again = client.post(f"/api/v1/memes/{memes['still']}/recaption", json={"text": NEW})
    assert again.status_code == 200 and again.json()["id"] == made["id"]


def test_stored_boxes_style_and_preview(client, sessions, scope, memes):
    count = meme_count(sessions, scope)
    # the context stage's boxes are used when stored (here: a box where there is no text at all)
    with sessions.begin() as session:
        meme = session.get(Meme, memes["blank"])
        meme.meme_context = {
            "ocr_lines": [{"text": "x", "score": 0.9, "box": [[20, 20], [200, 20], [200, 70], [20, 70]]}]
        }
    r = client.get(f"/media/{memes['blank']}/recaption", params={"text": "HELLO", "color": "#ff0000"})
    assert r.status_code == 200 and r.headers["content-type"] == "image/png"
    pixels = np.array(Image.open(io.BytesIO(r.content)).convert("RGB"))
    red = (pixels[..., 0] > 200) & (pixels[..., 1] < 60) & (pixels[..., 2] < 60)
    ys, xs = np.nonzero(red)
    assert red.sum() > 200 and 10 <= ys.min() and ys.max() <= 85 and xs.min() >= 0  # drawn in the box, in red
    with sessions.begin() as session:
        session.get(Meme, memes["blank"]).meme_context = {}
    assert meme_count(sessions, scope) == count  # a preview stores nothing


def test_a_caption_placed_on_a_text_free_template(client, sessions, memes):
    """``place``: the top or bottom band, drawn over the picture (white, outlined), nothing erased: the
    search page's "Make a meme" on a meme with no text."""
    original = client.get(f"/media/{memes['blank']}").content
    r = client.get(f"/media/{memes['blank']}/recaption", params={"text": "HELLO", "place": "bottom"})
    assert r.status_code == 200, r.text
    before = np.array(Image.open(io.BytesIO(original)).convert("RGB")).astype(int)
    after = np.array(Image.open(io.BytesIO(r.content)).convert("RGB")).astype(int)
    changed = np.nonzero(np.abs(after - before).sum(axis=2) > 30)[0]
    assert changed.size > 200 and changed.min() >= int(before.shape[0] * 0.75)  # only the bottom band
    assert (after == 255).all(axis=2).sum() > 100  # white text
    bad = client.get(f"/media/{memes['blank']}/recaption", params={"text": "HELLO", "place": "middle"})
    assert bad.status_code == 422
    made = client.post(f"/api/v1/memes/{memes['blank']}/recaption", json={"text": "HELLO", "place": "top"})
    assert made.status_code == 201 and made.json()["template_id"] == memes["blank"], made.text


def test_gif_every_frame(client, memes):
    r = client.post(f"/api/v1/memes/{memes['gif']}/recaption", json={"text": NEW})
    assert r.status_code == 201, r.text
    data = client.get(f"/media/{r.json()['id']}").content
    result = Image.open(io.BytesIO(data))
    assert result.format == "GIF" and result.n_frames == 4 and result.info.get("duration") == 80
    for index in (0, 3):
        result.seek(index)
        frame = result.convert("RGB")
        buffer = io.BytesIO()
        frame.save(buffer, "PNG")
        read = ocr(buffer.getvalue())
        assert sum(ch in read for ch in NEW) >= 3 and not any(ch in read for ch in "今天加"), (index, read)


def test_template_erases_the_text_and_a_blank_meme_is_its_own(client, memes):
    r = client.post(f"/api/v1/memes/{memes['still']}/template")
    assert r.status_code == 201, r.text
    template = r.json()
    assert template["template_id"] == memes["still"] and template["provenance"]["source"] == "template"
    assert not any(ch in ocr(client.get(f"/media/{template['id']}").content) for ch in OLD)
    own = client.post(f"/api/v1/memes/{memes['blank']}/template")
    assert own.status_code == 200 and own.json()["id"] == memes["blank"]


@pytest.mark.parametrize(
    "meme, body, status, code",
    [
        ("still", {"text": "   "}, 422, "caption_empty"),
        ("still", {"text": "字" * (engine.MAX_TEXT_CHARS + 1)}, 422, "caption_too_long"),
        ("blank", {"text": "hello"}, 422, "no_text_boxes"),
        ("still", {"text": "hello", "boxes": [[400, 400, 500, 500]]}, 422, "boxes_invalid"),
        ("still", {"text": "hello", "color": "red-ish"}, 422, "style_invalid"),
        ("huge", {"text": "hello", "boxes": [[0, 0, 8, 8]]}, 413, "recaption_too_large"),
        ("missing", {"text": "hello"}, 404, "not_found"),
    ],
)
def test_bad_input_is_refused_and_nothing_is_stored(client, sessions, store, scope, memes, meme, body, status, code):
    count = meme_count(sessions, scope)
    meme_id = memes.get(meme, "00000000-0000-4000-8000-000000000000")
    r = client.post(f"/api/v1/memes/{meme_id}/recaption", json=body)
    assert r.status_code == status and r.json()["error"]["code"] == code, r.text
    assert meme_count(sessions, scope) == count
    check_storage_invariants(sessions, store, scope)


def test_another_scope_sees_no_such_meme(sessions, memes):
    other = new_scope(sessions, "recap-other")
    try:
        with client_for(other) as c:
            r = c.post(f"/api/v1/memes/{memes['still']}/recaption", json={"text": NEW})
        assert r.status_code == 404 and r.json()["error"]["code"] == "not_found"
    finally:
        drop_scope(sessions, other)


def test_cli_recaption_writes_the_file(mewdex_env, sessions, store, scope, memes, tmp_path):
    # a meme whose caption boxes the context stage stored (the CLI process loads no OCR then)
    data = picture("早上好", 4)
    meme_id = str(add_image(sessions, store, scope, data, filename="cli.png", provenance={}, process=False).meme_id)
    frames = load_frames(data)
    lines = clean_ocr_lines(models.ocr_engine().read(frames), image_size=frames[0].size)
    assert lines and "box" in lines[0]
    with sessions.begin() as session:
        session.get(Meme, meme_id).meme_context = {"ocr_lines": lines}
    out = tmp_path / "made.png"
    proc = mewdex_env.cli("recaption", meme_id[:8], "好的", "-o", str(out), "--no-save", scope=scope.scope_id)
    assert proc.returncode == 0, proc.stderr
    read = ocr(out.read_bytes())
    assert "好的" in read and "早上" not in read, read
    bad = mewdex_env.cli("recaption", meme_id, " ", scope=scope.scope_id)
    assert bad.returncode == 2 and "caption_empty" in bad.stderr


def test_make_meme_tool(sessions, scope, memes):
    context = catalogue.ToolContext(sessions, scope)
    tool = catalogue.find("make_meme", "mcp")
    assert tool in catalogue.offered("agent") and tool.access == "write"
    made = catalogue.call(tool, context, {"caption": "不信", "template": memes["still"]})
    assert made.value["template_id"] == memes["still"] and made.value["status"] == "created"
    assert made.data and made.format == "png"
    with pytest.raises(catalogue.ToolFailure) as failure:
        catalogue.call(tool, context, {"caption": "不信"})
    assert failure.value.code == "invalid_request"
    with pytest.raises(catalogue.ToolFailure) as failure:
        catalogue.call(tool, context, {"caption": "", "template": memes["still"]})
    assert failure.value.code == "caption_empty"
