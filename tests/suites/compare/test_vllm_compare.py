"""The vLLM method comparison (`samspec-bench compare`; the library in bench/engines/vllm/compare.py
and compare_figures.py): its figures from the run records of generate results (spread over
repeats, cost of drafting, greedy identity with the first divergence, the goal check), the run
folder and --resume with a stand-in engine, all without vLLM; and one real run inside vLLM
(marked vllm: skipped where vLLM does not import)."""

from __future__ import annotations

import json
import math

import pytest

from samspec_bench.bench.engines.base import GenerationResult, RequestOutput, StepRecord
from samspec_bench.bench.engines.vllm import method_comparison as compare, compare_figures
from samspec_bench.bench.engines.vllm.compare_figures import FROM_COUNTS, arm_rows, goal, run_record
from samspec_bench.errors import UserError
from samspec_bench.metrics import ResponseSteps


def _result(tokens: list[list[int]], drafted: int, accepted: int, tps: float, proposer_ms: float | None = None):
    """A generate result whose every response drafted `drafted` tokens at each step and
    accepted `accepted`, at `tps` output tokens/s."""
    outs = []
    for i, t in enumerate(tokens):
        n = len(t) - 1
        steps = ResponseSteps(key=str(i), prompt_len=4, response_len=len(t), position=list(range(1, n + 1)),
                              drafted=[drafted] * n, accepted=[accepted] * n, emitted=[accepted + 1] * n)
        outs.append(RequestOutput(req_id=i, prompt_ids=[1, 2, 3, 4], token_ids=t, logprobs=[], finish_reason="length",
                                  steps=steps))
    wall = sum(len(t) for t in tokens) / tps
    eng = {}
    if proposer_ms is not None:
        eng["proposer"] = {"ms_per_call_mean": proposer_ms, "share_of_wall_time": proposer_ms * 1e-3 * 10 / wall,
                           "step_wall_ms_mean": 1e3 * wall / 10, "propose_calls": 10}
    # ten engine steps; the first prefilled what the prefix cache did not hold (3 of each prompt's 4 tokens)
    steps = [StepRecord(step=i, time_s=wall / 10, forward_s=wall / 10, num_running=len(tokens), num_waiting=0,
                        num_scheduled_tokens=0, num_prefill_tokens=3 * len(tokens) if i == 0 else 0,
                        num_decode_reqs=len(tokens), num_drafted=0, num_accepted=0, num_emitted=0,
                        speculative=False, attention="vllm") for i in range(10)]
    return GenerationResult(outputs=outs, steps=steps, wall_time_s=wall, engine=eng)


def _records(runs):
    """{arm: [(repeat, GenerationResult)]} as the comparison records them."""
    out = []
    for m, rr in runs.items():
        key, drafter = compare.arm_plan(m)
        out += [run_record(m, r, key, compare.draft_length(drafter), res) for r, res in rr]
    return out


def _compare(runs):
    rows, reference = arm_rows(json.loads(json.dumps(_records(runs))), list(runs), {})   # as read back from JSONL
    return {"arms": rows, "goal": goal(rows), "reference_arm": reference}


