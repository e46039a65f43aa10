"""One request inside the reference engine: its state (`SeqState`: tokens, cache progress,
logprobs, its decode record), what a step scheduled for it (`Scheduled`), the rejection
sampler over the requests that sample in a step, and what happens to the sampled tokens
(stop tokens, max_tokens, max_model_len, stop strings, logprobs). The engine (`reference.py`)
schedules and runs the forward passes; everything per request lives here."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from samspec_bench.bench.engines.base import FINISH_LENGTH, FINISH_STOP, Request, RequestOutput
from samspec_bench.metrics import ResponseSteps
from samspec_bench.bench.rejection import SamplingBatch, parse_output, speculative_sample

WAITING, RUNNING, FINISHED = "waiting", "running", "finished"


@dataclass
class SeqState:
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

    def record_step(self, position: int, drafted: int, accepted: int, emitted: int) -> None:
        self.st_pos.append(position)
        self.st_drafted.append(drafted)
        self.st_accepted.append(accepted)
        self.st_emitted.append(emitted)


@dataclass
class Scheduled:
    seq: SeqState
    num_tokens: int                   # known tokens scheduled (prefill chunk, or the pending token)
    drafts: list[int]
    samples: bool                     # the chunk reaches the end of the known tokens: sample
    decode_step: bool                 # counted as a decode step in the per-response records
    tree_parents: list[int] | None = None   # drafts form a tree: each one's parent (-1: the root)


def decodes(samples: bool, seq: SeqState, num_tokens: int) -> bool:
    """Whether a scheduled chunk is a decode step: one known token that samples, after the first
    output token. A preempted request's recompute samples too, but is a prefill of many tokens."""
    return samples and seq.num_output > 0 and num_tokens == 1


def new_state(index: int, req: Request, eos_token_ids: frozenset, device) -> SeqState:
    """A request's state before it runs: its stop tokens and, seeded and sampled, its generator."""
    stop = set(req.params.stop_token_ids)
    if not req.params.ignore_eos:
        stop |= eos_token_ids
    gen = None
    if req.params.seed is not None and not req.params.greedy:
        gen = torch.Generator(device=device)
        gen.manual_seed(int(req.params.seed))
    return SeqState(index, req, frozenset(stop), list(req.prompt_ids), len(req.prompt_ids), generator=gen,
                    top_logprobs=[] if req.params.logprobs else None)


def request_output(s: SeqState) -> RequestOutput:
    steps = ResponseSteps(key=str(s.req.req_id), prompt_len=s.num_prompt, response_len=s.num_output,
                          position=s.st_pos, drafted=s.st_drafted, accepted=s.st_accepted, emitted=s.st_emitted)
    return RequestOutput(req_id=s.req.req_id, prompt_ids=list(s.req.prompt_ids),
                         token_ids=s.token_ids[s.num_prompt:], logprobs=list(s.out_logprobs),
                         finish_reason=s.finish_reason or FINISH_LENGTH, steps=steps,
                         top_logprobs=s.top_logprobs, first_token_time_s=s.first_token_time,
                         finish_time_s=s.finish_time, num_preemptions=s.preemptions)


def sample_step(sampled: list[tuple[Scheduled, torch.Tensor]], vocab_size: int, device
                ) -> tuple[list[list[int]], list[int]]:
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
    target = torch.cat(target_rows) if target_rows else torch.zeros((0, vocab_size), device=device)
    bonus = torch.stack(bonus_rows)
    batch = SamplingBatch(temperature=temps,
                          top_k=top_ks if any(top_ks) else None,
                          top_p=top_ps if any(p < 1.0 for p in top_ps) else None,
                          generators=gens or None)
    out = speculative_sample(torch.tensor(drafts, dtype=torch.long, device=device), nums, target, bonus, batch,
                             max_spec_len=max(nums))
    toks = parse_output(out.token_ids)
    return toks, [int(a) for a in out.num_accepted.tolist()]


def append_tokens(s: SeqState, toks: list[int], lp_rows: torch.Tensor, max_model_len: int, logprobs_mode: str,
                  tokenizer) -> list[int]:
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
        elif s.num_output >= p.max_tokens or len(s.token_ids) >= max_model_len:
            s.finish_reason = FINISH_LENGTH
        if s.finish_reason is not None:
            s.status = FINISHED
    if new and p.stop and s.finish_reason != FINISH_STOP and hit_stop_string(s, tokenizer):
        s.finish_reason = FINISH_STOP
        s.status = FINISHED
    if new:
        rows = lp_rows[: len(new)]
        if logprobs_mode == "processed" and not p.greedy:
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


def hit_stop_string(s: SeqState, tokenizer) -> bool:
    """Whether a stop string ends in the output tokens not searched before. Decodes only a
    tail window: the new tokens plus enough earlier ones to hold a stop string that
    straddles them (every token decodes to at least one character; a few more tokens
    keep a partial character or a stripped leading space at the window's start away from
    the match)."""
    out = s.token_ids[s.num_prompt:]
    back = max(len(x) for x in s.req.params.stop) + 4
    start = max(0, s.stop_checked - back)
    s.stop_checked = len(out)
    text = tokenizer.decode(out[start:], skip_special_tokens=True)
    return any(x in text for x in s.req.params.stop)
