"""The exactness battery: cases of request templates, each a target distribution per draft
position (prefix-independent), a draft (deterministic tokens, or draft probabilities from
which the harness samples the draft tokens of every trial) and a bonus distribution (the
harness samples bonus tokens from it, or the sampler does when it takes logits). Seeded: the
same config gives the same battery.

Where losses hide, and the cases that look there:

* `power-v4-k5`: every draft has probability 0.98 and the bonus row is as peaked, so most
  trials reach every position and the emitted law at each position has little variance: a
  loss of 1 % at any one position (over- or under-acceptance, the draft token leaking into
  the recovered law) is detected with >= 80 % power at the default sample count (`power.py`
  computes the statement; in the tests, on every seed tried). Small vocabulary: cheap trials.
* `bv-v3-k2`: draft probabilities under which block verification's residual
  max(0, p_tau * p - q) and the per-token residual max(0, p - q) give position laws 0.16
  apart in total variation (a plausible implementation mistake that the other cases hardly
  see).
* the power and block cases hold each template twice, the second for requests that bring
  their own seeded `torch.Generator`, mixed in the same batches (`Template.seeded`).
* `leak-v32000-k1-3` and `leak-v{151936}-k1-3`: vocabularies above 1,024 go through the
  two-level categorical draw. A low-probability draft (0.04) next to heavy tokens on the
  boundaries of its block, of the neighbouring blocks and of the vocabulary: a draft token
  leaking into the recovered law, or a draw that lands one token off at a block boundary,
  moves mass onto tokens the target gives almost none.
* `logits-path-v32`: raw logits and per-request temperature / top-k / top-p (only for
  samplers that take logits): the emitted laws against an independent float64 computation.
"""

from __future__ import annotations

import dataclasses
from typing import Optional

import numpy as np

from samspec_bench.bench.rejection import block_layout
from samspec_bench.suites.sampler.config import SamplerConfig


@dataclasses.dataclass
class Template:
    """One kind of request: k drafts; target rows 0..k-1 and the bonus row k (float64, rows
    sum to 1; for logits templates the law after temperature / top-k / top-p); deterministic
    drafts or q rows; seeded requests carry their own generator; logits templates hold the
    raw logits [k + 1, V] and the sampling parameters (they need a logits-level sampler)."""
    label: str
    target: np.ndarray                    # [k + 1, V]
    drafts: Optional[np.ndarray] = None   # [k] int, deterministic drafts
    q: Optional[np.ndarray] = None        # [k, V] draft probabilities
    seeded: bool = False
    logits: Optional[np.ndarray] = None   # [k + 1, V] float32 raw logits
    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0

    @property
    def k(self) -> int:
        return self.target.shape[0] - 1

    def acceptance_probs(self) -> np.ndarray:
        if self.k == 0:
            return np.zeros(0)
        if self.q is None:
            return self.target[np.arange(self.k), self.drafts]
        return np.minimum(self.target[: self.k], self.q).sum(1)

    def reach(self) -> np.ndarray:
        """[k + 1]: the probability that a trial reaches position j with the drafts as its
        prefix, under the per-token rule (the expected share of trials in position j's test)."""
        return np.concatenate([[1.0], np.cumprod(self.acceptance_probs())])

    def seeded_twin(self) -> "Template":
        return dataclasses.replace(self, label=f"{self.label}/seeded", seeded=True)


@dataclasses.dataclass
class Case:
    name: str
    vocab: int
    templates: list
    scale: float = 1.0        # fraction of the base sample count (split over the templates)

    @property
    def with_probs(self) -> bool:
        return self.templates[0].q is not None

    @property
    def needs_logits(self) -> bool:
        return self.templates[0].logits is not None

    @property
    def max_k(self) -> int:
        return max(t.k for t in self.templates)

    def trials(self, cfg: SamplerConfig) -> int:
        return max(1, int(cfg.samples * (4 if cfg.full else 1) * self.scale))


