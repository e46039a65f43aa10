"""What a sampler run is told: the built-in samplers, vocabulary aliases, the config, and
`build_config` (the suite contract: the click command's values -> a validated config).
Torch-free: `--help` reads it."""

from __future__ import annotations

import dataclasses

from samspec_bench.devices import parse_device
from samspec_bench.errors import UserError, comma_list, int_at_least, int_list, no_repeats, number_in, options_set

SUITE = "sampler"

MAX_VOCAB = 1 << 20        # 1,048,576 tokens: above every real model's vocabulary (Gemma's 262,144)
MAX_SAMPLES = 1_000_000    # trials per battery case (the default is 4000; the power case gets 7.5x)

VOCAB_ALIASES = {"32k": 32000, "llama2": 32000, "49k": 49152, "smollm2": 49152, "128k": 128256,
                 "llama3": 128256, "151k": 151936, "qwen3": 151936, "qwen2.5": 151936, "152k": 152064}

# result.json records each built-in's target, and users may pass the same string to --audit.
_C = "samspec_bench.suites.sampler.controls"
_R = "samspec_bench.bench.rejection"
BUILTIN_AUDITS = {
    "samspec": (f"{_R}:samspec_sampler", "this project's vectorised sampler"),
    "samspec-loop": (f"{_R}.loop:loop_sampler", "the loop reference"),
    "vllm": ("vllm.v1.sample.rejection_sampler:rejection_sample", "vLLM's rejection_sample"),
    "vllm-ascend": ("vllm_ascend.sample.rejection_sampler:rejection_sample",
                    "vllm-ascend's rejection_sample (PyTorch fallbacks without Triton)"),
    "token-rule": (f"{_C}:token_rule_sampler", "exact reference: the per-token rule written from the math"),
    "block-verification": (f"{_C}:block_verification", "exact reference: block verification (Sun et al. 2024)"),
    "block-verify-demo": (f"{_C}:block_verify_demo",
                          "negative control: block verification on deterministic drafts (lossy on purpose)"),
    "no-exclusion-demo": (f"{_C}:no_exclusion_demo",
                          "negative control: recovers from p without removing the draft token (lossy on purpose)"),
    "overaccept-1pct-demo": (f"{_C}:overaccept_1pct_demo",
                             "negative control: acceptance + 0.01 at draft position 2 (a 1 % loss)"),
    "underaccept-1pct-demo": (f"{_C}:underaccept_1pct_demo",
                              "negative control: acceptance - 0.01 at draft position 2 (a 1 % loss)"),
    "leak-1pct-demo": (f"{_C}:leak_1pct_demo",
                       "negative control: the draft token leaks into the recovered law at position 2 (a 1 % loss)"),
    "smoothed-draft-demo": (f"{_C}:smoothed_draft_demo",
                            "negative control: draft taken as 0.98 one-hot + 0.02 uniform"),
    "scaled-accept-demo": (f"{_C}:scaled_acceptance_demo",
                           "negative control: acceptance x 0.97 at draft position 1"),
    "token-residual-bv-demo": (f"{_C}:block_verification_token_residual_demo",
                               "negative control: block verification with the per-token residual"),
    "seeded-reuse-demo": (f"{_C}:seeded_reuse_demo",
                          "negative control: seeded requests reuse the accept uniform for the recovered token"),
    "seeded-scaled-demo": (f"{_C}:seeded_scaled_demo", "negative control: seeded requests accept x 0.97"),
    "temperature-residual-demo": (f"{_C}:temperature_residual_demo",
                                  "negative control (logits): recovers from the untempered law"),
    "temperature-bonus-demo": (f"{_C}:temperature_bonus_demo",
                               "negative control (logits): bonus token at temperature 1"),
    "top-p-order-demo": (f"{_C}:top_p_before_temperature_demo",
                         "negative control (logits): top-k / top-p before the temperature"),
}
# samspec-loop and block-verification take a minute each on the default battery: not by default.
DEFAULT_BUILTINS = ("samspec", "token-rule", "vllm", "vllm-ascend", "block-verify-demo", "overaccept-1pct-demo")
EXPECTED_EXACT = ("samspec", "samspec-loop", "token-rule", "block-verification")
PER_TOKEN_ACCEPTANCE = ("samspec", "samspec-loop", "token-rule")   # must also match the per-token acceptance law
NEGATIVE_CONTROLS = tuple(n for n in BUILTIN_AUDITS if n.endswith("-demo"))
LOGITS_LEVEL = {"samspec": f"{_R}:samspec_logits_sampler",
                "samspec-loop": f"{_R}.loop:loop_logits_sampler",
                "token-rule": f"{_C}:token_rule_logits_sampler",
                # vLLM's whole verify step: bonus sampling, per-request constraints, rejection_sample
                "vllm": "samspec_bench.suites.sampler.vllm:vllm_logits_sampler"}
