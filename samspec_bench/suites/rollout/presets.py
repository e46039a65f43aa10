"""The seed's rollout configurations as `rollout --preset NAME`, with the figures it published,
so that a run prints its prediction beside them. Nothing here is fitted to the published
figures: they are the check.

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
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from samspec_bench.errors import UserError

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
                "arms": ["off", "threshold"], "dp": self.dp, "dp_shard": "group", "sources": "own",
                "length_dist": DEFAULT_LENGTH_DIST, "step_model": self.step_model}

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "model": self.model, "hardware": self.hardware, "mode": self.mode,
                "prompts": self.prompts, "group_size": self.group_size, "max_num_seqs": self.max_num_seqs,
                "tp": self.tp, "dies": self.dies, "dp": self.dp, "threshold": self.threshold, "k": self.k,
                "max_response_len": self.max_response_len, "max_num_batched_tokens": self.max_num_batched_tokens,
                "train_batch": self.train_batch, "step_model": self.step_model, "source": SEED_SOURCE,
                "notes": list(self.notes)}


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
)}


def get_preset(name: str) -> Preset:
    if name not in PRESETS:
        raise UserError(f"--preset {name!r}: use one of {', '.join(PRESETS)}")
    return PRESETS[name]


def _pct(speedup: float | None) -> float | None:
    return None if speedup is None else 100.0 * (speedup - 1.0)


def comparison(preset: Preset, arm: dict[str, Any], label: str) -> dict[str, Any]:
    """The prediction for `arm` (a speculating arm's metrics, sharded or not) beside the
    preset's published figures: rows of {figure, published, modelled, gap, how}. Gains in the
    seed's terms (off / on - 1, %); gap = modelled - published (percentage points, or x for
    the tail speedup)."""
    pub = preset.published
    dp = arm.get("dp")
    mean_inst = arm.get("speedup_mean_instance", arm.get("speedup_overall"))
    rows = []

    def row(figure, published, modelled, how, unit):
        gap = None if published is None or modelled is None else modelled - published
        rows.append({"figure": figure, "published": published, "modelled": modelled, "gap": gap, "unit": unit,
                     "modelled_as": how})

    if "per_round_inference" in pub:
        row("per-DP-round inference gain", pub["per_round_inference"]["gain_pct"], _pct(mean_inst),
            "mean over instances of each instance's time, off / on - 1", "%")
    if "per_step_inference" in pub:
        row("per-step inference gain", pub["per_step_inference"]["gain_pct"], _pct(arm.get("speedup_overall")),
            "one round's rollout time (slowest instance), off / on - 1", "%")
    row("long-tail speedup", pub.get("tail_speedup"), arm.get("speedup_tail"),
        "tail steps (nobody waiting, running <= threshold) of every instance, off time / on time", "x")
    base = arm.get("baseline_phases") or {}
    off_round = base.get("mean_instance_makespan_s", base.get("total_s"))
    if "per_round_inference" in pub:
        row("per-round inference time off", pub["per_round_inference"]["off_s"], off_round,
            "mean instance time of the off arm (seconds of the step model)", "s")
    if dp:
        off_tail_share = ratio_or_none(base.get("tail_s_pooled"), (base.get("tail_s_pooled") or 0)
                                       + (base.get("head_s_pooled") or 0))
    else:
        off_tail_share = ratio_or_none(base.get("tail_s"), base.get("total_s"))
    fig = pub.get("tail_phase_from_figure_s")
    if fig:
        row("tail share of the off rollout", 100.0 * fig["off"]["tail"] / (fig["off"]["tail"] + fig["off"]["head"]),
            None if off_tail_share is None else 100.0 * off_tail_share,
            "pooled tail time / instance time, off arm (published: read off the seed's figure)", "%")
    return {"preset": preset.name, "arm": label, "rows": rows,
            "labels": {"published": "measured by the seed on its cluster (" + SEED_SOURCE + ")",
                       "modelled": "this simulation: step times from the step model named in step_model, lengths and "
                                   "acceptance from the printed inputs"},
            "gain_definition": "off / on - 1, in % (the seed's '收益'; time saved is 1 - on / off)"}


def ratio_or_none(a, b):
    return a / b if a is not None and b else None


def comparison_lines(block: dict[str, Any]) -> list[str]:
    """The comparison as terminal lines."""
    def fmt(v, unit):
        if v is None:
            return "n/a"
        return f"{v:.2f}x" if unit == "x" else (f"{v:.1f} s" if unit == "s" else f"{v:+.2f} %")

    out = [f"prediction vs published ({block['preset']}, arm {block['arm']}; gain = off / on - 1):",
           f"  {'figure':34s} {'MODELLED':>12s} {'PUBLISHED':>12s} {'gap':>10s}"]
    for r in block["rows"]:
        gap = "n/a" if r["gap"] is None else (f"{r['gap']:+.2f}x" if r["unit"] == "x" else
                                              f"{r['gap']:+.1f} s" if r["unit"] == "s" else f"{r['gap']:+.2f} pp")
        out.append(f"  {r['figure']:34s} {fmt(r['modelled'], r['unit']):>12s} {fmt(r['published'], r['unit']):>12s} "
                   f"{gap:>10s}")
    out.append("  modelled = this simulation (step model above); published = measured by the seed on its cluster")
    return out
