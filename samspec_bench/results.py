"""The results format every suite writes: one directory per run holding `result.json`
(a versioned schema: suite, config, environment, metrics, tables), per-sample JSONL where
the suite has samples, and figures. Samples are appended and flushed as they are produced,
so an interrupted run keeps its finished work and `--resume` can continue it.

Nothing half-written is trusted:
- every whole file (result.json, config.json, --json, reports) is written to a temp name unique
  to the process and thread, then renamed over the target (`atomic_write_text`);
- an append after a torn last line (a crash mid-write) starts a new line, and reading skips
  lines that are not whole JSON objects;
- run folders are created with an exclusive mkdir (`<suite>-<timestamp>[-n]`), so concurrent
  starts get distinct folders; each holds a marker (`samspec_run.json`) naming its suite;
- `--resume` checks that the folder belongs to the suite (marker, result.json or folder name)
  and that the saved config.json is whole and matches, and says what it found when it refuses;
- a folder this process created that holds no result and no samples when the command fails
  is removed (`discard_unfinished`), so a bad input leaves no half-made run folder.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import hashlib
import json
import math
import os
import re
import shutil
import sys
import threading
import uuid
from pathlib import Path
from typing import Any, Iterable, Iterator

from samspec_bench.errors import UserError
from samspec_bench.run_environment import environment
from samspec_bench.output_paths import check_output_file, check_output_root

SCHEMA_VERSION = 1
RUN_MARKER = "samspec_run.json"
CONFIG_FILE = "config.json"
_TMP_RE = re.compile(r"^\..+\.(\d+)\.\d+\.[0-9a-f]{8}\.tmp$")
_NAME_RE = re.compile(r"^(?P<suite>[a-z][a-z0-9-]*?)-\d{8}-\d{6}(?:-\d+)?$")

# Run folders this process created (discard_unfinished judges them) and files it wrote whole.
# (folder, whether its root was made for it); a --resume folder is there as (folder, None): named
# when interrupted, never removed
_CREATED: list[tuple[Path, bool | None]] = []
_WHOLE: set[str] = set()


def file_sha256(path: str | os.PathLike) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


# --- paths and whole files -------------------------------------------------------------------

def atomic_write_text(path: str | os.PathLike, text: str, option: str | None = None) -> Path:
    """Write `text` to a temp file unique to this process and thread beside `path`, then rename
    it over `path`: readers see the old file or the new one, never half of one; nothing is left
    behind on failure. `option` (e.g. "--json"): the input the path came from, for the error."""
    p = Path(path)
    if option is not None:
        check_output_file(p, option)
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_name(f".{p.name}.{os.getpid()}.{threading.get_ident()}.{uuid.uuid4().hex[:8]}.tmp")
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, p)
    except IsADirectoryError:
        raise UserError(f"{option or 'output'} {path}: is a directory; give a file name") from None
    except OSError as e:   # named by the path asked for, not by the temp file beside it
        raise UserError(f"{option or 'output'} {path}: cannot be written ({e.strerror or type(e).__name__}); "
                        "give a path in a directory you can write in") from None
    finally:
        if tmp.exists():
            tmp.unlink()
    _WHOLE.add(os.path.abspath(p))
    return p


def atomic_write_json(path: str | os.PathLike, obj: Any, option: str | None = None, indent: int | None = 2,
                      sort_keys: bool = True) -> Path:
    return atomic_write_text(path, json.dumps(to_jsonable(obj), indent=indent, sort_keys=sort_keys,
                                              default=str) + "\n", option)


def read_json(path: str | os.PathLike, fix: str, non_finite: list[str] | None = None) -> Any:
    """The JSON in `path`; a UserError naming the file, what is wrong (missing, not UTF-8,
    not JSON: truncated by an interrupted write?) and `fix`. NaN / Infinity (which Python's
    json writes and reads, but JSON has not) are read as null; when `non_finite` is a list,
    each one found is appended to it."""
    p = Path(path)
    try:
        raw = p.read_bytes()
    except FileNotFoundError:
        raise UserError(f"{p}: no such file; {fix}") from None
    except OSError as e:
        raise UserError(f"{p}: cannot be read ({e.strerror or type(e).__name__}); {fix}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise UserError(f"{p}: not UTF-8 text (byte {e.start}); {fix}") from None
    if not text.strip():
        raise UserError(f"{p}: empty (an interrupted write?); {fix}")
    seen = non_finite if non_finite is not None else []
    try:
        return json.loads(text, parse_constant=seen.append)   # append returns None: read as null
    except ValueError as e:
        raise UserError(f"{p}: not valid JSON ({e.msg} at line {e.lineno}: truncated by an interrupted "
                        f"write?); {fix}") from None


def emit_json(result: dict, path: str | None) -> None:
    """A command's `--json PATH`: the result as JSON in PATH (written whole), or on stdout for '-'."""
    if not path:
        return
    text = json.dumps(to_jsonable(result), indent=2, sort_keys=True, default=str)
    if path == "-":
        sys.stdout.write(text + "\n")
    else:
        atomic_write_text(path, text + "\n", option="--json")


