"""Telegram sticker sets ↔ collections (issue 42 item 5), against the fake Bot API: a set of a static
WebP, a WebM video sticker and a TGS imports into a new collection (a second import: all already
there), an unknown or too large set and an account without a linked Telegram chat get their error
codes; a collection of stills exports as a set of 512-px stickers owned by the linked Telegram user."""

from __future__ import annotations

import io

import pytest
from PIL import Image, ImageDraw

from channel_helpers import bind_telegram, new_user_id
from clip_helpers import clip, lottie
from conftest import client_for

pytestmark = pytest.mark.usefixtures("quick_pacing")


def webp_sticker(word: str) -> bytes:
    image = Image.new("RGBA", (512, 512), (0, 0, 0, 0))
    ImageDraw.Draw(image).text((100, 200), word, fill=(200, 30, 30, 255), font_size=120)
    out = io.BytesIO()
    image.save(out, "WEBP")
    return out.getvalue()


@pytest.fixture
def sticker_set(telegram):
    samples = [
        (webp_sticker("MEOW"), "static"),
        (clip("webm", "libvpx-vp9", "HI", frames=5, size=(128, 128), alpha=True), "video"),
        (lottie(), "animated"),
    ]
    return telegram.add_sticker_set("cats_by_other_bot", "Cats", samples)


def test_a_set_imports_into_a_new_collection_and_a_second_import_is_all_already_there(
    sessions, account, telegram, sticker_set
):
    bind_telegram(sessions, account, new_user_id())
    with client_for(account.scope) as client:
        first = client.post(
            "/api/v1/collections/import-sticker-set", json={"set": "https://t.me/addstickers/cats_by_other_bot"}
        )
        assert first.status_code == 201, first.text
        body = first.json()
        assert (body["imported"], body["already_there"], body["failed"]) == (3, 0, 0)
        assert body["collection_name"] == "Cats"
        assert len([c for c in telegram.calls if c["method"] == "getFile"]) == 3, "each file through getFile"

        again = client.post(
            "/api/v1/collections/import-sticker-set",
            json={"set": "cats_by_other_bot", "collection_id": body["collection_id"]},
        )
        assert again.status_code == 201, again.text
        assert (again.json()["imported"], again.json()["already_there"]) == (0, 3)
        collection = client.get(f"/api/v1/collections/{body['collection_id']}").json()
        assert collection["item_count"] == 3


def test_bad_unknown_and_too_large_sets_and_no_linked_bot_get_their_codes(sessions, account, telegram):
    with client_for(account.scope) as client:
        unlinked = client.post("/api/v1/collections/import-sticker-set", json={"set": "anything"})
        assert unlinked.status_code == 409 and unlinked.json()["error"]["code"] == "telegram_not_linked"
        unknown = client.post(
            f"/api/v1/collections/{'0' * 8}-0000-0000-0000-{'0' * 12}/sticker-set", json={"title": "x", "name": "x"}
        )
        assert unknown.status_code == 404  # no such collection of this account: said before anything else
        own = client.post("/api/v1/collections", json={"name": "unlinked export"}).json()["id"]
        export = client.post(f"/api/v1/collections/{own}/sticker-set", json={"title": "x", "name": "x"})
        assert export.status_code == 409 and export.json()["error"]["code"] == "telegram_not_linked"

        bind_telegram(sessions, account, new_user_id())
        unknown = client.post("/api/v1/collections/import-sticker-set", json={"set": "no_such_set"})
        assert unknown.status_code == 404 and unknown.json()["error"]["code"] == "sticker_set_not_found"
        bad = client.post("/api/v1/collections/import-sticker-set", json={"set": "https://example.com/x y"})
        assert bad.status_code == 422 and bad.json()["error"]["code"] == "sticker_set_name_invalid"
        telegram.add_sticker_set("huge", "Huge", [(webp_sticker("X"), "static")] * 121)
        huge = client.post("/api/v1/collections/import-sticker-set", json={"set": "huge"})
        assert huge.status_code == 422 and huge.json()["error"]["code"] == "sticker_set_too_large"
    assert not [c for c in telegram.calls if c["method"] == "getFile"], "nothing fetched from a refused set"


def test_a_collection_of_stills_exports_as_a_set_of_512_px_stickers(sessions, account, telegram):
    uid = new_user_id()
    bind_telegram(sessions, account, uid)
    members = [account.memes["cat one"], account.memes["cat two"], account.memes["dancing cat"]]
    with client_for(account.scope) as client:
        collection = client.post("/api/v1/collections", json={"name": "for stickers"}).json()
        added = client.post(f"/api/v1/collections/{collection['id']}/items", json={"meme_ids": members})
        assert added.status_code == 200, added.text
        bad = client.post(f"/api/v1/collections/{collection['id']}/sticker-set", json={"title": "C", "name": "a b"})
        assert bad.status_code == 422 and bad.json()["error"]["code"] == "sticker_set_name_invalid"

        made = client.post(
            f"/api/v1/collections/{collection['id']}/sticker-set", json={"title": "Cats", "name": "cats"}
        )
        assert made.status_code == 201, made.text
        body = made.json()
    assert body["link"] == f"https://t.me/addstickers/cats_by_{telegram.username}"
    assert body["added"] == 2 and [s["meme_id"] for s in body["skipped"]] == [account.memes["dancing cat"]]
    made_set = telegram.sticker_sets[f"cats_by_{telegram.username}"]
    assert made_set["title"] == "Cats" and made_set["owner"] == uid
    assert len(made_set["stickers"]) == 2
    for sticker in made_set["stickers"]:
        image = Image.open(io.BytesIO(telegram.files[sticker["file_id"]]))
        assert image.format in ("PNG", "WEBP") and max(image.size) == 512


def test_the_cli_imports_a_set_into_the_default_library(mewdex_env, sessions, account, telegram, sticker_set):
    bind_telegram(sessions, account, new_user_id())
    done = mewdex_env.cli("stickers", "import", "cats_by_other_bot", scope=account.scope.scope_id)
    assert done.returncode == 0, done.stderr
    assert "3 imported, 0 already there, 0 failed" in done.stdout
    unknown = mewdex_env.cli("stickers", "import", "no_such_set", scope=account.scope.scope_id)
    assert unknown.returncode == 4 and "sticker_set_not_found" in unknown.stderr
