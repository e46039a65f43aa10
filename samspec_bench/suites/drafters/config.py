"""The drafter benchmark's settings: the drafters it can measure, DraftersConfig (what
result.json records), and build_config (the suite contract's checked options)."""

from __future__ import annotations

from dataclasses import dataclass, field

from samspec_bench.bench.draft_config import MAX_K
from samspec_bench.data import check_data_dir, find_traces, resolve_data_dir
from samspec_bench.errors import UserError, comma_list, int_at_least
from samspec_bench.sam.drafters import DRAFTERS, SamDrafter, arctic_available, make_drafter
from samspec_bench.trace_formats import expand

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
        for option, value in (("--max-tokens", self.max_tokens), ("--sweep-steps", self.sweep_steps),
                              ("--repeats", self.repeats)):
            int_at_least(value, option, 1)
        if not self.drafters:
            raise UserError(f"--drafters {','.join(self.drafters)!r}: give at least one drafter, e.g. --drafters "
                            f"sam,ngram (choose from {', '.join(DEFAULT_DRAFTERS)})")
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


@dataclass(frozen=True)
class DraftersRun:
    """What build_config returns: the measured settings (result.json records exactly these)
    and the display option that is not one of them."""
    config: DraftersConfig
    progress: bool


def build_config(*, traces, tokenizer, data_dir, drafters, k, max_tokens, sweep, sweep_steps, repeats,
                 chat_template, on_error, no_progress) -> DraftersRun:
    """The command's options (click's values; the click options hold the defaults), checked.
    Without --traces / --tokenizer, the shared data directory's; a directory stands for its trace
    files as accept lists them (verl step files in step order, lm-eval samples in sub-folders)."""
    check_data_dir(data_dir)   # even where traces and tokenizer are given
    if not traces or not tokenizer:
        try:
            root = resolve_data_dir(data_dir)
        except UserError as e:   # name what the data directory stands in for
            missing = " and ".join(o for o, v in (("--traces", traces), ("--tokenizer", tokenizer)) if not v)
            raise UserError(f"{missing} not given, and {e} (or pass {missing})") from None
        traces = traces or tuple(str(p) for p in find_traces(root))
        tokenizer = tokenizer or str(root / "tokenizers" / "qwen3")
    files = [str(f) for t in traces for f, _ in expand(t)]
    # no drafter at all ('', ' , '): check() says to name one; else no empty item, none twice
    names = comma_list(drafters, "--drafters", "sam,ngram") if drafters.replace(",", "").strip() else []
    cfg = DraftersConfig(traces=files, tokenizer=str(tokenizer), drafters=names,
                         k=k, max_tokens=max_tokens, sweep=sweep, sweep_steps=sweep_steps, repeats=repeats,
                         chat_template=chat_template, on_error=on_error)
    cfg.check()
    return DraftersRun(cfg, not no_progress)
