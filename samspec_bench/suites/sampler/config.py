"""What a sampler run is told: the built-in samplers, vocabulary aliases, the config, and
`build_config` (the suite contract: the click command's values -> a validated config)."""

from __future__ import annotations

import dataclasses

from samspec_bench.errors import UserError, int_list

SUITE = "sampler"

VOCAB_ALIASES = {"32k": 32000, "llama2": 32000, "49k": 49152, "smollm2": 49152, "128k": 128256,
                 "llama3": 128256, "151k": 151936, "qwen3": 151936, "qwen2.5": 151936, "152k": 152064}

# The negative controls' targets name the package (which re-exports them): result.json
# records the target, and users pass the same string to --audit.
BUILTIN_AUDITS = {
    "samspec": ("samspec_bench.sam.rejection:samspec_sampler", "this project's vectorised sampler"),
    "samspec-loop": ("samspec_bench.sam.rejection_loop:loop_sampler", "the loop reference"),
    "vllm": ("vllm.v1.sample.rejection_sampler:rejection_sample", "vLLM's rejection_sample"),
    "vllm-ascend": ("vllm_ascend.sample.rejection_sampler:rejection_sample",
                    "vllm-ascend's rejection_sample (PyTorch fallbacks without Triton)"),
    "block-verify-demo": ("samspec_bench.suites.sampler:block_verify_demo",
                          "negative control: block verification on deterministic drafts (lossy on purpose)"),
    "no-exclusion-demo": ("samspec_bench.suites.sampler:no_exclusion_demo",
                          "negative control: recovers from p without removing the draft token (lossy on purpose)"),
}
DEFAULT_BUILTINS = ("samspec", "samspec-loop", "vllm", "vllm-ascend", "block-verify-demo")
EXPECTED_EXACT = ("samspec", "samspec-loop")
NEGATIVE_CONTROLS = ("block-verify-demo", "no-exclusion-demo")
LOGITS_LEVEL = {"samspec": "samspec_bench.sam.rejection:speculative_sample",
                "samspec-loop": "samspec_bench.sam.rejection_loop:speculative_sample_loop",
                # vLLM's whole verify step: bonus sampling, per-request constraints, rejection_sample
                "vllm": "samspec_bench.suites.sampler.vllm:speculative_sample_vllm"}


@dataclasses.dataclass
class SamplerConfig:
    samples: int = 4000             # trials per case (scaled down for large vocabularies)
    alpha: float = 1e-3             # family-wise false-alarm rate per sampler
    seed: int = 0
    audits: tuple = ()              # explicit --audit targets
    builtin: bool = True
    max_vocab: int = 151936         # skip battery cases with a larger vocabulary
    large_vocab: int = 151936       # the vocabulary of the large-vocab cases
    full: bool = False              # extra cases and 4x samples
    device: str = "cpu"
    speed: bool = True
    speed_batches: tuple = (1, 4, 16, 64, 256)
    speed_ks: tuple = (1, 2, 3, 4, 8)
    speed_vocabs: tuple = (32000, 151936)
    speed_reps: int = 3
    speed_acceptance: float = 0.7   # p(draft) at every speed-test position
    speed_min_seconds: float = 0.3  # keep timing a configuration at least this long
    speed_threads: int = 1          # intra-op threads while timing (1: CPU time = work, robust to load)
    speed_steady_allocator: bool = True  # see speed.steady_state_allocator()


def parse_vocab(text: str, what: str = "--speed-vocab") -> tuple:
    out = []
    for v in str(text).split(","):
        v = v.strip().lower()
        if not v:
            continue
        if v in VOCAB_ALIASES:
            out.append(VOCAB_ALIASES[v])
            continue
        try:
            n = int(v[:-1]) * 1000 if v.endswith("k") and v[:-1].isdigit() else int(v)
        except ValueError:
            raise UserError(f"{what} {v!r}: unknown vocabulary; pass a size (32000, 151936) or one of "
                            f"{', '.join(sorted(VOCAB_ALIASES))}") from None
        if n < 2:
            raise UserError(f"{what} {v!r}: the vocabulary needs at least 2 tokens")
        out.append(n)
    if not out:
        raise UserError(f"{what}: empty list; pass e.g. 32000,151936")
    return tuple(out)


def build_config(*, audits, builtin, samples, alpha, seed, max_vocab, large_vocab, full, device, speed,
                 speed_batch, speed_k, speed_vocab, speed_reps, speed_min_time, speed_threads) -> SamplerConfig:
    """The command's options (click's values, by their Python names) -> a SamplerConfig;
    UserError naming the option on bad input. No defaults here: the click options hold them."""
    if samples < 100:
        raise UserError(f"--samples {samples}: need at least 100 trials per case for the tests to mean anything")
    if not (0 < alpha < 1):
        raise UserError(f"--alpha {alpha}: must be in (0, 1), e.g. 0.001")
    if not builtin and not audits and not speed:
        raise UserError("nothing to do: --no-builtin without --audit and with --no-speed; pass --audit mod:fn")
    cfg = SamplerConfig(samples=samples, alpha=alpha, seed=seed, audits=tuple(audits), builtin=builtin,
                        max_vocab=parse_vocab(max_vocab, "--max-vocab")[0],
                        large_vocab=parse_vocab(large_vocab, "--large-vocab")[0], full=full, device=device,
                        speed=speed, speed_batches=tuple(int_list(speed_batch, "--speed-batch")),
                        speed_ks=tuple(int_list(speed_k, "--speed-k")), speed_vocabs=parse_vocab(speed_vocab),
                        speed_reps=speed_reps, speed_min_seconds=max(0.0, speed_min_time),
                        speed_threads=speed_threads)
    if speed_threads < 1:
        raise UserError(f"--speed-threads {speed_threads}: must be >= 1")
    if max(cfg.speed_ks) > 32:
        raise UserError(f"--speed-k {speed_k}: draft lengths above 32 are not realistic; use 1..8")
    import torch  # imports torch: only here, to check that the device can hold a tensor

    try:
        torch.empty(1, device=device)
    except Exception as e:  # noqa: BLE001
        raise UserError(f"--device {device}: not usable here ({type(e).__name__}); pass cpu or an available device") from None
    return cfg
