"""verl's console logger: one line per step, `step:N - key:value - key:value ...`.

Formats read:
- current verl: values printed by Python's repr, so numpy scalars appear as `np.float64(x)` /
  `np.int32(x)`; plain ints and floats otherwise;
- older verl: the line comes through Ray with a `(main_task pid=N)` prefix, often in ANSI
  colours, and timings are `timing/*` (now `timing_s/*`): the prefix and colour codes are
  stripped (current verl's `(TaskRunner pid=N)` too, on every line of a validation block), the
  keys kept as written (the metric families know both names). verl <= 0.4
  printed every value with 3 decimals (`f"{k}:{v:.3f}"`, volcengine/verl
  verl/utils/logger/aggregate_logger.py `concat_dict_to_str`; repr from 0.5 on): a file whose
  every value has 3 decimals is said to be rounded, with the tags under 0.1 where that is coarse
  (a KL of 0.0002 reads 0.000) (`read["decimals"]`);
- lines captured by wandb (files/output.log) are cut at 4096 bytes: on a line of exactly that
  length the last field may be cut mid-value, so it is dropped and the keys after it are absent
  for that step (counted as truncated_lines). A cut line whose colour codes were stripped after
  the cut is shorter: a line is taken as cut as well, whatever its length, when its last field is
  visibly so (an unclosed `np.float64(`, no `key:` in it) or it ends unlike the file's whole
  lines (they end with one key, verl's perf/throughput; a plain number or non-number under
  another key may be cut mid-value; a closed `np.float64(x)` is whole whichever key it has), or
  it has the length most visibly cut lines share when that is the file's longest (the cut
  length, short of 4096 by the colour codes);
- the `Initial validation metrics: {...}` / `Final validation metrics: {...}` blocks that verl
  pretty-prints: their values fill in what a cut step line lost (only keys the step lacks); a
  block value at a step whose line logged that key is counted (validation_block_repeats, under
  `replaced`: the step line's value kept).

Anything else in the file (progress bars, warnings, tool output) is ignored; a field that does
not hold a number is counted (non_numeric_fields) and skipped, a step past int64 too
(out_of_range_steps).
"""

from __future__ import annotations

import ast
import re
from collections import Counter
from pathlib import Path

from samspec_bench.evals.training_logs.series import (VALIDATION_REPEATS, SeriesBuilder, TrainingRun, step_notes,
                                                      step_problem)

WANDB_LINE_CUT = 4096   # bytes: wandb's console capture cuts longer lines here
STEP_LINE_TAIL = 1 << 16   # bytes of an unended line kept between blocks when scanning a file for step lines
STRIPPED_MARGIN = 512   # bytes of colour codes a cut line may have lost after the cut (a Ray prefix's are ~10)
ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")
RAY_PREFIX = re.compile(r"^\(\w+ pid=\d+[^)]*\)\s?", re.M)   # (TaskRunner pid=812): each line a Ray actor prints
STEP_LINE = re.compile(r"(?:^|[\s)\]])step:(\d+) - (.*)$")
NUMBER = re.compile(r"""^(?:(?:np|numpy|torch)\.\w+\(|tensor\(|\w+\()?\s*
                        ([-+]?(?:\d+(?:\.\d*)?(?:[eE][-+]?\d+)?|\.\d+(?:[eE][-+]?\d+)?|nan|inf|infinity))
                        \s*(?:,[^()]*)?\)?$""", re.X | re.I)
VAL_BLOCK = re.compile(r"(Initial|Final) validation metrics: \{")
ROUNDED = re.compile(r"^[-+]?(?:\d+\.\d{3}|nan|inf)$", re.I)   # verl <= 0.4: f"{v:.3f}"
ROUNDED_MIN_FIELDS = 10   # fields a file needs, all with 3 decimals, to be taken as rounded (an int reads 5.000)
COARSE = 0.1   # a tag under this at every step loses over 0.5 % to the rounding
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


