"""The rollout step of `samspec-bench run`: the workload its replay runs and the step-time
profile that prices it.

Workload. Replayed at its own lengths, the built-in trace (16 responses of at most 128 tokens,
half of them cut at the limit) runs in one batch that ends together: there is no long tail to
speak about. The run replays it RL-shaped instead (RL_SHAPE): GRPO groups of the trace's
prompts, four times as many requests as --max-num-seqs (the batch fills, then drains), lengths
drawn from a lognormal with a long right tail and few at the limit (RL_SHAPE_ASSUMPTION: drawn,
not measured, printed with the run). With --data-dir the traces' own lengths are replayed. A
config section `rollout: {...}` goes over either (steps.py: plan < section).

Profile. The replay is priced by a short profile of the reference engine, measured first
(`profile_for_replay`). Its grid follows what the replay will price (`replay_reach`: the off arm
simulated on every draw of the lengths, in steps, no step model): batch sizes up to the largest
running batch, and a prompt pad that brings the largest batch's context to the largest summed
context the replay holds (`profile_grid`), within a prefill budget. What the budget leaves
uncovered is printed as a share of the replay's steps.
"""

from __future__ import annotations

import inspect
import math
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable, Sequence

import click
import numpy as np

from samspec_bench.bench.policies import make_policy
from samspec_bench.bench.simulation.fitted_step_model import StepTimeModel, step_features
from samspec_bench.bench.simulation.scheduler import simulate
from samspec_bench.data import load_tokenizer
from samspec_bench.devices import resolve_device
from samspec_bench.errors import UserError
from samspec_bench.models.checkpoints import resolve_tokenizer
from samspec_bench.suites.rollout.config import RolloutConfig, build_config, kv_options
from samspec_bench.suites.rollout.draws import draw_seeds
from samspec_bench.suites.rollout.phases import tail_mask
from samspec_bench.suites.rollout.profile import (RUN_PROFILE as RUN_PROFILE_GRID, auto_batch_sizes, quick_profile,
                                                  read_profile)
from samspec_bench.suites.rollout.replay_arm import draw, prepare, requests_for
from samspec_bench.workload import PROMPTS, WorkloadConfig, question_ids

# The built-in trace replayed RL-shaped: 16 prompts x 4 (the trace's groups, cycled; 4 = the
# workload's samples, so no sibling is a copy of another), 64 requests through 16 slots.
# Lognormal median 32, sigma 1.1 (p90 / p10 about 17, as from a few hundred to several thousand
# tokens in an RL math step), clipped at 384: about 1 % at the limit. The off arm then spends
# 15-23 % of its modelled time (35-50 % of its steps) with at most 4 running and nobody
# waiting, over the draws; its summed context stays near 2,200 tokens, which the profile's
# largest batch reaches in one prefill chunk.
RL_SHAPE: dict[str, Any] = {"prompts": 16, "group-size": WorkloadConfig.samples, "length-dist": "lognormal:32:1.1",
                            "max-response-len": 384, "max-num-seqs": 16}
RL_SHAPE_ASSUMPTION = (
    "ASSUMPTION (drawn, not measured): the built-in trace replayed as an RL step: {prompts} prompts x {group-size} "
    "responses through {max-num-seqs} slots, lengths drawn from {length-dist} clipped at {max-response-len} "
    "(a few very long responses set the end, as in RL math rollouts; the built-in model's own responses are cut at "
    "128 tokens), each response's acceptance stretched to its drawn length; figures are modelled, median [min, max] "
    "over the draws").format(**RL_SHAPE)

RUN_PROFILE = "step_profile.json"   # under runs/rollout: the profile the run's replay is priced with
RUN_PROFILE_MAX_BATCH = 32          # keeps the profile short; larger batches are flagged as extrapolated
# prompt tokens one pass over the grid may prefill (the profile makes two passes: without
# speculation and with the oracle drafter): about 4 ms each for the built-in model on one CPU
# thread; the built-in shape needs about 2,600
RUN_PROFILE_PREFILL_BUDGET = 5000
REACH_MARGIN = 1.05   # over the off arm's largest context (the speculating arms' is not larger: tested)


