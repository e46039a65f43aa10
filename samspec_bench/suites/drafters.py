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
"""

from __future__ import annotations

import itertools
import json
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import click
import numpy as np
from rich.console import Console
from rich.progress import Progress
from rich.table import Table

from samspec_bench.bench.engines.replay import MAX_K
from samspec_bench.data import find_traces, load_tokenizer, read_traces, resolve_data_dir, tokenize_traces
from samspec_bench.errors import UserError
from samspec_bench.results import RunDir, emit_json, file_sha256
from samspec_bench.sam.drafters import DRAFTERS, SamDrafter, arctic_available, make_drafter

SUITE = "drafters"

DEFAULT_DRAFTERS = ("sam-fixed", "sam", "sam-evidence-py", "sam-group", "ngram", "suffix", "sam-python", "sam-public")
# Benchmark-only names: SAM with GRPO sharing, and the evidence policy chosen by its Python
# specification (the baseline its compiled path is measured against, in the same run).
BENCH_ONLY = {"sam-group": dict(group_sharing=True), "sam-evidence-py": dict(compiled=False)}
# The automaton with SAM-Decoding's lookup: what the library's speed and memory figures (and the
# report's gates) describe; 'sam' adds the evidence policy's per-draft choice and counts on top.
LIBRARY = "sam-fixed"
PYTHON_BASELINES = ("sam-python", "sam-public")


@dataclass
class DraftersConfig:
    traces: list[str]
    tokenizer: str
    drafters: list[str] = field(default_factory=lambda: list(DEFAULT_DRAFTERS))
    k: int = 8
    max_tokens: int = 200_000
    sweep: list[int] = field(default_factory=lambda: [1024, 32768, 262144])
    sweep_steps: int = 1000
    repeats: int = 3
    chat_template: str = "auto"
    on_error: str = "stop"

    def check(self) -> None:
        """The checks that need no file: raised before anything is loaded."""
        if not 1 <= self.k <= MAX_K:
            raise UserError(f"-k {self.k}: the number of draft tokens must be in 1..{MAX_K} (as in accept and rollout)")
        if self.max_tokens < 1 or self.sweep_steps < 1 or self.repeats < 1:
            raise UserError("--max-tokens, --sweep-steps and --repeats must be >= 1")
        for n in self.drafters:
            if n not in DRAFTERS and n not in BENCH_ONLY:
                raise UserError(f"--drafters: unknown drafter {n!r}; choose from {', '.join(DEFAULT_DRAFTERS)}")


def build_drafter(name: str):
    """Benchmark names: the library's drafters plus BENCH_ONLY's."""
    if name in BENCH_ONLY:
        d = SamDrafter(**BENCH_ONLY[name])
        d.name = name
        return d
    return make_drafter(name)


def available(names: list[str]) -> tuple[list[str], dict[str, str]]:
    """The drafters that can run here, and why the others cannot (names checked by
    DraftersConfig.check)."""
    ok, skipped = [], {}
    for n in names:
        if n == "suffix" and not arctic_available():
            skipped[n] = "arctic-inference is not installed (see the README's optional installs)"
            continue
        ok.append(n)
    return ok, skipped


def load_workload(cfg: DraftersConfig):
    """Tokenized responses, an equal share of max_tokens from each trace file, in file order."""
    tok = load_tokenizer(cfg.tokenizer)
    files = [Path(t) for t in cfg.traces]
    per_file = max(1, cfg.max_tokens // max(1, len(files)))
    responses, skipped, formats = [], 0, set()
    for f in files:
        ts = read_traces(f, on_error=cfg.on_error)
        resp = tokenize_traces(ts, tok, chat_template=cfg.chat_template)
        skipped += len(ts.skipped)
        used = 0
        for r in resp:
            if used >= per_file:
                break
            responses.append(r)
            formats.add(r.prompt_format)
            used += r.prompt_ids.size + r.response_ids.size
    if not responses:
        raise UserError(f"--traces {', '.join(cfg.traces)}: no usable responses; check the files")
    return responses, skipped, sorted(formats)


def _groups(responses):
    """Consecutive responses of one group (a trace file's group key)."""
    out, key = [], None
    for r in responses:
        k = (r.source.name, r.group)
        if k != key:
            out.append([])
            key = k
        out[-1].append(r)
    return out


MODES = ("bulk", "stream", "draft")


def replay_pass(drafter, groups, k: int, mode: str, on_group=None) -> tuple[float, int, int, int]:
    """Feed every response to the drafter; a group's members stay live until the group ends
    (so a group-sharing drafter sees its siblings). mode "bulk": the response in one call;
    "stream": one call per token, as a decode loop emits them; "draft": stream and draft k
    after every token. Returns (seconds, tokens indexed, drafts, bytes summed over groups
    at their end)."""
    seconds, tokens, drafts, mem = 0.0, 0, 0, 0
    perf = time.perf_counter
    for members in groups:
        ids = []
        for r in members:
            rid = (r.source.name, r.line)
            ids.append(rid)
            resp = r.response_ids if mode == "bulk" else r.response_ids.tolist()
            group = (r.source.name, r.group)
            t0 = perf()
            drafter.start(rid, r.prompt_ids, group=group)
            if mode == "bulk":
                drafter.extend(rid, resp)
            elif mode == "stream":
                for tkn in resp:
                    drafter.extend(rid, (tkn,))
            else:
                for tkn in resp:
                    drafter.extend(rid, (tkn,))
                    drafter.propose(rid, k)
            seconds += perf() - t0
            tokens += r.prompt_ids.size + len(resp)
            drafts += len(resp) if mode == "draft" else 0
        if mode == "bulk":
            mem += drafter.memory_bytes()
        for rid in ids:
            drafter.stop(rid)
        if on_group is not None:
            on_group()
    return seconds, tokens, drafts, mem


MIN_MEASURE_SECONDS = 0.2


def timed_pass(name: str, groups, k: int, mode: str, on_group=None) -> tuple[float, int, int, int, int]:
    """Seconds per replay pass, measured over at least MIN_MEASURE_SECONDS as timeit's
    autorange does: a compiled drafter's pass takes a few milliseconds, and the first one
    after another drafter's runs up to a quarter slower (cold caches, the allocator's state);
    repeating it until the measurement lasts 0.2 s averages that away. Slow drafters run once.
    Returns (seconds per pass, tokens, drafts, bytes, passes timed)."""
    secs, tokens, drafts, mem = replay_pass(build_drafter(name), groups, k, mode, on_group)
    total, loops = secs, 1
    while total < MIN_MEASURE_SECONDS:
        total += replay_pass(build_drafter(name), groups, k, mode)[0]
        loops += 1
    return total / loops, tokens, drafts, mem, loops


SWEEP_BUILD_TOKENS = 65_536


def sweep_point(name: str, stream: np.ndarray, length: int, steps: int, k: int) -> dict:
    """Index `length` tokens and time `steps` decode steps on it (append one token, draft k).
    The build cost is the mean over consecutive windows of the stream, as many as make
    SWEEP_BUILD_TOKENS (64 at 1k, one at 64k and above): the same windows for every drafter,
    each built once (one 1k build is too short to time, and building the same tokens again
    would let the branch predictor learn them). The steps run on the first window, before
    the other builds, so it is not cold in cache."""
    windows = max(1, min(SWEEP_BUILD_TOKENS // length, (stream.size - steps) // length))
    d = build_drafter(name)
    t0 = time.perf_counter()
    d.start("ctx", stream[:length])
    build = time.perf_counter() - t0
    nxt = stream[length: length + steps].tolist()
    t0 = time.perf_counter()
    for tkn in nxt:
        d.extend("ctx", (tkn,))
        d.propose("ctx", k)
    step = time.perf_counter() - t0
    mem = d.memory_bytes()
    d.stop("ctx")
    for w in range(1, windows):
        again = build_drafter(name)
        t0 = time.perf_counter()
        again.start("ctx", stream[w * length: (w + 1) * length])
        build += time.perf_counter() - t0
        again.stop("ctx")
    return {"drafter": name, "context_tokens": length, "ns_per_step": step / len(nxt) * 1e9,
            "ns_per_token_build": build / (windows * length) * 1e9, "build_windows": windows,
            "bytes_per_token": mem / (length + len(nxt)) if mem else None}


SWEEP_REPEAT_SECONDS = 1.0   # a sweep point that took longer (a Python drafter's) runs once


def fastest_sweep(names, stream: np.ndarray, cfg: DraftersConfig, on_point=lambda: None) -> list[dict]:
    """Each (drafter, length) point keeps its fastest steps and build of `repeats` rounds round
    the drafters (1000 steps last about 1 ms: one sample is at the mercy of other jobs)."""
    best, slow = {}, set()
    for _, name, length in itertools.product(range(cfg.repeats), names, cfg.sweep):
        key, t0, old = (name, length), time.perf_counter(), best.get((name, length), {})
        if key not in slow:
            row = sweep_point(name, stream, length, cfg.sweep_steps, cfg.k)
            slow.update([key] if time.perf_counter() - t0 > SWEEP_REPEAT_SECONDS else [])
            build = min(row["ns_per_token_build"], old.get("ns_per_token_build", float("inf")))
            row = min(old or row, row, key=lambda r: r["ns_per_step"])
            best[key] = dict(row, ns_per_token_build=build, timed_rounds=old.get("timed_rounds", 0) + 1)
        on_point()   # once per point and round, a skipped one too
    return [best[(n, L)] for n in names for L in cfg.sweep]


def run(cfg: DraftersConfig, out_root: str, progress: bool = True) -> tuple[dict, Path]:
    cfg.check()
    names, unavailable = available(cfg.drafters)
    if not names:
        name, why = next(iter(unavailable.items()))
        raise UserError(f"--drafters {','.join(cfg.drafters)}: none of them can run here ({name}: {why})")
    responses, skipped, formats = load_workload(cfg)
    groups = _groups(responses)
    stream = np.concatenate([np.concatenate([r.prompt_ids, r.response_ids]) for r in responses])
    need = max(cfg.sweep) + cfg.sweep_steps if cfg.sweep else 0
    if need > stream.size:  # the sweep needs a longer stream than the replay's share: load all of it
        full = load_workload(DraftersConfig(**{**cfg.__dict__, "max_tokens": need * 2}))[0]
        stream = np.concatenate([np.concatenate([r.prompt_ids, r.response_ids]) for r in full])
    if need > stream.size:
        raise UserError(f"--sweep up to {max(cfg.sweep)} tokens needs {need} tokens of traces, "
                        f"found {stream.size}; pass more --traces or smaller --sweep values")

    rows, sweep_rows = [], []
    with Progress(disable=not progress, transient=True) as bar:
        # Repeats go round the drafters (a, b, c, b, c, a, ...) and each keeps its fastest:
        # a burst of load elsewhere on the machine then hits every drafter alike, and the
        # ratios between them, which are the point, stay steady. The order rotates each
        # round because a pass inherits the heap and caches the previous one left.
        task = bar.add_task("replay", total=len(names) * len(groups) * (1 + cfg.repeats * len(MODES)))
        adv = lambda: bar.advance(task)  # noqa: E731
        best = {name: {m: float("inf") for m in MODES} for name in names}
        seen: dict[str, dict] = {name: {} for name in names}
        passes: dict[str, dict] = {name: {} for name in names}
        for name in names:
            replay_pass(build_drafter(name), groups, cfg.k, "bulk", adv)  # warm-up
        for rep in range(cfg.repeats):
            for name in names[rep % len(names):] + names[:rep % len(names)]:
                for mode in MODES:
                    secs, tokens, n, mem_m, loops = timed_pass(name, groups, cfg.k, mode, adv)
                    best[name][mode] = min(best[name][mode], secs)
                    passes[name][mode] = passes[name].get(mode, 0) + loops
                    seen[name].update({"tokens": tokens} | ({"mem": mem_m} if mode == "bulk" else {})
                                      | ({"drafts": n} if mode == "draft" else {}))
        bar.remove_task(task)
        for name in names:
            b, tokens, drafts, mem = best[name], seen[name]["tokens"], seen[name]["drafts"], seen[name]["mem"]
            rows.append({
                "drafter": name, "tokens": tokens, "drafts": drafts, "timed_passes": passes[name],
                "ns_per_token": b["bulk"] / tokens * 1e9,
                "ns_per_token_stream": b["stream"] / tokens * 1e9,
                "ns_per_draft": max(0.0, b["draft"] - b["stream"]) / drafts * 1e9,
                "bytes_per_token": mem / tokens if mem else None,
                # where a SAM drafter's draft-length policy ran: 'c' or 'python'
                "policy_path": getattr(build_drafter(name), "policy_path", None),
            })
        task = bar.add_task("context sweep", total=cfg.repeats * len(names) * len(cfg.sweep))
        sweep_rows = fastest_sweep(names, stream, cfg, on_point=lambda: bar.advance(task))
        bar.remove_task(task)

    run_dir = RunDir(out_root, SUITE)
    metrics = summarize(rows, sweep_rows, cfg)
    figure = plot(rows, sweep_rows, run_dir.file("drafters.png"))
    result = {
        "metrics": metrics,
        "tables": {"replay": rows, "context_sweep": sweep_rows},
        "extra": {"unavailable_drafters": unavailable, "skipped_trace_lines": skipped,
                  "prompt_formats": formats, "responses": len(responses), "groups": len(groups),
                  "data_files": {t: file_sha256(t) for t in cfg.traces}},
    }
    run_dir.write_result(cfg, metrics, result["tables"], [figure.name], result["extra"])
    return json.loads(run_dir.file("result.json").read_text()), run_dir.path


def summarize(rows: list[dict], sweep_rows: list[dict], cfg: DraftersConfig) -> dict:
    """Headline figures: SAM's ratios against the baselines measured in this run, and the
    growth of each drafter's per-step cost from the shortest to the longest context."""
    by = {r["drafter"]: r for r in rows}
    m: dict = {"k": cfg.k}
    lib = LIBRARY if LIBRARY in by else "sam"
    sam = by.get(lib)
    if sam:
        m["sam_library_drafter"] = lib
        m["sam_ns_per_token"] = sam["ns_per_token"]
        m["sam_ns_per_draft"] = sam["ns_per_draft"]
        m["sam_bytes_per_token"] = sam["bytes_per_token"]
        for base in PYTHON_BASELINES:
            if base in by:
                m[f"append_speedup_vs_{base.replace('-', '_')}"] = by[base]["ns_per_token"] / sam["ns_per_token"]
                m[f"append_stream_speedup_vs_{base.replace('-', '_')}"] = (
                    by[base]["ns_per_token_stream"] / sam["ns_per_token_stream"])
                m[f"draft_speedup_vs_{base.replace('-', '_')}"] = (
                    by[base]["ns_per_draft"] / sam["ns_per_draft"] if sam["ns_per_draft"] > 0 else None)
    ev = by.get("sam")
    if ev and lib != "sam":   # the evidence policy's own cost, beside the library's
        m["evidence_ns_per_draft"] = ev["ns_per_draft"]
        m["evidence_bytes_per_token"] = ev["bytes_per_token"]
        m["evidence_policy_path"] = ev.get("policy_path")
        if sam["ns_per_draft"] > 0:   # what the policy costs on top of the fixed lookup
            m["evidence_draft_cost_vs_fixed_lookup"] = ev["ns_per_draft"] / sam["ns_per_draft"]
    ref = by.get("sam-evidence-py")
    if ref:   # the policy chosen by its Python specification, measured in the same run
        m["evidence_python_ns_per_draft"] = ref["ns_per_draft"]
        if ev and ev["ns_per_draft"] > 0:
            m["evidence_draft_speedup_vs_python_policy"] = ref["ns_per_draft"] / ev["ns_per_draft"]
    if sweep_rows and sam:
        # building a long context in one call (a long prompt, or a response thousands of tokens
        # long): per-token cost at each swept length, against the same tokens in the baselines
        build = {(r["drafter"], r["context_tokens"]): r["ns_per_token_build"] for r in sweep_rows}
        for base in PYTHON_BASELINES:
            ratios = {str(L): build[(base, L)] / build[(lib, L)] for L in cfg.sweep
                      if (base, L) in build and (lib, L) in build and build[(lib, L)] > 0}
            if ratios:
                m[f"build_speedup_vs_{base.replace('-', '_')}_by_context"] = ratios
    if sweep_rows:
        lo, hi = min(cfg.sweep), max(cfg.sweep)
        growth = {}
        for name in by:
            pts = {r["context_tokens"]: r["ns_per_step"] for r in sweep_rows if r["drafter"] == name}
            if lo in pts and hi in pts and lo != hi:
                growth[name] = pts[hi] / pts[lo]
        m["step_cost_growth_longest_vs_shortest_context"] = growth
    return m


def plot(rows: list[dict], sweep_rows: list[dict], path: Path) -> Path:
    import matplotlib  # lazy (not ours, slow to import): only the figure needs it

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4.2))
    names = [r["drafter"] for r in rows]
    y = np.arange(len(rows))
    ax1.barh(y - 0.27, [r["ns_per_token"] for r in rows], 0.27, label="append, bulk (ns/token)")
    ax1.barh(y, [r["ns_per_token_stream"] for r in rows], 0.27, label="append, 1 per call (ns/token)")
    ax1.barh(y + 0.27, [max(r["ns_per_draft"], 1e-3) for r in rows], 0.27, label="draft k (ns/draft)")
    ax1.set_yticks(y, names)
    ax1.set_xscale("log")
    ax1.invert_yaxis()
    ax1.set_xlabel("nanoseconds (log)")
    ax1.set_title("Trace replay: cost per token and per draft")
    ax1.legend(fontsize=8)
    for name in names:
        pts = sorted((r["context_tokens"], r["ns_per_step"]) for r in sweep_rows if r["drafter"] == name)
        if pts:
            ax2.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=name)
    ax2.set_xscale("log", base=2)
    ax2.set_yscale("log")
    ax2.set_xlabel("context length (tokens)")
    ax2.set_ylabel("ns per decode step (append 1 + draft k)")
    ax2.set_title("Per-step cost versus context length")
    ax2.grid(True, which="both", alpha=0.3)
    ax2.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def print_table(result: dict) -> None:
    t = Table(title=f"Drafters (k={result['config']['k']})")
    for col in ("drafter", "tokens", "ns/token (bulk)", "ns/token (1 per call)", "ns/draft", "bytes/token", "policy path"):
        t.add_column(col, justify="right" if col != "drafter" else "left")
    for r in result["tables"]["replay"]:
        bpt = r["bytes_per_token"]
        t.add_row(r["drafter"], f"{r['tokens']:,}", f"{r['ns_per_token']:.0f}", f"{r['ns_per_token_stream']:.0f}",
                  f"{r['ns_per_draft']:.0f}", f"{bpt:.1f}" if bpt else "-", r.get("policy_path") or "-")
    s = Table(title="Per-step cost (ns) versus context length")
    lengths = sorted({r["context_tokens"] for r in result["tables"]["context_sweep"]})
    s.add_column("drafter")
    for n in lengths:
        s.add_column(f"{n:,}", justify="right")
    for name in dict.fromkeys(r["drafter"] for r in result["tables"]["context_sweep"]):
        pts = {r["context_tokens"]: r["ns_per_step"] for r in result["tables"]["context_sweep"] if r["drafter"] == name}
        s.add_row(name, *[f"{pts[n]:,.0f}" if n in pts else "-" for n in lengths])
    console = Console()
    console.print(t)
    console.print(s)
    m = result["metrics"]
    for key, val in m.items():
        if key.startswith(("append_speedup", "append_stream_speedup", "draft_speedup")) and val:
            console.print(f"{key}: {val:.0f}x")
    if m.get("evidence_ns_per_draft") is not None:
        line = (f"evidence policy ('sam', {m.get('evidence_policy_path') or '?'} path): "
                f"{m['evidence_ns_per_draft']:.0f} ns/draft, {m.get('evidence_bytes_per_token') or 0:.1f} bytes/token")
        if m.get("evidence_draft_cost_vs_fixed_lookup"):
            line += f"; {m['evidence_draft_cost_vs_fixed_lookup']:.2f}x the fixed lookup's ns/draft"
        if m.get("evidence_draft_speedup_vs_python_policy"):
            line += (f"; {m['evidence_draft_speedup_vs_python_policy']:.1f}x faster than the Python policy "
                     f"({m['evidence_python_ns_per_draft']:.0f} ns/draft, same run)")
        console.print(line)
    for name, reason in result.get("unavailable_drafters", {}).items():
        console.print(f"[yellow]not run: {name}: {reason}[/yellow]")


