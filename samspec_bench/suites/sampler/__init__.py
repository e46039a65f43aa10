"""`samspec-bench sampler`: is a rejection sampler exact? And how fast is ours?

Exactness: a seeded battery of cases (`battery`) is run through the audited sampler
(`adapters` loads `--audit module:function` or a built-in, in one of two adapter shapes:
probabilities or logits with per-request sampling parameters; `audit` runs it; a user's
module:function runs in a worker process with a time limit per call, `audit_worker`), and every
position's emitted law, the over-acceptance bounds, the acceptance counts, the output layout,
greedy rows and seeded requests are tested (`stats`, `checks`). Verdict EXACT, LOSSY (with
evidence) or ERROR (it raised, hung, or returned what is not token ids: `output_check`).
`power` states the smallest loss each test detects with 80 % power at the run's sample counts.
The controls (`controls`: exact references of another construction, and negative controls
lossy on purpose, down to a 1 % loss at one position) show the battery's power; `vllm`
audits vLLM's whole verify step. Speed (`speed`): the vectorised sampler against both loop
references (eager and lazy recovery) on the same inputs and uniforms, and against vLLM's own
rejection sampler where it imports. Everything runs on `--device` (auto: CUDA, then NPU, then
the CPU); on an accelerator the speed table is device time (events read after synchronising),
on the CPU the calling thread's CPU time, each row naming its timer.
`running` writes the run directory and the figures (`figures`).

The suite contract: SUITE, command, build_config(**options) -> SamplerConfig,
execute(config, output=..., resume=..., json_path=...) -> exit code. Importing the package
imports neither torch nor vLLM: `command` and `config` are torch-free, and `execute` loads
`running` (and through it every module above that runs torch) when it is called. The
negative controls' older spelling `--audit samspec_bench.suites.sampler:no_exclusion_demo`
still works (`config.MOVED_TARGETS`).
"""

from samspec_bench.suites.sampler.command import command, execute  # noqa: F401
from samspec_bench.suites.sampler.config import SUITE, SamplerConfig, build_config  # noqa: F401

__all__ = ["SUITE", "SamplerConfig", "build_config", "command", "execute"]
