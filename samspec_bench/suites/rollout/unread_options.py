"""Options a `rollout` run (or `rollout profile`) would not read, refused in one line before
anything runs (nothing is silent): each set away from its default where nothing reads it.

- the always / threshold arms' settings (-k, --drafter, --sources) when neither arm runs (a
  strategy names its own k, drafter and sources); --spec-threshold without a threshold arm where
  it is not the tail's definition either;
- a measured engine's sampling (--temperature, --top-p, --no-ignore-eos) on a replay, and its
  built-in prompts' traces (--traces, --tokenizer, how their tool output is replayed:
  --tool-output, --tool-latency-s, bad lines: --on-error, and verl validation generations:
  --history-includes-validation) on a measured engine;
- --block-size without a KV capacity to cut into blocks;
- --draws / --seed when the lengths are not drawn;
- --length-group-share (a share, or traces) and --length-rank-share when no lengths are drawn (a
  replay's own lengths, fixed:N);
- `rollout profile`: the engine grid's options with --engine torch, the torch grid's without it.

Left alone (read somewhere): --sources naming history with no source arm (every arm then replays
the traces' last RL step, the earlier ones held as history); --spec-threshold's first value without
a threshold arm and without --tail-threshold (the tail's definition, running <= it); -k and
--spec-threshold on a measured engine that profiles itself (its profile's grid); --threads on a
replay (`samspec-bench run` measures the replay's profile with it); --model on a replay with
--tokenizer (the result's model record).

A leaf module: the config is read by its fields (a suites.rollout.config.RolloutConfig)."""

from __future__ import annotations

from typing import Any

from samspec_bench.bench.engines.factory import engine_capabilities
from samspec_bench.bench.simulation.step_model_spec import is_roofline_spec
from samspec_bench.errors import UserError, field_default
from samspec_bench.suites.rollout.length_share import unread_text

SOURCE_ARMS = ("always", "threshold")
SAMPLING = (("temperature", "--temperature"), ("top_p", "--top-p"))


def refuse_unread(cfg: Any, given: set[str], drawn: bool) -> None:
    """Refuse what `cfg` (a checked RolloutConfig) would not read. `given`: the fields among ks,
    thresholds and sources that the user set away from what the run takes without them (the
    preset's or the default); `drawn`: whether the run's lengths are drawn with the seed."""
    caps = engine_capabilities(cfg.engine)
    arms_unread(cfg, given, caps.generates)
    threshold_unread(cfg, given, caps.generates)
    if not caps.generates:
        sampling = [f"{opt} {getattr(cfg, f):g}" for f, opt in SAMPLING if getattr(cfg, f) != field_default(cfg, f)]
        sampling += [] if cfg.ignore_eos else ["--no-ignore-eos"]
        if sampling:
            they, them = pronouns(sampling)
            raise UserError(f"{' / '.join(sampling)} with --engine {cfg.engine}: {they} a measured engine's sampling, "
                            f"and a replay replays the traces' responses; use --engine reference (or vllm), or drop "
                            f"{them}")
    else:
        traces = [f"{opt} {v}" for opt, v in (("--traces", cfg.traces), ("--tokenizer", cfg.tokenizer)) if v]
        traces += [f"{opt} {v:g}" if isinstance(v, float) else f"{opt} {v}"
                   for f, opt in (("tool_output", "--tool-output"), ("tool_latency_s", "--tool-latency-s"),
                                  ("on_error", "--on-error"))
                   if (v := getattr(cfg, f)) != field_default(cfg, f)]
        traces += ["--history-includes-validation"] if cfg.history_includes_validation else []   # a flag: no value
        if traces:
            raise UserError(f"{' / '.join(traces)} with --engine {cfg.engine}: a measured engine generates from the "
                            f"built-in prompts with its model's tokenizer; use --engine replay, or drop "
                            f"{pronouns(traces)[1]}")
    # a roofline knows the device memory: its KV capacity is cut into --block-size blocks
    if cfg.block_size != field_default(cfg, "block_size") and cfg.kv_capacity_tokens is None and not cfg.sensitivity \
            and not is_roofline_spec(cfg.step_model):
        raise UserError(f"--block-size {cfg.block_size} sizes the KV cache's blocks, and this run has no KV limit (no "
                        "--kv-capacity-tokens, and the step model does not know the device memory): give "
                        "--kv-capacity-tokens or a roofline --step-model, or drop it")
    # a measured engine without --length-dist draws its lognormal default
    share_unread(cfg, drawn or (caps.generates and cfg.length_dist is None))
    if not caps.generates:
        lengths_unread(cfg, drawn)