def step_line_in_file(path: Path, block: int = 1 << 22) -> bool:
    """True when a step line appears anywhere in the file: a verl console log
    may hold megabytes of start-up output (config dump, model load, vLLM stats, validation
    samples) before its first step line. Read in blocks; only lines holding `step:` are decoded."""
    carry = b""
    try:
        with open(path, "rb") as f:
            while chunk := f.read(block):
                buf = carry + chunk
                body, sep, carry = buf.rpartition(b"\n")
                if not sep:                        # no line end yet: keep the line, bounded
                    body, carry = b"", buf[-STEP_LINE_TAIL:]
                if b"step:" in body and looks_like_console(body):
                    return True
    except OSError:
        return False
    return b"step:" in carry and looks_like_console(carry)


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


def line_shape(lines: list[str], blines: list[bytes]) -> tuple[str | None, int | None]:
    """(the key whole step lines end with, the byte length lines were cut at short of 4096).
    The key: verl's last metric (perf/throughput), the most common last key of the step lines
    not visibly cut, when it ends more than half of all step lines. The length: where colour
    codes were stripped after wandb's cut, the cut lines share one length, the longest of the
    file's step lines: the length of most visibly cut lines (2 or more) when it is that longest."""
    shape = []
    for b, line in zip(blines, lines):
        m = STEP_LINE.search(line)
        if m:
            shape.append((len(b.rstrip(b"\r")), m.group(2).split(" - ")[-1]))
    ends = Counter(split_field(last)[0] for n, last in shape if n != WANDB_LINE_CUT and not _visibly_cut(last))
    ending = None
    if ends:
        key, k = ends.most_common(1)[0]
        ending = key if 2 * k > len(shape) else None
    cut = Counter(n for n, last in shape if n != WANDB_LINE_CUT and cut_how(n, last, ending) is not None)
    if not cut:
        return ending, None
    n, k = cut.most_common(1)[0]
    longest = max(n for n, _ in shape if n != WANDB_LINE_CUT)
    return ending, (n if k >= 2 and 2 * k > sum(cut.values()) and n == longest else None)


def _visibly_cut(last: str) -> str | None:
    if not split_field(last)[0]:
        return "keyless"
    return "unclosed" if last.count("(") > last.count(")") else None


def cut_how(raw_len: int, last: str, ending: str | None, cut_len: int | None = None) -> str | None:
    """How a step line shows it was cut (None: whole): at wandb's limit, a last field with no
    key or an unclosed `(`, a last field that may be cut mid-value under another key than the
    one whole lines end with (a closed `name(...)` value is whole), or the length the file's
    visibly cut lines were cut at."""
    if raw_len == WANDB_LINE_CUT:
        return "limit"
    seen = _visibly_cut(last)
    if seen:
        return seen
    if (ending is not None and raw_len >= WANDB_LINE_CUT - STRIPPED_MARGIN and split_field(last)[0] != ending
            and not last.rstrip().endswith(")")):   # only a line long enough to have met the cut
        return "ending"
    return "length" if raw_len == cut_len else None


def _cut_note(run: TrainingRun, how: Counter, ending: str | None, cut_len: int | None) -> None:
    cut = sum(how.values())
    if not cut:
        return
    why = {"unclosed": "with an unclosed `(` in the last field", "keyless": "with a last field holding no `key:`",
           "ending": f"ending with a field other than {ending} (whole lines end with it)",
           "length": f"of the same length as the visibly cut ones ({cut_len} bytes)"}
    short = cut - how["limit"]
    shown = ", ".join(f"{how[k]} {t}" for k, t in why.items() if how[k])
    run.notes.append(f"{cut} step line(s) cut at {WANDB_LINE_CUT} bytes (wandb's console capture)"
                     + (f", {short} shorter than that (colour codes stripped after the cut?) and cut all the same: "
                        f"{shown}" if short else "")
                     + ": the cut field was dropped and the keys after it are absent at those steps")


