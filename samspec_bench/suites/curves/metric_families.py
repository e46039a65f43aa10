"""The metrics `curves` compares: families with verl's names and their older aliases, the
default equivalence margin of each, and the resolution of a family to one tag per run.

| family          | metric        | tags (first found wins)                              | unit     | default margin |
|-----------------|---------------|------------------------------------------------------|----------|----------------|
| reward          | reward        | critic/score/mean, critic/rewards/mean               | score    | ±0.05          |
| response_length | length        | response_length/mean                                 | tokens   | ±10% of A      |
|                 | clip_ratio    | response_length/clip_ratio                           | fraction | ±0.02          |
| entropy         | entropy       | actor/entropy, actor/entropy_loss (older verl)       | nats     | ±10% of A      |
| validation      | val/<source>  | val-core/<source>/<var>/mean@N, val-aux/... (when    | score    | ±0.03          |
|                 |               | val-core is cut or absent), val/test_score/<source>  |          |                |
| kl              | kl            | actor/kl_loss, critic/kl, actor/token_kl/mean        | nats     | ±20% of A      |
| speed           | gen_time      | timing_s/gen, timing/gen (older verl)                | s        | ratio B/A      |
|                 | gen_time_per_token | timing_per_token_ms/gen                         | ms/token | ratio B/A      |
|                 | step_time     | timing_s/step, timing/step, perf/time_per_step       | s        | ratio B/A      |
|                 | slowest_sample_time | timing_s/agent_loop/slowest/generate_sequences | s        | ratio B/A      |
|                 |               | (verl's agent loop: the step's slowest sample)       |          |                |
|                 | throughput    | perf/throughput (per GPU: compared as total, see     | tokens/s | ratio B/A      |
|                 |               | throughput.py)                                       | /GPU     |                |

What is shown is verl's tag, as the log has it (`timing_s/gen`; `timing/gen | timing_s/gen`
where two runs name it differently); the metric name of this table is secondary, and the key of
result.json's comparisons. `unit_of` gives the unit of any verl tag by its prefix.

Why these margins: rewards and validation scores are accuracies on a 0..1 (or -1..1) scale,
where a few points is what a user would call a change in learning (0.05 on the training
reward, which is noisier and bigger per step than a validation score, 0.03 on validation);
length, entropy and KL change by multiples during training, so their margins are relative to
the baseline's mean over the compared steps (10%, and 20% for KL: it is small and noisy).
Every margin is overridable (`--margin reward=0.02`, `--margin entropy=5%`, or a tag); speed
metrics are ratios with no margin, and a --margin naming one is refused.

Validation: per data source one variable is compared (a source only one run validates on is
listed as absent in the others), the first that every run logged at two or more steps, in the
order acc, reward, score, then others; a run's val-core tag is preferred to its val-aux one.
mean@N with different N in two runs (16 vs 32 samples per problem) estimate the same mean and
are compared, with both tags shown.

`--metric TAG` (a tag or a glob like 'actor/*') adds learning metrics; `--speed-metric TAG` adds
speed ratios. A learning metric given by tag has a ±10% margin unless --margin names it.
"""

from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass, field

from samspec_bench.errors import UserError, nearest
from samspec_bench.evals.curve_stats import Margin
from samspec_bench.evals.training_logs import TrainingRun


@dataclass(frozen=True)
class MetricSpec:
    name: str
    family: str
    aliases: tuple[str, ...]
    unit: str
    margin: Margin | None          # None for speed metrics (ratios)
    kind: str = "learning"         # learning | speed
    higher_is_faster: bool = False
    what: str = ""