def test_figures_spread_cost_identity_and_goal():
    same = [[5, 6, 7, 8, 9], [1, 2, 3, 4, 5]]
    other = [[5, 6, 0, 8, 9], [1, 2, 3, 4, 5]]
    runs = {"none": [(0, _result(same, 0, 0, 100.0, 0.01)), (1, _result(same, 0, 0, 110.0, 0.01))],
            "sam": [(0, _result(same, 3, 1, 130.0, 0.05)), (1, _result(same, 3, 1, 120.0, 0.05))],
            "ngram": [(0, _result(same, 1, 0, 125.0)), (1, _result(other, 1, 0, 115.0))]}
    out = _compare(runs)
    assert out["reference_arm"] == "none"
    sam = out["arms"]["sam"]
    t = sam["tokens_per_s"]
    assert (t["median"], t["min"], t["max"], t["n"]) == (125.0, 120.0, 130.0, 2)
    assert t["stdev"] > 0 and t["unit"] == "output tokens / s" and t["source"].startswith("measured")
    # each figure says its unit and whether it is a time or a count
    for name in ("tokens_per_step", "drafted_per_step", "verify_tokens_per_emitted_token"):
        assert sam[name]["unit"] and sam[name]["source"] == FROM_COUNTS
    assert sam["tokens_per_step"]["value"] == 2.0
    assert sam["drafted_per_step"]["value"] == 3.0
    assert sam["verify_tokens_per_emitted_token"]["value"] == pytest.approx((1 + 3) / 2)
    assert out["arms"]["none"]["verify_tokens_per_emitted_token"]["value"] == 1.0
    assert sam["prompt_tokens_prefilled"]["value"] == 6 and sam["prompt_tokens_prefilled"]["source"] == FROM_COUNTS
    # sam without a spec runs the engine's default (its cost measured); a spec is what it says
    assert sam["draft_length"] == "evidence:cost=auto" and "draft_length" not in out["arms"]["ngram"]
    fixed = _compare({"sam[fixed]": runs["sam"], "sam[evidence]": runs["sam"]})["arms"]
    assert fixed["sam[fixed]"]["draft_length"] == "fixed"
    assert fixed["sam[evidence]"]["draft_length"] == "evidence"   # the replay default: a fixed cost
    assert sam["proposer_ms_per_step"]["median"] == pytest.approx(0.05)
    assert 0 < sam["proposer_share_of_wall"]["median"] < 1
    vs = sam["tokens_per_s_vs"]
    assert vs["none"]["ratio_of_medians"] == pytest.approx(125 / 105)
    assert (vs["none"]["per_repeat_min"], vs["none"]["per_repeat_max"]) == pytest.approx((120 / 110, 130 / 100))
    # identity with the reference arm (the first), every repeat; ngram's second repeat diverged at token 2
    assert sam["greedy_identical_to_reference"]["identical"] == 4
    g = out["arms"]["ngram"]["greedy_identical_to_reference"]
    assert (g["identical"], g["of"], g["first_divergence"]) == (3, 4, [2])
    goal = out["goal"]["sam"]
    assert goal["vs_ngram"]["ratio"] == pytest.approx(125 / 120)
    assert goal["met"] is True   # 1.19x none (>= 1.15), above ngram, identical
    runs["sam"][1] = (1, _result(same, 3, 1, 100.0, 0.05))
    assert _compare(runs)["goal"]["sam"]["met"] is False


def test_online_cost_is_reported_per_repeat():
    """A cost=auto arm's fitted cost (the proposer's summary) appears with its unit, source,
    spread over the repeats and its course; arms without it have none."""
    from samspec_bench.bench.vllm_proposer.proposer_timing import online_cost

    same = [[5, 6, 7, 8, 9]]
    runs = {"none": [(0, _result(same, 0, 0, 100.0, 0.01))],
            "sam[evidence:cost=auto]": [(0, _result(same, 2, 1, 120.0, 0.05)), (1, _result(same, 2, 1, 121.0, 0.05))]}
    for r, (_, res) in enumerate(runs["sam[evidence:cost=auto]"]):
        res.engine["proposer"]["online_cost"] = online_cost({"cost": [None, 0.29, 0.4 + r / 10, 0.5 + r / 10]})
    row = _compare(runs)["arms"]["sam[evidence:cost=auto]"]
    oc = row["online_cost"]
    assert (oc["min"], oc["max"], oc["n"]) == pytest.approx((0.5, 0.6, 2))
    assert oc["unit"] == "decode steps per draft token" and "online" in oc["source"]
    assert oc["series_last_repeat"] == [[1, 0.29], [2, 0.5], [3, 0.6]]
    assert "online_cost" not in _compare(runs)["arms"]["none"]
    assert online_cost({"cost": [None, None]}) is None
    long = online_cost({"cost": [0.1 * (i % 9) for i in range(1000)]}, points=10)
    assert len(long["series"]) <= 11 and long["series"][-1] == [999, pytest.approx(0.1 * (999 % 9))]


def test_bad_arms_and_repeats_are_named():
    with pytest.raises(UserError, match="sam-mN"):
        compare.arm_plan("sam-mx")
    with pytest.raises(UserError, match="or auto"):
        compare.arm_plan("sam[evidence:cost=often]")
    assert compare.arm_plan("sam[evidence:cost=auto]")[1].length.spec() == "evidence:cost=auto"
    with pytest.raises(UserError, match="--methods 'eagle'"):
        compare.arm_plan("eagle")
    with pytest.raises(UserError, match="--repeats 0"):
        compare.compare_methods(repeats=0)