def shape_plan(data_dir: Path | None) -> tuple[dict[str, Any], list[str]]:
    """The replay's workload options and the note that says what they are."""
    if data_dir is not None:
        return {}, [f"lengths: the traces' own (of {data_dir})"]
    return dict(RL_SHAPE), [RL_SHAPE_ASSUMPTION]


def rollout_config(params: dict[str, Any]) -> RolloutConfig:
    """The rollout's checked config from its final parameters (click names)."""
    names = inspect.signature(build_config).parameters
    return build_config(**{k: params.get(k) for k in names})


def tail_threshold(cfg: RolloutConfig) -> int:
    """The tail's T as the rollout reads the off arm against its first threshold arm."""
    return cfg.tail_threshold if cfg.tail_threshold is not None else cfg.thresholds[0]


def replay_reach(cfg: RolloutConfig) -> dict[str, Any]:
    """What the replay will price, read off its off arm simulated on every draw of the lengths
    (decode steps, no step model: the schedule does not depend on step times): the largest
    value of each step feature, every step's summed context, and per draw the share of steps in
    the tail (at most `tail_threshold` running, nobody waiting)."""
    rep = prepare(cfg, profiles=False)
    maxima: dict[str, float] = {}
    contexts, tails = [], []
    for seed in draw_seeds(cfg):
        lengths, stretch = draw(replace(cfg, seed=seed), rep)
        r = simulate(requests_for(rep, lengths, None, stretch), k=max(cfg.ks), policy=make_policy("off"),
                     step_model=StepTimeModel.constant(1.0), max_num_seqs=cfg.max_num_seqs,
                     max_num_batched_tokens=cfg.max_num_batched_tokens, **kv_options(cfg))
        for f, x in step_features(r.steps).items():
            maxima[f] = max(maxima.get(f, 0.0), float(np.max(x)) if len(x) else 0.0)
        contexts.append(np.asarray(r.steps["context_tokens"], dtype=float))
        tails.append(float(tail_mask(r.steps, tail_threshold(cfg)).mean()))
    return {"maxima": maxima, "context_tokens": np.concatenate(contexts), "tail_step_share": tails,
            "requests": len(rep.idx)}


def profile_prompt_lengths(model: str) -> list[int]:
    """Prompt tokens of the profile's requests (the built-in questions through the model's
    tokenizer, cycled over a batch as the profile does)."""
    tok = load_tokenizer(resolve_tokenizer(model))
    return [len(question_ids(tok, q)) for q in PROMPTS]


def grid_context(batch: int, pad: int, tokens: int, prompt_lens: Sequence[int]) -> int:
    """The summed context of the last decode step of a profile run: `batch` requests of the
    profile's prompts with `pad` tokens in front, `tokens - 1` decoded."""
    return sum(prompt_lens[i % len(prompt_lens)] for i in range(batch)) + batch * (pad + tokens - 1)


