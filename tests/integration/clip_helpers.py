"""Small real clips, stickers and photos made in the tests (never downloaded): MP4/WebM by PyAV with words
drawn by Pillow on every frame, a TGS (gzipped Lottie JSON) written by hand, AVIF/HEIC by Pillow and
pillow-heif."""

from __future__ import annotations

import gzip
import io
import json

import av
import numpy as np
from PIL import Image, ImageDraw, ImageFont


def captioned(word: str, size: tuple[int, int], index: int, transparent: bool) -> Image.Image:
    """A frame with ``word`` in large black letters (moving a pixel a frame) on white, or on a transparent
    background (a sticker)."""
    image = Image.new("RGBA", size, (255, 255, 255, 0 if transparent else 255))
    draw = ImageDraw.Draw(image)
    font = ImageFont.load_default(size=size[1] // 3)
    draw.text((size[0] / 2 + index, size[1] / 2), word, font=font, fill=(0, 0, 0, 255), anchor="mm")
    return image


def clip(container: str, codec: str, word: str = "HELLO", frames: int = 10, size=(320, 128), alpha=False) -> bytes:
    """A clip of ``frames`` frames at 10 fps showing ``word``; ``alpha``: VP9 with an alpha channel, as a
    Telegram video sticker."""
    buffer = io.BytesIO()
    with av.open(buffer, mode="w", format=container) as out:
        stream = out.add_stream(codec, rate=10)
        stream.width, stream.height = size
        stream.pix_fmt = "yuva420p" if alpha else "yuv420p"
        for index in range(frames):
            frame = captioned(word, size, index, transparent=alpha)
            rgba = np.asarray(frame if alpha else frame.convert("RGBA"))
            video_frame = av.VideoFrame.from_ndarray(
                rgba if alpha else rgba[..., :3].copy(), format="rgba" if alpha else "rgb24"
            )
            for packet in stream.encode(video_frame):
                out.mux(packet)
        for packet in stream.encode():
            out.mux(packet)
    return buffer.getvalue()


def lottie(frames: int = 30, size: int = 64, header: dict | None = None) -> bytes:
    """A TGS: gzipped Lottie JSON of a red square sliding left to right over ``frames`` frames at 30 fps."""
    static = {"a": 0, "k": [0, 0]}
    square = {"ty": "rc", "p": static, "s": {"a": 0, "k": [20, 20]}, "r": {"a": 0, "k": 0}}
    fill = {"ty": "fl", "c": {"a": 0, "k": [0.9, 0.1, 0.1, 1]}, "o": {"a": 0, "k": 100}}
    group_transform = {"ty": "tr", "p": static, "a": static, "s": {"a": 0, "k": [100, 100]}, "r": {"a": 0, "k": 0}}
    group_transform["o"] = {"a": 0, "k": 100}
    ease = {"i": {"x": [1], "y": [1]}, "o": {"x": [0], "y": [0]}}
    slide = {"a": 1, "k": [{"t": 0, "s": [10, size // 2], **ease}, {"t": frames, "s": [size - 10, size // 2]}]}
    transform = {"o": {"a": 0, "k": 100}, "r": {"a": 0, "k": 0}, "p": slide, "a": {"a": 0, "k": [0, 0, 0]}}
    transform["s"] = {"a": 0, "k": [100, 100, 100]}
    layer = {"ty": 4, "ind": 1, "ip": 0, "op": frames, "st": 0, "sr": 1, "ks": transform}
    layer["shapes"] = [{"ty": "gr", "it": [square, fill, group_transform]}]
    document = {"v": "5.5.2", "fr": 30, "ip": 0, "op": frames, "w": size, "h": size, "layers": [layer]}
    document.update(header or {})
    return gzip.compress(json.dumps(document).encode(), mtime=0)


def still(fmt: str, seed: int) -> bytes:
    """A small AVIF or HEIC photo (a gradient with a block: not flat)."""
    rng = np.random.default_rng(seed)
    pixels = np.zeros((48, 64, 3), np.uint8)
    pixels[..., 0] = np.linspace(0, 255, 64)[None, :]
    pixels[..., 2] = rng.integers(0, 255)
    pixels[10:30, 10:30] = (20, 200, 40)
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, fmt)
    return buffer.getvalue()
