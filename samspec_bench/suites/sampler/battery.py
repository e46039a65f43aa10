"""The exactness battery: cases of request templates, each a target distribution per draft
position (prefix-independent), a draft (deterministic tokens, or draft probabilities from
which the harness samples the draft tokens of every trial) and a bonus distribution (the
harness samples bonus tokens from it). Seeded: the same config gives the same battery."""

from __future__ import annotations

import dataclasses
from typing import Optional

import numpy as np

from samspec_bench.suites.sampler.config import SamplerConfig

@dataclasses.dataclass
class Template:
    """One kind of request: k drafts; target rows 0..k-1 and the bonus row k (float64, rows
    sum to 1, already exactly representable in float32); deterministic drafts or q rows."""
    label: str
    target: np.ndarray                    # [k + 1, V]
    drafts: Optional[np.ndarray] = None   # [k] int, deterministic drafts
    q: Optional[np.ndarray] = None        # [k, V] draft probabilities

    @property
    def k(self) -> int:
        return self.target.shape[0] - 1

    def acceptance_probs(self) -> np.ndarray:
        if self.k == 0:
            return np.zeros(0)
        if self.q is None:
            return self.target[np.arange(self.k), self.drafts]
        return np.minimum(self.target[: self.k], self.q).sum(1)


@dataclasses.dataclass
class Case:
    name: str
    vocab: int
    templates: list
    scale: float = 1.0        # fraction of the base sample count

    @property
    def with_probs(self) -> bool:
        return self.templates[0].q is not None

    @property
    def max_k(self) -> int:
        return max(t.k for t in self.templates)


def _f32(p: np.ndarray) -> np.ndarray:
    """Round to float32 and renormalise in float64 (the distribution the sampler sees)."""
    p32 = np.asarray(p, dtype=np.float32).astype(np.float64)
    s = p32.sum(axis=-1, keepdims=True)
    return p32 / s


def dist(kind: str, V: int, rng: np.random.Generator) -> np.ndarray:
    """Target distribution families: flat, peaked, zipf (long-tailed), zeros (long-tailed with
    40% exact zeros), point (one token), twohot (two tokens, 0.5 each)."""
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


def build_battery(cfg: SamplerConfig) -> list[Case]:
    rng = np.random.default_rng(cfg.seed + 12345)
    L = cfg.large_vocab
    cases = [
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
        Case("zipf-v32000-k2", 32000, [_det("zipf", 32000, rng, ["zipf", "peaked"], ["argmax", "argmax"])], scale=0.5),
        Case(f"longtail-v{L}-k3", L, [_det("longtail", L, rng, ["zeros", "peaked", "zipf"], ["argmax", "argmax", "mid"],
                                         bonus="zeros")], scale=0.3),
    ]
    if cfg.full:
        cases += [
            Case("flat-v2-k8", 2, [_det("flat", 2, rng, ["flat"] * 8, ["random"] * 8, bonus="flat")]),
            Case("probs-v1000-k3", 1000, [_probs("probs", 1000, rng, ["zipf", "zeros", "peaked"],
                                                 ["flat", "mix", "shifted"])]),
            Case(f"probs-v{L}-k2", L, [_probs("probs", L, rng, ["peaked", "zipf"], ["mix", "shifted"])], scale=0.3),
        ]
    return [c for c in cases if c.vocab <= cfg.max_vocab]


def planned_tests(cases: list[Case]) -> int:
    """Distribution tests the battery runs per sampler: per template, layout, acceptance and
    one per position (k drafts and the bonus)."""
    return sum(2 + t.k + 1 for c in cases for t in c.templates)