def _int_list(ctx, param, value: str) -> list[int]:
    try:
        out = [int(v) for v in value.split(",") if v.strip()]
    except ValueError:
        raise click.BadParameter(f"{value!r}: give comma-separated integers") from None
    if any(v < 2 for v in out):
        raise click.BadParameter(f"{value!r}: context lengths must be >= 2")
    return out


# --- the suite contract: options -> DraftersRun -> the run ------------------------------------

OUTPUT_PARAMS = ("output", "json_out")   # where results go: execute's keywords, not settings


@dataclass(frozen=True)
class DraftersRun:
    """What build_config returns: the measured settings (result.json records exactly these)
    and the display option that is not one of them."""
    config: DraftersConfig
    progress: bool


def build_config(*, traces, tokenizer, data_dir, drafters, k, max_tokens, sweep, sweep_steps, repeats,
                 chat_template, on_error, no_progress) -> DraftersRun:
    """The command's options (click's values; the click options hold the defaults), checked.
    Without --traces / --tokenizer, the shared data directory's; a directory means its *.jsonl."""
    if not traces or not tokenizer:
        root = resolve_data_dir(data_dir)
        traces = traces or tuple(str(p) for p in find_traces(root))
        tokenizer = tokenizer or str(root / "tokenizers" / "qwen3")
    files = []
    for t in traces:
        p = Path(t)
        files.extend(str(f) for f in (sorted(p.glob("*.jsonl")) if p.is_dir() else [p]))
    cfg = DraftersConfig(traces=files, tokenizer=str(tokenizer), drafters=[d.strip() for d in drafters.split(",") if d.strip()],
                         k=k, max_tokens=max_tokens, sweep=sweep, sweep_steps=sweep_steps, repeats=repeats,
                         chat_template=chat_template, on_error=on_error)
    cfg.check()
    return DraftersRun(cfg, not no_progress)


