"""`samspec-bench accuracy`: the lm-eval adapter (stop strings, caching, failed samples) with a
stub engine, and the suite end to end on builtin:smollm2-135m over a few GSM8K-format
problems (greedy, short responses: the 135M model's scores are low; the machinery is tested)."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

from samspec_bench.errors import UserError
from samspec_bench.evals.paired import agreement
from accuracy_stubs import StubEngine

# lm-eval's own options at the command's defaults (build_config takes every option)
LM_EVAL_OPTIONS = dict(top_k=0, model_args=None, gen_kwargs=None, num_fewshot=None, log_samples=False, output_path=None)

# --- data: GSM8K-format rows (the hub's field names), short so that prompts stay short --------

TRAIN = [(f"Tom has {a} apples and buys {b} more. How many apples does he have?",
          f"He has {a} + {b} = <<{a}+{b}={a + b}>>{a + b} apples.\n#### {a + b}")
         for a, b in [(2, 3), (4, 1), (5, 5), (7, 2), (3, 6), (1, 8)]]
TEST = [("Ann has 3 pens and buys 4 more. How many pens does she have?", "3 + 4 = 7\n#### 7"),
        ("Bob has 10 cards and gives away 2. How many cards does he have?", "10 - 2 = 8\n#### 8"),
        ("A box holds 6 eggs. How many eggs are in 2 boxes?", "6 * 2 = 12\n#### 12")]


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("accdata") / "benchmarks"
    d.mkdir()
    for name, rows in (("gsm8k_train.jsonl", TRAIN), ("gsm8k_test.jsonl", TEST)):
        with open(d / name, "w", encoding="utf-8") as f:
            for q, a in rows:
                f.write(json.dumps({"question": q, "answer": a}) + "\n")
    return d.parent


# --- the adapter with a stub engine (fast) --------------------------------------------------------

@pytest.mark.usefixtures("needs_lm_eval")
def test_cut_at_stop():
    from samspec_bench.evals.lm_adapter import cut_at_stop
    assert cut_at_stop("a Question: b </s>", ["</s>", "Question:"]) == ("a ", "Question:")
    assert cut_at_stop("abc", ["x", ""]) == ("abc", None)


@pytest.mark.usefixtures("needs_lm_eval")
def test_stub_run_pairs_resumes_and_records_failures(tmp_path, data_dir):
    from samspec_bench.suites.accuracy import AccuracyConfig, run

    cfg = AccuracyConfig(tasks=["gsm8k"], data_dir=str(data_dir), max_gen_toks=64, threads=1, bootstrap_iters=500)
    eng = StubEngine(fail_on="Bob has 10 cards")
    result, path = run(cfg, output=str(tmp_path), progress=False, engine=eng)
    m = result["metrics"]["gsm8k"]
    # one batched call per arm; then one-by-one retries after the failure
    assert eng.calls[0] == 3
    assert m["errors"] == {"off": 1, "on": 1}
    assert m["n"] == 2 and m["dropped"] == 1
    assert m["acc_off"] == 0.5 and m["acc_on"] == 0.5        # the "#### 7" answer is right for Ann only
    gens = [json.loads(x) for x in (path / "generations.jsonl").read_text().splitlines()]
    assert len(gens) == 6 and sum(bool(g.get("error")) for g in gens) == 2
    ok = [g for g in gens if not g.get("error")]
    assert all(g["text"] == " 3 + 4 = 7\n#### 7\n\n" and g["stop"] == "Question:" for g in ok)
    assert all(g["kept_tokens"] == len(" 3 + 4 = 7\n#### 7\n\n") for g in ok)
    # lm-eval's own results dict is kept verbatim
    lm = result["lm_eval"]["gsm8k"]["off"][0]["results"]["samspec_gsm8k"]
    assert lm["exact_match,strict-match"] == pytest.approx(1 / 3)
    # resume: finished samples are reused, only the failed ones are generated again
    eng2 = StubEngine()
    result2, path2 = run(cfg, output=str(tmp_path), resume=str(path), progress=False, engine=eng2)
    assert path2 == path
    assert eng2.calls == [1, 1]
    assert result2["reused_generations"] == 4
    m2 = result2["metrics"]["gsm8k"]
    assert m2["n"] == 3 and m2["errors"] == {"off": 0, "on": 0}
    assert m2["acc_off"] == pytest.approx(1 / 3)


class SamArmFails(StubEngine):
    """Every request with a drafter fails (as an unknown drafter name did inside the engine)."""

    def generate(self, requests, *, drafter=None, **kw):
        if drafter is not None:
            raise ValueError("unknown drafter 'nope'")
        return super().generate(requests, drafter=drafter, **kw)


@pytest.mark.usefixtures("needs_lm_eval")
def test_cut_responses_are_counted_and_an_arm_that_all_failed_exits_1(tmp_path, data_dir, monkeypatch, capsys):
    """Responses that ran into --max-gen-toks (no stop string) are counted per arm in result.json
    and the table; an arm whose every sample failed gives exit 1 with one line on stderr."""
    import functools

    from samspec_bench.suites.accuracy import AccuracyConfig, AccuracyRun, command as acc_command, execute, run

    cmd_module = sys.modules[acc_command.callback.__module__]
    monkeypatch.setattr(cmd_module, "run", functools.partial(run, engine=SamArmFails(answer=" 3 + 4 is seven and")))
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    cfg = AccuracyConfig(tasks=["gsm8k"], data_dir=str(data_dir), max_gen_toks=8, bootstrap_iters=100)
    json_path = tmp_path / "r.json"
    code = execute(AccuracyRun(cfg, progress=False), output=str(tmp_path / "o"), json_path=str(json_path))
    out, err = capsys.readouterr()
    assert code == 1
    (line,) = [x for x in err.splitlines() if x.startswith("accuracy:")]   # datasets' progress lines beside it
    assert "gsm8k: with SAM, 3 of 3 samples failed" in line and "samples.jsonl" in line
    result = json.loads(json_path.read_text())
    m = result["metrics"]["gsm8k"]
    assert m["truncated"] == {"off": 3, "on": 0} and m["responses"] == {"off": 3, "on": 3}
    assert m["errors"] == {"off": 0, "on": 3}
    row = result["tables"]["accuracy"][0]
    assert (row["truncated_without_sam"], row["truncated_with_sam"]) == (3, 0)
    assert "cut at limit" in out and "responses cut at the token limit (--max-gen-toks 8" in out
    assert "without SAM 3 of 3, with SAM 0 of 3" in out and "3 / 0" in out
    samples = _jsonl(Path(result["run_dir"]) / "samples.jsonl")
    assert sum(s["finish_reason"] == "length" and s["stop"] is None for s in samples) == 3


@pytest.mark.usefixtures("needs_lm_eval")
def test_responses_cut_at_a_stop_string_are_not_counted_as_cut(tmp_path, data_dir):
    from samspec_bench.suites.accuracy import AccuracyConfig, run
    from samspec_bench.suites.accuracy.report import failed_arms

    cfg = AccuracyConfig(tasks=["gsm8k"], data_dir=str(data_dir), max_gen_toks=64, limit=2, bootstrap_iters=100)
    result, _ = run(cfg, output=str(tmp_path), progress=False, engine=StubEngine())   # "length", then "Question:"
    assert result["metrics"]["gsm8k"]["truncated"] == {"off": 0, "on": 0}
    assert failed_arms(result) == []


def test_failed_arms_names_only_arms_whose_every_sample_failed():
    from samspec_bench.suites.accuracy.report import failed_arms

    def res(errors, responses):
        return {"metrics": {"gsm8k": {"errors": errors, "responses": responses}}}
    assert failed_arms(res({"off": 1, "on": 2}, {"off": 2, "on": 2})) == ["gsm8k: with SAM, 2 of 2 samples failed"]
    assert failed_arms(res({"off": 1, "on": 1}, {"off": 2, "on": 2})) == []
    assert failed_arms(res({"off": 0, "on": 0}, {"off": 0, "on": 0})) == []   # no problems: nothing failed


@pytest.mark.usefixtures("needs_lm_eval")
def test_the_device_is_recorded_and_a_resume_runs_on_this_calls_device(tmp_path, data_dir, monkeypatch):
    """result.json names the device; --resume keeps the run's settings but not its device (where
    the model runs is not a setting: a run may continue on another machine)."""
    from dataclasses import replace

    import torch
    from device_fixtures import stand_in_cuda

    from samspec_bench.suites.accuracy import build_config, run

    base = dict(model="m", engine="reference", tasks="gsm8k", data_dir=str(data_dir), limit=None, num_samples=1,
                temperature=0.0, top_p=1.0, max_gen_toks=64, drafter="sam", num_spec_tokens=3, seed=0,
                dtype="float32", max_num_seqs=8, apply_chat_template=False, fewshot_as_multiturn=None, alpha=0.05,
                threads=1, progress=False, **LM_EVAL_OPTIONS)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    cfg = build_config(**base, device="cpu").config
    assert build_config(**base, device="auto").config == cfg   # auto is the CPU here: the same run
    cfg = replace(cfg, bootstrap_iters=200)
    result, path = run(cfg, output=str(tmp_path), progress=False, engine=StubEngine(fail_on="Bob has 10 cards"))
    assert result["config"]["device"] == "cpu" and result["environment"]["device"]["device"] == "cpu"
    # continued on a (stand-in) GPU machine
    stand_in_cuda(monkeypatch)
    gpu = build_config(**base, device="auto").config
    assert gpu.device == "cuda:0"
    result2, _ = run(replace(gpu, max_gen_toks=32), output=str(tmp_path), resume=str(path), progress=False,
                     engine=StubEngine())
    assert result2["config"]["max_gen_toks"] == 64 and result2["config"]["device"] == "cuda:0"
    assert result2["environment"]["device"]["name"] == "Stand-in GPU" and result2["reused_generations"] == 4


@pytest.mark.usefixtures("needs_lm_eval")
def test_a_resume_names_each_setting_it_does_not_use(tmp_path, data_dir):
    """--resume continues with the run's saved settings; the ones given differently in this call
    are named (they used to be summed up as 'the options given differ')."""
    import io
    from dataclasses import replace

    from rich.console import Console

    from samspec_bench.suites.accuracy import build_config, run

    cfg = build_config(model="m", engine="reference", tasks="gsm8k", data_dir=str(data_dir), limit="2", num_samples=1,
                       temperature=0.0, top_p=1.0, max_gen_toks=64, drafter="sam", num_spec_tokens=3, seed=0,
                       dtype="float32", max_num_seqs=8, apply_chat_template=False, fewshot_as_multiturn=None,
                       alpha=0.05, threads=1, progress=False, device="cpu", **LM_EVAL_OPTIONS).config
    cfg = replace(cfg, bootstrap_iters=200)
    _, path = run(cfg, output=str(tmp_path), progress=False, engine=StubEngine())
    said = io.StringIO()
    result, _ = run(replace(cfg, limit=3, max_gen_toks=32), output=str(tmp_path), resume=str(path), progress=False,
                    engine=StubEngine(), console=Console(file=said, width=400))
    assert result["config"]["limit"] == 2 and result["config"]["max_gen_toks"] == 64
    text = said.getvalue()
    assert "not used from this call: limit 3 (the run's: 2), max_gen_toks 32 (the run's: 64)" in text, text
    # what is kept is said, with its count (result.json has it too)
    assert f"resuming {path}: 4 generation(s) already recorded are reused" in text, text
    assert result["reused_generations"] == 4


@pytest.mark.usefixtures("needs_lm_eval")
@pytest.mark.parametrize("edit, said", [({"limit": -3}, "--limit -3"), ({"tasks": "gsm8k"}, "not a list of task names"),
                                        ({"num_samples": 0}, "--num-samples 0"), ({"drafter": ...}, "drafter missing")])
def test_a_resume_refuses_saved_settings_that_cannot_run(tmp_path, data_dir, edit, said):
    """The saved config.json is what a resume runs: an edited or damaged one is named (exit 2), not
    handed to lm-eval (limit -3 was an internal error in lm-eval's islice), and a setting missing
    from it is not silently today's default."""
    from dataclasses import replace

    from samspec_bench.suites.accuracy import AccuracyConfig, run

    cfg = AccuracyConfig(tasks=["gsm8k"], data_dir=str(data_dir), limit=1, max_gen_toks=16, bootstrap_iters=100)
    _, path = run(cfg, output=str(tmp_path), progress=False, engine=StubEngine())
    saved = json.loads((path / "config.json").read_text())
    saved.update(edit)
    saved = {k: v for k, v in saved.items() if v is not ...}   # ...: the setting left out
    (path / "config.json").write_text(json.dumps(saved))
    with pytest.raises(UserError, match="config.json") as e:
        run(replace(cfg), output=str(tmp_path), resume=str(path), progress=False, engine=StubEngine())
    assert said in str(e.value) and f"--resume {path}" in str(e.value) and "start a new run" in str(e.value)


@pytest.mark.usefixtures("needs_lm_eval")
def test_a_resume_skips_and_counts_damaged_generation_records(tmp_path, data_dir):
    """A generations.jsonl record without its token ids (KeyError in the greedy agreement) or with
    a key that is not a string (TypeError building the cache) was an internal error; a line that
    is not JSON was skipped without a word. Each is now counted, said, and its response generated again."""
    import io

    from rich.console import Console

    from samspec_bench.suites.accuracy import AccuracyConfig, run

    cfg = AccuracyConfig(tasks=["gsm8k"], data_dir=str(data_dir), max_gen_toks=16, bootstrap_iters=100)
    _, path = run(cfg, output=str(tmp_path), progress=False, engine=StubEngine())
    gens = path / "generations.jsonl"
    recs = [json.loads(line) for line in gens.read_text().splitlines()]
    assert len(recs) == 6
    del recs[0]["token_ids"]
    recs[1]["key"] = ["not", "a", "key"]
    gens.write_text("".join(json.dumps(r) + "\n" for r in recs) + "garbage{\n")
    said = io.StringIO()
    result, _ = run(cfg, output=str(tmp_path), resume=str(path), progress=False, engine=StubEngine(),
                    console=Console(file=said, width=400))
    assert result["reused_generations"] == 4 and result["damaged_generations"] == 3
    assert "3 line(s) of generations.jsonl are not whole records" in said.getvalue()
    assert result["metrics"]["gsm8k"]["n"] == 3 and result["metrics"]["gsm8k"]["agreement"]["n"] == 3


@pytest.mark.usefixtures("needs_lm_eval")
def test_a_run_that_stops_before_generating_leaves_no_folder(tmp_path, data_dir):
    """A new run that fails before any response (here: --apply-chat-template on a tokenizer
    without a chat template) removes its folder: settings, task files and links to the built-in
    sets are no work to resume (the links read as samples, so the CLI's clean-up kept it)."""
    from samspec_bench.suites.accuracy import build_config, run

    cfg = build_config(model="m", engine="reference", tasks="gsm8k", data_dir=None, limit="1", num_samples=1,
                       temperature=0.0, top_p=1.0, max_gen_toks=8, drafter="sam", num_spec_tokens=3, seed=0,
                       dtype="float32", max_num_seqs=8, apply_chat_template=True, fewshot_as_multiturn=None,
                       alpha=0.05, threads=1, progress=False, device="cpu", **LM_EVAL_OPTIONS).config
    with pytest.raises(UserError, match="has no chat template"):
        run(cfg, output=str(tmp_path / "out"), progress=False, engine=StubEngine())
    assert not list((tmp_path / "out").glob("accuracy-*"))


class TokenizerStub(StubEngine):
    """The stub engine over a real tokenizer; keeps the prompts it was sent."""

    def __init__(self, tokenizer):
        super().__init__()
        self.tokenizer = tokenizer
        self.prompts = []

    def generate(self, requests, **kw):
        self.prompts.extend(list(r.prompt_ids) for r in requests)
        return super().generate(requests, **kw)


@pytest.fixture(scope="module")
def tiny_tokenizer():
    pytest.importorskip("torch")
    from samspec_bench.models.checkpoints import load_model
    return load_model("builtin:tiny-qwen3")[1]


@pytest.mark.usefixtures("needs_lm_eval")
def test_apply_chat_template_sends_the_chat_prompt(tmp_path, data_dir, tiny_tokenizer):
    from samspec_bench.suites.accuracy import AccuracyConfig, run

    tok = tiny_tokenizer
    marker = "\x00MARK\x00"
    chat = tok.apply_chat_template([{"role": "user", "content": marker}], tokenize=False, add_generation_prompt=True)
    head = tok.encode(chat.split(marker)[0], add_special_tokens=False)     # the template's tokens before the turn
    assert head
    runs = {}
    for chat_on in (False, True):
        eng = TokenizerStub(tok)
        cfg = AccuracyConfig(tasks=["gsm8k"], data_dir=str(data_dir), limit=2, max_gen_toks=16, bootstrap_iters=100,
                             apply_chat_template=chat_on)
        result, _ = run(cfg, output=str(tmp_path / str(chat_on)), progress=False, engine=eng)
        runs[chat_on] = eng.prompts
        assert len(eng.prompts) == 4 and result["metrics"]["gsm8k"]["n"] == 2
    assert all(p[: len(head)] == head for p in runs[True])
    assert not any(p[: len(head)] == head for p in runs[False])
    # few-shot examples as turns: one assistant turn per example plus the generation prompt
    text = tok.decode(runs[True][0], skip_special_tokens=False)
    gen_prompt = chat.split(marker)[1]
    assert text.endswith(gen_prompt) and text.count(gen_prompt.strip()) > 1


@pytest.mark.usefixtures("needs_lm_eval")
def test_apply_chat_template_without_a_template_is_refused(tmp_path, data_dir):
    from samspec_bench.errors import UserError
    from samspec_bench.suites.accuracy import AccuracyConfig, run

    cfg = AccuracyConfig(tasks=["gsm8k"], data_dir=str(data_dir), limit=1, apply_chat_template=True)
    with pytest.raises(UserError, match="--apply-chat-template"):
        run(cfg, output=str(tmp_path), progress=False, engine=StubEngine())


# --- end to end on the built-in model -------------------------------------------------------------

@pytest.fixture(scope="module")
def engine():
    torch = pytest.importorskip("torch")
    torch.set_num_threads(1)
    from samspec_bench.bench.engines.reference_engine import ReferenceEngine
    eng = ReferenceEngine("builtin:smollm2-135m", max_num_seqs=8)
    yield eng
    eng.close()


@pytest.fixture(scope="module")
def smol_run(needs_lm_eval, engine, data_dir, tmp_path_factory):
    from samspec_bench.suites.accuracy import AccuracyConfig, run
    out = tmp_path_factory.mktemp("accrun")
    cfg = AccuracyConfig(tasks=["gsm8k"], data_dir=str(data_dir), limit=3, max_gen_toks=40, threads=1,
                         bootstrap_iters=1000)
    result, path = run(cfg, output=str(out), progress=False, engine=engine)
    return cfg, result, path


def _jsonl(p):
    return [json.loads(x) for x in Path(p).read_text().splitlines() if x.strip()]


@pytest.mark.slow
def test_smollm2_structure(smol_run):
    cfg, result, path = smol_run
    assert result["suite"] == "accuracy" and (path / "result.json").exists()
    m = result["metrics"]["gsm8k"]
    assert m["n"] == 3 and m["num_samples"] == 1 and m["metric"] == "exact_match" and m["filter"] == "strict-match"
    assert 0 <= m["acc_off"] <= 1 and 0 <= m["acc_on"] <= 1
    assert m["ci95"][0] <= m["diff"] <= m["ci95"][1]
    assert m["test"]["test"] == "mcnemar_exact" and 0 <= m["p_value"] <= 1
    assert m["verdict"]
    for arm in ("off", "on"):
        lm = result["lm_eval"]["gsm8k"][arm][0]["results"]["samspec_gsm8k"]
        assert "exact_match,strict-match" in lm and "exact_match,flexible-extract" in lm
        assert m[f"pass@1_{arm}"] == pytest.approx(m[f"acc_{arm}"])
    row = result["tables"]["accuracy"][0]
    assert row["dataset"] == "gsm8k" and row["n"] == 3
    assert m["acceptance"]["tokens_per_step"] >= 1.0
    gens = _jsonl(path / "generations.jsonl")
    assert len(gens) == 6
    assert all(1 <= g["num_tokens"] <= 40 and g["kept_tokens"] <= g["num_tokens"] for g in gens)
    assert all(g["drafted"] == 0 for g in gens if g["arm"] == "off")
    cut = {arm: sum(g["finish_reason"] == "length" and not g["stop"] for g in gens if g["arm"] == arm)
           for arm in ("off", "on")}
    assert m["truncated"] == cut and m["responses"] == {"off": 3, "on": 3}


@pytest.mark.slow
def test_smollm2_pairing_and_agreement(smol_run):
    cfg, result, path = smol_run
    m = result["metrics"]["gsm8k"]
    samples = _jsonl(path / "samples.jsonl")
    by = {arm: {s["doc_id"]: s for s in samples if s["arm"] == arm} for arm in ("off", "on")}
    assert set(by["off"]) == set(by["on"]) == {0, 1, 2}
    for arm in ("off", "on"):
        assert m[f"acc_{arm}"] == pytest.approx(sum(s["score"] for s in by[arm].values()) / 3)
    for doc in by["off"]:
        assert by["off"][doc]["doc_hash"] == by["on"][doc]["doc_hash"]
        assert by["off"][doc]["prompt_hash"] == by["on"][doc]["prompt_hash"]
    n01 = sum(by["off"][d]["score"] == 1 and by["on"][d]["score"] == 0 for d in by["off"])
    n10 = sum(by["off"][d]["score"] == 0 and by["on"][d]["score"] == 1 for d in by["off"])
    assert (m["test"]["n01"], m["test"]["n10"]) == (n01, n10)
    # identical-output fraction recomputed from the per-sample records
    gens = {(g["arm"], g["doc_id"]): g for g in _jsonl(path / "generations.jsonl")}
    pairs = [(gens["off", d]["token_ids"][:gens["off", d]["kept_tokens"]],
              gens["on", d]["token_ids"][:gens["on", d]["kept_tokens"]]) for d in range(3)]
    assert m["agreement"] == agreement(pairs)
    same_text = sum(gens["off", d]["text"] == gens["on", d]["text"] for d in range(3))
    assert m["agreement"]["identical"] == same_text
    n = {d: min(len(gens["off", d]["token_ids"]), len(gens["on", d]["token_ids"])) for d in range(3)}
    assert m["agreement_raw"] == agreement([(gens["off", d]["token_ids"][:n[d]], gens["on", d]["token_ids"][:n[d]])
                                            for d in range(3)])
    # lm-eval's `until` strings ended requests inside the engine (not at max_gen_toks): without
    # SAM right at the stop string, with SAM at most k tokens later
    stopped = [d for d in range(3) if gens["off", d]["stop"] is not None]
    assert stopped
    for d in stopped:
        off, on = gens["off", d], gens["on", d]
        assert off["finish_reason"] == on["finish_reason"] == "stop"
        assert off["num_tokens"] < cfg.max_gen_toks
        assert off["num_tokens"] <= on["num_tokens"] <= off["num_tokens"] + cfg.num_spec_tokens


@pytest.mark.slow
def test_smollm2_resume_skips_finished_samples(smol_run, engine, tmp_path):
    from samspec_bench.suites.accuracy import run
    cfg, result, path = smol_run
    copy = tmp_path / "resumed"
    shutil.copytree(path, copy)
    lines = (copy / "generations.jsonl").read_text().splitlines()
    (copy / "generations.jsonl").write_text("\n".join(lines[:-1]) + "\n" + lines[-1][:20])  # lost + torn line
    (copy / "result.json").unlink()
    result2, path2 = run(cfg, output=str(tmp_path), resume=str(copy), progress=False, engine=engine)
    assert path2 == copy and result2["reused_generations"] == 5
    t = result2["metrics"]["gsm8k"]["timings"]
    assert t["off_generated"] == 0 and t["on_generated"] == 1
    for key in ("acc_off", "acc_on", "n", "p_value"):
        assert result2["metrics"]["gsm8k"][key] == result["metrics"]["gsm8k"][key]


def test_cli_lists_accuracy_and_rejects_bad_tasks():
    from click.testing import CliRunner

    from samspec_bench.cli import group
    r = CliRunner().invoke(group, ["accuracy", "--help"])
    assert r.exit_code == 0 and "--num-samples" in r.output and "--resume" in r.output
    from samspec_bench.errors import UserError
    r = CliRunner().invoke(group, ["accuracy", "--tasks", "gsm9k"])
    assert isinstance(r.exception, UserError) and "gsm9k" in str(r.exception)


def test_build_config_converts_and_checks_the_options(tmp_path):
    """The suite contract: the command's options (as click gives them) -> AccuracyRun, checked
    before anything loads."""
    from samspec_bench.errors import UserError
    from samspec_bench.suites.accuracy import AccuracyConfig, build_config

    opts = dict(model="m", engine="reference", device="cpu", tasks="gsm8k,math500", data_dir=str(tmp_path), limit=None,
                num_samples=1, temperature=0.0, top_p=1.0, max_gen_toks=64, drafter="sam", num_spec_tokens=3, seed=0,
                dtype="float32", max_num_seqs=8, apply_chat_template=False, fewshot_as_multiturn=None, alpha=0.05,
                threads=1, progress=False, **LM_EVAL_OPTIONS)
    job = build_config(**opts)
    assert job.config == AccuracyConfig(model="m", tasks=["gsm8k", "math500"], data_dir=str(tmp_path.resolve()),
                                        max_gen_toks=64, max_num_seqs=8, dtype="float32")
    assert job.progress is False
    # --dtype auto is recorded resolved (float32 on the CPU) for the reference engine
    assert build_config(**{**opts, "dtype": "auto"}).config.dtype == "float32"
    with pytest.raises(UserError, match="--dtype 'fp8'"):
        build_config(**{**opts, "dtype": "fp8"})
    with pytest.raises(UserError, match="greedy"):
        build_config(**{**opts, "num_samples": 2})
    with pytest.raises(UserError, match="gsm9k"):
        build_config(**{**opts, "tasks": "gsm9k"})
    with pytest.raises(UserError, match="gsm8k is given twice"):   # refused, not dropped (errors.comma_list)
        build_config(**{**opts, "tasks": "gsm8k,math500,gsm8k"})


@pytest.mark.usefixtures("needs_lm_eval")
def test_sampled_k_samples_use_the_same_seeds_in_both_arms(tmp_path, data_dir):
    from samspec_bench.suites.accuracy import AccuracyConfig, run

    cfg = AccuracyConfig(tasks=["gsm8k"], data_dir=str(data_dir), max_gen_toks=64, temperature=0.7, num_samples=2,
                         limit=2, bootstrap_iters=200)
    result, path = run(cfg, output=str(tmp_path), progress=False, engine=StubEngine())
    m = result["metrics"]["gsm8k"]
    assert m["num_samples"] == 2 and m["test"]["test"] == "sign_flip" and "agreement" not in m
    assert len(result["lm_eval"]["gsm8k"]["on"]) == 2
    gens = _jsonl(path / "generations.jsonl")
    assert len(gens) == 8
    seeds = {(g["arm"], g["sample"], g["doc_id"]): g["seed"] for g in gens}
    assert all(seeds["off", k, d] == seeds["on", k, d] is not None for k in range(2) for d in range(2))
    assert seeds["off", 0, 0] != seeds["off", 1, 0]
    with pytest.raises(Exception, match="greedy"):
        run(AccuracyConfig(tasks=["gsm8k"], data_dir=str(data_dir), num_samples=2), output=str(tmp_path),
            engine=StubEngine())


@pytest.mark.usefixtures("needs_lm_eval")
def test_task_yamls_for_every_task(tmp_path, shared_data):
    import yaml

    from samspec_bench.errors import UserError
    from samspec_bench.evals.tasks import TASKS, write_task_dir
    names = write_task_dir(tmp_path / "tasks", list(TASKS), shared_data)
    assert names == {t: TASKS[t].local_task for t in TASKS}
    for t, lm_name in names.items():
        cfg = yaml.safe_load((tmp_path / "tasks" / f"{lm_name}.yaml").read_text())
        assert Path(cfg["include"]).is_file() and cfg["dataset_path"] == "json"
        assert all(Path(p).is_file() for p in cfg["dataset_kwargs"]["data_files"].values())
    with pytest.raises(UserError, match="aime24.jsonl"):
        write_task_dir(tmp_path / "t2", ["aime24"], tmp_path)