def arms_unread(cfg: Any, given: set[str], generates: bool) -> None:
    """-k / --drafter / --sources configure the always / threshold arms: refused when neither
    runs. Kept where read: -k by a measured engine (its profile's verify steps, its build's k);
    --sources naming history (the traces' last RL step is replayed by every arm)."""
    if any(a in cfg.arms for a in SOURCE_ARMS):
        return
    bad = []
    if "ks" in given and not generates:
        bad.append(f"-k {','.join(map(str, cfg.ks))}")
    if cfg.drafter != field_default(cfg, "drafter"):
        bad.append(f"--drafter {cfg.drafter}")
    if "sources" in given and "history" not in cfg.sources:
        bad.append(f"--sources {cfg.sources}")
    if bad:
        they, them = pronouns(bad)
        why = ", the default with --strategy" if cfg.strategies else ""
        raise UserError(f"{' / '.join(bad)}: {they} the always / threshold arms, and neither runs (--arms "
                        f"{','.join(cfg.arms)}{why}; a strategy names its own, e.g. seed:k=5@group); add always or "
                        f"threshold to --arms, or drop {them}")


def threshold_unread(cfg: Any, given: set[str], generates: bool) -> None:
    """--spec-threshold without a threshold arm: its first value is still the tail's definition
    (running <= T) unless --tail-threshold is given; the rest is read by nothing (a measured engine
    that profiles itself measures every batch size up to the largest threshold: kept there)."""
    if "thresholds" not in given or "threshold" in cfg.arms or (generates and not cfg.step_model):
        return
    spec, arms = ",".join(map(str, cfg.thresholds)), ",".join(cfg.arms)
    if cfg.tail_threshold is not None:
        raise UserError(f"--spec-threshold {spec} sets the threshold arm's switch, and no threshold arm runs (--arms "
                        f"{arms}; the tail is --tail-threshold {cfg.tail_threshold}): add threshold to --arms, or drop "
                        "it")
    if len(cfg.thresholds) > 1:
        raise UserError(f"--spec-threshold {spec}: no threshold arm runs (--arms {arms}), so only its first value is "
                        f"read (the tail's definition, running <= {cfg.thresholds[0]}); give --tail-threshold "
                        f"{cfg.thresholds[0]} instead, or add threshold to --arms")


def lengths_unread(cfg: Any, drawn: bool) -> None:
    """A replay whose lengths are not drawn (the traces' own, or fixed:N): every draw is the same
    run, and the seed seeds nothing unless --dev-split splits the prompts with it."""
    if drawn:
        return
    lengths = f"--length-dist {cfg.length_dist}" if cfg.length_dist else "the traces' own"
    if cfg.draws is not None and cfg.draws > 1:
        raise UserError(f"--draws {cfg.draws}: the lengths are not drawn ({lengths}), so every draw would be the same "
                        "run; give a drawn --length-dist (lognormal:MEDIAN:SIGMA, pareto:MIN:ALPHA or trace), or "
                        "drop it")
    if cfg.seed != 0 and cfg.dev_split is None:
        raise UserError(f"--seed {cfg.seed} seeds drawn lengths and --dev-split's split, and this replay has neither "
                        f"(lengths: {lengths}); give a drawn --length-dist or --dev-split, or drop it")


def share_unread(cfg: Any, drawn: bool) -> None:
    """--length-group-share and --length-rank-share correlate drawn lengths: refused where none are drawn."""
    lengths = f"--length-dist {cfg.length_dist}" if cfg.length_dist else "the traces' own"
    if not drawn and cfg.length_group_share != field_default(cfg, "length_group_share"):
        raise UserError(unread_text(cfg.length_group_share, lengths))
    if not drawn and cfg.length_rank_share != field_default(cfg, "length_rank_share"):
        raise UserError(unread_text(cfg.length_rank_share, lengths, "--length-rank-share"))


def pronouns(named: list[str]) -> tuple[str, str]:
    return ("it sets", "it") if len(named) == 1 else ("they set", "them")


# ---------- rollout profile ----------

ENGINE_GRID = {"batch_sizes": "--batch-sizes", "tokens": "--tokens", "ks": "-k", "prompt_pad": "--prompt-pad",
               "pad_max_batch": "--pad-max-batch", "engine_arg": "--engine-arg"}
TORCH_GRID = {"grid_batches": "--grid-batches", "grid_q": "--grid-q", "grid_contexts": "--grid-contexts",
              "layers": "--layers", "repeats": "--repeats", "attention": "--attention", "tree_paths": "--tree-paths",
              "out_jsonl": "--out-jsonl"}


def refuse_other_profiler(engine: str, torch_profiler: bool, params: dict[str, Any], defaults: dict[str, Any]) -> None:
    """`rollout profile`: the options of the other profiler (ENGINE_GRID for an engine, TORCH_GRID
    for --engine torch) set away from their defaults, refused naming them."""
    other = ENGINE_GRID if torch_profiler else TORCH_GRID
    bad = [opt for name, opt in other.items() if params.get(name) != defaults.get(name)]
    if not bad:
        return
    they, them = pronouns(bad)
    if torch_profiler:
        raise UserError(f"{' / '.join(bad)} with --engine {engine}: {they} the profile of a serving engine "
                        "(--engine reference or vllm), and --engine torch times one forward step per --grid-* point; "
                        f"use --engine reference (or vllm), or drop {them}")
    raise UserError(f"{' / '.join(bad)} with --engine {engine}: {they} --engine torch's grid (one forward step per "
                    f"point, no serving engine); use --engine torch, or drop {them}")
