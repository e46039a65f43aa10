"""The drafter benchmark: speed and memory of every available drafter on real traces.

Two measurements, both on the same tokens for every drafter:

1. Trace replay. Each response is started with its prompt, then its tokens are appended:
   in one call ("bulk": the automaton's own cost per token), one call per token
   ("stream": what a decode loop pays, Python call included), and one call per token with
   a k-token draft after each ("draft"). ns per draft = (draft - stream) / drafts. Bytes
   per token = the drafter's memory at the end of each group over the tokens it indexed.
2. Context-length sweep. A context of L real tokens (the traces concatenated) is indexed,
   then `sweep_steps` decode steps (append one token, draft k) are timed. A drafter whose
   per-step cost is independent of L shows a flat line; the n-gram baseline rescans the
   context every step and grows with L.

The evidence policy ('sam') is measured on the path it runs on (its compiled one where it
applies; the row's policy_path says which) and against 'sam-evidence-py', the same policy
chosen by its Python specification, in the same run.

Ratios are against baselines measured in the same run, never against stored figures. A replay
pass shorter than 0.2 s is repeated and averaged (as timeit's autorange does) and each drafter
keeps its fastest of `repeats` rounds, as each sweep point does; a sweep build is averaged over
distinct windows of the stream (64k tokens' worth), the same ones for every drafter.

Long runs keep their finished work: the run folder is made once the inputs are read, and each
round (a replay round times every drafter once, a sweep round every drafter at every length) is
appended to rounds.jsonl with the process that measured it as it finishes. Ctrl-C or SIGTERM
leaves the folder; `--resume DIR` (with the run's options: another setting or an edited trace
file is refused) runs only the missing rounds and writes the same result. Rounds from more than
one session are said ("rounds measured in 2 sessions"): they mix machine states.

Modules: `config` (DraftersConfig, the drafter names, build_config), `inputs` (the traces'
tokens), `timing` (replay passes and the context sweep, round by round), `rounds` (the run's
identity and its recorded rounds, --resume), `output` (metrics, figure, tables), `running`
(run, execute), `command` (click). The package's `command` is the click command,
which shadows the submodule of that name: reach the module through
`importlib.import_module("samspec_bench.suites.drafters.command")`.
"""

from samspec_bench.suites.drafters.command import command
from samspec_bench.suites.drafters.config import (BENCH_ONLY, DEFAULT_DRAFTERS, LIBRARY, PYTHON_BASELINES, SUITE,
                                                  DraftersConfig, DraftersRun, available, build_config,
                                                  build_drafter)
from samspec_bench.suites.drafters.inputs import load_workload, token_stream, trace_groups
from samspec_bench.suites.drafters.output import plot, print_table, summarize
from samspec_bench.suites.drafters.running import execute, run
from samspec_bench.suites.drafters.timing import (MIN_MEASURE_SECONDS, MODES, SWEEP_BUILD_TOKENS,
                                                  SWEEP_REPEAT_SECONDS, fastest_sweep, measure_replay, replay_pass,
                                                  sweep_point, timed_pass)

__all__ = ["BENCH_ONLY", "DEFAULT_DRAFTERS", "LIBRARY", "MIN_MEASURE_SECONDS", "MODES", "PYTHON_BASELINES", "SUITE",
           "SWEEP_BUILD_TOKENS", "SWEEP_REPEAT_SECONDS", "DraftersConfig", "DraftersRun", "available",
           "build_config", "build_drafter", "command", "execute", "fastest_sweep", "load_workload",
           "measure_replay", "plot", "print_table", "replay_pass", "run", "summarize", "sweep_point",
           "timed_pass", "token_stream", "trace_groups"]