@pytest.mark.vllm
def test_compare_inside_vllm(tmp_path):
    """A real run (none, sam, sam-m2, sam[evidence]; 3 prompts, 48 tokens), first one repeat, then
    resumed to two: the resumed run keeps the first repeat's calls and runs only the second; the
    result has the spread fields, the proposer's time is measured and positive, greedy outputs
    identical; sam (the engine default, cost=auto) records the cost it fitted online, finite and in
    [0, 1) at every recorded call; sam[evidence] (a fixed cost) records none."""
    from vllm_tier import require_vllm

    from samspec_bench.suites import compare as suite

    def execute(*args):   # the command's own parsing and defaults, called as `run` calls a suite
        params = suite.command.make_context("compare", list(args)).params
        where = {k: params.pop(k) for k in ("output", "json_path", "resume")}
        return suite.execute(suite.build_config(**params), **where)

    require_vllm()
    auto, fixed = "sam", "sam[evidence]"
    args = ["--methods", f"none,sam,sam-m2,{fixed}", "--num-prompts", "3", "--max-tokens", "48"]
    assert execute(*args, "--repeats", "1", "--output", str(tmp_path)) == 0
    (run,) = list(tmp_path.iterdir())
    first = (run / suite.RUNS_FILE).read_text().splitlines()
    assert len(first) == 4
    path = tmp_path / "compare.json"
    assert execute(*args, "--repeats", "2", "--resume", str(run), "--json", str(path)) == 0
    lines = (run / suite.RUNS_FILE).read_text().splitlines()
    assert lines[:4] == first and sorted(json.loads(x)["repeat"] for x in lines[4:]) == [1] * 4
    result = json.loads(path.read_text())
    assert result["suite"] == "compare" and result["config"]["repeats"] == 2
    out = {**result, **result["metrics"]}
    for m in ("none", "sam", "sam-m2", fixed):
        row = out["arms"][m]
        t = row["tokens_per_s"]
        assert t["n"] == 2 and t["min"] <= t["median"] <= t["max"] and len(t["runs"]) == 2
        assert row["proposer_ms_per_step"]["min"] > 0
        assert 0 < row["proposer_share_of_wall"]["max"] < 1
        g = row["greedy_identical_to_reference"]
        assert g["identical"] == g["of"] == 6, f"{m}: first divergence {g['first_divergence']}"
    assert out["arms"]["none"]["drafted_per_step"]["value"] == 0
    # vLLM's names beside the project's: TPOT measured, acceptance in % from vLLM's own counters
    v = out["arms"]["sam"]["vllm"]
    assert v["mean_tpot_ms"] > 0 and v["source"]["spec_decode"].startswith("vLLM's spec-decode counters")
    assert 0 <= v["spec_decode_acceptance_rate"] <= 100 and v["spec_decode_acceptance_length"] >= 1
    assert len(v["spec_decode_per_position_acceptance_rates"]) == 3   # k = 3 positions
    assert out["arms"]["sam"]["drafted_per_step"]["value"] > 0
    assert out["arms"]["sam"]["tokens_per_s_vs"]["none"]["unit"] == "x"
    assert set(out["goal"]) == {"sam", "sam-m2", fixed}
    assert out["arms"][auto]["draft_length"] == "evidence:cost=auto" and out["arms"][fixed]["draft_length"] == "evidence"
    oc = out["arms"][auto]["online_cost"]
    assert oc["n"] == 2 and oc["series_last_repeat"]
    assert all(math.isfinite(c) and 0 <= c < 1 for _, c in oc["series_last_repeat"]) and 0 <= oc["min"] <= oc["max"] < 1
    assert "online_cost" not in out["arms"][fixed]   # a fixed cost records none
    assert out["logprobs"]["asked"] is False         # vLLM's default: none computed
    # the engine built the proposer at its home path (the guard rail compares with it)
    assert out["engines"]["sam"]["drafter_class"] == "samspec_bench.bench.vllm_proposer.proposer.SamProposer"
    # the model's threads on every CPU (the default), unless the environment bound them already
    ct = out["cpu_threads"]
    assert ct["choice"] == "all" and ct["VLLM_CPU_OMP_THREADS_BIND"] not in (None, "auto")
    # every arm prefilled the same prompt tokens (what the prefix cache's full blocks did not hold)
    assert len({out["arms"][m]["prompt_tokens_prefilled"]["value"] for m in ("none", "sam", fixed)}) == 1


