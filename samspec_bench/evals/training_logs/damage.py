"""What damage in a log cost: the (step, tag) points lost around each damaged spot.

A damaged record cannot say what it held, but the intact records either side of it can: the
damage sits between the steps of those records (a window). A tag is taken to have lost a step
of the window when it lacks that step while it was logged at the steps just outside the window
(a tag logged every step, not a validation tag logged every tenth step or one that starts
later). Whole steps missing inside a window of a run that logs every step are lost as well.
"""

from __future__ import annotations

import bisect
from collections import Counter
from typing import Iterable, Mapping


def lost_points(tag_steps: Mapping[str, Iterable[int]], windows: Iterable[tuple[int | None, int | None]],
                untold: list | None = None) -> dict[int, list[str]]:
    """step -> the tags that lost that step, for damage between the steps of each window; each
    window no point can be pinned on (a record of a sparse tag, of a step every tag still has)
    goes to `untold`: its cost is unknown, not zero."""
    sets = {tag: set(steps) for tag, steps in tag_steps.items()}
    all_steps = sorted(set().union(*sets.values())) if sets else []
    if not all_steps:
        return {}
    gaps = Counter(b - a for a, b in zip(all_steps, all_steps[1:]))
    every_step = bool(gaps) and gaps.most_common(1)[0][0] == 1   # the damage's own gap aside
    lost: dict[int, set[str]] = {}
    for p, q in windows:
        if p is None and q is None:
            if untold is not None:
                untold.append((p, q))
            continue
        found = 0
        lo = all_steps[0] if p is None else p
        hi = all_steps[-1] if q is None else q
        cands = set(all_steps[bisect.bisect_left(all_steps, lo):bisect.bisect_right(all_steps, hi)])
        if every_step and p is not None and q is not None:
            cands |= set(range(p + 1, q))       # whole steps the damage took
        i = bisect.bisect_left(all_steps, lo)
        before = all_steps[i - 1] if i > 0 else None
        j = bisect.bisect_right(all_steps, hi)
        after = all_steps[j] if j < len(all_steps) else None
        for tag, have in sets.items():
            if (before is not None and before not in have) or (after is not None and after not in have):
                continue
            for s in cands - have:
                lost.setdefault(s, set()).add(tag)
                found += 1
        if not found and untold is not None:
            untold.append((p, q))
    return {s: sorted(tags) for s, tags in sorted(lost.items())}


def untold_text(untold: list[tuple[int | None, int | None]], limit: int = 3) -> str:
    """'points lost: unknown (N damaged spot(s), at step 45, ...: ...)' for damage no point
    could be pinned on."""
    def where(p, q) -> str:
        if p is None and q is None:
            return "with no intact step either side"
        if p is None or q is None:
            return f"before step {q}" if p is None else f"after step {p}"
        return f"at step {p}" if p == q else f"between steps {p} and {q}"
    shown = ", ".join(where(p, q) for p, q in untold[:limit]) + (", ..." if len(untold) > limit else "")
    # damage after the last intact step (a torn tail) may have held steps past it, whole: no later record tells
    open_end = sum(p is not None and q is None for p, q in untold)
    why = ("no tag logged at every step lost a point there, so the record held a sparser tag's point or none"
           if not open_end else "nothing after it tells what it held (steps past the last intact one, possibly "
           "whole)" if open_end == len(untold) else "no tag logged at every step lost a point between intact "
           "records; after the last intact step nothing tells what the damage held (later steps, possibly whole)")
    return f"points lost: unknown ({len(untold)} damaged spot(s), {shown}: {why})"


def lost_text(lost: dict[int, list[str]], limit: int = 4) -> str:
    """'N point(s) lost at M step(s): step 12 (tag, ...), ...'."""
    points = sum(len(t) for t in lost.values())
    shown = ", ".join(f"step {s} ({', '.join(t[:2])}{', ...' if len(t) > 2 else ''})"
                      for s, t in list(lost.items())[:limit])
    return f"{points} point(s) lost at {len(lost)} step(s): {shown}{', ...' if len(lost) > limit else ''}"
