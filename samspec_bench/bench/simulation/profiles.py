"""Acceptance profiles, the simulation's input: per response, what a drafter proposes at every
position and how much of it the recorded response accepts, from the response's own context
or its GRPO group's; read at other lengths by block resampling.

A profile is (drafted[p], accepted[p]) for every response position p: what the drafter
proposes after resp[:p] and how much of it the recorded response confirms
(`acceptance_profile` for the own-context source; `walk_profile` decodes one with it).

Group sources (`group_acceptance_profiles`): GRPO siblings share one automaton
(`SamDrafter(group_sharing=True)`, as the acceptance suite's group replay). A response's
draft at position p depends on how far its siblings have got, which depends on the schedule.
The profile assumes lockstep: when a member drafts at position p, every sibling has emitted
its first p tokens (all of them if it is shorter). That is exactly the head of a rollout
(siblings are admitted together and each emits one token per step without speculation) and
close to it later, as far as the recorded lengths go. The simulation draws other lengths, so
a request drawn longer than every sibling drafts, past their lengths, from siblings that have
all finished, which the lockstep profile (at the recorded lengths) need not show. For that part
`after_siblings_profiles` drafts each response from its siblings' whole responses (every other
distinct member of its group indexed, own prefix as it grows; a fresh drafter per response,
one acceptance record per group as in lockstep) and the simulation reads it from the request's position past its
simulated siblings' longest length on (profile_table.LateProfile: lockstep in positions, so a
sibling slowed by worse drafts may in fact still run). Both are computed once per trace group,
before the simulation.

History sources (`history`, `group+history`: earlier RL steps' responses to the same prompt,
sam/history.py, the same definition as `accept`): `split_history` takes the traces' last RL
step as the rollout and every earlier step as its history (verl dumps), or on single-step
traces the replay engine's stated split (`EMULATED_STEPS`: each group's first half is the
earlier step); `history_store` holds the earlier steps within a window and a memory budget.

Strategies with a per-request length rule (sam/strategies: AIMD, length budgets, a rolling
cut-off) read the drafter's drafts at their most tokens and cut them by the rule along the
response's always-speculating decode walk (`rule_profile`): exact on that walk for drafts
whose shorter drafts are their prefixes (SAM's), the rule's current length elsewhere.

RL-length responses (`stretch_positions`): the traces' responses are hundreds to a few
thousand tokens, RL rollouts reach 34,816. A response's profile is stretched to a target
length by block resampling: target position p (block b = p // BLOCK, offset r = p % BLOCK)
reads source position (b * nb_src // nb_tgt) * BLOCK + r, nb_* = the lengths in blocks.
Chosen over tiling, which would repeat the low-acceptance opening of a response at every
tile (acceptance grows with position as the context fills with reusable text), and over
per-position stretching, which would repeat each position's value several times in a row
and lengthen the runs of accepted drafts that decide tokens per step. Blocks keep the local
run structure of real drafts and the position trend of acceptance; the accepted length at
the end of the target is capped at the response's end (profile_table.accepted_at).
"""

from __future__ import annotations

from typing import Any, Callable, Hashable, Sequence

import numpy as np

from samspec_bench.bench.draft_config import SAM_DRAFTERS, DraftConfig, build_drafter, unsupported_reason
from samspec_bench.bench.engines.replay import EMULATED_STEPS, emulate_steps, has_steps, item_step
from samspec_bench.bench.simulation.profile_walk import DecodeWalk
from samspec_bench.errors import UserError
from samspec_bench.sam import make_drafter
from samspec_bench.sam.draft_tree import propose_paths, tree_accepted, tree_size
from samspec_bench.sam.history import HistoryStore
from samspec_bench.sam.strategies.base import LengthRule

BLOCK = 64
RESAMPLE_METHOD = (f"block resampling: target position p reads source position "
                   f"(p//{BLOCK} * src_blocks // target_blocks) * {BLOCK} + p % {BLOCK}; keeps local draft runs "
                   "and the position trend of acceptance (tiling would repeat a response's low-acceptance opening)")