def to_jsonable(obj: Any) -> Any:
    """Dataclasses, numpy scalars/arrays, paths and non-finite floats to plain JSON values."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return to_jsonable(dataclasses.asdict(obj))
    if isinstance(obj, dict):
        return {str(k): to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [to_jsonable(v) for v in obj]
    if isinstance(obj, Path):
        return str(obj)
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if hasattr(obj, "tolist"):  # numpy arrays and scalars
        return to_jsonable(obj.tolist())
    return obj


def make_unique_dir(root: str | os.PathLike, prefix: str, option: str = "--output", *,
                    register: bool = False) -> Path:
    """A new directory `<root>/<prefix>-<YYYYmmdd-HHMMSS>[-n]`, made with an exclusive mkdir:
    processes started in the same second get distinct ones. register: discard_unfinished may
    remove it (and the root, when it was made for it)."""
    root_p = check_output_root(root, option)
    root_made = not root_p.exists()
    try:
        root_p.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UserError(f"{option} {root}: cannot create it ({e.strerror or type(e).__name__}); "
                        "give a writable directory") from None
    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    n = 1
    while True:
        path = root_p / (f"{prefix}-{stamp}" if n == 1 else f"{prefix}-{stamp}-{n}")
        try:
            path.mkdir()
            if register:
                _CREATED.append((path, root_made))
            return path
        except FileExistsError:
            n += 1
        except OSError as e:
            raise UserError(f"{option} {root}: cannot create a run folder in it ({e.strerror or type(e).__name__}); "
                            "give a writable directory") from None


# --- run folders -----------------------------------------------------------------------------

def found_suite(path: str | os.PathLike) -> tuple[str | None, str]:
    """(the suite a run folder belongs to, or None; how that was found)."""
    p = Path(path)
    marker = p / RUN_MARKER
    if marker.is_file():
        try:
            suite = json.loads(marker.read_text(encoding="utf-8")).get("suite")
            if isinstance(suite, str):
                return suite, RUN_MARKER
        except (OSError, ValueError, AttributeError):
            pass
    res = p / "result.json"
    if res.is_file():
        try:
            suite = json.loads(res.read_text(encoding="utf-8")).get("suite")
            if isinstance(suite, str):
                return suite, "its result.json"
        except (OSError, ValueError, AttributeError):
            pass
    m = _NAME_RE.match(p.name)
    if m:
        return m.group("suite"), "its name"
    return None, ""


def _listing(p: Path, n: int = 4) -> str:
    try:
        names = sorted(x.name + ("/" if x.is_dir() else "") for x in p.iterdir())
    except OSError:
        return "unreadable"
    if not names:
        return "nothing: it is empty"
    return ", ".join(names[:n]) + (f" and {len(names) - n} more" if len(names) > n else "")


def check_resume(resume: str | os.PathLike, suite: str, identity: dict | None = None,
                 fields: Iterable[str] | None = None, config_name: str = CONFIG_FILE,
                 added: dict | None = None) -> dict | None:
    """Refuse a --resume folder that is not a run of `suite`, or whose saved config (when
    `identity` is given) is damaged or differs in one of `fields` (default: every key of
    `identity`). `added`: settings newer than some run folders, each with the value those runs
    behaved as; a saved config without one matches that value. Returns the saved config (None
    when no identity is checked)."""
    p = Path(resume)
    again = f"pass a folder written by an earlier `samspec-bench {suite}` run, or leave out --resume"
    if not p.is_dir():
        raise UserError(f"--resume {resume}: no such run directory; {again}")
    found, how = found_suite(p)
    if found is None:
        if (p / "result.json").is_file():   # one that cannot be read is named as damaged, with what is wrong
            read_json(p / "result.json", f"--resume {resume}: its result.json is damaged and no {RUN_MARKER} "
                                         "names the suite; restore it, or leave out --resume to start a new run")
        raise UserError(f"--resume {resume}: not a samspec-bench run folder (no {RUN_MARKER}, no result.json naming "
                        f"a suite; it holds {_listing(p)}); {again}")
    if found != suite:
        raise UserError(f"--resume {resume}: a `samspec-bench {found}` run folder ({how} says so), not {suite}; {again}")
    if identity is None:
        return None
    cfg_path = p / config_name
    if not cfg_path.is_file():
        raise UserError(f"--resume {resume}: no {config_name} there (the run stopped before saving its settings); "
                        "start a new run")
    saved = read_json(cfg_path, "the run's settings are damaged: start a new run")
    if not isinstance(saved, dict):
        raise UserError(f"--resume {resume}: {config_name} holds a JSON {type(saved).__name__}, not the run's "
                        "settings; start a new run")
    given = to_jsonable(identity)
    older = to_jsonable(added or {})
    for key in (list(fields) if fields is not None else list(given)):
        used = saved.get(key, older.get(key))
        if used != given.get(key):
            raise UserError(f"--resume {resume}: the run used {key} = {used!r}, this call "
                            f"{given.get(key)!r}; repeat the original options to continue it")
    return saved


INPUT_FILES = "input_files"   # config.json: file -> sha256 of what the run read


def check_same_files(saved: dict, files: dict[str, str], resume) -> None:
    """Refuse to continue a run whose input files changed since it started (its kept records
    are of the old files; a run saved before the files were recorded is not checked)."""
    before = saved.get(INPUT_FILES)
    if not isinstance(before, dict) or before == files:
        return
    fix = "restore them, or start a new run without --resume"
    for f, sha in files.items():
        if f in before and before[f] != sha:
            raise UserError(f"--resume {resume}: {f} changed since the run started (sha256 {str(before[f])[:12]} then, "
                            f"{sha[:12]} now): what the run kept was read from the old file; {fix}")
    added, gone = sorted(set(files) - set(before)), sorted(set(before) - set(files))
    what = f"{added[0]} is read now and was not then" if added else f"{gone[0]} was read then and is not now"
    raise UserError(f"--resume {resume}: the input files differ from the run's ({what}); {fix}")


class RunDir:
    """One run's directory: `<root>/<suite>-<timestamp>/`, or an existing one to resume."""

    def __init__(self, root: str | os.PathLike, suite: str, resume: str | os.PathLike | None = None):
        self.suite = suite
        self._ends_checked: set[str] = set()
        self.damaged_lines: dict[str, int] = {}   # per samples file: lines that were not whole records
        if resume is not None:
            check_resume(resume, suite)
            self.path = Path(resume)
            _CREATED.append((self.path, None))   # an interrupt names it again (kept_unfinished)
            self._remove_stale_temps()
        else:
            self.path = make_unique_dir(root, suite, register=True)
            atomic_write_json(self.path / RUN_MARKER, {"suite": suite, "pid": os.getpid(),
                                                       "created": _dt.datetime.now(_dt.timezone.utc)
                                                       .isoformat(timespec="seconds")})

    def file(self, name: str) -> Path:
        return self.path / name

    def write_json(self, name: str, obj: Any) -> Path:
        """A whole file of the run (settings, tables), written atomically."""
        return atomic_write_json(self.path / name, obj)

    def saved_config(self, name: str = CONFIG_FILE) -> dict | None:
        """The settings saved by the run (None: none saved); a UserError when damaged."""
        p = self.path / name
        if not p.is_file():
            return None
        saved = read_json(p, "the run's settings are damaged: start a new run")
        if not isinstance(saved, dict):
            raise UserError(f"{p}: holds a JSON {type(saved).__name__}, not the run's settings; start a new run")
        return saved

    def append_sample(self, record: dict, name: str = "samples.jsonl") -> None:
        """Append one record and flush, so a crash loses at most the sample in flight. A torn
        last line left by an earlier crash is cut off first (its sample is redone), so every
        line of the file stays a whole record."""
        p = self.path / name
        if name not in self._ends_checked:
            self._ends_checked.add(name)
            drop_torn_tail(p)
        with open(p, "a", encoding="utf-8") as f:
            f.write(json.dumps(to_jsonable(record), sort_keys=True) + "\n")
            f.flush()

    def samples(self, name: str = "samples.jsonl", said: bool = True) -> Iterator[dict]:
        """Records written so far. Lines that are not whole JSON objects (a damaged byte, an edit)
        are skipped and counted (`damaged_lines`, kept in result.json; `said`: one note on stderr,
        for callers that do not say it themselves): the work they held is done again. A torn last
        line (the record in flight when a run was stopped) is expected and not counted."""
        p = self.path / name
        if not p.exists():
            return
        bad = 0
        with open(p, encoding="utf-8", errors="replace") as f:
            for line in f:
                if not line.strip():
                    continue
                try:
                    rec = json.loads(line)
                except ValueError:
                    rec = None
                if isinstance(rec, dict):
                    yield rec
                elif line.endswith("\n"):
                    bad += 1
        if bad and self.damaged_lines.get(name) != bad:
            self.damaged_lines[name] = bad
            if said:
                print(f"note: {p}: {bad} line(s) are not whole records (damaged): skipped, the work they held is "
                      "done again", file=sys.stderr, flush=True)

    def write_result(self, config: Any, metrics: dict, tables: dict | None = None,
                     figures: Iterable[str] = (), extra: dict | None = None, device: dict | None = None) -> Path:
        if self.damaged_lines:   # read back and skipped on a resume: said in the result too
            extra = {**(extra or {}), "damaged_lines": dict(self.damaged_lines)}
        result = build_result(self.suite, config, metrics, tables, figures, extra, device)
        return atomic_write_text(self.path / "result.json", json.dumps(result, indent=2, sort_keys=True) + "\n")

    def _remove_stale_temps(self) -> None:
        """Temp files of a writer that died mid-write (its process is gone)."""
        for t in self.path.glob(".*.tmp"):
            m = _TMP_RE.match(t.name)
            if m and int(m.group(1)) != os.getpid() and not _alive(int(m.group(1))):
                t.unlink(missing_ok=True)


