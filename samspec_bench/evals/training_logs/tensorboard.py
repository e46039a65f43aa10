"""TensorBoard event files without TensorFlow: TFRecord framing and the few protobuf messages
that carry scalars.

A TFRecord is `u64 length | u32 masked crc32c(length) | data | u32 masked crc32c(data)`
(little-endian). `data` is an `Event` message (tensorflow/core/util/event.proto): wall_time = 1
(double), step = 2 (int64), summary = 5 (Summary). A Summary holds repeated `Value` = 1 with
tag = 1 (string) and either simple_value = 2 (float, TF1 and tensorboardX) or tensor = 8 (a
`TensorProto`, TF2 / torch.utils.tensorboard with the "scalars" plugin): dtype = 1,
tensor_shape = 2, tensor_content = 4 (raw little-endian), float_val = 5, double_val = 6,
int_val = 7, int64_val = 10, half_val = 13. Only one-element numeric tensors are scalars;
text, histograms and images are ignored (counted as non-scalar values). A scalar record with a
negative step (int64 allows it; no training step is negative) is skipped and counted
(`EventScalars.negative_steps`), as the other readers skip and count such a step.

A record whose data CRC does not match is skipped (its length is sound: reading goes on at the
next record). A bad length CRC means the framing is lost at that byte: the reader scans forward
byte by byte for the next offset where a whole record validates (length CRC and data CRC), so
damage costs the records whose bytes it touched and no more; the skipped bytes are counted. A
truncated tail ends the file (a writer killed mid-record), counted as well. Where each damage
sits among the intact records is kept (`RecordStats.damage_at`, with its size in
`damage_bytes`), so the reader can say which steps it cost (damage.py). Nothing here raises on
a bad byte.

Damage before a file's first scalar record is counted like any other; what it cost is told
apart (`HeadDamage`): bytes in front of an intact version record (the `file_version` Event
every writer puts first) held no record, so nothing was lost; in a restarted run's later file
the damage sits after the earlier file's last step, a window like any other; at the head of a
run's first file no intact step lies before it, so the points lost are bounded by its bytes:
at most (bytes - the smallest version record) / the fewest bytes a point took in that file.
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
    corrupt: int = 0          # damaged spots: a data CRC mismatch, or a lost framing resynchronised
    truncated_tail: int = 0   # the file ended inside a record
    undecodable: int = 0      # CRC fine but not a parseable Event
    skipped_bytes: int = 0    # bytes passed over while resynchronising (or in a torn tail)
    damage_at: list[int] = field(default_factory=list)   # `records` at each damage: where it sits
    damage_bytes: list[int] = field(default_factory=list)   # the bytes each damage spans


def _header_ok(blob: bytes, pos: int) -> int | None:
    """The length of the record at `pos` when its length CRC validates, else None."""
    header = blob[pos:pos + 8]
    (len_crc,) = struct.unpack_from("<I", blob, pos + 8)
    return struct.unpack("<Q", header)[0] if masked_crc32c(header) == len_crc else None


def resync(blob: bytes, pos: int) -> int | None:
    """The first offset at or after `pos` where a whole record validates (length CRC, then data
    CRC), or None. An implausible length is ruled out before any CRC, so most offsets cost a
    struct unpack."""
    n = len(blob)
    for p in range(pos, n - 15):
        (length,) = struct.unpack_from("<Q", blob, p)
        if p + 16 + length > n:
            continue
        if _header_ok(blob, p) is None:
            continue
        end = p + 12 + length
        if masked_crc32c(blob[p + 12:end]) == struct.unpack_from("<I", blob, end)[0]:
            return p
    return None


def iter_records(blob: bytes, stats: RecordStats):
    """The data of each intact record; damage is skipped, counted and placed (damage_at)."""
    pos, n = 0, len(blob)
    while pos < n:
        if pos + 12 > n:
            _torn(stats, n - pos)
            return
        length = _header_ok(blob, pos)
        if length is None:              # framing lost: find the next whole record
            nxt = resync(blob, pos + 1)
            stats.corrupt += 1
            stats.damage_at.append(stats.records)
            stats.damage_bytes.append((n if nxt is None else nxt) - pos)
            stats.skipped_bytes += stats.damage_bytes[-1]
            if nxt is None:
                return
            pos = nxt
            continue
        start, end = pos + 12, pos + 12 + length
        if end + 4 > n:
            _torn(stats, n - pos)
            return
        data = blob[start:end]
        (data_crc,) = struct.unpack("<I", blob[end:end + 4])
        pos = end + 4
        if masked_crc32c(data) != data_crc:
            stats.corrupt += 1
            stats.damage_at.append(stats.records)
            stats.damage_bytes.append(end + 4 - start + 12)
            continue
        stats.records += 1
        yield data


def _torn(stats: RecordStats, nbytes: int) -> None:
    stats.truncated_tail += 1
    stats.skipped_bytes += nbytes
    stats.damage_at.append(stats.records)
    stats.damage_bytes.append(nbytes)


SNIFF_RECORD = 1 << 16   # bytes searched for a whole record when a file's first one is damaged


def looks_like_event_file(path: Path) -> bool:
    """True when the file starts with an intact TFRecord (checked by its length CRC), or, with
    damage at its start, a whole record validates within its first 64 KiB: damage there is
    counted by the reader, not taken for another format. Text never holds a NUL byte, which
    every record's length field does: text files are ruled out before any search."""
    try:
        with open(path, "rb") as f:
            head = f.read(SNIFF_RECORD)
    except OSError:
        return False
    if len(head) < 12:
        return False
    if masked_crc32c(head[:8]) == struct.unpack("<I", head[8:12])[0]:
        return True
    return b"\x00" in head and resync(head, 1) is not None


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