@pytest.mark.vllm
def test_length_spec_that_cannot_reach_vllm_is_refused():
    """A draft length the engine's process cannot rebuild from its spec (a profile callable)
    is named before any request is sent; a spec string passes."""
    from vllm_tier import require_vllm

    require_vllm()
    from samspec_bench.bench.engines.base import Request, SamplingParams
    from samspec_bench.bench.engines.vllm.adapter import VllmEngine
    from samspec_bench.sam import SamDrafter
    from samspec_bench.sam.draft_length import EvidenceLength

    eng = VllmEngine(lazy=True)   # nothing built: the check comes first
    with pytest.raises(UserError, match="cost=<profile>"):
        eng.generate([Request(0, [1, 2, 3], SamplingParams(max_tokens=4))],
                     drafter=SamDrafter(length=EvidenceLength(cost=lambda k: 0.1)))


def test_cpu_thread_binding(monkeypatch):
    """--cpu-threads: all binds the model's threads to every CPU of the process (vLLM's syntax,
    runs collapsed), vllm leaves vLLM's own binding, a binding in the environment wins, a bad
    choice is named."""
    from samspec_bench.bench.engines.vllm import platform

    assert platform.cpu_id_list([3, 0, 1, 2, 6, 8, 7]) == "0-3,6-8"
    assert platform.cpu_id_list([5]) == "5"
    monkeypatch.delenv(platform.THREADS_BIND, raising=False)
    monkeypatch.setattr(platform.os, "sched_getaffinity", lambda _pid: {0, 1, 2, 4}, raising=False)
    got = platform.bind_cpu_threads("vllm")
    assert got[platform.THREADS_BIND] == "auto" and platform.THREADS_BIND not in platform.os.environ
    got = platform.bind_cpu_threads("all")
    assert got[platform.THREADS_BIND] == "0-2,4" == platform.os.environ[platform.THREADS_BIND]
    assert got["cpus_available"] == 4
    monkeypatch.setenv(platform.THREADS_BIND, "1")
    assert platform.bind_cpu_threads("all")[platform.THREADS_BIND] == "1"
    assert "environment" in platform.bind_cpu_threads("vllm")["source"]
    with pytest.raises(ValueError, match="cpu threads 'half'"):
        platform.bind_cpu_threads("half")


def test_cpu_engine_environment_preloads_and_restores(monkeypatch, tmp_path):
    """--cpu-threads all, while the engines start: the binding, Intel OpenMP preloaded (found in
    the environment's lib/) with spawned processes, numba's workqueue layer; all restored on exit.
    An OpenMP already preloaded is kept; without intel-openmp nothing is preloaded and the result
    says how to get it."""
    from samspec_bench.bench.engines.vllm import platform

    for key in platform._RUN_ENV_KEYS:
        monkeypatch.delenv(key, raising=False)
    (tmp_path / "lib").mkdir()
    lib = tmp_path / "lib" / "libiomp5.so"
    lib.write_bytes(b"")
    monkeypatch.setattr(platform.sys, "prefix", str(tmp_path))
    with platform.cpu_engine_environment("all") as info:
        env = platform.os.environ
        assert env["LD_PRELOAD"] == str(lib) and env["VLLM_WORKER_MULTIPROC_METHOD"] == "spawn"
        assert env["NUMBA_THREADING_LAYER"] == "workqueue" and env[platform.THREADS_BIND] != "auto"
        assert info["openmp"]["LD_PRELOAD"] == str(lib)
    assert not any(k in platform.os.environ for k in platform._RUN_ENV_KEYS)

    monkeypatch.setenv("LD_PRELOAD", "/opt/libgomp.so")
    with platform.cpu_engine_environment("all") as info:
        assert platform.os.environ["LD_PRELOAD"] == "/opt/libgomp.so" and "environment" in info["openmp"]["source"]
        assert "VLLM_WORKER_MULTIPROC_METHOD" not in platform.os.environ
    assert platform.os.environ["LD_PRELOAD"] == "/opt/libgomp.so"

    monkeypatch.delenv("LD_PRELOAD")
    lib.unlink()
    monkeypatch.setattr(platform.sys, "base_prefix", str(tmp_path))
    with platform.cpu_engine_environment("all") as info:
        assert "LD_PRELOAD" not in platform.os.environ and "pip install intel-openmp" in info["openmp"]["source"]
    with platform.cpu_engine_environment("vllm") as info:   # vLLM's own setup: nothing set
        assert not any(k in platform.os.environ for k in platform._RUN_ENV_KEYS) and "openmp" not in info