def torn_tail(path: str | os.PathLike) -> bool:
    """True when the file exists, is not empty and does not end with a newline."""
    p = Path(path)
    try:
        if p.stat().st_size == 0:
            return False
        with open(p, "rb") as f:
            f.seek(-1, 2)
            return f.read(1) != b"\n"
    except FileNotFoundError:
        return False


def drop_torn_tail(path: str | os.PathLike) -> int:
    """Cut a torn last line (no newline at the end: a write interrupted by a crash) off a JSONL
    file before appending to it; returns the bytes dropped (0: whole, empty or absent)."""
    p = Path(path)
    if not torn_tail(p):
        return 0
    with open(p, "r+b") as f:
        end = pos = f.seek(0, 2)
        while pos > 0:
            step = min(1 << 16, pos)
            f.seek(pos - step)
            nl = f.read(step).rfind(b"\n")
            pos -= step
            if nl >= 0:
                pos += nl + 1
                break
        f.truncate(pos)
    return end - pos


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    return True


def created_mark() -> int:
    """A checkpoint for discard_unfinished: the run folders made from now on."""
    return len(_CREATED)


def _holds_work(path: Path) -> bool:
    return (path / "result.json").exists() or any(
        os.path.abspath(f) not in _WHOLE and f.is_file() and f.stat().st_size > 0 for f in path.rglob("*.jsonl"))


