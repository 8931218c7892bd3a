"""Folder import against the real database and blob store (CASES.md IMG-09, IMG-10, JOB-02, DUP-01, FN-01)."""

from __future__ import annotations

import shutil
import unicodedata
from pathlib import Path

import pytest

from conftest import case_file, extract_flat
from it_helpers import collection_names, counts, meme
from mewdex.library.importer import collect, import_paths
from mewdex.storage.blobs import KEY_PATTERN


def run_import(sessions, store, scope, *paths: Path, collection: str | None = None, min_collection: int = 3):
    results = []
    summary = import_paths(
        sessions,
        store,
        scope,
        collect(list(paths)),
        collection=collection,
        min_collection=min_collection,
        on_result=lambda item, result: results.append((item, result)),
    )
    return summary, {item.relative_path: result for item, result in results}


def put(folder: Path, name: str, source: Path | bytes) -> Path:
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(source, bytes):
        path.write_bytes(source)
    else:
        shutil.copyfile(source, path)
    return path


def test_mixed_folder_counts_reasons_and_goes_on(sessions, store, scope, tmp_path):
    good = case_file("img04_palette_trns.png")
    put(tmp_path, "a/good.png", good)
    put(tmp_path, "b/good_copy.png", good)
    put(tmp_path, "broken/truncated.jpg", case_file("img09_truncated.jpg"))
    put(tmp_path, "poison.png", case_file("job02_poison_text.png"))
    put(tmp_path, "bomb400.png", case_file("img10_bomb_20000x20000.png"))
    put(tmp_path, "bomb100.png", case_file("img10_bomb_10000x10000_warn_only.png"))
    put(tmp_path, "notes.txt", b"just some notes\n")
    put(tmp_path, "empty.png", b"")
    put(tmp_path, ".hidden.png", good)

    summary, results = run_import(sessions, store, scope, tmp_path, min_collection=1)

    assert (summary.created, summary.duplicates, summary.skipped, summary.ignored) == (1, 1, 5, 1)
    assert dict(summary.reasons) == {"image_corrupt": 1, "unsupported_media_type": 2, "image_too_large": 2}
    assert results["broken/truncated.jpg"].error == "image_corrupt"
    assert results["poison.png"].error == "unsupported_media_type"
    assert results["notes.txt"].status == "ignored" and results["notes.txt"].error is None  # not an image at all
    assert results["empty.png"].error == "unsupported_media_type"
    assert results["bomb400.png"].error == "image_too_large"
    assert results["bomb100.png"].error == "image_too_large"
    assert ".hidden.png" not in results
    assert results["b/good_copy.png"].status == "duplicate"
    assert results["b/good_copy.png"].meme_id == results["a/good.png"].meme_id
    for rel in ("broken/truncated.jpg", "poison.png", "bomb400.png"):
        assert results[rel].status == "skipped" and results[rel].meme_id is None and results[rel].message
    # The duplicate still joins its own folder's collection.
    assert collection_names(sessions, scope, results["a/good.png"].meme_id) == {"a", "b"}
    assert counts(sessions, scope) == {"memes": 1, "jobs": 1, "tasks": 1, "open_ops": 0, "blobs": 1}


@pytest.mark.parametrize(
    "case,code",
    [
        ("img09_truncated.jpg", "image_corrupt"),
        ("job02_poison_text.png", "unsupported_media_type"),
        ("img10_bomb_20000x20000.png", "image_too_large"),
        ("img10_bomb_10000x10000_warn_only.png", "image_too_large"),
    ],
)
def test_rejected_file_stores_nothing(sessions, store, scope, tmp_path, case, code):
    summary, results = run_import(sessions, store, scope, put(tmp_path, case, case_file(case)))
    assert results[case].status == "skipped" and results[case].error == code
    assert summary.skipped == 1 and summary.created == 0
    assert counts(sessions, scope) == {"memes": 0, "jobs": 0, "tasks": 0, "open_ops": 0, "blobs": 0}
    # Nothing left half-written in the staging folder either.
    assert not list((store.root / ".staging").iterdir())