SPECS: tuple[MetricSpec, ...] = (
    MetricSpec("reward", "reward", ("critic/score/mean", "critic/rewards/mean"), "score", Margin(0.05),
               what="mean sequence score of the training batch"),
    MetricSpec("length", "response_length", ("response_length/mean",), "tokens", Margin(0.10, True),
               what="mean response length"),
    MetricSpec("clip_ratio", "response_length", ("response_length/clip_ratio",), "fraction", Margin(0.02),
               what="fraction of responses cut at the length limit"),
    MetricSpec("entropy", "entropy", ("actor/entropy", "actor/entropy_loss"), "nats", Margin(0.10, True),
               what="policy entropy of the generated tokens"),
    MetricSpec("kl", "kl", ("actor/kl_loss", "critic/kl", "actor/token_kl/mean"), "nats", Margin(0.20, True),
               what="KL to the reference policy"),
    MetricSpec("gen_time", "speed", ("timing_s/gen", "timing/gen"), "s", None, "speed",
               what="rollout generation time per step (verl's timer)"),
    MetricSpec("gen_time_per_token", "speed", ("timing_per_token_ms/gen",), "ms/token", None, "speed",
               what="rollout generation time per token (verl's timer / tokens): not confounded by response length"),
    MetricSpec("step_time", "speed", ("timing_s/step", "timing/step", "perf/time_per_step"), "s", None, "speed",
               what="training step time (verl's timer)"),
    MetricSpec("slowest_sample_time", "speed", ("timing_s/agent_loop/slowest/generate_sequences",
                                                "agent_loop/slowest/generate_sequences"), "s", None, "speed",
               what="the step's slowest sample's generation time (verl's agent loop): the long tail the rollout "
                    "waits on"),
    MetricSpec("throughput", "speed", ("perf/throughput",), "tokens/s/GPU", None, "speed", higher_is_faster=True,
               what="tokens per second per GPU (verl's perf/throughput)"),
)
# verl's tag prefixes and their units (verl/trainer/ppo/metric_utils.py), longest first
UNIT_PREFIXES = (("timing_per_token_ms/", "ms/token"), ("timing_s/", "s"), ("timing/", "s"),
                 ("perf/time_per_step", "s"), ("perf/throughput", "tokens/s/GPU"), ("perf/total_num_tokens", "tokens"),
                 ("perf/mfu/", "fraction"), ("perf/max_memory", "GB"), ("perf/cpu_memory", "GB"),
                 ("response_length/clip_ratio", "fraction"), ("prompt_length/clip_ratio", "fraction"),
                 ("response_length/", "tokens"), ("prompt_length/", "tokens"), ("global_seqlen/", "tokens"),
                 ("actor/entropy", "nats"), ("actor/pg_clipfrac", "fraction"), ("actor/lr", "lr"))


def unit_of(tag: str) -> str:
    """The unit of a verl tag by its prefix; '' for one this table does not know."""
    return next((u for pre, u in UNIT_PREFIXES if tag.startswith(pre)), "")


def tag_text(tag_a: str | None, tag_b: str | None) -> str:
    """A metric as the logs name it: one tag, or 'A's tag | B's tag' where they differ."""
    if not tag_a or not tag_b or tag_a == tag_b:
        return tag_a or tag_b or ""
    return f"{tag_a} | {tag_b}"


VALIDATION_MARGIN = Margin(0.03)
EXTRA_MARGIN = Margin(0.10, True)
FAMILIES = ("reward", "response_length", "entropy", "validation", "kl", "speed")
VAL_VARS = ("acc", "reward", "score")
_VAL = re.compile(r"^val-(core|aux)/(.+)/([^/]+)/mean@(\d+)$")
_VAL_OLD = re.compile(r"^val/test_score/(.+)$")
MIN_POINTS = 2


@dataclass
class Resolved:
    """One metric compared across the runs: the tag each run provides (None: absent)."""
    spec: MetricSpec
    tags: dict[str, str | None] = field(default_factory=dict)   # run label -> tag

    @property
    def name(self) -> str:
        return self.spec.name


def _has(run: TrainingRun, tag: str) -> bool:
    """A tag a run logged: 2+ finite steps, or any non-finite one (a diverged metric is compared,
    not left out)."""
    s = run.series.get(tag)
    return (s is not None and len(s) >= MIN_POINTS) or tag in run.non_finite


