"""`samspec-bench rollout profile`: measure the reference engine's step times over batch sizes
and context lengths, with and without speculation, and fit the step-time model
(`bench.simulation.step_model`) that `rollout --engine replay --step-model` prices with."""

from __future__ import annotations

import numpy as np

from samspec_bench.bench.engines.base import Request, SamplingParams
from samspec_bench.bench.engines.factory import make_engine
from samspec_bench.bench.policies import make_policy
from samspec_bench.bench.simulation.profiles import profiles_for
from samspec_bench.bench.simulation.scheduler import simulate
from samspec_bench.bench.simulation.step_model import StepTimeModel, fit_from_steps
from samspec_bench.errors import UserError
from samspec_bench.suites.rollout.measured import steps_from_generation
from samspec_bench.suites.rollout.replay_arm import sim_requests
from samspec_bench.workload import PROMPTS, question_ids


def parse_prompt_pads(text: str) -> tuple[int, ...]:
    """--prompt-pad: comma-separated integers >= 0 (empty: 0)."""
    try:
        pads = [int(x) for x in text.split(",") if x.strip()] or [0]
    except ValueError:
        pads = [-1]
    if any(x < 0 for x in pads):
        raise UserError(f"--prompt-pad {text!r}: give comma-separated integers >= 0, e.g. 0,256")
    return tuple(pads)


def padded(ids, pad: int) -> list[int]:
    """`ids` with `pad` tokens of its own text (repeated) in front."""
    return (list(ids) * (pad // max(len(ids), 1) + 1))[:pad] + list(ids)


def profile(model: str, batch_sizes: list[int], tokens: int, k: int, threads: int, dtype: str,
            drafter: str = "sam", seed: int = 0, prompt_pads: tuple[int, ...] = (0, 256)):
    """Measure step times at several batch sizes and prompt lengths, with and without
    speculation, and fit. Prompt lengths (the chat prompt plus `prompt_pads` tokens of its own
    text in front) vary the context apart from the batch size, so the fit can tell the cost
    of attending over context from the cost of a decode token; speculative runs price the
    draft (verify) tokens. The context of every step comes from a simulation of the same
    run; where it does not reproduce the engine's schedule, the fit goes without context."""
    import torch  # imports torch: the reference engine runs on it

    torch.set_num_threads(threads)
    mx = max(batch_sizes)
    engine = make_engine("reference", model, dtype=dtype, max_num_seqs=mx, max_num_batched_tokens=max(2048, mx * (k + 1)))
    tok = engine.tokenizer
    engine.generate([Request("w", question_ids(tok, PROMPTS[0]), SamplingParams(max_tokens=4))])
    tables = []
    for b, pad in [(b, pad) for b in batch_sizes for pad in prompt_pads]:
        reqs = [Request(i, padded(question_ids(tok, PROMPTS[i % len(PROMPTS)]), pad),
                        SamplingParams(temperature=0.0, max_tokens=tokens, ignore_eos=True, seed=seed + i))
                for i in range(b)]
        for kk in (0, k):
            g = engine.generate(reqs, drafter=drafter if kk else None, num_spec_tokens=max(kk, 1))
            st = steps_from_generation(g)
            pairs = [(o.prompt_ids, o.token_ids) for o in g.outputs]
            prof = profiles_for(pairs, None, kk, drafter) if kk else None
            r = simulate(sim_requests(pairs, [len(o.token_ids) for o in g.outputs], prof), k=kk,
                         policy=make_policy("always" if kk else "off"), step_model=StepTimeModel.constant(1.0),
                         max_num_seqs=mx, max_num_batched_tokens=engine.max_num_batched_tokens, fast_forward=False)
            if r.num_steps == len(st["time_s"]) and np.array_equal(r.steps["num_scheduled_tokens"], st["num_scheduled_tokens"]):
                st["context_tokens"] = r.steps["context_tokens"]
            else:
                st["context_tokens"] = np.full(len(st["time_s"]), np.nan)
            tables.append(st)
    engine.close()
    ok = [t for t in tables if np.isfinite(t["context_tokens"]).all()]
    use = ok if len(ok) == len(tables) else [{kk: v for kk, v in t.items() if kk != "context_tokens"} for t in tables]
    return fit_from_steps(use, source=f"rollout profile: {model}, batch sizes {batch_sizes}, prompt pads {list(prompt_pads)}, "
                                      f"{tokens} tokens, k={k}"), tables
