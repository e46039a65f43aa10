"""The protobuf wire format, read by hand (no protobuf package): enough to walk the fields of
the few messages the TensorBoard and wandb readers need. Field numbers come from the messages'
public .proto files, named where they are used."""

from __future__ import annotations


class Bad(ValueError):
    pass


def varint(buf: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(buf) or shift > 63:
            raise Bad("varint")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7


def fields(buf: bytes):
    """(field number, wire type, value) of each field: int for varint, bytes for the others
    (8 bytes for fixed64, 4 for fixed32, the payload for length-delimited)."""
    pos, n = 0, len(buf)
    while pos < n:
        key, pos = varint(buf, pos)
        num, wt = key >> 3, key & 7
        if wt == 0:
            val, pos = varint(buf, pos)
        elif wt == 1:
            val, pos = buf[pos:pos + 8], pos + 8
        elif wt == 2:
            ln, pos = varint(buf, pos)
            val, pos = buf[pos:pos + ln], pos + ln
        elif wt == 5:
            val, pos = buf[pos:pos + 4], pos + 4
        else:
            raise Bad(f"wire type {wt}")
        if pos > n:
            raise Bad("field runs past the message")
        yield num, wt, val


def signed64(v: int) -> int:
    return v - (1 << 64) if v >= 1 << 63 else v


def zigzag(v: int) -> int:
    """A sint64 field's value."""
    return (v >> 1) ^ -(v & 1)
