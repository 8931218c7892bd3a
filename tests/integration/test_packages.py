"""Collection ZIP packages: streamed export, preflighted import (ZIP-01, ZIP-03, FN-01, FN-02), round trips."""

from __future__ import annotations

import hashlib
import io
import json
import unicodedata
import zipfile

import pytest

from conftest import case_file, client_for, drop_scope, new_scope
from it_helpers import counts
from mewdex.library import packages
from package_helpers import add, error_code, png


@pytest.fixture
def api(client):
    """The shared client of the test's scope (conftest)."""
    return client


def _zip(entries: list[tuple[str, bytes]], **kw) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", **kw) as z:
        for name, data in entries:
            z.writestr(name, data)
    return out.getvalue()


def _import(api, data: bytes, filename: str = "pack.zip", **fields):
    return api.post("/api/v1/collections/import", files={"file": (filename, data, "application/zip")}, data=fields)


def _nothing_written(sessions, scope, api) -> None:
    c = counts(sessions, scope)
    assert (c["memes"], c["jobs"], c["tasks"], c["open_ops"], c["blobs"]) == (0, 0, 0, 0, 0), c
    assert api.get("/api/v1/collections").json()["collections"] == []


def test_entry_names_are_safe_and_unique():
    names = packages.unique_entry_names(
        [
            ("Café", ".png"),
            (unicodedata.normalize("NFD", "café"), ".png"),
            ("CON", ".jpg"),
            ("com1.x", ".gif"),
            ('a<b>c:d"e|f?g*h', ".png"),
            ("trailing. . ", ".png"),
            ("tab\there", ".png"),
            ("猫" * 100, ".png"),
        ]
    )
    assert names[:2] == ["Café.png", "café (1).png"]
    assert names[2] == "_CON.jpg" and names[3] == "_com1.x.gif"
    assert names[4] == "a_b_c_d_e_f_g_h.png"
    assert names[5] == "trailing.png" and names[6] == "tab_here.png"
    assert len(names[7].encode()) <= 160 and names[7].startswith("猫")


def test_export_streams_a_v1_package_and_reimport_restores_names_order_bytes(api, sessions, store, scope):
    blobs = {
        "Café": png((200, 10, 10)),
        "CON": png((10, 200, 10)),
        "a:b?": png((10, 10, 200)),
        "😂" * 70: png((50, 50, 50)),
    }
    ids = {name: add(sessions, store, scope, data, name + ".png") for name, data in blobs.items()}
    nfd = add(sessions, store, scope, png((1, 1, 1)), unicodedata.normalize("NFD", "Café") + ".png")
    order = [ids["CON"], nfd, ids["Café"], ids["😂" * 70], ids["a:b?"]]
    cid = api.post("/api/v1/collections", json={"name": "导出 export"}).json()["id"]
    api.post(f"/api/v1/collections/{cid}/items", json={"meme_ids": order})
    expected = [(m["display_name"], m["sha256"]) for m in api.get(f"/api/v1/collections/{cid}").json()["items"]]

    with api.stream("GET", f"/api/v1/collections/{cid}/export") as r:
        assert r.status_code == 200 and r.headers["content-type"] == "application/zip"
        assert "filename*=UTF-8''" in r.headers["content-disposition"]
        assert "content-length" not in r.headers  # streamed, not buffered
        data = b"".join(r.iter_bytes())
    archive = zipfile.ZipFile(io.BytesIO(data))
    assert archive.testzip() is None
    manifest = json.loads(archive.read("manifest.json"))
    assert manifest["format"] == "mewdex-collection" and manifest["version"] == 1
    assert manifest["collection"]["name"] == "导出 export"
    assert [(i["display_name"], i["sha256"]) for i in manifest["items"]] == expected
    files = [i["file"] for i in manifest["items"]]
    assert files[:3] == ["images/_CON.png", "images/Café.png", "images/Café (1).png"]
    assert len({f.casefold() for f in files}) == len(files)
    for item in manifest["items"]:
        body = archive.read(item["file"])
        assert hashlib.sha256(body).hexdigest() == item["sha256"] and len(body) == item["size"]
        assert item["extension"] == ".png"

    target = new_scope(sessions, "t-reimport")
    try:
        with client_for(target) as theirs:
            r = _import(theirs, data, "whatever.zip")
            assert r.status_code == 201, r.text
            body = r.json()
            assert body["collection"]["name"] == "导出 export" and body["collection"]["item_count"] == 5
            assert [i["status"] for i in body["items"]] == ["created"] * 5
            got = theirs.get(f"/api/v1/collections/{body['collection']['id']}").json()["items"]
            assert [(m["display_name"], m["sha256"]) for m in got] == expected
            # again: same name gets a suffix, every item is a duplicate of the existing meme
            again = _import(theirs, data).json()
            assert again["collection"]["name"] == "导出 export (2)"
            assert [i["status"] for i in again["items"]] == ["duplicate"] * 5
            assert [i["meme"]["id"] for i in again["items"]] == [m["id"] for m in got]
        assert counts(sessions, target)["memes"] == 5
    finally:
        drop_scope(sessions, target)


