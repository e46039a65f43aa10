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
  of `samspec_bench.sam.rejection` (greedy: longest matching prefix plus the bonus token;
  sampled: exact for deterministic drafts), the KV of rejected tokens rolled back; a policy
  decides per step whether to speculate;
- two attention paths over the same cache, chosen per step: `decode` (one query token per
  request) and `splitfuse` (several, causal inside the chunk). "auto" uses decode when every
  request has one query token and splitfuse otherwise (prefill, verification).

`batch_invariant=True` makes every reduction independent of the batch: linear layers run one
token at a time (the same GEMV for every row) and attention uses fixed-order reductions. It is
slower; it exists to show where decode/verify differences come from (op-equivalence).

One module of about 600 lines: the scheduler step (admission, preemption, drafting, verification,
rollback) is one piece of state logic; split, each half would need the other's private state.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable, Hashable, Sequence

import torch

from samspec_bench.bench.engines.attention import PagedAttentionMetadata
from samspec_bench.bench.engines.base import (FINISH_LENGTH, FINISH_STOP, Engine, GenerationResult, Request,
                                              RequestOutput, RequestProgress, StepRecord)
from samspec_bench.bench.engines.kv_cache import PagedKVCache, cdiv
from samspec_bench.bench.engines.paged_decoder import PagedDecoder
from samspec_bench.bench.policies import StepState, describe_policy
from samspec_bench.errors import UserError
from samspec_bench.metrics import ResponseSteps
from samspec_bench.models import BUILTIN_MODEL, load_model
from samspec_bench.sam import make_drafter
from samspec_bench.sam.rejection import SamplingBatch, parse_output, speculative_sample

ATTENTION_MODES = ("auto", "splitfuse")
LOGPROBS_MODES = ("raw", "processed")
DEFAULT_KV_CACHE_GB = 1.0


# --- request state -------------------------------------------------------------------------------

WAITING, RUNNING, FINISHED = "waiting", "running", "finished"


@dataclass
class _Seq:
    index: int
    req: Request
    stop_ids: frozenset
    token_ids: list[int]
    num_prompt: int
    num_computed: int = 0             # tokens whose keys/values are in the cache
    status: str = WAITING
    started: bool = False             # drafter.start was called
    generator: torch.Generator | None = None
    out_logprobs: list[float] = field(default_factory=list)
    top_logprobs: list[list[tuple[int, float]]] | None = None
    finish_reason: str | None = None
    first_token_time: float | None = None
    finish_time: float | None = None
    preemptions: int = 0
    stop_checked: int = 0             # output tokens already searched for the stop strings
    # per decode step: response position at drafting time, drafted, accepted, emitted
    st_pos: list[int] = field(default_factory=list)
    st_drafted: list[int] = field(default_factory=list)
    st_accepted: list[int] = field(default_factory=list)
    st_emitted: list[int] = field(default_factory=list)

    @property
    def num_output(self) -> int:
        return len(self.token_ids) - self.num_prompt

    @property
    def num_pending(self) -> int:
        """Known tokens not yet in the cache (1 while decoding; more during prefill)."""
        return len(self.token_ids) - self.num_computed


@dataclass
class _Sched:
    seq: _Seq
    num_tokens: int                   # known tokens scheduled (prefill chunk, or the pending token)
    drafts: list[int]
    samples: bool                     # the chunk reaches the end of the known tokens: sample
    decode_step: bool                 # counted as a decode step in the per-response records


# --- the engine ------------------------------------------------------------------------------------