def test_truncated_reference_imports_fine(sessions, store, scope, tmp_path):
    summary, results = run_import(
        sessions, store, scope, put(tmp_path, "full.jpg", case_file("img09_full_reference.jpg"))
    )
    assert summary.created == 1
    assert results["full.jpg"].info.format == "jpeg"


def test_dup01_identical_bytes_one_meme_text_chunk_a_new_one(sessions, store, scope, tmp_path):
    folder = tmp_path / "dup01"
    for name in ("same.png", "same_renamed_copy.png", "same_pixels_with_text_chunk.png"):
        put(folder, name, case_file(f"dup01/{name}"))
    summary, results = run_import(sessions, store, scope, folder)
    first, copy, chunk = (results[n] for n in ("same.png", "same_renamed_copy.png", "same_pixels_with_text_chunk.png"))
    assert first.status == "created"
    assert copy.status == "duplicate" and copy.meme_id == first.meme_id
    assert chunk.status == "created" and chunk.meme_id != first.meme_id
    assert (summary.created, summary.duplicates) == (2, 1)
    assert counts(sessions, scope)["memes"] == 2
    assert counts(sessions, scope)["blobs"] == 2

    # Importing the same folder again: every file is a duplicate of its meme, nothing new is stored.
    again, results2 = run_import(sessions, store, scope, folder)
    assert (again.created, again.duplicates, again.skipped) == (0, 3, 0)
    assert {r.meme_id for r in results2.values()} == {first.meme_id, chunk.meme_id}
    assert counts(sessions, scope) == {"memes": 2, "jobs": 2, "tasks": 2, "open_ops": 0, "blobs": 2}


def test_same_bytes_in_two_scopes_are_two_memes(sessions, store, scope, tmp_path):
    from conftest import drop_scope, new_scope

    other = new_scope(sessions)
    try:
        path = put(tmp_path, "x.png", case_file("img04_palette_trns.png"))
        _, a = run_import(sessions, store, scope, path)
        _, b = run_import(sessions, store, other, path)
        assert a["x.png"].status == b["x.png"].status == "created"
        assert a["x.png"].meme_id != b["x.png"].meme_id
    finally:
        drop_scope(sessions, other)


@pytest.mark.parametrize(
    "case,name,extension,fmt",
    [
        ("img01_cmyk_exif6.jpg", "photo.png", ".jpg", "jpeg"),
        ("img04_palette_trns.png", "pic.JPG", ".png", "png"),
        ("img06_animated_3frames.webp", "anim.gif", ".webp", "webp"),
        ("img04_palette_trns.png", "no_extension", ".png", "png"),
    ],
)
def test_extension_comes_from_the_bytes(sessions, store, scope, tmp_path, case, name, extension, fmt):
    _, results = run_import(sessions, store, scope, put(tmp_path, name, case_file(case)))
    result = results[name]
    assert result.status == "created"
    row = meme(sessions, scope, result.meme_id)
    assert row.extension == extension
    assert row.storage_key == row.sha256 + extension
    assert KEY_PATTERN.fullmatch(row.storage_key)
    assert row.extensions["image"]["format"] == fmt
    assert not row.display_name.lower().endswith((".png", ".jpg", ".gif", ".webp"))
    with sessions.begin() as session:
        from mewdex.db.models import Scope

        namespace = session.get(Scope, scope.scope_id).storage_namespace
    assert store.path(namespace, row.storage_key).read_bytes() == case_file(case).read_bytes()


def test_animated_webp_facts(sessions, store, scope, tmp_path):
    _, results = run_import(
        sessions, store, scope, put(tmp_path, "anim.webp", case_file("img06_animated_3frames.webp"))
    )
    image = meme(sessions, scope, results["anim.webp"].meme_id).extensions["image"]
    assert image["animated"] is True and image["frames"] == 3 and image["duration_ms"] == 600


