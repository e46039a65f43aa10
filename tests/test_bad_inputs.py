"""The bad-input battery (issue 18): every command driven as a careless user would.

Each case runs `samspec_bench.cli.main` in this process (so torch, transformers and the byte
tokenizer load once) in an empty working directory, with its inputs in a fresh copy of a small
workspace, and asserts: the documented exit code (2: bad input), exactly one line on stderr
(`error: ...` naming the input; a few suites print a progress line first, marked `lead=1`), no
traceback, no stray files (the working directory stays empty; the inputs are unchanged; no
`*.tmp`). Positive cases (bad lines skipped, a report of good and bad runs, concurrent starts)
check that the result is right, not only that nothing crashed.

No model is loaded: a byte-level tokenizer is written once; everything fails before a model
would load, or runs on trace replay. One module: the battery is one table of cases and its checks.
"""

from __future__ import annotations

import contextlib
import io
import json
import multiprocessing as mp
import shutil
import threading
import traceback
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from samspec_bench.cli import main
from samspec_bench.results import RunDir, build_result

FAST_ACCEPT = ["--workers", "1", "--no-progress"]


# --- the workspace ------------------------------------------------------------------------------

def _trace(i: int, group: str, text: str = "the answer is 42. the answer is 42.", **extra) -> str:
    row = {"id": f"r{i}", "group": group, "prompt": "what is six times seven? ", "response": text, **extra}
    return json.dumps(row)


def _good_lines() -> list[str]:
    return [_trace(i, f"g{i // 2}", f"step {i}: the answer is 42. the answer is 42. so 42.") for i in range(4)]