def _alias_in(run: TrainingRun, aliases: tuple[str, ...]) -> str | None:
    """The first alias a run logged; else the first logged with its `/` as `_` (TensorBoard's CSV
    download names its one metric run-<run>-tag-critic_score_mean.csv)."""
    return next((t for t in (*aliases, *(a.replace("/", "_") for a in aliases)) if _has(run, t)), None)


def is_validation_tag(tag: str) -> bool:
    """A validation tag the validation family reads (val-core/..., val-aux/..., val/test_score/...)."""
    return bool(_VAL.match(tag) or _VAL_OLD.match(tag))


def _val_candidates(run: TrainingRun) -> dict[str, dict[str, list[tuple[int, int, str]]]]:
    """source -> var -> [(tier, -N, tag)] for the validation tags of a run (tier 0 core, 1 aux, 2 old)."""
    out: dict[str, dict[str, list]] = {}
    for tag in run.series:
        if not _has(run, tag):
            continue
        m = _VAL.match(tag)
        if m:
            tier = 0 if m.group(1) == "core" else 1
            out.setdefault(m.group(2), {}).setdefault(m.group(3), []).append((tier, -int(m.group(4)), tag))
            continue
        m = _VAL_OLD.match(tag)
        if m:
            out.setdefault(m.group(1), {}).setdefault("reward", []).append((2, 0, tag))
    return out


def resolve_validation(runs: list[TrainingRun], margin: Margin) -> list[Resolved]:
    cands = [_val_candidates(r) for r in runs]
    sources = sorted({s for c in cands for s in c})
    out = []
    for src in sources:
        vars_ = sorted({v for c in cands for v in c.get(src, {})},
                       key=lambda v: (min((t[0] for c in cands for t in c.get(src, {}).get(v, [])), default=9),
                                      VAL_VARS.index(v) if v in VAL_VARS else len(VAL_VARS), v))
        # one run alone validating on a source: listed, absent in the others (not passed over in silence)
        chosen = next((v for v in vars_ if sum(bool(c.get(src, {}).get(v)) for c in cands) >= 2), vars_[0])
        spec = MetricSpec(f"val/{src}" if chosen in ("acc", "reward") else f"val/{src}/{chosen}", "validation",
                          (), "score", margin, what=f"validation {chosen} on {src} (mean over samples)")
        res = Resolved(spec)
        for r, c in zip(runs, cands):
            opts = sorted(c.get(src, {}).get(chosen, []))
            res.tags[r.label] = opts[0][2] if opts else None
        out.append(res)
    return out


def resolve(runs: list[TrainingRun], families: list[str], margins: dict[str, Margin], extra: list[str],
            extra_speed: list[str]) -> list[Resolved]:
    """The requested metrics, each with its tag per run (None where a run lacks it); only
    metrics that at least one run has."""
    def margin_for(spec: MetricSpec) -> Margin | None:
        if spec.margin is None:
            return None
        for key in (spec.name, *spec.aliases, spec.family):
            if key in margins:
                return margins[key]
        return spec.margin

    out: list[Resolved] = []
    for spec in SPECS:
        if spec.family not in families:
            continue
        spec = MetricSpec(spec.name, spec.family, spec.aliases, spec.unit, margin_for(spec), spec.kind,
                          spec.higher_is_faster, spec.what)
        res = Resolved(spec, {r.label: _alias_in(r, spec.aliases) for r in runs})
        out.append(res)
    if "validation" in families:
        vm = margins.get("validation", VALIDATION_MARGIN)
        for res in resolve_validation(runs, vm):
            if res.name in margins:
                res.spec = MetricSpec(res.spec.name, "validation", (), "score", margins[res.name], what=res.spec.what)
            else:
                tag = next((t for t in res.tags.values() if t in margins), None)
                if tag:
                    res.spec = MetricSpec(res.spec.name, "validation", (), "score", margins[tag], what=res.spec.what)
            out.append(res)
    taken = {t for res in out for t in res.tags.values() if t}
    for kind, patterns in (("learning", extra), ("speed", extra_speed)):
        for pat in patterns:
            names = sorted({t for r in runs for t in _tags(r) if fnmatch.fnmatchcase(t, pat)}) \
                if any(ch in pat for ch in "*?[") else [pat]
            if not any(_has(r, t) for r in runs for t in names):
                every = sorted({t for r in runs for t in _tags(r)})
                raise UserError(f"--{'metric' if kind == 'learning' else 'speed-metric'} {pat!r}: matches no tag "
                                f"logged at 2+ steps by any run{nearest(pat, every)}; the runs log {len(every)} "
                                "tags (e.g. " + ", ".join(every[:4]) + ")")
            for tag in names:
                if tag in taken and kind == "learning":
                    continue
                spec = MetricSpec(tag, "extra" if kind == "learning" else "speed", (tag,), unit_of(tag),
                                  margins.get(tag, EXTRA_MARGIN) if kind == "learning" else None, kind,
                                  higher_is_faster=kind == "speed" and _rate_like(tag), what="given with --"
                                  + ("metric" if kind == "learning" else "speed-metric"))
                out.append(Resolved(spec, {r.label: tag if _has(r, tag) else None for r in runs}))
                taken.add(tag)
    return [r for r in out if any(r.tags.values())]


