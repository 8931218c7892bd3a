"""Stickers and clips (issue 42 item 2) against the real app, database, blob store, worker and models:
WebM, MP4, AVIF, HEIC and TGS files upload and import as memes of their own format; a video sticker
(VP9 WebM with alpha) and an MP4 whose frames show drawn words are animated memes whose words search
finds (OCR of the sampled frames); a TGS renders to an animated meme with a poster and an animated
preview; the media is served with its content type and played in the page; over-limit clips are
refused with a clear code and nothing stored. Every file is made here (PyAV, Pillow, pillow-heif, a
hand-written Lottie document), small."""

from __future__ import annotations

import gzip
import io
import json
import os
import re
import subprocess
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from clip_helpers import clip, lottie, still
from conftest import MEWDEX_BIN, drop_scope, module_scope_fixtures, new_scope
from it_helpers import meme
from library_helpers import check_storage_invariants
from mewdex.library import images
from mewdex.library.importer import collect, import_paths
from mewdex.library.watch import WatchedFolder, sync_file

STICKER_WORD, CLIP_WORD = "PINEAPPLE", "WALRUS"


SAMPLES = {
    "webm": lambda: clip("webm", "libvpx-vp9", "FROG", alpha=True),
    "mp4": lambda: clip("mp4", "libx264", "TOAD"),
    "avif": lambda: still("AVIF", 1),
    "heic": lambda: still("HEIF", 2),
    "tgs": lambda: lottie(),
}


scope, client = module_scope_fixtures("clips")


def upload(client, name: str, data: bytes, content_type: str = "application/octet-stream"):
    return client.post("/api/v1/memes", files=[("files", (name, data, content_type))])


@pytest.mark.parametrize("fmt", sorted(SAMPLES))
def test_each_format_uploads_as_itself_and_is_served_with_its_type(client, sessions, scope, fmt):
    data = SAMPLES[fmt]()
    r = upload(client, f"sample.{fmt}", data, images.MEDIA_TYPES[fmt])
    assert r.status_code == 201, r.text
    result = r.json()["results"][0]
    assert result["status"] == "created", result
    row = meme(sessions, scope, result["meme"]["id"])
    assert row.extension == images.EXTENSIONS[fmt] and row.storage_key == row.sha256 + row.extension
    assert row.extensions["image"]["format"] == fmt
    assert row.extensions["image"]["animated"] is (fmt in ("webm", "mp4", "tgs"))
    media = client.get(f"/media/{row.id}")
    assert media.status_code == 200 and media.content == data
    assert media.headers["content-type"] == images.MEDIA_TYPES[fmt]
    # a clip is played from any point: the browser's range requests work
    part = client.get(f"/media/{row.id}", headers={"Range": "bytes=0-9"})
    assert part.status_code == 206 and part.content == data[:10]


def test_each_format_imports_from_a_folder(sessions, store, tmp_path):
    scope = new_scope(sessions, "clipimp")
    try:
        names = {f"party {fmt}.{fmt}": fmt for fmt in SAMPLES} | {"phone call.mov": "mp4", "beach day.heif": "heic"}
        made = {name: SAMPLES[fmt]() for name, fmt in names.items()}
        made["phone call.mov"], made["beach day.heif"] = clip("mp4", "libx264", "MOOSE"), still("HEIF", 3)
        for name, data in made.items():
            (tmp_path / name).write_bytes(data)
        results = {}
        import_paths(
            sessions,
            store,
            scope,
            collect([tmp_path]),
            on_result=lambda item, res: results.update({item.path.name: res}),
        )
        assert {n: r.status for n, r in results.items()} == dict.fromkeys(names, "created"), results
        for name, fmt in names.items():
            row = meme(sessions, scope, results[name].meme_id)
            assert (row.extension, row.display_name) == (images.EXTENSIONS[fmt], name.rsplit(".", 1)[0])
        check_storage_invariants(sessions, store, scope)
    finally:
        drop_scope(sessions, scope)


