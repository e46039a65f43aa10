"""The code that runs inside vLLM's worker process: SAM as a vLLM drafter and what it measures
there. The engine adapter that starts vLLM and reads these back is `bench/engines/vllm/`.

    speculative_config={"method": "custom_class", "num_speculative_tokens": k,
                        "model": "samspec_bench.bench.vllm_proposer.proposer.SamProposer"}
    worker_extension_cls="samspec_bench.bench.vllm_proposer.worker_extension.SamWorkerExtension"

(the older paths `samspec_bench.bench.engines.vllm.drafter.SamProposer` / `.SamWorkerExtension`
and `samspec_bench.bench.vllm_drafter.SamProposer` name the same classes).

vLLM (0.22 to 0.33, the V1 model runner on GPU and CPU alike) builds the class as
`SamProposer(vllm_config)` inside the model runner and, after every step's bookkeeping, calls

    propose(sampled_token_ids, num_tokens_no_spec, token_ids_cpu, slot_mappings=...)

with one entry per row of the persistent batch: `sampled_token_ids[i]` are the tokens row i
emitted this step (empty for a prefill chunk), `token_ids_cpu[i, :num_tokens_no_spec[i]]` its
whole context (numpy host buffers; `slot_mappings`, device tensors on a GPU, is never read).
No request ids are passed, and rows move: a finished request's row is filled by the last row
when the batch is condensed, a new request takes any free row. vLLM skips the call at a step
where the longest sequence plus k exceeds max_model_len (every row then verifies k drafts of
token 0): the next call finds more tokens in a row than its ids account for, drops the draft
left pending and records the gap (request_state.py). Async scheduling is refused at
construction (vLLM already turns it off for custom_class).

Per-request state is therefore keyed by the request id of the row, read from the model
runner's input batch (runner_view.py; the runner is the object that constructs the class).
Where no runner can be found (another runner class, a unit test), rows are matched to states
by their token content (`content` mapping): a state is reused only when the row's first tokens
are exactly the tokens the state has indexed, so a moved or replaced row can never draft from
another request's automaton. A request whose row is gone at a propose call has finished (or
was preempted) and its automaton is freed at once; a preempted request that comes back is
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
            options.ENGINE_LENGTH, "evidence:cost=auto": inside an engine the verify cost is
            measured, not assumed. A spec the drafter refuses falls back to the default and is
            listed in `describe()["bad_options"]` (the engine keeps running).
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
same keys, options.py), so a vLLM user who cannot set extra_args still configures the drafter.

Measured here, in the engine's process: per-request acceptance by position
(request_state.py), every propose call's time (proposer_timing.ProposeTimes: a CPU drafter
runs inside vLLM's step, so its time adds to the step's wall time), and a draft token's verify
cost: the interval between two propose calls is one engine step's wall time, and the step
verified the rows plus the drafts returned at the earlier call, so `cost_fit`
(online_cost.OnlineDraftCost) fits step time = a + b * verified tokens and sets the cost of
every drafter whose length spec says `cost=auto`. `SamWorkerExtension` (worker_extension.py)
hands all of it to the caller through `LLM.collective_rpc`. ascend.py: the same proposer for
vllm-ascend (a vLLM general plugin).

Modules: options, runner_view, request_state, proposer, worker_extension, proposer_timing,
online_cost, tail_cost, ascend. None imports vLLM at import time.
"""

from samspec_bench.bench.vllm_proposer.proposer_options import (CLASS_PATH, CLASS_PATHS, ENGINE_LENGTH, ENV_OPTIONS,
                                                       EXTENSION_PATH, EXTRA_KEY, LEGACY_CLASS_PATH, MODES,
                                                       PUBLIC_CLASS_PATHS)
from samspec_bench.bench.vllm_proposer.proposer import SamProposer
from samspec_bench.bench.vllm_proposer.worker_extension import SamWorkerExtension

__all__ = ["CLASS_PATH", "CLASS_PATHS", "ENGINE_LENGTH", "ENV_OPTIONS", "EXTENSION_PATH", "EXTRA_KEY",
           "LEGACY_CLASS_PATH", "MODES", "PUBLIC_CLASS_PATHS", "SamProposer", "SamWorkerExtension"]
