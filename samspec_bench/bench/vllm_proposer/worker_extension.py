"""`SamWorkerExtension`: methods added to vLLM's worker (`worker_extension_cls=` options.
EXTENSION_PATH), called by name through `LLM.collective_rpc`, so that the caller fetches the
drafter's description, its per-call times and the acceptance records from the worker process."""

from __future__ import annotations

from samspec_bench.bench.vllm_proposer.proposer_timing import ProposeTimes, wrap_propose


class SamWorkerExtension:
    """Workers without a drafter (not the last pipeline stage) answer None."""

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