def _f32(p: np.ndarray) -> np.ndarray:
    """Round to float32 and renormalise in float64 (the distribution the sampler sees)."""
    p32 = np.asarray(p, dtype=np.float32).astype(np.float64)
    s = p32.sum(axis=-1, keepdims=True)
    return p32 / s


def dist(kind: str, V: int, rng: np.random.Generator) -> np.ndarray:
    """Target distribution families: flat, peaked, zipf (long-tailed), zeros (long-tailed with
    40% exact zeros), point (one token), twohot (two tokens, 0.5 each), sure (one token 0.98,
    the rest unequal)."""
    perm = rng.permutation(V)
    if kind == "flat":
        p = np.ones(V)
    elif kind == "peaked":
        p = rng.random(V) * 0.15 / V
        p[perm[0]] = 0.85
    elif kind in ("zipf", "zeros"):
        p = np.empty(V)
        p[perm] = 1.0 / np.arange(1, V + 1) ** 1.1
        if kind == "zeros":
            p[perm[max(2, int(0.6 * V)):]] = 0.0
    elif kind == "point":
        p = np.zeros(V)
        p[perm[0]] = 1.0
    elif kind == "twohot":
        p = np.zeros(V)
        p[perm[:2]] = 0.5
    elif kind == "sure":
        p = np.empty(V)
        p[perm[1:]] = 0.02 * np.arange(V - 1, 0, -1) / np.arange(V - 1, 0, -1).sum()
        p[perm[0]] = 0.98
    else:
        raise ValueError(kind)
    return _f32(p / p.sum())


