"""The steps of `samspec-bench run`, in order, and what each one gets: the small default
options of its suite on this machine, or the reason it cannot run here.

A plan names options by the suite's CLI option names (as a config-file section does); the run's
global settings and the config file's section go over them (see steps.py).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import click

from samspec_bench.errors import int_list
from samspec_bench.sam.drafters import arctic_available
from samspec_bench.suites.rollout.profile import quick_profile
from samspec_bench.workload import write_prompts_file


@dataclass
class Ctx:
    """What a step's plan sees."""
    out: Path                       # the run directory of `samspec-bench run`
    model: str
    engine: str | None
    data_dir: Path | None           # None: built-in workload
    sections: dict[str, Any]        # config file: step name -> options (or False)
    state: dict

    def step_dir(self, name: str) -> Path:
        return self.out / "runs" / name

    def run_dir_of(self, name: str) -> Path | None:
        st = self.state["steps"].get(name) or {}
        if st.get("status") == "done" and st.get("run_dir"):
            p = self.out / st["run_dir"]
            if (p / "result.json").is_file():
                return p
        return None

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


@dataclass(frozen=True)
class Step:
    name: str                        # config section name and report label
    command: str | None              # key of samspec_bench.commands.COMMANDS; None: a built-in function
    what: str
    plan: Callable[[Ctx], Plan]


def _traces(ctx: Ctx) -> tuple[dict | None, str | None]:
    """(trace options for accept/drafters, or a reason why there are none)."""
    if ctx.data_dir is not None:
        return {"data-dir": str(ctx.data_dir)}, None
    w = ctx.workload()
    if w is None:
        if "workload" not in ctx.state["steps"]:
            return None, "no traces: pass --data-dir, or run the workload step too"
        return None, "no traces: the workload step did not finish (see its status) and no --data-dir was given"
    return {"traces": str(w["trace"]), "tokenizer": str(w["tokenizer"])}, None


def plan_workload(ctx: Ctx) -> Plan:
    if ctx.data_dir is not None:
        return Plan(skip=f"not needed: the traces of {ctx.data_dir} are used")
    if ctx.engine not in (None, "reference"):
        return Plan(options={"model": ctx.model},
                    notes=[f"generated with the reference engine (--engine {ctx.engine} has no trace writer yet)"])
    return Plan(options={"model": ctx.model})


def plan_accept(ctx: Ctx) -> Plan:
    tr, why = _traces(ctx)
    if tr is None:
        return Plan(skip=why)
    drafters = "sam,ngram" + (",suffix" if arctic_available() else "")
    opts = {**tr, "drafter": drafters, "num-spec-tokens": "3,5", "sources": "own,group"}
    if ctx.data_dir is not None:
        opts["limit-groups"] = 25
    else:   # short responses: finer position bins than the default log2:64:32768
        opts["bins"] = "32,64,96,128,160,192,224,256,320,384"
    return Plan(options=opts)


def plan_drafters(ctx: Ctx) -> Plan:
    tr, why = _traces(ctx)
    if tr is None:
        return Plan(skip=why)
    opts = {**tr, "k": 8, "repeats": 1, "sweep-steps": 200}
    if ctx.data_dir is not None:
        opts.update({"max-tokens": 20000, "sweep": "1024,16384"})
    elif "sweep" not in (ctx.sections.get("drafters") or {}):
        total = int(ctx.workload()["total_tokens"])
        longest = 256
        while longest * 2 + 200 <= total and longest < 16384:
            longest *= 2
        if longest <= 256:
            return Plan(skip=f"the built-in trace has only {total} tokens: too few for a context sweep")
        opts.update({"max-tokens": max(2000, total), "sweep": f"256,{longest}"})
    return Plan(options=opts)


def plan_sampler(ctx: Ctx) -> Plan:
    return Plan(options={"samples": 1000, "max-vocab": 1000, "speed-batch": "1,16,64", "speed-k": "3",
                         "speed-vocab": "32000,151936", "speed-reps": 3, "speed-min-time": 0.1})


