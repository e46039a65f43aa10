"""lm-eval task names -> how `accuracy` runs them: offline over local JSONL files, through lm-eval's
own task index where its data are reachable, or refused with the nearest supported name.

A task runs offline when its dataset (lm-eval YAML: dataset_path, dataset_name, the splits it
reads) is one of the sets of OFFLINE_SETS: our task YAML then `include`s lm-eval's, keeping its
prompt, few-shot examples, filters and metrics, and reads the local file instead of the hub.
So `gsm8k_cot`, `gsm8k_cot_zeroshot`, `hendrycks_math500`, `minerva_math500` run here with
lm-eval's own scoring. Our short names (`math500`) stand for lm-eval tasks (SHORT_NAMES).

lm-eval's YAMLs are read as data (includes merged, `!function` left as text); a task's Python
helpers are imported once to check they import (minerva_math needs `lm-eval[math]`).
"""

from __future__ import annotations

import functools
import importlib.util
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from samspec_bench.errors import UserError, nearest

# hub dataset (dataset_path, dataset_name) -> {split: local file name} (the files of --data-dir's
# benchmarks/, or the built-in sets under these names)
_GSM8K = {"train": "gsm8k_train.jsonl", "test": "gsm8k_test.jsonl"}
_MATH500 = {"test": "math500_test.jsonl"}
_AIME24 = {"train": "aime24.jsonl"}
_AIME25 = {"test": "aime25.jsonl"}
OFFLINE_SETS: dict[tuple[str, str | None], dict[str, str]] = {
    ("openai/gsm8k", "main"): _GSM8K, ("gsm8k", "main"): _GSM8K,
    ("HuggingFaceH4/MATH-500", None): _MATH500, ("HuggingFaceH4/MATH-500", "default"): _MATH500,
    ("Maxwell-Jia/AIME_2024", None): _AIME24, ("Maxwell-Jia/AIME_2024", "default"): _AIME24,
    ("math-ai/aime25", None): _AIME25, ("math-ai/aime25", "default"): _AIME25,
}

# lm-eval tasks over those sets, with their YAML under lm_eval/tasks: found without scanning, and
# the names offered as the nearest supported ones
LM_EVAL_YAMLS = {
    "gsm8k": "gsm8k/gsm8k.yaml", "gsm8k_cot": "gsm8k/gsm8k-cot.yaml",
    "gsm8k_cot_zeroshot": "gsm8k/gsm8k-cot-zeroshot.yaml", "gsm8k_cot_llama": "gsm8k/gsm8k-cot-llama.yaml",
    "gsm8k_cot_self_consistency": "gsm8k/gsm8k-cot-self-consistency.yaml",
    "hendrycks_math500": "hendrycks_math/hendrycks_math500.yaml",
    "minerva_math500": "minerva_math/minerva_math500.yaml",
    "aime24": "aime/aime24.yaml", "aime25": "aime/aime25.yaml",
}
SHORT_NAMES = {"math500": "hendrycks_math500"}   # ours -> lm-eval's
SPLIT_KEYS = ("training_split", "validation_split", "test_split", "fewshot_split")


@dataclass(frozen=True)
class LmTask:
    """One --tasks name resolved. `data` (split -> local file name) is None for a task read by
    lm-eval's own loader (its data reachable: cache or network)."""
    name: str                         # as given
    lm_name: str                      # lm-eval's task name (results / samples files)
    yaml_path: Path                   # lm-eval's YAML
    data: dict[str, str] | None       # offline: split -> file name in the benchmarks dir
    config: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)  # merged YAML

    @property
    def offline(self) -> bool:
        return self.data is not None

    def fewshot_pool_split(self) -> str | None:
        """The split few-shot examples are drawn from (None: inline examples or none)."""
        fc = self.config.get("fewshot_config") or {}
        if isinstance(fc, dict) and fc.get("samples") is not None:
            return None
        return self.config.get("fewshot_split") or self.config.get("training_split") or \
            self.config.get("validation_split")


def lm_eval_tasks_dir() -> Path:
    """lm-eval's task folder, found without importing lm-eval (importing lm_eval.tasks takes ~1 s)."""
    spec = importlib.util.find_spec("lm_eval")
    if spec is None or not spec.submodule_search_locations:
        raise UserError("accuracy: lm-eval is not installed here; pip install 'lm-eval>=0.4.13'")
    return Path(list(spec.submodule_search_locations)[0]).resolve() / "tasks"


def supported_names() -> list[str]:
    return sorted({*SHORT_NAMES, *LM_EVAL_YAMLS})


class _DataLoader(yaml.SafeLoader):
    """lm-eval's YAML as data: `!function x.y` kept as text."""


_DataLoader.add_constructor("!function", lambda loader, node: f"!function {loader.construct_scalar(node)}")


def read_task_yaml(path: Path, _seen: frozenset = frozenset()) -> dict[str, Any]:
    """A task YAML with its includes merged (the including file's keys win), as lm-eval does."""
    path = path.resolve()
    if path in _seen:
        raise UserError(f"lm-eval task file {path}: its includes form a cycle")
    cfg = yaml.load(path.read_text(encoding="utf-8"), Loader=_DataLoader)  # noqa: S506 - a SafeLoader
    if not isinstance(cfg, dict):
        return {}
    includes = cfg.pop("include", None)
    merged: dict[str, Any] = {}
    for inc in ([] if includes is None else includes if isinstance(includes, list) else [includes]):
        merged.update(read_task_yaml(path.parent / inc, _seen | {path}))
    merged.update(cfg)
    return merged