def pick(p: np.ndarray, how: str, rng: np.random.Generator) -> int:
    """A draft token: argmax, second (2nd most likely), mid (median rank among p > 0),
    zero (a token with p = 0), random (uniform over the vocabulary)."""
    order = np.argsort(-p, kind="stable")
    pos = int((p > 0).sum())
    if how == "argmax":
        return int(order[0])
    if how == "second":
        return int(order[1])
    if how == "mid":
        return int(order[max(0, pos // 2)])
    if how == "zero":
        zeros = np.nonzero(p == 0)[0]
        return int(zeros[rng.integers(len(zeros))])
    if how == "random":
        return int(rng.integers(p.size))
    raise ValueError(how)


def _det(label, V, rng, kinds, how, bonus="zipf") -> Template:
    rows = [dist(k, V, rng) for k in kinds] + [dist(bonus, V, rng)]
    target = np.stack(rows)
    drafts = np.array([pick(target[i], how[i], rng) for i in range(len(kinds))], dtype=np.int64)
    return Template(label, target, drafts=drafts)


def _probs(label, V, rng, kinds, qkinds, bonus="zipf") -> Template:
    target = np.stack([dist(k, V, rng) for k in kinds] + [dist(bonus, V, rng)])
    qs = []
    for i, qk in enumerate(qkinds):
        p = target[i]
        if qk == "mix":        # half the target, half flat
            q = 0.5 * p + 0.5 / V
        elif qk == "same":     # q = p: always accepted
            q = p.copy()
        elif qk == "shifted":  # peaked on the target's second choice
            q = np.full(V, 0.2 / V)
            q[pick(p, "second", rng)] += 0.8
        elif qk == "onehot":   # a deterministic draft written as probabilities
            q = np.zeros(V)
            q[pick(p, "mid", rng)] = 1.0
        elif qk == "flat":
            q = np.full(V, 1.0 / V)
        else:
            raise ValueError(qk)
        qs.append(_f32(q))
    return Template(label, target, q=np.stack(qs))


def _block_verification_template() -> Template:
    """V = 3, k = 2. The first draft is always token 2 (p = 0.35); the second is token 1 or 2.
    After an accepted first draft block verification weighs the second position's residual
    by p_1 = min(1, p_0(2) / q_0(2)) = 0.35; a per-token residual ignores that weight and
    emits token 0 at position 1 with probability 0.14 instead of 0.30 (TV 0.16)."""
    target = _f32(np.array([[0.60, 0.05, 0.35], [0.30, 0.65, 0.05], [0.25, 0.40, 0.35]]))
    q = _f32(np.array([[0.0, 0.0, 1.0], [0.0, 0.30, 0.70]]))
    return Template("residual", target, q=q)


def boundary_row(V: int, rng: np.random.Generator) -> tuple[np.ndarray, int]:
    """A target row for the two-level draw and its draft token: the draft (p = 0.04) sits in
    the middle of a block whose first and last tokens, and the neighbouring blocks' edge
    tokens, hold 0.12 each; the vocabulary's first and last tokens 0.05 each; the remaining
    0.38 is a long tail over every other token."""
    nb, bs = block_layout(V)
    if nb < 3:   # a single block (small or prime vocabulary): thirds stand in for blocks
        nb, bs = 3, V // 3
    b = int(rng.integers(1, nb - 1))
    x = b * bs + bs // 2
    heavy = [b * bs - 1, b * bs, (b + 1) * bs - 1, (b + 1) * bs]
    rest = rng.permutation(np.setdiff1d(np.arange(V), heavy + [0, V - 1, x]))
    tail = 1.0 / np.arange(1, rest.size + 1) ** 1.1
    p = np.zeros(V)
    p[rest] = 0.38 * tail / tail.sum()
    p[heavy] = 0.12
    p[[0, V - 1]] = 0.05
    p[x] = 0.04
    return _f32(p), x


def _two_level_case(V: int, rng: np.random.Generator) -> Case:
    row, x = boundary_row(V, rng)
    leak = Template("leak", np.stack([row, dist("zipf", V, rng)]), drafts=np.array([x], dtype=np.int64))
    reach = _det("reach", V, rng, ["peaked", "peaked", "zeros"], ["argmax", "argmax", "mid"], bonus="zeros")
    return Case(f"leak-v{V}-k1-3", V, [leak, reach], scale=0.5)


def build_battery(cfg: SamplerConfig) -> list[Case]:
    rng = np.random.default_rng(cfg.seed + 12345)
    L = cfg.large_vocab
    power = _det("sure", 4, rng, ["sure"] * 5, ["argmax"] * 5, bonus="sure")
    bv = _block_verification_template()
    cases = [
        Case("power-v4-k5", 4, [power, power.seeded_twin()], scale=7.5),
        Case("bv-v3-k2", 3, [bv, bv.seeded_twin()], scale=2.0),
        Case("flat-v6-k3", 6, [_det("flat", 6, rng, ["flat"] * 3, ["random"] * 3, bonus="flat")]),
        Case("peaked-v50-k5", 50, [_det("peaked", 50, rng, ["peaked"] * 5,
                                        ["argmax", "argmax", "second", "argmax", "argmax"], bonus="peaked")]),
        Case("zeros-v1000-k3", 1000, [_det("zeros", 1000, rng, ["zeros", "zipf", "peaked"], ["mid", "argmax", "argmax"])]),
        Case("edges-v100-k4", 100, [_det("edges", 100, rng, ["point", "twohot", "zeros", "peaked"],
                                         ["argmax", "argmax", "zero", "argmax"])]),
        Case("probs-v200-k4", 200, [_probs("probs", 200, rng, ["zipf", "peaked", "zeros", "flat"],
                                           ["mix", "shifted", "onehot", "same"])]),
        Case("mixed-layout-v20", 20, [
            _det("k4", 20, rng, ["zipf", "peaked", "flat", "zipf"], ["argmax", "argmax", "mid", "argmax"]),
            Template("k0", dist("zipf", 20, rng)[None, :], drafts=np.zeros(0, dtype=np.int64)),
            _det("k1", 20, rng, ["flat"], ["random"], bonus="peaked"),
            _det("k2", 20, rng, ["peaked", "zeros"], ["second", "argmax"]),
        ]),
        Case("mixed-layout-probs-v30", 30, [
            _probs("k3", 30, rng, ["zipf", "peaked", "zipf"], ["mix", "shifted", "flat"]),
            Template("k0", dist("peaked", 30, rng)[None, :], q=np.zeros((0, 30))),
            _probs("k1", 30, rng, ["zeros"], ["mix"]),
        ]),
        _two_level_case(32000, rng),
    ]
    if L != 32000:
        cases.append(_two_level_case(L, rng))
    cases.append(logits_case(rng))
    if cfg.full:
        cases += [
            Case("flat-v2-k8", 2, [_det("flat", 2, rng, ["flat"] * 8, ["random"] * 8, bonus="flat")]),
            Case("probs-v1000-k3", 1000, [_probs("probs", 1000, rng, ["zipf", "zeros", "peaked"],
                                                 ["flat", "mix", "shifted"])]),
            Case(f"probs-v{L}-k2", L, [_probs("probs", L, rng, ["peaked", "zipf"], ["mix", "shifted"])], scale=0.3),
        ]
    return [c for c in cases if c.vocab <= cfg.max_vocab]


# ------------------------------------------------------------------------- logits level


def processed_probs_np(logits: np.ndarray, T: float, k: int, p: float) -> tuple[np.ndarray, float]:
    """Independent float64 temperature/top-k/top-p (same rule as rejection.apply_top_k_top_p);
    also the smallest distance of a cumulative mass to top_p (to avoid rounding-edge cases)."""
    x = logits.astype(np.float64) / T
    V = x.size
    if 0 < k < V:
        kth = np.sort(x)[-k]
        x = np.where(x >= kth, x, -np.inf)
    e = np.exp(x - x.max())
    probs = e / e.sum()
    margin = 1.0
    if p < 1:
        order = np.argsort(-probs, kind="stable")
        csum = np.cumsum(probs[order])
        before = np.concatenate([[0.0], csum[:-1]])
        drop = before >= p
        drop[0] = False
        margin = float(np.min(np.abs(before[1:] - p))) if V > 1 else 1.0
        probs[order[drop]] = 0.0
        probs /= probs.sum()
    return probs, margin


LOGITS_PARAMS = ((0.5, 0, 1.0), (1.6, 10, 1.0), (1.0, 0, 0.8), (0.7, 12, 0.9))


def logits_case(rng: np.random.Generator, V: int = 32) -> Case:
    """Raw logits with per-request temperature / top-k / top-p (four parameter sets mixed in
    every batch); the sampler samples the bonus itself. Per parameter set, "rejects": a token
    top-k / top-p removed (or the second most likely), then a mid-ranked one (the recovered
    law after the processing); "reaches": the argmax twice (the bonus is reached), also as
    seeded requests."""
    templates = []
    for (T, k, p) in LOGITS_PARAMS:
        while True:
            logits = (rng.standard_normal((6, V)) * 2).astype(np.float32)
            rows, margins = zip(*[processed_probs_np(lg, T, k, p) for lg in logits])
            if min(margins) > 1e-4:
                break
        rows = np.stack(rows)
        name = f"T={T},top_k={k},top_p={p}"
        first = pick(rows[0], "zero", rng) if (rows[0] == 0).any() else pick(rows[0], "second", rng)
        rej = Template(f"{name}/rejects", rows[:3], drafts=np.array([first, pick(rows[1], "mid", rng)]),
                       logits=logits[:3], temperature=T, top_k=k, top_p=p)
        reach = Template(f"{name}/reaches", rows[3:], drafts=np.array([pick(rows[3], "argmax", rng),
                                                                       pick(rows[4], "argmax", rng)]),
                         logits=logits[3:], temperature=T, top_k=k, top_p=p)
        templates += [rej, reach, reach.seeded_twin()]
    return Case(f"logits-path-v{V}", V, templates, scale=6.0)
