"""`samspec-bench compare` in vLLM's conventions, without vLLM: `vllm bench`'s option names
(aliases, the datasets, refusals naming what to use), a user's speculative_config reaching
the arm of its method, and each arm's figures under vLLM's names and units (TPOT in ms,
acceptance in %, mean acceptance length, per-position rates), every expected value worked out
by hand."""

from __future__ import annotations

import json
import random

import click
import pytest
from click.testing import CliRunner

from samspec_bench.bench.engines.base import GenerationResult, RequestOutput
from samspec_bench.bench.engines.vllm import compare_prompts as cp
from samspec_bench.bench.engines.vllm import method_comparison as compare
from samspec_bench.bench.engines.vllm.compare_figures import VLLM_COUNTERS, arm_rows, run_record
from samspec_bench.cli import group
from samspec_bench.errors import UserError
from samspec_bench.metrics import ResponseSteps
from samspec_bench.suites import compare as suite
from samspec_bench.suites.compare.lines import arm_table, vllm_line
from samspec_bench.suites.compare.vllm_options import OWN_OPTIONS


def _result(times, drafted, accepted, wall=2.0, counters=None):
    """Responses of 5 tokens, each decode step drafting `drafted` and accepting `accepted`;
    times: (first token s, finish s) per response."""
    outs = []
    for i, (first, finish) in enumerate(times):
        steps = ResponseSteps(key=str(i), prompt_len=2, response_len=5, position=[1, 2], drafted=[drafted] * 2,
                              accepted=[accepted] * 2, emitted=[accepted + 1] * 2)
        outs.append(RequestOutput(req_id=i, prompt_ids=[1, 2], token_ids=[5, 6, 7, 8, 9], logprobs=[],
                                  finish_reason="length", steps=steps, first_token_time_s=first, finish_time_s=finish))
    return GenerationResult(outputs=outs, steps=[], wall_time_s=wall, engine={"spec_counters": counters})


def test_arm_figures_under_vllms_names():
    # TPOT per request: (0.9 - 0.1) / 4 = 200 ms and (0.5 - 0.1) / 4 = 100 ms: mean 150, median 150
    res = _result([(0.1, 0.9), (0.1, 0.5)], drafted=3, accepted=1)
    recs = [run_record("sam", 0, "sam", None, res)]
    rows, _ = arm_rows(json.loads(json.dumps(recs)), ["sam"], {})
    v = rows["sam"]["vllm"]
    assert v["mean_tpot_ms"] == pytest.approx(150.0) and v["median_tpot_ms"] == pytest.approx(150.0)
    assert v["output_throughput"] == pytest.approx(10 / 2.0)   # 2 responses x 5 tokens in 2 s
    # 4 drafts of 3 tokens, 1 accepted each: 4 / 12 = 33.3 %, 1 + 4/4 = 2, positions [4/4, 0, 0]
    assert v["spec_decode_acceptance_rate"] == pytest.approx(100 / 3)
    assert v["spec_decode_acceptance_length"] == pytest.approx(2.0)
    assert v["spec_decode_per_position_acceptance_rates"] == pytest.approx([1.0, 0.0, 0.0])
    assert rows["sam"]["per_position_acceptance"]["value"] == pytest.approx([1.0, 0.0, 0.0])
    assert rows["sam"]["acceptance_rate"]["value"] == pytest.approx(1 / 3)   # the project's: a fraction
    assert rows["sam"]["tpot_ms"]["median"] == pytest.approx(150.0)
    line = vllm_line(v)
    assert "acceptance rate 33.3 %" in line and "mean_tpot_ms 150.00" in line and "mean acceptance length 2.00" in line
    assert "per-position acceptance rate 1.000, 0.000, 0.000" in line
    row = arm_table(rows)[0]
    assert row["spec_decode_acceptance_rate_pct"] == pytest.approx(100 / 3) and row["mean_tpot_ms"] == pytest.approx(150)


def test_vllms_own_counters_win_when_the_call_has_them():
    counters = {"vllm:spec_decode_num_drafts": 5, "vllm:spec_decode_num_draft_tokens": 15,
                "vllm:spec_decode_num_accepted_tokens": 6, "vllm:spec_decode_num_accepted_tokens_per_pos": [4, 2, 0]}
    recs = [run_record("ngram", 0, "ngram", None, _result([(0.1, 0.5)], 3, 1, counters=counters))]
    v = arm_rows(recs, ["ngram"], {})[0]["ngram"]["vllm"]
    # 6 / 15 = 40 %, 1 + 6/5 = 2.2, [0.8, 0.4, 0]
    assert v["spec_decode_acceptance_rate"] == pytest.approx(40.0) and v["spec_decode_acceptance_length"] == 2.2
    assert v["spec_decode_per_position_acceptance_rates"] == pytest.approx([0.8, 0.4, 0.0])
    assert v["source"]["spec_decode"] == VLLM_COUNTERS