def test_tail_arm_builds_its_own_engine_with_the_option(monkeypatch):
    """sam+tail runs on an engine of its own whose proposer has option tail on by default: the
    option rides on SAMSPEC_VLLM_DRAFTER while that engine is built (other options kept), and
    the environment is put back afterwards."""
    key, drafter = compare.arm_plan("sam+tail")
    assert key == "sam-tail" and drafter.length_given is False
    monkeypatch.setenv(compare.ENV_OPTIONS, '{"min_match": 2}')
    with compare._tail_default(True):
        assert json.loads(compare.os.environ[compare.ENV_OPTIONS]) == {"min_match": 2, "tail": True}
    assert compare.os.environ[compare.ENV_OPTIONS] == '{"min_match": 2}'
    monkeypatch.delenv(compare.ENV_OPTIONS)
    with compare._tail_default(False):
        assert compare.ENV_OPTIONS not in compare.os.environ
    with compare._tail_default(True):
        assert json.loads(compare.os.environ[compare.ENV_OPTIONS]) == {"tail": True}
    assert compare.ENV_OPTIONS not in compare.os.environ


def test_wall_model_against_the_plain_engine():
    """Each arm that drafted gets its speed-up over the plain engine (preferred to `none`)
    modelled from the last repeat's counts at one step cost for the run: the medians of the
    drafting arms' fits (wall_model.py)."""
    from samspec_bench.bench.engines.vllm.wall_model import modelled_ratios

    same = [[5, 6, 7, 8, 9]]   # 4 decode steps; sam drafts 3 and keeps 1 at each, sam[fixed] 2 and 2
    runs = {"none-plain": [(0, _result(same, 0, 0, 100.0))], "none": [(0, _result(same, 0, 0, 100.0, 0.01))],
            "sam": [(0, _result(same, 3, 1, 120.0, 0.05)), (1, _result(same, 3, 1, 121.0, 0.05))],
            "sam[fixed]": [(0, _result(same, 2, 2, 120.0, 0.05))]}
    fits = {"sam": [(50.0, 3.0), (51.0, 4.0)], "sam[fixed]": [(60.0, 5.0)], "none": [(40.0, 1.0)]}
    for m, per_repeat in fits.items():
        for (_, res), (a, b) in zip(runs[m], per_repeat):
            res.engine["proposer"]["verify_cost"] = {"fixed_ms": a, "ms_per_verified_token": b,
                                                     "draft_token_cost_decode_steps": 0.3, "source": "fit"}
            res.steps = res.steps[:6]   # fewer engine steps than the plain engine's 10
    arms = _compare(runs)["arms"]
    a, b = (50.5 + 60.0) / 2, (3.5 + 5.0) / 2   # medians over the drafting arms (none drafted nothing)
    assert arms["sam"]["wall_model_vs"] == {"none-plain": {**modelled_ratios(a, b, 10, 4, 6, 4 + 12, 12 - 4),
                                                           "fitted_arms": 2}}
    assert arms["sam[fixed]"]["wall_model_vs"]["none-plain"]["exact_drafts"] == pytest.approx(
        (10 * a + 4 * b) / (6 * a + (4 + 8) * b))
    assert arms["sam"]["wall_model_vs"]["none-plain"]["free_verification"] == pytest.approx(10 / 6)
    assert arms["sam"]["fixed_ms_per_step"]["median"] == pytest.approx(50.5)
    assert "wall_model_vs" not in arms["none-plain"] and "wall_model_vs" not in arms["none"]
    del runs["none-plain"]
    assert list(_compare(runs)["arms"]["sam"]["wall_model_vs"]) == ["none"]


class _FakeEngine:
    """What _run_group needs of an engine; records the sampling parameters it was asked for."""

    guard_rails = {"drafter_class": None, "scheduling": {"async_scheduling": False}}
    startup_s = 1.0

    def __init__(self):
        self.params, self.groups = [], []

    @staticmethod
    def tokenizer(text):
        return {"input_ids": [1, 2, 3]}

    def generate(self, reqs, drafter=None, num_spec_tokens=3):
        self.params.append([r.params for r in reqs])
        self.groups.append([r.group for r in reqs])
        return _result([[5, 6, 7]] * len(reqs), 0, 0, 100.0)

    def close(self):
        pass