def kept_unfinished(since: int = 0) -> list[Path]:
    """The run folders this process created or resumed (after checkpoint `since`) that hold work:
    what an interrupted command leaves for --resume."""
    return [path for path, _ in _CREATED[since:] if path.is_dir() and _holds_work(path)]


def discard_unfinished(since: int = 0) -> list[Path]:
    """Remove the run folders this process created (after checkpoint `since`) that hold no
    result.json and no sample records (only settings, a marker, files written whole): what a
    command that failed before doing any work leaves. Folders with samples stay (--resume)."""
    removed = []
    for path, root_made in _CREATED[since:]:
        if root_made is not None and path.is_dir() and not _holds_work(path):   # a --resume folder stays
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
            if root_made:
                try:
                    path.parent.rmdir()   # made for this run; removed only when nothing else is in it
                except OSError:
                    pass
    return removed


def build_result(suite: str, config: Any, metrics: dict, tables: dict | None = None,
                 figures: Iterable[str] = (), extra: dict | None = None, device: dict | None = None) -> dict:
    """result.json's object. `device`: what ran on which device (`devices.device_info`, or an
    engine's record of it), kept as environment.device where every report looks for it."""
    result = {
        "schema_version": SCHEMA_VERSION,
        "suite": suite,
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "config": to_jsonable(config),
        "environment": {**environment(), **({"device": to_jsonable(device)} if device is not None else {})},
        "metrics": to_jsonable(metrics),
        "tables": to_jsonable(tables or {}),
        "figures": list(figures),
    }
    if extra:
        result.update(to_jsonable(extra))
    return result