def read_console(path: Path, label: str, fmt: str = "console") -> TrainingRun:
    run = TrainingRun(path=str(path), format=fmt, label=label)
    raw = Path(path).read_bytes()
    blines = raw.split(b"\n")
    # Ray's prefix is on every line of a pretty-printed validation block too: without it the block parses whole
    lines = [RAY_PREFIX.sub("", ANSI.sub("", b.rstrip(b"\r").decode("utf-8", "replace")), count=1) for b in blines]
    builder = SeriesBuilder()
    pending: list[dict[str, float]] = []     # "Initial" blocks waiting for the next step line
    last_step = None
    step_lines = 0
    ending, cut_len = line_shape(lines, blines)
    how: Counter = Counter()
    restarts: dict = {"first": None, "top": -1, "at": []}   # step numbering going back to the first step
    printed = Counter()   # step-line values: "fields", "3 decimals"
    largest: dict[str, float] = {}   # tag -> largest finite |value|
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
                _fill(run, builder, last_step, values)
            continue
        m = STEP_LINE.search(line)
        i += 1
        if not m:
            continue
        step = int(m.group(1))
        step_lines += 1
        problem = step_problem(step)
        if problem:                              # 99999999999999999999: no int64 holds it
            run.count(problem)
            continue
        fields = m.group(2).split(" - ")
        cut = cut_how(len(blines[i - 1].rstrip(b"\r")), fields[-1], ending, cut_len)
        if cut:
            how[cut] += 1
            fields = fields[:-1]
            run.count("truncated_lines")
            run.count("dropped_fields")
            run.cut_steps.append(step)
        for f in fields:
            key, x = split_field(f)
            if not key:
                run.count("non_numeric_fields")
            elif x is None:
                run.not_numeric(key)
            else:
                builder.add(key, step, x)
                printed.update(["fields"] + (["3 decimals"] if ROUNDED.match(f.rpartition(":")[2].strip()) else []))
                if abs(x) < float("inf"):
                    largest[key] = max(largest.get(key, 0.0), abs(x))
        for values in pending:
            _fill(run, builder, step, values)
        pending = []
        if restarts["first"] is None:
            restarts["first"] = step
        if step <= restarts["first"] < restarts["top"]:   # back to the first step: no checkpoint resumes there
            restarts["at"].append((i, restarts["top"]))
            restarts["top"] = step
        restarts["top"] = max(restarts["top"], step)
        last_step = step
    builder.build_into(run)
    run.read["step_lines"] = step_lines
    _cut_note(run, how, ending, cut_len)
    _restart_note(run, restarts)
    _rounded_note(run, printed, largest)
    step_notes(run, "step line(s)")
    return run


def _restart_note(run: TrainingRun, restarts: dict) -> None:
    """Step numbering that went back to the file's first step: a resumed run goes on after its
    checkpoint, so this is a run started afresh in the same file (two runs appended to one log):
    the later run's values replaced the earlier's at every step both logged."""
    if not restarts["at"]:
        return
    run.read["step_restarts"] = len(restarts["at"])
    shown = ", ".join(f"line {line}, after step {top}" for line, top in restarts["at"][:3])
    run.notes.append(f"step numbering goes back to step {restarts['first']} ({shown}"
                     f"{', ...' if len(restarts['at']) > 3 else ''}): "
                     "two runs in one file (or one restarted from scratch), not a resume from a checkpoint; where "
                     "both logged a step the later run's value is kept (duplicate_steps); keep one run's lines in "
                     "the file to compare it")


def _rounded_note(run: TrainingRun, printed: Counter, largest: dict[str, float]) -> None:
    """Says that the file's values were printed with 3 decimals (verl <= 0.4), and which tags
    stay under COARSE, where the rounding is coarse, or read 0 at every step."""
    if printed["fields"] < ROUNDED_MIN_FIELDS or printed["3 decimals"] != printed["fields"]:
        return
    run.read["decimals"] = 3
    coarse = sorted(k for k, v in largest.items() if v < COARSE)
    zero = [k for k in coarse if largest[k] == 0]
    shown = ", ".join(f"{k} (0 at every step)" if k in zero else k for k in coarse[:6])
    more = f" and {len(coarse) - 6} more" if len(coarse) > 6 else ""
    run.notes.append("values printed with 3 decimals (verl <= 0.4's console format), so each is known to +-0.0005 "
                     "only" + (f"; {len(coarse)} tag(s) stay under {COARSE} at every step, where that is coarse: "
                               f"{shown}{more}: compare them from TensorBoard or the file logger"
                               if coarse else ""))


def _fill(run: TrainingRun, builder: SeriesBuilder, step: int, values: dict[str, float]) -> None:
    for k, x in values.items():
        if not builder.has(k, step):
            builder.add(k, step, x)
        else:   # the step line logged it (verl prints the final block after its last step line): counted
            run.count(VALIDATION_REPEATS)
