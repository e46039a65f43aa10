"""Records of a vLLM generate call, rebuilt from what vLLM reports: one `StepRecord` per
engine-core step (from its per-step scheduler stats) and each request's decode steps as
`ResponseSteps` (acceptance by position).

Per-request acceptance by position:
- sam (and the drafter-off arm): recorded by the drafter inside the engine, exact, fetched
  through the worker extension (`LLM.collective_rpc`).
- ngram / suffix: derived from vLLM's per-request metrics (`per_request_spec_decode_metrics=
  "detailed"`: the ordered drafted/accepted counts of the steps that had a draft) and the
  tokens each request emitted at every engine step. Steps that emitted one token without a
  draft cannot be told from steps whose draft was fully rejected; those rejected drafts are
  placed at the earliest single-token step that fits, so positions can be early by at most the
  length of a run of single-token steps (`positions: "reconstructed"` in the record). Totals
  are exact.

No vLLM import here: these read the objects vLLM hands over, so they are tested without it.
"""

from __future__ import annotations

import itertools
import math
import time
from dataclasses import dataclass, field
from typing import Any

from samspec_bench.bench.engines.base import Request, StepRecord
from samspec_bench.metrics import ResponseSteps

STEP_RECORDS = ("one per engine-core step, from vLLM's per-step scheduler stats: num_running / "
                "num_scheduled_tokens / num_prefill_tokens / num_decode_reqs of the step's batch, num_waiting "
                "after it, num_drafted / num_accepted of the drafts verified in it; time_s: wall time between "
                "step outputs in the front end; forward_s: the engine core's execution time of the step; "
                "speculative: the policy's decision on vLLM's running count before the step")


# --- one request while it runs ------------------------------------------------------------------

@dataclass
class LiveRequest:
    """A request of a generate call while vLLM runs it: what it emitted, step by step."""

    req: Request
    index: int
    key: str
    tokens: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    top: list | None = None
    emitted: list[int] = field(default_factory=list)   # tokens per engine step, first = prefill's
    finish: str | None = None
    first_t: float | None = None
    finish_t: float | None = None
    spec_metrics: Any = None
    done: bool = False

    def add(self, completion: Any, t: float) -> int:
        """Take one step's delta output (`CompletionOutput`, at time t since the call started);
        returns the number of tokens it emitted."""
        new = list(completion.token_ids)
        if not new:
            return 0
        if self.first_t is None:
            self.first_t = t
        self.tokens.extend(int(x) for x in new)
        self.emitted.append(len(new))
        if completion.logprobs:
            for tok, lp in zip(new, completion.logprobs):
                entry = lp.get(int(tok))
                self.logprobs.append(float(entry.logprob) if entry is not None else math.nan)
                if self.top is not None:
                    ranked = sorted(((v.rank, t_, v.logprob) for t_, v in lp.items()
                                     if v.rank is not None and v.rank <= self.req.params.logprobs))
                    self.top.append([(int(t_), float(v)) for _, t_, v in ranked])
        return len(new)


# --- engine steps: vLLM's scheduler stats -----------------------------------------------------------

class StepStats:
    """vLLM's per-step scheduler stats, caught at the front end's stat-logger manager."""

    def __init__(self):
        self.rows: list[dict] | None = None   # a list while a generate call collects

    def take(self) -> list[dict]:
        out = self.rows or []
        if self.rows is not None:
            self.rows = []
        return out


def hook_step_stats(llm: Any) -> StepStats | None:
    """Wrap the engine's stat-logger manager so every step's SchedulerStats (batch, tokens,
    drafted / accepted of the step) also reaches us. Iteration details are taken off before
    vLLM's loggers see them (its console logger would print a line per step). None when the
    engine keeps no stats (disable_log_stats)."""
    mgr = getattr(getattr(llm, "llm_engine", None), "logger_manager", None)
    if mgr is None or not callable(getattr(mgr, "record", None)):
        return None
    sink = StepStats()
    orig = mgr.record

    def record(scheduler_stats=None, iteration_stats=None, *args, **kwargs):
        if scheduler_stats is not None:
            if sink.rows is not None:
                sink.rows.append(stat_row(scheduler_stats))
            if getattr(scheduler_stats, "iteration_details", None) is not None:
                scheduler_stats.iteration_details = None
        return orig(scheduler_stats, iteration_stats, *args, **kwargs)

    mgr.record = record
    return sink