def acceptance_profile(drafter, prompt_ids, response_ids, k: int, req_id=0, group=None, paths: int = 0,
                       spans: Sequence[tuple[int, int]] | None = None) -> tuple[np.ndarray, ...]:
    """(drafted[p], accepted[p]) for every response position p (p = 0 is the prefill's token:
    0, 0). The draft at p is the drafter's proposal of up to k tokens after resp[:p]. With
    `paths` > 0 also the tree profile (tree_drafted[p], tree_accepted[p]) of a `paths`-path
    draft tree at p (sam/draft_tree.py), whose first path is that same draft. The drafter's
    state at p is the same whether p was reached with or without speculation (it is extended
    with the same tokens), so this is exact for greedy decoding, and for sampling with a
    deterministic drafter (a draft token is accepted iff the sampled token equals it: rejection
    re-samples with it removed); walking it with pos += accepted + 1 reproduces
    `bench.engines.replay.replay_response` step for step (checked in tests). A drafter that
    learns from acceptance learns along that walk (profile_walk.py). `spans`: the response's
    tool text between turns, prefilled (profile_walk.py); each turn restarts the request with
    everything before it as its prompt."""
    resp = [int(t) for t in response_ids]
    n = len(resp)
    prof = _empty_profile(n, paths)
    walk = DecodeWalk(n, spans)
    drafter.start(req_id, prompt_ids, group=group)
    try:
        if n:
            drafter.extend(req_id, resp[:1])
        for p in range(1, n):
            if p in walk.restarts:   # a new turn: a new request over everything before it
                drafter.stop(req_id)
                drafter.start(req_id, [int(t) for t in prompt_ids] + resp[:p], group=group)
            _judge_at(drafter, req_id, k, paths, resp, p, prof, walk)
            drafter.extend(req_id, resp[p:p + 1])
    finally:
        drafter.stop(req_id)
    return prof


def _empty_profile(n: int, paths: int) -> tuple[np.ndarray, ...]:
    return tuple(np.zeros(n, dtype=np.int16) for _ in range(4 if paths else 2))


def _matched(draft, resp: list[int], p: int) -> int:
    a, end = 0, min(len(draft), len(resp) - p)
    while a < end and draft[a] == resp[p + a]:
        a += 1
    return a


def _judge_at(drafter, req_id, k: int, paths: int, resp: list[int], p: int, prof, walk: DecodeWalk) -> None:
    """Position p of a profile: the draft (and with `paths`, the tree) and what resp confirms.
    On the decode walk the drafter proposes and is judged by the tokens that step emits
    (`settle`); off it, it only peeks; in prefilled text nothing is drafted (profile_walk.py)."""
    on = walk.on(p)
    if walk.skip[p]:
        return
    if not paths:
        own = drafter.propose(req_id, k) if on else drafter.peek(req_id, k)
        prof[0][p], prof[1][p] = len(own), _matched(own, resp, p)
    else:
        own, tree = propose_paths(drafter, req_id, k, paths, peek=not on)
        prof[0][p], prof[1][p] = len(own), _matched(own, resp, p)
        prof[2][p] = min(tree_size(tree), np.iinfo(np.int16).max)
        prof[3][p] = tree_accepted(tree, resp[p:p + k])
    if on:
        drafter.settle(req_id, resp[p:p + walk.step(p, int(prof[1][p]))])


def walk_profile(drafted: np.ndarray, accepted: np.ndarray, k: int) -> tuple[list[int], list[int], list[int], list[int]]:
    """Always-speculating decode of one response from its profile: (position, drafted, accepted,
    emitted) per decode step, with `bench.engines.replay`'s end rule (no bonus token past the
    last token)."""
    n = len(drafted)
    pos, out = 1, ([], [], [], [])
    while pos < n:
        d = min(int(drafted[pos]), k)
        a = min(int(accepted[pos]), d)
        e = a + 1 if pos + a < n else a
        for lst, v in zip(out, (pos, d, a, e)):
            lst.append(v)
        pos += e
    return out