def profile_grid(reach: dict[str, Any], prompt_lens: Sequence[int],
                 budget: int = RUN_PROFILE_PREFILL_BUDGET) -> dict[str, Any]:
    """The profile's grid for this replay: batch sizes up to its largest running batch (at most
    RUN_PROFILE_MAX_BATCH), each with prompt pad 0 and with a pad that makes the largest batch's
    context reach REACH_MARGIN x the replay's largest summed context, the pad cut to what
    `budget` prefill tokens a pass allow. Short prompts on a full batch keep the prefill linear
    in its tokens, as the fitted model prices it (one long prompt's attention grows with its
    square). Adds `context_max` (what the grid measures up to)."""
    tokens = int(RUN_PROFILE_GRID["tokens"])
    largest = max(1, min(int(reach["maxima"].get("running", 1)), RUN_PROFILE_MAX_BATCH))
    sizes = auto_batch_sizes(largest)
    need = math.ceil(REACH_MARGIN * reach["maxima"].get("context_tokens", 0.0))
    pad = max(0, math.ceil((need - grid_context(largest, 0, tokens, prompt_lens)) / largest))
    unpadded = sum(grid_context(b, 0, 1, prompt_lens) for b in sizes)
    pad = max(0, min(pad, (budget - unpadded) // sum(sizes)))
    return {"tokens": tokens, "batch_sizes": sizes, "prompt_pads": (0, pad) if pad else (0,), "pad_max_batch": None,
            "context_max": grid_context(largest, pad, tokens, prompt_lens)}


def coverage_line(reach: dict[str, Any], grid: dict[str, Any]) -> str:
    """What the grid covers of the replay's context, in words."""
    ctx = reach["context_tokens"]
    top = float(ctx.max()) if ctx.size else 0.0
    beyond = float(np.mean(ctx > grid["context_max"])) if ctx.size else 0.0
    head = (f"the replay's summed context reaches {top:,.0f} tokens (off arm, every draw); the profile measures up to "
            f"{grid['context_max']:,} (batches {','.join(map(str, grid['batch_sizes']))}, prompt pads "
            f"{','.join(map(str, grid['prompt_pads']))})")
    if beyond == 0:
        return head + ": covered"
    return (head + f": {100 * beyond:.0f} % of the off arm's steps lie beyond it and are priced by extrapolation "
            f"(the profile's prefill budget is {RUN_PROFILE_PREFILL_BUDGET:,} prompt tokens a pass)")


def kept_profile(path: Path) -> bool:
    """Whether the run's step dir holds a whole profile from an earlier attempt (said); a damaged
    one is measured again."""
    if not path.is_file():
        return False
    try:
        read_profile(path)
    except UserError as e:
        click.echo(f"rollout: {e}: measuring it again", err=True)
        return False
    click.echo(f"rollout: keeping the step-time profile this run measured before ({path}); the rollout step's kept "
               "draws were priced by it", err=True)
    return True


def profile_for_replay(model: str, engine: str, path: Path) -> Callable[[dict[str, Any]], None]:
    """The rollout step's prepare: measure a short profile of `engine` (the one that wrote the
    built-in trace) at `path` on the grid the replay needs, unless the config file named another
    --step-model. A profile this run measured before (its step dir: a resumed run) is kept, so
    that the draws an interrupted rollout kept stay priced by the profile they were priced by."""
    def prepare(params: dict[str, Any]) -> None:
        if params.get("step_model") != str(path) or kept_profile(path):
            return
        cfg = rollout_config(params)
        reach = replay_reach(cfg)
        name = params.get("model") or model
        grid = profile_grid(reach, profile_prompt_lengths(name))
        say = lambda t: click.echo(t, err=True)  # noqa: E731
        if cfg.length_dist is not None:
            shares = sorted(reach["tail_step_share"])
            say(f"rollout: {reach['requests']} requests through {cfg.max_num_seqs} slots, lengths drawn from "
                f"{cfg.length_dist} (ASSUMPTION); off arm's steps with <= {tail_threshold(cfg)} running and nobody "
                f"waiting: {100 * float(np.median(shares)):.0f} % [{100 * shares[0]:.0f}, {100 * shares[-1]:.0f}] "
                "over the draws")
        say(f"rollout: measuring the {engine} engine's step-time profile ({name}, batches up to "
            f"{grid['batch_sizes'][-1]}, k={','.join(map(str, cfg.ks))}) to price the replay; "
            + coverage_line(reach, grid))
        quick_profile(path, engine, name, cfg.ks, grid["batch_sizes"][-1], threads=int(params.get("threads") or 1),
                      log=say, note="measured by `samspec-bench run` on this machine to price its rollout replay",
                      grid=grid, device=resolve_device(params.get("device")))
    return prepare
