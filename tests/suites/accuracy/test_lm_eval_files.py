"""`samspec-bench accuracy` writes lm-eval's own files for both arms (results_<date>.json,
samples_<task>_<date>.jsonl, laid out as lm-eval's --output_path), with the fields a real lm-eval
run writes, and `samspec-bench accept` reads them back. A stub engine answers fast; the last test
runs builtin:smollm2-135m end to end through the command line."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from samspec_bench.bench.engines.base import FINISH_STOP, GenerationResult, RequestOutput
from samspec_bench.metrics import ResponseSteps

pytestmark = pytest.mark.usefixtures("needs_lm_eval")

ANSWER = " The answer is 7.\n\nQuestion: next"


class _Chars:
    eos_token_id = 0

    def encode(self, text, add_special_tokens=False):
        return [ord(c) for c in text]

    def decode(self, ids, skip_special_tokens=True):
        return "".join(chr(i) for i in ids if i)


class AnswerEngine:
    """Answers every prompt with ANSWER (running on past lm-eval's stop string)."""

    name = "answer-stub"

    def __init__(self):
        self.tokenizer = _Chars()

    def generate(self, requests, *, on_output=None, **kw):
        outs = []
        for r in requests:
            ids = self.tokenizer.encode(ANSWER)[: r.params.max_tokens]
            steps = ResponseSteps(str(r.req_id), len(r.prompt_ids), len(ids), [1] * len(ids), [0] * len(ids),
                                  [0] * len(ids), [1] * len(ids))
            outs.append(RequestOutput(r.req_id, list(r.prompt_ids), ids, [0.0] * len(ids), FINISH_STOP, steps))
            if on_output:
                on_output(outs[-1])
        return GenerationResult(outputs=outs, steps=[], wall_time_s=0.0)

    def describe(self):
        return {"name": self.name}

    def close(self):
        pass


def _jsonl(p: Path) -> list[dict]:
    return [json.loads(x) for x in p.read_text(encoding="utf-8").splitlines() if x.strip()]


def _one(folder: Path, pattern: str) -> Path:
    got = sorted(folder.glob(pattern))
    assert len(got) == 1, (pattern, got)
    return got[0]


@pytest.fixture(scope="module")
def stub_run(tmp_path_factory):
    """aime24 (30 built-in problems) with --limit 0.1 and gsm8k_cot (lm-eval's 8-shot CoT task, 2
    problems), both arms, --output_path with --log_samples."""
    from samspec_bench.suites.accuracy import AccuracyConfig, run
    out = tmp_path_factory.mktemp("lmfiles")
    cfg = AccuracyConfig(tasks=["aime24"], limit=0.1, max_gen_toks=48, bootstrap_iters=100)
    result, path = run(cfg, output=str(out / "runs"), progress=False, engine=AnswerEngine(),
                       output_path=str(out / "lm"), log_samples=True)
    cot_cfg = AccuracyConfig(tasks=["gsm8k_cot"], limit=2, max_gen_toks=48, bootstrap_iters=100)
    cot, cot_path = run(cot_cfg, output=str(out / "runs"), progress=False, engine=AnswerEngine(),
                        output_path=str(out / "lm_cot"))
    return out, result, path, cot, cot_path


def test_fractional_limit_counts_a_known_size_set(stub_run):
    _, result, path, _, _ = stub_run
    assert result["metrics"]["aime24"]["n"] == 3                 # ceil(30 * 0.1)
    for arm in ("off", "on"):
        samples = _jsonl(_one(path / "lm_eval" / f"sam_{arm}" / "builtin__smollm2-135m", "samples_aime24_*.jsonl"))
        assert sorted(s["doc_id"] for s in samples) == [0, 1, 2]
        res = json.loads(_one(path / "lm_eval" / f"sam_{arm}" / "builtin__smollm2-135m", "results_*.json").read_text())
        assert res["n-samples"]["aime24"] == {"original": 30, "effective": 3}
        assert res["config"]["limit"] == 0.1


def test_both_arms_are_written_in_lm_evals_layout(stub_run):
    out, result, path, cot, cot_path = stub_run
    for arm, drafter in (("off", None), ("on", "sam")):
        folder = out / "lm" / f"sam_{arm}" / "builtin__smollm2-135m"      # <output_path>/<arm>/<model sanitized>/
        res = json.loads(_one(folder, "results_*.json").read_text())
        assert res["model_name"] == "builtin:smollm2-135m" and res["config"]["model_args"]["drafter"] == drafter
        assert list(res["results"]) == ["aime24"] and res["results"]["aime24"]["alias"] == "aime24"
        assert res["configs"]["aime24"]["task"] == "aime24"
        date = _one(folder, "results_*.json").stem.removeprefix("results_")
        assert (folder / f"samples_aime24_{date}.jsonl").is_file()
        # the run folder holds the same files
        assert (path / "lm_eval" / f"sam_{arm}" / "builtin__smollm2-135m" / f"samples_aime24_{date}.jsonl").is_file()
    # lm-eval's own task over the local gsm8k set, named as lm-eval names it; without --log_samples
    # --output_path gets the results only
    cot_dir = cot_path / "lm_eval" / "sam_on" / "builtin__smollm2-135m"
    res = json.loads(_one(cot_dir, "results_*.json").read_text())
    assert res["n-shot"] == {"gsm8k_cot": 8} and "exact_match,strict-match" in res["results"]["gsm8k_cot"]
    samples = _jsonl(_one(cot_dir, "samples_gsm8k_cot_*.jsonl"))
    assert {s["filter"] for s in samples} == {"strict-match", "flexible-extract"}
    assert all(s["exact_match"] == 0.0 for s in samples)                        # "7" is not 18 or 3
    prompt = samples[0]["arguments"]["gen_args_0"]["arg_0"]
    assert prompt.count("The answer is") == 8 and prompt.startswith("Q: There are 15 trees")
    assert samples[0]["arguments"]["gen_args_0"]["arg_1"]["max_gen_toks"] == 48
    assert not list((out / "lm_cot").rglob("samples_*")) and len(list((out / "lm_cot").rglob("results_*"))) == 2
    assert cot["metrics"]["gsm8k_cot"]["filter"] == "strict-match"


def _real_lm_eval_files(tmp: Path) -> tuple[dict, dict]:
    """A samples line and the results of a real lm-eval run: simple_evaluate on a local task and
    lm-eval's EvaluationTracker, as `lm_eval run --log_samples --output_path` saves them."""
    import lm_eval
    from lm_eval.api.model import LM
    from lm_eval.loggers import EvaluationTracker
    from lm_eval.tasks import TaskManager

    from samspec_bench.suites.accuracy.tasks import write_builtin_tasks

    class Fixed(LM):
        def generate_until(self, requests, disable_tqdm=False):
            return [ANSWER.split("\n\n")[0] for _ in requests]

        def loglikelihood(self, requests, disable_tqdm=False):
            raise NotImplementedError

        def loglikelihood_rolling(self, requests, disable_tqdm=False):
            raise NotImplementedError

    names = write_builtin_tasks(tmp / "tasks", tmp / "data", ["aime24"])
    tm = TaskManager(include_path=str(tmp / "tasks"), include_defaults=False)
    tracker = EvaluationTracker(output_path=str(tmp / "real"))
    r = lm_eval.simple_evaluate(model=Fixed(), model_args={"pretrained": "x"}, tasks=[names["aime24"]],
                                task_manager=tm, limit=2, log_samples=True, evaluation_tracker=tracker)
    samples = r.pop("samples")
    tracker.save_results_aggregated(results=r, samples=samples)
    for task in r["configs"]:
        tracker.save_results_samples(task_name=task, samples=samples[task])
    folder = tmp / "real" / "x"
    return _jsonl(_one(folder, "samples_*.jsonl"))[0], json.loads(_one(folder, "results_*.json").read_text())


def test_field_names_equal_a_real_lm_eval_run(stub_run, tmp_path):
    out, _, _, _, _ = stub_run
    real_line, real_results = _real_lm_eval_files(tmp_path)
    folder = out / "lm" / "sam_on" / "builtin__smollm2-135m"
    ours = _jsonl(_one(folder, "samples_aime24_*.jsonl"))
    assert all(set(line) == set(real_line) for line in ours)
    assert {"doc_id", "doc", "target", "arguments", "resps", "filtered_resps", "filter", "metrics", "doc_hash",
            "prompt_hash", "target_hash", "exact_match"} <= set(real_line)
    assert ours[0]["resps"] == [[" The answer is 7.\n\n"]] and ours[0]["arguments"]["gen_args_0"]["arg_0"] == \
        real_line["arguments"]["gen_args_0"]["arg_0"]
    results = json.loads(_one(folder, "results_*.json").read_text())
    assert set(results) == set(real_results)
    assert set(results["results"]["aime24"]) == set(next(iter(real_results["results"].values())))


def test_accept_reads_the_samples_written(stub_run, qwen3_tokenizer_dir, tmp_path, capsys):
    from samspec_bench.cli import main
    out, _, _, _, _ = stub_run
    main(["accept", "--engine", "replay", "--traces", str(out / "lm" / "sam_on"), "--tokenizer",
          str(qwen3_tokenizer_dir), "--output", str(tmp_path / "acc"), "--no-progress", "--json", "-"])
    result = json.loads(capsys.readouterr().out)
    assert result["inputs"]["responses"] == 3
    assert set(result["inputs"]["trace_formats"].values()) == {"lm-eval"}
    assert result["inputs"]["models"]["models"] and \
        set(sum(result["inputs"]["models"]["models"].values(), [])) == {"builtin:smollm2-135m"}


def test_a_resume_rewrites_the_files_without_duplicates(stub_run):
    from samspec_bench.suites.accuracy import AccuracyConfig, run
    out, result, path, _, _ = stub_run
    cfg = AccuracyConfig(**{k: v for k, v in result["config"].items() if k in AccuracyConfig.__dataclass_fields__})
    again, path2 = run(cfg, output=str(out / "runs"), resume=str(path),
                       progress=False, engine=AnswerEngine())
    assert path2 == path and again["reused_generations"] == 6
    for arm in ("off", "on"):
        assert len(list((path / "lm_eval" / f"sam_{arm}").rglob("samples_aime24_*.jsonl"))) == 1


@pytest.mark.slow
def test_smollm2_end_to_end_writes_lm_eval_files_accept_reads(tmp_path, capsys):
    """The command line as an lm-eval user writes it, on the real built-in model; accept replays the
    SAM-on arm's samples with the model's own tokenizer."""
    from samspec_bench.cli import main
    lm_out = tmp_path / "lm"
    main(["accuracy", "--model", "hf", "--model_args", "pretrained=builtin:smollm2-135m", "--tasks", "gsm8k",
          "--limit", "2", "--gen_kwargs", "max_gen_toks=24", "--num_fewshot", "1", "--log_samples",
          "--output_path", str(lm_out), "--output", str(tmp_path / "runs"), "--max-num-seqs", "4", "--no-progress",
          "--json", str(tmp_path / "acc.json")])
    capsys.readouterr()
    acc = json.loads((tmp_path / "acc.json").read_text())
    assert acc["config"]["max_gen_toks"] == 24 and acc["config"]["num_fewshot"] == 1
    assert acc["metrics"]["gsm8k"]["n"] == 2
    for arm in ("off", "on"):
        folder = lm_out / f"sam_{arm}" / "builtin__smollm2-135m"
        res = json.loads(_one(folder, "results_*.json").read_text())
        assert res["n-shot"] == {"gsm8k": 1} and res["n-samples"]["gsm8k"]["effective"] == 2
        lines = _jsonl(_one(folder, "samples_gsm8k_*.jsonl"))
        assert len(lines) == 4 and all(len(line["resps"][0]) == 1 for line in lines)   # 2 problems x 2 filters
    main(["accept", "--engine", "replay", "--model", "builtin:smollm2-135m", "--traces", str(lm_out / "sam_on"),
          "--output", str(tmp_path / "accept"), "--no-progress", "--json", "-"])
    result = json.loads(capsys.readouterr().out)
    assert result["inputs"]["responses"] == 2 and result["metrics"]["sam k=3 own"]["responses"] == 2


def test_a_tasks_repeats_are_distinct_samples():
    """lm-eval hands a task with `repeats: R` the same request R times: each is its own response
    (its own key for --resume, its own seed), the same seeds in both arms."""
    from lm_eval.api.instance import Instance

    from samspec_bench.evals.lm_adapter import EngineLM
    req = Instance("generate_until", {"q": 1}, ("Question: 1+1?\nAnswer:", {"until": ["Question:"]}), 0,
                   ("t", 5, 3))
    seeds = {}
    for arm in ("off", "on"):
        lm = EngineLM(AnswerEngine(), arm=arm, temperature=0.5, seed=1)
        assert lm.generate_until([req] * 3) == [" The answer is 7.\n\n"] * 3
        assert [r["key"] for r in lm.records] == [f"{arm}|0|t|5", f"{arm}|0|t|5|r1", f"{arm}|0|t|5|r2"]
        seeds[arm] = [r["seed"] for r in lm.records]
    assert seeds["off"] == seeds["on"] and len(set(seeds["off"])) == 3


def test_lm_evals_git_hash_outside_a_checkout_writes_nothing_to_the_console(tmp_path, monkeypatch, capfd):
    """lm-eval records `git describe` of the working directory and lets git print "fatal: not a
    git repository" outside one; accuracy stands in for its call while simple_evaluate runs."""
    import lm_eval.evaluator as evaluator

    from samspec_bench.suites.accuracy.lm_outputs import git_hash, quiet_git_hash

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path.parent))   # no checkout above tmp_path either
    own = evaluator.get_git_commit_hash
    with quiet_git_hash():
        assert evaluator.get_git_commit_hash() is None
    assert evaluator.get_git_commit_hash is own
    assert capfd.readouterr().err == ""
    if shutil.which("git"):   # lm-eval's own call prints git's complaint (what the stand-in keeps off the console)
        own()
        assert "not a git repository" in capfd.readouterr().err
    assert git_hash() is None