def plan_op_equivalence(ctx: Ctx) -> Plan:
    opts: dict[str, Any] = {"model": ctx.model, "num-prompts": 2, "max-tokens": 32, "trials": 1,
                            "seq-len": "16:256"}
    if ctx.data_dir is not None:
        opts["data-dir"] = str(ctx.data_dir)
    else:
        ctx.out.mkdir(parents=True, exist_ok=True)
        opts["prompts"] = str(write_prompts_file(ctx.out / "builtin_prompts.jsonl"))
    return Plan(options=opts)


def plan_accuracy(ctx: Ctx) -> Plan:
    if ctx.data_dir is None:
        return Plan(skip="needs the benchmark sets: pass --data-dir (offline, lm-eval would fetch gsm8k "
                         "from the hub)")
    # a smoke-sized paired comparison; set accuracy: {limit: ..., max-gen-toks: ...} for a real one
    return Plan(options={"model": ctx.model, "tasks": "gsm8k", "limit": 10, "max-gen-toks": 256,
                         "max-num-seqs": 16})


RUN_PROFILE = "step_profile.json"   # under runs/rollout: the profile the run's replay is priced with
RUN_PROFILE_MAX_BATCH = 16          # keeps the profile short; larger batches are flagged as extrapolated


def profile_for_replay(ctx: Ctx, path: Path) -> Callable[[dict[str, Any]], None]:
    """The rollout step's prepare: measure a short profile of the reference engine (the engine
    that wrote the built-in trace) at `path`, unless the config file named another
    --step-model."""
    def prepare(params: dict[str, Any]) -> None:
        if params.get("step_model") != str(path):
            return
        ks = int_list(params.get("ks") or "3", "-k")
        largest = min(int(params.get("max_num_seqs") or RUN_PROFILE_MAX_BATCH), RUN_PROFILE_MAX_BATCH)
        click.echo(f"rollout: measuring the reference engine's step-time profile ({params.get('model') or ctx.model}, "
                   f"batches up to {largest}, k={','.join(map(str, ks))}) to price the replay", err=True)
        quick_profile(path, "reference", params.get("model") or ctx.model, ks, largest,
                      threads=int(params.get("threads") or 1), log=lambda t: click.echo(t, err=True),
                      note="measured by `samspec-bench run` on this machine to price its rollout replay")
    return prepare


def plan_rollout(ctx: Ctx) -> Plan:
    if ctx.engine in (None, "replay"):
        tr, why = _traces(ctx)
        if tr is None:
            return Plan(skip=why)
        path = ctx.step_dir("rollout") / RUN_PROFILE
        return Plan(options={**tr, "step-model": str(path)}, prepare=profile_for_replay(ctx, path),
                    notes=["the replay is priced by a step-time profile of the reference engine measured by this "
                           f"run (runs/rollout/{RUN_PROFILE})"])
    # measured engines measure their own profile before their arms
    return Plan(options={"model": ctx.model})


STEPS: tuple[Step, ...] = (
    Step("workload", None, "a small GRPO-like trace generated with the model (no --data-dir)", plan_workload),
    Step("accept", "accept", "acceptance by position, drafter, k and source (trace replay)", plan_accept),
    Step("drafters", "drafters", "drafter speed and memory, per-step cost versus context", plan_drafters),
    Step("rollout", "rollout", "rollout time and the long tail with and without SAM", plan_rollout),
    Step("sampler", "sampler", "rejection samplers exact or lossy; vectorised sampler speed", plan_sampler),
    Step("op-equivalence", "op-equivalence", "decode vs verify path numerics on the model", plan_op_equivalence),
    Step("accuracy", "accuracy", "downstream accuracy with and without SAM (paired)", plan_accuracy),
)
STEP_NAMES = tuple(s.name for s in STEPS)