def test_folder_is_collection_and_provenance_keeps_relative_path(sessions, store, scope, tmp_path):
    put(tmp_path, "猫猫/deep/cat.png", case_file("img04_palette_trns.png"))
    put(tmp_path, "top.jpg", case_file("img09_full_reference.jpg"))
    _, results = run_import(sessions, store, scope, tmp_path, collection="Favourites", min_collection=1)
    cat = meme(sessions, scope, results["猫猫/deep/cat.png"].meme_id)
    assert cat.provenance["relative_path"] == "猫猫/deep/cat.png"
    assert cat.provenance["source"] == "folder_import"
    assert cat.display_name == "cat"
    assert collection_names(sessions, scope, cat.id) == {"猫猫/deep", "Favourites"}  # named by its path
    top = results["top.jpg"]
    # A file directly in the import root has no folder collection, only the --collection one.
    assert collection_names(sessions, scope, top.meme_id) == {"Favourites"}


def test_single_file_argument(sessions, store, scope, tmp_path):
    path = put(tmp_path, "sub/one.png", case_file("img04_palette_trns.png"))
    _, results = run_import(sessions, store, scope, path)
    row = meme(sessions, scope, results["one.png"].meme_id)
    assert row.provenance["relative_path"] == "one.png"
    assert collection_names(sessions, scope, row.id) == set()


def test_missing_path_is_an_error(tmp_path):
    with pytest.raises(FileNotFoundError):
        collect([tmp_path / "nope"])


def test_fn01_nfc_and_nfd_names_are_two_memes_named_nfc(sessions, store, scope, tmp_path):
    paths = extract_flat(case_file("fn01_nfc_nfd.zip"), tmp_path / "fn01")
    assert len({p.name for p in paths}) == 2
    summary, results = run_import(sessions, store, scope, tmp_path / "fn01")
    assert summary.created == 2
    names = [meme(sessions, scope, r.meme_id).display_name for r in results.values()]
    assert names == ["Café", "Café"] and all(unicodedata.is_normalized("NFC", n) for n in names)


ODD_NAMES = [
    "a.b.c.png",
    "tab\tname.png",
    "  spaced  .png",
    "CON.png",
    "png",
    "new\nline.png",
    "x.PNG.JPG",
    "表情 包😀.png",
    "trail.png ",
    "-dash.png",
    "UPPER.WEBP",
    "é" * 120 + ".png",
    "\x01ctrl.png",
    "~$lock.png",
    "a" * 250 + ".png",
    "😀" * 62 + ".png",
    "\u202eevil.png",
    " .png",
    "normal\u3000.png",
]


def test_odd_file_names_import_with_safe_display_names(sessions, store, scope, tmp_path):
    from PIL import Image

    from mewdex.library.names import is_valid_display_name

    for i, name in enumerate(ODD_NAMES):
        Image.new("RGB", (8, 8), (i * 9, 255 - i * 9, (i * 37) % 256)).save(tmp_path / name, format="PNG")
    summary, results = run_import(sessions, store, scope, tmp_path)
    assert summary.created == len(ODD_NAMES), dict(summary.reasons)
    for rel, result in results.items():
        name = meme(sessions, scope, result.meme_id).display_name
        assert is_valid_display_name(name), (rel, name)
        assert len(name.encode()) <= 255
        assert not any(unicodedata.category(c) in ("Cc",) for c in name), (rel, name)


def test_file_over_the_upload_limit_is_skipped(sessions, store, scope, tmp_path, settings_env):
    settings_env(MEWDEX_MAX_UPLOAD_BYTES="1000")
    big = put(tmp_path, "big.jpg", case_file("img09_full_reference.jpg"))
    assert big.stat().st_size > 1000
    put(tmp_path, "small.png", case_file("img04_palette_trns.png"))
    summary, results = run_import(sessions, store, scope, tmp_path)
    assert results["big.jpg"].status == "skipped" and results["big.jpg"].error == "image_too_large"
    assert results["small.png"].status == "created"
    assert counts(sessions, scope)["blobs"] == 1


def test_broken_symlink_is_skipped_as_unreadable(sessions, store, scope, tmp_path):
    (tmp_path / "broken.png").symlink_to(tmp_path / "missing.png")
    put(tmp_path, "ok.png", case_file("img04_palette_trns.png"))
    summary, results = run_import(sessions, store, scope, tmp_path)
    assert results["broken.png"].status == "skipped" and results["broken.png"].error == "unreadable"
    assert summary.created == 1


