"""The readers of users' rollouts: lines that are no generated responses are refused or skipped
and counted, never read as responses."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from samspec_bench.errors import UserError
from samspec_bench.trace_formats import read_any, read_rl_steps

DATE = "2025-03-01T10-20-30.123456"


def samples(d: Path, task: str, rows: list[dict]) -> Path:
    d.mkdir(parents=True, exist_ok=True)
    f = d / f"samples_{task}_{DATE}.jsonl"
    f.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return f


def generation(doc_id: int) -> dict:
    return {"doc_id": doc_id, "doc": {}, "target": "2", "filter": "none", "resps": [["the answer is 2.", "2."]],
            "arguments": {"gen_args_0": {"arg_0": f"Q{doc_id}: 1+1?\nA:", "arg_1": {"until": ["Q:"]}}}}


def perplexity(doc_id: int, old: bool = False) -> dict:
    """A loglikelihood_rolling line (wikitext) as lm-eval writes it: arguments (text,), and
    'resps' the log-likelihood, stringified by sanitize_list."""
    args = [["Some page of text."]] if old else {"gen_args_0": {"arg_0": "Some page of text."}}
    return {"doc_id": doc_id, "doc": {"page": "x"}, "target": "", "filter": "none", "arguments": args,
            "resps": [["-1234.5678"]], "filtered_resps": ["-1234.5678"], "word_perplexity": [-1234.5678, 4]}


@pytest.mark.parametrize("old", [False, True])
def test_a_perplexity_tasks_log_likelihoods_are_not_read_as_responses(tmp_path, old):
    samples(tmp_path, "gsm8k", [generation(0), generation(1)])
    wiki = samples(tmp_path, "wikitext", [perplexity(0, old), perplexity(1, old)])
    traces, _ = read_any(tmp_path, on_error="skip")
    assert len(traces.records) == 4 and {r.dataset for r in traces.records} == {"gsm8k"}
    assert [(f, line) for f, line, _ in traces.skipped] == [(wiki, 1), (wiki, 2)]
    assert "generate_until" in traces.skipped[0][2]
    with pytest.raises(UserError, match=r"samples_wikitext_.*\.jsonl:1: .*generation tasks only"):
        read_any(tmp_path)


def test_the_model_is_read_from_the_results_file_of_a_json_output_path(tmp_path):
    # lm-eval >= 0.4.9 with --output_path run.json writes run_<date>.json (not results_<date>.json) and the
    # samples beside it (EvaluationTracker.save_results_aggregated / save_results_samples)
    samples(tmp_path, "gsm8k", [generation(0)])
    (tmp_path / f"run_{DATE}.json").write_text(json.dumps({"model_name": "Qwen/Qwen2.5-Math-7B-Instruct"}),
                                              encoding="utf-8")
    (tmp_path / "results_2024-01-01T00-00-00.000000.json").write_text(json.dumps({"model_name": "other/model"}),
                                                                      encoding="utf-8")
    traces, _ = read_any(tmp_path)
    assert {r.model for r in traces.records} == {"Qwen/Qwen2.5-Math-7B-Instruct"}


def test_the_rollout_reader_says_and_counts_an_empty_step_file(tmp_path):
    """rollout replays every line (no --on-error): an empty step verl dumped (one blank line) is
    left out, and its note and counts (result.json's workload) say so, as accept does."""
    row = {"input": "user\nWhat is 2+2?\nassistant\n", "output": "2+2 = 4.", "gts": None, "score": 1.0}
    for step in (1, 2):
        (tmp_path / f"{step}.jsonl").write_text(json.dumps({**row, "step": step}) + "\n")
    (tmp_path / "3.jsonl").write_text("\n")
    counts: dict = {}
    traces, note = read_rl_steps(tmp_path, counts=counts)
    assert len(traces.records) == 2
    assert note == (f"1 line(s) skipped: {tmp_path / '3.jsonl'}:1 (an RL step with no responses (verl writes an "
                    "empty batch as one blank line))")
    assert counts["skipped_lines"] == 1 and counts["skipped"][0]["file"] == str(tmp_path / "3.jsonl")
    (tmp_path / "3.jsonl").unlink()
    assert read_rl_steps(tmp_path, counts=counts)[1] is None and counts["skipped_lines"] == 0
