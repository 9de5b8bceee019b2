"""The protobuf wire format, read by hand: varints, (field, wire type, value) triples, fixed-width
floats. Nsight Compute writes its reports as protobuf messages; walking the wire format ourselves
means no protobuf package, no .proto files and no NVIDIA software. Knows nothing of what the
fields mean (ncu_messages.py) or how the file frames them (ncu_report.py).
"""
from __future__ import annotations

import struct
from typing import Iterator


class CorruptReport(Exception):
    """Bytes that cannot be a valid report; read_ncu_report turns it into an InputError."""


def varint(b: bytes, i: int) -> tuple[int, int]:
    """The varint at b[i] and the index after it."""
    c = b[i]
    if c < 0x80:
        return c, i + 1
    r = c & 0x7F
    s = 7
    while True:
        i += 1
        c = b[i]
        r |= (c & 0x7F) << s
        if c < 0x80:
            return r, i + 1
        s += 7
        if s > 70:
            raise CorruptReport("varint too long")


def fields(b: bytes) -> Iterator[tuple[int, int, object]]:
    """Yield (field number, wire type, value); length-delimited values come back as bytes."""
    i, n = 0, len(b)
    while i < n:
        key, i = varint(b, i)
        wt = key & 7
        if wt == 0:
            v, i = varint(b, i)
        elif wt == 2:
            ln, i = varint(b, i)
            if i + ln > n:
                raise CorruptReport("length past end of message")
            v = b[i:i + ln]
            i += ln
        elif wt == 1:
            v = b[i:i + 8]
            i += 8
        elif wt == 5:
            v = b[i:i + 4]
            i += 4
        else:
            raise CorruptReport(f"unsupported wire type {wt}")
        if i > n:
            raise CorruptReport("field past end of message")
        yield key >> 3, wt, v


unpack_f = struct.Struct("<f").unpack_from
unpack_d = struct.Struct("<d").unpack_from


def as_text(b) -> str:
    """A string field as str (undecodable bytes replaced, never fatal)."""
    return b.decode("utf-8", "replace") if isinstance(b, bytes) else str(b)
