"""verl's console logger: one line per step, `step:N - key:value - key:value ...`.

Formats read:
- current verl: values printed by Python's repr, so numpy scalars appear as `np.float64(x)` /
  `np.int32(x)`; plain ints and floats otherwise;
- older verl: the line comes through Ray with a `(main_task pid=N)` prefix, often in ANSI
  colours, and timings are `timing/*` (now `timing_s/*`): the prefix and colour codes are
  stripped, the keys kept as written (the metric families know both names);
- lines captured by wandb (files/output.log) are cut at 4096 bytes: on a line of exactly that
  length the last field may be cut mid-value, so it is dropped and the keys after it are absent
  for that step (counted as truncated_lines);
- the `Initial validation metrics: {...}` / `Final validation metrics: {...}` blocks that verl
  pretty-prints: their values fill in what a cut step line lost (only keys the step lacks).

Anything else in the file (progress bars, warnings, tool output) is ignored; a field that does
not hold a number is counted (non_numeric_fields) and skipped.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from samspec_bench.evals.training_logs.series import SeriesBuilder, TrainingRun

WANDB_LINE_CUT = 4096   # bytes: wandb's console capture cuts longer lines here
ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")
STEP_LINE = re.compile(r"(?:^|[\s)\]])step:(\d+) - (.*)$")
NUMBER = re.compile(r"""^(?:(?:np|numpy|torch)\.\w+\(|tensor\(|\w+\()?\s*
                        ([-+]?(?:\d+(?:\.\d*)?(?:[eE][-+]?\d+)?|\.\d+(?:[eE][-+]?\d+)?|nan|inf|infinity))
                        \s*(?:,[^()]*)?\)?$""", re.X | re.I)
VAL_BLOCK = re.compile(r"(Initial|Final) validation metrics: \{")
DICT_ITEM = re.compile(r"""'([^']+)':\s*(?:(?:np|numpy)\.\w+\()?\s*([-+]?[\w.+-]+)\s*\)?""")


def parse_number(text: str) -> float | None:
    m = NUMBER.match(text.strip())
    if not m:
        return None
    try:
        return float(m.group(1))
    except ValueError:
        return None


def split_field(field: str) -> tuple[str, float | None]:
    """(key, number) of a `key:value` field; number None when the value is not one. The value
    may hold colons itself (`tensor(0.3, device='cuda:0')`): the first colon after which a
    number parses splits it, else the first colon (key '' where there is none)."""
    at = [i for i, ch in enumerate(field) if ch == ":" and field[:i].strip()]
    for i in at:
        x = parse_number(field[i + 1:])
        if x is not None:
            return field[:i].strip(), x
    return (field[:at[0]].strip(), None) if at else ("", None)


def looks_like_console(head: bytes) -> bool:
    """True when the first bytes hold at least one verl step line."""
    text = ANSI.sub("", head.decode("utf-8", "replace"))
    return any(STEP_LINE.search(line) for line in text.splitlines())


def _block_text(lines: list[str], i: int) -> tuple[str, int]:
    """The pretty-printed validation block starting at line i: (its text, next line index)."""
    first = lines[i].strip()
    if not first.startswith(("(", "'", '"')):       # printed plainly on one line
        return first, i + 1
    parts, j = [], i
    while j < len(lines) and j < i + 2000:
        parts.append(lines[j])
        j += 1
        if lines[j - 1].rstrip().endswith(")") or (j == i + 1 and first.rstrip().endswith(("}'", '}"'))):
            break
    src = "\n".join(parts)
    try:
        value = ast.literal_eval(src)
        return (value if isinstance(value, str) else str(value)), j
    except (ValueError, SyntaxError):
        return src, j


def read_console(path: Path, label: str, fmt: str = "console") -> TrainingRun:
    run = TrainingRun(path=str(path), format=fmt, label=label)
    raw = Path(path).read_bytes()
    blines = raw.split(b"\n")
    lines = [ANSI.sub("", b.rstrip(b"\r").decode("utf-8", "replace")) for b in blines]
    builder = SeriesBuilder()
    pending: list[dict[str, float]] = []     # "Initial" blocks waiting for the next step line
    last_step = None
    step_lines = 0
    i = 0
    while i < len(lines):
        line = lines[i]
        vb = VAL_BLOCK.search(line)
        if vb and not STEP_LINE.search(line):
            text, i = _block_text(lines, i)
            values = {}
            for k, v in DICT_ITEM.findall(text):
                x = parse_number(v)
                if x is not None:
                    values[k] = x
            if vb.group(1) == "Initial" or last_step is None:
                pending.append(values)
            else:
                _fill(builder, last_step, values)
            continue
        m = STEP_LINE.search(line)
        i += 1
        if not m:
            continue
        step = int(m.group(1))
        step_lines += 1
        fields = m.group(2).split(" - ")
        if len(blines[i - 1].rstrip(b"\r")) == WANDB_LINE_CUT:
            fields = fields[:-1]
            run.count("truncated_lines")
            run.count("dropped_fields")
        for f in fields:
            key, x = split_field(f)
            if not key:
                run.count("non_numeric_fields")
            elif x is None:
                run.not_numeric(key)
            else:
                builder.add(key, step, x)
        for values in pending:
            _fill(builder, step, values)
        pending = []
        last_step = step
    builder.build_into(run)
    run.read["step_lines"] = step_lines
    if run.counts.get("truncated_lines"):
        run.notes.append(f"{run.counts['truncated_lines']} step line(s) cut at {WANDB_LINE_CUT} bytes (wandb's "
                         "console capture): the cut field was dropped and the keys after it are absent at those steps")
    return run


def _fill(builder: SeriesBuilder, step: int, values: dict[str, float]) -> None:
    for k, x in values.items():
        if not builder.has(k, step):
            builder.add(k, step, x)
