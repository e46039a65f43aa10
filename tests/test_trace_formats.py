"""Rollouts in the formats users have: verl rollout dumps (built in verl's exact schema from the
shared traces, see trace_fixtures.py), lm-eval --log_samples files, plain prompt/response
JSONL; format detection; bad input; the model check; tool output and validation generations;
the other commands (drafters, rollout) reading the same formats."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from samspec_bench import cli
from samspec_bench.data import load_tokenizer, read_traces, tokenize_traces
from samspec_bench.errors import UserError
from samspec_bench.trace_formats import (VALIDATION_FOLDER, check_models, detect_file, expand, find_tool_spans,
                                          prompt_group, read_any, read_rl_steps, same_model, validation_row)
from trace_fixtures import (grouped_rows, tool_rollout, verl_input, write_lm_eval_samples, write_tool_dump,
                            write_verl_dump)

QWEN = "qwen25math_math_100x8.jsonl"


@pytest.fixture(scope="module")
def qwen3(qwen3_tokenizer_dir):
    return load_tokenizer(qwen3_tokenizer_dir)


@pytest.fixture(scope="module")
def groups(traces_dir):
    return grouped_rows(traces_dir / QWEN, 4)


@pytest.fixture(scope="module")
def verl_dir(tmp_path_factory, qwen3, groups):
    d = tmp_path_factory.mktemp("verl") / "rollout_data"
    info = write_verl_dump(d, qwen3, groups, batch=2, n=4, epochs=2)
    return d, info


def test_verl_dump_is_read_with_steps_and_groups(verl_dir, groups, qwen3):
    d, info = verl_dir
    files = expand(d)
    assert [f.name for f, _ in files] == ["1.jsonl", "2.jsonl", "3.jsonl", "4.jsonl"]
    assert {kind for _, kind in files} == {"verl"}
    traces, formats = read_any(d)
    assert set(formats.values()) == {"verl"} and len(formats) == 4
    assert len(traces.records) == sum(info["lines"].values()) == 4 * 2 * 4
    assert sorted({r.step for r in traces.records}) == [1, 2, 3, 4]
    # a group is the lines of one step with the same input, named the same in every step
    by_step_group: dict[tuple, list] = {}
    for r in traces.records:
        by_step_group.setdefault((r.step, r.group), []).append(r)
    assert all(len(v) == 4 for v in by_step_group.values())
    g0 = prompt_group(verl_input(qwen3, groups[0][0]))
    assert {s for s, g in by_step_group if g == g0} == {1, 3}   # epoch 1 and epoch 2
    assert all(r.model is None and r.system is None for r in traces.records)
    # the responses are the shared trace's (through verl's decode), the epochs' distinct ones
    first = [r.response for r in traces.records if r.group == g0]
    assert sorted(first) == sorted(row["response"] for row in groups[0][:8])
    # prompts: the decoded template text, tokenized raw; the step reaches the tokenized items
    items = tokenize_traces(traces, qwen3)
    assert {it.prompt_format for it in items} == {"raw"} and {it.step for it in items} == {1, 2, 3, 4}
    rec = next(r for r in traces.records if r.id == items[0].id)
    assert items[0].prompt_ids.tolist() == qwen3(rec.prompt)["input_ids"]          # the decoded text, re-encoded
    assert items[0].response_ids.tolist() == qwen3(rec.response, add_special_tokens=False)["input_ids"]


def test_verl_single_file_and_forced_format(verl_dir):
    d, _ = verl_dir
    assert detect_file(d / "3.jsonl") == "verl"
    traces, _ = read_any([d / "3.jsonl"], "verl")
    assert {r.step for r in traces.records} == {3}


def test_verl_without_a_step_field_takes_the_file_name(tmp_path):
    d = tmp_path / "dump"
    d.mkdir()
    (d / "7.jsonl").write_text(json.dumps({"input": "user\nq\nassistant\n", "output": "a b", "score": 0.0}) + "\n")
    traces, _ = read_any(d)
    assert traces.records[0].step == 7


@pytest.mark.parametrize("line, reason", [
    ({"input": "q", "score": 1.0, "step": 1}, "'output' is missing"),
    ({"input": 3, "output": "a", "step": 1}, "'input' is int"),
    ({"input": "q", "output": "", "step": 1}, "the response ('output') is empty"),
    ({"input": "q", "output": "a", "step": 2}, "'step' is 2 but the file is named for step 1"),
    ({"input": "q", "output": "a", "step": "abc"}, "'step' is 'abc', not an integer"),
    ({"input": "q", "output": "a", "step": True}, "'step' is True, not an integer"),
])
def test_verl_bad_lines_name_file_line_and_fix(tmp_path, line, reason):
    d = tmp_path / "dump"
    d.mkdir()
    good = {"input": "q", "output": "a", "score": 1.0, "step": 1}
    (d / "1.jsonl").write_text(json.dumps(good) + "\n" + json.dumps(line) + "\n")
    with pytest.raises(UserError) as e:
        read_any(d, "verl")
    msg = str(e.value)
    assert f"{d / '1.jsonl'}:2:" in msg and reason in msg and "--on-error skip" in msg and "\n" not in msg
    traces, _ = read_any(d, "verl", on_error="skip")
    assert len(traces.records) == 1 and traces.skipped[0][1] == 2 and reason in traces.skipped[0][2]


def test_verl_directory_without_step_files(tmp_path):
    (tmp_path / "rollouts.jsonl").write_text(json.dumps({"input": "q", "output": "a"}) + "\n")
    with pytest.raises(UserError, match=r"holds no verl step files \({global_step}.jsonl"):
        read_any(tmp_path, "verl")
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(UserError, match="holds no \\*.jsonl files"):
        read_any(empty)


def test_bad_utf8_and_json_lines_follow_on_error(tmp_path):
    d = tmp_path / "dump"
    d.mkdir()
    good = json.dumps({"input": "q", "output": "a", "step": 1}).encode()
    (d / "1.jsonl").write_bytes(good + b"\n" + b'{"input": "q\xff", "output": "a"}\n' + b"{not json\n")
    with pytest.raises(UserError, match=r"1.jsonl:2: not UTF-8 text \(byte 0xff"):
        read_any(d)
    traces, _ = read_any(d, on_error="skip")
    assert [s[1] for s in traces.skipped] == [2, 3] and len(traces.records) == 1


def test_lm_eval_samples(tmp_path, groups):
    out = write_lm_eval_samples(tmp_path / "lm", groups[:3], repeats=4)
    files = expand(out)
    assert len(files) == 1 and files[0][1] == "lm-eval"
    traces, _ = read_any(out)
    recs = traces.records
    # one document's responses once, whatever the number of filters; its repeats are its group
    assert len(recs) == 3 * 4
    assert {r.group for r in recs} == {"hendrycks_math500:0", "hendrycks_math500:1", "hendrycks_math500:2"}
    assert {r.model for r in recs} == {"Qwen/Qwen2.5-Math-7B-Instruct"}
    assert [r.sub for r in recs[:4]] == [0, 1, 2, 3] and len({(r.line, r.sub) for r in recs}) == 12
    assert recs[0].prompt.startswith("Problem:\n") and recs[0].response == groups[0][0]["response"]


def test_lm_eval_older_list_arguments_and_bad_lines(tmp_path):
    p = tmp_path / "samples_gsm8k_2024.jsonl"
    rows = [{"doc_id": 0, "arguments": [["Q: 1+1?\nA:", {"until": ["Q:"]}]], "resps": [["2"]], "filter": "none"},
            {"doc_id": 1, "resps": [["3"]], "filter": "none"}]
    p.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(UserError, match="needs 'doc_id' and 'arguments'"):
        read_any(p)
    traces, _ = read_any(p, on_error="skip")
    assert [(r.prompt, r.response, r.sub) for r in traces.records] == [("Q: 1+1?\nA:", "2", None)]


def test_plain_prompt_response(tmp_path):
    p = tmp_path / "rollouts.jsonl"
    rows = [{"prompt": "p1", "response": "a"}, {"prompt": "p2", "response": "b"}, {"prompt": "p1", "response": "c",
                                                                                  "model": "Qwen/Qwen3-8B"}]
    p.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert detect_file(p) == "plain"
    traces, formats = read_any(p)
    assert formats == {str(p): "plain"}
    g = [r.group for r in traces.records]
    assert g[0] == g[2] != g[1] and len({r.id for r in traces.records}) == 3


def test_native_traces_still_read_by_data(traces_dir, tmp_path):
    src = traces_dir / QWEN
    p = tmp_path / QWEN
    with src.open(encoding="utf-8") as f:
        p.write_text("".join(next(f) for _ in range(8)), encoding="utf-8")
    traces, formats = read_any(tmp_path)
    assert formats == {str(p): "samspec"}
    assert [r.id for r in traces.records] == [r.id for r in read_traces(p).records]


def test_unknown_format_names_the_keys_and_the_formats(tmp_path):
    p = tmp_path / "x.jsonl"
    p.write_text(json.dumps({"question": "q", "completion": "a"}) + "\n")
    with pytest.raises(UserError) as e:
        read_any(p, "auto")   # as accept reads (its --trace-format): the message names the option
    msg = str(e.value)
    assert "completion, question" in msg and "verl rollout dumps (input, output, score, step)" in msg
    assert "--trace-format" in msg and "\n" not in msg


def test_model_check(tmp_path):
    def traces_of(rows):
        p = tmp_path / f"t{len(list(tmp_path.iterdir()))}.jsonl"
        p.write_text("".join(json.dumps(r) + "\n" for r in rows))
        return read_any(p)[0]

    text = traces_of([{"id": 1, "group": 1, "prompt": "p", "response": "r", "model": "Qwen/Qwen3-8B"}])
    for spec in ("Qwen3-8B", "Qwen/Qwen3-8B", str(tmp_path / "Qwen3-8B")):
        assert check_models(text, spec)["models"] == {str(text.records[0].source): ["Qwen/Qwen3-8B"]}
    with pytest.raises(UserError, match="responses of 'Qwen/Qwen3-8B', not of --model Qwen3-32B.*--any-model"):
        check_models(text, "Qwen3-32B")
    assert check_models(text, "Qwen3-32B", any_model=True)["any_model"] is True
    unstated = traces_of([{"id": 1, "group": 1, "prompt": "p", "response": "r"}])
    assert check_models(unstated, "Qwen3-32B")["unstated"] == [str(unstated.records[0].source)]
    mixed = traces_of([{"id": 1, "group": 1, "prompt_ids": [1, 2], "response_ids": [3], "model": "a/x"},
                       {"id": 2, "group": 1, "prompt_ids": [1, 2], "response_ids": [4], "model": "b/y"}])
    with pytest.raises(UserError, match="token ids from different models .*different tokenizers"):
        check_models(mixed, None)
    assert check_models(mixed, None, any_model=True)["models"] == {str(mixed.records[0].source): ["a/x", "b/y"]}


def test_read_any_needs_something(tmp_path):
    with pytest.raises(UserError, match="does not exist"):
        read_any(tmp_path / "missing.jsonl")
    with pytest.raises(UserError, match="--trace-format 'csv'"):
        read_any(tmp_path, "csv")
    p = tmp_path / "t.jsonl"
    p.write_text(json.dumps({"input": "q", "output": ""}) + "\n")
    with pytest.raises(UserError, match="no usable traces .*1 bad lines skipped"):
        read_any(p, on_error="skip")
    # a file without a JSON object to detect a format from, or not readable, is named before tokenizing
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    with pytest.raises(UserError, match=f"trace file {empty}: no JSON object in its first 20 lines"):
        read_any(empty)
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "a.jsonl").mkdir()    # a directory named like a trace file
    with pytest.raises(UserError, match=r"1 of 1 file\(s\) not understood as traces: a.jsonl \(cannot be read"):
        read_any(tmp_path / "d")


def test_lm_eval_files_are_detected_in_a_folder_tree(tmp_path, groups):
    out = write_lm_eval_samples(tmp_path / "lm", groups[:1], task="gsm8k", repeats=2)
    (Path(out) / "notes.jsonl").write_text(json.dumps({"prompt": "x", "response": "y"}) + "\n")
    # every file is read, each in its own format: nothing beside the samples is left out silently
    assert sorted((f.name, k) for f, k in expand(out)) == [("notes.jsonl", "plain"),
                                                           ("samples_gsm8k_2025-06-01T12-00-00.000000.jsonl", "lm-eval")]


@pytest.mark.parametrize("trace_model, spec, same", [
    ("Qwen/Qwen3-8B", "Qwen3-8B", True),
    ("Qwen3-8B", "Qwen/Qwen3-8B", True),
    ("qwen/qwen3-8b", "/ckpt/Qwen3-8B", True),
    ("Qwen/Qwen3-8B", "Qwen3-32B", False),
    ("Qwen2.5-Math-Instruct (size unstated)", "Qwen3-8B", False),
    ("builtin:smollm2-135m", "builtin:smollm2-135m", True),
    ("builtin:smollm2-135m", "builtin:tiny-qwen3", False),
])
def test_same_model(trace_model, spec, same):
    assert same_model(trace_model, spec) is same




# --- tool output, validation generations, and the other commands that read traces -----------------

def test_tool_spans_of_a_verl_multi_turn_output(qwen3):
    text, pieces = tool_rollout(qwen3, 391, "alpha bravo", 1)
    spans = find_tool_spans(text)
    assert [text[a:b] for a, b, _ in spans] == [p for p, tool in pieces if tool]
    assert [s for *_, s in spans] == ["tool-response", "tool-response"]


@pytest.mark.parametrize("pieces, shape", [
    # special tokens kept (the model's <|im_end|> is generated), two tool responses in one turn,
    # thinking switched off in the generation prompt
    ([("I call it.<tool_call>\n{}\n</tool_call><|im_end|>", False),
      ("<|im_start|>user\n<tool_response>\n1\n</tool_response>\n<tool_response>\n2\n</tool_response><|im_end|>\n"
       "<|im_start|>assistant\n<think>\n\n</think>\n\n", True), ("Both done.", False)], "tool-response"),
    # an interaction (user) turn with its special tokens
    ([("Answer: 4.<|im_end|>", False), ("\n<|im_start|>user\nAre you sure?<|im_end|>\n<|im_start|>assistant\n", True),
      ("Yes, 4.", False)], "chat-turn"),
    # ToRA: the executor's result appended after the model's code block
    ([("```python\nprint(1 + 1)\n```", False), ("\n```output\n2\n```\n", True), ("The answer is 2.", False)],
     "output-block"),
    ([("```python\nprint(x)\n```", False), ("\n```output\nNameError\n```\n\nReach max function call limit.", True)],
     "output-block"),
    # model text that only looks like it
    ([("The user\nasked for <tool_call> and ```python\nx\n``` but printed no ```output.", False)], None),
])
def test_tool_spans_by_shape(pieces, shape):
    text = "".join(p for p, _ in pieces)
    spans = find_tool_spans(text)
    assert [text[a:b] for a, b, _ in spans] == [p for p, tool in pieces if tool]
    assert {s for *_, s in spans} == ({shape} if shape else set())


def test_responses_with_tool_output_are_tokenized_piece_by_piece(tmp_path, qwen3):
    text, pieces = tool_rollout(qwen3, 391, "alpha bravo", 1)
    f = tmp_path / "p.jsonl"
    f.write_text(json.dumps({"prompt": "q", "response": text}) + "\n" + json.dumps({"prompt": "q", "response": "4"})
                 + "\n")
    traces, _ = read_any(f)
    item, single = tokenize_traces(traces, qwen3)
    n = [len(qwen3(p, add_special_tokens=False)["input_ids"]) for p, _ in pieces]
    at = [sum(n[:i]) for i in range(len(n) + 1)]
    assert item.response_ids.size == at[-1]
    assert [(s, e) for s, e, _ in item.tool_spans] == [(at[i], at[i + 1]) for i, (_, t) in enumerate(pieces) if t]
    assert single.tool_spans == () and single.response_ids.tolist() == qwen3("4", add_special_tokens=False)["input_ids"]


@pytest.mark.parametrize("name, val", [("val", True), ("val_generations", True), ("validation_data", True),
                                       ("Valid-2", True), ("values", False), ("valley", False), ("eval", False),
                                       ("rollout_data_dir", False)])
def test_validation_folder_names(name, val):
    assert bool(VALIDATION_FOLDER.match(name)) is val


@pytest.mark.parametrize("row, val", [({"score": 1.0, "reward": 1.0}, True), ({"score": 0.0, "reward": 0}, True),
                                      ({"score": 1.0, "reward": 0.5}, False), ({"score": 1.0}, False),
                                      ({"score": True, "reward": True}, False)])
def test_validation_shape(row, val):
    assert validation_row(row) is val


def test_rl_step_reading_handles_validation_as_accept_does(verl_dir, qwen3, tmp_path):
    d, info = verl_dir
    val = tmp_path / "val"
    write_tool_dump(val, qwen3, steps=[0])
    counts: dict = {}
    traces, note = read_rl_steps([d, val], counts=counts)   # beside rollouts: left out and counted
    assert len(traces.records) == 32 and note is None
    assert counts["validation"]["excluded"] == 4 and counts["validation"]["rollout_responses"] == 32
    traces, _ = read_rl_steps([d, val], include_validation=True, counts=counts)   # replayed as RL steps
    assert len(traces.records) == 36 and counts["validation"]["included"] is True
    assert {r.step for r in traces.records if str(val) in str(r.source)} == {0}
    traces, note = read_rl_steps(d, include_validation=True, counts=counts)   # nothing to include: recorded
    assert len(traces.records) == 32 and counts["validation"]["responses"] == 0
    assert "includes nothing" in counts["validation"]["handling"]
    # multi-turn responses are read with their tool turns marked (the rollout prefills them)
    tools = tmp_path / "tools"
    write_tool_dump(tools, qwen3, steps=[1])
    traces, note = read_rl_steps(tools)
    assert note is None and all(any(s == "tool-response" for *_, s in r.tool_spans) for r in traces.records)
    # validation generations alone: read without RL steps, and recorded
    alone = tmp_path / "validation"
    alone.mkdir()
    shutil.copy(d / "1.jsonl", alone / "1.jsonl")
    traces, note = read_rl_steps(alone, counts=counts)
    assert len(traces.records) == info["lines"][1] and {r.step for r in traces.records} == {None}
    assert counts["validation"]["handling"].startswith("validation generations only")


def test_drafters_and_rollout_read_verl_dumps_and_lm_eval_samples(verl_dir, groups, qwen3_tokenizer_dir, qwen3,
                                                                  tmp_path, capsys):
    d, _ = verl_dir
    samples = next(write_lm_eval_samples(tmp_path / "lm", groups, repeats=1).rglob("samples_*.jsonl"))
    cli.main(["drafters", "--traces", str(d), "--traces", str(samples), "--tokenizer", str(qwen3_tokenizer_dir),
              "--max-tokens", "4000", "--sweep", "256,1024", "--sweep-steps", "20", "--repeats", "1",
              "--drafters", "sam", "--output", str(tmp_path / "d"), "--json", str(tmp_path / "d.json"),
              "--no-progress"])
    result = json.loads((tmp_path / "d.json").read_text())
    assert sorted(Path(f).name for f in result["data_files"]) == ["1.jsonl", "2.jsonl", "3.jsonl", "4.jsonl",
                                                                  samples.name]
    repeats = next(write_lm_eval_samples(tmp_path / "lm4", groups, repeats=4).rglob("samples_*.jsonl"))
    with pytest.raises(SystemExit) as e:
        cli.main(["drafters", "--traces", str(repeats), "--tokenizer", str(qwen3_tokenizer_dir), "--output",
                  str(tmp_path / "d4"), "--no-progress"])
    err = capsys.readouterr().err
    assert e.value.code == 2 and "several responses per document (repeats)" in err and len(err.splitlines()) == 1
    cli.main(["rollout", "--engine", "replay", "--traces", str(d), "--tokenizer", str(qwen3_tokenizer_dir),
              "--prompts", "2", "-k", "3", "--output", str(tmp_path / "r"), "--json", str(tmp_path / "r.json")])
    assert json.loads((tmp_path / "r.json").read_text())["suite"] == "rollout"