_RESULT_TYPES = (("suite", str), ("metrics", dict), ("tables", dict), ("figures", list), ("config", dict))


def load_result(run_dir: str | os.PathLike) -> dict:
    """A run's result.json, checked: whole JSON, an object of this schema version with the
    keys reports read. Otherwise a UserError naming the file and what is wrong with it. NaN /
    Infinity in it are read as null and counted (`non_finite_values`)."""
    p = Path(run_dir) / "result.json"
    if not p.is_file():
        raise UserError(f"{run_dir}: no result.json; pass a run directory written by a samspec-bench suite")
    rerun = "re-run the suite (or leave this run out)"
    bad: list[str] = []
    data = read_json(p, rerun, non_finite=bad)
    if not isinstance(data, dict):
        raise UserError(f"{p}: holds a JSON {type(data).__name__}, not a result object; {rerun}")
    if bad:   # read as null; counted so that a report says the run held them
        data["non_finite_values"] = {"count": len(bad), "kinds": sorted(set(bad))}
    if data.get("schema_version") != SCHEMA_VERSION:
        raise UserError(f"{p}: schema_version {data.get('schema_version')!r}, this samspec-bench reads "
                        f"{SCHEMA_VERSION}; re-run the suite with this version")
    for key, typ in _RESULT_TYPES:
        if key in data and not isinstance(data[key], typ) and not (key == "config" and data[key] is None):
            raise UserError(f"{p}: '{key}' is a JSON {type(data[key]).__name__}, not {'an object' if typ is dict else 'a ' + typ.__name__}: "
                            f"the file is damaged; {rerun}")
    for key in (k for k in ("suite", "metrics") if data.get(k) in (None, "")):   # every suite writes both
        raise UserError(f"{p}: no '{key}'{' name' if key == 'suite' else ''}: the file is damaged; {rerun}")
    return data
