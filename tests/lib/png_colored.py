#!/usr/bin/python3
"""Counts the coloured pixels of a PNG screenshot (8-bit RGB or RGBA, non-interlaced, as
headless Chromium writes them): pixels whose channels differ by more than 60, which grey text,
axes and a white page never have. Exits 0 when there are at least MIN of them, else 1.

Usage: png_colored.py FILE MIN"""
import struct
import sys
import zlib


def pixels(path):
    data = open(path, "rb").read()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    i, idat = 8, b""
    while i < len(data):
        n, kind = struct.unpack(">I4s", data[i:i + 8])
        body = data[i + 8:i + 8 + n]
        if kind == b"IHDR":
            width, height, depth, ctype = struct.unpack(">IIBB", body[:10])
            assert depth == 8 and ctype in (2, 6), "unsupported PNG format"
            bpp = 3 if ctype == 2 else 4
        elif kind == b"IDAT":
            idat += body
        i += 12 + n
    raw = zlib.decompress(idat)
    stride = width * bpp
    prev = bytearray(stride)
    pos = 0
    for _ in range(height):
        ftype, line = raw[pos], bytearray(raw[pos + 1:pos + 1 + stride])
        pos += 1 + stride
        for x in range(stride):
            a = line[x - bpp] if x >= bpp else 0
            b = prev[x]
            c = prev[x - bpp] if x >= bpp else 0
            if ftype == 1:
                line[x] = (line[x] + a) & 255
            elif ftype == 2:
                line[x] = (line[x] + b) & 255
            elif ftype == 3:
                line[x] = (line[x] + (a + b) // 2) & 255
            elif ftype == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                pred = a if pa <= pb and pa <= pc else (b if pb <= pc else c)
                line[x] = (line[x] + pred) & 255
        yield from (line[x:x + 3] for x in range(0, stride, bpp))
        prev = line


def main():
    path, minimum = sys.argv[1], int(sys.argv[2])
    coloured = sum(1 for p in pixels(path) if max(p) - min(p) > 60)
    print("%s: %d coloured pixels" % (path, coloured))
    sys.exit(0 if coloured >= minimum else 1)


if __name__ == "__main__":
    main()
