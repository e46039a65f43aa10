"""The steps of `samspec-bench run`, in order, and what each one gets: the small default
options of its suite on this machine, or the reason it cannot run here.

A plan names options by the suite's CLI option names (as a config-file section does); the run's
global settings and the config file's section go over them (see steps.py).

torch threads: chosen once per run, when the first step is planned (before this run loads
the machine itself), from the cores this process may use and the load average
(workload.choose_threads); the steps that run a model get them, and the choice is noted.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from samspec_bench.bench.engines.factory import engine_capabilities
from samspec_bench.models.checkpoints import BUILTIN_MODEL
from samspec_bench.sam.drafters import arctic_available
from samspec_bench.suites.run.rollout_plan import RUN_PROFILE, profile_for_replay, shape_plan
from samspec_bench.suites.run.state import result_problem
from samspec_bench.workload import choose_threads

# accuracy in the default run: a smoke-sized paired comparison (set accuracy: {limit: ..,
# max-gen-toks: ..} in a config file for a real one). Its cost is the prefill of lm-eval's
# 5-shot gsm8k prompts (about 740 tokens each; responses stop at "Question:" after 20-40
# tokens): 2 problems instead of 4 took the step from 46 to 29 CPU seconds
ACCURACY_LIMIT = 2
ACCURACY_MAX_GEN_TOKS = 96
ACCEPT_SOURCES = "own,group,history,group+history"


@dataclass
class Ctx:
    """What a step's plan sees."""
    out: Path                       # the run directory of `samspec-bench run`
    model: str
    engine: str | None
    data_dir: Path | None           # None: built-in workload
    sections: dict[str, Any]        # config file: step name -> options (or False)
    state: dict
    device: str | None = None       # resolved --device for the steps that take it (None: their default)

    def step_dir(self, name: str) -> Path:
        return self.out / "runs" / name

    def run_dir_of(self, name: str) -> Path | None:
        """The run folder of a step recorded done, when its result.json reads back."""
        st = self.state["steps"].get(name) or {}
        if st.get("status") == "done" and st.get("run_dir"):
            p = self.out / st["run_dir"]
            if result_problem(p, report=False) is None:
                return p
        return None

    def done_problem(self, name: str) -> str | None:
        """Why a step recorded done cannot count as done (None: it can, or it is not recorded
        done): no run folder recorded, the folder gone, its result.json missing or damaged."""
        st = self.state["steps"].get(name) or {}
        if st.get("status") != "done":
            return None
        if not st.get("run_dir"):
            return "no run folder is recorded for it"
        return result_problem(self.out / st["run_dir"])

    def workload(self) -> dict | None:
        """The built-in workload's trace and tokenizer, when that step finished."""
        d = self.run_dir_of("workload")
        if d is None:
            return None
        res = json.loads((d / "result.json").read_text(encoding="utf-8"))
        return {"trace": d / res.get("trace", "trace.jsonl"), "tokenizer": res.get("tokenizer"),
                "total_tokens": (res.get("metrics") or {}).get("total_tokens") or 0}


@dataclass
class Plan:
    options: dict[str, Any] = field(default_factory=dict)
    skip: str | None = None          # reason the step does not run here
    notes: list[str] = field(default_factory=list)
    # run before the suite with its final parameters (click names and values), e.g. to measure
    # the step-time profile a rollout replay is priced with
    prepare: Callable[[dict[str, Any]], None] | None = None
    # the run's global settings (model, engine, data-dir, device) this step is not given: it
    # would refuse them (an option of a part of the suite that does not run)
    unused: tuple[str, ...] = ()


@dataclass(frozen=True)
class Step:
    name: str                        # config section name and report label
    command: str | None              # key of samspec_bench.commands.COMMANDS; None: a built-in function
    what: str
    plan: Callable[[Ctx], Plan]


def threads_for(ctx: Ctx) -> dict[str, Any]:
    """The run's torch threads: chosen at the first call (workload.choose_threads), then kept
    in the run's state (a resumed run keeps them)."""
    chosen = ctx.state.get("threads")
    if not chosen:
        chosen = ctx.state["threads"] = choose_threads()
    return chosen


def threads_note(ctx: Ctx) -> str:
    t = threads_for(ctx)
    if "cores" not in t:
        return f"torch threads {t['threads']}"
    return (f"torch threads {t['threads']}: {t['cores']} core(s) available, load average {t['load_avg_1m']:g} "
            "when the run started")


WORKLOAD_PROMPTS = 4
WORKLOAD_ENGINE = "reference"   # the engine with a trace writer: it generates the workload and prices its replay


