"""Where things live: the cache for converted models and the default data directory."""

from __future__ import annotations

import os
from pathlib import Path


def cache_dir() -> Path:
    """SAMSPEC_CACHE, else $XDG_CACHE_HOME/samspec-bench, else ~/.cache/samspec-bench."""
    env = os.environ.get("SAMSPEC_CACHE")
    if env:
        return Path(env).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "samspec-bench"


def default_data_dir() -> Path | None:
    """SAMSPEC_DATA_DIR, else ./shared/data or ../shared/data when one exists (the layout of
    a checkout next to the team's shared data). None when nothing is found."""
    env = os.environ.get("SAMSPEC_DATA_DIR")
    if env:
        return Path(env).expanduser()
    for cand in (Path("shared/data"), Path("../shared/data")):
        if cand.is_dir():
            return cand.resolve()
    return None