# The smallest version record: Event{wall_time (9 bytes), file_version "brain.Event:2" (15)} and
# its 16 bytes of framing; the smallest scalar record a file could hold, where a file has none intact.
MIN_VERSION_RECORD = 16 + 9 + 15
MIN_SCALAR_RECORD = 16 + 9 + 2 + 2 + 3 + 5


@dataclass
class HeadDamage:
    """Damage before a file's first scalar record with no earlier file of the run to bound it."""
    file: str
    bytes: int
    first_step: int | None       # the step of the first intact scalar record after it
    junk_only: bool              # in front of an intact version record: no record was lost
    points_at_most: int          # the most points its bytes could have held


@dataclass
class EventScalars:
    """Scalars of one or more event files: tag -> [(step, value, wall_time)] in file order."""
    points: dict[str, list[tuple[int, float, float | None]]] = field(default_factory=dict)
    stats: RecordStats = field(default_factory=RecordStats)
    non_scalar_values: int = 0
    negative_steps: int = 0        # scalar records with a negative step: skipped (series.STEP_NOTES)
    files: list[str] = field(default_factory=list)
    # per damage: the steps of the intact records either side (None: the file's start or end)
    windows: list[tuple[int | None, int | None]] = field(default_factory=list)
    head: list[HeadDamage] = field(default_factory=list)
    last_step: int | None = None   # the last step of the files read so far
    # windows still open at the end of the file read last (damage after its last intact step, a
    # torn tail): the next file of a restarted run closes them with its first step
    open_tail: list[int] = field(default_factory=list)
    window_file: list[int] = field(default_factory=list)   # per window: the index of the file it sits in
    # per file: tag -> its points read before that file (so a file's own points can be told apart)
    file_start: list[dict[str, int]] = field(default_factory=list)


def _is_version(data: bytes) -> bool:
    try:
        return any(num == 3 and wt == 2 for num, wt, _ in fields(data))
    except Bad:
        return False


def read_event_file(path: Path, into: EventScalars | None = None) -> EventScalars:
    out = into if into is not None else EventScalars()
    out.files.append(str(path))
    out.file_start.append({t: len(p) for t, p in out.points.items()})
    blob = Path(path).read_bytes()
    base, first_damage = out.stats.records, len(out.stats.damage_at)
    base_open, out.open_tail = out.open_tail, []     # the earlier file's torn tail, closed below
    # the step of each intact record of this file: None for one that names no step (undecodable,
    # or without summary values: the version record, a graph) and so bounds no damage
    steps: list[int | None] = []
    first_is_version = None
    point_bytes = []                 # bytes per scalar point of each intact scalar record
    for data in iter_records(blob, out.stats):
        if first_is_version is None:
            first_is_version = _is_version(data)
        try:
            wall, step, values = parse_event(data)
        except (Bad, struct.error, ValueError):
            out.stats.undecodable += 1
            steps.append(None)
            continue
        negative = step < 0          # no training step is negative: its scalars are skipped, counted
        steps.append(step if values and not negative else None)
        scalars = 0
        for tag, v in values:
            if v is None:
                out.non_scalar_values += 1
            else:
                scalars += 1
                if not negative:
                    out.points.setdefault(tag, []).append((step, float(v), wall))
        if scalars:
            point_bytes.append((len(data) + 16) / scalars)
            out.negative_steps += int(negative)
    fewest = min(point_bytes, default=MIN_SCALAR_RECORD)
    new = out.stats.damage_at[first_damage:]
    for k, (at, nbytes) in enumerate(zip(new, out.stats.damage_bytes[first_damage:])):
        i = at - base
        before = next((s for s in reversed(steps[:i]) if s is not None), None)
        after = next((s for s in steps[i:] if s is not None), None)
        if before is None and out.last_step is not None:
            before = out.last_step        # a restart's file: the earlier file's last step bounds it
            if after is not None and after <= before:   # it re-logs from a checkpoint: the damage sits at its start
                before = after
        if before is not None:
            if after is None:
                out.open_tail.append(len(out.windows))
            out.windows.append((before, after))
            out.window_file.append(len(out.files) - 1)
            continue
        junk = i == 0 and bool(first_is_version)
        version_lost = i == 0 and k == 0 and not first_is_version     # the file's first bytes held it
        room = nbytes - (MIN_VERSION_RECORD if version_lost else 0)
        out.head.append(HeadDamage(str(path), nbytes, after, junk, 0 if junk else max(0, int(room // fewest))))
    mine = [s for s in steps if s is not None]
    _close_tails(out, base_open, mine[0] if mine else None)
    if mine:
        out.last_step = max(mine) if out.last_step is None else max(out.last_step, max(mine))
    return out


def _close_tails(out: EventScalars, open_tail: list[int], first: int | None) -> None:
    """An earlier file's torn tail ends where the next file of the run starts: a restart that
    re-logs from a checkpoint at or before the damage covers whatever it held past its step (the
    window shrinks to that step), one that starts later leaves the steps between lost. Not bounded
    by the run's last step: tags a run never logs at its last step were not lost there."""
    if first is None:
        out.open_tail = open_tail + out.open_tail
        return
    for k in open_tail:
        p, _ = out.windows[k]
        out.windows[k] = (p, first if first > p else p)


def event_files(folder: Path) -> list[Path]:
    """Event files under a folder (recursively), oldest first by the timestamp in their name."""
    found = [p for p in folder.rglob("*") if p.is_file() and "tfevents" in p.name]

    def key(p: Path):
        parts = p.name.split(".")
        stamp = next((int(x) for x in parts[parts.index("tfevents") + 1:] if x.isdigit()), 0) \
            if "tfevents" in parts else 0
        return stamp, p.as_posix()
    return sorted(found, key=key)