@pytest.mark.parametrize("asked", [None, 0])
def test_measured_calls_ask_logprobs_only_when_told(monkeypatch, asked):
    """The measured calls carry logprobs=None by default (vLLM computes none) and 0 with
    --logprobs (each emitted token's, as an RL rollout keeping rollout logprobs asks)."""
    fake = _FakeEngine()
    monkeypatch.setattr(compare, "_build", lambda *a, **k: fake)
    recs = []
    compare._run_group(["none"], {"none": compare.arm_plan("none")}, ["q"], [[1, 2], [3, 4]], set(), recs.append,
                       model="m", dtype="float32", k=3, engine_args=None, repeats=2, max_tokens=8,
                       logprobs=asked, log=lambda msg: None)
    measured = fake.params[2:]   # after the warm-up and the one-token prefill
    assert len(measured) == 2 and all(p.logprobs == asked and p.max_tokens == 8 for call in measured for p in call)
    assert [(r["arm"], r["repeat"]) for r in recs] == [("none", 0), ("none", 1)]
    assert compare_figures.engines_of(recs)["sam"]["startup_s"]["value"] == 1.0


def test_logprobs_none_or_a_count():
    from samspec_bench.bench.engines.base import SamplingParams

    assert SamplingParams(logprobs=None).logprobs is None and SamplingParams(logprobs=2).logprobs == 2
    for bad in (-1, 1.5):
        with pytest.raises(ValueError, match="logprobs"):
            SamplingParams(logprobs=bad)


def test_batch_arm_puts_every_request_of_a_call_in_one_group(monkeypatch):
    """sam+batch: the SAM engine, a group-sharing drafter, and every measured request in one
    group (each drafts from all of them); sam's requests keep no group."""
    key, drafter = compare.arm_plan("sam+batch")
    assert key == "sam" and drafter.group_sharing is True
    fake = _FakeEngine()
    monkeypatch.setattr(compare, "_build", lambda *a, **k: fake)
    arms = ["sam", "sam+batch"]
    compare._run_group(arms, {m: compare.arm_plan(m) for m in arms}, ["q"], [[1, 2], [3, 4], [5]],
                       set(), lambda rec: None, model="m", dtype="float32", k=3, engine_args=None, repeats=2,
                       max_tokens=8, logprobs=None, log=lambda msg: None)
    measured = fake.groups[2:]   # repeat 1: sam, sam+batch; repeat 2: sam+batch, sam (rotated)
    assert measured == [[None] * 3, [compare.BATCH_GROUP] * 3, [compare.BATCH_GROUP] * 3, [None] * 3]


def test_calls_rotate_run_suffix_once_and_skip_what_a_run_has():
    assert compare.calls_to_run(["a", "b", "c"], 3, set()) == [
        (0, "a"), (0, "b"), (0, "c"), (1, "b"), (1, "c"), (1, "a"), (2, "c"), (2, "a"), (2, "b")]
    assert compare.calls_to_run(["suffix", "sam"], 2, set()) == [(0, "suffix"), (0, "sam"), (1, "sam")]
    assert compare.calls_to_run(["a", "b"], 2, {("a", 0), ("a", 1)}) == [(0, "b"), (1, "b")]
    assert compare.calls_to_run(["a"], 1, {("a", 0)}) == []


