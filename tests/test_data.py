"""Trace, tokenizer and benchmark loaders: real shared data where it counts, and malformed
inputs written to temp files (every bad line must be named, or counted when skipped)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import unicodedata
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from samspec_bench import data
from samspec_bench.errors import UserError

GROUPED = "qwen25math_math_100x8.jsonl"  # has a system prompt and groups of sampled responses
NO_SYSTEM = "tora70b_gsm8k.jsonl"


def _rows(path: Path) -> list[dict]:
    with path.open(encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def _write(path: Path, lines: list) -> Path:
    path.write_text("".join((x if isinstance(x, str) else json.dumps(x)) + "\n" for x in lines))
    return path


@pytest.fixture(scope="module")
def qwen3(qwen3_tokenizer_dir):
    return data.load_tokenizer(qwen3_tokenizer_dir)


# --- real traces ------------------------------------------------------------------------------

def test_read_grouped_traces(traces_dir):
    path = traces_dir / GROUPED
    rows = _rows(path)
    traces = data.read_traces(path)
    assert not traces.skipped
    assert [r.id for r in traces.records] == [row["id"] for row in rows]
    assert [r.line for r in traces.records] == list(range(1, len(rows) + 1))
    assert {r.source for r in traces.records} == {path}
    sizes = Counter(r.group for r in traces.records)
    assert sizes == Counter(row["group"] for row in rows)
    assert len(set(sizes.values())) == 1 and next(iter(sizes.values())) > 1  # real GRPO-like groups
    first = traces.records[0]
    assert (first.prompt, first.response, first.system, first.correct) == (
        rows[0]["prompt"], rows[0]["response"], rows[0]["system"], rows[0]["correct"])


def test_read_directory_and_file_list(traces_dir):
    files = sorted(traces_dir.glob("*.jsonl"))
    by_dir = data.read_traces(traces_dir)
    assert len(by_dir.records) == sum(len(_rows(f)) for f in files)
    order = list(dict.fromkeys(r.source for r in by_dir.records))
    assert order == files
    by_list = data.read_traces([files[-1], files[0]])
    assert list(dict.fromkeys(r.source for r in by_list.records)) == [files[-1], files[0]]


def test_tokenize_auto_uses_the_chat_template_with_a_system_prompt(traces_dir, qwen3):
    traces = data.read_traces(traces_dir / GROUPED)
    out = data.tokenize_traces(traces, qwen3)
    assert len(out) == len(traces.records)
    assert {t.prompt_format for t in out} == {"chat_template"}
    for t, r in zip(out[:20], traces.records):
        assert t.prompt_ids.dtype == np.int32 and t.response_ids.dtype == np.int32
        assert (t.id, t.group, t.source, t.line) == (r.id, r.group, r.source, r.line)
        prompt = qwen3.decode(t.prompt_ids)
        assert prompt == f"<|im_start|>system\n{r.system}<|im_end|>\n<|im_start|>user\n{r.prompt}<|im_end|>\n<|im_start|>assistant\n"
    # The tokenizer NFC-normalises, so that is what a round trip gives back.
    assert all(qwen3.decode(t.response_ids) == unicodedata.normalize("NFC", r.response)
               for t, r in zip(out, traces.records))


def test_tokenize_auto_is_raw_without_a_system_prompt(traces_dir, qwen3):
    traces = data.read_traces(traces_dir / NO_SYSTEM)
    out = data.tokenize_traces(traces, qwen3)
    assert {t.prompt_format for t in out} == {"raw"}
    r, t = traces.records[0], out[0]
    assert t.prompt_ids.tolist() == qwen3(r.prompt).input_ids
    assert t.response_ids.tolist() == qwen3(r.response, add_special_tokens=False).input_ids


def test_chat_template_never_and_always(traces_dir, qwen3):
    grouped = data.read_traces(traces_dir / GROUPED)
    never = data.tokenize_traces(grouped, qwen3, chat_template="never")
    assert {t.prompt_format for t in never} == {"raw"}
    assert qwen3.decode(never[0].prompt_ids) == grouped.records[0].prompt

    plain = data.read_traces(traces_dir / NO_SYSTEM)
    always = data.tokenize_traces(plain, qwen3, chat_template="always")
    assert {t.prompt_format for t in always} == {"chat_template"}
    assert qwen3.decode(always[0].prompt_ids) == (
        f"<|im_start|>user\n{plain.records[0].prompt}<|im_end|>\n<|im_start|>assistant\n")


def test_chat_template_always_needs_a_template(tmp_path):
    from tokenizers import Tokenizer, models
    from transformers import PreTrainedTokenizerFast

    bare = PreTrainedTokenizerFast(tokenizer_object=Tokenizer(models.WordLevel({"a": 0, "[UNK]": 1}, "[UNK]")))
    traces = data.read_traces(_write(tmp_path / "t.jsonl", [{"id": 1, "group": 1, "prompt": "a", "response": "a"}]))
    with pytest.raises(UserError, match="the tokenizer has no chat template: pass --chat-template never or auto"):
        data.tokenize_traces(traces, bare, chat_template="always")
    assert data.tokenize_traces(traces, bare)[0].prompt_format == "raw"


def test_token_id_traces_are_used_as_is(tmp_path, qwen3):
    path = _write(tmp_path / "ids.jsonl", [
        {"id": "a", "group": "g", "prompt_ids": [1, 2, 3], "response_ids": [151667, 4], "logprobs": [-0.5, 0.0]},
        {"id": "b", "group": "g", "prompt": "Hi", "response_ids": [5]},
    ])
    out = data.tokenize_traces(data.read_traces(path), qwen3)
    assert out[0].prompt_ids.tolist() == [1, 2, 3] and out[0].response_ids.tolist() == [151667, 4]
    assert out[0].prompt_format == "ids" and out[0].logprobs.tolist() == [-0.5, 0.0]
    assert out[1].prompt_format == "raw" and out[1].prompt_ids.tolist() == qwen3("Hi").input_ids
    assert out[1].logprobs is None


# --- malformed traces -------------------------------------------------------------------------

GOOD = {"id": "ok", "group": "g", "prompt": "1+1?", "response": "2"}
BAD_LINES = [
    ('{"id": "x", "group": "g", "prompt": "p", "response": ', "not valid JSON"),
    ({"id": "x", "prompt": "p", "response": "r"}, "field 'group' is missing"),
    ({"id": "x", "group": "g", "response": "r"}, "field 'prompt' (or 'prompt_ids') is missing"),
    ({"id": "x", "group": "g", "prompt": "p", "response": ""}, "the response is empty"),
    ({"id": "x", "group": "g", "prompt": "p", "response_ids": []}, "the response is empty"),
    ({"id": "x", "group": "g", "prompt_ids": [1, -2], "response": "r"}, "field 'prompt_ids' is not a list of token ids"),
    # the compiled SAM core takes ids up to 2^31-2 (index 0 passes): 2^31-1 is refused at read time, not in a suite
    ({"id": "x", "group": "g", "prompt": "p", "response_ids": [2**31 - 2, 2**31 - 1]},
     "field 'response_ids' is not a list of token ids in [0, 2^31-2] (token id 2147483647 at index 1)"),
    ([1, 2, 3], "not a JSON object"),
    ({**GOOD, "id": "x", "system": 5}, "field 'system' is int (5): use a string or null"),
    ({**GOOD, "id": "x", "model": ["m"]}, "field 'model' is list"),
    ({**GOOD, "id": "x", "step": "3"}, "field 'step' is str ('3'): the RL step is an integer or null"),
]


def _good(i: int) -> dict:
    return {**GOOD, "id": f"ok{i}"}


@pytest.mark.parametrize("bad, reason", BAD_LINES)
def test_bad_line_stops_with_file_and_line(tmp_path, bad, reason):
    path = _write(tmp_path / "t.jsonl", [_good(1), _good(2), bad, _good(4)])
    with pytest.raises(UserError) as e:
        data.read_traces(path)
    msg = str(e.value)
    assert msg.startswith(f"{path}:3: {reason}") and "--on-error skip" in msg and "\n" not in msg


@pytest.mark.parametrize("bad, reason", BAD_LINES)
def test_bad_line_is_counted_when_skipped(tmp_path, bad, reason):
    path = _write(tmp_path / "t.jsonl", [_good(1), bad, _good(3), bad])
    traces = data.read_traces(path, on_error="skip")
    assert [r.line for r in traces.records] == [1, 3]
    assert [(f, line) for f, line, _ in traces.skipped] == [(path, 2), (path, 4)]
    assert all(why.startswith(reason) for _, _, why in traces.skipped)


def test_undecodable_line_is_a_bad_line_not_a_crash(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_bytes(b"\xef\xbb\xbf" + json.dumps(_good(1)).encode() + b"\n"    # a BOM is not an error
                     + b'{"id": "x", "group": "g", "prompt": "caf\xe9", "response": "r"}\n'
                     + json.dumps(_good(3)).encode() + b"\n")
    with pytest.raises(UserError, match=re.escape(f"{path}:2: not UTF-8 text (byte 0xe9")):
        data.read_traces(path)
    traces = data.read_traces(path, on_error="skip")
    assert [r.id for r in traces.records] == ["ok1", "ok3"]
    assert [(line, why.split(" (")[0]) for _, line, why in traces.skipped] == [(2, "not UTF-8 text")]


def test_repeated_ids_are_refused_or_kept_once(tmp_path):
    path = _write(tmp_path / "t.jsonl", [_good(1), {**_good(1), "response": "other"}, _good(2), _good(1)])
    with pytest.raises(UserError, match=re.escape(f"{path}:2: id 'ok1' repeats line 1")):
        data.read_traces(path)
    traces = data.read_traces(path, on_error="skip")
    assert [(r.id, r.line, r.response) for r in traces.records] == [("ok1", 1, "2"), ("ok2", 3, "2")]
    assert [line for _, line, _ in traces.skipped] == [2, 4]
    u, v = _write(tmp_path / "u.jsonl", [_good(1)]), _write(tmp_path / "v.jsonl", [_good(1)])
    assert [r.id for r in data.read_traces([u, v]).records] == ["ok1", "ok1"]   # ids are per file


def test_non_finite_logprobs_are_a_bad_line_counted(tmp_path):
    path = _write(tmp_path / "t.jsonl", ['{"id": "a", "group": "g", "prompt": "p", "response": "r", '
                                         '"logprobs": [-0.5, NaN, -Infinity, -1.0]}', json.dumps(_good(2))])
    with pytest.raises(UserError, match=r"t.jsonl:1: field 'logprobs' holds 2 non-finite value\(s\) \(NaN/inf\) "
                                        r"of 4, the first at token 1"):
        data.read_traces(path)
    traces = data.read_traces(path, on_error="skip")   # skipped, counted and named: never averaged in
    assert [r.id for r in traces.records] == ["ok2"] and [(ln, why.split(' (')[0]) for _, ln, why in traces.skipped] == \
        [(1, "field 'logprobs' holds 2 non-finite value(s)")]
    bad = _write(tmp_path / "b.jsonl", ['{"id": "a", "group": "g", "prompt": "p", "response": "r", "logprobs": ["x"]}'])
    with pytest.raises(UserError, match="'logprobs' is not a list of finite numbers"):
        data.read_traces(bad)


def test_benchmark_with_repeated_ids_or_bad_bytes(tmp_path):
    bench = tmp_path / "benchmarks"
    bench.mkdir()
    row = {"id": "1", "problem": "p", "answer": "3"}
    (bench / "aime25.jsonl").write_text(json.dumps(row) + "\n" + json.dumps(row) + "\n")
    with pytest.raises(UserError, match=r"aime25.jsonl:2: id '1' repeats line 1"):
        data.read_benchmark("aime25", tmp_path)
    (bench / "aime25.jsonl").write_bytes(b'{"id": "1", "problem": "\xff", "answer": "3"}\n')
    with pytest.raises(UserError, match=r"aime25.jsonl:1: not UTF-8 text"):
        data.read_benchmark("aime25", tmp_path)


def test_ids_beyond_the_vocab(tmp_path, qwen3):
    vocab = len(qwen3)
    path = _write(tmp_path / "t.jsonl", [
        {"id": "a", "group": "g", "prompt_ids": [1], "response_ids": [2]},
        {"id": "b", "group": "g", "prompt_ids": [1], "response_ids": [2, vocab]},
        {"id": "c", "group": "g", "prompt_ids": [vocab + 7], "response": "x"},
    ])
    with pytest.raises(UserError) as e:
        data.tokenize_traces(data.read_traces(path), qwen3)
    assert str(e.value).startswith(f"{path}:2: response token id {vocab} is outside the tokenizer's vocabulary")

    traces = data.read_traces(path, on_error="skip")
    out = data.tokenize_traces(traces, qwen3)
    assert [t.id for t in out] == ["a"]
    assert [(line, why.split(" is ")[0]) for _, line, why in traces.skipped] == [
        (2, f"response token id {vocab}"), (3, f"prompt token id {vocab + 7}")]


def test_logprobs_must_match_the_response(tmp_path, qwen3):
    path = _write(tmp_path / "t.jsonl", [{"id": "a", "group": "g", "prompt_ids": [1], "response_ids": [2, 3], "logprobs": [-1.0]}])
    with pytest.raises(UserError, match=re.escape(f"{path}:1: 'logprobs' has 1 values but the response has 2 tokens")):
        data.tokenize_traces(data.read_traces(path), qwen3)


def test_empty_missing_and_all_bad_inputs(tmp_path):
    empty = _write(tmp_path / "empty.jsonl", [])
    with pytest.raises(UserError, match=re.escape(f"no usable traces in {empty}")):
        data.read_traces(empty)
    with pytest.raises(UserError, match=re.escape(f"trace file {tmp_path / 'nope.jsonl'} does not exist")):
        data.read_traces(tmp_path / "nope.jsonl")
    with pytest.raises(UserError, match=re.escape(f"trace directory {tmp_path / 'd'} holds no")):
        (tmp_path / "d").mkdir()
        data.read_traces(tmp_path / "d")
    all_bad = _write(tmp_path / "bad.jsonl", ["{", "[]"])
    with pytest.raises(UserError, match=r"no usable traces in .*bad.jsonl \(2 bad lines skipped\)"):
        data.read_traces(all_bad, on_error="skip")
    with pytest.raises(UserError, match="on_error 'ignore' is not valid"):
        data.read_traces(all_bad, on_error="ignore")


# --- tokenizers -------------------------------------------------------------------------------

def test_load_tokenizer(qwen3_tokenizer_dir, tmp_path):
    tok = data.load_tokenizer(qwen3_tokenizer_dir)
    assert tok.convert_tokens_to_ids("<think>") == 151667
    with pytest.raises(UserError, match=re.escape(f"tokenizer directory {tmp_path / 'missing'} does not exist")):
        data.load_tokenizer(tmp_path / "missing")
    (tmp_path / "tokenizer.json").write_text("{not json")
    with pytest.raises(UserError, match=re.escape(f"tokenizer directory {tmp_path / 'tokenizer.json'} is a file, not a "
                                                  "directory: pass a directory with tokenizer.json")):
        data.load_tokenizer(tmp_path / "tokenizer.json")
    with pytest.raises(UserError, match=re.escape(f"cannot load a tokenizer from {tmp_path}")):
        data.load_tokenizer(tmp_path)


# --- benchmarks and data directories ----------------------------------------------------------

@pytest.mark.parametrize("name", sorted(data.BENCHMARKS))
def test_read_benchmark(shared_data, name):
    fname, id_key, q_key, a_key = data.BENCHMARKS[name]
    raw = _rows(shared_data / "benchmarks" / fname)
    rows = data.read_benchmark(name, shared_data)
    assert [r["raw"] for r in rows] == raw
    assert len({r["id"] for r in rows}) == len(rows)
    assert all(isinstance(r["question"], str) and r["question"] and r["answer"] for r in rows)
    if name == "gsm8k":
        assert [r["answer"] for r in rows] == [x["answer"].split("####")[-1].strip().replace(",", "") for x in raw]
        assert all(r["answer"].lstrip("-").replace(".", "").isdigit() for r in rows)
    else:
        assert [r["answer"] for r in rows] == [str(x[a_key]) for x in raw]
        assert [r["id"] for r in rows] == [str(x[id_key]) for x in raw]


def test_benchmark_errors(tmp_path):
    with pytest.raises(UserError, match="unknown benchmark 'mmlu': use one of gsm8k, math500, aime24, aime25"):
        data.read_benchmark("mmlu", tmp_path)
    with pytest.raises(UserError, match=re.escape(f"benchmark aime25 not found: expected {tmp_path / 'benchmarks' / 'aime25.jsonl'}")):
        data.read_benchmark("aime25", tmp_path)
    (tmp_path / "benchmarks").mkdir()
    _write(tmp_path / "benchmarks" / "gsm8k_test.jsonl", [{"question": "q", "answer": "no final line"}])
    with pytest.raises(UserError, match=r"gsm8k_test.jsonl:1: the answer has no '#### N' line"):
        data.read_benchmark("gsm8k", tmp_path)


def test_find_traces(shared_data, tmp_path):
    assert data.find_traces(shared_data) == sorted((shared_data / "traces").glob("*.jsonl"))
    with pytest.raises(UserError, match=re.escape(f"expected {tmp_path / 'traces'}/*.jsonl")):
        data.find_traces(tmp_path)


def test_resolve_data_dir(tmp_path, monkeypatch):
    assert data.resolve_data_dir(tmp_path) == tmp_path
    with pytest.raises(UserError, match=re.escape(f"--data-dir {tmp_path / 'x'}: no such directory")):
        data.resolve_data_dir(tmp_path / "x")
    monkeypatch.setenv("SAMSPEC_DATA_DIR", str(tmp_path))
    assert data.resolve_data_dir() == tmp_path
    monkeypatch.setenv("SAMSPEC_DATA_DIR", str(tmp_path / "gone"))
    with pytest.raises(UserError, match="does not exist\\): pass --data-dir or set SAMSPEC_DATA_DIR"):
        data.resolve_data_dir()
    monkeypatch.delenv("SAMSPEC_DATA_DIR")
    monkeypatch.chdir(tmp_path)  # no shared/data here or one level up
    with pytest.raises(UserError, match="no data directory found: pass --data-dir or set SAMSPEC_DATA_DIR"):
        data.resolve_data_dir()


# --- the built-in benchmark sets (shipped in the package) -----------------------------------------

@pytest.mark.parametrize("name", sorted(data.BENCHMARKS))
def test_builtin_benchmarks_are_the_shared_sets(shared_data, name):
    fname = data.BENCHMARKS[name][0]
    assert (data.BUILTIN_BENCHMARKS / fname).read_bytes() == (shared_data / "benchmarks" / fname).read_bytes()
    assert data.read_benchmark(name) == data.read_benchmark(name, shared_data)


def test_gsm8k_fewshot_pool_is_the_head_of_the_train_split(shared_data):
    pool = (data.BUILTIN_BENCHMARKS / "gsm8k_fewshot.jsonl").read_text(encoding="utf-8").splitlines()
    train = (shared_data / "benchmarks" / "gsm8k_train.jsonl").read_text(encoding="utf-8").splitlines()
    assert len(pool) >= 5 and pool == train[: len(pool)]


def test_builtin_benchmarks_need_no_data_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("SAMSPEC_DATA_DIR", raising=False)
    assert len(data.read_benchmark("aime25")) == 30 and len(data.read_benchmark("math500")) == 500
    assert data.benchmarks_dir() == data.BUILTIN_BENCHMARKS and data.benchmarks_dir(tmp_path) == tmp_path / "benchmarks"


def test_builtin_benchmarks_ship_with_licences_sources_and_package_data():
    import fnmatch
    import tomllib

    root = data.BUILTIN_BENCHMARKS
    readme = (root / "README.md").read_text(encoding="utf-8")
    files = sorted(p.relative_to(root.parent).as_posix() for p in root.rglob("*") if p.is_file())
    jsonl = [p for p in files if p.endswith(".jsonl")]
    licences = [p for p in files if p.startswith("benchmarks/licenses/")]
    assert {p.rsplit("/", 1)[1] for p in jsonl} == {"gsm8k_test.jsonl", "gsm8k_fewshot.jsonl", "math500_test.jsonl",
                                                     "aime24.jsonl", "aime25.jsonl"}
    for p in jsonl + licences:   # every file and licence is named in the README
        assert p.rsplit("/", 1)[1] in readme, p
    for repo in ("openai/grade-school-math", "hao-ai-lab/Dynasor", "QwenLM/Qwen2.5-Math", "QwenLM/QwQ"):
        assert repo in readme
    assert any("Apache" in (root.parent / p).read_text() for p in licences)
    assert sum((root.parent / p).stat().st_size for p in jsonl) < 1.5e6
    globs = tomllib.loads((Path(data.__file__).parents[1] / "pyproject.toml").read_text())["tool"]["setuptools"][
        "package-data"]["samspec_bench"]
    for p in files:   # what a wheel ships
        assert any(fnmatch.fnmatch(p, g) for g in globs), f"{p} is not package data"


def test_step_field_reaches_the_tokenized_items(tmp_path, qwen3):
    p = _write(tmp_path / "t.jsonl", [{"id": 1, "group": "g", "prompt": "p", "response": "r", "step": 3},
                                      {"id": 2, "group": "g", "prompt": "p", "response": "r", "step": None}])
    traces = data.read_traces(p)
    assert [r.step for r in traces.records] == [3, None]
    assert [it.step for it in data.tokenize_traces(traces, qwen3)] == [3, None]
    bad = _write(tmp_path / "b.jsonl", [{"id": 1, "group": "g", "prompt": "p", "response": "r", "step": True}])
    with pytest.raises(UserError, match=r"b\.jsonl:1: field 'step' is bool \(True\)"):   # a bool is no RL step
        data.read_traces(bad)


# --- --limit-groups ----------------------------------------------------------------------------

def _item(source: str, step, prompt: int, response: int):
    """A tokenized response as limit_groups reads it: a prompt of its own token ids, its group named by the prompt."""
    return data.TokenizedResponse(id=f"{step}:{prompt}:{response}", group=f"p{prompt}",
                                  prompt_ids=np.array([100 + prompt, 7, 7], dtype=np.int32),
                                  response_ids=np.array([response], dtype=np.int32), source=Path(source),
                                  line=response, prompt_format="raw", step=step)


# each step file's prompts in its (shuffled) order: the first two of a step are never the first two of another
STEP_PROMPTS = {1: [0, 1, 2, 3, 8, 9], 2: [4, 5, 0, 1, 9, 2], 3: [6, 7, 2, 4, 3, 0]}


def _verl_items(steps=STEP_PROMPTS) -> list:
    return [_item(f"run/{s}.jsonl", s, p, r) for s, prompts in steps.items() for p in prompts for r in range(2)]


def test_limit_groups_keeps_the_same_prompts_at_every_rl_step():
    """Several RL steps (verl shuffles each step's batch): a prompt kept at one step is kept at every
    step it appears in, so history has earlier responses; N groups per step file on average. One
    step, or none: the first N groups of each file, as before."""
    items = _verl_items()
    kept = data.limit_groups(items, 2)
    prompts = {it.group for it in kept}
    for step, order in STEP_PROMPTS.items():
        at_step = {it.group for it in kept if it.step == step}
        assert at_step == prompts & {f"p{p}" for p in order}, step   # every kept prompt where it appears
    groups = {(it.step, it.group) for it in kept}
    most = max(Counter(p for ps in STEP_PROMPTS.values() for p in ps).values())
    assert 2 * 3 <= len(groups) < 2 * 3 + most   # N x step files, the last prompt taken whole
    assert all(n == 2 for n in Counter((it.step, it.group) for it in kept).values())   # whole groups
    assert any(len({s for s, g in groups if g == p}) > 1 for p in prompts)   # a prompt kept at two steps
    assert [it.id for it in kept] == [it.id for it in items if it in kept]   # file order kept
    for step in (None, 5):
        items = [_item(f, step, p, r) for f in ("a.jsonl", "b.jsonl") for p in (3, 1, 2) for r in range(2)]
        assert [(str(it.source), it.group) for it in data.limit_groups(items, 2)] == [
            (f, f"p{p}") for f in ("a.jsonl", "b.jsonl") for p in (3, 1) for _ in range(2)]


def test_limit_groups_chooses_by_a_stable_hash_not_pythons_salted_one():
    """The same prompts whatever PYTHONHASHSEED (runs, resumes, accept and dominance agree), and
    the same at every step."""
    code = ("import sys; sys.path.insert(0, sys.argv[1]); from test_data import _verl_items; "
            "from samspec_bench import data; kept = data.limit_groups(_verl_items(), 1); "
            "import json; print(json.dumps(sorted({(it.step, it.group) for it in kept})))")
    out = {subprocess.run([sys.executable, "-c", code, str(Path(__file__).parent)], capture_output=True, text=True,
                          check=True, env={**os.environ, "PYTHONHASHSEED": seed}).stdout for seed in ("1", "2", "3")}
    assert len(out) == 1, out
    kept = json.loads(out.pop())
    assert {g for s, g in kept if s == 2} == {g for _, g in kept} & {f"p{p}" for p in STEP_PROMPTS[2]}
