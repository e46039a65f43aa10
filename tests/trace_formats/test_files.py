"""Which files a --traces value stands for: files that are not UTF-8 JSONL are named with what
they are and the fix, and compressed trace files in a folder are refused, not silently left out."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from samspec_bench.errors import UserError
from samspec_bench.trace_formats import expand, read_any

ROW = {"input": "user\nQ: 1+1?\nassistant\n", "output": "the answer is 2. the answer is 2.", "score": 1.0}


def step_file(d: Path, step: int, n: int = 2) -> bytes:
    data = "".join(json.dumps(dict(ROW, step=step)) + "\n" for _ in range(n)).encode()
    d.mkdir(parents=True, exist_ok=True)
    (d / f"{step}.jsonl").write_bytes(data)
    return data


def test_a_gzipped_step_beside_plain_steps_is_refused_not_dropped(tmp_path):
    d = tmp_path / "rollout_data_dir"
    step_file(d, 1)
    (d / "2.jsonl.gz").write_bytes(gzip.compress(step_file(d, 2)))
    (d / "2.jsonl").unlink()
    for fmt in ("auto", "verl"):
        with pytest.raises(UserError, match=r"1 compressed trace file\(s\) \(2\.jsonl\.gz\).*decompress"):
            read_any(d, fmt)


def test_a_gzipped_lm_eval_samples_file_below_the_folder_is_refused(tmp_path):
    sub = tmp_path / "org__model"
    sub.mkdir()
    (sub / "samples_gsm8k_2025-01-01T00-00-00.jsonl.gz").write_bytes(gzip.compress(b"{}\n"))
    with pytest.raises(UserError, match=r"org__model/samples_gsm8k_2025-01-01T00-00-00\.jsonl\.gz"):
        expand(tmp_path)


@pytest.mark.parametrize("content, why", [
    (b"", r"no JSON object in its first 20 lines \(the file is empty\): leave it out"),
    (gzip.compress(b'{"prompt": "a", "response": "b"}\n'), "gzip-compressed"),
    ('{"prompt": "a", "response": "b"}\n'.encode("utf-16"), "UTF-16 text: convert it to UTF-8"),
    (b'[\n  {\n    "prompt": "a",\n    "response": "b"\n  }\n]\n', "one JSON array, not JSON lines"),
], ids=["empty", "gzip", "utf-16", "json-array"])
def test_a_file_that_is_not_utf8_jsonl_is_named_with_what_it_is(tmp_path, content, why):
    f = tmp_path / "traces.jsonl"
    f.write_bytes(content)
    with pytest.raises(UserError, match=f"trace file {f}: {why}"):
        expand(f)
    with pytest.raises(UserError, match=f"traces.jsonl \\({why}"):
        expand(tmp_path)


def test_the_unknown_format_hint_names_trace_format_only_for_a_command_that_has_it(tmp_path):
    """accept passes its --trace-format value ('auto' by default) and is told to use it; drafters,
    rollout and dominance (no such option) pass none and are not."""
    f = tmp_path / "qa.jsonl"
    f.write_text(json.dumps({"question": "1+1?", "answer": "2"}) + "\n")
    for call in (lambda: expand(f), lambda: expand(tmp_path), lambda: read_any(f), lambda: read_any([tmp_path])):
        with pytest.raises(UserError) as e:
            call()
        assert "--trace-format" not in str(e.value) and "answer, question" in str(e.value)
    for call in (lambda: expand(f, "auto"), lambda: expand(tmp_path, "auto"), lambda: read_any(f, "auto")):
        with pytest.raises(UserError, match="--trace-format"):
            call()



def test_an_empty_verl_step_in_a_folder_is_a_step_without_responses_said(tmp_path):
    """verl dumps an empty batch as one newline: beside other verl step files it is read as a step
    with no responses and said (as a skipped line), not refused as a file of unknown format; a
    folder of blank files alone is still refused."""
    folder = tmp_path / "rollout"
    folder.mkdir()
    row = {"input": "user\nWhat is 2+2?\nassistant\n", "output": "2+2 = 4.", "gts": None, "score": 1.0}
    (folder / "10.jsonl").write_text(json.dumps({**row, "step": 10}) + "\n")
    (folder / "20.jsonl").write_text("\n")
    (folder / "30.jsonl").write_text(json.dumps({**row, "step": 30}) + "\n")
    traces, formats = read_any(folder)
    assert [Path(f).name for f in formats] == ["10.jsonl", "20.jsonl", "30.jsonl"]
    assert set(formats.values()) == {"verl"} and len(traces.records) == 2
    assert [(Path(f).name, why) for f, _, why in traces.skipped] == [
        ("20.jsonl", "an RL step with no responses (verl writes an empty batch as one blank line)")]
    alone = tmp_path / "blank"
    alone.mkdir()
    (alone / "1.jsonl").write_text("\n")
    with pytest.raises(UserError, match="not understood"):
        read_any(alone)


def test_a_step_file_that_is_a_broken_link_is_refused_not_left_out(tmp_path):
    """A step file that is a broken symbolic link (or a folder named 3.jsonl) would drop its step
    silently with --trace-format verl; it is named with the fix, in every format mode."""
    d = tmp_path / "rollout_data_dir"
    step_file(d, 1)
    step_file(d, 2)
    (d / "3.jsonl").symlink_to(tmp_path / "moved" / "3.jsonl")
    for fmt in ("auto", "verl"):
        with pytest.raises(UserError, match=r"rollout_data_dir: 3\.jsonl named for an RL step but not a readable "
                                            r"file \(a broken symbolic link, or a folder\): restore"):
            read_any(d, fmt)


def test_a_folder_of_run_folders_names_the_subfolders_to_pass(tmp_path):
    """One rollout_data_dir per experiment (or a run's rollout and val folders) under one folder:
    the folder holds no step files itself, and the message names the subfolders that do."""
    for run in ("exp_a", "exp_b"):
        step_file(tmp_path / "runs" / run, 1)
    (tmp_path / "runs" / "logs").mkdir()
    for fmt in ("auto", "verl", "plain"):
        with pytest.raises(UserError) as e:
            expand(tmp_path / "runs", fmt)
        if fmt != "verl":   # verl: the rollout_data_dir message
            assert "its subfolders exp_a, exp_b do" in str(e.value) and f"--traces {tmp_path / 'runs' / 'exp_a'}" \
                in str(e.value) and "logs" not in str(e.value)
