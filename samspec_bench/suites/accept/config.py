"""The accept suite's configuration: what one run computes (`AcceptConfig`), the command's
options turned into it (`build_config`), the sweep of drafter configurations, and the
verify-cost ratio of the speedup estimate."""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from samspec_bench.bench.engines.replay import MAX_K, SOURCE_NAMES, DraftConfig
from samspec_bench.bench.engines.vllm.adapter import parse_engine_args
from samspec_bench.data import find_traces, resolve_data_dir
from samspec_bench.errors import UserError, int_at_least
from samspec_bench.models import BUILTIN_MODEL, resolve_model
from samspec_bench.sam.drafters import DRAFTERS

SUITE = "accept"
ENGINES = ("replay", "reference", "vllm")  # vllm: samspec_bench.bench.engines.vllm.adapter (needs vLLM installed)
DEFAULT_VERIFY_COST_RATIO = 1.0
VERIFY_COST_ASSUMPTION = ("assumed: a (k+1)-token verify step costs as much as a 1-token decode step "
                          "(memory-bound decode at small batch); an upper bound on the speedup. Pass "
                          "--verify-cost-ratio or --engine-profile with a measured value")
SENSITIVITY_RATIOS = (1.0, 1.1, 1.25, 1.5, 2.0)
MAX_WORKERS = 1024   # --workers: processes; more than any machine's cores is a typo

# Fields that define what a run computes: --resume refuses to continue with other values.
IDENTITY_FIELDS = ("engine", "traces", "tokenizer", "chat_template", "drafters", "num_spec_tokens", "sources",
                   "group_order", "corpus", "on_error", "limit_groups", "ngram_min", "ngram_max",
                   "sam_min_match", "model")
# How a run is shown, not what it computes: left out of result.json's "config".
NOT_RECORDED = ("progress",)


@dataclass
class AcceptConfig:
    traces: list[str]
    tokenizer: str
    engine: str = "replay"
    drafters: list[str] = field(default_factory=lambda: ["sam"])
    num_spec_tokens: list[int] = field(default_factory=lambda: [3])
    sources: list[str] = field(default_factory=lambda: ["own"])
    group_order: str = "concurrent"
    corpus: list[str] = field(default_factory=list)
    chat_template: str = "auto"
    bins: str = "log2:64:32768"
    position: str = "sequence"
    verify_cost_ratio: float | None = None
    engine_profile: str | None = None
    on_error: str = "stop"
    limit_groups: int | None = None
    workers: int = 0
    ngram_min: int = 2
    ngram_max: int = 5
    sam_min_match: int = 1
    model: str | None = None                                     # --engine reference/vllm: the model
    engine_args: dict[str, Any] = field(default_factory=dict)    # --engine vllm: vLLM engine arguments
    progress: bool = True                                        # show a progress bar (not recorded)

    def recorded(self) -> dict[str, Any]:
        """The configuration as result.json records it."""
        return {k: v for k, v in dataclasses.asdict(self).items() if k not in NOT_RECORDED}

    def identity(self) -> dict[str, Any]:
        """What --resume compares with the run it continues."""
        d = dataclasses.asdict(self)
        return {k: d[k] for k in IDENTITY_FIELDS}


def build_config(*, engine, model, engine_arg, traces, data_dir, tokenizer, chat_template, drafters, ks, sources,
                 group_order, corpus, bins, position, verify_cost_ratio, engine_profile, on_error, limit_groups,
                 workers, ngram_min, ngram_max, sam_min_match, progress) -> AcceptConfig:
    """The `accept` command's options (by their Python names, as click converts them) as a
    validated AcceptConfig. Defaults the traces and the tokenizer from the data directory
    (the model's own tokenizer for the model engines)."""
    if tokenizer is None and engine in ("reference", "vllm"):   # the model's own tokenizer
        tokenizer = str(resolve_model(model or BUILTIN_MODEL))
    if not traces or tokenizer is None:
        ddir = resolve_data_dir(data_dir)
        if not traces:
            traces = [str(p) for p in find_traces(ddir)]
        if tokenizer is None:
            tokenizer = str(Path(ddir) / "tokenizers" / "qwen3")
    if ngram_min < 1 or ngram_max < ngram_min:
        raise UserError(f"--ngram-min {ngram_min} --ngram-max {ngram_max}: need 1 <= min <= max")
    if sam_min_match < 1:
        raise UserError(f"--sam-min-match {sam_min_match}: must be >= 1")
    int_at_least(workers, "--workers", 0, MAX_WORKERS)   # 0: one per core
    int_at_least(limit_groups, "--limit-groups", 1, optional=True)
    cfg = AcceptConfig(
        traces=[str(t) for t in traces], tokenizer=str(tokenizer), engine=engine,
        drafters=parse_list(drafters, "--drafter"), num_spec_tokens=parse_ks(ks),
        sources=parse_list(sources, "--sources"), group_order=group_order, corpus=[str(c) for c in corpus],
        chat_template=chat_template, bins=bins, position=position, verify_cost_ratio=verify_cost_ratio,
        engine_profile=engine_profile, on_error=on_error, limit_groups=limit_groups, workers=workers,
        ngram_min=ngram_min, ngram_max=ngram_max, sam_min_match=sam_min_match, model=model,
        engine_args=parse_engine_args(engine_arg), progress=progress)
    for s in cfg.sources:
        parse_source(s)
    check_drafters(cfg.drafters)
    return cfg