def _traces(ctx: Ctx, step: str) -> tuple[dict | None, str | None]:
    """(trace options for accept/drafters/rollout, or a reason why there are none); a config
    section that names its own traces gives them (its options override the plan's)."""
    if _section_value(ctx.sections, step, "traces") is not None:
        return {}, None
    if ctx.data_dir is not None:
        return {"data-dir": str(ctx.data_dir)}, None
    w = ctx.workload()
    if w is None:
        if "workload" not in ctx.state["steps"]:
            return None, "no traces: pass --data-dir, or run the workload step too"
        return None, "no traces: the workload step did not finish (see its status) and no --data-dir was given"
    return {"traces": str(w["trace"]), "tokenizer": str(w["tokenizer"])}, None


def plan_workload(ctx: Ctx) -> Plan:
    threads = threads_for(ctx)
    if ctx.data_dir is not None:
        return Plan(skip=f"not needed: the traces of {ctx.data_dir} are used")
    # 4 prompts x 4 samples keeps `run` near 3 minutes on 2 cores (the generation is its largest
    # step); a config section `workload: {num-prompts: 6}` asks for more
    opts = {"model": ctx.model, "threads": threads["threads"], "num-prompts": WORKLOAD_PROMPTS}
    notes = [threads_note(ctx)]
    if ctx.engine not in (None, WORKLOAD_ENGINE):
        notes.append(f"generated with the reference engine (--engine {ctx.engine} has no trace writer yet)")
    return Plan(options=opts, notes=notes)


def plan_accept(ctx: Ctx) -> Plan:
    threads_for(ctx)
    tr, why = _traces(ctx, "accept")
    if tr is None:
        return Plan(skip=why)
    drafters = "sam,ngram" + (",suffix" if arctic_available() else "")
    opts: dict[str, Any] = {**tr, "engine": "replay", "drafter": drafters, "num-spec-tokens": "3,5",
                            "sources": ACCEPT_SOURCES}
    notes = []
    if ctx.data_dir is not None:
        opts["limit-groups"] = 25
        if ctx.model == BUILTIN_MODEL:
            # the shared traces are other models' (Qwen2.5-Math, ToRA, GPT-3): the data directory's
            # tokenizer, no model check
            opts["model"] = None
            notes.append("the data directory's traces with its tokenizer (written by other models than the built-in)")
    elif tr:   # the built-in trace's short responses: finer position bins than the default log2:64:32768
        opts["bins"] = "32,64,96,128,160,192,224,256,320,384"
    return Plan(options=opts, notes=notes)


def plan_drafters(ctx: Ctx) -> Plan:
    threads_for(ctx)   # chosen before this run loads the machine (the first step planned)
    tr, why = _traces(ctx, "drafters")
    if tr is None:
        return Plan(skip=why)
    opts = {**tr, "k": 8, "repeats": 1, "sweep-steps": 200}
    if ctx.data_dir is not None:
        opts.update({"max-tokens": 20000, "sweep": "1024,16384"})
    elif not tr:   # the section's own traces: drafters' own defaults
        pass
    elif "sweep" not in (ctx.sections.get("drafters") or {}):
        total = int(ctx.workload()["total_tokens"])
        longest = 256
        while longest * 2 + 200 <= total and longest < 16384:
            longest *= 2
        if longest <= 256:
            return Plan(skip=f"the built-in trace has only {total} tokens: too few for a context sweep")
        opts.update({"max-tokens": max(2000, total), "sweep": f"256,{longest}"})
    return Plan(options=opts)


def _section_value(sections: dict[str, Any], step: str, *keys: str) -> Any:
    """The value a step's config-file section gives under any of `keys` (dashed or underscored),
    or None."""
    sec = sections.get(step)
    if not isinstance(sec, dict):
        return None
    return next((v for k, v in sec.items() if str(k).replace("_", "-") in keys), None)


def plan_sampler(ctx: Ctx) -> Plan:
    threads_for(ctx)   # chosen before this run loads the machine (the first step planned)
    # The default battery and sample count (vocabularies up to 151,936, so the two-level draw
    # real models use; the power statement's 1 % loss at any position), this project's sampler,
    # the exact reference written from the math, vLLM's where it imports and two negative
    # controls (one of them a 1 % loss); the loop reference only in the speed comparison.
    opts: dict[str, Any] = {"builtins": "samspec,token-rule,vllm,vllm-ascend,block-verify-demo,overaccept-1pct-demo"}
    # the speed grid, unless the section turns the speed benchmark off (sampler refuses a grid it would not time)
    if _section_value(ctx.sections, "sampler", "speed", "no-speed") is not False:
        opts.update({"speed-batch": "1,16,64", "speed-k": "3", "speed-vocab": "32000,151936", "speed-reps": 3,
                     "speed-min-time": 0.1})
    return Plan(options=opts)


def op_equivalence_levels(sections: dict[str, Any]) -> list[str]:
    """The levels the op-equivalence step runs: its section's level (a comma list or a YAML list),
    else both."""
    value = _section_value(sections, "op-equivalence", "level", "levels")
    if value is None:
        return ["kernel", "model"]
    items = value if isinstance(value, (list, tuple)) else str(value).split(",")
    return [str(x).strip() for x in items]