# Modules that moved, by their old names in --audit module:function (earlier releases' built-in
# targets, still in older result.json files and users' command lines): loaded from the new one.
MOVED_TARGETS = {"samspec_bench.sam.rejection": _R, "samspec_bench.sam.rejection_loop": f"{_R}.loop",
                 "samspec_bench.suites.sampler": _C}


def moved_target(spec: str) -> str:
    """module:function with a moved module's old name -> the same function in its new module."""
    module, sep, attr = spec.partition(":")
    return MOVED_TARGETS[module] + sep + attr if sep and module in MOVED_TARGETS else spec


DEFAULT_AUDIT_TIMEOUT = 60.0   # seconds one call of a user's sampler may take (a loop sampler: ~1 s)
# What the audits' results depend on: a --resume with other values is refused (the time limit,
# the speed grid and the list of samplers may change: finished audits are kept by name).
IDENTITY_FIELDS = ("samples", "alpha", "seed", "max_vocab", "large_vocab", "full")


@dataclasses.dataclass
class SamplerConfig:
    samples: int = 4000             # trials per case (scaled down for large vocabularies)
    alpha: float = 1e-3             # family-wise false-alarm rate per sampler
    seed: int = 0
    audits: tuple = ()              # explicit --audit targets
    builtin: bool = True
    builtins: tuple = DEFAULT_BUILTINS  # the built-ins audited with --builtin
    max_vocab: int = 151936         # skip battery cases with a larger vocabulary
    large_vocab: int = 151936       # the vocabulary of the large-vocab cases
    full: bool = False              # extra cases and 4x samples
    device: str = "auto"            # auto | cpu | cuda[:N] | npu[:N]; `running.run` resolves it
    speed: bool = True
    speed_batches: tuple = (1, 4, 16, 64, 256)
    speed_ks: tuple = (1, 2, 3, 4, 8)
    speed_vocabs: tuple = (32000, 151936)
    speed_reps: int = 3
    speed_acceptance: float = 0.7   # p(draft) at every speed-test position
    speed_min_seconds: float = 0.3  # keep timing a configuration at least this long
    speed_threads: int = 1          # intra-op threads while timing (1: CPU time = work, robust to load)
    speed_steady_allocator: bool = True  # see speed.steady_state_allocator()
    audit_timeout: float = DEFAULT_AUDIT_TIMEOUT  # per call of a --audit module:function; 0: in-process, no limit


def parse_vocab(text: str, what: str = "--speed-vocab") -> tuple:
    """Vocabulary sizes (32000, 32k or a name); an empty item or a size given twice
    ('32k,32000') is refused."""
    out = []
    for v in comma_list(text, what, "32000,151936"):
        v = v.lower()
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
        if n > MAX_VOCAB:   # its [rows, V] inputs would not fit in memory (an internal error, not a finding)
            raise UserError(f"{what} {v!r}: larger than any model's vocabulary; give at most {MAX_VOCAB:,} tokens "
                            "(e.g. 151936)")
        out.append(n)
    return tuple(no_repeats(out, what, text, "32000,151936"))


def check_audit_spec(spec: str) -> str:
    """A built-in name or module:function (whether it imports is for the run to find out)."""
    if spec not in BUILTIN_AUDITS and ":" not in spec:
        raise UserError(f"--audit {spec}: expected module:function or one of the built-in names "
                        f"({', '.join(BUILTIN_AUDITS)})")
    return spec


# --speed-threads' largest: far more than any machine's cores; tens of thousands crash OpenMP
MAX_THREADS = 1024
MAX_SEED = 2 ** 63 - 1   # --seed's largest: derived seeds add offsets below torch's 2**64 - 1


