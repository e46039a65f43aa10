"""What a caller tells the SAM proposer: the dotted paths vLLM is given, the per-request
options key (`SamplingParams.extra_args["samspec"]`) and the engine-wide options in the
environment variable SAMSPEC_VLLM_DRAFTER (JSON with the same keys), for a vLLM user who
cannot set extra_args. The keys are listed in the package docstring."""

from __future__ import annotations

import json
import os

from samspec_bench.sam.draft_length import parse_length

EXTRA_KEY = "samspec"
# The draft length policy of a request that names none (SAMSPEC_VLLM_DRAFTER may set another):
# the evidence policy with the cost fitted from this engine's step times (`cost_fit`).
ENGINE_LENGTH = "evidence:cost=auto"
ENV_OPTIONS = "SAMSPEC_VLLM_DRAFTER"
MODES = ("sam", "none", "oracle")
# The class vLLM builds (`speculative_config={"method": "custom_class", "model": CLASS_PATH}`) and
# the worker extension: where the code lives. The start-up guard rail compares the class vLLM
# built with CLASS_PATH, so it must be the class's own module.
CLASS_PATH = "samspec_bench.bench.vllm_proposer.proposer.SamProposer"
EXTENSION_PATH = "samspec_bench.bench.vllm_proposer.worker_extension.SamWorkerExtension"
# Older paths of the same class, kept as re-exports for configurations already written (the
# README's path first).
PUBLIC_CLASS_PATHS = ("samspec_bench.bench.engines.vllm.drafter.SamProposer",
                      "samspec_bench.bench.vllm_drafter.SamProposer")
LEGACY_CLASS_PATH = PUBLIC_CLASS_PATHS[1]
CLASS_PATHS = (CLASS_PATH, *PUBLIC_CLASS_PATHS)   # any of them builds SamProposer


def env_options() -> dict:
    """The engine-wide options of SAMSPEC_VLLM_DRAFTER (empty when unset); a ValueError naming
    the variable and the fix for a bad value (vLLM shows it when the engine starts)."""
    raw = os.environ.get(ENV_OPTIONS)
    if not raw:
        return {}
    try:
        opts = json.loads(raw)
    except ValueError:
        raise ValueError(f"{ENV_OPTIONS}={raw!r}: not JSON; give an object such as "
                         '{"min_match": 2, "k": 3}') from None
    if not isinstance(opts, dict):
        raise ValueError(f"{ENV_OPTIONS}: expected a JSON object")
    if opts.get("length") is not None:
        try:
            parse_length(opts["length"])
        except ValueError as e:
            raise ValueError(f"{ENV_OPTIONS}: {e}") from None
    if not isinstance(opts.get("tail", False), bool):
        raise ValueError(f"{ENV_OPTIONS}: tail {opts['tail']!r}: give true or false")
    t = opts.get("threshold")
    if t is not None and (not isinstance(t, int) or isinstance(t, bool) or t < 0):
        raise ValueError(f"{ENV_OPTIONS}: threshold {t!r}: give an integer >= 0 (or leave it out: always draft)")
    return opts