def stretch_positions(p, n_src, n_tgt, block: int = BLOCK) -> np.ndarray:
    """Source positions read for target positions `p` (numpy broadcasting over all arguments)."""
    p = np.asarray(p, dtype=np.int64)
    n_src = np.asarray(n_src, dtype=np.int64)
    nb_src = -(-n_src // block)
    nb_tgt = np.maximum(-(-np.asarray(n_tgt, dtype=np.int64) // block), 1)
    q = (p // block * nb_src // nb_tgt) * block + p % block
    return np.minimum(q, n_src - 1)


def group_acceptance_profiles(drafter, prompt_ids, responses: Sequence[Sequence[int]], k: int,
                              group: Hashable = 0, paths: int = 0, spans: Sequence | None = None
                              ) -> list[tuple[np.ndarray, ...]]:
    """Lockstep profiles of one group's responses drafting from a shared (group) drafter (with
    `paths` > 0, each with its tree profile, as `acceptance_profile`). `spans`: per response,
    its tool text (nothing drafted there; a member keeps its request across turns here)."""
    resps = [[int(t) for t in r] for r in responses]
    n = [len(r) for r in resps]
    prof = [_empty_profile(m, paths) for m in n]
    walks = [DecodeWalk(m, spans[i] if spans else None) for i, m in enumerate(n)]
    ids = [(group, i) for i in range(len(resps))]
    live: list[int] = []
    try:
        for i in range(len(resps)):
            drafter.start(ids[i], prompt_ids, group=group)
            live.append(i)
        for i in range(len(resps)):
            if n[i]:
                drafter.extend(ids[i], resps[i][:1])
        p = 1
        while True:
            for i in [i for i in live if n[i] <= p]:   # finished: stays indexed while siblings run
                drafter.stop(ids[i])
                live.remove(i)
            if not live:
                break
            for i in live:
                _judge_at(drafter, ids[i], k, paths, resps[i], p, prof[i], walks[i])
            for i in live:
                drafter.extend(ids[i], resps[i][p:p + 1])
            p += 1
    finally:
        for i in live:
            drafter.stop(ids[i])
    return prof


def after_siblings_profiles(make, prompt_ids, responses: Sequence[Sequence[int]], k: int,
                            group: Hashable = 0, paths: int = 0, spans: Sequence | None = None
                            ) -> list[tuple[np.ndarray, ...]]:
    """Each response's profile drafted after its siblings finished: a fresh drafter (`make()`)
    holding every other response of the group whole (finished: stopped once the response
    itself has started, so they stay indexed), then the response's own walk (`spans` as for
    group_acceptance_profiles)."""
    resps = [[int(t) for t in r] for r in responses]
    out = []
    for i, resp in enumerate(resps):
        others = [j for j in range(len(resps)) if j != i]
        drafter, sibs = make(), [(group, j) for j in others]
        for j, sid in zip(others, sibs):
            drafter.start(sid, prompt_ids, group=group)
            drafter.extend(sid, resps[j])
        prof, me = _empty_profile(len(resp), paths), ("self", group, i)
        drafter.start(me, prompt_ids, group=group)
        try:
            for sid in sibs:
                drafter.stop(sid)
            if resp:
                drafter.extend(me, resp[:1])
            walk = DecodeWalk(len(resp), spans[i] if spans else None)
            for p in range(1, len(resp)):
                _judge_at(drafter, me, k, paths, resp, p, prof, walk)
                drafter.extend(me, resp[p:p + 1])
        finally:
            drafter.stop(me)
        out.append(prof)
    return out


def _record_sharing(cfg: DraftConfig, history: HistoryStore | None) -> Callable[[], Any]:
    """Fresh drafters for one group's after-siblings walks sharing one acceptance record (the
    first one's), as the group's lockstep drafter keeps one record for all its members."""
    first: list[Any] = []

    def make():
        d = build_drafter(cfg, history=history, token_stats=first[0] if first else None)
        if not first:
            first.append(getattr(d, "token_stats", None))
        return d
    return make


def split_history(items: Sequence[Any]) -> tuple[list[Any], list[Any], str]:
    """(the rollout's items: the last RL step, the earlier steps' items in step order, how the
    steps were found). Single-step traces: each group's first half is the earlier step."""
    if has_steps(items):
        last = max(item_step(it) for it in items)
        why = f"RL steps from the traces: step {last} is the rollout, the {len({item_step(i) for i in items}) - 1} earlier the history"
        stepless = sum(1 for it in items if getattr(it, "step", None) is None)
        if stepless:   # e.g. a plain JSONL beside verl's step files: read as the earliest step, said here
            why += f" ({stepless} responses without an RL step, from files of another format, are its earliest part)"
    else:
        items, last, why = emulate_steps(items), 1, EMULATED_STEPS
    earlier = sorted((it for it in items if item_step(it) != last), key=item_step)
    return [it for it in items if item_step(it) == last], earlier, why


def history_store(earlier: Sequence[Any], window: int, budget_bytes: int) -> HistoryStore:
    """A HistoryStore holding the earlier steps' responses (added step by step, file order)."""
    store = HistoryStore(window=window, budget_bytes=budget_bytes)
    for it in earlier:
        store.add(it.prompt_ids, it.response_ids)
    return store


def rule_profile(drafted: np.ndarray, accepted: np.ndarray, rule: LengthRule, context: dict | None = None
                 ) -> tuple[np.ndarray, np.ndarray]:
    """A profile cut by a per-request length rule along the always-speculating walk: at every
    position the rule's current length caps the draft; at the walk's positions the rule then
    learns what that draft got (a draft of 0 tokens teaches it nothing)."""
    n = len(drafted)
    d_out, a_out = np.zeros(n, dtype=np.int16), np.zeros(n, dtype=np.int16)
    state, nxt = rule.start(context), 1
    for p in range(1, n):
        d = min(int(drafted[p]), max(int(rule.length(state, int(drafted[p]) or 1)), 0))
        a = min(int(accepted[p]), d)
        d_out[p], a_out[p] = d, a
        if p == nxt:
            if d:
                rule.update(state, d, a)
            nxt = p + (a + 1 if p + a < n else a)
    return d_out, a_out


def parse_sources(sources: str) -> tuple[bool, bool]:
    """'own', 'group', 'history', 'group+history' (own implied) -> (group, history)."""
    parts = {p for p in sources.split("+") if p}
    if not parts or parts - {"own", "group", "history"}:
        raise UserError(f"--sources {sources!r}: use own, group, history or group+history")
    return "group" in parts, "history" in parts


def profiles_for(pairs: Sequence[tuple[Any, Any]], groups: Sequence[Hashable] | None, k: int, drafter: str,
                 sources: str = "own", history: HistoryStore | None = None,
                 options: dict[str, Any] | None = None, paths: int = 0,
                 done: Callable[[int], None] | None = None, after_siblings: bool = False,
                 turns: Sequence | None = None) -> list[tuple[np.ndarray, ...]]:
    """Profiles of (prompt_ids, response_ids) pairs: each from its own context (`own`), its
    group's siblings as well (`group`; `groups[i]` = pair i's group, members in order), the
    prompt's earlier responses in `history` (`history`), or both. `options`: the drafter's
    keyword options (e.g. a length spec). One drafter serves every pair of an own or history
    profile (its acceptance record, as one serving proposer's). `paths` > 0: each profile also
    carries its `paths`-path tree profile (`acceptance_profile`); SAM drafters only, their
    automata then keep counts. `done(n)`: called as every n more pairs are profiled (progress).
    `after_siblings` (group sources): each response drafted after its siblings finished
    (`after_siblings_profiles`) instead of in lockstep with them. `turns`: per pair, its tool
    spans (prefilled text, profile_walk.py)."""
    group, hist = parse_sources(sources)
    if after_siblings and not group:
        raise ValueError(f"after_siblings needs a group source, not {sources!r}")
    tick = done or (lambda n: None)

    def each(d):   # one drafter over every pair, in order
        out = []
        for i, (p, r) in enumerate(pairs):
            out.append(acceptance_profile(d, p, r, k, req_id=i, paths=paths, spans=turns[i] if turns else None))
            tick(1)
        return out

    opts = dict(options or {})
    if paths:
        if drafter not in SAM_DRAFTERS:
            raise UserError(f"paths={paths} with drafter {drafter!r}: multi-path drafts need a SAM drafter "
                            f"({', '.join(SAM_DRAFTERS)})")
        opts["counts"] = True
    if hist and history is None:
        raise UserError(f"--sources {sources}: a history source needs earlier RL steps (a HistoryStore)")
    if not group and not hist:
        return each(make_drafter(drafter, **opts))
    cfg = DraftConfig(drafter=drafter, k=max(int(k), 1), group=group, history=hist,
                      options=tuple(sorted(opts.items())))
    reason = unsupported_reason(cfg)
    if reason or drafter not in SAM_DRAFTERS:
        raise UserError(f"--sources {sources} with drafter {drafter!r}: {reason or 'these profiles need sam'}; "
                        "use --sources own")
    if not group:
        return each(build_drafter(cfg, history=history))
    members: dict[Hashable, list[int]] = {}
    for i, g in enumerate(groups if groups is not None else range(len(pairs))):
        members.setdefault(g, []).append(i)
    out: list[Any] = [None] * len(pairs)
    for g, idx in members.items():
        prompt = pairs[idx[0]][0]
        for i in idx[1:]:
            if not np.array_equal(np.asarray(pairs[i][0]), np.asarray(prompt)):
                raise UserError(f"--sources group: group {g!r} has responses with different prompts; fix the "
                                "traces' group field or use --sources own")
        resps = [pairs[i][1] for i in idx]
        spans = [turns[i] for i in idx] if turns else None
        profs = (after_siblings_profiles(_record_sharing(cfg, history), prompt, resps, k, group=g,
                                         paths=paths, spans=spans) if after_siblings else
                 group_acceptance_profiles(build_drafter(cfg, history=history), prompt, resps, k, group=g,
                                           paths=paths, spans=spans))
        for i, pr in zip(idx, profs):
            out[i] = pr
        tick(len(idx))
    return out
