#!/usr/bin/env python3
"""Writes the image fixtures of tests/unit/data/image/image_formats_test.cpp into tests/golden/images/.

Each image is 3 x 4 pixels (height x width) of a pattern the test computes as well, so the test
checks decoded pixels against known values and needs no Python:

    value(y, x, c) = (y * 4 + x) * 20 + c * 7          (c: 0 R, 1 G, 2 B; grey images use c = 0)
    alpha(y, x)    = 255 - (y * 4 + x) * 17            (alpha must not reach the decoded pixels)

PNGs are written here byte by byte (zlib and struct only), one per colour type and bit depth, so
the colour type in the file is exactly the one named. The CMYK JPEGs hold flat 8 x 8 blocks of
known inks in Adobe's inverted convention (the one Photoshop writes and ImageNet's CMYK files use:
a stored byte is 255 minus the ink): cmyk.jpg through PIL (an Adobe CMYK JPEG), ycck.jpg through
libjpeg-turbo's TurboJPEG (ctypes), which stores a CMYK buffer as YCCK.

Run: /usr/bin/python3 tests/golden/make_image_fixtures.py
"""
import ctypes
import io
import os
import struct
import zlib

import numpy as np
from PIL import Image

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "images")
H, W = 3, 4

# Inks (C, M, Y, K) of the JPEG fixtures' blocks, left to right: 16 x 8 pixels, two 8 x 8 blocks.
INKS = [(0, 128, 255, 64), (200, 30, 90, 0)]


def value(y, x, c):
    return (y * 4 + x) * 20 + c * 7


def alpha(y, x):
    return 255 - (y * 4 + x) * 17


def chunk(kind, data):
    body = kind + data
    return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body) & 0xFFFFFFFF)


def png(colour_type, depth, rows, palette=None, trns=None):
    """rows: one bytes object per image row, without the filter byte."""
    raw = b"".join(b"\x00" + r for r in rows)
    out = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", W, H, depth, colour_type, 0, 0, 0))
    if palette is not None:
        out += chunk(b"PLTE", bytes(palette))
    if trns is not None:
        out += chunk(b"tRNS", bytes(trns))
    return out + chunk(b"IDAT", zlib.compress(raw, 9)) + chunk(b"IEND", b"")


def samples(channels, depth, with_alpha):
    rows = []
    for y in range(H):
        r = b""
        for x in range(W):
            px = [value(y, x, c) for c in range(channels)] + ([alpha(y, x)] if with_alpha else [])
            r += b"".join(struct.pack(">H", v * 257) if depth == 16 else bytes([v]) for v in px)
        rows.append(r)
    return rows


def palette_png():
    # Palette entry i is the colour of pixel i; a tRNS chunk gives entries alpha (to be dropped).
    pal = [value(y, x, c) for y in range(H) for x in range(W) for c in range(3)]
    rows = [bytes(y * W + x for x in range(W)) for y in range(H)]
    return png(3, 8, rows, palette=pal, trns=[alpha(y, x) for y in range(H) for x in range(W)])


def grey1_png():
    # 1-bit grey: pixel (y, x) is white when (x + y) is odd. Packed 8 pixels a byte, MSB first.
    rows = []
    for y in range(H):
        bits = [(x + y) % 2 for x in range(W)]
        rows.append(bytes([sum(b << (7 - i) for i, b in enumerate(bits))]))
    return png(0, 1, rows)


def cmyk_blocks():
    a = np.zeros((8, 16, 4), np.uint8)
    for i, ink in enumerate(INKS):
        a[:, i * 8:(i + 1) * 8] = [255 - v for v in ink]  # Adobe's inverted bytes
    return a


def cmyk_jpeg():
    # PIL writes the Adobe marker and stores a CMYK image's bytes inverted: give it the inks.
    inks = np.zeros((8, 16, 4), np.uint8)
    for i, ink in enumerate(INKS):
        inks[:, i * 8:(i + 1) * 8] = ink
    b = io.BytesIO()
    Image.fromarray(inks, "CMYK").save(b, "JPEG", quality=100)
    return b.getvalue()


def ycck_jpeg():
    tj = ctypes.CDLL("libturbojpeg.so.0")
    tj.tjInitCompress.restype = ctypes.c_void_p
    h = tj.tjInitCompress()
    buf = ctypes.POINTER(ctypes.c_ubyte)()
    size = ctypes.c_ulong(0)
    src = np.ascontiguousarray(cmyk_blocks())
    TJPF_CMYK, TJSAMP_444 = 11, 0
    rc = tj.tjCompress2(ctypes.c_void_p(h), src.ctypes.data_as(ctypes.c_void_p), 16, 0, 8, TJPF_CMYK,
                        ctypes.byref(buf), ctypes.byref(size), TJSAMP_444, 100, 0)
    assert rc == 0, "tjCompress2 failed"
    data = ctypes.string_at(buf, size.value)
    tj.tjFree(buf)
    tj.tjDestroy(ctypes.c_void_p(h))
    return data


def main():
    os.makedirs(OUT, exist_ok=True)
    files = {
        "grey8.png": png(0, 8, samples(1, 8, False)),
        "grey16.png": png(0, 16, samples(1, 16, False)),
        "grey1.png": grey1_png(),
        "grey_alpha8.png": png(4, 8, samples(1, 8, True)),
        "rgb8.png": png(2, 8, samples(3, 8, False)),
        "rgb16.png": png(2, 16, samples(3, 16, False)),
        "rgba8.png": png(6, 8, samples(3, 8, True)),
        "rgba16.png": png(6, 16, samples(3, 16, True)),
        "palette8.png": palette_png(),
        "cmyk.jpg": cmyk_jpeg(),
        "ycck.jpg": ycck_jpeg(),
    }
    for name, data in files.items():
        with open(os.path.join(OUT, name), "wb") as f:
            f.write(data)
    # A PNG under a JPEG's name, as ImageNet holds one: the decoder must go by the signature.
    with open(os.path.join(OUT, "png_named.jpg"), "wb") as f:
        f.write(files["rgb8.png"])
    # Sanity: PIL reads each PNG back to the pattern.
    for name in ("grey8.png", "rgb8.png", "rgba8.png", "palette8.png"):
        im = np.asarray(Image.open(os.path.join(OUT, name)).convert("RGB" if "grey" not in name else "L"))
        assert int(im[2, 3] if im.ndim == 2 else im[2, 3, 0]) == value(2, 3, 0), name


if __name__ == "__main__":
    main()
