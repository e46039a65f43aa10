"""Which files a --traces value stands for, and the format of each (from the keys of its first
JSON object, or named with --trace-format where the command has that option: `fmt` None says
it has not, and then no message names it)."""

from __future__ import annotations

import json
import re
from pathlib import Path

from samspec_bench.errors import UserError

FORMATS = ("auto", "samspec", "verl", "lm-eval", "plain")
VERL_STEP_FILE = re.compile(r"^(\d+)\.jsonl$")
LM_EVAL_SAMPLES = "samples_*.jsonl"
FORMAT_FIELDS = ("samspec (id, group, prompt, response), verl rollout dumps (input, output, score, step), "
                 "lm-eval --log_samples files (doc_id, arguments, resps) or plain JSONL (prompt, response)")
SNIFF_LINES = 20


class UnknownTraceFile(UserError):
    """A file in no known trace format; `why` says what was found, without the path."""

    def __init__(self, message: str, why: str):
        super().__init__(message)
        self.why = why


def detect_file(path: Path, format_option: bool = False) -> str:
    """The format of one JSONL file, from the keys of its first JSON object. A file without one
    in its first lines (empty, not text, not JSON objects) or one that cannot be read is named
    now, before anything is tokenized (UnknownTraceFile); format_option: the command has
    --trace-format, and an unknown format's message says to pass it."""
    keys = None
    try:
        with path.open("rb") as f:
            for lineno, raw in enumerate(f, start=1):
                if lineno > SNIFF_LINES:
                    break
                try:
                    row = json.loads(raw.decode("utf-8-sig" if lineno == 1 else "utf-8"))
                except (UnicodeDecodeError, ValueError):
                    continue
                if isinstance(row, dict):
                    keys = set(row)
                    break
    except OSError as e:
        why = f"cannot be read ({e.strerror or type(e).__name__})"
        raise UnknownTraceFile(f"trace file {path} {why}: pass a readable JSONL file", why) from None
    if keys is None:
        why = _not_text(path)
        if why:
            raise UnknownTraceFile(f"trace file {path}: {why}", why)
        why = f"no JSON object in its first {SNIFF_LINES} lines"
        raise UnknownTraceFile(f"trace file {path}: {why}: pass JSONL traces: {FORMAT_FIELDS}", why)
    if {"doc_id", "resps"} <= keys:
        return "lm-eval"
    if {"input", "output"} <= keys:
        return "verl"
    if {"id", "group"} <= keys and keys & {"prompt", "prompt_ids"}:
        return "samspec"
    if {"prompt", "response"} <= keys:
        return "plain"
    why = f"keys {', '.join(sorted(keys)[:6])}{', ...' if len(keys) > 6 else ''}"
    raise UnknownTraceFile(f"trace file {path}: not a known trace format (its first object has the keys "
                           f"{', '.join(sorted(keys)[:12])}): use {FORMAT_FIELDS}"
                           f"{', or pass --trace-format' if format_option else ''}", why)


def _not_text(path: Path) -> str | None:
    """Why a file without a JSON object is no UTF-8 JSONL, where its first bytes say it: empty,
    compressed (a .jsonl.gz), UTF-16 text (Windows' PowerShell redirection) or one JSON array
    (json.dump of a list); else None."""
    try:
        with path.open("rb") as f:
            head = f.read(4096)
    except OSError:
        return None
    if not head:
        return f"no JSON object in its first {SNIFF_LINES} lines (the file is empty): leave it out"
    for magic, kind in _COMPRESSED_MAGIC.items():
        if head.startswith(magic):
            return f"{kind}-compressed, not JSONL text: decompress it and pass the .jsonl"
    if head[:2] in (b"\xff\xfe", b"\xfe\xff") and _utf16_json(head):
        return "UTF-16 text: convert it to UTF-8 (iconv -f UTF-16 -t UTF-8)"
    if head.removeprefix(b"\xef\xbb\xbf").lstrip().startswith(b"["):
        return "one JSON array, not JSON lines: write one object a line (e.g. jq -c '.[]' FILE)"
    return None


