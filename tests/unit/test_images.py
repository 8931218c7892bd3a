"""Safe decoding: format sniffing, limits, EXIF, compositing, frames (CASES.md IMG-*, JOB-02)."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest
from PIL import Image, ImageFile

from mewdex.library.images import (
    EXTENSIONS,
    MEDIA_TYPES,
    ImageError,
    ImageInfo,
    load_frames,
    probe,
    select_frame_indices,
    sniff_format,
)

CASES = Path(__file__).resolve().parents[1] / "cases"
CORPUS = Path(os.environ.get("MEWDEX_CORPUS", "/work/shared/data/memes"))


def case(name: str) -> bytes:
    return (CASES / name).read_bytes()


def encode(im: Image.Image, fmt: str, **params) -> bytes:
    buf = io.BytesIO()
    im.save(buf, fmt, **params)
    return buf.getvalue()


def close(pixel, expected, tol=20) -> bool:
    return all(abs(a - b) <= tol for a, b in zip(pixel, expected, strict=True))


def with_orientation(im: Image.Image, fmt: str, orientation: int) -> bytes:
    exif = Image.Exif()
    exif[0x0112] = orientation
    return encode(im, fmt, exif=exif.tobytes())


def red_over_blue_sideways() -> Image.Image:
    """40x20 image that orientation 6 (rotate 90° clockwise) turns into red above blue."""
    im = Image.new("RGB", (40, 20), (0, 0, 255))
    im.paste((255, 0, 0), (0, 0, 20, 20))
    return im


# --- sniffing and errors -------------------------------------------------------


@pytest.mark.parametrize(
    ("head", "fmt"),
    [
        (b"\x89PNG\r\n\x1a\n\x00\x00", "png"),
        (b"\xff\xd8\xff\xe0\x00\x10JFIF", "jpeg"),
        (b"GIF89a\x01\x00", "gif"),
        (b"GIF87a\x01\x00", "gif"),
        (b"RIFF\x10\x00\x00\x00WEBPVP8 ", "webp"),
        (b"\x00\x00\x00\x1cftypavif\x00\x00\x00\x00avifmif1", "avif"),
        (b"\x00\x00\x00\x1cftypmif1\x00\x00\x00\x00mif1avif", "avif"),
        (b"\x00\x00\x00\x1cftypheic\x00\x00\x00\x00mif1heic", "heic"),
        (b"\x00\x00\x00\x1cftypmif1\x00\x00\x00\x00mif1heic", "heic"),
        (b"\x00\x00\x00\x20ftypisom\x00\x00\x02\x00isomiso2avc1mp41", "mp4"),
        (b"\x1a\x45\xdf\xa3\x9fB\x86\x81\x01", "webm"),
        (b"\x1f\x8b\x08\x00", "tgs"),
        (b"RIFF\x10\x00\x00\x00WAVEfmt ", None),
        (b"RIFF", None),
        (b"", None),
        (b"BM\x00\x00", None),
        (b"<svg xmlns=", None),
    ],
)
def test_sniff_format(head, fmt):
    assert sniff_format(head) == fmt


def test_format_tables_agree():
    assert EXTENSIONS == {
        "png": ".png",
        "jpeg": ".jpg",
        "gif": ".gif",
        "webp": ".webp",
        "avif": ".avif",
        "heic": ".heic",
        "mp4": ".mp4",
        "webm": ".webm",
        "tgs": ".tgs",
    }
    assert set(MEDIA_TYPES) == set(EXTENSIONS)
    assert MEDIA_TYPES["jpeg"] == "image/jpeg"
    assert MEDIA_TYPES["mp4"] == "video/mp4"


def test_image_error_codes_carry_http_status():
    assert ImageError("image_corrupt", "x").http_status == 422
    assert ImageError("unsupported_media_type", "x").http_status == 415
    assert ImageError("image_too_large", "x").http_status == 413
    with pytest.raises(ValueError):
        ImageError("nope", "x")


def test_truncated_images_are_not_tolerated():
    assert ImageFile.LOAD_TRUNCATED_IMAGES is False


# --- JOB-02: not an image -------------------------------------------------------


@pytest.mark.parametrize(
    "data",
    [case("job02_poison_text.png"), b"", b"hello world", encode(Image.new("RGB", (4, 4)), "BMP")],
)
def test_non_images_are_unsupported_media_type(data):
    for call in (probe, load_frames):
        with pytest.raises(ImageError) as err:
            call(data)
        assert err.value.code == "unsupported_media_type"
        assert err.value.http_status == 415


# --- IMG-09 and the kind: undecodable bytes -------------------------------------


def test_img09_truncated_jpeg_is_corrupt_and_reference_decodes():
    with pytest.raises(ImageError) as err:
        probe(case("img09_truncated.jpg"))
    assert err.value.code == "image_corrupt"
    assert err.value.http_status == 422
    info = probe(case("img09_full_reference.jpg"))
    assert (info.format, info.width, info.height, info.frames) == ("jpeg", 64, 64, 1)


def _truncated(fmt: str, **params) -> bytes:
    rng = np.random.default_rng(0)
    frames = [Image.fromarray(rng.integers(0, 255, (64, 64, 3), dtype=np.uint8)) for _ in range(3)]
    if fmt in ("GIF", "WEBP"):
        params.update(save_all=True, append_images=frames[1:], duration=100)
    data = encode(frames[0], fmt, **params)
    return data[: int(len(data) * 0.6)]


@pytest.mark.parametrize(
    "data",
    [
        _truncated("JPEG"),
        _truncated("PNG"),
        _truncated("GIF"),
        _truncated("WEBP", lossless=True),
        b"\x89PNG\r\n\x1a\n" + b"\x00" * 64,
        b"\xff\xd8\xff" + b"\xff" * 64,
        b"GIF89a" + b"\xff" * 64,
        b"RIFF\x20\x00\x00\x00WEBPVP8 " + b"\x00" * 32,
        case("img09_full_reference.jpg")[:200],
    ],
    ids=["jpeg60", "png60", "gif60", "webp60", "png_junk", "jpeg_junk", "gif_junk", "webp_junk", "jpeg_header_only"],
)
def test_undecodable_bytes_are_image_corrupt(data):
    """probe decodes every frame; load_frames fails as soon as a frame it needs is broken."""
    for call in (probe, lambda d: load_frames(d, indices="spread4")):
        with pytest.raises(ImageError) as err:
            call(data)
        assert err.value.code == "image_corrupt"


# --- IMG-10 and the kind: size limits ---------------------------------------------


@pytest.mark.parametrize("name", ["img10_bomb_20000x20000.png", "img10_bomb_10000x10000_warn_only.png"])
def test_img10_bombs_rejected_from_header_quickly(name):
    data = case(name)
    for call in (probe, load_frames):
        started = time.perf_counter()
        with pytest.raises(ImageError) as err:
            call(data)
        assert err.value.code == "image_too_large"
        assert err.value.http_status == 413
        assert time.perf_counter() - started < 0.5


def test_img10_bombs_use_little_memory():
    """Measured in a fresh interpreter so earlier tests cannot hide the peak."""
    script = textwrap.dedent(
        f"""
        import resource, sys
        from pathlib import Path
        from mewdex.library.images import ImageError, load_frames, probe
        datas = [Path({str(CASES)!r}, n).read_bytes()
                 for n in ("img10_bomb_20000x20000.png", "img10_bomb_10000x10000_warn_only.png")]
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        for data in datas:
            for call in (probe, load_frames):
                try:
                    call(data)
                except ImageError as err:
                    assert err.code == "image_too_large", err.code
                else:
                    sys.exit("bomb accepted")
        print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before)
        """
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    peak_delta_kib = int(out.stdout.strip())
    assert peak_delta_kib < 50 * 1024


def test_pixel_limit_is_ours_and_configurable():
    data = encode(Image.new("RGB", (200, 100)), "PNG")
    assert probe(data, max_pixels=20_000).width == 200
    with pytest.raises(ImageError) as err:
        probe(data, max_pixels=19_999)
    assert err.value.code == "image_too_large"
    with pytest.raises(ImageError):
        load_frames(data, max_pixels=19_999)


def test_gif_frame_larger_than_its_canvas_is_checked():
    """A GIF frame may enlarge the logical screen; the enlarged size is what gets limited."""
    data = bytearray(encode(Image.new("P", (100, 100)), "GIF"))
    data[6:10] = (10).to_bytes(2, "little") * 2  # logical screen 10x10, frame 100x100
    with pytest.raises(ImageError) as err:
        probe(bytes(data), max_pixels=5_000)
    assert err.value.code == "image_too_large"


def test_animation_total_pixel_budget():
    frames = [Image.new("RGB", (50, 50), c) for c in ((255, 0, 0), (0, 255, 0), (0, 0, 255))]
    data = encode(frames[0], "GIF", save_all=True, append_images=frames[1:], duration=50)
    assert probe(data, max_total_pixels=7_500).frames == 3
    with pytest.raises(ImageError) as err:
        probe(data, max_total_pixels=7_499)
    assert err.value.code == "image_too_large"


# --- IMG-01 / IMG-03: orientation and CMYK -------------------------------------


def test_img01_cmyk_exif6_is_upright_rgb():
    data = case("img01_cmyk_exif6.jpg")
    info = probe(data)
    assert (info.format, info.width, info.height) == ("jpeg", 20, 40)
    (frame,) = load_frames(data)
    assert frame.mode == "RGB" and frame.size == (20, 40)
    assert close(frame.getpixel((10, 5)), (0, 255, 255))
    assert close(frame.getpixel((10, 34)), (255, 0, 255))


@pytest.mark.parametrize("name", ["img03_exif6.jpg", "img03_exif6.png"])
def test_img03_orientation6_red_above_blue(name):
    data = case(name)
    info = probe(data)
    assert (info.width, info.height) == (20, 40)
    (frame,) = load_frames(data)
    assert frame.size == (20, 40)
    assert close(frame.getpixel((10, 5)), (255, 0, 0))
    assert close(frame.getpixel((10, 34)), (0, 0, 255))


def test_img03_orientation9_treated_as_1():
    data = case("img03_exif_invalid9.jpg")
    info = probe(data)
    assert (info.width, info.height) == (40, 20)
    (frame,) = load_frames(data)
    assert frame.size == (40, 20)
    assert close(frame.getpixel((5, 10)), (255, 0, 0))
    assert close(frame.getpixel((34, 10)), (0, 0, 255))


@pytest.mark.parametrize("fmt", ["JPEG", "PNG", "WEBP"])
@pytest.mark.parametrize("orientation", range(0, 12))
def test_every_orientation_value(fmt, orientation):
    data = with_orientation(red_over_blue_sideways(), fmt, orientation)
    swapped = orientation in (5, 6, 7, 8)
    info = probe(data)
    assert (info.width, info.height) == ((20, 40) if swapped else (40, 20))
    (frame,) = load_frames(data)
    assert frame.size == (info.width, info.height)
    if orientation == 6:
        assert close(frame.getpixel((10, 5)), (255, 0, 0))
        assert close(frame.getpixel((10, 34)), (0, 0, 255))


@pytest.mark.filterwarnings("ignore:Corrupt EXIF data")
@pytest.mark.parametrize(
    "exif",
    [
        b"Exif\x00\x00garbage-not-tiff",
        b"Exif\x00\x00II*\x00\xff\xff\xff\x7f",
        b"Exif\x00\x00MM\x00*\x00\x00\x00\x08\x00\x01\x01\x12",
    ],
)
def test_malformed_exif_never_fails(exif):
    data = encode(Image.new("RGB", (8, 4), (9, 9, 9)), "JPEG", exif=exif)
    assert (probe(data).width, probe(data).height) == (8, 4)
    assert load_frames(data)[0].size == (8, 4)


def test_derived_frames_carry_no_metadata():
    (frame,) = load_frames(case("img01_cmyk_exif6.jpg"))
    assert frame.info == {}
    assert 0x0112 not in frame.getexif()


# --- IMG-02: wide greyscale ------------------------------------------------------


def test_img02_gray16_ramp_is_scaled_not_clipped():
    (frame,) = load_frames(case("img02_gray16_ramp.png"))
    assert frame.mode == "RGB" and frame.size == (256, 4)
    assert close(frame.getpixel((0, 1)), (0, 0, 0), tol=2)
    assert close(frame.getpixel((128, 1)), (128, 128, 128), tol=3)
    assert close(frame.getpixel((255, 1)), (255, 255, 255), tol=2)


def test_gray16_with_trns_becomes_white():
    ramp = np.array([[0, 1000, 65535]], dtype=np.uint16)
    data = encode(Image.fromarray(ramp), "PNG", transparency=1000)
    (frame,) = load_frames(data)
    assert [frame.getpixel((x, 0)) for x in range(3)] == [(0, 0, 0), (255, 255, 255), (255, 255, 255)]


# --- IMG-04 / IMG-05 and the kind: transparency onto white --------------------------


def test_img04_palette_trns_composited_on_white():
    (frame,) = load_frames(case("img04_palette_trns.png"))
    assert frame.mode == "RGB"
    assert frame.getpixel((0, 0)) == (255, 255, 255)  # palette index 0, alpha 0
    assert close(frame.getpixel((8, 0)), (255, 0, 0), tol=0)  # index 1, opaque red


def test_img05_black_text_on_transparent_black_becomes_black_on_white():
    (frame,) = load_frames(case("img05_ocr_hello_transparent.png"))
    pixels = np.asarray(frame)
    alpha = np.asarray(Image.open(CASES / "img05_ocr_hello_transparent.png"))[..., 3]
    assert (pixels[alpha == 0] == 255).all()
    assert (pixels[alpha == 255] < 30).all()
    assert 0.005 < (pixels.mean(axis=2) < 128).mean() < 0.5


@pytest.mark.parametrize(
    "im",
    [
        Image.new("LA", (4, 4), (0, 0)),
        Image.new("RGBA", (4, 4), (0, 0, 0, 0)),
        Image.new("PA", (4, 4), (0, 0)),
        Image.new("L", (4, 4), 7),
        Image.new("RGB", (4, 4), (7, 7, 7)),
        Image.new("P", (4, 4), 0),
    ],
    ids=["LA", "RGBA", "PA", "L_trns", "RGB_trns", "P_trns"],
)
def test_transparent_modes_become_white(im):
    params = {"transparency": im.getpixel((0, 0))} if im.mode in ("L", "RGB", "P") else {}
    if im.mode == "PA":
        im.putpalette([0, 0, 0] * 256)
        data = encode(im.convert("RGBA"), "PNG")
    else:
        data = encode(im, "PNG", **params)
    assert load_frames(data)[0].getpixel((0, 0)) == (255, 255, 255)


def test_bilevel_and_cmyk_modes_convert():
    one = encode(Image.new("1", (4, 4), 1), "PNG")
    assert load_frames(one)[0].getpixel((0, 0)) == (255, 255, 255)
    cmyk = encode(Image.new("CMYK", (4, 4), (0, 255, 0, 0)), "JPEG", quality=100)
    assert close(load_frames(cmyk)[0].getpixel((1, 1)), (255, 0, 255))


# --- IMG-06 and the kind: animation ----------------------------------------------


def test_img06_animated_webp():
    data = case("img06_animated_3frames.webp")
    info = probe(data)
    assert info == ImageInfo("webp", ".webp", "image/webp", 16, 16, 3, 600, True)
    (first,) = load_frames(data)
    assert close(first.getpixel((8, 8)), (255, 0, 0))
    frames = load_frames(data, indices="spread4")
    expected = [(255, 0, 0), (0, 255, 0), (0, 0, 255)]
    assert [close(f.getpixel((8, 8)), e) for f, e in zip(frames, expected, strict=True)] == [True] * 3
    first, middle = load_frames(data, indices="first_middle")
    assert close(middle.getpixel((8, 8)), (0, 255, 0))


def test_gif_zero_or_missing_delay_counts_100ms():
    frames = [Image.new("RGB", (8, 8), c) for c in ((255, 0, 0), (0, 255, 0), (0, 0, 255))]
    data = encode(frames[0], "GIF", save_all=True, append_images=frames[1:], duration=[0, 50, 0])
    info = probe(data)
    assert (info.format, info.frames, info.animated, info.duration_ms) == ("gif", 3, True, 250)


def test_gif_partial_frames_are_composited():
    """Second frame only covers a corner; the decoded frame shows the full canvas."""
    base = Image.new("RGB", (16, 16), (255, 0, 0))
    patch = base.copy()
    patch.paste((0, 0, 255), (0, 0, 4, 4))
    data = encode(base, "GIF", save_all=True, append_images=[patch], duration=100, optimize=True)
    _, second = load_frames(data, indices="first_middle")
    assert close(second.getpixel((1, 1)), (0, 0, 255))
    assert close(second.getpixel((12, 12)), (255, 0, 0))


def test_transparent_gif_frames_on_white():
    frames = [Image.new("RGBA", (8, 8), (0, 0, 0, 0)), Image.new("RGBA", (8, 8), (0, 255, 0, 255))]
    data = encode(frames[0], "GIF", save_all=True, append_images=frames[1:], duration=100, disposal=2)
    first, second = load_frames(data, indices="first_middle")
    assert first.getpixel((4, 4)) == (255, 255, 255)
    assert close(second.getpixel((4, 4)), (0, 255, 0))


def test_apng_is_an_animated_png():
    frames = [Image.new("RGBA", (8, 8), (255, 0, 0, 255)), Image.new("RGBA", (8, 8), (0, 0, 0, 0))]
    data = encode(frames[0], "PNG", save_all=True, append_images=frames[1:], duration=[70, 0])
    info = probe(data)
    assert (info.format, info.extension, info.frames, info.animated, info.duration_ms) == ("png", ".png", 2, True, 170)
    _, second = load_frames(data, indices="first_middle")
    assert second.getpixel((4, 4)) == (255, 255, 255)


def test_still_image_frames():
    data = encode(Image.new("RGB", (8, 8)), "PNG")
    info = probe(data)
    assert (info.frames, info.animated, info.duration_ms) == (1, False, 0)
    assert len(load_frames(data, indices="spread4")) == 1


@pytest.mark.parametrize(
    ("n", "selection", "expected"),
    [
        (1, "first", [0]),
        (1, "first_middle", [0]),
        (1, "spread4", [0]),
        (2, "first_middle", [0, 1]),
        (3, "first_middle", [0, 1]),
        (10, "first_middle", [0, 5]),
        (3, "spread4", [0, 1, 2]),
        (10, "spread4", [0, 3, 6, 9]),
        (179, "spread4", [0, 59, 119, 178]),
    ],
)
def test_select_frame_indices(n, selection, expected):
    assert select_frame_indices(n, selection) == expected


def test_unknown_selection_rejected():
    with pytest.raises(ValueError):
        select_frame_indices(3, "all")


# --- the real corpus ------------------------------------------------------------------


@pytest.mark.corpus
def test_corpus_probes_and_matches_metadata():
    if not CORPUS.is_dir():
        pytest.skip(f"corpus not found at {CORPUS}")
    rows = [json.loads(line) for meta in sorted(CORPUS.glob("*/metadata.jsonl")) for line in meta.open()]
    files = sorted(p for p in CORPUS.glob("*/images/**/*") if p.is_file())
    assert len(files) == len(rows) > 0
    mismatches = []
    for row in rows:
        info = probe((CORPUS / row["file"]).read_bytes())
        got = (info.format.upper(), info.frames, info.width, info.height, info.animated)
        want = (row["format"], row["frames"], row["width"], row["height"], row["frames"] > 1)
        if got != want:
            mismatches.append((row["file"], got, want))
    assert mismatches == []


def test_jpeg_scans_are_counted_by_walking_the_markers():
    """Baseline 1 scan, Pillow's progressive 10; an EXIF block full of SOS-looking bytes is skipped by
    its length; the count stops past the cap; past MAX_JPEG_SCANS the image is refused before decoding."""
    import io

    from PIL import Image

    from mewdex.library.images import MAX_JPEG_SCANS, ImageError, _jpeg_scans, probe

    def jpeg(**kw) -> bytes:
        out = io.BytesIO()
        Image.new("RGB", (64, 48), (10, 200, 30)).save(out, "JPEG", **kw)
        return out.getvalue()

    assert _jpeg_scans(jpeg(), 500) == 1
    progressive = jpeg(progressive=True)
    assert 2 <= _jpeg_scans(progressive, 500) <= 12
    assert _jpeg_scans(jpeg(exif=b"Exif\x00\x00" + b"\xff\xda\x00\x02" * 2000), 500) == 1
    sos = progressive.index(b"\xff\xda")
    header = progressive[sos : sos + 2 + int.from_bytes(progressive[sos + 2 : sos + 4], "big")]
    many = progressive[:sos] + (header + b"\x00\x00") * (MAX_JPEG_SCANS + 1) + b"\xff\xd9"
    assert _jpeg_scans(many, 10) == 11
    with pytest.raises(ImageError) as err:
        probe(many)
    assert err.value.code == "image_too_large"
    assert probe(progressive).format == "jpeg"


# --- clips (issue 42): frames turned upright, transparency on white ------------------------------


def _clip(rotation: int = 0, alpha: bool = False) -> bytes:
    """Three 64x32 frames, the left half red (transparent elsewhere when ``alpha``), with a display rotation."""
    import av

    buffer = io.BytesIO()
    with av.open(buffer, mode="w", format="webm" if alpha else "mp4") as out:
        stream = out.add_stream("libvpx-vp9" if alpha else "libx264", rate=10)
        stream.width, stream.height, stream.pix_fmt = 64, 32, "yuva420p" if alpha else "yuv420p"
        if rotation:
            stream.set_display_rotation(rotation)
        for _ in range(3):
            frame = Image.new("RGBA", (64, 32), (0, 0, 255, 0) if alpha else (255, 255, 255, 255))
            frame.paste((255, 0, 0, 255), (0, 0, 32, 32))
            video = av.VideoFrame.from_ndarray(
                np.asarray(frame if alpha else frame.convert("RGB")), "rgba" if alpha else "rgb24"
            )
            for packet in stream.encode(video):
                out.mux(packet)
        for packet in stream.encode():
            out.mux(packet)
    return buffer.getvalue()


# the left half is red; turned 90° counter-clockwise it is the bottom half, clockwise (-90) the top half
@pytest.mark.parametrize(
    ("rotation", "size", "red", "white"),
    [(0, (64, 32), (16, 16), (48, 16)), (90, (32, 64), (16, 48), (16, 16)), (-90, (32, 64), (16, 16), (16, 48))],
)
def test_a_rotated_clip_is_decoded_upright(rotation, size, red, white):
    data = _clip(rotation)
    info = probe(data)
    frame = load_frames(data)[0]
    assert (info.width, info.height) == frame.size == size
    assert close(frame.getpixel(red), (255, 0, 0), tol=30)
    assert close(frame.getpixel(white), (255, 255, 255), tol=30)


def test_a_video_stickers_transparency_is_kept_and_composited_on_white():
    data = _clip(alpha=True)
    frame = load_frames(data)[0]
    # the transparent half was blue under its alpha: on white, never blue (libvpx kept the alpha)
    assert close(frame.getpixel((2, 2)), (255, 0, 0), tol=30)
    assert close(frame.getpixel((60, 16)), (255, 255, 255), tol=30)
