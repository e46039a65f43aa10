"""SAM as a vLLM drafter: `speculative_config={"method": "custom_class", "model":
"samspec_bench.bench.engines.vllm.drafter.SamProposer", "num_speculative_tokens": k}`.

vLLM (0.32, v1 model runner) builds the class as `SamProposer(vllm_config)` inside the model
runner and, after every step's bookkeeping, calls

    propose(sampled_token_ids, num_tokens_no_spec, token_ids_cpu, slot_mappings=...)

with one entry per row of the persistent batch: `sampled_token_ids[i]` are the tokens row i
emitted this step (empty for a prefill chunk), `token_ids_cpu[i, :num_tokens_no_spec[i]]` its
whole context. No request ids are passed, and rows move: a finished request's row is filled
by the last row when the batch is condensed, a new request takes any free row.

Per-request state is therefore keyed by the request id of the row, read from the model
runner's input batch (`runner.input_batch.req_ids[i]`, the same lookup vLLM's own suffix
proposer makes); the runner is the object that constructs this class. Where no runner can
be found (another runner class, a unit test), rows are matched to states by their token
content (`content` mapping): a state is reused only when the row's first tokens are exactly
the tokens the state has indexed, so a moved or replaced row can never draft from another
request's automaton. A request whose row is gone at a propose call has finished (or was
preempted) and its automaton is freed at once; a preempted request that comes back is
re-indexed from its tokens.

Per-request options ride on `SamplingParams.extra_args["samspec"]` (a dict):
  key       the caller's id for the request's acceptance record (default: vLLM's id)
  mode      "sam" (default), "none" (never draft: the no-speculation arm with the same
            scheduling) or "oracle" (draft the given continuation: teacher-forced
            verification for op-equivalence)
  k         draft at most k tokens (<= num_speculative_tokens)
  group     GRPO group key: members share one automaton (SamDrafter group sharing)
  min_match no draft when the match is shorter (SAM-Decoding's l_threshold)
  length    the draft length policy (`SamDrafter(length=...)`, sam/draft_length.py): "fixed"
            (SAM-Decoding's baseline: up to k whenever any suffix matches), "evidence" or
            "evidence:cost=0.2,..." (as many tokens as the evidence pays for), "evidence:cost=auto"
            (the cost fitted online from this engine's step times, below); default:
            ENGINE_LENGTH, "evidence:cost=auto": inside an engine the verify cost is measured,
            not assumed (the replay default's fixed cost stands in where no step is timed). A
            spec the drafter refuses falls back to the default and is listed in
            `describe()["bad_options"]` (the engine keeps running).
  oracle    the continuation to draft in mode "oracle"
  threshold the seed's batch-size switch: draft only when at most this many requests stay in
            the batch for the next step (the rows minus the requests this step finishes by
            max_tokens, a stop token or max_model_len; stop strings end a request in the front
            end later and are not seen here); no draft for any row otherwise
  tail      true: while the batch drains (a request left and none joined since), price each
            cost=auto row's draft tokens by its chance to be the request that finishes last
            (tail_cost.py: its steps left to max_tokens), when every row asks for it; the
            batch's cost otherwise. Opt-in
Engine-wide defaults come from the environment variable SAMSPEC_VLLM_DRAFTER (JSON with the
same keys), so a vLLM user who cannot set extra_args still configures the drafter.

Per-request acceptance by position is recorded here, in the engine's process: for every
decode step of a request, its response position when drafting, tokens drafted, accepted and
emitted (accepted = emitted - 1 of the next step's sampled tokens), and propose_s: the seconds
this proposer spent on the request's row for that step's draft (indexing its new tokens and
drafting; measured with time.perf_counter, 0.0 where no draft was proposed). Every propose
call is timed as a whole too (`ProposeTimes`: per call, with the rows and drafted tokens):
a CPU drafter runs inside vLLM's step, so its time adds to the step's wall time.

The interval between two propose calls is one engine step's wall time, and the step verified
the rows plus the drafts returned at the earlier call: `cost_fit` (online_cost.OnlineDraftCost)
fits step time = a + b * verified tokens over the steps without prefill or batch change and
sets the cost of every drafter whose length spec says `cost=auto` (the evidence policy's
marginal cost of a draft token, in decode steps); the cost in force is recorded per call
(`ProposeTimes.cost`) and the fit is in `describe()["online_cost"]`. `SamWorkerExtension`
(pass `worker_extension_cls="samspec_bench.bench.engines.vllm.drafter.SamWorkerExtension"`) lets the
caller fetch the records and the drafter's description through `LLM.collective_rpc`.

One module (over 500 lines) because vLLM builds the proposer by this module's path in its own
process, and the request bookkeeping, the records, the online cost feed and the worker
extension that reads them all work on the proposer's per-request state.
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any

import numpy as np

from samspec_bench.bench.engines.vllm.online_cost import OnlineDraftCost
from samspec_bench.bench.engines.vllm.proposer_timing import ProposeTimes, wrap_propose
from samspec_bench.bench.engines.vllm.tail_cost import row_costs
from samspec_bench.sam.draft_length import OnlineCost, parse_length
from samspec_bench.sam.drafters import SamDrafter

EXTRA_KEY = "samspec"
# The draft length policy of a request that names none (SAMSPEC_VLLM_DRAFTER may set another):
# the evidence policy with the cost fitted from this engine's step times (`cost_fit`).
ENGINE_LENGTH = "evidence:cost=auto"
ENV_OPTIONS = "SAMSPEC_VLLM_DRAFTER"
MODES = ("sam", "none", "oracle")
CLASS_PATH = "samspec_bench.bench.engines.vllm.drafter.SamProposer"
LEGACY_CLASS_PATH = "samspec_bench.bench.vllm_drafter.SamProposer"  # the same class, re-exported
EXTENSION_PATH = "samspec_bench.bench.engines.vllm.drafter.SamWorkerExtension"
MAX_FINISHED_RECORDS = 100_000  # records nobody collects are dropped beyond this (oldest first)


def _find_runner() -> Any:
    """The model runner constructing us: the nearest caller frame whose `self` is a model runner
    (vLLM's GPUModelRunner and its subclasses: CPU, XPU, NPU). Its persistent batch
    (`input_batch`) and request table (`requests`) are created after the drafter, so they are
    looked up at propose time."""
    frame = sys._getframe(1)
    depth = 0
    while frame is not None and depth < 16:
        obj = frame.f_locals.get("self")
        if (obj is not None and obj is not frame.f_locals.get("__class__") and hasattr(obj, "speculative_config")
                and callable(getattr(type(obj), "_update_states", None))):
            return obj
        frame = frame.f_back
        depth += 1
    return None


class _ReqState:
    __slots__ = ("rid", "key", "mode", "k", "sam", "prompt_len", "indexed", "pending", "oracle",
                 "on_track", "tokens", "threshold", "max_tokens", "steps", "emitted", "verified", "tail")

    def __init__(self, rid, key, mode, k, sam, prompt_len):
        self.rid = rid
        self.key = key
        self.mode = mode
        self.k = k
        self.sam = sam            # (SamDrafter, its request key) or None
        self.prompt_len = prompt_len
        self.indexed = 0          # context tokens known to the drafter
        self.pending = None       # (position, drafted, seconds to index and draft) of the draft awaiting verification
        self.oracle = None
        self.on_track = True
        self.tokens = None        # content mapping: the indexed tokens (np.int32)
        self.threshold = None     # batch-size switch: draft only when the next batch is <= this
        self.max_tokens = None    # the request's max_tokens (no draft past its last token)
        self.steps = self.emitted = self.verified = 0   # decode steps seen, tokens they emitted and verified
        self.tail = False         # option "tail": price drafts by the row's chance to finish last (tail_cost.py)


class SamProposer:
    """The vLLM custom_class proposer (see the module docstring)."""

    def __init__(self, vllm_config: Any = None, *, runner: Any = None, num_speculative_tokens: int | None = None,
                 max_model_len: int | None = None):
        spec = getattr(vllm_config, "speculative_config", None)
        self.k = int(num_speculative_tokens or getattr(spec, "num_speculative_tokens", None) or 3)
        mc = getattr(vllm_config, "model_config", None)
        self.max_model_len = int(max_model_len or getattr(mc, "max_model_len", None) or 1 << 30)
        self.runner = runner if runner is not None else _find_runner()
        self.defaults = {"length": ENGINE_LENGTH, **_env_options()}
        self._drafters: dict[tuple, SamDrafter] = {}
        self._states: dict[Any, _ReqState] = {}
        self._records: dict[Any, dict] = {}      # key -> record, requests still running
        self._finished: dict[Any, dict] = {}     # key -> record, finished (until collected)
        self._next_content_id = 0
        self._row_hint: dict[int, Any] = {}
        self.num_propose_calls = 0
        self.num_freed = 0
        self.max_active = 0
        self.gate = {"on": 0, "off": 0}          # propose calls the batch-size switch let draft / stopped
        self.times = ProposeTimes()              # this proposer's own time per call (it runs inside the step)
        self.bad_options: dict[str, str] = {}    # options refused (the drafter's default was used instead)
        self.cost_fit = OnlineDraftCost()        # a draft token's verify cost from this engine's step times
        self._online: dict[int, OnlineCost] = {}  # id(drafter) -> its cost=auto holder, set from cost_fit
        self._online_used = False                # a row drafted with cost=auto in this call
        self._last_call: tuple[float, int, int] | None = None   # (start, decode rows or -1, drafted)
        self._last_rids: set = set()             # the requests of the previous call
        self._draining = False                   # a request left and none joined since: the batch drains
        self.tail_priced_calls = 0               # calls whose rows were priced by option tail

    # --- vLLM's interface ---------------------------------------------------------------------

    def load_model(self, *args, **kwargs) -> None:
        """Nothing to load (vLLM calls this for every drafter)."""

    @property
    def request_mapping(self) -> str:
        return "request-id" if self._input_batch() is not None else "content"

    def _input_batch(self):
        return getattr(self.runner, "input_batch", None) if self.runner is not None else None

    def propose(self, sampled_token_ids, num_tokens_no_spec, token_ids_cpu, slot_mappings=None, **_) -> list[list[int]]:
        t0 = time.perf_counter()
        decode_rows = self._observe_step(t0, sampled_token_ids)
        self._online_used = False
        drafts = self._propose(sampled_token_ids, num_tokens_no_spec, token_ids_cpu)
        drafted = sum(map(len, drafts))
        self._last_call = (t0, decode_rows, drafted)
        self.times.add(time.perf_counter() - t0, len(drafts), drafted, t0,
                       cost=self.cost_fit.cost if self._online_used else None)
        return drafts

    def _observe_step(self, now: float, sampled_token_ids) -> int:
        """Feed the step that just ran to the cost fit: its wall time is the interval since
        the previous call, it verified the rows plus the drafts returned then. Only steps
        whose rows all decoded, in the same number as the previous call (no prefill chunk, no
        request joined or left). Returns this call's decode rows (-1: a prefill row or a new
        request: its step prefilled, and may follow an idle gap between generate calls)."""
        rows = len(sampled_token_ids)
        decode = rows if rows and all(len(s) for s in sampled_token_ids) else -1
        batch = self._input_batch()
        if decode > 0 and batch is not None and any(r is not None and r not in self._states
                                                     for r in list(batch.req_ids)[:rows]):
            decode = -1
        last = self._last_call
        if last is not None and decode > 0 and last[1] == decode:
            cost = self.cost_fit.observe(now - last[0], decode, decode + last[2],
                                         sum(len(s) for s in sampled_token_ids))
            for holder in self._online.values():
                if holder.value != cost:
                    holder.set(cost)
        return decode

    def _propose(self, sampled_token_ids, num_tokens_no_spec, token_ids_cpu) -> list[list[int]]:
        self.num_propose_calls += 1
        batch = self._input_batch()
        req_ids = list(batch.req_ids) if batch is not None else None
        drafts: list[list[int]] = []
        seen = set()
        running_next = None   # computed once, when a request with a threshold asks
        gated = stopped = False
        work = []   # (index in drafts, state, row, n, sampled, allow): drafted once every row is known
        for i, sampled in enumerate(sampled_token_ids):
            n = int(num_tokens_no_spec[i])
            rid = req_ids[i] if req_ids is not None and i < len(req_ids) else None
            if rid is None and req_ids is not None:
                drafts.append([])
                continue
            if not len(sampled):
                # a prefill chunk: nothing sampled, nothing to draft
                if rid is not None:
                    seen.add(rid)
                elif (st := self._match_content(token_ids_cpu[i], n, self._row_hint.get(i))) is not None:
                    seen.add(st.rid)
                drafts.append([])
                continue
            if rid is not None:
                st = self._states.get(rid)
            else:
                st = self._match_content(token_ids_cpu[i], n, self._row_hint.get(i))
                if st is not None and st.rid in seen:
                    st = None   # identical contexts in two rows: each gets its own state
            if st is None:
                st = self._new_state(rid, token_ids_cpu[i], n, len(sampled))
            seen.add(st.rid)
            self._row_hint[i] = st.rid
            allow = True
            if st.threshold is not None:
                if running_next is None:
                    running_next = self._running_next(sampled_token_ids, num_tokens_no_spec, req_ids)
                allow = running_next <= st.threshold
                gated, stopped = True, stopped or not allow
            work.append((len(drafts), st, i, n, len(sampled), allow))
            drafts.append([])
        rids = set(seen)
        if rids - self._last_rids:      # a request joined: others may be waiting for a slot
            self._draining = False
        elif self._last_rids - rids:    # one left and none took its place: nothing waits
            self._draining = True
        self._last_rids = rids
        tail = self._draining and work and all(w[1].tail for w in work)
        costs = self._tail_costs(work) if tail else None
        self.tail_priced_calls += costs is not None
        for j, (at, st, i, n, num_sampled, allow) in enumerate(work):
            if costs is not None and st.sam is not None and (holder := self._online.get(id(st.sam[0]))):
                holder.value = costs[j]
            drafts[at] = self._step(st, token_ids_cpu[i], n, num_sampled, allow)
        if gated:
            self.gate["off" if stopped else "on"] += 1
        for rid in [r for r in self._states if r not in seen]:
            self._free(rid)
        self.max_active = max(self.max_active, len(self._states))
        return drafts

    def _tail_costs(self, work) -> list[float] | None:
        """Per-row costs while the batch drains (tail_cost.py); None: use the batch cost."""
        ab = self.cost_fit.fit() if self.cost_fit.warm else None
        if ab is None or any(st.max_tokens is None for _, st, *_ in work):
            return None
        rows = [(st.max_tokens - (n - st.prompt_len), (st.emitted + 1) / (st.steps + 1),
                 (st.verified + 1) / (st.steps + 1)) for _, st, _, n, _, _ in work]
        return row_costs(*ab, rows, self.cost_fit.max_cost)

    def _running_next(self, sampled_token_ids, num_tokens_no_spec, req_ids) -> int:
        """Requests that stay in the batch for the next step: this step's rows minus those it
        finishes (the batch-size switch's count, as the scheduler's running count before the
        next step's admissions)."""
        count = 0
        for i, sampled in enumerate(sampled_token_ids):
            rid = req_ids[i] if req_ids is not None and i < len(req_ids) else None
            if req_ids is not None and rid is None:
                continue
            if not self._finishes(rid, sampled, int(num_tokens_no_spec[i])):
                count += 1
        return count

    def _finishes(self, rid, sampled, n: int) -> bool:
        """Does this step finish the request (vLLM's stop check: max_model_len, max_tokens, EOS
        unless ignore_eos, stop_token_ids)? Needs the runner's request table; without it only
        max_model_len is known."""
        if n >= self.max_model_len:
            return True
        sp = self._sampling_params(rid)
        if sp is None or not len(sampled):
            return False
        max_tokens = getattr(sp, "max_tokens", None)
        if max_tokens is not None and n - self._prompt_len(rid, n, len(sampled)) >= max_tokens:
            return True
        stops = {int(t) for t in (getattr(sp, "stop_token_ids", None) or ())}
        eos = getattr(sp, "eos_token_id", None)
        if eos is not None:
            stops.add(int(eos))
        return bool(stops) and any(int(t) in stops for t in sampled)

    def _sampling_params(self, rid) -> Any:
        reqs = getattr(self.runner, "requests", None) if self.runner is not None else None
        return getattr(reqs.get(rid), "sampling_params", None) if reqs is not None and rid is not None else None

    # --- per request ------------------------------------------------------------------------------

    def _options(self, rid) -> dict:
        opts = dict(self.defaults)
        reqs = getattr(self.runner, "requests", None) if self.runner is not None else None
        if reqs is not None and rid in reqs:
            sp = getattr(reqs[rid], "sampling_params", None)
            extra = getattr(sp, "extra_args", None) or {}
            if isinstance(extra.get(EXTRA_KEY), dict):
                opts.update(extra[EXTRA_KEY])
        return opts

    def _prompt_len(self, rid, n: int, num_sampled: int) -> int:
        batch = self._input_batch()
        if batch is not None and rid is not None:
            idx = batch.req_id_to_index.get(rid)
            if idx is not None:
                return int(batch.num_prompt_tokens[idx])
        # content mapping: a new state is created at its first sample, right after the prefill
        return max(n - num_sampled, 0)

    def _drafter_for(self, opts: dict) -> SamDrafter:
        """One SamDrafter per configuration (group sharing, min_match, draft length spec)."""
        length = opts.get("length")
        key = (bool(opts.get("group") is not None), int(opts.get("min_match", 1)), length)
        d = self._drafters.get(key)
        if d is None:
            try:
                d = SamDrafter(group_sharing=key[0], l_threshold=key[1], length=length)
            except ValueError as e:   # a bad spec in a request's extra_args must not stop the engine
                self.bad_options[f"length={length!r}"] = str(e)
                return self._drafter_for({**opts, "length": self.defaults.get("length")})
            self._drafters[key] = d
            if isinstance(getattr(d.length, "cost", None), OnlineCost):   # spec cost=auto: fed by cost_fit
                d.length.cost.set(self.cost_fit.cost)
                self._online[id(d)] = d.length.cost
        return d

    def _new_state(self, rid, row, n: int, num_sampled: int) -> _ReqState:
        content = rid is None
        if content:
            rid = ("content", self._next_content_id)
            self._next_content_id += 1
        opts = self._options(rid)
        mode = str(opts.get("mode", "sam"))
        if mode not in MODES:
            mode = "sam"
        k = max(0, min(int(opts.get("k", self.k)), self.k))
        key = opts.get("key", rid if not content else f"content-{rid[1]}")
        plen = self._prompt_len(rid, n, num_sampled)
        sam = None
        if mode == "sam":
            d = self._drafter_for(opts)
            d.start(rid, row[:plen], opts.get("group"))
            sam = (d, rid)
        st = _ReqState(rid, key, mode, k, sam, plen)
        st.indexed = plen
        if opts.get("threshold") is not None:
            st.threshold = int(opts["threshold"])
        st.tail = bool(opts.get("tail"))
        mt = getattr(self._sampling_params(rid), "max_tokens", None)
        st.max_tokens = int(mt) if isinstance(mt, int) else None
        if mode == "oracle":
            st.oracle = [int(t) for t in opts.get("oracle", [])]
        if content:
            st.tokens = np.array(row[:plen], dtype=np.int32)
        self._states[rid] = st
        rec = self._records.get(key)
        if rec is None and key in self._finished:   # preempted, now back
            rec = self._records[key] = self._finished.pop(key)
            rec["finished"] = False
            rec["resumed"] += 1
        elif rec is not None:
            rec["resumed"] += 1
        if rec is None:
            rec = self._records[key] = {"key": key, "vllm_request_id": None if content else str(rid),
                                        "prompt_len": plen, "mode": mode, "k": k, "group": opts.get("group"),
                                        "position": [], "drafted": [], "accepted": [], "emitted": [],
                                        "propose_s": [], "resumed": 0}
        # Tokens sampled before this state existed: the first output token (the prefill's
        # sample, not a decode step) or, after a preemption, the recompute's sample (a decode
        # step without a draft).
        before = n - num_sampled
        if before > plen:
            rec["position"].append(before - plen)
            rec["propose_s"].append(0.0)   # no draft was proposed for this step
            rec["drafted"].append(0)
            rec["accepted"].append(0)
            rec["emitted"].append(num_sampled)
        return st

    def _step(self, st: _ReqState, row, n: int, num_sampled: int, allow: bool = True) -> list[int]:
        t0 = time.perf_counter()
        rec = self._records.get(st.key)
        if st.pending is not None and rec is not None:
            pos, drafted, spent = st.pending
            rec["propose_s"].append(spent)
            rec["position"].append(pos)
            rec["drafted"].append(drafted)
            rec["accepted"].append(min(max(num_sampled - 1, 0), drafted))
            rec["emitted"].append(num_sampled)
        if st.pending is not None:   # the step that verified the pending draft
            st.steps += 1
            st.emitted += num_sampled
            st.verified += 1 + st.pending[1]
            st.pending = None
        if n > st.indexed:
            new = row[st.indexed:n]
            if st.sam is not None:
                st.sam[0].extend(st.sam[1], new)
            if st.tokens is not None:
                if n > st.tokens.size:
                    grown = np.empty(max(2 * st.tokens.size, n, 64), dtype=np.int32)
                    grown[: st.indexed] = st.tokens[: st.indexed]
                    st.tokens = grown
                st.tokens[st.indexed:n] = new
            if st.oracle is not None and st.on_track:
                start = st.indexed - st.prompt_len
                want = st.oracle[start: start + len(new)]
                st.on_track = len(want) == len(new) and all(int(a) == b for a, b in zip(new, want))
            st.indexed = n
        room = min(st.k, self.max_model_len - n - 1) if allow else 0
        if st.max_tokens is not None:   # the last token comes from the target: draft at most max_tokens - output - 1
            room = min(room, st.max_tokens - (n - st.prompt_len) - 1)
        draft: list[int] = []
        if room > 0:
            if st.mode == "sam":
                draft = st.sam[0].propose(st.sam[1], room)
                self._online_used = self._online_used or id(st.sam[0]) in self._online
            elif st.mode == "oracle" and st.on_track:
                pos = n - st.prompt_len
                draft = st.oracle[pos: pos + room]
        out = [int(t) for t in draft]
        st.pending = (n - st.prompt_len, len(out), time.perf_counter() - t0)
        return out

    def _match_content(self, row, n: int, hint=None) -> _ReqState | None:
        """Content mapping: a state whose indexed tokens are exactly the row's first tokens (the
        row's state of the last call is tried first). Two requests with identical contexts have
        identical automata, so either may serve either."""
        cands = [self._states[hint]] if hint in self._states else []
        for st in cands + list(self._states.values()):
            m = st.indexed
            if st.tokens is not None and m <= n and np.array_equal(row[:m], st.tokens[:m]):
                return st
        return None

    def _free(self, rid) -> None:
        st = self._states.pop(rid)
        if st.sam is not None:
            st.sam[0].stop(st.sam[1])
        self.num_freed += 1
        rec = self._records.pop(st.key, None)
        if rec is not None:
            rec["finished"] = True
            self._finished[st.key] = rec
            while len(self._finished) > MAX_FINISHED_RECORDS:
                self._finished.pop(next(iter(self._finished)))

    # --- for the caller (through SamWorkerExtension) ---------------------------------------

    def take_records(self, keys: list | None = None) -> list[dict]:
        """Records of requests that left the batch (finished), removed from the store. With
        `keys`, those requests' records, also of requests still in the batch: vLLM removes a
        finished request from its batch only at its next step, so the last requests of a
        generate call are still there when it returns. A record is handed out once."""
        if keys is None:
            out = list(self._finished.values())
            self._finished.clear()
            return out
        out = []
        for k in keys:
            if k in self._finished:
                out.append(self._finished.pop(k))
            elif k in self._records:   # still in the batch (vLLM frees it at its next step)
                out.append(dict(self._records.pop(k), finished=False))
        return out

    def memory_bytes(self) -> int:
        return sum(d.memory_bytes() for d in self._drafters.values())

    def describe(self) -> dict[str, Any]:
        return {"class": f"{type(self).__module__}.{type(self).__qualname__}", "num_speculative_tokens": self.k,
                "request_mapping": self.request_mapping,
                "runner": None if self.runner is None else type(self.runner).__qualname__,
                "active_requests": len(self._states), "max_active_requests": self.max_active,
                "freed_requests": self.num_freed, "uncollected_records": len(self._finished),
                "propose_calls": self.num_propose_calls, "memory_bytes": self.memory_bytes(),
                "batch_switch": dict(self.gate), "tail_priced_calls": self.tail_priced_calls,
                "propose_time_s": self.times.total_s, "propose_time_source": "measured (time.perf_counter)",
                "online_cost": self.cost_fit.describe(),
                "defaults": self.defaults, "automaton": "samspec_bench.sam (compiled core)",
                "drafters": [d.describe() for d in self._drafters.values()], "bad_options": dict(self.bad_options)}


def _env_options() -> dict:
    raw = os.environ.get(ENV_OPTIONS)
    if not raw:
        return {}
    try:
        opts = json.loads(raw)
    except ValueError:
        raise ValueError(f"{ENV_OPTIONS}={raw!r}: not JSON; give an object such as "
                         '{"min_match": 2, "k": 3}') from None
    if not isinstance(opts, dict):
        raise ValueError(f"{ENV_OPTIONS}: expected a JSON object")
    if opts.get("length") is not None:
        try:
            parse_length(opts["length"])
        except ValueError as e:
            raise ValueError(f"{ENV_OPTIONS}: {e}") from None
    if not isinstance(opts.get("tail", False), bool):
        raise ValueError(f"{ENV_OPTIONS}: tail {opts['tail']!r}: give true or false")
    t = opts.get("threshold")
    if t is not None and (not isinstance(t, int) or isinstance(t, bool) or t < 0):
        raise ValueError(f"{ENV_OPTIONS}: threshold {t!r}: give an integer >= 0 (or leave it out: always draft)")
    return opts


class SamWorkerExtension:
    """Methods added to vLLM's worker (`worker_extension_cls`), called by name through
    `LLM.collective_rpc`. Workers without a drafter (not the last pipeline stage) answer None."""

    def _samspec_drafter(self):
        runner = getattr(self, "model_runner", None)
        return getattr(runner, "drafter", None) if runner is not None else None

    def samspec_drafter_info(self) -> dict | None:
        runner = getattr(self, "model_runner", None)
        d = self._samspec_drafter()
        spec = getattr(runner, "speculative_config", None)
        info = {"runner": type(runner).__qualname__ if runner is not None else None,
                "method": getattr(spec, "method", None),
                "drafter_class": None if d is None else f"{type(d).__module__}.{type(d).__qualname__}",
                "async_scheduling": bool(getattr(runner, "use_async_scheduling", False))}
        if d is not None and hasattr(d, "describe"):
            info["drafter"] = d.describe()
        return info

    def samspec_time_proposer(self) -> bool:
        """Time the drafter's propose calls: SamProposer times itself; another drafter (vLLM's
        ngram, suffix) gets a timing wrapper. False when the worker has no drafter."""
        d = self._samspec_drafter()
        if d is None:
            return False
        return isinstance(getattr(d, "times", None), ProposeTimes) or wrap_propose(d) is not None

    def samspec_take_propose_times(self) -> dict | None:
        """The drafter's per-call propose times since the last take (ProposeTimes.take)."""
        d = self._samspec_drafter()
        times = getattr(d, "times", None) if d is not None else None
        if not isinstance(times, ProposeTimes):
            times = getattr(d, "_samspec_times", None)
        return times.take() if isinstance(times, ProposeTimes) else None

    def samspec_take_records(self, keys: list | None = None) -> list[dict] | None:
        d = self._samspec_drafter()
        if d is None or not hasattr(d, "take_records"):
            return None
        return d.take_records(keys)
