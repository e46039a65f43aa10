"""How much a simulated gain depends on the response lengths, the input the user is least sure
of: the predicted gain of one speculating arm versus the median response length (x0.5, x1,
x2 of the run's lognormal median) and the share of responses truncated at the maximum
length (0 %, 5 %, 20 %).

Lengths of a cell (`mixture_lengths`): a share s of the requests, picked at random, run to
exactly the maximum (truncated); the others are drawn from the run's lognormal with the
cell's median, redrawn while at or above the maximum (so the "0 %" column truncates none),
and clipped below at the minimum length. Everything else (traces, acceptance profiles, seed,
step model, instances) is the run's own; every cell simulates the off arm and the arm.
"""

from __future__ import annotations

import math
import time
from typing import Any

import numpy as np

from samspec_bench.suites.rollout.config import RolloutConfig, lognormal_params
from samspec_bench.suites.rollout.replay_arm import Replay, simulate_arms
from samspec_bench.suites.rollout.units import to_step_units

MEDIAN_FACTORS = (0.5, 1.0, 2.0)
TRUNCATED_SHARES = (0.0, 0.05, 0.20)
DEFINITION = ("gain = off / on - 1 of the rollout time (slowest instance), in %; tail = pooled tail speedup; lengths: "
              "a share of requests at exactly the maximum, the rest lognormal(median x factor, the run's sigma) "
              "redrawn below the maximum")
DEFINITION_STEPS = DEFINITION.replace("rollout time (slowest instance)", "decode steps (slowest instance; no step "
                                      "model: not time)").replace("tail speedup", "tail step-count ratio")


def mixture_lengths(median: float, sigma: float, truncated_share: float, n: int, seed: int, lo: int, hi: int
                    ) -> np.ndarray:
    """n response lengths: round(share * n) at exactly `hi`, the rest lognormal(median, sigma)
    conditioned below `hi` (redrawn), clipped to >= lo."""
    if not 0.0 <= truncated_share <= 1.0:
        raise ValueError(f"truncated share {truncated_share} outside [0, 1]")
    rng = np.random.default_rng(seed)
    x = np.round(np.exp(rng.normal(math.log(median), sigma, n)))
    for _ in range(1000):
        bad = x >= hi
        if not bad.any():
            break
        x[bad] = np.round(np.exp(rng.normal(math.log(median), sigma, int(bad.sum()))))
    x = np.clip(x, lo, hi - 1)
    x[rng.choice(n, int(round(truncated_share * n)), replace=False)] = hi
    return x.astype(np.int64)


def run_sensitivity(cfg: RolloutConfig, rep: Replay, settings, label: str, step_model,
                    priced: str | None = None) -> dict[str, Any]:
    """The grid for the arm `label` of `settings` (and the off baseline). `priced`: what priced
    the steps (a label); None: no step model, the grid is in decode steps (step-count ratios,
    not time)."""
    med, sigma = lognormal_params(cfg.length_dist, "--sensitivity")
    pick = [s for s in settings if s["label"] in ("off", label)]
    t0 = time.perf_counter()
    rows = []
    for f in MEDIAN_FACTORS:
        for share in TRUNCATED_SHARES:
            lengths = mixture_lengths(med * f, sigma, share, len(rep.idx), cfg.seed, cfg.min_len, cfg.max_response_len)
            _, metrics = simulate_arms(cfg, rep, pick, lengths, True, step_model)
            m = metrics[label]
            so = m.get("speedup_overall")
            smi = m.get("speedup_mean_instance", so)
            rows.append({"median_factor": f, "median_tokens": med * f, "truncated_share": share,
                         "mean_length": float(lengths.mean()),
                         "gain_pct": None if so is None else 100.0 * (so - 1.0),
                         "gain_mean_instance_pct": None if smi is None else 100.0 * (smi - 1.0),
                         "speedup_tail": m.get("speedup_tail"), "off_s": metrics["off"]["total_s"],
                         "on_s": m["total_s"]})
    block = {"arm": label, "length_dist": cfg.length_dist, "sigma": sigma, "median_factors": list(MEDIAN_FACTORS),
             "truncated_shares": list(TRUNCATED_SHARES), "definition": DEFINITION, "rows": rows,
             "seconds": time.perf_counter() - t0}
    if priced is None:   # no step model: counts, and every key says so
        return {**block, "units": "steps", "rows": to_step_units(rows), "definition": DEFINITION_STEPS,
                "provenance": "decode steps of the simulation (no step model: a step-count gain, not time)"}
    return {**block, "units": "s", "provenance": f"modelled: the simulation {priced}"}


def table_lines(block: dict[str, Any]) -> list[str]:
    """The grid as terminal lines: rows = median, columns = truncated share; cells 'gain % / tail x'."""
    shares = block["truncated_shares"]
    steps = block.get("units") == "steps"
    what = "DECODE STEPS, not time: step-count gain % / tail step ratio" if steps else "MODELLED: gain % / tail speedup"
    out = [f"sensitivity ({what}; arm {block['arm']}) vs median length and share truncated at the maximum",
           f"  {'median (tokens)':>18s} " + " ".join(f"{f'{100 * s:.0f} % truncated':>22s}" for s in shares)]
    for f in block["median_factors"]:
        cells = []
        for s in shares:
            r = next(r for r in block["rows"] if r["median_factor"] == f and r["truncated_share"] == s)
            g = "n/a" if r["gain_pct"] is None else f"{r['gain_pct']:+.2f} %"
            tail = r.get("step_ratio_tail" if steps else "speedup_tail")
            t = "n/a" if tail is None else f"{tail:.2f}x"
            cells.append(f"{g + ' / ' + t:>22s}")
        med = next(r["median_tokens"] for r in block["rows"] if r["median_factor"] == f)
        head = f"x{f:g} ({med:.0f})"
        out.append(f"  {head:>18s} " + " ".join(cells))
    out.append(f"  ({block['definition']}; {block.get('provenance', 'modelled')})")
    return out