def test_zip01_unsafe_paths_reject_the_whole_archive(api, sessions, scope):
    r = _import(api, case_file("zip01_zip_slip.zip").read_bytes())
    assert r.status_code == 422 and error_code(r) == "unsafe_path"
    reasons = {e["entry"]: e["reason"] for e in r.json()["error"]["details"]["entries"]}
    assert reasons == {
        "../../evil_relative.png": "parent",
        "/tmp/evil_absolute.png": "absolute",
        "..\\..\\evil_backslash.png": "backslash",
        "safe/../../evil_mixed.png": "parent",
        "C:/evil_drive.png": "drive",
    }
    _nothing_written(sessions, scope, api)


def test_symlink_entries_are_unsafe(api, sessions, scope):
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as z:
        z.writestr("ok.png", png((1, 2, 3)))
        link = zipfile.ZipInfo("link.png")
        link.create_system = 3
        link.external_attr = 0o120777 << 16
        z.writestr(link, "/etc/passwd")
    r = _import(api, out.getvalue())
    assert r.status_code == 422 and r.json()["error"]["details"]["entries"] == [
        {"entry": "link.png", "reason": "symlink"}
    ]
    _nothing_written(sessions, scope, api)


@pytest.mark.parametrize("case", ["zip03_bomb_ratio.zip", "zip03_bomb_lying_size.zip"])
def test_zip03_bombs_stop_early_and_write_nothing(api, sessions, scope, case):
    r = _import(api, case_file(case).read_bytes())
    assert r.status_code in (413, 422), r.text
    assert error_code(r) in {"compression_ratio_exceeded", "entry_too_large", "package_too_large", "zip_corrupt"}
    _nothing_written(sessions, scope, api)


def test_limits_count_inflated_bytes_not_headers(api, sessions, scope, settings_env):
    a, b = png((1, 1, 1), (64, 64)), png((2, 2, 2), (64, 64))
    settings_env(MEWDEX_ZIP_MAX_TOTAL_BYTES=str(len(a) + len(b) - 1))
    r = _import(api, _zip([("a.png", a), ("b.png", b)]))
    assert r.status_code == 413 and error_code(r) == "package_too_large"
    settings_env(MEWDEX_ZIP_MAX_TOTAL_BYTES=str(10**9), MEWDEX_MAX_UPLOAD_BYTES=str(len(a) - 1))
    r = _import(api, _zip([("a.png", a)]))
    assert r.status_code == 413 and error_code(r) == "entry_too_large"
    settings_env(MEWDEX_MAX_UPLOAD_BYTES=str(10**8), MEWDEX_ZIP_MAX_ITEMS="2")
    r = _import(api, _zip([(f"{i}.png", png((i, 0, 0))) for i in range(3)]))
    assert r.status_code == 413 and error_code(r) == "too_many_items"
    # a header that says the entry is small, while it inflates to 2 MiB of zeros
    big = _zip([("x.png", b"\0" * (2 << 20))], compression=zipfile.ZIP_DEFLATED)
    patched = bytearray(big)
    central = patched.rfind(b"PK\x01\x02")
    patched[central + 24 : central + 28] = (100).to_bytes(4, "little")
    settings_env(MEWDEX_ZIP_MAX_ITEMS="500")
    r = _import(api, bytes(patched))
    assert r.status_code in (413, 422) and error_code(r) in {"compression_ratio_exceeded", "zip_corrupt"}
    _nothing_written(sessions, scope, api)