@pytest.fixture(scope="module")
def src(tmp_path_factory) -> Path:
    """The inputs every case starts from (copied per case)."""
    from samspec_bench.models.checkpoints import _byte_tokenizer  # a tokenizer without a model (transformers)

    root = tmp_path_factory.mktemp("inputs")
    _byte_tokenizer().save_pretrained(root / "tok")
    good = _good_lines()
    (root / "good.jsonl").write_text("\n".join(good) + "\n", encoding="utf-8")
    (root / "nonutf8.jsonl").write_bytes(good[0].encode() + b"\n" + b'{"id": "x", "group": "g", "prompt": "\xff\xfe",'
                                         b' "response": "caf\xe9"}\n')
    (root / "mixed.jsonl").write_bytes(("\n".join(good) + "\n").encode() + b'{"id": "bad", "response": "\xff"}\n')
    (root / "dup.jsonl").write_text("\n".join(good + [_trace(1, "g0", "a different response, same id")]) + "\n")
    (root / "empty.jsonl").write_text("")
    (root / "fuzzed.jsonl").write_text(good[0] + "\n" + '{"id": "r9", "group": ["g"], "prompt": 3, '
                                       '"response": {"a": [1, 2}\n')
    (root / "wrongtypes.jsonl").write_text(json.dumps({"id": True, "group": "g", "prompt": "p", "response": "r"}) + "\n")
    (root / "badids.jsonl").write_text(json.dumps({"id": "a", "group": "g", "prompt_ids": [1, -3],
                                                   "response_ids": ["x"]}) + "\n")
    (root / "nanlogprobs.jsonl").write_text(_trace(0, "g", "ab", logprobs=[float("nan"), 0.0]) + "\n")
    (root / "notalist.jsonl").write_text("[1, 2, 3]\n")
    tdir = root / "tracedir"
    tdir.mkdir()
    (tdir / "a.jsonl").write_text("\n".join(good) + "\n")
    (tdir / "b.jsonl").mkdir()                       # a directory named like a trace file
    # a data directory whose traces cannot be read (for `run`)
    data = root / "data"
    (data / "traces").mkdir(parents=True)
    (data / "traces" / "t.jsonl").write_bytes(b"\xff\xfe not text\n")
    shutil.copytree(root / "tok", data / "tokenizers" / "qwen3")
    (root / "afile").write_text("not a directory\n")
    (root / "adir").mkdir()
    # YAML configs for `run`
    cfgs = {"cfg_types.yaml": "accept:\n  num-spec-tokens: {a: 1}\n",
            "cfg_steps.yaml": "steps: 5\n",
            "cfg_model.yaml": "model: [1, 2]\n",
            "cfg_engine.yaml": "engine: 3\n",
            "cfg_section.yaml": "accept: [1, 2]\n",
            "cfg_int.yaml": "rollout:\n  max-num-seqs: lots\n",
            "cfg_flag.yaml": "accept:\n  progress: 7\n",
            "cfg_datadir.yaml": "data-dir: 5\n",
            "cfg_unknown.yaml": "acept: {}\n"}
    for name, text in cfgs.items():
        (root / name).write_text(text)
    (root / "cfg_binary.yaml").write_bytes(b"\x00\xff\xfe\x00garbage: [\n")
    (root / "cfg_badyaml.yaml").write_text("accept: {num-spec-tokens: [3,\n")
    # a real accept run (the report and resume cases use it)
    runs = root / "runs"
    code, out, err = invoke(["accept", "--traces", str(root / "good.jsonl"), "--tokenizer", str(root / "tok"),
                             "--output", str(runs), *FAST_ACCEPT])
    assert code == 0, err
    (run,) = runs.iterdir()
    run.rename(runs / "accept-good")
    # corrupt copies of it
    for name, text in {"truncated": None, "list": "[1, 2]\n", "empty": "", "noschema": "{}\n",
                       "badmetrics": None}.items():
        d = runs / f"accept-{name}"
        shutil.copytree(runs / "accept-good", d)
        res = (d / "result.json").read_text()
        if name == "truncated":
            text = res[: len(res) // 2]
        elif name == "badmetrics":
            data = json.loads(res)
            data["metrics"] = [1, 2]
            text = json.dumps(data)
        (d / "result.json").write_text(text)
    bad = runs / "accept-binary"
    shutil.copytree(runs / "accept-good", bad)
    (bad / "result.json").write_bytes(b"\xff\xfe{")
    # resume folders of the wrong kind
    shutil.copytree(runs / "accept-good", root / "resume-truncated-config")
    cfgp = root / "resume-truncated-config" / "config.json"
    cfgp.write_text(cfgp.read_text()[:20])
    shutil.copytree(runs / "accept-good", root / "resume-list-config")
    (root / "resume-list-config" / "config.json").write_text("[]\n")
    legacy = root / "sampler-20260101-000000"          # another suite's folder, named as RunDir names them
    legacy.mkdir()
    (legacy / "result.json").write_text(json.dumps(build_result("sampler", {"samples": 100}, {})))
    (legacy / "audits.jsonl").write_text("")
    (root / "resume-empty").mkdir()
    (root / "state-list").mkdir()
    (root / "state-list" / "run_state.json").write_text("[1]\n")
    (root / "state-truncated").mkdir()
    (root / "state-truncated" / "run_state.json").write_text('{"format": 1, "settings": {"mo')
    # a `run` output folder whose state is torn but whose step result is fine
    mixed_run = root / "run-mixed"
    shutil.copytree(runs / "accept-good", mixed_run / "runs" / "accept" / "accept-good")
    (mixed_run / "run_state.json").write_text('{"format": 1, "sett')
    return root


def invoke(argv: list[str], cwd: Path | None = None) -> tuple[object, str, str]:
    """(exit code, stdout, stderr) of `samspec-bench ARGV` run in this process; an exception
    escaping main is returned as the code "raised" with its traceback on stderr."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.ExitStack() as stack:
        if cwd is not None:
            stack.enter_context(contextlib.chdir(cwd))
        stack.enter_context(contextlib.redirect_stdout(out))
        stack.enter_context(contextlib.redirect_stderr(err))
        try:
            main([str(a) for a in argv])
            code: object = 0
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        except BaseException:   # noqa: BLE001 - the battery reports what escaped
            code = "raised"
            err.write(traceback.format_exc())
    return code, out.getvalue(), err.getvalue()


def _tree(root: Path) -> dict[str, int]:
    return {p.relative_to(root).as_posix(): (p.stat().st_size if p.is_file() else -1) for p in root.rglob("*")}


@pytest.fixture
def space(src, tmp_path, monkeypatch):
    """(inputs: a fresh copy of the workspace, work: an empty working directory)."""
    monkeypatch.delenv("SAMSPEC_DATA_DIR", raising=False)
    inputs = tmp_path / "in"
    shutil.copytree(src, inputs, symlinks=True)
    work = tmp_path / "work"
    work.mkdir()
    return inputs, work


# --- the cases ------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Case:
    id: str
    argv: tuple[str, ...]
    needle: str            # the one error line names this (case-insensitive)
    code: int = 2
    lead: int = 0          # progress lines a suite prints on stderr before the error


def C(id, argv, needle, code=2, lead=0):
    return Case(id, tuple(argv.split()), needle, code, lead)


T = "--tokenizer {in}/tok"
ACC = "--workers 1 --no-progress"
RO = f"rollout --traces {{in}}/good.jsonl {T}"
DR = f"drafters --traces {{in}}/good.jsonl {T} --no-progress --sweep 64 --sweep-steps 5 --repeats 1"
OPK = "op-equivalence --level kernel --num-seqs 1 --seq-len 16:32 --trials 1 --gqa 1 --no-progress"
SAM = "sampler --samples 100 --max-vocab 8 --no-speed"

CASES = [
    # undecodable input
    C("utf8/accept", f"accept --traces {{in}}/nonutf8.jsonl {T} {ACC}", "utf-8", lead=1),
    # every line undecodable: the trace format cannot even be detected (named before any tokenizing)
    C("utf8/accept-skip-all", f"accept --traces {{in}}/data/traces/t.jsonl {T} {ACC} --on-error skip", "no JSON object"),
    C("utf8/drafters", f"drafters --traces {{in}}/nonutf8.jsonl {T} --no-progress", "utf-8"),
    C("utf8/drafters-skip", f"drafters --traces {{in}}/data/traces/t.jsonl {T} --no-progress --on-error skip",
      "no JSON object"),
    C("utf8/rollout", f"rollout --traces {{in}}/nonutf8.jsonl {T}", "utf-8"),
    C("utf8/run-config", "run --steps accept --config {in}/cfg_binary.yaml", "cfg_binary.yaml"),
    C("utf8/report", "report html {in}/runs/accept-binary -o r.html", "result.json"),
    # corrupt results
    C("results/report-truncated", "report html {in}/runs/accept-truncated -o r.html", "result.json"),
    C("results/report-list", "report md {in}/runs/accept-list -o r.md", "result.json"),
    C("results/report-empty", "report html {in}/runs/accept-empty -o r.html", "result.json"),
    C("results/report-noschema", "report html {in}/runs/accept-noschema -o r.html", "schema_version"),
    C("results/report-badmetrics", "report md {in}/runs/accept-badmetrics -o r.md", "metrics"),
    C("results/report-state-only", "report html {in}/state-truncated -o r.html", "run_state.json"),
    C("results/report-nothing", "report html {in}/adir -o r.html", "no result.json"),
    # limits
    C("limits/rollout-max-num-seqs", f"{RO} --max-num-seqs 0", "--max-num-seqs"),
    C("limits/rollout-batched-tokens", f"{RO} --max-num-batched-tokens 0", "--max-num-batched-tokens"),
    C("limits/rollout-response-len", f"{RO} --max-response-len 0", "--max-response-len"),
    C("limits/rollout-k", f"{RO} -k 10000", "-k"),
    C("limits/rollout-k0", f"{RO} -k 0", "-k"),
    C("limits/rollout-block-size", f"{RO} --block-size 0", "--block-size"),
    C("limits/rollout-prompts", f"{RO} --prompts 0", "--prompts"),
    C("limits/rollout-group-size", f"{RO} --group-size 0", "--group-size"),
    C("limits/rollout-seed", f"{RO} --seed -1", "--seed"),
    C("limits/rollout-temperature", f"{RO} --temperature -1", "--temperature"),
    C("limits/rollout-top-p", f"{RO} --top-p 0", "--top-p"),
    C("limits/rollout-tail", f"{RO} --tail-threshold 0", "--tail-threshold"),
    C("limits/rollout-kv", f"{RO} --kv-capacity-tokens -5", "--kv-capacity-tokens"),
    C("limits/rollout-threshold", f"{RO} --spec-threshold 0", "--spec-threshold"),
    C("limits/rollout-threshold-always", f"{RO} --max-num-seqs 8 --spec-threshold 4,8", "--spec-threshold 8 with --max-num-seqs 8"),
    C("limits/rollout-huge-k", f"{RO} -k 99999999999999999999999", "-k"),
    C("limits/rollout-not-int", f"{RO} --max-num-seqs lots", "--max-num-seqs"),
    C("limits/rollout-repeats", "rollout --engine reference --repeats 0", "--repeats"),
    C("limits/rollout-threads", f"{RO} --threads -1", "--threads"),
    C("limits/drafters-k", f"{DR} -k 10000", "-k"),
    C("limits/drafters-k0", f"{DR} -k 0", "-k"),
    C("limits/drafters-max-tokens", f"{DR} --max-tokens -1", "--max-tokens"),
    C("limits/drafters-sweep", f"{DR} --sweep 0", "--sweep"),
    C("limits/accept-workers", f"accept --traces {{in}}/good.jsonl {T} --workers -3 --no-progress", "--workers"),
    C("limits/accept-workers-huge", f"accept --traces {{in}}/good.jsonl {T} --workers 100000000 --no-progress",
      "--workers"),
    C("limits/accept-k", f"accept --traces {{in}}/good.jsonl {T} {ACC} -k 10000", "--num-spec-tokens"),
    C("limits/accept-limit-groups", f"accept --traces {{in}}/good.jsonl {T} {ACC} --limit-groups 0", "--limit-groups"),
    C("limits/accept-cost-nan", f"accept --traces {{in}}/good.jsonl {T} {ACC} --verify-cost-ratio nan",
      "--verify-cost-ratio"),
    C("limits/accept-ngram", f"accept --traces {{in}}/good.jsonl {T} {ACC} --ngram-min 0", "--ngram-min"),
    C("limits/sampler-samples", "sampler --samples 0", "--samples"),
    C("limits/sampler-alpha", "sampler --alpha 2", "--alpha"),
    C("limits/opeq-k", f"{OPK} -k 0", "-k"),
    C("limits/opeq-num-seqs", f"{OPK.replace('--num-seqs 1', '--num-seqs 0')}", "--num-seqs"),
    C("limits/opeq-block-size", f"{OPK} --block-size 0", "--block-size"),
    C("limits/opeq-num-heads", f"{OPK} --num-heads 0", "--num-heads"),
    C("limits/opeq-gqa", f"{OPK} --gqa 3", "--gqa"),
    C("limits/opeq-threads", f"{OPK} --threads -1", "--threads"),
    C("limits/accuracy-threads", "accuracy --threads -1", "--threads"),
    C("limits/accuracy-max-num-seqs", "accuracy --max-num-seqs 0", "--max-num-seqs"),
    C("limits/accuracy-alpha", "accuracy --alpha 0", "--alpha"),
    C("limits/accuracy-top-p", "accuracy --top-p 0", "--top-p"),
    # duplicates
    C("dup/accept", f"accept --traces {{in}}/dup.jsonl {T} {ACC}", "r1", lead=1),
    C("dup/drafters", f"drafters --traces {{in}}/dup.jsonl {T} --no-progress", "r1"),
    C("dup/rollout", f"{RO.replace('good.jsonl', 'dup.jsonl')}", "r1"),
    # output paths of the wrong kind
    C("paths/accept-output-file", f"accept --traces {{in}}/good.jsonl {T} {ACC} --output {{in}}/afile", "--output"),
    C("paths/accept-output-under-file", f"accept --traces {{in}}/good.jsonl {T} {ACC} --output {{in}}/afile/sub",
      "--output"),
    C("paths/accept-json-dir", f"accept --traces {{in}}/good.jsonl {T} {ACC} --json {{in}}/adir", "--json"),
    C("paths/drafters-json-dir", f"{DR} --json {{in}}/adir", "--json"),
    C("paths/rollout-output-file", f"{RO} --output {{in}}/afile", "--output"),
    C("paths/rollout-json-dir", f"{RO} --json {{in}}/adir", "--json"),
    C("paths/sampler-output-file", f"{SAM} --output {{in}}/afile", "--output"),
    C("paths/opeq-output-file", f"{OPK} --output {{in}}/afile", "--output"),
    C("paths/accuracy-output-file", "accuracy --output {in}/afile", "--output"),
    C("paths/run-output-file", "run --steps accept --output {in}/afile", "--output"),
    C("paths/report-html-dir", "report html {in}/runs/accept-good -o {in}/adir", "adir"),
    C("paths/report-md-dir", "report md {in}/runs/accept-good -o {in}/adir", "adir"),
    C("paths/report-json-dir", "report md {in}/runs/accept-good -o r.md --json {in}/adir", "--json"),
    # resume trusts what it finds
    C("resume/accept-truncated-config", f"accept --traces {{in}}/good.jsonl {T} {ACC} "
      "--resume {in}/resume-truncated-config", "config.json"),
    C("resume/accept-list-config", f"accept --traces {{in}}/good.jsonl {T} {ACC} --resume {{in}}/resume-list-config",
      "config.json"),
    C("resume/accept-other-suite", f"accept --traces {{in}}/good.jsonl {T} {ACC} "
      "--resume {in}/sampler-20260101-000000", "sampler"),
    C("resume/accept-empty-dir", f"accept --traces {{in}}/good.jsonl {T} {ACC} --resume {{in}}/resume-empty",
      "resume-empty"),
    C("resume/accept-missing", f"accept --traces {{in}}/good.jsonl {T} {ACC} --resume {{in}}/nope", "nope"),
    C("resume/accept-changed", f"accept --traces {{in}}/good.jsonl {T} {ACC} -k 5 --resume {{in}}/runs/accept-good",
      "the run used"),
    C("resume/sampler-other-suite", f"{SAM} --resume {{in}}/runs/accept-good", "accept"),
    C("resume/accuracy-other-suite", "accuracy --resume {in}/runs/accept-good", "accept"),
    C("resume/run-state-list", "run --resume {in}/state-list", "run_state.json"),
    C("resume/run-state-truncated", "run --resume {in}/state-truncated", "run_state.json"),
    C("resume/run-other-suite", "run --resume {in}/runs/accept-good", "run_state.json"),
    C("resume/rollout", f"{RO} --resume {{in}}/runs/accept-good", "--resume"),
    # `run`
    C("run/engine-typo", "run --steps accept --engine vlm", "vlm"),
    C("run/steps", "run --steps acept", "acept"),
    C("run/config-types", "run --steps accept --config {in}/cfg_types.yaml", "num-spec-tokens"),
    C("run/config-steps", "run --config {in}/cfg_steps.yaml", "steps"),
    C("run/config-model", "run --steps accept --config {in}/cfg_model.yaml", "model"),
    C("run/config-engine", "run --steps accept --config {in}/cfg_engine.yaml", "engine"),
    C("run/config-section", "run --steps accept --config {in}/cfg_section.yaml", "accept"),
    C("run/config-int", "run --steps accept --config {in}/cfg_int.yaml", "max-num-seqs"),
    C("run/config-flag", "run --steps accept --config {in}/cfg_flag.yaml", "progress"),
    C("run/config-data-dir", "run --steps accept --config {in}/cfg_datadir.yaml", "data-dir"),
    C("run/config-unknown", "run --steps accept --config {in}/cfg_unknown.yaml", "acept"),
    C("run/config-yaml", "run --steps accept --config {in}/cfg_badyaml.yaml", "yaml"),
    C("run/config-missing", "run --config {in}/nope.yaml", "nope.yaml"),
    C("run/data-dir-file", "run --data-dir {in}/afile", "afile"),
    # fuzzed, empty and odd files
    C("files/accept-empty", f"accept --traces {{in}}/empty.jsonl {T} {ACC}", "empty.jsonl", lead=1),
    C("files/accept-fuzzed", f"accept --traces {{in}}/fuzzed.jsonl {T} {ACC}", "fuzzed.jsonl:2", lead=1),
    C("files/accept-wrong-types", f"accept --traces {{in}}/wrongtypes.jsonl {T} {ACC}", "'id'", lead=1),
    C("files/accept-bad-ids", f"accept --traces {{in}}/badids.jsonl {T} {ACC}", "prompt_ids", lead=1),
    C("files/accept-nan-logprobs", f"accept --traces {{in}}/nanlogprobs.jsonl {T} {ACC}", "logprobs", lead=1),
    C("files/accept-not-object", f"accept --traces {{in}}/notalist.jsonl {T} {ACC}", "object", lead=1),
    C("files/accept-dir-named-jsonl", f"accept --traces {{in}}/tracedir {T} {ACC}", "b.jsonl", lead=1),
    C("files/accept-huge-line", f"accept --traces {{in}}/huge.jsonl {T} {ACC}", "huge.jsonl", lead=1),
    C("files/accept-tokenizer-file", f"accept --traces {{in}}/good.jsonl --tokenizer {{in}}/afile {ACC}", "afile",
      lead=1),
    C("files/accept-profile-binary", f"accept --traces {{in}}/good.jsonl {T} {ACC} --engine-profile "
      "{in}/cfg_binary.yaml", "--engine-profile"),
    C("files/rollout-step-model", f"{RO} --step-model {{in}}/cfg_binary.yaml", "cfg_binary.yaml"),
    C("files/rollout-empty", f"{RO.replace('good.jsonl', 'empty.jsonl')}", "empty.jsonl"),
    C("files/drafters-data-dir-file", "drafters --data-dir {in}/afile", "afile"),
    C("files/opeq-prompts-binary", "op-equivalence --level model --model builtin:tiny-qwen3 --prompts "
      "{in}/cfg_binary.yaml --no-progress", "cfg_binary.yaml"),
    C("files/drafters-none-available", f"{DR} --drafters suffix", "none of them can run here"),
    # the command line itself
    C("cli/unknown-option", "accept --frobnicate", "--frobnicate"),
    C("cli/bad-choice", "accept --engine vlm", "vlm"),
    C("cli/bad-int", "accept --workers many", "--workers"),
    C("cli/missing-argument", "report html", "results"),
    C("cli/unknown-command", "acept", "acept"),
    # requested work that cannot start leaves no run folder behind
    C("halfmade/sampler-audit", f"{SAM} --audit no_such_module:fn", "no_such_module"),
    C("halfmade/opeq-model", "op-equivalence --level model --model ./no-such-model --no-progress", "no-such-model"),
    C("halfmade/accuracy-model", "accuracy --model ./no-such-model --no-progress", "no-such-model"),
]


def _setup(case: Case, inputs: Path) -> None:
    if case.id == "files/drafters-none-available":
        from samspec_bench.sam.drafters import arctic_available
        if arctic_available():
            pytest.skip("arctic-inference is installed here: the suffix drafter can run")
    if case.id == "files/accept-huge-line":
        with open(inputs / "huge.jsonl", "w", encoding="utf-8") as f:
            f.write('{"id": "h", "group": "g", "prompt": "p", "response": "' + "x" * (8 << 20) + '", "oops"\n')


def check_one_line_error(code, err: str, case: Case) -> str:
    assert "Traceback" not in err, err
    assert code == case.code, (code, err)
    lines = err.strip().splitlines()
    # the error is the last line; up to `lead` progress lines may come before it
    assert 1 <= len(lines) <= case.lead + 1, lines
    line = lines[-1]
    assert line.startswith("error:"), line
    assert case.needle.lower() in line.lower(), line
    return line


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_input_is_one_line_exit_2_and_leaves_nothing(case, space):
    inputs, work = space
    _setup(case, inputs)
    before = _tree(inputs)
    argv = [a.replace("{in}", str(inputs)) for a in case.argv]
    code, out, err = invoke(argv, cwd=work)
    check_one_line_error(code, err, case)
    assert not list(work.iterdir()), f"stray files in the working directory: {sorted(_tree(work))}"
    after = _tree(inputs)
    assert after == before, {"added": sorted(set(after) - set(before)), "removed": sorted(set(before) - set(after)),
                             "changed": sorted(k for k in before if k in after and before[k] != after[k])}


# --- positive cases: the right result, not only no crash ------------------------------------------

def test_undecodable_and_bad_lines_are_skipped_and_counted(space):
    inputs, work = space
    code, out, err = invoke(["accept", "--traces", inputs / "mixed.jsonl", "--tokenizer", inputs / "tok", *FAST_ACCEPT,
                             "--on-error", "skip", "--json", work / "r.json"], cwd=work)
    assert code == 0, err
    res = json.loads((work / "r.json").read_text())
    assert res["inputs"]["skipped_lines"] == 1 and "UTF-8" in res["inputs"]["skipped"][0]["reason"]
    assert res["inputs"]["responses"] == 4


def test_duplicate_ids_are_skipped_once_and_not_double_counted(space):
    inputs, work = space
    args = ["--tokenizer", inputs / "tok", *FAST_ACCEPT, "--sources", "own,group", "--json"]
    code, _, err = invoke(["accept", "--traces", inputs / "dup.jsonl", "--on-error", "skip", *args, work / "d.json"],
                          cwd=work)
    assert code == 0, err
    code, _, err = invoke(["accept", "--traces", inputs / "good.jsonl", *args, work / "g.json"], cwd=work)
    assert code == 0, err
    dup, good = (json.loads((work / n).read_text()) for n in ("d.json", "g.json"))
    assert dup["inputs"]["skipped_lines"] == 1 and "r1" in dup["inputs"]["skipped"][0]["reason"]
    for label, m in good["metrics"].items():   # the duplicate (kept out) changes nothing
        assert dup["metrics"][label]["tokens_per_step"] == m["tokens_per_step"]
        assert dup["metrics"][label]["responses"] == m["responses"] == 4


def test_report_of_good_and_bad_runs_renders_the_good_and_lists_the_bad(space):
    inputs, work = space
    runs = inputs / "runs"
    code, out, err = invoke(["report", "md", runs, "-o", work / "r.md", "--json", work / "r.json"], cwd=work)
    assert code == 0, err
    assert "Traceback" not in err
    text = (work / "r.md").read_text()
    data = json.loads((work / "r.json").read_text())
    bad = {Path(u["path"]).name: u["reason"] for u in data["unreadable"]}
    assert set(bad) == {"accept-truncated", "accept-list", "accept-empty", "accept-noschema", "accept-badmetrics",
                        "accept-binary"}
    assert [Path(r["path"]).name for s in data["suites"] for r in s["runs"]] == ["accept-good"]
    for name in bad:
        assert name in text and name in err
    assert not list(work.glob("*.tmp"))


def test_html_report_lists_unreadable_runs_and_a_torn_run_state(space):
    inputs, work = space
    code, _, err = invoke(["report", "html", inputs / "run-mixed", inputs / "runs" / "accept-list",
                           "-o", work / "r.html"], cwd=work)
    assert code == 0, err
    html = (work / "r.html").read_text()
    assert "accept-list" in html and "run_state.json" in html and "accept-good" in html


def test_run_final_report_lists_an_unreadable_step_result(space):
    from samspec_bench.suites.run.command import render_reports

    inputs, _ = space
    out = inputs / "run-mixed"
    (out / "run_state.json").write_text(json.dumps({"format": 1, "settings": {}, "steps": {}}))
    shutil.copytree(inputs / "runs" / "accept-truncated", out / "runs" / "accept" / "accept-truncated")
    html, md = render_reports(out)
    assert "accept-truncated" in md.read_text() and "accept-good" in md.read_text()


def test_run_with_every_step_failing_still_writes_its_report(space):
    inputs, work = space
    code, out, err = invoke(["run", "--steps", "accept", "--data-dir", inputs / "data", "--output", work / "o"],
                            cwd=work)
    assert code == 1, err
    assert "Traceback" not in err
    (run,) = (work / "o").iterdir()
    state = json.loads((run / "run_state.json").read_text())
    reason = state["steps"]["accept"]["reason"]
    assert state["steps"]["accept"]["status"] == "failed" and ("UTF-8" in reason or "no JSON object" in reason)
    assert (run / "report.html").is_file() and (run / "report.md").is_file()
    assert "failed" in (run / "report.md").read_text()
    assert not list((run / "runs").rglob("accept-*"))     # no half-made run folder
    assert not list(work.rglob("*.tmp"))


def test_requested_pair_that_cannot_run_is_listed_with_its_reason(space, monkeypatch):
    from samspec_bench.bench.engines import kernels

    class Picky(kernels.PAIRS["reference"]):
        name = "picky"

        def supports(self, case):
            return f"picky needs a block size that is a multiple of 64 (got {case.block_size})"

    monkeypatch.setitem(kernels.PAIRS, "picky", Picky)
    inputs, work = space
    code, out, err = invoke([*OPK.split(), "--pairs", "picky,reference", "--json", work / "r.json"], cwd=work)
    assert code == 0, err
    res = json.loads((work / "r.json").read_text())
    assert "multiple of 64" in res["skipped_pairs"]["picky"]
    assert "kernel/reference/float32" in res["metrics"]["pairs"]
    assert "picky" in out and "multiple of 64" in out


def test_an_internal_error_is_a_short_message_naming_the_traceback_file(space, monkeypatch):
    import samspec_bench.suites.report_cmd as report_cmd

    def boom(paths):
        raise RuntimeError("something inside broke")

    monkeypatch.setattr(report_cmd, "collect", boom)
    monkeypatch.setenv("SAMSPEC_CACHE", str(space[0].parent / "cache"))   # where the traceback goes
    inputs, work = space
    code, out, err = invoke(["report", "md", inputs / "runs" / "accept-good", "-o", work / "r.md"], cwd=work)
    assert code not in (0, 2) and code != "raised"
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "RuntimeError" in lines[0], lines
    log = Path(lines[0].rsplit(" ", 1)[-1].rstrip(")."))
    assert log.is_file() and "something inside broke" in log.read_text() and "Traceback" in log.read_text()
    assert not list(work.iterdir())


# --- concurrency and torn files ------------------------------------------------------------------

def _make_rundirs(root: str, barrier, n: int, q) -> None:
    barrier.wait()
    try:
        q.put([str(RunDir(root, "accept").path) for _ in range(n)])
    except Exception as e:  # noqa: BLE001 - reported to the parent
        q.put(f"{type(e).__name__}: {e}")


def test_concurrent_run_dir_creation_gives_unique_folders(tmp_path):
    ctx = mp.get_context("fork" if "fork" in mp.get_all_start_methods() else "spawn")
    procs_n, per = 4, 10
    barrier, q = ctx.Barrier(procs_n), ctx.Queue()
    procs = [ctx.Process(target=_make_rundirs, args=(str(tmp_path), barrier, per, q)) for _ in range(procs_n)]
    for p in procs:
        p.start()
    got = [q.get(timeout=120) for _ in procs]
    for p in procs:
        p.join()
    assert all(isinstance(g, list) for g in got), got
    # and threads in this process, all at once
    made, errors = [], []
    start = threading.Barrier(40)

    def one():
        start.wait()
        try:
            made.append(str(RunDir(tmp_path, "accept").path))
        except Exception as e:  # noqa: BLE001
            errors.append(repr(e))

    threads = [threading.Thread(target=one) for _ in range(40)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[:3]
    paths = [p for g in got for p in g] + made
    assert len(set(paths)) == len(paths) == procs_n * per + 40
    assert len([p for p in tmp_path.iterdir() if p.is_dir()]) == len(paths)


def test_concurrent_state_writes_never_share_a_temp_file(tmp_path):
    from samspec_bench.suites.run.state import read_state, write_state

    errors = []
    start = threading.Barrier(16)

    def one(i):
        start.wait()
        try:
            for j in range(20):
                write_state(tmp_path, {"format": 1, "settings": {}, "steps": {}, "writer": i, "n": j})
        except Exception as e:  # noqa: BLE001
            errors.append(repr(e))

    threads = [threading.Thread(target=one, args=(i,)) for i in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[:3]
    assert read_state(tmp_path)["n"] == 19
    assert [p.name for p in tmp_path.iterdir()] == ["run_state.json"]


def test_two_runs_started_together_get_their_own_folders(tmp_path):
    from samspec_bench.suites.run.state import new_run_dir

    got, start = [], threading.Barrier(20)

    def one():
        start.wait()
        got.append(new_run_dir(tmp_path))

    threads = [threading.Thread(target=one) for _ in range(20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(got)) == 20 and all(p.is_dir() for p in got)


def test_appending_after_a_torn_line_keeps_the_new_record(tmp_path):
    rd = RunDir(tmp_path, "accept")
    rd.append_sample({"id": 1})
    with open(rd.file("samples.jsonl"), "ab") as f:
        f.write('{"id": 2, "text": "caf'.encode() + "é".encode()[:1])   # torn inside a UTF-8 character
    resumed = RunDir(tmp_path, "accept", resume=rd.path)
    resumed.append_sample({"id": 3})
    assert [s["id"] for s in resumed.samples()] == [1, 3]
    with open(rd.file("samples.jsonl"), "a") as f:
        f.write("[1, 2]\n\"text\"\n")                     # JSON, but not records
    assert [s["id"] for s in resumed.samples()] == [1, 3]


# --- fuzzed lines ---------------------------------------------------------------------------------

_FIELDS = st.sampled_from(["id", "group", "prompt", "response", "prompt_ids", "response_ids", "logprobs", "system"])
_JSON = st.recursive(st.none() | st.booleans() | st.integers(-2**40, 2**40) | st.floats() | st.text(max_size=8),
                     lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_FIELDS, inner, max_size=6),
                     max_leaves=12)
_LINE = st.one_of(st.binary(max_size=60), _JSON.map(lambda v: json.dumps(v).encode()),
                  st.dictionaries(_FIELDS, _JSON, max_size=8).map(lambda v: json.dumps(v).encode()))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(lines=st.lists(_LINE.filter(lambda b: b"\n" not in b and b"\r" not in b), min_size=1, max_size=5))
def test_fuzzed_trace_lines_are_records_or_named_bad_lines(tmp_path, lines):
    from samspec_bench.data import read_traces
    from samspec_bench.errors import UserError

    path = tmp_path / "fuzz.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    try:
        traces = read_traces(path, on_error="skip")
    except UserError as e:
        assert "no usable traces" in str(e) and "\n" not in str(e)
        return
    seen = {r.line for r in traces.records} | {line for _, line, _ in traces.skipped}
    non_blank = {i for i, b in enumerate(lines, start=1) if b.strip()}
    assert seen <= non_blank and all(why for _, _, why in traces.skipped)
    assert len({r.id for r in traces.records}) == len(traces.records)   # never one id twice
    try:
        read_traces(path)
    except UserError as e:
        assert str(e).startswith(f"{path}:") and "\n" not in str(e)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(tail=st.binary(max_size=40))
def test_samples_survive_any_torn_tail(tmp_path, tail):
    rd = RunDir(tmp_path, "accept")
    rd.append_sample({"id": 1})
    with open(rd.file("samples.jsonl"), "ab") as f:
        f.write(tail)
    rd2 = RunDir(tmp_path, "accept", resume=rd.path)
    rd2.append_sample({"id": 2})
    got = [s.get("id") for s in rd2.samples()]
    assert got[0] == 1 and got[-1] == 2