def build_config(*, audits, builtin, builtins, samples, alpha, seed, max_vocab, large_vocab, full, device, speed,
                 speed_batch, speed_k, speed_vocab, speed_reps, speed_min_time, speed_threads,
                 audit_timeout) -> SamplerConfig:
    """The command's options (click's values, by their Python names) -> a SamplerConfig;
    UserError naming the option on bad input. No defaults here: the click options hold them."""
    if samples < 100:
        raise UserError(f"--samples {samples}: need at least 100 trials per case for the tests to mean anything")
    if samples > MAX_SAMPLES:   # beyond: the outputs do not fit in memory, and every sampler would be ERROR
        raise UserError(f"--samples {samples}: give at most {MAX_SAMPLES:,} trials per case (4000 detects a 1 % "
                        "loss with 80 % power)")
    if not (0 < alpha < 1):
        raise UserError(f"--alpha {alpha}: must be in (0, 1), e.g. 0.001")
    # seeds derived from it (seed + offset, seed * 1000 + case) stay within torch's 64-bit range
    int_at_least(seed, "--seed", 0, MAX_SEED)
    int_at_least(speed_reps, "--speed-reps", 1)
    speed_min_time = number_in(speed_min_time, "--speed-min-time", lo=0)
    if not builtin and not audits and not speed:
        raise UserError("nothing to do: --no-builtin without --audit and with --no-speed; pass --audit mod:fn")
    # blank --builtins is no built-in (refused below unless --no-builtin); else a comma list
    names = tuple(comma_list(builtins, "--builtins", "samspec,token-rule")) if str(builtins).strip() else ()
    unknown = [b for b in names if b not in BUILTIN_AUDITS]
    if unknown or (builtin and not names):
        raise UserError(f"--builtins {builtins!r}: {'unknown ' + ', '.join(unknown) if unknown else 'empty'}; "
                        f"choose from {', '.join(BUILTIN_AUDITS)}")
    audits = tuple(check_audit_spec(a) for a in audits)
    cfg = SamplerConfig(samples=samples, alpha=alpha, seed=seed, audits=audits, builtin=builtin, builtins=names,
                        max_vocab=one_vocab(max_vocab, "--max-vocab"),
                        large_vocab=one_vocab(large_vocab, "--large-vocab"), full=full, device=device,
                        speed=speed, speed_batches=tuple(int_list(speed_batch, "--speed-batch")),
                        speed_ks=tuple(int_list(speed_k, "--speed-k")), speed_vocabs=parse_vocab(speed_vocab),
                        speed_reps=speed_reps, speed_min_seconds=speed_min_time,
                        speed_threads=speed_threads, audit_timeout=number_in(audit_timeout, "--audit-timeout", lo=0))
    if not 1 <= speed_threads <= MAX_THREADS:   # beyond: OpenMP fails to start them (segfault)
        raise UserError(f"--speed-threads {speed_threads}: must be in 1..{MAX_THREADS}")
    if cfg.large_vocab < 1024:
        raise UserError(f"--large-vocab {large_vocab}: the two-level draw it exercises starts at 1,024 tokens; "
                        "pass e.g. 151936")
    if max(cfg.speed_ks) > 32:
        raise UserError(f"--speed-k {speed_k}: draft lengths above 32 are not realistic; use 1..8")
    parse_device(device)   # the spelling here (no torch); whether it exists when the run starts
    refuse_unused(cfg)
    return cfg


def one_vocab(text: str, what: str) -> int:
    """--max-vocab / --large-vocab: one vocabulary size; a comma list is refused (only one is used)."""
    sizes = parse_vocab(text, what)
    if len(sizes) > 1:
        raise UserError(f"{what} {text!r}: takes one vocabulary size, got {len(sizes)}; give one (e.g. {what} "
                        f"{sizes[0]})")
    return sizes[0]


SPEED_OPTIONS = {"speed_batches": "--speed-batch", "speed_ks": "--speed-k", "speed_vocabs": "--speed-vocab",
                 "speed_reps": "--speed-reps", "speed_min_seconds": "--speed-min-time",
                 "speed_threads": "--speed-threads"}


def refuse_unused(cfg: SamplerConfig) -> None:
    """Options that would change nothing, set away from their defaults (the click options share
    SamplerConfig's), are a UserError naming them: the --speed-* grid with --no-speed,
    --audit-timeout without an --audit module:function (built-ins run in this process, unlimited),
    --builtins with --no-builtin."""
    default = SamplerConfig()
    if not cfg.speed:
        unused = options_set(cfg, SPEED_OPTIONS)
        if unused:
            raise UserError(f"{', '.join(unused)} with --no-speed: the speed benchmark does not run; drop "
                            f"{'them' if len(unused) > 1 else 'it'} or --no-speed")
    if cfg.audit_timeout != default.audit_timeout and all(a in BUILTIN_AUDITS for a in cfg.audits):
        raise UserError(f"--audit-timeout {cfg.audit_timeout:g}: limits a sampler given as --audit module:function "
                        "(it runs in a worker process), and none is given (built-ins run in this process, without "
                        "a limit); add --audit module:function or drop --audit-timeout")
    if not cfg.builtin and cfg.builtins and cfg.builtins != default.builtins:
        raise UserError(f"--builtins {','.join(cfg.builtins)} with --no-builtin: no built-in is audited; drop "
                        "--no-builtin to audit them (or give them as --audit NAME), or drop --builtins")