def _scan(name: str) -> tuple[str, Path] | None:
    """('task' | 'group' | 'tag', yaml) where one of lm-eval's YAMLs defines `name` (read as text:
    indexing every task with lm-eval's TaskManager takes about 18 s)."""
    word = re.escape(name)
    task_re = re.compile(rf"^task:\s*['\"]?{word}['\"]?\s*(#.*)?$", re.M)
    group_re = re.compile(rf"^group:\s*['\"]?{word}['\"]?\s*(#.*)?$", re.M)
    tag_re = re.compile(rf"^(tag:.*\b{word}\b|\s+-\s+['\"]?{word}['\"]?\s*)$", re.M)   # a tag (or a list item)
    tagged = None
    for p in sorted(lm_eval_tasks_dir().rglob("*.yaml")):
        try:
            text = p.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        if name not in text:
            continue
        if task_re.search(text):
            return "task", p
        if group_re.search(text):
            return "group", p
        if tagged is None and "tag:" in text and tag_re.search(text):
            tagged = p
    return ("tag", tagged) if tagged is not None else None


def _yaml_of(lm_name: str) -> tuple[str, Path] | None:
    known = LM_EVAL_YAMLS.get(lm_name)
    if known is not None:
        p = lm_eval_tasks_dir() / known
        if p.is_file() and read_task_yaml(p).get("task") == lm_name:
            return "task", p
    return _scan(lm_name)


def _offline_data(cfg: dict[str, Any]) -> dict[str, str] | None:
    """split -> local file for a task whose dataset and every split it reads are local."""
    files = OFFLINE_SETS.get((str(cfg.get("dataset_path")), cfg.get("dataset_name")))
    if files is None:
        return None
    splits = {cfg[k] for k in SPLIT_KEYS if cfg.get(k)}
    if not splits or not splits <= set(files):
        return None
    return {s: files[s] for s in sorted(splits)}


def check_task_code(name: str, path: Path, cfg: dict[str, Any]) -> None:
    """Import the Python helpers a task's YAML names (`!function utils.f`): a missing extra
    (minerva_math: math_verify, sympy, antlr4 4.11) is named now, not after the model loads."""
    modules = set()
    for v in _values(cfg):
        if isinstance(v, str) and v.startswith("!function "):
            modules.add(v.removeprefix("!function ").rsplit(".", 1)[0])
    for mod in sorted(modules):
        for base in (path.parent, *path.parents[:2]):
            f = base / f"{mod.replace('.', '/')}.py"
            if f.is_file():
                break
        else:
            continue
        spec = importlib.util.spec_from_file_location(f"_samspec_check_{f.parent.name}_{f.stem}", f)
        try:
            spec.loader.exec_module(importlib.util.module_from_spec(spec))
        except (ImportError, AssertionError) as e:
            why = getattr(e, "name", None) or str(e).split(". ")[0]
            raise UserError(f"--tasks {name}: lm-eval's task code ({f.parent.name}/{f.name}) does not import here "
                            f"({why}); pip install 'lm-eval[math]' for the math tasks{_nearest_other(name)}") from None


def _values(obj):
    if isinstance(obj, dict):
        for v in obj.values():
            yield from _values(v)
    elif isinstance(obj, list):
        for v in obj:
            yield from _values(v)
    else:
        yield obj


def _nearest_other(name: str) -> str:
    near = nearest(name, [n for n in supported_names() if n != name])
    return f"; or use a supported task{near}" if near else f"; or use one of {', '.join(supported_names())}"


def hub_data_available(cfg: dict[str, Any]) -> bool:
    """Whether `datasets` can open the task's dataset here (its cache, or the hub when reachable)."""
    try:
        import datasets  # lazy: heavy
        datasets.load_dataset_builder(cfg.get("dataset_path"), cfg.get("dataset_name"))
    except Exception:  # noqa: BLE001 - offline, not cached, gated, unknown: all mean "not reachable"
        return False
    return True


@functools.lru_cache(maxsize=None)
def resolve_task(name: str) -> LmTask:
    """`name` (ours or lm-eval's) -> how it runs; a UserError naming the nearest supported
    task when it cannot run here."""
    lm_name = SHORT_NAMES.get(name, name)
    if not re.fullmatch(r"[\w.\-]+", lm_name):
        raise UserError(f"--tasks {name!r}: not a task name{_nearest_other(name)}")
    found = _yaml_of(lm_name)
    if found is None:
        raise UserError(f"--tasks {name}: no such task in lm-eval {_lm_eval_version()} or here{_nearest_other(name)}")
    kind, path = found
    if kind != "task":
        raise UserError(f"--tasks {name}: a {kind} of lm-eval tasks ({path.name}); give its tasks one by one"
                        f"{_nearest_other(name)}")
    cfg = read_task_yaml(path)
    if cfg.get("output_type", "generate_until") != "generate_until":
        raise UserError(f"--tasks {name}: a {cfg.get('output_type')} task; accuracy compares generations with SAM "
                        f"off and on (generate_until tasks only){_nearest_other(name)}")
    data = _offline_data(cfg)
    check_task_code(name, path, cfg)
    if data is None and not hub_data_available(cfg):
        raise UserError(f"--tasks {name}: its data ({cfg.get('dataset_path')}) are not in the local datasets cache "
                        f"and the hub is not reachable; the offline tasks are those over gsm8k, MATH-500, AIME 2024/25"
                        f"{_nearest_other(name)}")
    return LmTask(name=name, lm_name=lm_name, yaml_path=path, data=data, config=cfg)


def _lm_eval_version() -> str:
    try:
        from importlib.metadata import version
        return version("lm_eval")
    except Exception:  # noqa: BLE001
        return "(not installed)"
