"""Trace replay: the acceptance a drafter gets on recorded responses, exactly, without a model.

For greedy decoding the target's next token is the trace's next token, so every draft's
accepted length is known. Per response: the drafter starts with the prompt; the prefill
emits the first response token (no draft, not a decode step); then every decode step
drafts up to k tokens from what is indexed so far, accepts the longest prefix of the draft
that matches the response, emits it plus one bonus token (the target's own next token) and
extends the drafter with the emitted tokens. At the end of a response, draft tokens beyond
its last token are rejected and a step whose draft covers the rest emits no bonus token
(the trace holds no end-of-sequence token), so the decode steps emit response_len - 1 tokens.

Draft sources (`draft_config.DraftConfig`): the response's own prompt and prefix (always), the
GRPO group's sibling responses generated so far (`group`), earlier RL steps' responses to the
same prompt (`history`, SAM only: sam/history.py; a model turn's whole response, `history_entry`),
and a static corpus (`corpus`, SAM only). Group
members advance either `concurrent`ly (every round, all live members draft from the state
after the previous round, then all emitted tokens are added: one batched decode step) or
`sequential`ly (one member after another, in file order). Groups are keyed by (trace file,
group field, RL step). Without group sharing every response is independent.

History replays step by step: the responses of every step are added to a HistoryStore (per
prompt window, memory budget: ReplayEngine.history_window / history_budget_bytes) when the
step is over, and the next step drafts from it. Items carry their RL step (verl dumps); on
traces of a single step `emulate_steps` splits each group into an earlier step (the first
half of its responses, in file order) and a current one (the rest).

Work runs in forked worker processes, one unit per group (group sharing) or per response,
where no draft content crosses units (history: within one step). Units are packed into tasks
of about `task_tokens` response tokens of one RL step, in file order (None: one task per RL
step); SAM's acceptance record (the evidence policy's corrections: statistics, never content)
and a draft budget are shared by a task's units, as one serving proposer shares them, and new
per task. Tasks, hence results, do not depend on the number of workers.
"""

from __future__ import annotations

import dataclasses
import multiprocessing as mp
import os
import signal
from dataclasses import dataclass, field
from typing import Any, ClassVar, Hashable, Sequence

import numpy as np

from samspec_bench.bench.draft_config import (GROUP_ORDERS, SAM_DRAFTERS, SOURCE_NAMES, DraftConfig, build_drafter,
                                              unsupported_reason)
from samspec_bench.bench.engines.base import EngineCapabilities
from samspec_bench.metrics import ResponseSteps
from samspec_bench.sam.automaton import CorpusAutomaton
from samspec_bench.sam.draft_length import parse_length
from samspec_bench.sam.drafters import Drafter, SamDrafter
from samspec_bench.sam.history import HistoryStore

EMULATED_STEPS = ("single-step traces: each group (trace file, group field) is split in file order into an "
                  "earlier step 0 (its first floor(n/2) responses) and a current step 1 (the rest); every "
                  "configuration replays the same split, group sources share within a half, and history drafts "
                  "the current half from the earlier one")
REPLAY_CAPABILITIES = EngineCapabilities(generates=False, needs_model=False, needs_traces=True,
                                         exact_greedy_acceptance=True, draft_sources=SOURCE_NAMES)


# ---------- stepping one response ----------

class _Live:
    """A response being replayed."""

    __slots__ = ("rid", "resp", "n", "pos", "position", "drafted", "accepted", "emitted")

    def __init__(self, rid: Hashable, response_ids: np.ndarray):
        self.rid = rid
        self.resp = response_ids.tolist()
        self.n = len(self.resp)
        self.pos = 0
        self.position: list[int] = []
        self.drafted: list[int] = []
        self.accepted: list[int] = []
        self.emitted: list[int] = []

    def prefill(self, drafter: Drafter) -> None:
        """The prefill forward emits the first response token: no draft, not a decode step."""
        drafter.extend(self.rid, self.resp[:1])
        self.pos = 1

    @property
    def done(self) -> bool:
        return self.pos >= self.n

    def verify(self, draft: list[int], k: int) -> list[int]:
        """Accept the longest matching prefix of `draft`, record the step, return the emitted tokens."""
        d = len(draft)
        if d > k:
            raise RuntimeError(f"the drafter proposed {d} tokens for k={k}")
        resp, pos = self.resp, self.pos
        a = 0
        end = min(d, self.n - pos)
        while a < end and draft[a] == resp[pos + a]:
            a += 1
        e = a + 1 if pos + a < self.n else a
        self.position.append(pos)
        self.drafted.append(d)
        self.accepted.append(a)
        self.emitted.append(e)
        self.pos = pos + e
        return resp[pos: pos + e]

    def result(self, key: str, prompt_len: int) -> ResponseSteps:
        return ResponseSteps(key=key, prompt_len=prompt_len, response_len=self.n, position=self.position,
                             drafted=self.drafted, accepted=self.accepted, emitted=self.emitted)


