"""The reference engine (`--engine reference`): PyTorch + transformers on any torch device.

It runs the decoder of a Hugging Face causal LM of the Llama / Mistral / Qwen2 / Qwen3
families with the model's own weights and modules (embeddings, RMSNorm, the rotary embedding
built from the HF rope config, q/k norms where the model has them, MLP, tied or untied
lm_head), but its own attention over a paged KV cache (`kv_cache.py`, `attention.py`), and
schedules requests like vLLM's v1 engine:

- continuous batching: requests join the running batch when a slot (`max_num_seqs`), token
  budget (`max_num_batched_tokens`, chunked prefill) and KV blocks are free, and leave it when
  they finish; a running request that cannot get a block preempts the latest admitted one,
  which is recomputed later (vLLM's recompute preemption);
- per-request sampling (temperature, top-k, top-p, seed), stop tokens, stop strings (checked
  after every step on a tail window of the decoded output), `max_tokens`;
- speculative decoding with any drafter of `samspec_bench.sam`: per request up to k draft
  tokens, verified in one forward pass of k+1 query tokens, accepted by the rejection sampler
  of `samspec_bench.bench.rejection` (greedy: longest matching prefix plus the bonus token;
  sampled: exact for deterministic drafts), the KV of rejected tokens rolled back; a policy
  decides per step whether to speculate; `tree_paths=W` verifies W-path draft trees where at
  most `tree_at` requests run and nobody waits (`tree_verify`);
- two attention paths over the same cache, chosen per step: `decode` (one query token per
  request) and `splitfuse` (several, causal inside the chunk). The `attention` option: "auto"
  uses decode when every request has one query token and splitfuse otherwise (prefill,
  verification); "splitfuse" always; or a callable of the step's query lengths.

`batch_invariant=True` makes every reduction independent of the batch: linear layers run one
token at a time (the same GEMV for every row) and attention uses fixed-order reductions. It is
slower; it exists to show where decode/verify differences come from (op-equivalence).

Beside it: `reference_options` (options and capabilities, torch-free), `reference_requests`
(one request's state, the rejection sampler, stop handling and logprobs), `paged_decoder`,
`kv_cache`, `attention`.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable, Hashable, Sequence

import torch

from samspec_bench import __version__
from samspec_bench.bench.engines.attention import PagedAttentionMetadata
from samspec_bench.bench.engines.base import Engine, GenerationResult, Request, RequestOutput, RequestProgress, StepRecord
from samspec_bench.bench.engines.kv_cache import PagedKVCache, cdiv
from samspec_bench.bench.engines.paged_decoder import PagedDecoder
from samspec_bench.bench.engines.reference_options import (ATTENTION_MODES, DEFAULT_KV_CACHE_GB,  # noqa: F401
                                                           LOGPROBS_MODES, REFERENCE_CAPABILITIES, check_options)
from samspec_bench.bench.engines.reference_requests import (FINISHED, RUNNING, WAITING, Scheduled, SeqState,
                                                            append_tokens, decodes, new_state, request_output, sample_step)
from samspec_bench.bench.engines.tree_verify import chunk_positions, keep_path, propose_tree, settle, tree_option, visible
from samspec_bench.bench.policies import StepState, describe_policy
from samspec_bench.devices import step_timers
from samspec_bench.errors import UserError
from samspec_bench.models.checkpoints import BUILTIN_MODEL, load_model
from samspec_bench.sam import make_drafter
from samspec_bench.sam.strategies.base import TREE_RUNNING


@dataclass
class _StepPlan:
    """What one step schedules: the chunks, the token budget left, the KV blocks promised to
    them (blocks are allocated in the forward pass, after scheduling: without counting them two
    requests could each be promised the last block) and the requests preempted for room."""

    budget: int
    sched: list[Scheduled] = field(default_factory=list)
    reserved: int = 0
    preempted: int = 0


# --- the engine ------------------------------------------------------------------------------------

class ReferenceEngine(Engine):
    """See the module docstring. `model` is a spec for `samspec_bench.models.checkpoints.load_model`
    (builtin:smollm2-135m, builtin:tiny-qwen3, a checkpoint directory) or a loaded HF model
    (then pass `tokenizer` too, or None)."""

    name = "reference"
    capabilities = REFERENCE_CAPABILITIES

    def __init__(self, model: str | torch.nn.Module = BUILTIN_MODEL, *, tokenizer: Any = None,
                 dtype: str = "float32", device: str = "cpu", max_num_seqs: int = 64,
                 max_num_batched_tokens: int = 2048, max_model_len: int | None = None,
                 block_size: int = 16, num_blocks: int | None = None,
                 kv_cache_gb: float = DEFAULT_KV_CACHE_GB, attention: str | Callable[[list[int]], str] = "auto",
                 batch_invariant: bool = False, logprobs_mode: str = "raw"):
        check_options(max_num_seqs, max_num_batched_tokens, logprobs_mode, attention)
        if isinstance(model, str):
            self.model_spec = model
            model, tokenizer = load_model(model, dtype=dtype, device=device)
        else:
            self.model_spec = getattr(model, "name_or_path", None) or type(model).__name__
            model = model.eval()
        self.hf_model = model
        self.tokenizer = tokenizer
        self.decoder = PagedDecoder(model, batch_invariant=batch_invariant)
        self.device = self.decoder.device
        self.dtype = self.decoder.dtype
        self.max_num_seqs = int(max_num_seqs)
        self.max_num_batched_tokens = int(max_num_batched_tokens)
        self.max_model_len = int(max_model_len or getattr(model.config, "max_position_embeddings", 4096))
        self.attention = attention
        self.logprobs_mode = logprobs_mode
        self.block_size = int(block_size)
        d = self.decoder
        per_token = PagedKVCache.bytes_per_token(d.num_layers, d.num_kv_heads, d.head_dim, self.dtype)
        if num_blocks is None:
            want = self.max_num_seqs * self.max_model_len
            fit = int(kv_cache_gb * (1 << 30)) // per_token
            num_blocks = max(cdiv(min(want, fit), self.block_size), 1)
        self.cache = PagedKVCache(d.num_layers, d.num_kv_heads, d.head_dim, num_blocks=num_blocks,
                                  block_size=self.block_size, dtype=self.dtype, device=self.device)
        self.eos_token_ids = self._eos_ids(model)
        self._tmp_ids = 0
        self._trees = (0, 0)   # the generate call's draft trees: (paths, at most running)

    # --- description ---------------------------------------------------------------------

    @staticmethod
    def _eos_ids(model) -> frozenset:
        ids: set[int] = set()
        for src in (getattr(model, "generation_config", None), model.config):
            e = getattr(src, "eos_token_id", None) if src is not None else None
            if e is None:
                continue
            ids.update([int(e)] if isinstance(e, int) else [int(x) for x in e])
        return frozenset(ids)

    def describe(self) -> dict[str, Any]:
        d = self.decoder
        return {
            "name": self.name, "model": str(self.model_spec), "model_type": d.config.model_type,
            "dtype": str(self.dtype).removeprefix("torch."), "device": str(self.device),
            "num_layers": d.num_layers, "num_heads": d.num_heads, "num_kv_heads": d.num_kv_heads,
            "head_dim": d.head_dim, "vocab_size": d.vocab_size,
            "max_num_seqs": self.max_num_seqs, "max_num_batched_tokens": self.max_num_batched_tokens,
            "max_model_len": self.max_model_len, "block_size": self.block_size,
            "num_blocks": self.cache.num_blocks, "kv_cache_bytes": self.cache.memory_bytes(),
            "attention": self.attention if isinstance(self.attention, str) else getattr(self.attention, "__name__", "callable"),
            "batch_invariant": d.batch_invariant, "logprobs_mode": self.logprobs_mode,
            "torch_threads": torch.get_num_threads(),
        }

    def runtime(self) -> dict[str, Any]:
        return {"version": f"samspec-bench {__version__} reference engine, torch {torch.__version__}",
                "device": None if str(self.device) == "cpu" else str(self.device), "tp": 1, "threads": None}

    def close(self) -> None:
        self.cache = None  # type: ignore[assignment]
        self.decoder = None  # type: ignore[assignment]
        self.hf_model = None

    # --- one forward pass over scheduled chunks -----------------------------------------------

    def _choose_path(self, query_lens: list[int], override: str | None = None) -> str:
        mode = override or self.attention
        if callable(mode):
            path = mode(query_lens)
        elif mode == "auto":
            path = "decode" if all(q == 1 for q in query_lens) else "splitfuse"
        else:
            path = mode
        if path == "decode" and any(q != 1 for q in query_lens):
            raise ValueError("the decode attention path needs exactly one query token per request")
        if path not in ("decode", "splitfuse"):
            raise ValueError(f"attention path {path!r}: use 'decode' or 'splitfuse'")
        return path

    def _run(self, chunks: list[tuple[Hashable, list[int], bool]], path: str,
             trees: dict[int, list[int]] | None = None) -> list[torch.Tensor | None]:
        """chunks: (cache seq id, tokens to append, want logits at every chunk position);
        trees: chunk index -> its drafts' parents (tree_verify). Appends them to the cache, runs
        the forward, returns per chunk the logits [n, V] or None."""
        ids, pos, slots, bt_seqs, seq_lens, qlens, lidx = [], [], [], [], [], [], []
        trees = trees or {}
        offset = 0
        for ci, (sid, toks, want) in enumerate(chunks):
            start = self.cache.seq_len(sid)
            slots.extend(self.cache.append(sid, len(toks)))
            ids.extend(toks)
            pos.extend(chunk_positions(start, trees[ci]) if ci in trees else range(start, start + len(toks)))
            bt_seqs.append(sid)
            seq_lens.append(start + len(toks))
            qlens.append(len(toks))
            if want:
                lidx.extend(range(offset, offset + len(toks)))
            offset += len(toks)
        dev = self.device
        meta = PagedAttentionMetadata.build(self.cache.block_tables_tensor(bt_seqs), seq_lens, qlens,
                                            self.block_size, dev)
        meta.tree_visible = {ci: visible(parents) for ci, parents in trees.items()}
        li = torch.tensor(lidx, dtype=torch.long, device=dev)
        logits = self.decoder.forward(torch.tensor(ids, dtype=torch.long, device=dev),
                                      torch.tensor(pos, dtype=torch.long, device=dev),
                                      torch.tensor(slots, dtype=torch.long, device=dev),
                                      meta, self.cache, path, li if lidx else li[:0])
        out: list[torch.Tensor | None] = []
        row = 0
        for _, toks, want in chunks:
            if want:
                out.append(logits[row: row + len(toks)])
                row += len(toks)
            else:
                out.append(None)
        return out

    # --- teacher forcing (op-equivalence, HF parity) ------------------------------------------

    @torch.inference_mode()
    def score(self, sequences: Sequence[Sequence[int]], start: int | Sequence[int] = 1, chunk_size: int = 1,
              path: str | None = None, prefill_chunk: int | None = None) -> list[torch.Tensor]:
        """Teacher-forced log-probabilities. For each sequence t_0..t_{n-1} and its `start` s,
        returns float32 [n - s, V]: row j is the distribution of t_{s+j} given t_0..t_{s+j-1}.
        Tokens t_0..t_{s-2} are prefilled (splitfuse, `prefill_chunk` tokens a step, default
        all); then t_{s-1}..t_{n-2} go through the model `chunk_size` tokens per request per
        step, all sequences batched: chunk_size=1 is token-by-token decoding (the decode path),
        chunk_size=k+1 is speculative verification with every draft accepted (splitfuse).
        `path` overrides the attention path ('decode' needs chunk_size=1)."""
        seqs = [list(map(int, s)) for s in sequences]
        starts = [start] * len(seqs) if isinstance(start, int) else list(start)
        for s, st in zip(seqs, starts):
            if not 1 <= st < len(s) + 1 or len(s) > self.max_model_len:
                raise ValueError(f"start {st} for a sequence of {len(s)} tokens: need 1 <= start <= len")
        if chunk_size < 1:
            raise ValueError("chunk_size must be >= 1")
        sids = []
        for _ in seqs:
            self._tmp_ids += 1
            sid = ("score", self._tmp_ids)
            self.cache.add(sid)
            sids.append(sid)
        try:
            pf = prefill_chunk or max(self.max_model_len, 1)
            done = [0] * len(seqs)
            while True:   # prefill t_0..t_{s-2}
                chunks = []
                for i, (s, st) in enumerate(zip(seqs, starts)):
                    n = min(pf, st - 1 - done[i])
                    if n > 0:
                        chunks.append((sids[i], s[done[i]: done[i] + n], False))
                        done[i] += n
                if not chunks:
                    break
                self._run(chunks, "splitfuse")
            outs: list[list[torch.Tensor]] = [[] for _ in seqs]
            while True:
                chunks, who = [], []
                for i, s in enumerate(seqs):
                    if done[i] < len(s) - 1:
                        n = min(chunk_size, len(s) - 1 - done[i])
                        chunks.append((sids[i], s[done[i]: done[i] + n], True))
                        who.append(i)
                        done[i] += n
                if not chunks:
                    break
                p = self._choose_path([len(c[1]) for c in chunks], path or ("decode" if chunk_size == 1 else "splitfuse"))
                for i, lg in zip(who, self._run(chunks, p)):
                    outs[i].append(torch.log_softmax(lg, dim=-1))
            V = self.decoder.vocab_size
            return [torch.cat(o) if o else torch.zeros((0, V), device=self.device) for o in outs]
        finally:
            for sid in sids:
                self.cache.free(sid)

    @torch.inference_mode()
    def forward_logits(self, token_ids: Sequence[int], chunk_size: int | None = None) -> torch.Tensor:
        """Logits [n, V] at every position of one sequence, in chunks of `chunk_size` query
        tokens (default: one chunk; 1 = token by token through the decode path)."""
        toks = [int(t) for t in token_ids]
        self._tmp_ids += 1
        sid = ("fwd", self._tmp_ids)
        self.cache.add(sid)
        try:
            c = chunk_size or len(toks)
            out = []
            for a in range(0, len(toks), c):
                part = toks[a: a + c]
                out.append(self._run([(sid, part, True)], self._choose_path([len(part)], "auto"))[0])
            return torch.cat(out)
        finally:
            self.cache.free(sid)

    # --- generation -------------------------------------------------------------------------

    @torch.inference_mode()
    def generate(self, requests: Sequence[Request], *, drafter: Any = None, num_spec_tokens: int = 3,
                 spec_policy: Callable[[StepState], bool] | None = None, progress: bool = False,
                 on_output: Callable[[RequestOutput], None] | None = None, tree_paths: int = 0,
                 tree_at: int = TREE_RUNNING) -> GenerationResult:
        if drafter is not None and isinstance(drafter, str):
            drafter = make_drafter(drafter)
        if drafter is not None and num_spec_tokens < 1:
            raise UserError(f"num_spec_tokens = {num_spec_tokens}: must be >= 1 with a drafter")
        k = int(num_spec_tokens) if drafter is not None else 0
        self._trees = tree_option(tree_paths, tree_at, drafter, self.decoder.windows)
        seqs = self._states(requests, k)
        waiting: deque[SeqState] = deque(seqs)
        running: list[SeqState] = []
        steps: list[StepRecord] = []
        self._timers = step_timers(self.device)
        t0 = time.perf_counter()
        bar = RequestProgress(len(seqs), progress)
        try:
            while waiting or running:
                steps.append(self._step(len(steps), waiting, running, drafter, k, spec_policy, t0, on_output, bar))
        finally:
            bar.close()
            for s in seqs:   # an exception mid-run must not leak cache blocks or drafter state
                if s.req.req_id in self.cache:
                    self.cache.free(s.req.req_id)
                if drafter is not None and s.started and s.status != FINISHED:
                    drafter.stop(s.req.req_id)
        wall = time.perf_counter() - t0
        return GenerationResult(outputs=[request_output(s) for s in seqs], steps=steps, wall_time_s=wall,
                                engine={**self.describe(), "spec_policy": describe_policy(spec_policy),
                                        "step_timer": self._timers[0].label,
                                        "draft_trees": {"paths": self._trees[0], "at_most_running": self._trees[1]}
                                        if self._trees[0] else None},
                                drafter=(drafter.describe() if drafter is not None and hasattr(drafter, "describe")
                                         else None),
                                num_spec_tokens=k)

    def _states(self, requests: Sequence[Request], k: int) -> list[SeqState]:
        """The requests' states, each checked against the model length and the KV cache."""
        ids = [r.req_id for r in requests]
        if len(set(ids)) != len(ids):
            raise UserError("request ids must be unique within one generate() call")
        if self.tokenizer is None and any(r.params.stop for r in requests):
            raise UserError("stop strings need a tokenizer: build the engine with tokenizer=... or drop `stop`")
        cap = self.cache.capacity_tokens
        for r in requests:
            if len(r.prompt_ids) >= self.max_model_len:
                raise UserError(f"request {r.req_id!r}: prompt of {len(r.prompt_ids)} tokens does not fit "
                                f"max_model_len {self.max_model_len}; shorten it or raise max_model_len")
            if min(len(r.prompt_ids) + r.params.max_tokens, self.max_model_len) + k > cap:
                raise UserError(f"request {r.req_id!r} needs up to {len(r.prompt_ids) + k + 1} KV slots, the cache "
                                f"holds {cap}: raise kv_cache_gb/num_blocks or lower max_tokens")
        return [new_state(i, r, self.eos_token_ids, self.device) for i, r in enumerate(requests)]

    def _preempt(self, victim: SeqState, running: list[SeqState], waiting: deque) -> None:
        running.remove(victim)
        self.cache.free(victim.req.req_id)
        victim.num_computed = 0
        victim.status = WAITING
        victim.preemptions += 1
        waiting.appendleft(victim)

    def _step(self, step_no, waiting, running, drafter, k, policy, t0, on_output, bar) -> StepRecord:
        """One engine step: schedule (running requests, then waiting ones), one forward pass,
        sample / verify, and the step's record (times by the generate call's `step_timers`)."""
        step_timer, fwd_timer = self._timers
        with step_timer.span():
            n_decoding = sum(1 for s in running if s.num_pending == 1)
            speculate = bool(k) and (policy is None
                                     or bool(policy(StepState(step_no, len(running), len(waiting), n_decoding))))
            plan = _StepPlan(budget=self.max_num_batched_tokens)
            width = self._trees[0] if speculate and not waiting and len(running) <= self._trees[1] else 0
            self._schedule_running(plan, running, waiting, drafter if speculate else None, k, width)
            self._admit_waiting(plan, running, waiting, drafter)
            if not plan.sched:
                raise RuntimeError("the scheduler made no progress (KV cache too small for one request?)")
            chunks = [(sc.seq.req.req_id, sc.seq.token_ids[sc.seq.num_computed: sc.seq.num_computed + sc.num_tokens]
                       + sc.drafts, sc.samples) for sc in plan.sched]
            path = self._choose_path([len(c[1]) for c in chunks])
            with fwd_timer.span():
                logits = self._run(chunks, path, {i: sc.tree_parents for i, sc in enumerate(plan.sched)
                                                  if sc.tree_parents})
            drafted, accepted, emitted, finished = self._verify(plan.sched, logits, running, drafter, t0, on_output,
                                                                bar)
            if hasattr(policy, "observe_step"):   # a history-dependent switch (bench/policies.py)
                policy.observe_step(step_no, drafted, accepted)
        sched = plan.sched
        return StepRecord(step=step_no, time_s=step_timer.ms[-1] / 1e3, forward_s=fwd_timer.ms[-1] / 1e3,
                          num_running=len(sched), num_waiting=len(waiting),
                          num_scheduled_tokens=sum(len(c[1]) for c in chunks),
                          num_prefill_tokens=sum(sc.num_tokens for sc in sched if not sc.decode_step),
                          num_decode_reqs=sum(1 for sc in sched if sc.decode_step),
                          num_drafted=drafted, num_accepted=accepted, num_emitted=emitted,
                          speculative=speculate, attention=path, num_preempted=plan.preempted, num_finished=finished,
                          timer=step_timer.label)

    def _fits(self, plan: _StepPlan, rid: Hashable, n_tokens: int) -> bool:
        return self.cache.blocks_needed(rid, n_tokens) + plan.reserved <= self.cache.num_free_blocks

    def _schedule_running(self, plan: _StepPlan, running: list[SeqState], waiting: deque, drafter, k: int,
                          width: int = 0) -> None:
        """Running requests, oldest first: their pending tokens plus drafts (`drafter`: None
        when this step does not speculate; `width` > 0: a tree of that many paths); the latest
        admitted request is preempted while one does not fit the cache."""
        i = 0
        while i < len(running) and plan.budget > 0:
            s = running[i]
            rid = s.req.req_id
            n = min(s.num_pending, plan.budget)
            drafts: list[int] = []
            parents = None
            if drafter is not None and s.num_pending == 1:
                room = min(k, s.req.params.max_tokens - s.num_output - 1, self.max_model_len - len(s.token_ids) - 1,
                           plan.budget - 1)
                if room > 0 and width:   # every node takes a slot: the tree fits the budget and model length
                    drafts, parents = propose_tree(drafter, rid, room, width,
                                                   min(plan.budget, self.max_model_len - len(s.token_ids)) - 1)
                elif room > 0:
                    drafts = [int(t) for t in drafter.propose(rid, room)][:room]
            while not self._fits(plan, rid, n + len(drafts)):
                victim = running[-1]
                self._preempt(victim, running, waiting)
                plan.preempted += 1
                if victim is s:
                    break
            if s.status != RUNNING:
                continue   # it preempted itself; i now points at the next request
            plan.reserved += self.cache.blocks_needed(rid, n + len(drafts))
            samples = s.num_computed + n == len(s.token_ids)
            plan.sched.append(Scheduled(s, n, drafts, samples, decodes(samples, s, n), parents or None))
            plan.budget -= n + len(drafts)
            i += 1

    def _admit_waiting(self, plan: _StepPlan, running: list[SeqState], waiting: deque, drafter) -> None:
        """Waiting requests, first come first served, while a slot, the budget and the cache allow."""
        while waiting and plan.budget > 0 and len(running) < self.max_num_seqs:
            s = waiting[0]
            rid = s.req.req_id
            n = min(s.num_pending, plan.budget)
            if not self._fits(plan, rid, n):
                break
            if rid not in self.cache:
                self.cache.add(rid)
            plan.reserved += self.cache.blocks_needed(rid, n)
            waiting.popleft()
            s.status = RUNNING
            running.append(s)
            if drafter is not None and not s.started:
                drafter.start(rid, s.req.prompt_ids, s.req.group)
                s.started = True
            samples = s.num_computed + n == len(s.token_ids)
            plan.sched.append(Scheduled(s, n, [], samples, decodes(samples, s, n)))
            plan.budget -= n

    def _verify(self, sched: list[Scheduled], logits, running: list[SeqState], drafter, t0: float, on_output,
                bar) -> tuple[int, int, int, int]:
        """Sample / verify the requests that reached the end of their known tokens, keep the
        accepted drafts' KV (roll back the rest), record the decode steps and finish requests.
        Returns (drafted, accepted, emitted, finished) over the step."""
        sampled = [(sc, lg) for sc, lg in zip(sched, logits) if sc.samples and not sc.tree_parents]
        trees = [(sc, lg) for sc, lg in zip(sched, logits) if sc.samples and sc.tree_parents]
        drafted = accepted = emitted = finished = 0
        # per request: tokens sampled, drafts accepted, the logits rows that predicted them
        # and (trees) the accepted nodes, whose KV moves next to the root
        settled = []
        if sampled:
            outs, n_acc = sample_step(sampled, self.decoder.vocab_size, self.device)
            settled += [(sc, toks, acc, lg[-(len(sc.drafts) + 1):], None)
                        for (sc, lg), toks, acc in zip(sampled, outs, n_acc)]
        if trees:
            settled += settle(trees, lambda rows: sample_step(rows, self.decoder.vocab_size, self.device)[0])
        if settled:
            now = time.perf_counter() - t0
            for sc, toks, acc, rows, nodes in settled:
                s = sc.seq
                pos0 = s.num_output
                new = append_tokens(s, toks, rows, self.max_model_len, self.logprobs_mode, self.tokenizer)
                if s.first_token_time is None and new:
                    s.first_token_time = now
                if nodes:
                    keep_path(self.cache, s.req.req_id, s.num_computed + sc.num_tokens - 1, nodes)
                # the cache keeps the computed known tokens plus the accepted drafts
                s.num_computed += sc.num_tokens + min(acc, len(sc.drafts))
                self.cache.truncate(s.req.req_id, s.num_computed)
                if sc.decode_step:
                    s.record_step(pos0, len(sc.drafts), min(acc, len(new)), len(new))
                drafted, accepted, emitted = drafted + len(sc.drafts), accepted + acc, emitted + len(new)
                if drafter is not None and new and s.status != FINISHED:
                    drafter.extend(s.req.req_id, new)
                if s.status == FINISHED:
                    finished += 1
                    self._finish(s, now, running, drafter, on_output, bar)
        for sc in sched:
            if not sc.samples:
                sc.seq.num_computed += sc.num_tokens
        return drafted, accepted, emitted, finished

    def _finish(self, s: SeqState, now: float, running: list[SeqState], drafter, on_output, bar) -> None:
        s.finish_time = now
        running.remove(s)
        self.cache.free(s.req.req_id)
        if drafter is not None:
            drafter.stop(s.req.req_id)
            s.started = False
        bar.advance()
        if on_output is not None:
            on_output(request_output(s))