class ReferenceEngine(Engine):
    """See the module docstring. `model` is a spec for `samspec_bench.models.load_model`
    (builtin:smollm2-135m, builtin:tiny-qwen3, a checkpoint directory) or a loaded HF model
    (then pass `tokenizer` too, or None)."""

    name = "reference"

    def __init__(self, model: str | torch.nn.Module = BUILTIN_MODEL, *, tokenizer: Any = None,
                 dtype: str = "float32", device: str = "cpu", max_num_seqs: int = 64,
                 max_num_batched_tokens: int = 2048, max_model_len: int | None = None,
                 block_size: int = 16, num_blocks: int | None = None,
                 kv_cache_gb: float = DEFAULT_KV_CACHE_GB, attention: str | Callable[[list[int]], str] = "auto",
                 batch_invariant: bool = False, logprobs_mode: str = "raw"):
        if isinstance(model, str):
            self.model_spec = model
            model, tokenizer = load_model(model, dtype=dtype, device=device)
        else:
            self.model_spec = getattr(model, "name_or_path", None) or type(model).__name__
            model = model.eval()
        if max_num_seqs < 1 or max_num_batched_tokens < 1:
            raise UserError(f"max_num_seqs = {max_num_seqs}, max_num_batched_tokens = {max_num_batched_tokens}: both must be >= 1")
        if logprobs_mode not in LOGPROBS_MODES:
            raise UserError(f"logprobs_mode {logprobs_mode!r}: use one of {', '.join(LOGPROBS_MODES)}")
        if isinstance(attention, str) and attention not in ATTENTION_MODES:
            raise UserError(f"attention {attention!r}: use one of {', '.join(ATTENTION_MODES)} (or a callable)")
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

    def _run(self, chunks: list[tuple[Hashable, list[int], bool]], path: str) -> list[torch.Tensor | None]:
        """chunks: (cache seq id, tokens to append, want logits at every chunk position).
        Appends them to the cache, runs the forward, returns per chunk the logits [n, V] or None."""
        ids, pos, slots, bt_seqs, seq_lens, qlens, lidx = [], [], [], [], [], [], []
        offset = 0
        for sid, toks, want in chunks:
            start = self.cache.seq_len(sid)
            slots.extend(self.cache.append(sid, len(toks)))
            ids.extend(toks)
            pos.extend(range(start, start + len(toks)))
            bt_seqs.append(sid)
            seq_lens.append(start + len(toks))
            qlens.append(len(toks))
            if want:
                lidx.extend(range(offset, offset + len(toks)))
            offset += len(toks)
        dev = self.device
        meta = PagedAttentionMetadata.build(self.cache.block_tables_tensor(bt_seqs), seq_lens, qlens,
                                            self.block_size, dev)
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
            return [torch.cat(o) if o else torch.zeros((0, V)) for o in outs]
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
                 on_output: Callable[[RequestOutput], None] | None = None,
                 attention: str | Callable[[list[int]], str] | None = None) -> GenerationResult:
        if drafter is not None and isinstance(drafter, str):
            drafter = make_drafter(drafter)
        if drafter is not None and num_spec_tokens < 1:
            raise UserError(f"num_spec_tokens = {num_spec_tokens}: must be >= 1 with a drafter")
        k = int(num_spec_tokens) if drafter is not None else 0
        ids = [r.req_id for r in requests]
        if len(set(ids)) != len(ids):
            raise UserError("request ids must be unique within one generate() call")
        if self.tokenizer is None and any(r.params.stop for r in requests):
            raise UserError("stop strings need a tokenizer: build the engine with tokenizer=... or drop `stop`")
        cap = self.cache.capacity_tokens
        seqs: list[_Seq] = []
        for i, r in enumerate(requests):
            need = len(r.prompt_ids) + k + 1
            if len(r.prompt_ids) >= self.max_model_len:
                raise UserError(f"request {r.req_id!r}: prompt of {len(r.prompt_ids)} tokens does not fit "
                                f"max_model_len {self.max_model_len}; shorten it or raise max_model_len")
            if min(len(r.prompt_ids) + r.params.max_tokens, self.max_model_len) + k > cap:
                raise UserError(f"request {r.req_id!r} needs up to {need} KV slots, the cache holds {cap}: "
                                "raise kv_cache_gb/num_blocks or lower max_tokens")
            stop = set(r.params.stop_token_ids)
            if not r.params.ignore_eos:
                stop |= self.eos_token_ids
            gen = None
            if r.params.seed is not None and not r.params.greedy:
                gen = torch.Generator(device=self.device)
                gen.manual_seed(int(r.params.seed))
            seqs.append(_Seq(i, r, frozenset(stop), list(r.prompt_ids), len(r.prompt_ids), generator=gen,
                             top_logprobs=[] if r.params.logprobs else None))
        waiting: deque[_Seq] = deque(seqs)
        running: list[_Seq] = []
        steps: list[StepRecord] = []
        t0 = time.perf_counter()
        bar = RequestProgress(len(seqs), progress)
        policy = spec_policy
        try:
            while waiting or running:
                rec = self._step(len(steps), waiting, running, drafter, k, policy, attention, t0, on_output, bar)
                steps.append(rec)
        finally:
            bar.close()
            for s in seqs:   # an exception mid-run must not leak cache blocks or drafter state
                if s.req.req_id in self.cache:
                    self.cache.free(s.req.req_id)
                if drafter is not None and s.started and s.status != FINISHED:
                    drafter.stop(s.req.req_id)
        wall = time.perf_counter() - t0
        return GenerationResult(outputs=[self._output(s) for s in seqs], steps=steps, wall_time_s=wall,
                                engine={**self.describe(), "spec_policy": describe_policy(policy)},
                                drafter=(drafter.describe() if drafter is not None and hasattr(drafter, "describe")
                                         else None),
                                num_spec_tokens=k)

    def _output(self, s: _Seq) -> RequestOutput:
        key = str(s.req.req_id)
        steps = ResponseSteps(key=key, prompt_len=s.num_prompt, response_len=s.num_output,
                              position=s.st_pos, drafted=s.st_drafted, accepted=s.st_accepted, emitted=s.st_emitted)
        return RequestOutput(req_id=s.req.req_id, prompt_ids=list(s.req.prompt_ids),
                             token_ids=s.token_ids[s.num_prompt:], logprobs=list(s.out_logprobs),
                             finish_reason=s.finish_reason or FINISH_LENGTH, steps=steps,
                             top_logprobs=s.top_logprobs, first_token_time_s=s.first_token_time,
                             finish_time_s=s.finish_time, num_preemptions=s.preemptions)

    def _preempt(self, victim: _Seq, running: list[_Seq], waiting: deque) -> None:
        running.remove(victim)
        self.cache.free(victim.req.req_id)
        victim.num_computed = 0
        victim.status = WAITING
        victim.preemptions += 1
        waiting.appendleft(victim)

    def _step(self, step_no, waiting, running, drafter, k, policy, attention, t0, on_output, bar) -> StepRecord:
        t_start = time.perf_counter()
        n_decoding = sum(1 for s in running if s.num_pending == 1)
        speculate = bool(k) and (policy is None or bool(policy(StepState(step_no, len(running), len(waiting), n_decoding))))
        budget = self.max_num_batched_tokens
        sched: list[_Sched] = []
        preempted = 0
        # Blocks are allocated in the forward pass, after scheduling: count what the requests
        # scheduled so far will take, or two requests could each be promised the last block.
        reserved = 0

        def fits(rid, n_tokens):
            return self.cache.blocks_needed(rid, n_tokens) + reserved <= self.cache.num_free_blocks

        # 1. running requests, oldest first
        i = 0
        while i < len(running) and budget > 0:
            s = running[i]
            rid = s.req.req_id
            n = min(s.num_pending, budget)
            drafts: list[int] = []
            if speculate and s.num_pending == 1:
                room = min(k, s.req.params.max_tokens - s.num_output - 1, self.max_model_len - len(s.token_ids) - 1,
                           budget - 1)
                if room > 0:
                    drafts = [int(t) for t in drafter.propose(rid, room)][:room]
            while not fits(rid, n + len(drafts)):
                victim = running[-1]
                self._preempt(victim, running, waiting)
                preempted += 1
                if victim is s:
                    break
            if s.status != RUNNING:
                continue   # it preempted itself; i now points at the next request
            reserved += self.cache.blocks_needed(rid, n + len(drafts))
            samples = s.num_computed + n == len(s.token_ids)
            sched.append(_Sched(s, n, drafts, samples, samples and s.num_output > 0))
            budget -= n + len(drafts)
            i += 1
        # 2. waiting requests, first come first served
        while waiting and budget > 0 and len(running) < self.max_num_seqs:
            s = waiting[0]
            rid = s.req.req_id
            n = min(s.num_pending, budget)
            if not fits(rid, n):
                break
            if rid not in self.cache:
                self.cache.add(rid)
            reserved += self.cache.blocks_needed(rid, n)
            waiting.popleft()
            s.status = RUNNING
            running.append(s)
            if drafter is not None and not s.started:
                drafter.start(rid, s.req.prompt_ids, s.req.group)
                s.started = True
            samples = s.num_computed + n == len(s.token_ids)
            sched.append(_Sched(s, n, [], samples, samples and s.num_output > 0))
            budget -= n
        if not sched:
            raise RuntimeError("the scheduler made no progress (KV cache too small for one request?)")

        # 3. the forward pass
        chunks = []
        for sc in sched:
            s = sc.seq
            toks = s.token_ids[s.num_computed: s.num_computed + sc.num_tokens] + sc.drafts
            chunks.append((s.req.req_id, toks, sc.samples))
        path = self._choose_path([len(c[1]) for c in chunks], attention)
        t_fwd = time.perf_counter()
        logits = self._run(chunks, path)
        forward_s = time.perf_counter() - t_fwd

        # 4. sampling / verification
        sampled = [(sc, lg) for sc, lg in zip(sched, logits) if sc.samples]
        emitted_total = drafted_total = accepted_total = 0
        finished = 0
        if sampled:
            outs, n_acc = self._sample(sampled)
            now = time.perf_counter() - t0
            for (sc, lg), toks, acc in zip(sampled, outs, n_acc):
                s = sc.seq
                rid = s.req.req_id
                lp_rows = lg[-(len(sc.drafts) + 1):]   # rows that predict the emitted tokens
                pos0 = s.num_output
                new = self._append(s, toks, lp_rows)
                if s.first_token_time is None and new:
                    s.first_token_time = now
                # the cache keeps the computed known tokens plus the accepted drafts
                s.num_computed += sc.num_tokens + min(acc, len(sc.drafts))
                self.cache.truncate(rid, s.num_computed)
                if sc.decode_step:
                    s.st_pos.append(pos0)
                    s.st_drafted.append(len(sc.drafts))
                    s.st_accepted.append(min(acc, len(new)))
                    s.st_emitted.append(len(new))
                drafted_total += len(sc.drafts)
                accepted_total += acc
                emitted_total += len(new)
                if drafter is not None and new and s.status != FINISHED:
                    drafter.extend(rid, new)
                if s.status == FINISHED:
                    finished += 1
                    s.finish_time = now
                    running.remove(s)
                    self.cache.free(rid)
                    if drafter is not None:
                        drafter.stop(rid)
                        s.started = False
                    bar.advance()
                    if on_output is not None:
                        on_output(self._output(s))
        for sc, lg in zip(sched, logits):
            if not sc.samples:
                sc.seq.num_computed += sc.num_tokens
        n_tokens = sum(len(c[1]) for c in chunks)
        return StepRecord(step=step_no, time_s=time.perf_counter() - t_start, forward_s=forward_s,
                          num_running=len(sched), num_waiting=len(waiting), num_scheduled_tokens=n_tokens,
                          num_prefill_tokens=sum(sc.num_tokens for sc in sched if not sc.decode_step),
                          num_decode_reqs=sum(1 for sc in sched if sc.decode_step),
                          num_drafted=drafted_total, num_accepted=accepted_total, num_emitted=emitted_total,
                          speculative=speculate, attention=path, num_preempted=preempted, num_finished=finished)

    def _sample(self, sampled: list[tuple[_Sched, torch.Tensor]]) -> tuple[list[list[int]], list[int]]:
        """Run the rejection sampler over the requests that sample this step. Returns per
        request the emitted tokens (accepted drafts + one recovered/bonus token) and the
        number of accepted drafts."""

        nums, drafts, target_rows, bonus_rows = [], [], [], []
        temps, top_ks, top_ps, gens = [], [], [], {}
        for b, (sc, lg) in enumerate(sampled):
            n = len(sc.drafts)
            nums.append(n)
            drafts.extend(sc.drafts)
            rows = lg[-(n + 1):]
            if n:
                target_rows.append(rows[:n])
            bonus_rows.append(rows[n])
            p = sc.seq.req.params
            temps.append(0.0 if p.greedy else float(p.temperature))
            top_ks.append(int(p.top_k) if p.top_k > 0 else 0)
            top_ps.append(float(p.top_p))
            if sc.seq.generator is not None:
                gens[b] = sc.seq.generator
        V = self.decoder.vocab_size
        dev = self.device
        target = torch.cat(target_rows) if target_rows else torch.zeros((0, V), device=dev)
        bonus = torch.stack(bonus_rows)
        batch = SamplingBatch(temperature=temps,
                              top_k=top_ks if any(top_ks) else None,
                              top_p=top_ps if any(p < 1.0 for p in top_ps) else None,
                              generators=gens or None)
        out = speculative_sample(torch.tensor(drafts, dtype=torch.long, device=dev), nums, target, bonus, batch,
                                 max_spec_len=max(nums))
        toks = parse_output(out.token_ids)
        return toks, [int(a) for a in out.num_accepted.tolist()]

    def _append(self, s: _Seq, toks: list[int], lp_rows: torch.Tensor) -> list[int]:
        """Append sampled tokens up to the first stop token / max_tokens / max_model_len,
        with their logprobs; marks the request finished. Returns the tokens appended."""
        p = s.req.params
        new = []
        for t in toks:
            if s.status == FINISHED:
                break
            s.token_ids.append(int(t))
            new.append(int(t))
            if int(t) in s.stop_ids:
                s.finish_reason = FINISH_STOP
            elif s.num_output >= p.max_tokens or len(s.token_ids) >= self.max_model_len:
                s.finish_reason = FINISH_LENGTH
            if s.finish_reason is not None:
                s.status = FINISHED
        if new and p.stop and s.finish_reason != FINISH_STOP and self._hit_stop_string(s):
            s.finish_reason = FINISH_STOP
            s.status = FINISHED
        if new:
            rows = lp_rows[: len(new)]
            if self.logprobs_mode == "processed" and not p.greedy:
                rows = rows / float(p.temperature)
            # log_softmax works row by row (the same bits whatever the number of rows; a
            # logsumexp over a single row may be split across threads)
            lp = torch.log_softmax(rows, dim=-1)
            idx = torch.tensor(new, dtype=torch.long, device=rows.device)
            s.out_logprobs.extend(lp.gather(1, idx[:, None])[:, 0].tolist())
            if s.top_logprobs is not None:
                vals, ids_ = torch.topk(lp, min(p.logprobs, lp.shape[1]), dim=-1)
                for r in range(len(new)):
                    s.top_logprobs.append(list(zip(ids_[r].tolist(), vals[r].tolist())))
        return new

    def _hit_stop_string(self, s: _Seq) -> bool:
        """Whether a stop string ends in the output tokens not searched before. Decodes only a
        tail window: the new tokens plus enough earlier ones to hold a stop string that
        straddles them (every token decodes to at least one character; a few more tokens
        keep a partial character or a stripped leading space at the window's start away from
        the match)."""
        out = s.token_ids[s.num_prompt:]
        back = max(len(x) for x in s.req.params.stop) + 4
        start = max(0, s.stop_checked - back)
        s.stop_checked = len(out)
        text = self.tokenizer.decode(out[start:], skip_special_tokens=True)
        return any(x in text for x in s.req.params.stop)
