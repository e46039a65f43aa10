"""What one `VllmEngine.generate` call runs inside vLLM (its `Arm`): the drafter argument and
the speculation policy translated into a speculative method, k, the batch-size threshold
SAM's proposer applies, SAM's options, and an oracle's continuations; and, per request, the
extra arguments that carry them to SAM's proposer in vLLM's worker process."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Hashable, Sequence

from samspec_bench.bench.engines.base import Request
from samspec_bench.bench.engines.oracle import OracleDrafter
from samspec_bench.bench.engines.vllm.engine_args import METHODS
from samspec_bench.bench.policies import NeverSpeculate, SpecPolicy, describe_policy
from samspec_bench.bench.vllm_proposer.proposer_options import EXTRA_KEY
from samspec_bench.errors import UserError
from samspec_bench.sam.draft_length import parse_length
from samspec_bench.sam.drafters import SamDrafter


@dataclass(frozen=True)
class Arm:
    method: str | None                       # the speculative method (None: no drafting)
    k: int = 0
    threshold: int | None = None             # SAM drafts only while at most this many requests run
    sam_options: dict[str, Any] = field(default_factory=dict)   # min_match, group_sharing, length
    oracle: dict[Hashable, list[int]] | None = None             # continuations: the proposer's oracle mode

    @property
    def label(self) -> str:
        return ("none" if self.method is None else self.method) + (" (oracle)" if self.oracle is not None else "")

    def drafter_record(self) -> dict[str, Any] | None:
        """GenerationResult.drafter: what drafted."""
        if self.method is None:
            return None
        return {"name": "oracle" if self.oracle is not None else self.method, "engine": "vllm", **self.sam_options}

    def extra_args(self, req: Request, key: str) -> dict[str, Any]:
        """The request's extra arguments for SAM's proposer (a SAM engine only): its key, mode,
        k and options; the group key with group sharing; the continuation in oracle mode."""
        ex: dict[str, Any] = {"key": key, "mode": "none" if self.method is None else "sam"}
        if self.method is not None:
            ex["k"] = self.k
            if self.threshold is not None:
                ex["threshold"] = self.threshold
            if self.sam_options.get("min_match", 1) != 1:
                ex["min_match"] = int(self.sam_options["min_match"])
            if self.sam_options.get("length") is not None:
                ex["length"] = self.sam_options["length"]
            if self.sam_options.get("group_sharing"):
                ex["group"] = str(req.group if req.group is not None else key)
            if self.oracle is not None:
                ex["mode"] = "oracle"
                ex["oracle"] = list(self.oracle.get(req.req_id, []))
        return {EXTRA_KEY: ex}


def near_length_limit(requests: Sequence[Request], k: int, max_model_len: int) -> list[Request]:
    """Requests that can come within k tokens of max_model_len: vLLM's model runner calls the
    drafter only while the longest sequence plus k fits (gpu_model_runner
    `_input_fits_in_drafter`), so near it the whole batch verifies k drafts of token 0."""
    return [r for r in requests if len(r.prompt_ids) + int(r.params.max_tokens) + k + 1 > max_model_len]


def resolve_arm(drafter: Any, spec_policy: Any, num_spec_tokens: int) -> Arm:
    """The Arm of a generate call. drafter: None, "sam", "sam-fixed", "ngram", "suffix", a
    `SamDrafter` (its group sharing, l_threshold and draft length spec are used) or an
    `OracleDrafter` (SAM's proposer drafts its continuations, k every step)."""
    drafter = SamDrafter(length="fixed") if drafter == "sam-fixed" else drafter   # replay's name for the baseline
    sam_options: dict[str, Any] = {}
    oracle = None
    if isinstance(drafter, OracleDrafter):
        if drafter.mixed:
            raise UserError("an oracle drafter with mixed widths cannot run inside vLLM: SAM's proposer drafts the "
                            "continuation k tokens every step (one width per generate call)")
        oracle, drafter = drafter.continuations, "sam"
    elif isinstance(drafter, SamDrafter):
        sam_options, drafter = _sam_options(drafter), "sam"
    elif drafter is not None and not isinstance(drafter, str):
        raise UserError(f"drafter {type(drafter).__name__}: the vLLM engine takes 'sam', 'ngram', 'suffix', a "
                        "SamDrafter or an OracleDrafter (the drafter runs inside vLLM's process)")
    if drafter is not None and drafter not in METHODS:
        raise UserError(f"drafter {drafter!r}: the vLLM engine runs {', '.join(METHODS)} (or none)")
    method, threshold = policy_inside_vllm(spec_policy, drafter)
    k = int(num_spec_tokens) if method is not None else 0
    if method is not None and k < 1:
        raise UserError(f"num_spec_tokens = {num_spec_tokens}: must be >= 1 with a drafter")
    return Arm(method, k, threshold, sam_options, oracle if method is not None else None)


def _sam_options(drafter: SamDrafter) -> dict[str, Any]:
    """A SamDrafter's settings as SAM's proposer takes them (text: they cross processes)."""
    if drafter.corpus is not None:
        raise UserError("a SAM drafter with a static corpus cannot run inside vLLM yet: drop the corpus")
    length = drafter.length.spec() if drafter.length_given else None   # None: the proposer's ENGINE_LENGTH
    try:   # the spec travels to vLLM's process as text: it must parse back to the same policy
        parse_length(length)
    except ValueError:
        raise UserError(f"SAM draft length {length}: inside vLLM use a spec string: fixed, evidence or "
                        "evidence:cost=0.2 (a profile callable or an adaptive rule cannot reach the "
                        "engine's process)") from None
    return {"min_match": drafter.l_threshold, "group_sharing": drafter.group_sharing, "length": length}


def policy_inside_vllm(policy: Any, drafter: Any) -> tuple[Any, int | None]:
    """(drafter, threshold) for a speculation policy: never -> no drafter; always -> as is;
    the batch-size threshold policy -> its threshold, applied by the SAM proposer inside vLLM
    (it drafts only when at most T requests stay in the batch). Other per-step callables
    cannot run inside vLLM's scheduler."""
    if policy is None:
        return drafter, None
    if isinstance(policy, NeverSpeculate):
        return None, None
    name = getattr(policy, "name", None)
    t = getattr(policy, "threshold", None)
    if isinstance(policy, SpecPolicy) and name == "threshold" and isinstance(t, int) and t >= 0:
        if drafter is not None and drafter != "sam":
            raise UserError(f"spec_policy threshold<={t}: the batch-size switch runs inside the SAM proposer; "
                            f"use drafter 'sam' (not {drafter!r}) or no policy")
        return drafter, (t if drafter is not None else None)
    if isinstance(policy, SpecPolicy) and name == "always":
        return drafter, None
    raise UserError(f"spec_policy {describe_policy(policy)}: inside vLLM only off, always and the batch-size "
                    "threshold policy run (policies.make_policy); use one of those")