def replay_response(drafter: Drafter, prompt_ids, response_ids, k: int, *, key: str = "",
                    req_id: Hashable = 0, group: Hashable | None = None) -> ResponseSteps:
    """Replay one response alone (start, every decode step, stop)."""
    live = _Live(req_id, np.asarray(response_ids))
    drafter.start(req_id, prompt_ids, group=group)
    try:
        live.prefill(drafter)
        while not live.done:
            emitted = live.verify(drafter.propose(req_id, k), k)
            drafter.extend(req_id, emitted)
    finally:
        drafter.stop(req_id)
    return live.result(key, len(prompt_ids))


def replay_group(drafter: Drafter, members: Sequence[tuple[str, Any, Any]], k: int,
                 order: str = "concurrent", group: Hashable = 0) -> list[ResponseSteps]:
    """Replay the responses of one group, sharing `drafter` (members: (key, prompt_ids,
    response_ids), in generation order). Every member is started with the prompt first; a
    member is stopped as soon as it finishes."""
    if order not in GROUP_ORDERS:
        raise ValueError(f"group order {order!r}: use one of {', '.join(GROUP_ORDERS)}")
    lives = [_Live(i, np.asarray(resp)) for i, (_, _, resp) in enumerate(members)]
    started = []
    try:
        for live, (_, prompt, _) in zip(lives, members):
            drafter.start(live.rid, prompt, group=group)
            started.append(live.rid)
        if order == "sequential":
            for live in lives:
                live.prefill(drafter)
                while not live.done:
                    drafter.extend(live.rid, live.verify(drafter.propose(live.rid, k), k))
                drafter.stop(live.rid)
                started.remove(live.rid)
        else:
            for live in lives:
                live.prefill(drafter)
            active = []
            for live in lives:
                if live.done:
                    drafter.stop(live.rid)
                    started.remove(live.rid)
                else:
                    active.append(live)
            while active:
                drafts = [drafter.propose(live.rid, k) for live in active]  # one batched step
                still = []
                for live, draft in zip(active, drafts):
                    drafter.extend(live.rid, live.verify(draft, k))
                    if live.done:
                        drafter.stop(live.rid)
                        started.remove(live.rid)
                    else:
                        still.append(live)
                active = still
    finally:
        for rid in started:
            drafter.stop(rid)
    return [live.result(key, len(prompt)) for live, (key, prompt, _) in zip(lives, members)]


# ---------- the engine ----------

def response_key(item: Any) -> str:
    """A response's identity in results: '<trace file>:<line>', '#<n>' added where a line
    holds several responses (lm-eval repeats)."""
    sub = getattr(item, "sub", None)
    return f"{item.source}:{item.line}" if sub is None else f"{item.source}:{item.line}#{sub}"


def group_units(items: Sequence[Any], indices: Sequence[int]) -> list[list[int]]:
    """The given item indices split into groups keyed by (trace file, group, RL step), in
    first-appearance order, members in file order."""
    groups: dict[tuple[str, str, Any], list[int]] = {}
    for i in indices:
        it = items[i]
        groups.setdefault((str(it.source), str(it.group), getattr(it, "step", None)), []).append(i)
    return list(groups.values())


def item_step(item: Any) -> int:
    """An item's RL step for ordering (no step: -1, before every numbered step)."""
    step = getattr(item, "step", None)
    return -1 if step is None else int(step)


def items_by_step(items: Sequence[Any]) -> dict[int, list[int]]:
    out: dict[int, list[int]] = {}   # item indices per RL step (item_step), in file order
    for i, it in enumerate(items):
        out.setdefault(item_step(it), []).append(i)
    return out