def stat_row(ss: Any) -> dict:
    d = getattr(ss, "iteration_details", None)
    sd = getattr(ss, "spec_decoding_stats", None)
    return {"running": int(ss.num_running_reqs), "waiting": int(ss.num_waiting_reqs),
            "details": None if d is None else (int(d.num_ctx_requests), int(d.num_ctx_tokens),
                                               int(d.num_generation_requests), int(d.num_generation_tokens),
                                               float(d.elapsed_ms) / 1e3),
            "drafted": int(sd.num_draft_tokens) if sd is not None else 0,
            "accepted": int(sd.num_accepted_tokens) if sd is not None else 0}


def step_record(step: int, st: dict, time_s: float, speculative: bool, emitted: int, finished: int,
                num_outputs: int) -> StepRecord:
    d = st["details"]
    ctx_reqs, ctx_tok, gen_reqs, gen_tok, elapsed = d if d is not None else (0, 0, num_outputs, 0, 0.0)
    return StepRecord(step=step, time_s=time_s, forward_s=elapsed, num_running=ctx_reqs + gen_reqs,
                      num_waiting=st["waiting"], num_scheduled_tokens=ctx_tok + gen_tok, num_prefill_tokens=ctx_tok,
                      num_decode_reqs=gen_reqs, num_drafted=st["drafted"], num_accepted=st["accepted"],
                      num_emitted=emitted, speculative=speculative, attention="vllm", num_finished=finished)


class StepLog:
    """The StepRecords of one generate call: every front-end step hands over what it saw and
    the scheduler stats that arrived since. `drafting`: a drafter was asked for; `threshold`:
    the batch-size switch (the proposer drafts only when at most T requests were running)."""

    def __init__(self, sink: StepStats | None, *, drafting: bool, threshold: int | None, requests: int):
        self.sink = sink
        self.drafting, self.threshold, self.requests = drafting, threshold, requests
        self.steps: list[StepRecord] = []
        self.finished = 0
        self._prev_running = 0            # vLLM's running count after the previous step (the switch's input)
        self._last = time.perf_counter()
        if sink is not None:
            sink.rows = []                # collect vLLM's per-step scheduler stats while the call runs

    def step(self, now: float, num_outputs: int, emitted: int, finished: int) -> None:
        stats = self.sink.take() if self.sink is not None else []
        if not (num_outputs or emitted):   # a step that scheduled nothing has no details: not a step
            stats = [st for st in stats if st["details"] is not None]
        for j, st in enumerate(stats):
            spec_on = self.drafting and (self.threshold is None or self._prev_running <= self.threshold)
            final = j == len(stats) - 1
            self.steps.append(step_record(len(self.steps), st, (now - self._last) / len(stats), spec_on,
                                          emitted if final else 0, finished if final else 0, num_outputs))
            self._prev_running = st["running"]
        if stats:
            self._last = now
        elif num_outputs or emitted:   # no scheduler stats (log stats off): the outputs only
            self.steps.append(StepRecord(
                step=len(self.steps), time_s=now - self._last, forward_s=0.0, num_running=num_outputs,
                num_waiting=max(0, self.requests - self.finished - num_outputs), num_scheduled_tokens=0,
                num_prefill_tokens=0, num_decode_reqs=num_outputs, num_drafted=0, num_accepted=0,
                num_emitted=emitted, speculative=self.drafting, attention="vllm", num_finished=finished))
            self._last = now
        self.finished += finished

    def close(self) -> None:
        if self.sink is not None:
            self.sink.rows = None