# ---------- parsing and validation ----------

def parse_list(value: str, option: str) -> list[str]:
    items = [x.strip() for x in str(value).split(",") if x.strip()]
    if not items:
        raise UserError(f"{option} {value!r}: give at least one value (a comma list)")
    return list(dict.fromkeys(items))


def parse_ks(value: str | Sequence[int]) -> list[int]:
    raw = parse_list(value, "--num-spec-tokens") if isinstance(value, str) else [str(v) for v in value]
    ks = []
    for x in raw:
        try:
            k = int(x)
        except ValueError:
            raise UserError(f"--num-spec-tokens {x!r}: not an integer; give draft lengths like 1,3,5,8") from None
        if not 1 <= k <= MAX_K:
            raise UserError(f"--num-spec-tokens {k}: the number of draft tokens must be in 1..{MAX_K}")
        ks.append(k)
    return list(dict.fromkeys(ks))


def parse_source(spec: str) -> tuple[bool, bool]:
    """'own', 'group', 'corpus', 'group+corpus' (own is always included) -> (group, corpus)."""
    parts = [p.strip() for p in spec.split("+") if p.strip()]
    bad = [p for p in parts if p not in SOURCE_NAMES]
    if bad or not parts:
        raise UserError(f"--sources {spec!r}: use own, group, corpus or combinations joined by '+' "
                        "(e.g. own,group,group+corpus)")
    return "group" in parts, "corpus" in parts


def check_drafters(names: Sequence[str]) -> None:
    for n in names:
        if n not in DRAFTERS:
            raise UserError(f"--drafter {n!r}: unknown drafter; choose from {', '.join(DRAFTERS)}")


def build_configs(cfg: AcceptConfig) -> list[DraftConfig]:
    """The sweep: every drafter x k x source, as DraftConfigs (drafter options attached)."""
    check_drafters(cfg.drafters)
    ks = parse_ks(cfg.num_spec_tokens)
    out, seen = [], set()
    for name in cfg.drafters:
        opts: dict[str, Any] = {}
        if name == "ngram":
            opts = {"min_n": cfg.ngram_min, "max_n": cfg.ngram_max}
        elif name == "sam" and cfg.sam_min_match != 1:
            opts = {"l_threshold": cfg.sam_min_match}
        for k in ks:
            for src in cfg.sources:
                group, corpus = parse_source(src)
                try:
                    dc = DraftConfig(drafter=name, k=k, group=group, corpus=corpus, order=cfg.group_order,
                                     options=tuple(sorted(opts.items())))
                except ValueError as e:
                    raise UserError(f"--drafter/--num-spec-tokens/--sources: {e}") from None
                if dc.label not in seen:
                    seen.add(dc.label)
                    out.append(dc)
    return out


def expand_trace_paths(paths: Sequence[str | Path], option: str = "--traces") -> list[Path]:
    files: list[Path] = []
    for p in paths:
        p = Path(p).expanduser()
        if p.is_dir():
            found = sorted(p.glob("*.jsonl"))
            if not found:
                raise UserError(f"{option} {p}: the directory holds no *.jsonl trace files")
            files.extend(found)
        elif p.is_file():
            files.append(p)
        else:
            raise UserError(f"{option} {p}: no such file or directory; pass trace JSONL files or a directory")
    return list(dict.fromkeys(files))


def resolve_verify_cost(cfg: AcceptConfig, ks: Sequence[int]) -> dict[int, dict[str, Any]]:
    """The verify-cost ratio per k and where it came from."""
    if cfg.verify_cost_ratio is not None:
        if not cfg.verify_cost_ratio > 0 or not math.isfinite(cfg.verify_cost_ratio):
            raise UserError(f"--verify-cost-ratio {cfg.verify_cost_ratio}: must be a positive number")
        return {k: {"ratio": float(cfg.verify_cost_ratio), "source": "--verify-cost-ratio"} for k in ks}
    if cfg.engine_profile:
        path = Path(cfg.engine_profile)
        try:
            prof = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as e:
            raise UserError(f"--engine-profile {path}: cannot read it as JSON ({e}); pass a profile JSON "
                            "with 'verify_cost_ratio'") from None
        val = prof.get("verify_cost_ratio") if isinstance(prof, dict) else None
        out = {}
        for k in ks:
            r = val.get(str(k)) if isinstance(val, dict) else val
            if not isinstance(r, (int, float)) or isinstance(r, bool) or not r > 0:
                raise UserError(f"--engine-profile {path}: no positive 'verify_cost_ratio' for k={k} (give a number "
                                "or a mapping from k to a number), or pass --verify-cost-ratio")
            out[k] = {"ratio": float(r), "source": f"engine profile {path}"}
        return out
    return {k: {"ratio": DEFAULT_VERIFY_COST_RATIO, "source": "assumption", "assumption": VERIFY_COST_ASSUMPTION}
            for k in ks}