def has_steps(items: Sequence[Any]) -> bool:
    """Whether the items span more than one RL step."""
    return len({getattr(it, "step", None) for it in items}) > 1


def emulate_steps(items: Sequence[Any]) -> list[Any]:
    """Single-step traces as two steps (EMULATED_STEPS): each group's first floor(n/2)
    responses in file order become step 0, the rest step 1. Items are dataclass copies."""
    out = list(items)
    for unit in group_units(items, range(len(items))):
        half = len(unit) // 2
        for rank, i in enumerate(unit):
            out[i] = dataclasses.replace(items[i], step=0 if rank < half else 1)
    return out


def root_prompt(item: Any) -> np.ndarray:
    """The prompt a response answers: a later model turn's prompt also holds the response's
    earlier turns (suites/accept/turns.py), its `root_prompt_ids` do not."""
    root = getattr(item, "root_prompt_ids", None)
    return item.prompt_ids if root is None else root


def history_entry(item: Any) -> tuple[np.ndarray, np.ndarray] | None:
    """What a history store keeps of a finished response: (its prompt, the response); a model
    turn's response is kept whole with its first turn, nothing with the later ones."""
    if hasattr(item, "history_response"):
        return None if item.history_response is None else (root_prompt(item), item.history_response)
    return item.prompt_ids, item.response_ids


def check_group_prompts(items: Sequence[Any], unit: Sequence[int]) -> None:
    """Group sharing indexes one prompt per group: members must answer the same prompt (a later
    model turn's prompt holds its own earlier turns: its response's prompt counts)."""
    first = root_prompt(items[unit[0]])
    for i in unit[1:]:
        p = root_prompt(items[i])
        if p.shape != first.shape or not np.array_equal(p, first):
            it = items[i]
            raise ValueError(f"{it.source}:{it.line}: group {it.group!r} has responses with different prompts; "
                             "group sharing needs one prompt per group (fix the group field, or replay without "
                             "group sharing)")


def run_unit(cfg: DraftConfig, items: Sequence[Any], unit: Sequence[int], corpus=None,
             drafter: Drafter | None = None, history: HistoryStore | None = None) -> list[tuple[int, ResponseSteps]]:
    """Replay one unit: a whole group (group sharing; a given `drafter` must be fresh) or responses."""
    if cfg.group:
        check_group_prompts(items, unit)
        # A fresh drafter per group: no draft content crosses groups (Arctic keeps finished responses).
        d = drafter if drafter is not None else build_drafter(cfg, corpus, history)
        members = [(response_key(items[i]), items[i].prompt_ids, items[i].response_ids) for i in unit]
        first = items[unit[0]]
        steps = replay_group(d, members, cfg.k, cfg.order, group=(str(first.source), str(first.group)))
        return list(zip(unit, steps))
    d = drafter if drafter is not None else build_drafter(cfg, corpus, history)
    return [(i, replay_response(d, items[i].prompt_ids, items[i].response_ids, cfg.k,
                                key=response_key(items[i]), req_id=i)) for i in unit]


def run_task(cfg: DraftConfig, items: Sequence[Any], units: list[list[int]], corpus=None,
             drafter: Drafter | None = None, history: HistoryStore | None = None,
             wanted: "set[int] | None" = None) -> list[tuple[int, ResponseSteps]]:
    """Replay one task's units in file order, sharing SAM's acceptance record among them: a
    new record per task (a reused drafter starts one; each group's fresh drafter takes the
    task's). `wanted`: only these responses are returned; with SAM's record the units before
    the last wanted one replay too (what they teach the record is part of the result), so a
    response's result does not depend on which others were asked for (e.g. on --resume)."""
    if wanted is not None:
        last = max((n for n, u in enumerate(units) if any(i in wanted for i in u)), default=-1)
        units = units[:last + 1] if cfg.drafter in SAM_DRAFTERS \
            else [u for u in units if any(i in wanted for i in u)]
    if isinstance(drafter, SamDrafter):
        drafter.reset_statistics()
    shared, out = None, []
    for unit in units:
        d = drafter
        if cfg.group:
            d = build_drafter(cfg, corpus, history, shared)
            if shared is None and isinstance(d, SamDrafter):
                shared = d.token_stats
        out.extend(run_unit(cfg, items, unit, corpus, d, history))
    return out if wanted is None else [(i, rs) for i, rs in out if i in wanted]


