"""`SamProposer`: SAM as vLLM's `custom_class` drafter (how vLLM calls it, the per-request
options and what is recorded: the package docstring). This module holds the propose loop:
map the rows to request states, feed the step that just ran to the online cost fit, index
each row's new tokens and draft; request_state.py holds the states and records,
runner_view.py what is read from vLLM's model runner.

The call is the same on vLLM's GPU and CPU model runners (the CPU runner inherits it; vLLM
0.22 to 0.33): once per step, after the step's bookkeeping, on the runner's thread, with the
persistent batch's host buffers (numpy) and `slot_mappings` (device tensors on a GPU: never
read here, a read would wait for the device). It is not called at a step where the longest
sequence plus k exceeds max_model_len: vLLM then gives every row k drafts of token 0, and the
next call shows each row more tokens than its sampled ids account for (a gap, handled per
row). Async scheduling would hand the ids over a step late, so the proposer refuses it."""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from samspec_bench.bench.vllm_proposer import runner_view
from samspec_bench.bench.vllm_proposer.online_cost import OnlineDraftCost
from samspec_bench.bench.vllm_proposer.proposer_options import ENGINE_LENGTH, MODES, env_options
from samspec_bench.bench.vllm_proposer.proposer_timing import ProposeTimes
from samspec_bench.bench.vllm_proposer.request_state import RecordStore, RequestState, match_content
from samspec_bench.bench.vllm_proposer.tail_cost import row_costs
from samspec_bench.sam.draft_length import OnlineCost
from samspec_bench.sam.drafters import SamDrafter

ASYNC_REFUSED = ("SamProposer: vLLM's async scheduling is on (scheduler_config.async_scheduling=True); SAM drafts "
                 "from the ids each step sampled, which async scheduling hands over a step late: start vLLM with "
                 "async_scheduling=False (--no-async-scheduling)")


