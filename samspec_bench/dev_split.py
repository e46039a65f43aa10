"""The dev side of a dev / held-out split (`rollout --dev-split`, `accept --dev-split`): the
distinct keys (trace groups) in a permutation seeded by the run's seed, the first
round(fraction x keys) of it, at least one and at most all but one, so neither side is empty."""

from __future__ import annotations

from typing import Hashable, Sequence

import numpy as np


def dev_count(n: int, fraction: float) -> int:
    """How many of n keys (n >= 2) the dev side takes: round(fraction x n), at least one and at
    most all but one."""
    return min(max(int(round(fraction * n)), 1), n - 1)


def dev_keys(distinct: Sequence[Hashable], fraction: float, seed: int) -> set:
    """The keys on the dev side; `distinct` in a fixed order (sorted), at least two of them."""
    if len(distinct) < 2:
        raise ValueError(f"a split needs at least 2 keys, got {len(distinct)}")
    order = np.random.default_rng(seed).permutation(len(distinct))
    n_dev = dev_count(len(distinct), fraction)
    return {distinct[i] for i in order[:n_dev]}