def _tags(run: TrainingRun) -> set[str]:
    return set(run.series) | set(run.non_finite)


def check_margin_names(margins: dict[str, Margin], metrics: list[Resolved], families: list[str],
                       typed: dict[str, str] | None = None) -> None:
    """Every --margin NAME names something compared with an equivalence test: a requested family
    that has one (not speed: its rows are ratios), a learning metric or one of its tags;
    otherwise a UserError echoing the argument (`typed`: name -> as typed) and listing the
    nearest or, for a speed family, metric or tag, the families that take margins."""
    margined = [f for f in families if f != "speed"]
    learning = [m for m in metrics if m.spec.kind == "learning"]
    used = set(margined) | {x for m in learning for x in (m.name, *m.spec.aliases, *m.tags.values()) if x}
    ratios = {x for m in metrics if m.spec.kind == "speed"
              for x in (m.name, m.spec.family, *m.spec.aliases, *m.tags.values()) if x} - used
    ratios |= {"speed", *(a for s in SPECS if s.kind == "speed" for a in (s.name, *s.aliases))} - used
    takes = ", ".join(margined) if margined else "none requested (--families)"
    for key in margins:
        if key in used:
            continue
        arg = (typed or {}).get(key) or f"{key}={margins[key].record()}"
        shown = arg if not any(ch in arg for ch in " \t'\"") else repr(arg)
        if key in ratios:
            what = "the speed family" if key == "speed" else f"{key} (a speed metric)"
            raise UserError(f"--margin {shown}: {what} is compared as a ratio B/A with an interval, not by an "
                            f"equivalence test, so no margin applies; margins are for the families {takes} (their "
                            "metrics and tags) and tags given with --metric")
        raise UserError(f"--margin {shown}: names no compared family, metric or tag{nearest(key, used)}; "
                        f"give a family that has a margin ({takes}), a metric or a tag compared with --metric")


def _rate_like(tag: str) -> bool:
    """A speed tag where higher is faster (throughput, tokens/s); timings are lower-is-faster."""
    t = tag.lower()
    return "throughput" in t or "per_s" in t or "tokens_per" in t or "/s" == t[-2:]


def requested_text(families: list[str], extra: list[str], extra_speed: list[str]) -> str:
    tags = [a for s in SPECS if s.family in families for a in s.aliases]
    if "validation" in families:
        tags.append("val-core/*/mean@N")
    return ", ".join(tags[:6] + (["..."] if len(tags) > 6 else []) + list(extra) + list(extra_speed))


def present_in(run: TrainingRun, metrics: list[Resolved]) -> bool:
    return any(m.tags.get(run.label) for m in metrics)