def test_command_run_folder_resume_and_report(monkeypatch, tmp_path, shared_data):
    """`samspec-bench compare` with a stand-in engine: one record per generate call in runs.jsonl;
    a resumed run makes only the calls that are missing (a torn last record is made again) and
    gives the same figures; the report reads the run folder (tok/s headlines, identity gates);
    a resume with other settings is refused naming the setting."""
    from click.testing import CliRunner

    from samspec_bench.cli import group
    from samspec_bench.reports.collect import collect
    from samspec_bench.results import load_result
    from samspec_bench.suites import compare as suite

    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", "1")   # compare_methods sets it when unset
    fake = _FakeEngine()
    monkeypatch.setattr(compare, "_build", lambda *a, **k: fake)
    monkeypatch.setattr(compare, "encode_chat", lambda tok, text: [1, 2, len(text)])
    args = ["compare", "--methods", "none,sam", "--num-prompts", "2", "--max-tokens", "8", "--repeats", "2",
            "--data-dir", str(shared_data)]
    res = CliRunner().invoke(group, [*args, "--output", str(tmp_path)])
    assert res.exit_code == 0, res.output
    (run,) = list(tmp_path.iterdir())
    first = load_result(run)
    assert len(fake.params) == 2 + 4   # one engine: warm-up, prefill, then 2 arms x 2 repeats
    lines = (run / suite.RUNS_FILE).read_text().splitlines()
    assert [(json.loads(x)["arm"], json.loads(x)["repeat"]) for x in lines] == [
        ("none", 0), ("sam", 0), ("sam", 1), ("none", 1)]
    (run / suite.RUNS_FILE).write_text("\n".join(lines[:3]) + "\n" + lines[3][:30])   # the last call torn
    fake.params.clear()
    res = CliRunner().invoke(group, [*args, "--resume", str(run)])
    assert res.exit_code == 0, res.output
    assert len(fake.params) == 2 + 1   # warm-up, prefill and the one missing call
    again = load_result(run)
    assert again["metrics"]["arms"]["sam"]["tokens_per_s"] == first["metrics"]["arms"]["sam"]["tokens_per_s"]
    assert again["metrics"]["arms"]["none"]["tokens_per_s"]["n"] == 2
    assert [r["arm"] for r in again["tables"]["arms"]] == ["none", "sam"]
    heads = {h["name"]: h for h in collect([run]).groups[0].runs[0].headlines}
    assert heads["sam: output tokens/s"]["value"] == pytest.approx(100.0)
    gates = collect([run]).groups[0].runs[0].gates
    assert {g["name"]: g["passed"] for g in gates}["sam: greedy outputs identical to none"] is True
    # nothing runs a second time once every call is there
    fake.params.clear()
    assert CliRunner().invoke(group, [*args, "--resume", str(run)]).exit_code == 0 and fake.params == []
    res = CliRunner().invoke(group, [*args[:-6], "--max-tokens", "9", "--repeats", "2", "--data-dir",
                                     str(shared_data), "--resume", str(run)])
    assert isinstance(res.exception, UserError) and "max_tokens = 8, this call 9" in str(res.exception)


def test_a_resume_with_fewer_repeats_gives_figures_over_the_repeats_it_records(monkeypatch, tmp_path, shared_data):
    """--repeats may change on a resume: with fewer, the figures are over the repeats result.json
    records (not every call the folder holds), said in one line; the later calls stay in
    runs.jsonl, and a resume that asks for them again uses them without running them."""
    from click.testing import CliRunner

    from samspec_bench.cli import group
    from samspec_bench.results import load_result
    from samspec_bench.suites import compare as suite

    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", "1")
    fake = _FakeEngine()
    monkeypatch.setattr(compare, "_build", lambda *a, **k: fake)
    monkeypatch.setattr(compare, "encode_chat", lambda tok, text: [1, 2, len(text)])
    args = ["compare", "--methods", "none,sam", "--num-prompts", "2", "--max-tokens", "8", "--data-dir",
            str(shared_data)]
    assert CliRunner().invoke(group, [*args, "--repeats", "3", "--output", str(tmp_path)]).exit_code == 0
    (run,) = list(tmp_path.iterdir())
    res = CliRunner().invoke(group, [*args, "--repeats", "1", "--resume", str(run)])
    assert res.exit_code == 0, res.output
    got = load_result(run)
    assert got["repeats"] == got["config"]["repeats"] == 1
    assert {m: a["tokens_per_s"]["n"] for m, a in got["metrics"]["arms"].items()} == {"none": 1, "sam": 1}
    assert "4 call(s) of repeats beyond --repeats 1 left out of the figures" in res.stderr
    assert len((run / suite.RUNS_FILE).read_text().splitlines()) == 6
    fake.params.clear()
    assert CliRunner().invoke(group, [*args, "--repeats", "3", "--resume", str(run)]).exit_code == 0
    assert fake.params == [] and load_result(run)["metrics"]["arms"]["sam"]["tokens_per_s"]["n"] == 3