def test_mewdex_import_and_a_watched_folder_take_clips(mewdex_env, sessions, store, tmp_path):
    """The real ``mewdex import --json`` command, and a watched folder's file sync, on clips and stickers."""
    scope = new_scope(sessions, "clipcli")
    try:
        (tmp_path / "cli").mkdir()
        (tmp_path / "cli" / "jump.webm").write_bytes(clip("webm", "libvpx", "JUMP"))
        (tmp_path / "cli" / "wave.tgs").write_bytes(lottie(frames=12))
        env = {**os.environ, **mewdex_env.env, "MEWDEX_DEFAULT_SCOPE": scope.scope_id, "NO_COLOR": "1"}
        run = subprocess.run(
            [str(MEWDEX_BIN), "import", str(tmp_path / "cli"), "--json"], env=env, capture_output=True, text=True
        )
        assert run.returncode == 0, run.stderr
        lines = [json.loads(line) for line in run.stdout.splitlines() if line.startswith("{") and '"path"' in line]
        assert sorted((Path(r["path"]).name, r["status"]) for r in lines) == [
            ("jump.webm", "created"),
            ("wave.tgs", "created"),
        ], run.stdout
        folder = WatchedFolder(root=tmp_path.resolve(), scope=scope, entry=str(tmp_path))
        (tmp_path / "photo.heic").write_bytes(still("HEIF", 7))
        result = sync_file(sessions, store, folder, (tmp_path / "photo.heic").resolve())
        assert result is not None and result.status == "created", result
        assert meme(sessions, scope, result.meme_id).extension == ".heic"
    finally:
        drop_scope(sessions, scope)


def test_video_sticker_and_mp4_are_animated_memes_whose_words_search_finds(client, sessions, scope, drain):
    sticker = upload(client, "sticker.webm", clip("webm", "libvpx-vp9", STICKER_WORD, frames=12, alpha=True))
    mp4 = upload(client, "clip.mp4", clip("mp4", "libx264", CLIP_WORD, frames=12))
    ids = {}
    for word, r in ((STICKER_WORD, sticker), (CLIP_WORD, mp4)):
        assert r.status_code == 201, r.text
        ids[word] = r.json()["results"][0]["meme"]["id"]
        image = meme(sessions, scope, ids[word]).extensions["image"]
        assert image["animated"] is True and image["frames"] == 12 and image["duration_ms"] == 1200
    drain(scope)
    for word, meme_id in ids.items():
        assert word.lower() in (meme(sessions, scope, meme_id).meme_context.get("ocr_text") or "").lower()
        found = client.post("/api/v1/search", json={"query": word.lower(), "n_results": 3})
        assert found.status_code == 200, found.text
        assert found.json()["results"][0]["id"] == meme_id, found.json()
        # the poster (the still thumbnail) and the animated preview were made from the clip's frames
        poster = client.get(f"/media/{meme_id}/thumbnail")
        assert poster.status_code == 200 and poster.headers["content-type"] == "image/webp"
        preview = Image.open(io.BytesIO(client.get(f"/media/{meme_id}/thumbnail?animated=1").content))
        assert preview.n_frames > 1
    # the page plays the clip: a muted looping <video> with the poster on the detail page, and on the cards
    page = client.get(f"/memes/{ids[CLIP_WORD]}").text
    video = re.search(r"<video [^>]*>", page)
    assert video and f'src="/media/{ids[CLIP_WORD]}"' in video[0] and f"/media/{ids[CLIP_WORD]}/thumbnail" in video[0]
    assert all(word in video[0] for word in ("muted", "loop", "autoplay", "playsinline"))
    library = client.get("/library").text
    assert re.search(rf'<video src="/media/{ids[STICKER_WORD]}"[^>]*data-clip', library)


def test_tgs_renders_to_an_animated_meme_with_a_poster(client, sessions, scope, drain):
    r = upload(client, "sticker.tgs", lottie(frames=24, size=96))
    assert r.status_code == 201, r.text
    meme_id = r.json()["results"][0]["meme"]["id"]
    image = meme(sessions, scope, meme_id).extensions["image"]
    assert (image["animated"], image["frames"], image["width"], image["height"]) == (True, 24, 96, 96)
    drain(scope)
    poster = Image.open(io.BytesIO(client.get(f"/media/{meme_id}/thumbnail").content)).convert("RGBA")
    red = np.asarray(poster)[..., 0] > 180
    assert red.any()  # the square was drawn
    preview = Image.open(io.BytesIO(client.get(f"/media/{meme_id}/thumbnail?animated=1").content))
    assert preview.n_frames > 1
    # the square moves: the first and last frames differ
    preview.seek(0)
    first = np.asarray(preview.convert("RGBA")).copy()
    preview.seek(preview.n_frames - 1)
    assert not np.array_equal(first, np.asarray(preview.convert("RGBA")))
    # browsers cannot show a TGS: the page shows its animated preview
    assert f'src="/media/{meme_id}/thumbnail?animated=1"' in client.get(f"/memes/{meme_id}").text


