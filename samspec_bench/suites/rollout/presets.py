"""Published rollout configurations as `rollout --preset NAME`, with the figures their authors
published, so that a run prints its prediction beside them: the seed's three (`seed-*`) and
HistoSpec's (`histospec-qwen3-14b`, RhymeRL's setting, below). Nothing here is fitted to the
published figures: they are the check.

Source of every value (the seed: hicann/cann-recipes-train, docs/llm_rl/sam_decoding.md
section 3.2, commit 595fb9e5; its training scripts llm_rl/qwen3/internal/
train_dapo_qwen3_{32b_32die,235b_128die}_true_weight.sh; summarised in ../shared/FACTS.md):
Ascend 910C, eager mode, DAPO-Math-17k, max response 34,816, SAM threshold 8 and k 3
unless noted. Responses per prompt: 16, DAPO's default and what the seed's scripts set
(`actor_rollout_ref.rollout.n=16`). max_num_batched_tokens: the scripts' max prompt + max
response = 2048 + 34816 (the customer's run is not published: the same value assumed). DP =
dies / TP (the scripts' INFER_DP = NODES * 16 / INFER_TP).

The published "gain" is off / on - 1 (3904.22 / 3548.62 = 1.1002: "10.02 %"), that is the
speedup minus one, not the time saved (1 - on / off = 9.11 %); predictions are put in the same
terms. "Per-round" is the seed's "average single-round inference time of each DP domain"
(DAPO may generate several rounds per step): compared with the mean over instances of each
instance's time. "Per-step inference" is a training step's whole rollout (its rounds, each
ending at the slowest instance): compared with the simulated rollout's time (slowest
instance) of ONE round. The long tail ("requests being processed at or below the
speculation threshold"): 1.35x, compared with the pooled tail speedup.

HistoSpec (RhymeRL, arXiv 2508.18588; ../shared/FACTS.md): Qwen3-14B trained with DAPO, max
response 8K (8192), 256 prompts x 16 responses, 32 H100, rollout up to 2.1x faster with its
history drafts. What the paper does not say here is ASSUMED and printed as such: TP 2 (DP
16), verl's rollout defaults (max_num_seqs 1024, max_num_batched_tokens 8192, CUDA graphs),
DAPO's max prompt 2048, and the lengths (HISTOSPEC_LENGTH_EVIDENCE). Its arm is the `histospec`
strategy (sam/strategies/histospec.py) drafting from the traces' earlier responses; "up to
2.1x" is the paper's best case, compared with the modelled rollout speed-up's range.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from samspec_bench.errors import UserError
from samspec_bench.sam.strategies import parse_strategy, switch_threshold
from samspec_bench.suites.rollout.spread import fmt, mapped, matched, of

SEED_SOURCE = ("hicann/cann-recipes-train docs/llm_rl/sam_decoding.md (section 3.2, commit 595fb9e5) and "
               "llm_rl/qwen3/internal/train_dapo_qwen3_*_true_weight.sh; ../shared/FACTS.md")

# The length assumption shared by the presets (an INPUT, printed with every run; see sensitivity.py)
DEFAULT_LENGTH_DIST = "lognormal:7400:0.9"
LENGTH_EVIDENCE = (
    "ASSUMPTION. The seed's own figure (sam_decoding.md section 2.3, figures/qwen3_figures/image40.png: Qwen3-32B, "
    "DAPO on DAPO-Math-17k, max response 34,816) shows mean response lengths of about 8.5k-12.9k tokens over the "
    "first 20 training steps (about 10.3k on average, read off the plot). No per-response distribution is "
    "published: a lognormal with median 7,400 and sigma 0.9, clipped at 34,816, has that mean (about 10.3k) and "
    "puts about 4 % of responses at the maximum. The sigma (spread) is not backed by a published figure; the "
    "sensitivity table varies the median and the share truncated at the maximum.")


HISTOSPEC_SOURCE = ("RhymeRL / HistoSpec, arXiv 2508.18588 (verl recipe PR 4535), as summarised in "
                    "../shared/FACTS.md")
HISTOSPEC_LENGTH_DIST = "lognormal:3500:0.6"
HISTOSPEC_LENGTH_EVIDENCE = (
    "ASSUMPTION. No per-response length distribution of the HistoSpec run is published here: a lognormal with "
    "median 3,500 and sigma 0.6, clipped at 8,192, puts about 8 % of responses at the maximum (DAPO's overlong "
    "responses at an 8K limit); neither the median nor the spread is backed by a published figure, and the "
    "sensitivity table varies both.")


@dataclass(frozen=True)
class Preset:
    name: str
    model: str                 # catalogue id for the step model
    hardware: str
    mode: str                  # eager | graph
    prompts: int               # gen batch (prompts per rollout round)
    group_size: int            # responses per prompt (GRPO n)
    max_num_seqs: int
    tp: int
    dies: int
    threshold: int
    k: int
    max_response_len: int = 34816
    max_num_batched_tokens: int = 2048 + 34816
    train_batch: int | None = None
    published: dict[str, Any] = field(default_factory=dict)
    notes: tuple[str, ...] = ()
    source: str = SEED_SOURCE          # where the configuration and the figures come from
    strategies: tuple[str, ...] = ()   # named strategy arms (sam/strategies); none: the threshold arm
    sources: str = "own"               # the source arms' draft sources
    length_dist: str = DEFAULT_LENGTH_DIST
    length_evidence: str = LENGTH_EVIDENCE

    @property
    def dp(self) -> int:
        return self.dies // self.tp

    @property
    def step_model(self) -> str:
        return f"roofline:hardware={self.hardware},model={self.model},tp={self.tp},mode={self.mode}"

    def config_values(self) -> dict[str, Any]:
        """The RolloutConfig fields this preset fills (explicit options override them)."""
        return {"model": self.model, "prompts": self.prompts, "group_size": self.group_size,
                "max_num_seqs": self.max_num_seqs, "max_num_batched_tokens": self.max_num_batched_tokens,
                "max_response_len": self.max_response_len, "thresholds": [self.threshold], "ks": [self.k],
                "arms": ["off"] if self.strategies else ["off", "threshold"], "dp": self.dp, "dp_shard": "group",
                "sources": self.sources, "strategies": list(self.strategies), "length_dist": self.length_dist,
                "step_model": self.step_model}

    def overridden(self, cfg: Any) -> dict[str, dict[str, Any]]:
        """The settings this preset fills that the run's options changed (a RolloutConfig's fields,
        as config_values names them): {field: {"ran": the run's value, "preset": the preset's}}.
        The header prints what ran, the published setting beside it."""
        return {name: {"ran": getattr(cfg, name), "preset": value} for name, value in self.config_values().items()
                if getattr(cfg, name, value) != value}

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "model": self.model, "hardware": self.hardware, "mode": self.mode,
                "prompts": self.prompts, "group_size": self.group_size, "max_num_seqs": self.max_num_seqs,
                "tp": self.tp, "dies": self.dies, "dp": self.dp, "threshold": self.threshold, "k": self.k,
                "max_response_len": self.max_response_len, "max_num_batched_tokens": self.max_num_batched_tokens,
                "train_batch": self.train_batch, "step_model": self.step_model, "source": self.source,
                "strategies": list(self.strategies), "notes": list(self.notes)}


def _timing(off: float | None, on: float | None, gain_pct: float) -> dict[str, Any]:
    return {"off_s": off, "on_s": on, "gain_pct": gain_pct}


TAIL_SPEEDUP = 1.35   # sam_decoding.md section 3.2.4: the long-tail phase (running <= threshold) vs no speculation

PRESETS: dict[str, Preset] = {p.name: p for p in (
    Preset("seed-qwen3-32b", "Qwen/Qwen3-32B", "910C", "eager", prompts=96, group_size=16, max_num_seqs=128,
           tp=8, dies=32, threshold=8, k=3, train_batch=32,
           published={"per_round_inference": _timing(3904.22, 3548.62, 10.02),
                      "per_step_inference": _timing(4159.06, 3793.29, 9.64),
                      "step_total": _timing(4730.86, 4374.99, 8.13),
                      "tail_speedup": TAIL_SPEEDUP,
                      # read off the seed's figure image42.png (per-step inference split, about +-50 s)
                      "tail_phase_from_figure_s": {"off": {"head": 2730, "tail": 1430},
                                                   "on": {"head": 2730, "tail": 1065}}}),
    Preset("seed-qwen3-235b", "Qwen/Qwen3-235B-A22B", "910C", "eager", prompts=128, group_size=16, max_num_seqs=64,
           tp=4, dies=128, threshold=8, k=3, train_batch=128,
           published={"per_round_inference": _timing(7102.92, 6467.52, 9.82),
                      "per_step_inference": _timing(14287.54, 12811.98, 11.52),
                      "step_total": _timing(15441.45, 13960.98, 10.60),
                      "tail_speedup": TAIL_SPEEDUP},
           notes=("per-round times from sam_decoding.md section 3.2.2 (FACTS.md gives the -9.82 % only)",)),
    Preset("seed-customer", "Qwen/Qwen3-32B", "910C", "eager", prompts=1536, group_size=16, max_num_seqs=256,
           tp=8, dies=128, threshold=4, k=4, train_batch=512,
           published={"per_step_inference": _timing(9094, 8223, 10.59),
                      "step_total": _timing(11870, 11000, 7.91),
                      "tail_speedup": TAIL_SPEEDUP},
           notes=("a customer's run: responses per prompt and max_num_batched_tokens are not published "
                  "(16 and 2048 + 34816 assumed, as in the seed's own scripts)",)),
    Preset("histospec-qwen3-14b", "Qwen/Qwen3-14B", "H100", "graph", prompts=256, group_size=16, max_num_seqs=1024,
           tp=2, dies=32, threshold=8, k=16, max_response_len=8192, max_num_batched_tokens=8192,
           published={"rollout_speedup_up_to": 2.1}, source=HISTOSPEC_SOURCE, strategies=("histospec",),
           length_dist=HISTOSPEC_LENGTH_DIST, length_evidence=HISTOSPEC_LENGTH_EVIDENCE,
           notes=("published: Qwen3-14B, DAPO, max response 8K, 256 prompts x 16 responses, 32 H100, up to 2.1x "
                  "rollout; ASSUMED: TP 2 (DP 16), verl's rollout defaults max_num_seqs 1024 and "
                  "max_num_batched_tokens 8192, CUDA graphs, the lengths",
                  "the tail threshold (8) only splits head and tail: HistoSpec speculates at every batch size")),
)}


def get_preset(name: str) -> Preset:
    if name not in PRESETS:
        raise UserError(f"--preset {name!r}: use one of {', '.join(PRESETS)}")
    return PRESETS[name]


def always_on_notes(cfg: Any) -> list[str]:
    """A threshold the user did not write (a preset's, a strategy's own, the default 4) at or
    above --max-num-seqs: no step runs more requests, so the switch never turns SAM off and the
    arm drafts every step. Said, not refused (a written one is refused by build_config)."""
    whose = f"preset {cfg.preset}'s" if cfg.preset else "the default"
    found = [(t, f"{whose} threshold", f"threshold<={t}") for t in (cfg.thresholds if "threshold" in cfg.arms else [])]
    for spec in cfg.strategies:
        t = switch_threshold(parse_strategy(spec).switch)
        found.append((t, f"strategy {spec}'s threshold", spec))
    return [f"{who} {t} >= --max-num-seqs {cfg.max_num_seqs}: the switch never turns SAM off; the arm {arm} drafts "
            f"every step (as the always arm does); give --max-num-seqs above {t} for a switch that turns off"
            for t, who, arm in found if t is not None and t >= cfg.max_num_seqs]


def comparison(preset: Preset, arm: dict[str, Any], label: str) -> dict[str, Any]:
    """The prediction for `arm` (a speculating arm's metrics, sharded or not, with its `spread`
    over the draws) beside the preset's published figures: rows of {figure, published, modelled
    (the median), min, max, draws, matched, gap, how}. Gains in the seed's terms (off / on - 1,
    %). matched: the published figure lies inside [min, max]; gap: from the published figure to
    the range's nearest end (0 when matched), modelled - published (percentage points, seconds,
    or x for the tail speedup)."""
    pub = preset.published
    rows = []
    mean_key = "speedup_mean_instance" if of(arm, "speedup_mean_instance") else "speedup_overall"

    def row(figure, published, sp, how, unit):
        ok, gap = matched(published, sp)
        rows.append({"figure": figure, "published": published, "modelled": (sp or {}).get("median"),
                     "min": (sp or {}).get("min"), "max": (sp or {}).get("max"), "draws": (sp or {}).get("n"),
                     "values": (sp or {}).get("values"), "matched": ok, "gap": gap, "unit": unit, "modelled_as": how})

    def gain(key):
        return mapped(of(arm, key), lambda x: 100.0 * (x - 1.0))

    if "per_round_inference" in pub:
        row("per-DP-round inference gain", pub["per_round_inference"]["gain_pct"], gain(mean_key),
            "mean over instances of each instance's time, off / on - 1", "%")
    if "per_step_inference" in pub:
        row("per-step inference gain", pub["per_step_inference"]["gain_pct"], gain("speedup_overall"),
            "one round's rollout time (slowest instance), off / on - 1", "%")
    if "rollout_speedup_up_to" in pub:
        row("rollout speed-up (published: up to)", pub["rollout_speedup_up_to"], of(arm, "speedup_overall"),
            "one round's rollout time (slowest instance), off time / on time; the published figure is the "
            "paper's best case", "x")
    row("long-tail speedup", pub.get("tail_speedup"), of(arm, "speedup_tail"),
        "tail steps (nobody waiting, running <= threshold) of every instance, off time / on time", "x")
    if "per_round_inference" in pub:
        row("per-round inference time off", pub["per_round_inference"]["off_s"], of(arm, "baseline_mean_instance_s"),
            "mean instance time of the off arm (seconds of the step model)", "s")
    fig = pub.get("tail_phase_from_figure_s")
    if fig:
        row("tail share of the off rollout", 100.0 * fig["off"]["tail"] / (fig["off"]["tail"] + fig["off"]["head"]),
            mapped(of(arm, "baseline_tail_share"), lambda x: 100.0 * x),
            "pooled tail time / instance time, off arm (published: read off the seed's figure)", "%")
    return {"preset": preset.name, "arm": label, "rows": rows,
            "labels": {"published": "measured by its authors on their cluster (" + preset.source + ")",
                       "modelled": "this simulation: median [min, max] over its draws of the lengths; step times "
                                   "from the step model named in step_model, lengths and acceptance from the printed "
                                   "inputs"},
            "matched_definition": "a published figure is matched when it lies inside the modelled [min, max] over the "
                                  "draws; otherwise gap = nearest end - published",
            "gain_definition": "off / on - 1, in % (the seed's '收益'; time saved is 1 - on / off)"}


def comparison_lines(block: dict[str, Any]) -> list[str]:
    """The comparison as terminal lines: each modelled figure as median [min, max] over the draws,
    'matched' when the published figure lies in that range, else the gap to its nearest end."""
    spec = {"x": ".2f", "s": ".1f", "%": "+.2f"}
    unit = {"x": "x", "s": " s", "%": " %"}

    def gap(r):
        if r["matched"] is None:
            return "n/a"
        if r["matched"]:
            return "matched"
        return f"{r['gap']:+.2f}x" if r["unit"] == "x" else f"{r['gap']:+.1f} s" if r["unit"] == "s" else \
            f"{r['gap']:+.2f} pp"

    draws = max((r.get("draws") or 1 for r in block["rows"]), default=1)
    out = [f"prediction vs published ({block['preset']}, arm {block['arm']}; gain = off / on - 1; MODELLED = median "
           f"[min, max] over {draws} draw{'s' if draws > 1 else ''}):",
           f"  {'figure':32s} {'MODELLED':>30s} {'PUBLISHED':>11s} {'matched / gap to range':>24s}"]
    for r in block["rows"]:
        sp = None if r["modelled"] is None else {"median": r["modelled"], "min": r["min"], "max": r["max"],
                                                 "n": r.get("draws") or 1}
        sf = spec[r["unit"]] if "gain" in r["figure"] or r["unit"] != "%" else ".2f"   # a share is not signed
        pub = "n/a" if r["published"] is None else f"{r['published']:{sf}}{unit[r['unit']]}"
        out.append(f"  {r['figure']:32s} {fmt(sp, sf, unit[r['unit']]):>30s} {pub:>11s} {gap(r):>24s}")
    out.append("  modelled = this simulation (step model above); published = measured by its authors on their "
               "cluster; matched = inside the modelled range")
    return out