def unused_globals(step: str, sections: dict[str, Any]) -> tuple[str, ...]:
    """The run's global settings a step is not given under this config (Plan.unused): the model,
    engine and data directory of op-equivalence without its model level."""
    if step == "op-equivalence" and "model" not in op_equivalence_levels(sections):
        return ("model", "engine", "data-dir")
    return ()


def plan_op_equivalence(ctx: Ctx) -> Plan:
    """The model-level prompts: the data directory's gsm8k, else the built-in gsm8k set. Only the
    levels the config section selects get their options (op-equivalence refuses the others')."""
    levels = op_equivalence_levels(ctx.sections)
    opts: dict[str, Any] = {}
    notes = []
    if "model" in levels:
        opts.update({"model": ctx.model, "num-prompts": 2, "max-tokens": 32})
        if ctx.data_dir is not None:
            opts["data-dir"] = str(ctx.data_dir)
    else:
        notes.append(f"level {','.join(levels)} (config file): the run's model, engine and data directory are not "
                     "passed (the model level does not run)")
    if "kernel" in levels:
        opts.update({"trials": 1, "seq-len": "16:256"})
    opts["threads"] = threads_for(ctx)["threads"]
    return Plan(options=opts, notes=[*notes, threads_note(ctx)],
                unused=unused_globals("op-equivalence", ctx.sections))


def plan_accuracy(ctx: Ctx) -> Plan:
    """A smoke-sized paired comparison on gsm8k (the data directory's, else the built-in set):
    ACCURACY_LIMIT problems, ACCURACY_MAX_GEN_TOKS tokens each."""
    opts = {"model": ctx.model, "tasks": "gsm8k", "limit": ACCURACY_LIMIT, "max-gen-toks": ACCURACY_MAX_GEN_TOKS,
            "max-num-seqs": 16, "threads": threads_for(ctx)["threads"]}
    where = f"the gsm8k set of {ctx.data_dir}" if ctx.data_dir is not None else "the built-in gsm8k set"
    return Plan(options=opts, notes=[f"{ACCURACY_LIMIT} problems of {where}, {ACCURACY_MAX_GEN_TOKS} tokens each: "
                                     "a smoke test of the pairing, far too few to detect an accuracy change "
                                     "(accuracy: {limit: ...} in a config file for a real one)", threads_note(ctx)])


def plan_rollout(ctx: Ctx) -> Plan:
    threads = threads_for(ctx)
    if ctx.engine is None or engine_capabilities(ctx.engine).needs_traces:
        tr, why = _traces(ctx, "rollout")
        if tr is None:
            return Plan(skip=why)
        path = ctx.step_dir("rollout") / RUN_PROFILE
        shape, shape_notes = shape_plan(ctx.data_dir)
        return Plan(options={**tr, **shape, "step-model": str(path), "threads": threads["threads"]},
                    prepare=profile_for_replay(ctx.model, WORKLOAD_ENGINE, path),
                    notes=["the replay is priced by a step-time profile of the reference engine measured by this "
                           f"run (runs/rollout/{RUN_PROFILE}) over the batches and context the replay holds",
                           *shape_notes, threads_note(ctx)])
    # measured engines measure their own profile before their arms
    return Plan(options={"model": ctx.model, "threads": threads["threads"]}, notes=[threads_note(ctx)])


def plan_curves(ctx: Ctx) -> Plan:
    sec = ctx.sections.get("curves")
    if not (isinstance(sec, dict) and any(sec.get(k) for k in ("runs", "run", "extra-runs", "extra_runs"))):
        return Plan(skip="no training logs to compare: give them in --config as `curves: {runs: [BASELINE, OTHER]}`")
    return Plan(options={})


STEPS: tuple[Step, ...] = (
    Step("workload", None, "a small GRPO-like trace generated with the model (no --data-dir)", plan_workload),
    Step("accept", "accept", "acceptance by position, drafter, k and source (trace replay)", plan_accept),
    Step("drafters", "drafters", "drafter speed and memory, per-step cost versus context", plan_drafters),
    Step("rollout", "rollout", "rollout time and the long tail with and without SAM", plan_rollout),
    Step("sampler", "sampler", "rejection samplers exact or lossy; vectorised sampler speed", plan_sampler),
    Step("op-equivalence", "op-equivalence", "decode vs verify path numerics on the model", plan_op_equivalence),
    Step("accuracy", "accuracy", "downstream accuracy with and without SAM (paired)", plan_accuracy),
    Step("curves", "curves", "training curves with and without SAM: learning equivalence, step-time ratios", plan_curves),
)
STEP_NAMES = tuple(s.name for s in STEPS)