def _utf16_json(head: bytes) -> bool:
    """Whether bytes after a UTF-16 byte-order mark read as JSON text (not bytes that merely start so)."""
    try:
        text = head[: len(head) // 2 * 2].decode("utf-16")
    except UnicodeDecodeError:
        return False
    return text.lstrip().startswith(("{", "["))


_COMPRESSED_MAGIC = {b"\x1f\x8b": "gzip", b"\x28\xb5\x2f\xfd": "zstd", b"BZh": "bzip2", b"\xfd7zXZ": "xz"}
COMPRESSED = ("*.jsonl.gz", "*.jsonl.zst", "*.jsonl.bz2", "*.jsonl.xz")


def refuse_compressed(directory: Path) -> None:
    """Refuses a folder holding compressed trace files (3.jsonl.gz beside 4.jsonl): they are
    not read, and leaving them out silently would drop their steps' responses."""
    found = [directory.glob(pattern) for pattern in COMPRESSED]   # beside the *.jsonl read, and lm-eval's below
    found += [directory.rglob(pattern.replace("*", "samples_*", 1)) for pattern in COMPRESSED]
    packed = sorted({f for files in found for f in files if f.is_file()})
    if packed:
        names = ", ".join(f.relative_to(directory).as_posix() for f in packed[:6])
        more = f" and {len(packed) - 6} more" if len(packed) > 6 else ""
        raise UserError(f"trace directory {directory} holds {len(packed)} compressed trace file(s) ({names}{more}), "
                        "which are not read: decompress them in place (e.g. gunzip *.jsonl.gz) or move them out")


def verl_step_files(directory: Path) -> list[Path]:
    """A verl rollout_data_dir's step files, in step order; two files for one step (03.jsonl
    beside 3.jsonl) are refused (one_file_per_step)."""
    named = [p for p in directory.iterdir() if VERL_STEP_FILE.match(p.name)]
    unreadable = sorted(p.name for p in named if not p.is_file())
    if unreadable:   # a broken link or a folder named for a step: its step would be left out, silently
        raise UserError(f"trace directory {directory}: {', '.join(unreadable[:6])} named for an RL step but not a "
                        "readable file (a broken symbolic link, or a folder): restore the step file or move it out")
    files = sorted((p for p in named if p.is_file()), key=lambda p: (_step_of(p), p.name))
    one_file_per_step(files)
    return files


def blank_file(path: Path, most: int = 4096) -> bool:
    """Whether a file holds nothing but white space (read up to `most` bytes: a larger file is not blank)."""
    try:
        with path.open("rb") as f:
            head = f.read(most + 1)
    except OSError:
        return False
    return len(head) <= most and not head.strip()


def _step_of(path: Path) -> int:
    return int(VERL_STEP_FILE.match(path.name).group(1))


def one_file_per_step(files: list[Path]) -> None:
    """Refuses two verl step files of one folder named for the same step (03.jsonl and 3.jsonl):
    verl writes one {global_step}.jsonl per step, so one is a copy or another run's, and reading
    both would merge them into one step."""
    seen: dict[tuple[Path, int], Path] = {}
    for f in files:
        if not VERL_STEP_FILE.match(f.name):
            continue
        key = (f.resolve().parent, _step_of(f))
        if key in seen:
            raise UserError(f"trace directory {f.parent}: {seen[key].name} and {f.name} are both step {key[1]} (verl "
                            "writes one {global_step}.jsonl per step, so one is a copy or another run's): keep one "
                            "of them and move the other out of the folder")
        seen[key] = f


def unique_files(files: list[tuple[Path, str]]) -> None:
    """Refuses a trace file read twice (named twice, or named beside a folder holding it) and two
    verl files for one step: either would count responses twice, silently."""
    seen: dict[Path, Path] = {}
    for f, _ in files:
        r = f.resolve()
        if r in seen:
            raise UserError(f"trace file {f} is given twice (by name or inside a folder also given): pass each "
                            "trace file once, or its folder alone")
        seen[r] = f
    one_file_per_step([f for f, kind in files if kind == "verl"])


def expand(path: str | Path, fmt: str | None = None) -> list[tuple[Path, str]]:
    """The (file, format) pairs a --traces value stands for: a file, or a directory (a verl
    rollout_data_dir, a folder of lm-eval samples, or *.jsonl files). fmt: the command's
    --trace-format ('auto': each file's detected); None for a command without that option (each
    file's detected, and no message tells the user to pass it)."""
    option = fmt is not None
    fmt = "auto" if fmt is None else fmt
    if fmt not in FORMATS:
        raise UserError(f"--trace-format {fmt!r}: use one of {', '.join(FORMATS)}")
    p = Path(path).expanduser()
    if p.is_file():
        return [(p, detect_file(p, option) if fmt == "auto" else fmt)]
    if not p.is_dir():
        raise UserError(f"trace file {p} does not exist: pass an existing JSONL file or a directory of them")
    refuse_compressed(p)
    if fmt == "auto":
        return _detect_folder(p, option)
    if fmt == "verl":
        steps = verl_step_files(p)
        if steps:
            return [(f, "verl") for f in steps]
        raise UserError(f"trace directory {p} holds no verl step files ({{global_step}}.jsonl, e.g. 1.jsonl): "
                        "pass the directory set as trainer.rollout_data_dir")
    if fmt == "lm-eval":
        samples = sorted(p.rglob(LM_EVAL_SAMPLES))
        if samples:
            return [(f, "lm-eval") for f in samples]
        raise UserError(f"trace directory {p} holds no lm-eval samples files ({LM_EVAL_SAMPLES}): pass the "
                        "--output_path of an lm-eval run with --log_samples")
    files = sorted(p.glob("*.jsonl"))
    if not files:
        _no_traces(p)
    return [(f, fmt) for f in files]


def _no_traces(p: Path) -> None:
    """Refuses a folder without *.jsonl files, naming its subfolders that hold some (a folder of runs:
    one rollout_data_dir per experiment, a run's rollout and validation folders): pass those."""
    subs = sorted(d.name for d in p.iterdir() if d.is_dir() and any(d.glob("*.jsonl")))
    if subs:
        more = f" and {len(subs) - 4} more" if len(subs) > 4 else ""
        raise UserError(f"trace directory {p} holds no *.jsonl files, its subfolders {', '.join(subs[:4])}{more} do: "
                        f"pass the folder to read (e.g. --traces {p / subs[0]}); folders below are not searched")
    raise UserError(f"trace directory {p} holds no *.jsonl files: pass a directory or files with traces "
                    "(a verl rollout_data_dir, lm-eval samples, or JSONL)")


def _detect_folder(p: Path, format_option: bool) -> list[tuple[Path, str]]:
    """Every trace file of a folder, each in its own detected format: its *.jsonl (verl step
    files first, in step order) and lm-eval samples files below it. A folder is read whole or
    refused: files in no known format are listed in one UserError (naming --trace-format where
    the command has it: format_option)."""
    steps = verl_step_files(p)
    rest = sorted((set(p.glob("*.jsonl")) | set(p.rglob(LM_EVAL_SAMPLES))) - set(steps))
    if not steps and not rest:
        _no_traces(p)
    found, unknown, blank = [], [], []
    for f in [*steps, *rest]:
        if f in steps and blank_file(f):
            blank.append(f)   # verl's dump of an empty batch is one newline: a step without responses
            continue
        try:
            found.append((f, detect_file(f, format_option)))
        except UnknownTraceFile as e:
            unknown.append(f"{f.relative_to(p).as_posix()} ({e.why})")
    if blank and any(kind == "verl" for _, kind in found):
        found = sorted(found + [(f, "verl") for f in blank],
                       key=lambda fk: (0, _step_of(fk[0])) if fk[0] in steps else (1, 0))
    else:
        unknown += [f"{f.relative_to(p).as_posix()} (no JSON object: an empty file)" for f in blank]
    if unknown:
        more = f", and {len(unknown) - 6} more" if len(unknown) > 6 else ""
        fix = ("move them out, pass the trace files themselves, or name the format with --trace-format"
               if format_option else "move them out or pass the trace files themselves")
        raise UserError(f"trace directory {p}: {len(unknown)} of {len(found) + len(unknown)} file(s) not understood "
                        f"as traces: {'; '.join(unknown[:6])}{more}; {fix}; known: {FORMAT_FIELDS}")
    return found