def test_fifo_in_the_folder_does_not_hang_the_import(sessions, store, scope, tmp_path):
    import os
    import threading

    put(tmp_path, "ok.png", case_file("img04_palette_trns.png"))
    fifo = tmp_path / "pipe.png"
    os.mkfifo(fifo)
    done = threading.Event()
    box = {}

    def work():
        box["summary"], box["results"] = run_import(sessions, store, scope, tmp_path)
        done.set()

    thread = threading.Thread(target=work, daemon=True)
    thread.start()
    finished = done.wait(10)
    if not finished:  # unblock the reader (a writer that closes at once gives it EOF) so the thread ends
        fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
        os.close(fd)
        thread.join(30)
    assert finished, "import blocked reading a FIFO"


def test_folder_named_only_whitespace_does_not_abort_the_import(sessions, store, scope, tmp_path):
    put(tmp_path, "   /a.png", case_file("img04_palette_trns.png"))
    put(tmp_path, "b.jpg", case_file("img09_full_reference.jpg"))
    try:
        summary, results = run_import(sessions, store, scope, tmp_path)
    finally:
        left = counts(sessions, scope)
    assert left["open_ops"] == 0 and left["blobs"] == left["memes"]
    assert summary.created == 2


def test_generic_stems_are_named_by_their_folder(sessions, store, scope, tmp_path):
    """Point 1 of issue 19: camera/download/template stems take the folder's name, marked automatic;
    a meaningful stem keeps its own name; a generic stem in a generic folder waits for its title."""
    source = case_file("img04_palette_trns.png").read_bytes()

    def variant(i: int) -> bytes:  # distinct bytes, same picture (a PNG ignores trailing data)
        return source + bytes([i])

    put(tmp_path, "memegen/images/drake/default.png", variant(1))
    put(tmp_path, "memegen/images/drake/IMG_2034.png", variant(2))
    put(tmp_path, "memegen/images/drake/yes.png", variant(3))
    put(tmp_path, "downloads/download (3).png", variant(4))
    _, results = run_import(sessions, store, scope, tmp_path)
    named = {rel: meme(sessions, scope, r.meme_id) for rel, r in results.items()}
    assert (
        named["memegen/images/drake/default.png"].display_name,
        named["memegen/images/drake/default.png"].name_source,
    ) == ("drake", "automatic")
    assert named["memegen/images/drake/IMG_2034.png"].display_name == "drake"
    assert (named["memegen/images/drake/yes.png"].display_name, named["memegen/images/drake/yes.png"].name_source) == (
        "yes",
        "uploaded",
    )
    kept = named["downloads/download (3).png"]
    assert (kept.display_name, kept.name_source) == ("download (3)", "automatic")


def test_collections_only_for_folders_that_fit(sessions, store, scope, tmp_path):
    """Point 2 of issue 19: a folder becomes a collection only with ``min_collection`` images, named by its
    path without generic folders; small folders stay searchable through the path in the provenance."""
    source = case_file("img04_palette_trns.png").read_bytes()
    for i in range(3):
        put(tmp_path, f"memegen/images/drake/{i}.png", source + bytes([i]))
    put(tmp_path, "memegen/images/3hd/default.png", source + b"3hd")
    put(tmp_path, "memegen/images/drake/metadata.jsonl", b'{"x": 1}\n')
    summary, results = run_import(sessions, store, scope, tmp_path)
    assert (summary.created, summary.ignored) == (4, 1)
    drake = results["memegen/images/drake/0.png"].meme_id
    assert collection_names(sessions, scope, drake) == {"memegen/drake"}
    lonely = results["memegen/images/3hd/default.png"].meme_id
    assert collection_names(sessions, scope, lonely) == set()
    assert meme(sessions, scope, lonely).provenance["relative_path"] == "memegen/images/3hd/default.png"
    # With a lower threshold the small folder is a collection too.
    scope2_results = run_import(sessions, store, scope, tmp_path / "memegen", min_collection=1)[1]
    assert collection_names(sessions, scope, scope2_results["images/3hd/default.png"].meme_id) == {"3hd"}