# Work shared with forked workers (inherited, not pickled: the corpus automaton is a C object).
_SHARED: dict[str, Any] = {}


def _ignore_interrupt() -> None:
    """A worker's start: Ctrl-C (SIGINT, sent to the whole process group) is the parent's to
    handle. A worker interrupted while writing its result leaves a partial message in the pool's
    result pipe, and the parent's Pool.terminate then waits for the rest of it forever (a hang
    after 'aborted'); the parent terminates its workers itself."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _worker(task: tuple[int, list[list[int]], set[int]]) -> tuple[int, list[tuple[int, ResponseSteps]]]:
    job, units, wanted = task
    cfg = _SHARED["jobs"][job][0]
    items, corpus, history = _SHARED["items"], _SHARED["corpus"], _SHARED.get("history")
    drafter = None if cfg.group else build_drafter(cfg, corpus, history)
    return job, run_task(cfg, items, units, corpus, drafter, history, wanted)


def _budget_pool(cfg: DraftConfig) -> str | None:
    """The name of a SAM drafter's pooled draft budget (evidence:budget=B,pool=NAME), else None."""
    spec = dict(cfg.options).get("length")
    if spec is None or cfg.drafter not in SAM_DRAFTERS:
        return None
    return getattr(parse_length(spec), "pool", None)


def _chunks(items: Sequence[Any], units: list[list[int]], target_tokens: int | None) -> list[list[list[int]]]:
    """Consecutive units packed into tasks of about target_tokens response tokens (None: one task)."""
    if target_tokens is None:
        return [list(units)] if units else []
    tasks, cur, size = [], [], 0
    for u in units:
        cur.append(u)
        size += sum(int(items[i].response_ids.size) for i in u)
        if size >= target_tokens:
            tasks.append(cur)
            cur, size = [], 0
    if cur:
        tasks.append(cur)
    return tasks