def test_not_a_zip_and_bad_manifest(api, sessions, scope):
    assert error_code(_import(api, b"PK\x03\x04 nope")) == "zip_invalid"
    bad = _zip(
        [("manifest.json", b'{"format": "mewdex-collection", "version": 9, "items": []}'), ("a.png", png((1, 1, 1)))]
    )
    r = _import(api, bad)
    assert r.status_code == 422 and error_code(r) == "manifest_invalid"
    r = api.post("/api/v1/collections/import", content=b"raw", headers={"content-type": "application/zip"})
    assert r.status_code == 415
    _nothing_written(sessions, scope, api)


def test_a_manifest_collection_name_that_is_not_text_falls_back_to_the_file_name(api):
    manifest = {"format": "mewdex-collection", "version": 1, "collection": {"name": 42}, "items": []}
    r = _import(api, _zip([("manifest.json", json.dumps(manifest).encode())]), "fallback.zip")
    assert r.status_code == 201, r.text
    assert r.json()["collection"]["name"] == "fallback"


def test_plain_zip_with_a_bad_image_reports_it_rejected(api, sessions, scope):
    gbk_name = "表情/猫.png"
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as z:
        z.writestr("good.png", png((5, 5, 5)))
        z.writestr("XXXX/XX.png", png((6, 6, 6)))
        z.writestr("notes.txt", b"hello")
        z.writestr("__MACOSX/._good.png", b"junk")
        z.writestr("folder/", b"")
    # a legacy Windows archive: GBK name bytes, no UTF-8 flag (same length as the placeholder)
    data = out.getvalue().replace(b"XXXX/XX.png", gbk_name.encode("gbk"))
    r = _import(api, data, "我的包.zip")
    assert r.status_code == 201, r.text
    body = r.json()
    assert body["collection"]["name"] == "我的包"
    by_name = {i["name"]: i for i in body["items"]}
    assert set(by_name) == {"good.png", gbk_name, "notes.txt"}
    assert by_name[gbk_name]["status"] == "created" and by_name[gbk_name]["meme"]["display_name"] == "猫"
    assert by_name["notes.txt"]["status"] == "rejected"
    assert by_name["notes.txt"]["error"]["code"] == "unsupported_media_type"
    assert counts(sessions, scope)["memes"] == 2
    only_bad = _import(api, _zip([("a.txt", b"text")]))
    assert only_bad.status_code == 422 and error_code(only_bad) == "no_images"
    assert error_code(_import(api, _zip([("readme.txt", b"")]))) == "no_images"


def test_an_empty_collection_round_trips(api):
    cid = api.post("/api/v1/collections", json={"name": "empty"}).json()["id"]
    r = _import(api, api.get(f"/api/v1/collections/{cid}/export").content)
    assert r.status_code == 201 and r.json()["collection"]["name"] == "empty (2)" and r.json()["items"] == []


def test_fn01_nfc_nfd_names_become_two_memes_exported_uniquely(api, sessions, scope):
    r = _import(api, case_file("fn01_nfc_nfd.zip").read_bytes())
    assert r.status_code == 201, r.text
    items = r.json()["items"]
    assert [i["status"] for i in items] == ["created", "created"]
    assert {i["meme"]["display_name"] for i in items} == {"Café"}  # stored NFC
    cid = r.json()["collection"]["id"]
    exported = zipfile.ZipFile(io.BytesIO(api.get(f"/api/v1/collections/{cid}/export").content))
    assert sorted(n for n in exported.namelist() if n.startswith("images/")) == [
        "images/Café (1).png",
        "images/Café.png",
    ]