def counter_diff(a, b):
    """a - b for one of vLLM's cumulative counters (a number or a list per position)."""
    if isinstance(a, list):
        b = b if isinstance(b, list) else [0] * len(a)
        return [x - y for x, y in zip(a, b)]
    if a is None:
        return None
    return a - (b or 0)


# --- requests: acceptance by position ---------------------------------------------------------------

def new_raw_counts(k: int) -> dict[str, Any]:
    return {"drafts": 0, "drafted": 0, "accepted": 0, "per_position_accepted": [0] * max(k, 1)}


def add_raw(raw: dict, rec: dict) -> None:
    """Add one drafter record to the totals compared with vLLM's counters."""
    for d, a in zip(rec["drafted"], rec["accepted"]):
        if d > 0:
            raw["drafts"] += 1
            raw["drafted"] += d
            raw["accepted"] += a
            for i in range(a):
                if i < len(raw["per_position_accepted"]):
                    raw["per_position_accepted"][i] += 1


def response_steps(lv: LiveRequest, rec: dict | None, method: str | None, k: int) -> ResponseSteps:
    """A request's decode steps: the drafter's record when there is one (SAM engine), vLLM's
    per-request metrics for its own methods, else one token per step as emitted."""
    if rec is not None:
        return steps_from_record(lv, rec)
    if method in ("ngram", "suffix"):
        return steps_from_vllm_metrics(lv, lv.spec_metrics, k)
    return plain_steps(lv)


def clip_steps(lv: LiveRequest, position, drafted, accepted, emitted) -> ResponseSteps:
    """Steps cut so that they emit exactly the response's tokens after the first (a step whose
    tokens ran past a stop token or max_tokens emitted fewer than it accepted)."""
    want = max(len(lv.tokens) - 1, 0)
    P, D, A, E = [], [], [], []
    total = 0
    for p, d, a, e in zip(position, drafted, accepted, emitted):
        if total >= want:
            break
        e = min(e, want - total)
        P.append(p)
        D.append(d)
        A.append(min(a, e))
        E.append(e)
        total += e
    return ResponseSteps(key=lv.key, prompt_len=len(lv.req.prompt_ids), response_len=len(lv.tokens),
                         position=P, drafted=D, accepted=A, emitted=E)


def steps_from_record(lv: LiveRequest, rec: dict) -> ResponseSteps:
    return clip_steps(lv, rec["position"], rec["drafted"], rec["accepted"], rec["emitted"])


def plain_steps(lv: LiveRequest) -> ResponseSteps:
    em = lv.emitted[1:]
    pos = list(itertools.accumulate([1] + em[:-1])) if em else []
    return clip_steps(lv, pos, [0] * len(em), [0] * len(em), em)


def steps_from_vllm_metrics(lv: LiveRequest, m: Any, k: int) -> ResponseSteps:
    """ngram / suffix: vLLM's ordered (drafted, accepted) of the steps with a draft, aligned
    with the tokens emitted at every engine step (see the module docstring)."""
    em = lv.emitted[1:]
    if m is None or not getattr(m, "per_step_drafted", None):
        return plain_steps(lv)
    sd, sa = list(m.per_step_drafted), list(m.per_step_accepted)
    j = 0
    pos, D, A, E = [], [], [], []
    p = 1
    last = len(em) - 1
    for t, e in enumerate(em):
        # a step with >= 2 tokens had a draft; a fully rejected draft is placed at the earliest
        # single-token step; the final step may have been cut by a stop token / max_tokens
        if j < len(sd) and (e >= 2 or sa[j] == 0 or t == last):
            d, a = sd[j], sa[j]
            j += 1
        else:
            d, a = 0, 0
        pos.append(p)
        D.append(d)
        A.append(a)
        E.append(e)
        p += e
    return clip_steps(lv, pos, D, A, E)
