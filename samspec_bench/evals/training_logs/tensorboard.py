"""TensorBoard event files without TensorFlow: TFRecord framing and the few protobuf messages
that carry scalars.

A TFRecord is `u64 length | u32 masked crc32c(length) | data | u32 masked crc32c(data)`
(little-endian). `data` is an `Event` message (tensorflow/core/util/event.proto): wall_time = 1
(double), step = 2 (int64), summary = 5 (Summary). A Summary holds repeated `Value` = 1 with
tag = 1 (string) and either simple_value = 2 (float, TF1 and tensorboardX) or tensor = 8 (a
`TensorProto`, TF2 / torch.utils.tensorboard with the "scalars" plugin): dtype = 1,
tensor_shape = 2, tensor_content = 4 (raw little-endian), float_val = 5, double_val = 6,
int_val = 7, int64_val = 10, half_val = 13. Only one-element numeric tensors are scalars;
text, histograms and images are ignored (counted as non-scalar values).

A record whose CRCs do not match is skipped and counted; a truncated tail ends the file (a
writer killed mid-record), counted as well. Nothing here raises on a bad byte.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from samspec_bench.evals.training_logs.protowire import Bad, fields, signed64, varint

# CRC-32C (Castagnoli), reflected polynomial 0x82F63B78, as TFRecord uses it.
_POLY = 0x82F63B78
_TABLE = []
for _i in range(256):
    _c = _i
    for _ in range(8):
        _c = (_c >> 1) ^ _POLY if _c & 1 else _c >> 1
    _TABLE.append(_c)
_TABLE = tuple(_TABLE)
_MASK_DELTA = 0xA282EAD8


def crc32c(data: bytes) -> int:
    """CRC-32C of `data` (pure Python: about 3-5 MB/s, enough for scalar event files)."""
    crc = 0xFFFFFFFF
    table = _TABLE
    for b in data:
        crc = table[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def masked_crc32c(data: bytes) -> int:
    crc = crc32c(data)
    return (((crc >> 15) | (crc << 17)) + _MASK_DELTA) & 0xFFFFFFFF


@dataclass
class RecordStats:
    records: int = 0
    corrupt: int = 0          # CRC mismatch (length or data): skipped
    truncated_tail: int = 0   # the file ended inside a record
    undecodable: int = 0      # CRC fine but not a parseable Event


def iter_records(blob: bytes, stats: RecordStats):
    """The data of each intact record. A bad length CRC means the framing itself is lost:
    the rest of the file is unreadable (counted once as corrupt)."""
    pos, n = 0, len(blob)
    while pos < n:
        if pos + 12 > n:
            stats.truncated_tail += 1
            return
        header = blob[pos:pos + 8]
        (length,) = struct.unpack("<Q", header)
        (len_crc,) = struct.unpack("<I", blob[pos + 8:pos + 12])
        if masked_crc32c(header) != len_crc:
            stats.corrupt += 1
            return
        start, end = pos + 12, pos + 12 + length
        if end + 4 > n:
            stats.truncated_tail += 1
            return
        data = blob[start:end]
        (data_crc,) = struct.unpack("<I", blob[end:end + 4])
        pos = end + 4
        if masked_crc32c(data) != data_crc:
            stats.corrupt += 1
            continue
        stats.records += 1
        yield data


def looks_like_event_file(path: Path) -> bool:
    """True when the file starts with one intact TFRecord (checked by its length CRC)."""
    try:
        with open(path, "rb") as f:
            head = f.read(12)
    except OSError:
        return False
    if len(head) < 12:
        return False
    return masked_crc32c(head[:8]) == struct.unpack("<I", head[8:12])[0]


# TensorFlow DataType numbers -> struct/numpy codes of the numeric ones
_DTYPES = {1: "<f4", 2: "<f8", 3: "<i4", 4: "<u1", 5: "<i2", 6: "<i1", 9: "<i8", 10: "?", 19: "<f2", 17: "<u2",
           22: "<u4", 23: "<u8"}
_BFLOAT16 = 14


def _tensor_scalar(buf: bytes) -> float | None:
    dtype = None
    content = None
    shape_elems = 1
    packed: dict[int, list] = {}
    for num, wt, val in fields(buf):
        if num == 1 and wt == 0:
            dtype = val
        elif num == 2 and wt == 2:        # TensorShapeProto: dim = 2 {size = 1}
            for dnum, dwt, dval in fields(val):
                if dnum == 2 and dwt == 2:
                    size = next((v for n, w, v in fields(dval) if n == 1 and w == 0), 1)
                    shape_elems *= signed64(size)
        elif num == 4 and wt == 2:
            content = val
        elif num in (5, 6, 7, 10, 13):
            packed.setdefault(num, []).append((wt, val))
    if shape_elems != 1 or dtype is None:
        return None
    if content:
        if dtype == _BFLOAT16:
            return float(np.frombuffer(b"\x00\x00" + content[:2], "<f4")[0]) if len(content) >= 2 else None
        code = _DTYPES.get(dtype)
        if code is None:
            return None
        arr = np.frombuffer(content, code)
        return float(arr[0]) if arr.size == 1 else None
    for num, items in packed.items():
        wt, val = items[0]
        if num == 5:      # float_val
            return struct.unpack("<f", val[:4] if wt == 2 else val)[0]
        if num == 6:      # double_val
            return struct.unpack("<d", val[:8] if wt == 2 else val)[0]
        if num in (7, 10, 13):   # int_val / int64_val / half_val (varints)
            v = varint(val, 0)[0] if wt == 2 else val
            if num == 13:
                return float(np.frombuffer(struct.pack("<H", v & 0xFFFF), "<f2")[0])
            if dtype == _BFLOAT16:
                return float(np.frombuffer(struct.pack("<I", (v & 0xFFFF) << 16), "<f4")[0])
            return float(signed64(v) if num == 10 else (v - (1 << 64) if v >= 1 << 63 else v))
    return None


def _summary_values(buf: bytes):
    """(tag, float or None) for each Summary.Value."""
    for num, wt, val in fields(buf):
        if num != 1 or wt != 2:
            continue
        tag, scalar = None, None
        for vnum, vwt, vval in fields(val):
            if vnum == 1 and vwt == 2:
                tag = vval.decode("utf-8", "replace")
            elif vnum == 2 and vwt == 5:
                scalar = struct.unpack("<f", vval)[0]
            elif vnum == 8 and vwt == 2:
                scalar = _tensor_scalar(vval)
        if tag is not None:
            yield tag, scalar


def parse_event(buf: bytes) -> tuple[float | None, int, list[tuple[str, float | None]]]:
    """(wall_time, step, [(tag, scalar or None)]) of one Event record."""
    wall, step, values = None, 0, []
    for num, wt, val in fields(buf):
        if num == 1 and wt == 1:
            wall = struct.unpack("<d", val)[0]
        elif num == 2 and wt == 0:
            step = signed64(val)
        elif num == 5 and wt == 2:
            values.extend(_summary_values(val))
    return wall, step, values


@dataclass
class EventScalars:
    """Scalars of one or more event files: tag -> [(step, value, wall_time)] in file order."""
    points: dict[str, list[tuple[int, float, float | None]]] = field(default_factory=dict)
    stats: RecordStats = field(default_factory=RecordStats)
    non_scalar_values: int = 0
    files: list[str] = field(default_factory=list)


def read_event_file(path: Path, into: EventScalars | None = None) -> EventScalars:
    out = into if into is not None else EventScalars()
    out.files.append(str(path))
    blob = Path(path).read_bytes()
    for data in iter_records(blob, out.stats):
        try:
            wall, step, values = parse_event(data)
        except (Bad, struct.error, ValueError):
            out.stats.undecodable += 1
            continue
        for tag, v in values:
            if v is None:
                out.non_scalar_values += 1
            else:
                out.points.setdefault(tag, []).append((step, float(v), wall))
    return out


def event_files(folder: Path) -> list[Path]:
    """Event files under a folder (recursively), oldest first by the timestamp in their name."""
    found = [p for p in folder.rglob("*") if p.is_file() and "tfevents" in p.name]

    def key(p: Path):
        parts = p.name.split(".")
        stamp = next((int(x) for x in parts[parts.index("tfevents") + 1:] if x.isdigit()), 0) \
            if "tfevents" in parts else 0
        return stamp, p.as_posix()
    return sorted(found, key=key)