def test_a_resume_skips_and_counts_records_that_are_not_calls(monkeypatch, tmp_path, shared_data):
    """runs.jsonl edited or damaged: a record without an arm and an integer repeat, or a call
    recorded twice, is skipped and counted as a damaged line (said, in result.json), not a
    traceback or a call counted twice."""
    from click.testing import CliRunner

    from samspec_bench.cli import group
    from samspec_bench.results import load_result
    from samspec_bench.suites import compare as suite

    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", "1")
    fake = _FakeEngine()
    monkeypatch.setattr(compare, "_build", lambda *a, **k: fake)
    monkeypatch.setattr(compare, "encode_chat", lambda tok, text: [1, 2, len(text)])
    args = ["compare", "--methods", "none,sam", "--num-prompts", "2", "--max-tokens", "8", "--repeats", "2",
            "--data-dir", str(shared_data)]
    assert CliRunner().invoke(group, [*args, "--output", str(tmp_path)]).exit_code == 0
    (run,) = list(tmp_path.iterdir())
    runs = run / suite.RUNS_FILE
    first = runs.read_text().splitlines()[0]
    runs.write_text(runs.read_text() + first + "\n" + '{"arm": "sam", "repeat": "1"}\n{"arm": "none"}\n')
    fake.params.clear()
    res = CliRunner().invoke(group, [*args, "--resume", str(run)])
    assert res.exit_code == 0, res.output
    assert fake.params == []   # every call has its record
    got = load_result(run)
    assert {m: a["tokens_per_s"]["n"] for m, a in got["metrics"]["arms"].items()} == {"none": 2, "sam": 2}
    assert got["damaged_lines"] == {suite.RUNS_FILE: 3}
    assert "3 record(s) name no arm and repeat, or a call recorded before (damaged)" in res.stderr


def test_fewer_prompts_than_asked_for_are_said(monkeypatch, tmp_path):
    """A custom dataset of 3 rows with --num-prompts 5: the 3 are measured, and the terminal says so."""
    from click.testing import CliRunner

    from samspec_bench.cli import group
    from samspec_bench.results import load_result

    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", "1")
    monkeypatch.setattr(compare, "_build", lambda *a, **k: _FakeEngine())
    monkeypatch.setattr(compare, "encode_chat", lambda tok, text: [1, 2, len(text)])
    data = tmp_path / "prompts.jsonl"
    data.write_text("".join(json.dumps({"prompt": f"question {i}"}) + "\n" for i in range(3)), encoding="utf-8")
    res = CliRunner().invoke(group, ["compare", "--methods", "none,sam", "--dataset-name", "custom", "--dataset-path",
                                     str(data), "--num-prompts", "5", "--max-tokens", "4", "--repeats", "1",
                                     "--output", str(tmp_path / "runs")])
    assert res.exit_code == 0, res.output
    assert "prompts: 3 of the --num-prompts 5 asked for: the custom prompts hold no more" in res.stdout
    (run,) = list((tmp_path / "runs").iterdir())
    assert load_result(run)["num_prompts"] == 3


def test_a_resume_takes_the_data_directory_by_another_spelling(monkeypatch, tmp_path, shared_data):
    """`--data-dir data/` or a relative path on the resume of a run made with `--data-dir data`:
    the same directory, not "another setting"; another directory is still refused."""
    from click.testing import CliRunner

    from samspec_bench.cli import group

    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", "1")
    monkeypatch.setattr(compare, "_build", lambda *a, **k: _FakeEngine())
    monkeypatch.setattr(compare, "encode_chat", lambda tok, text: [1, 2, len(text)])
    args = ["compare", "--methods", "none,sam", "--num-prompts", "2", "--max-tokens", "4", "--repeats", "1"]
    assert CliRunner().invoke(group, [*args, "--data-dir", str(shared_data), "--output", str(tmp_path)]).exit_code == 0
    (run,) = list(tmp_path.iterdir())
    res = CliRunner().invoke(group, [*args, "--data-dir", f"{shared_data}/", "--resume", str(run)])
    assert res.exit_code == 0, res.output
    monkeypatch.chdir(shared_data.parent)
    res = CliRunner().invoke(group, [*args, "--data-dir", shared_data.name, "--resume", str(run)])
    assert res.exit_code == 0, res.output
    res = CliRunner().invoke(group, [*args, "--data-dir", str(shared_data / "benchmarks"), "--resume", str(run)])
    assert isinstance(res.exception, UserError) and "the run used data_dir" in str(res.exception)


def test_bad_options_are_named_before_an_engine_is_built(monkeypatch, tmp_path):
    from click.testing import CliRunner

    from samspec_bench.cli import group

    monkeypatch.setattr(compare, "_build", lambda *a, **k: pytest.fail("no engine for bad options"))
    for args, says in ((["--methods", "eagle"], "--methods 'eagle'"), (["--repeats", "0"], "--repeats 0"),
                       (["--num-prompts", "0"], "--num-prompts 0"), (["--engine-arg", "oops"], "--engine-arg 'oops'"),
                       (["--methods", "none,sam,sam"], "sam is named twice")):
        res = CliRunner().invoke(group, ["compare", *args, "--output", str(tmp_path / "runs")])
        assert isinstance(res.exception, UserError) and says in str(res.exception), args
    assert not (tmp_path / "runs").exists()