def test_fn02_long_names_are_accepted_and_cut_on_graphemes(api, sessions, scope):
    r = _import(api, case_file("fn02_long_names.zip").read_bytes())
    assert r.status_code == 201, r.text
    items = r.json()["items"]
    assert len(items) == 3 and all(i["status"] == "created" for i in items)
    for item in items:
        name = item["meme"]["display_name"]
        assert 0 < len(name.encode()) <= 255
        assert item["name"].startswith(name)  # a prefix of whole graphemes of the entry name
    cid = r.json()["collection"]["id"]
    data = api.get(f"/api/v1/collections/{cid}/export").content
    exported = zipfile.ZipFile(io.BytesIO(data))
    assert all(len(n.encode()) <= 160 + len("images/") for n in exported.namelist())
    target = new_scope(sessions, "t-fn02")
    try:
        with client_for(target) as theirs:
            body = _import(theirs, data).json()
        assert [i["meme"]["display_name"] for i in body["items"]] == [i["meme"]["display_name"] for i in items]
    finally:
        drop_scope(sessions, target)


def test_cli_export_then_import_zip(mewdex_env, sessions, store, tmp_path):
    from mewdex.db.models import ScopeContext

    source, target = f"t-cli-src-{tmp_path.name[-8:]}", f"t-cli-dst-{tmp_path.name[-8:]}"
    scope = new_scope(sessions, source)
    dest = ScopeContext(f"{target}-x")
    try:
        ids = [add(sessions, store, scope, png((i, 9, 9)), f"cli {i}.png") for i in range(3)]
        with client_for(scope) as api:
            cid = api.post("/api/v1/collections", json={"name": "cli pack"}).json()["id"]
            api.post(f"/api/v1/collections/{cid}/items", json={"meme_ids": ids[::-1]})
        out = tmp_path / "pack.zip"
        mewdex_env.cli("export", "cli pack", str(out), scope=scope.scope_id, check=True)
        manifest = json.loads(zipfile.ZipFile(out).read("manifest.json"))
        assert [i["display_name"] for i in manifest["items"]] == ["cli 2", "cli 1", "cli 0"]
        assert mewdex_env.cli("export", "no such", str(tmp_path / "x.zip"), scope=scope.scope_id).returncode == 4

        proc = mewdex_env.cli("import", str(out), scope=dest.scope_id, check=True)
        assert "3 created" in proc.stdout and "cli pack" in proc.stdout
        proc = mewdex_env.cli("import", str(case_file("zip01_zip_slip.zip")), scope=dest.scope_id)
        assert proc.returncode == 1 and "unsafe_path" in proc.stderr
        with client_for(dest) as api:
            listed = api.get("/api/v1/collections").json()["collections"]
            assert [(c["name"], c["item_count"]) for c in listed] == [("cli pack", 3)]
            items = api.get(f"/api/v1/collections/{listed[0]['id']}").json()["items"]
            assert [m["display_name"] for m in items] == ["cli 2", "cli 1", "cli 0"]
    finally:
        drop_scope(sessions, scope)
        drop_scope(sessions, dest)


def test_an_upload_over_the_package_limit_is_cut_off(api, sessions, scope, settings_env):
    settings_env(MEWDEX_ZIP_MAX_TOTAL_BYTES="1")  # the upload may be 1 MiB + 1 byte at most
    r = _import(api, _zip([("a.png", png((1, 1, 1)))]) + b"\0" * (2 << 20))
    assert r.status_code == 413 and error_code(r) == "package_too_large"
    _nothing_written(sessions, scope, api)


def test_a_zip_import_processes_as_one_batch_fed_to_the_lanes(api, sessions, scope, drain):
    from sqlalchemy import select

    from mewdex.db.models import TaskBatch, TaskBatchItem

    r = _import(api, _zip([("a.png", png((9, 1, 1))), ("b.png", png((9, 2, 2)))]))
    assert r.status_code == 201, r.text
    with sessions.begin() as session:
        [batch] = session.execute(select(TaskBatch).where(TaskBatch.scope_id == scope.scope_id)).scalars().all()
        assert batch.sealed and batch.finalizer_state != "complete"
        members = session.execute(select(TaskBatchItem).where(TaskBatchItem.scope_id == scope.scope_id)).all()
        assert len(members) == 2
    drain(scope)
    with sessions.begin() as session:
        batch = session.get(TaskBatch, (scope.scope_id, batch.batch_id))
        assert batch.finalizer_state == "complete" and batch.summary["failed"] == 0