def execute(job: DraftersRun, *, output, resume=None, json_path=None) -> int:
    """Run the benchmark, print the tables (not when the JSON goes to stdout), write the run
    directory and `json_path`. Returns the exit code (0: the benchmark has no gate)."""
    if resume is not None:
        raise UserError(f"--resume {resume}: `samspec-bench drafters` has no resume; start a new run")
    result, path = run(job.config, output, progress=job.progress)
    if json_path != "-":
        print_table(result)
        click.echo(f"result: {path / 'result.json'}")
    emit_json(result, json_path)
    return 0


@click.command("drafters")
@click.option("--traces", "traces", multiple=True, type=click.Path(),
              help="Trace JSONL file or directory (repeatable). Default: <data dir>/traces/*.jsonl.")
@click.option("--tokenizer", type=click.Path(), help="Tokenizer directory. Default: <data dir>/tokenizers/qwen3.")
@click.option("--data-dir", type=click.Path(), help="Shared data directory (default: SAMSPEC_DATA_DIR or ../shared/data).")
@click.option("--drafters", default=",".join(DEFAULT_DRAFTERS), show_default=True,
              help="Comma-separated drafters to run (unavailable ones are reported and skipped).")
@click.option("-k", "--k", "k", default=8, show_default=True, type=int, help="Draft tokens per step.")
@click.option("--max-tokens", default=200_000, show_default=True, type=int,
              help="Tokens replayed per drafter (an equal share from each trace file).")