def long_clip() -> bytes:
    return clip("webm", "libvpx", frames=images.MAX_FRAMES + 1, size=(16, 16))


# The upload API answers image_too_large with 422 (a file's content, not the request's size: 413 is
# upload_too_large / quota_exceeded); the error code says which.
@pytest.mark.parametrize(
    ("make", "code", "status"),
    [
        (long_clip, "image_too_large", 422),  # more frames than a GIF may have
        (lambda: lottie(header={"w": 20000, "h": 20000}), "image_too_large", 422),
        (lambda: lottie(header={"op": images.MAX_FRAMES + 5}), "image_too_large", 422),
        # a gzip bomb: 9 MB of Lottie JSON in a few KB
        (lambda: gzip.compress(b'{"layers":[], "x":"' + b" " * (9 * 1024 * 1024) + b'"}'), "image_too_large", 422),
        (lambda: gzip.compress(b"just some text"), "unsupported_media_type", 415),
        (lambda: clip("mp4", "libx264")[:300], "image_corrupt", 422),
        (lambda: b"\x1a\x45\xdf\xa3" + b"\x00" * 64, "image_corrupt", 422),
    ],
    ids=["frames", "tgs-pixels", "tgs-frames", "tgs-bomb", "gzip-not-lottie", "mp4-truncated", "ebml-junk"],
)
def test_over_limit_or_broken_clips_are_refused_and_nothing_is_stored(
    client, sessions, store, scope, make, code, status
):
    before = client.get("/api/v1/memes").json()
    r = upload(client, "bad.webm", make())
    assert r.status_code == status, r.text
    body = r.json()
    assert body["results"][0]["status"] == "rejected" and body["results"][0]["error"]["code"] == code
    assert client.get("/api/v1/memes").json() == before
    check_storage_invariants(sessions, store, scope)


def test_a_clip_over_the_pixel_limit_is_refused_before_decoding(client, settings_env):
    settings_env(MEWDEX_MAX_PIXELS="10000")
    r = upload(client, "big.mp4", clip("mp4", "libx264", size=(160, 96)))  # 15,360 pixels a frame
    assert r.status_code == 422 and r.json()["results"][0]["error"]["code"] == "image_too_large", r.text


def test_the_share_target_accepts_clips_and_stickers(client):
    accepted = client.get("/manifest.webmanifest").json()["share_target"]["params"]["files"][0]["accept"]
    assert {"video/mp4", "video/webm", "image/avif", "image/heic", "application/x-tgsticker"} <= set(accepted)


def test_a_shared_collection_link_plays_its_clips(client, sessions, scope):
    from mewdex.library import collections

    meme_id = upload(client, "link.mp4", clip("mp4", "libx264", "SHARE")).json()["results"][0]["meme"]["id"]
    with sessions.begin() as session:
        made = collections.create(session, scope, "Clips to share")
        collections.add_members(session, scope, made.id, [meme_id])
        collection_id = str(made.id)
    link = client.post(f"/api/v1/collections/{collection_id}/links", json={"expires_in_days": 1})
    assert link.status_code == 201, link.text
    token = link.json()["url"].rsplit("/", 1)[1]
    page = client.get(f"/s/{token}", headers={"Accept": "text/html"}).text
    video = re.search(r"<video [^>]*>", page)
    assert video and f'src="/s/{token}/media/{meme_id}"' in video[0] and "muted" in video[0], page
    served = client.get(f"/s/{token}/media/{meme_id}")
    assert served.status_code == 200 and served.headers["content-type"] == "video/mp4"