class SamProposer:
    """The vLLM custom_class proposer (see the package docstring)."""

    def __init__(self, vllm_config: Any = None, *, runner: Any = None, num_speculative_tokens: int | None = None,
                 max_model_len: int | None = None):
        sched = getattr(vllm_config, "scheduler_config", None)
        if getattr(sched, "async_scheduling", False) is True:   # vLLM turns it off for custom_class; a fork might not
            raise ValueError(ASYNC_REFUSED)
        spec = getattr(vllm_config, "speculative_config", None)
        self.k = int(num_speculative_tokens or getattr(spec, "num_speculative_tokens", None) or 3)
        mc = getattr(vllm_config, "model_config", None)
        self.max_model_len = int(max_model_len or getattr(mc, "max_model_len", None) or 1 << 30)
        self.runner = runner if runner is not None else runner_view.find_runner()
        self.defaults = {"length": ENGINE_LENGTH, **env_options()}
        self._drafters: dict[tuple, SamDrafter] = {}
        self._states: dict[Any, RequestState] = {}
        self.records = RecordStore()
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
        self.gap_calls = 0                       # calls after vLLM skipped the proposer (rows with a gap)
        self.empty_calls = 0                     # calls without rows (nothing drafted, nothing freed)

    # --- vLLM's interface ---------------------------------------------------------------------

    def load_model(self, *args, **kwargs) -> None:
        """Nothing to load (vLLM calls this for every drafter)."""

    @property
    def request_mapping(self) -> str:
        return "request-id" if runner_view.input_batch(self.runner) is not None else "content"

    def propose(self, sampled_token_ids, num_tokens_no_spec, token_ids_cpu, slot_mappings=None, *,
                num_speculative_tokens: int | None = None, **_) -> list[list[int]]:
        """vLLM's call: one list of sampled ids per row of the persistent batch (empty for a
        prefill chunk), the batch's token counts and token ids (numpy; a CPU tensor is taken
        as numpy). Returns one draft per row, Python ints, at most k each.
        `num_speculative_tokens`: this step's k where the caller gives one (vllm-ascend)."""
        if not len(sampled_token_ids):
            # no rows (async scheduling's shape, refused at start-up): no request is known to have left
            self.empty_calls += 1
            return []
        t0 = time.perf_counter()
        num_tokens_no_spec = runner_view.host_array(num_tokens_no_spec, "num_tokens_no_spec")
        token_ids_cpu = runner_view.host_array(token_ids_cpu, "token_ids_cpu")
        self._online_used = False
        cap = self.k if num_speculative_tokens is None else max(0, min(int(num_speculative_tokens), self.k))
        drafts, decode_rows = self._propose(sampled_token_ids, num_tokens_no_spec, token_ids_cpu, t0, cap)
        drafted = sum(map(len, drafts))
        self._last_call = (t0, decode_rows, drafted)
        self.times.add(time.perf_counter() - t0, len(drafts), drafted, t0,
                       cost=self.cost_fit.cost if self._online_used else None)
        return drafts

    def _observe_step(self, now: float, sampled_token_ids, joined: bool, gap: bool) -> int:
        """Feed the step that just ran to the cost fit: its wall time is the interval since
        the previous call, it verified the rows plus the drafts returned then. Only steps
        whose rows all decoded, in the same number as the previous call (no prefill chunk, no
        request joined or left), and not after a skipped call (`gap`: the interval spans
        several steps, the last one verified vLLM's zero drafts). Returns this call's decode
        rows (-1: a prefill row or a new request: its step prefilled, and may follow an idle
        gap between generate calls)."""
        rows = len(sampled_token_ids)
        decode = rows if rows and not joined and all(len(s) for s in sampled_token_ids) else -1
        last = self._last_call
        if not gap and last is not None and decode > 0 and last[1] == decode:
            cost = self.cost_fit.observe(now - last[0], decode, decode + last[2],
                                         sum(len(s) for s in sampled_token_ids))
            for holder in self._online.values():
                if holder.value != cost:
                    holder.set(cost)
        return decode

    def _propose(self, sampled_token_ids, num_tokens_no_spec, token_ids_cpu, t0: float,
                 cap: int) -> tuple[list[list[int]], int]:
        """The rows mapped to states, the step fed to the cost fit, then the drafts; returns
        them and this call's decode rows (`_observe_step`)."""
        self.num_propose_calls += 1
        req_ids = runner_view.row_request_ids(self.runner)
        drafts: list[list[int]] = []
        seen = set()
        running_next = None   # computed once, when a request with a threshold asks
        gated = stopped = joined = gap = False
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
                elif (st := match_content(self._states, token_ids_cpu[i], n, self._row_hint.get(i))) is not None:
                    seen.add(st.rid)
                drafts.append([])
                continue
            if rid is not None:
                st = self._states.get(rid)
            else:
                st = match_content(self._states, token_ids_cpu[i], n, self._row_hint.get(i))
                if st is not None and st.rid in seen:
                    st = None   # identical contexts in two rows: each gets its own state
            if st is None:
                st = self._new_state(rid, token_ids_cpu[i], n, len(sampled))
                joined = True
            elif n - len(sampled) != st.indexed:
                self._gap(st, n)
                gap = True
            seen.add(st.rid)
            self._row_hint[i] = st.rid
            allow = True
            if st.threshold is not None:
                if running_next is None:
                    running_next = runner_view.running_next(self.runner, sampled_token_ids, num_tokens_no_spec,
                                                            req_ids, self.max_model_len)
                allow = running_next <= st.threshold
                gated, stopped = True, stopped or not allow
            work.append((len(drafts), st, i, n, len(sampled), allow))
            drafts.append([])
        self.gap_calls += gap
        decode_rows = self._observe_step(t0, sampled_token_ids, joined, gap)
        self._track_draining(seen)
        tail = self._draining and work and all(w[1].tail for w in work)
        costs = self._tail_costs(work) if tail else None
        self.tail_priced_calls += costs is not None
        for j, (at, st, i, n, num_sampled, allow) in enumerate(work):
            if costs is not None and st.sam is not None and (holder := self._online.get(id(st.sam[0]))):
                holder.value = costs[j]
            drafts[at] = self._step(st, token_ids_cpu[i], n, num_sampled, allow, cap)
        if gated:
            self.gate["off" if stopped else "on"] += 1
        for rid in [r for r in self._states if r not in seen]:
            self._free(rid)
        self.max_active = max(self.max_active, len(self._states))
        return drafts, decode_rows

    def _gap(self, st: RequestState, n: int) -> None:
        """The row holds more tokens than the last call indexed plus this step's ids: vLLM
        skipped the proposer at least once (the whole batch near max_model_len got k zero
        drafts). The pending draft was verified at a step this proposer did not see, and this
        step verified vLLM's zeros: neither is recorded; the tokens are indexed as usual."""
        st.pending = None
        rec = self.records.running.get(st.key)
        if rec is not None:
            RecordStore.add_gap(rec, max(n - st.indexed, 0))

    def _track_draining(self, rids: set) -> None:
        """A request joined: others may be waiting for a slot; one left and none took its
        place: nothing waits, the batch drains."""
        if rids - self._last_rids:
            self._draining = False
        elif self._last_rids - rids:
            self._draining = True
        self._last_rids = set(rids)

    def _tail_costs(self, work) -> list[float] | None:
        """Per-row costs while the batch drains (tail_cost.py); None: use the batch cost."""
        ab = self.cost_fit.fit() if self.cost_fit.warm else None
        if ab is None or any(st.max_tokens is None for _, st, *_ in work):
            return None
        rows = [(st.max_tokens - (n - st.prompt_len), (st.emitted + 1) / (st.steps + 1),
                 (st.verified + 1) / (st.steps + 1)) for _, st, _, n, _, _ in work]
        return row_costs(*ab, rows, self.cost_fit.max_cost)

    # --- per request ------------------------------------------------------------------------------

    def _options(self, rid) -> dict:
        return runner_view.request_options(self.runner, rid, self.defaults)

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

    def _new_state(self, rid, row, n: int, num_sampled: int) -> RequestState:
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
        plen = runner_view.prompt_len(self.runner, rid, n, num_sampled)
        sam = None
        if mode == "sam":
            d = self._drafter_for(opts)
            d.start(rid, row[:plen], opts.get("group"))
            sam = (d, rid)
        st = RequestState(rid, key, mode, k, sam, plen)
        if opts.get("threshold") is not None:
            st.threshold = int(opts["threshold"])
        st.tail = bool(opts.get("tail"))
        mt = getattr(runner_view.sampling_params(self.runner, rid), "max_tokens", None)
        st.max_tokens = int(mt) if isinstance(mt, int) else None
        if mode == "oracle":
            st.oracle = [int(t) for t in opts.get("oracle", [])]
        if content:
            st.tokens = np.array(row[:plen], dtype=np.int32)
        self._states[rid] = st
        rec = self.records.open(key, vllm_request_id=None if content else str(rid), prompt_len=plen, mode=mode,
                                k=k, group=opts.get("group"))
        if n - num_sampled > plen:
            self._late_start(rec, plen, n, num_sampled)
        return st

    @staticmethod
    def _late_start(rec: dict, plen: int, n: int, num_sampled: int) -> None:
        """A state created after its request's first output token (the prefill's sample, not
        a decode step). After a preemption (the record resumes) the ids are the recompute's
        sample: a decode step without a draft. Otherwise vLLM skipped the call that would
        have created it (near max_model_len): the tokens after the first are unseen, as are
        ids from drafts that were not this proposer's (more than one id)."""
        if rec["resumed"] and num_sampled == 1:
            RecordStore.add_step(rec, n - num_sampled - plen, 0, 0, num_sampled, 0.0)
        else:
            RecordStore.add_gap(rec, num_sampled if rec["resumed"] else n - plen - 1)

    def _step(self, st: RequestState, row, n: int, num_sampled: int, allow: bool = True,
              cap: int | None = None) -> list[int]:
        t0 = time.perf_counter()
        if st.pending is not None:   # the step that verified the pending draft
            pos, drafted, spent = st.pending
            rec = self.records.running.get(st.key)
            if rec is not None:
                RecordStore.add_step(rec, pos, drafted, min(max(num_sampled - 1, 0), drafted), num_sampled, spent)
            st.steps += 1
            st.emitted += num_sampled
            st.verified += 1 + drafted
            st.pending = None
        if n > st.indexed:
            new = row[st.indexed:n]
            if st.sam is not None:
                st.sam[0].extend(st.sam[1], new)
            if st.tokens is not None:
                st.remember(new, n)
            st.follow_oracle(new)
            st.indexed = n
        room = min(st.k, self.k if cap is None else cap, self.max_model_len - n - 1) if allow else 0
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

    def _free(self, rid) -> None:
        st = self._states.pop(rid)
        if st.sam is not None:
            st.sam[0].stop(st.sam[1])
        self.num_freed += 1
        self.records.finish(st.key)

    # --- for the caller (through SamWorkerExtension) ---------------------------------------

    def take_records(self, keys: list | None = None) -> list[dict]:
        """The acceptance records (RecordStore.take): finished requests', or those of `keys`."""
        return self.records.take(keys)

    def memory_bytes(self) -> int:
        return sum(d.memory_bytes() for d in self._drafters.values())

    def describe(self) -> dict[str, Any]:
        return {"class": f"{type(self).__module__}.{type(self).__qualname__}", "num_speculative_tokens": self.k,
                "request_mapping": self.request_mapping,
                "runner": None if self.runner is None else type(self.runner).__qualname__,
                "active_requests": len(self._states), "max_active_requests": self.max_active,
                "freed_requests": self.num_freed, "uncollected_records": len(self.records.finished),
                "propose_calls": self.num_propose_calls, "memory_bytes": self.memory_bytes(),
                "batch_switch": dict(self.gate), "tail_priced_calls": self.tail_priced_calls,
                "calls_after_skipped_steps": self.gap_calls, "empty_calls": self.empty_calls,
                "propose_time_s": self.times.total_s, "propose_time_source": "measured (time.perf_counter)",
                "online_cost": self.cost_fit.describe(),
                "defaults": self.defaults, "automaton": "samspec_bench.sam (compiled core)",
                "drafters": [d.describe() for d in self._drafters.values()], "bad_options": dict(self.bad_options)}