@click.option("--sweep", default="1024,32768,262144", show_default=True, callback=_int_list,
              help="Context lengths for the per-step cost sweep.")
@click.option("--sweep-steps", default=1000, show_default=True, type=int, help="Decode steps timed per context length.")
@click.option("--repeats", default=3, show_default=True, type=int,
              help="Timed repeats, taken round the drafters; each keeps its fastest.")
@click.option("--chat-template", type=click.Choice(["auto", "always", "never"]), default="auto", show_default=True)
@click.option("--on-error", type=click.Choice(["stop", "skip"]), default="stop", show_default=True,
              help="A malformed trace line: stop with its file and line, or skip it (counted in the result).")
@click.option("--output", default="results", show_default=True, type=click.Path(), help="Results root directory.")
@click.option("--json", "json_out", type=click.Path(), help="Also write the result JSON here ('-' for stdout).")
@click.option("--no-progress", is_flag=True, help="No progress bars.")
def command(traces, tokenizer, data_dir, drafters, k, max_tokens, sweep, sweep_steps, repeats, chat_template,
            on_error, output, json_out, no_progress):
    """Speed and memory of every drafter on real traces, and per-step cost versus context length."""
    params = {name: v for name, v in click.get_current_context().params.items() if name not in OUTPUT_PARAMS}
    code = execute(build_config(**params), output=output, json_path=json_out)
    if code:
        sys.exit(code)
