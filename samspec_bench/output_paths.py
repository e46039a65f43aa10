"""Checks of where a command will write (a run folder's root, a --json file, a report), made
when the option is read: a bad path is refused before the run, not after it, with the option
and the path in the message."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from samspec_bench.errors import UserError


def _file_ancestor(path: Path) -> Path | None:
    """The first existing non-directory among `path`'s parents (a file in the way), or None."""
    for parent in path.parents:
        if parent.exists():
            return None if parent.is_dir() else parent
    return None


def _existing_dir(path: Path) -> Path:
    """`path` itself when it is a directory, else its nearest existing parent directory."""
    for d in (path, *path.parents):
        if d.is_dir():
            return d
    return Path(".")


def _probe_writable(where: Path, option: str, path: str | os.PathLike, fix: str) -> None:
    """Create and remove one file in `where`: the only test that also holds for root and for
    special file systems (/proc, read-only mounts), where os.access can say yes and a write fail."""
    try:
        with tempfile.NamedTemporaryFile(dir=where, prefix=".samspec-probe-", delete=True):
            pass
    except OSError as e:
        raise UserError(f"{option} {path}: cannot write in {where} ({e.strerror or type(e).__name__}); {fix}") from None


def check_output_root(path: str | os.PathLike, option: str = "--output") -> Path:
    """A directory that run folders go into: it may not exist yet, but it is not a file, no file
    is in its way, and the nearest directory that exists can be written in."""
    p = Path(path).expanduser()
    if p.exists() and not p.is_dir():
        raise UserError(f"{option} {path}: is a file, not a directory; give a directory for the run folders")
    blocker = _file_ancestor(p)
    if blocker is not None:
        raise UserError(f"{option} {path}: {blocker} is a file, not a directory; give a directory for the run folders")
    _probe_writable(_existing_dir(p), option, path, "give a directory you can write in")
    return p


def check_output_file(path: str | os.PathLike, option: str = "--json", example: str = "result.json") -> Path:
    """A file to (over)write: not a directory, no file in the way of its folder, and a folder
    (or its nearest existing parent) that can be written in."""
    p = Path(path).expanduser()
    if p.is_dir():
        raise UserError(f"{option} {path}: is a directory; give a file name (e.g. {Path(path) / example})")
    blocker = _file_ancestor(p)
    if blocker is not None:
        raise UserError(f"{option} {path}: {blocker} is a file, not a directory; give a path in a directory")
    _probe_writable(_existing_dir(p.parent), option, path, "give a path in a directory you can write in")
    return p