@dataclass
class ReplayEngine:
    """`--engine replay`: exact greedy acceptance from recorded responses, no model (the
    acceptance contract of `base.AcceptanceEngine`; it cannot generate).

    workers: processes (0 = one per core, capped at 8; 1 = in this process). Small jobs run
    in-process whatever the setting: forking costs more than they take. history_window /
    history_budget_bytes bound the history source's store (one store per configuration)."""

    workers: int = 0
    corpus: Any = None  # a CorpusAutomaton for the 'corpus' draft source
    corpus_description: dict[str, Any] = field(default_factory=dict)
    name: str = "replay"
    exact: bool = True
    min_parallel_tokens: int = 200_000
    task_tokens: int | None = 40_000   # None: one task per RL step (a record over the whole step)
    history_window: int = 16
    history_budget_bytes: int = 512 << 20
    steps_description: str | None = None   # how items got their RL steps (verl dumps, emulated), for describe
    history_stats: dict[str, dict] = field(default_factory=dict)   # configuration label -> what its store did
    capabilities: ClassVar[EngineCapabilities] = REPLAY_CAPABILITIES

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "exact": self.exact, "workers": self.resolved_workers(),
                "first_token": "from the prefill (not a decode step)",
                "response_end": "draft tokens past the last response token are rejected; no bonus token there",
                "group_key": "(trace file, group field, RL step)", "corpus": self.corpus_description or None,
                "sam_acceptance_record": ("shared by the responses of one RL step, new per step" if self.task_tokens is None
                                          else f"shared by the responses of a task (about {self.task_tokens:,} "
                                          "response tokens of one RL step, file order), new per task")
                + ": statistics, no content",
                "steps": self.steps_description,
                "history": {"window_responses_per_prompt": self.history_window,
                            "budget_bytes": self.history_budget_bytes, "by_configuration": self.history_stats}
                if self.history_stats else None}

    def resolved_workers(self) -> int:
        if self.workers and self.workers > 0:
            return self.workers
        return max(1, min(8, os.cpu_count() or 1))

    def unsupported(self, cfg: DraftConfig) -> str | None:
        reason = unsupported_reason(cfg)
        if reason is None and cfg.corpus and self.corpus is None:
            reason = "the 'corpus' draft source needs a corpus (pass --corpus with other traces)"
        return reason

    def close(self) -> None:
        """Nothing held between runs: the workers live for one `run`."""

    def run(self, items, jobs):
        # tasks per RL step, as history replays: with and without history they match where it is empty
        by_step = items_by_step(items)
        plain = [(j, idx, by_step[step]) for j, (cfg, idx) in enumerate(jobs) if not cfg.history
                 for step in sorted(by_step)]
        yield from self._execute(items, jobs, self._plan(items, jobs, plain), None)
        for j, (cfg, indices) in enumerate(jobs):
            if cfg.history:
                yield from self._run_history(items, jobs, j, indices)

    def _plan(self, items, jobs, selected) -> list[tuple[int, list[list[int]], set[int]]]:
        """Tasks: (job, units, wanted responses). The tasks are cut from every response of
        `universe` (all items, or one RL step's), the same whoever asks, and only those holding
        a wanted response run: a response's result never depends on which others were asked for."""
        plan: list[tuple[int, list[list[int]], set[int]]] = []
        wanted_of: dict[int, set[int]] = {}
        for j, indices, universe in selected:
            wanted = wanted_of.setdefault(j, set(indices))
            units = group_units(items, universe) if jobs[j][0].group else [[i] for i in universe]
            for chunk in _chunks(items, units, self.task_tokens):
                if any(i in wanted for u in chunk for i in u):
                    plan.append((j, chunk, wanted))
        return plan

    def _run_history(self, items, jobs, j, indices):
        """One history configuration, step by step: each step drafts from the store of the
        steps before it; then every response of the step (also those not replayed now, e.g.
        on --resume) is added."""
        cfg = jobs[j][0]
        store = HistoryStore(window=self.history_window, budget_bytes=self.history_budget_bytes)
        wanted = set(indices)
        by_step = items_by_step(items)
        with_history = 0
        for step in sorted(by_step):
            members = by_step[step]
            todo = [i for i in members if i in wanted]
            with_history += sum(1 for i in todo if store.responses(items[i].prompt_ids))
            if todo:
                yield from self._execute(items, jobs, self._plan(items, jobs, [(j, todo, members)]), store)
            for i in members:
                entry = history_entry(items[i])
                if entry is not None:
                    store.add(*entry)
        self.history_stats[cfg.label] = {**store.describe(), "replayed_responses": len(indices),
                                         "replayed_with_history": with_history}

    def _execute(self, items, jobs, plan, history):
        total = sum(int(items[i].response_ids.size) for _, units, _ in plan for u in units for i in u)
        workers = self.resolved_workers()
        # a pooled draft budget (evidence:...,pool=NAME) lives in one process: forked workers would
        # each keep a part of it, and which tasks they got would change the result
        pooled = any(_budget_pool(jobs[j][0]) for j, _, _ in plan)
        if workers <= 1 or total < self.min_parallel_tokens or len(plan) < 2 or pooled \
                or "fork" not in mp.get_all_start_methods():
            yield from self._run_serial(items, jobs, plan, history)
            return
        _SHARED.update(items=items, jobs=list(jobs), corpus=self.corpus, history=history)
        try:
            ctx = mp.get_context("fork")
            with ctx.Pool(processes=min(workers, len(plan)), initializer=_ignore_interrupt) as pool:
                yield from pool.imap_unordered(_worker, plan)
        finally:
            _SHARED.clear()

    def _run_serial(self, items, jobs, plan, history=None):
        drafters: dict[int, Drafter] = {}
        for j, units, wanted in plan:
            cfg = jobs[j][0]
            if not cfg.group and j not in drafters:
                drafters[j] = build_drafter(cfg, self.corpus, history)
            yield j, run_task(cfg, items, units, self.corpus, drafters.get(j), history, wanted)


def build_corpus(items: Sequence[Any]):
    """A static corpus automaton: one document per response (its prompt then its response)."""
    total = sum(int(it.prompt_ids.size + it.response_ids.size) for it in items)
    corpus = CorpusAutomaton(reserve=total + len(items))
    for it in items:
        doc = np.concatenate([it.prompt_ids, it.response_ids]) if it.prompt_ids.size else it.response_ids
        corpus.add_document(doc)
    return corpus