def test_own_options_list_is_the_commands():
    opts = {o for p in suite.command.params if isinstance(p, click.Option) for o in p.opts if o.startswith("--")}
    assert opts == set(OWN_OPTIONS)


def _config(*args):
    params = suite.command.make_context("compare", list(args)).params
    for k in ("output", "json_path", "resume"):
        params.pop(k)
    return suite.build_config(**params)


def test_vllm_bench_names_mean_the_same(tmp_path):
    f = tmp_path / "prompts.jsonl"
    f.write_text('{"prompt": "a"}\n{"prompt": "b"}\n')
    cfg = _config("--dataset-name", "custom", "--dataset-path", str(f), "--output-len", "64", "--seed", "3",
                  "--temperature", "0", "--ignore-eos", "--max-model-len", "2048", "--enforce-eager",
                  "--speculative-config", '{"method": "ngram", "prompt_lookup_max": 4}', "--methods", "none,ngram")
    assert (cfg.benchmark, cfg.dataset_path, cfg.max_tokens, cfg.seed, cfg.ignore_eos) == ("custom", str(f), 64, 3, True)
    assert cfg.engine_args == {"speculative_config": {"method": "ngram", "prompt_lookup_max": 4},
                               "max_model_len": 2048, "enforce_eager": True}
    assert _config("--dataset-name", "random", "--input-len", "16").input_len == 16
    assert _config("--dataset-name", "random").input_len == cp.RANDOM_INPUT_LEN


@pytest.mark.parametrize("args, says", [
    (["--temperature", "0.7"], "--temperature 0.7: compare measures greedy"),
    (["--request-rate", "4"], "--request-rate: compare runs vLLM's offline engine"),
    (["--max-concurrency", "8"], "--max-num-seqs N"),
    (["--num-iters", "3"], "--repeats N"),
    (["--dataset-name", "sonnet"], "--dataset-name 'sonnet': vLLM's sonnet dataset is not read here"),
    (["--dataset-name", "custom"], "give its file with --dataset-path"),
    (["--input-len", "32"], "--input-len 32: sets the prompt length of --dataset-name random only"),
    (["--speculative-config", '{"method": "ngram"}', "--methods", "none,sam"], "add ngram to --methods"),
    (["--speculative-config", '{"method": "eagle3", "model": "x"}'], "method 'eagle3'"),
    (["--speculative-config", "ngram"], "not JSON"),
    (["--engine-arg", "max_model_len=1", "--max-model-len", "2"], "max_model_len given twice"),
])
def test_options_with_no_meaning_here_say_what_to_use(tmp_path, monkeypatch, args, says):
    monkeypatch.setattr(compare, "_build", lambda *a, **k: pytest.fail("no engine for bad options"))
    res = CliRunner().invoke(group, ["compare", *args, "--output", str(tmp_path / "runs")])
    assert isinstance(res.exception, UserError) and says in str(res.exception), (args, res.output)
    assert "\n" not in str(res.exception) and not (tmp_path / "runs").exists()


def test_file_datasets_are_shuffled_as_vllm_shuffles_them(tmp_path):
    rows = [f"prompt {i}" for i in range(6)]
    f = tmp_path / "c.jsonl"
    f.write_text("".join(json.dumps({"prompt": r}) + "\n" for r in rows))
    g = tmp_path / "s.json"
    g.write_text(json.dumps([{"conversations": [{"value": r}, {"value": "answer"}]} for r in rows]
                            + [{"conversations": [{"value": "one turn only"}]}]))
    want = list(rows)
    random.seed(5)            # what vLLM's custom and ShareGPT datasets do
    random.shuffle(want)
    assert cp.prompt_texts(cp.check_prompt_spec("custom", str(f), None, 5), 4, None) == want[:4]
    assert cp.prompt_texts(cp.check_prompt_spec("sharegpt", str(g), None, 5), 10, None) == want
    f.write_text('{"text": "no prompt"}\n')
    with pytest.raises(UserError, match=r"c.jsonl:1: not a custom dataset row"):
        cp.prompt_texts(cp.check_prompt_spec("custom", str(f), None, 0), 4, None)


class _Tok:
    vocab_size = 10
    all_special_ids = [0, 1]


def test_random_prompts_are_exact_length_non_special_and_seeded():
    a = cp.random_prompt_ids(_Tok(), 3, 50, seed=1)
    assert [len(p) for p in a] == [50, 50, 50] and {t for p in a for t in p} <= set(range(2, 10))
    assert a == cp.random_prompt_ids(_Tok(), 3, 50, seed=1) and a != cp.random_prompt_ids(_Tok(), 3, 50, seed=2)
