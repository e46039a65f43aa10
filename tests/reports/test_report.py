"""The comparison report: summaries and gates, side-by-side differences, and the HTML / Markdown
renderers (self-contained, deterministic, every figure inlined)."""

from __future__ import annotations

import base64
import json
import re
from pathlib import Path

import pytest

from samspec_bench.cli import main
from samspec_bench.errors import UserError
from samspec_bench.reports.collect import collect
from samspec_bench.reports.run_comparison import compare_runs
from samspec_bench.reports.fmt import fmt_headline
from samspec_bench.reports.headlines import summarize
from samspec_bench.reports.html import render_html
from samspec_bench.reports.markdown import render_markdown
from samspec_bench.reports.metadata import data_files
from samspec_bench.reports.model import status
from samspec_bench.suites import accept, drafters

from report_runs import make_run


@pytest.fixture()
def two_runs(tmp_path) -> list[Path]:
    """Two runs of one (unknown to the registry) suite: a comparison with known differences."""
    a = make_run(tmp_path / "A", "toy", {"speed": 2.0, "nested": {"latency_ms": 10.0}, "label": "x",
                                         "accuracy_diff": {"value": 0.01, "ci": [-0.02, 0.04]}, "checks_pass": True},
                 config={"k": 3, "model": "m"}, tables={"rows": [{"n": 1, "v": 0.5}, {"n": 2, "v": 0.25}]},
                 figures=("curve.png", "box.svg"))
    b = make_run(tmp_path / "B", "toy", {"speed": 3.0, "nested": {"latency_ms": 5.0}, "label": "y",
                                         "accuracy_diff": {"value": -0.01, "ci": [-0.05, 0.03]}, "checks_pass": False},
                 config={"k": 5, "model": "m"}, tables={"rows": [{"n": 1, "v": 0.75}]},
                 figures=("curve.png",))
    return [a, b]


# --- summaries ----------------------------------------------------------------------------------------

def test_generic_summary_finds_headlines_intervals_and_gates(two_runs):
    result = json.loads((two_runs[0] / "result.json").read_text())
    heads, gates = summarize(result)
    by = {h["name"]: h for h in heads}
    assert by["speed"]["value"] == 2.0
    assert by["nested.latency_ms"]["value"] == 10.0
    assert by["accuracy_diff"]["value"] == 0.01 and by["accuracy_diff"]["ci"] == [-0.02, 0.04]
    assert [(g["name"], g["passed"]) for g in gates] == [("checks_pass", True)]
    assert status(gates) == "pass"
    assert status(summarize(json.loads((two_runs[1] / "result.json").read_text()))[1]) == "fail"


def test_suite_gates_in_result_json_are_preferred(tmp_path):
    d = make_run(tmp_path, "sampler", {"exact_builtins_pass": True, "negative_controls_flagged": True,
                                       "verdicts": {"samspec": "EXACT"}},
                 extra={"gates": [{"name": "own gate", "passed": False, "value": 3, "threshold": 2}]})
    heads, gates = summarize(json.loads((d / "result.json").read_text()))
    assert [g["name"] for g in gates] == ["own gate"]
    assert gates[0]["passed"] is False and status(gates) == "fail"
    assert any(h["name"] == "samspec: verdict" and h["value"] == "EXACT" for h in heads)


def test_sampler_and_op_equivalence_gates(tmp_path):
    s = make_run(tmp_path, "sampler", {"exact_builtins_pass": True, "negative_controls_flagged": False,
                                       "speed_outputs_equal": True,
                                       "verdicts": {"samspec": "EXACT", "block-verify-demo": "EXACT"}})
    _, gates = summarize(json.loads((s / "result.json").read_text()))
    assert {g["name"]: g["passed"] for g in gates} == {
        "built-in samplers exact": True, "negative control flagged LOSSY (the battery has power)": False,
        "vectorised outputs equal the loop reference": True}
    pairs = {"model/reference/float32": {"logprob_diff_max": 2e-5, "argmax_flip_rate": 0.0},
             "model/reference-batch-invariant/float32": {"logprob_diff_max": 0.0, "argmax_flip_rate": 0.0},
             "kernel/reference-fixed-order/float32": {"logprob_diff_max": 1e-7, "argmax_flip_rate": 0.0}}
    o = make_run(tmp_path, "op-equivalence",
                 {"pairs": pairs, "gate": {"metric": "logprob_diff_max", "tolerance": 1e-5, "passed": False,
                                           "failed": [{"row": "model/reference/float32", "value": 2e-5}]}},
                 tables={"greedy": [{"identical": True}, {"identical": False}]})
    heads, gates = summarize(json.loads((o / "result.json").read_text()))
    g = {x["name"]: x for x in gates}
    assert g["logprob_diff_max <= tolerance on every row"]["passed"] is False
    assert g["logprob_diff_max <= tolerance on every row"]["value"] == 2e-5
    assert g["control model/reference-batch-invariant/float32 is bit-exact"]["passed"] is True
    assert g["control kernel/reference-fixed-order/float32 is bit-exact"]["passed"] is False
    h = {x["name"]: x for x in heads}
    # the worst non-control row, not the (broken) control
    assert h["max logprob difference (decode vs verify)"]["value"] == 2e-5
    assert h["greedy outputs identical with/without SAM"]["value"] == "1/2"


def test_drafter_bars_pass_and_fail_on_their_thresholds(tmp_path):
    d = make_run(tmp_path, "drafters", {"append_speedup_vs_sam_public": 99.0, "append_speedup_vs_sam_python": 20.0,
                                        "sam_ns_per_draft": 999.0, "sam_bytes_per_token": 64.5})
    _, gates = summarize(json.loads((d / "result.json").read_text()))
    g = {x["name"]: x["passed"] for x in gates}
    assert g["sam appends >= 100x faster than the public pure-Python SAM (bulk)"] is False
    assert g["sam appends faster than the lean pure-Python reference"] is True
    assert g["sam drafts k tokens in under 1 µs"] is True
    assert g["sam holds at most 64 bytes per indexed token"] is False
    # a small replay (the built-in `run` workload) is shown, not judged
    small = make_run(tmp_path / "small", "drafters", {"append_speedup_vs_sam_public": 52.0},
                     tables={"replay": [{"drafter": "sam", "tokens": 4399}]})
    _, gates = summarize(json.loads((small / "result.json").read_text()))
    (bar,) = [x for x in gates if x["name"].startswith("sam appends >= 100x")]
    assert bar["passed"] is None and "4,399 tokens" in bar["note"]


def test_a_summary_that_cannot_read_its_result_falls_back(tmp_path):
    d = make_run(tmp_path, "drafters", {"step_cost_growth_longest_vs_shortest_context": "not a dict"})
    heads, _ = summarize(json.loads((d / "result.json").read_text()))
    assert heads[0]["name"] == "summary" and "could not read" in heads[0]["note"]


# --- comparison -----------------------------------------------------------------------------------------

def test_comparison_differences(two_runs):
    report = collect(two_runs)
    (group,) = report.groups
    assert [r.label for r in group.runs] == ["A", "B"]
    c = group.comparison
    m = {r["name"]: r for r in c["metrics"]}
    assert m["speed"]["values"] == [2.0, 3.0]
    assert m["speed"]["diffs"] == [None, 1.0] and m["speed"]["rel"] == [None, 0.5]
    assert m["nested.latency_ms"]["diffs"][1] == -5.0 and m["nested.latency_ms"]["rel"][1] == -0.5
    assert m["accuracy_diff.value"]["diffs"][1] == pytest.approx(-0.02)
    h = {r["name"]: r for r in c["headlines"]}
    assert h["accuracy_diff"]["ci"] == [[-0.02, 0.04], [-0.05, 0.03]]
    assert h["label"]["changed"] and h["label"]["diffs"] == [None, None]
    assert [(r["name"], r["values"]) for r in c["config"]] == [("k", [3, 5])]
    assert {r["name"]: r["values"] for r in c["gates"]} == {"checks_pass": [True, False]}
    html = render_html(report)
    assert "+1 (+50.0%)" in html and "-5 (-50.0%)" in html
    assert "Comparison of 2 runs" in html


def test_comparison_of_three_runs_uses_the_first_as_baseline():
    runs = [{"label": lab, "result": {"metrics": {"x": x}, "config": {}}, "headlines": [], "gates": []}
            for lab, x in (("A", 4.0), ("B", 2.0), ("C", 0.0))]
    c = compare_runs(runs)
    assert c["metrics"][0]["diffs"] == [None, -2.0, -4.0]
    assert c["metrics"][0]["rel"] == [None, -0.5, -1.0]


# --- HTML ------------------------------------------------------------------------------------------------

def test_html_is_deterministic_and_self_contained(two_runs):
    a = render_html(collect(two_runs))
    b = render_html(collect(two_runs))
    assert a == b
    for bad in ("http://", "https://", 'src="//', "href=\"//", "<link", "<script src", "url("):
        assert bad not in a, bad
    assert a.startswith("<!DOCTYPE html>")
    # the only script is the JSON data block
    assert re.findall(r"<script[^>]*>", a) == ['<script type="application/json" id="samspec-data">']


def test_every_figure_is_inlined(two_runs):
    html = render_html(collect(two_runs))
    n = 0
    for d in two_runs:
        for name in json.loads((d / "result.json").read_text())["figures"]:
            data = base64.b64encode((d / name).read_bytes()).decode()
            assert data in html, f"{d.name}/{name} not inlined"
            n += 1
    assert n == 3
    assert html.count('data-figure="') == 3


def test_svg_preferred_over_png_of_the_same_figure(tmp_path):
    d = make_run(tmp_path, "toy", {"x": 1.0}, figures=("fig.png", "fig.svg"))
    (run,) = collect([d]).runs
    assert [f.name for f in run.figures] == ["fig.svg"]


def test_missing_figure_is_reported_not_fatal(tmp_path):
    d = make_run(tmp_path, "toy", {"x": 1.0}, figures=("gone.png",))
    (d / "gone.png").unlink()
    html = render_html(collect([d]))
    assert "gone.png is listed in result.json but missing" in html


def test_embedded_data_round_trips(two_runs):
    html = render_html(collect(two_runs))
    m = re.search(r'<script type="application/json" id="samspec-data">(.*?)</script>', html, re.S)
    data = json.loads(m.group(1))
    (suite,) = data["suites"]
    assert suite["suite"] == "toy" and [r["label"] for r in suite["runs"]] == ["A", "B"]
    assert suite["runs"][1]["result"]["metrics"]["speed"] == 3.0
    speed = next(r for r in suite["comparison"]["metrics"] if r["name"] == "speed")
    assert speed["diffs"] == [None, 1.0]


def test_script_breaking_text_is_escaped(tmp_path):
    d = make_run(tmp_path, "toy", {"x": 1.0, "note": "</script><script>alert(1)</script>", "inf": float("inf")})
    html = render_html(collect([d]))
    assert html.count("<script") == 1 and "alert(1)</script>" not in html
    m = re.search(r'id="samspec-data">(.*?)</script>', html, re.S)
    json.loads(m.group(1))  # still valid JSON


def test_inputs_folder_and_run_dirs(two_runs, tmp_path):
    # a folder holding run directories is expanded; the same run given twice counts once
    report = collect([tmp_path, two_runs[0]])
    assert len(report.runs) == 2
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(UserError, match="no result.json"):
        collect([empty])


def test_metadata_lists_environment_and_data_hashes(tmp_path):
    d = make_run(tmp_path, "accept", {}, config={"traces": ["t.jsonl"]},
                 extra={"inputs": {"traces": [{"file": "t.jsonl", "sha256": "ab" * 32}]}})
    (run,) = collect([d]).runs
    assert data_files(run.result) == [("t.jsonl", "ab" * 32)]
    html = render_html(collect([d]))
    assert "ab" * 32 in html and "git revision" in html and "samspec-bench" in html


@pytest.mark.parametrize("result, why", [
    ({"suite": "frobnicate", "schema_version": 1, "metrics": {}},
     r"suite 'frobnicate' is not one samspec-bench writes \(accept, .*\) and it has no created, config, environment"),
    ({"suite": "curves", "schema_version": 1}, r"no 'metrics': the file is damaged"),
])
def test_a_foreign_or_metricless_result_is_listed_unreadable_or_alone_exits_2(two_runs, tmp_path, capsys, result,
                                                                               why):
    """Not rendered with blanks (None) everywhere, nor summarized as a KeyError: with good runs
    it is listed under "Runs that could not be read"; alone it is a one-line error, exit 2."""
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "result.json").write_text(json.dumps(result))
    report = collect([two_runs[0], bad])
    assert [r.path for r in report.runs] == [two_runs[0]]
    (u,) = report.unreadable
    assert u["path"] == str(bad) and re.search(why, u["reason"])
    md = tmp_path / "r.md"
    main(["report", "md", str(two_runs[0]), str(bad), "-o", str(md)])
    text = md.read_text()
    assert "## Runs that could not be read" in text and "None" not in text and "KeyError" not in text
    capsys.readouterr()
    with pytest.raises(SystemExit) as e:
        main(["report", "html", str(bad), "-o", str(tmp_path / "r.html")])
    err = capsys.readouterr().err.strip()
    assert e.value.code == 2 and "\n" not in err and re.search(why, err)


def test_a_suite_without_a_summary_but_with_the_full_record_is_still_reported(two_runs):
    """The generic summary of a suite no summary knows (a plugin's) stays: it writes the record."""
    (run,) = collect([two_runs[0]]).runs
    assert run.suite == "toy" and any(h["name"] == "speed" for h in run.headlines)


def test_a_torn_run_state_gives_the_advice_run_resume_gives(tmp_path, two_runs):
    """`run --resume` refuses a damaged run_state.json (its settings are in no other file): the
    report must not tell the user to resume it."""
    from samspec_bench.suites.run.state import read_state

    out = tmp_path / "run-x"
    out.mkdir()
    (out / "run_state.json").write_text('{"format": 1, "sett')
    with pytest.raises(UserError) as e:
        read_state(out)
    assert "start a new run" in str(e.value) and "--resume to" not in str(e.value)
    report = collect([out, two_runs[0]])
    (u,) = report.unreadable
    assert "start a new run" in u["reason"] and "re-run with --resume" not in u["reason"]
    assert "cannot continue it" in u["reason"]


# --- Markdown --------------------------------------------------------------------------------------------

def test_markdown_deterministic_with_relative_figure_links(two_runs, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    a = render_markdown(collect(two_runs), out)
    assert a == render_markdown(collect(two_runs), out)
    links = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", a)
    assert len(links) == 3
    for link in links:
        assert not link.startswith("/") and (out / link).is_file()
    assert "| speed | 2 | 3 | +1 (+50.0%) |" in a


# --- the command --------------------------------------------------------------------------------------------

def test_report_command_html_and_md(two_runs, tmp_path, capsys):
    out = tmp_path / "r.html"
    main(["report", "html", *map(str, two_runs), "-o", str(out)])
    assert out.is_file() and "samspec-bench report" in out.read_text()
    assert f"report: {out}" in capsys.readouterr().out
    md = tmp_path / "r.md"
    main(["report", "md", *map(str, two_runs), "-o", str(md)])
    assert md.read_text().startswith("# samspec-bench report")
    # run B has a failed gate: --fail-on-gate turns that into exit code 1 (the report is still written)
    out.unlink()
    with pytest.raises(SystemExit) as e:
        main(["report", "html", *map(str, two_runs), "-o", str(out), "--fail-on-gate"])
    assert e.value.code == 1 and out.is_file()
    main(["report", "html", str(two_runs[0]), "-o", str(out), "--fail-on-gate"])


def test_report_command_bad_input_is_one_line(tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        main(["report", "html", str(tmp_path / "missing"), "-o", str(tmp_path / "r.html")])
    assert e.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error:") and "\n" not in err and "missing" in err


# --- real suites (tiny runs), when the shared data is present -----------------------------------------------

@pytest.fixture(scope="module")
def real_runs(tmp_path_factory, request):
    shared = request.getfixturevalue("shared_data")
    root = tmp_path_factory.mktemp("real")
    # the first 3 groups (8 responses each) of a real trace: tokenizing the whole file is slow
    lines = (shared / "traces" / "qwen25math_math_100x8.jsonl").read_text(encoding="utf-8").splitlines()[:24]
    trace = str(root / "qwen25math_math_100x8.jsonl")
    Path(trace).write_text("\n".join(lines) + "\n", encoding="utf-8")
    tok = str(shared / "tokenizers" / "qwen3")
    runs = []
    for k in (3, 5):
        cfg = accept.AcceptConfig(traces=[trace], tokenizer=tok, drafters=["sam", "ngram"], num_spec_tokens=[k],
                                  limit_groups=2, workers=1)
        runs.append(accept.run(cfg, output=root, progress=False)[1])
    dcfg = drafters.DraftersConfig(traces=[trace], tokenizer=tok, drafters=["sam", "ngram"], max_tokens=3000,
                                   sweep=[256, 4096], sweep_steps=20, repeats=1)
    runs.append(drafters.run(dcfg, root, progress=False)[1])
    return runs


def test_real_accept_runs_compare_across_k(real_runs):
    report = collect(real_runs)
    groups = {g.suite: g for g in report.groups}
    acc = groups["accept"]
    assert len(acc.runs) == 2
    names = [h["name"] for h in acc.runs[0].headlines]
    assert "sam: tokens_per_step" in names  # k is left out of the name: the k=3 and k=5 runs line up
    row = next(r for r in acc.comparison["headlines"] if r["name"] == "sam: tokens_per_step")
    # each value is that run's own tokens / steps, and the difference is k=5 minus k=3
    own = [next(rec["counts"]["tokens"] / rec["counts"]["steps"] for rec in r.result["metrics"].values()
                if rec.get("drafter") == "sam") for r in acc.runs]
    assert row["values"] == pytest.approx(own) and row["diffs"][1] == pytest.approx(own[1] - own[0])
    assert any(r["name"] == "num_spec_tokens" and r["values"] == [[3], [5]] for r in acc.comparison["config"])
    html = render_html(report)
    for run in report.runs:
        for f in run.figures:
            assert f.data_uri() in html
    assert "qwen25math_math_100x8.jsonl" in html  # the data file and its hash in the metadata
    assert html == render_html(collect(real_runs))


def test_real_accept_report_shows_the_cost_side_and_the_pareto_figure(real_runs):
    run = next(r for r in collect(real_runs).runs if r.suite == "accept")
    heads = {h["name"]: h["value"] for h in run.headlines}
    m = run.result["metrics"]
    for lab, rec in m.items():
        c = rec["counts"]
        assert rec["drafted_per_step"] == c["drafted"] / c["steps"]              # from the run's own counts
        assert rec["verify_tokens_per_token"] == (c["steps"] + c["drafted"]) / c["tokens"]
    sam = next(rec for rec in m.values() if rec.get("drafter") == "sam")
    assert heads["sam: drafted_per_step"] == sam["drafted_per_step"]
    assert heads["sam: verify_tokens_per_token"] == sam["verify_tokens_per_token"]
    assert any(f.name.startswith("tokens_vs_drafted") for f in run.figures)
    html = render_html(collect(real_runs))
    assert "drafted_per_step" in html and "verify_tokens_per_token" in html


def test_real_drafters_summary(real_runs):
    (run,) = [r for r in collect(real_runs).runs if r.suite == "drafters"]
    tables = run.result["tables"]
    lib = run.result["metrics"]["sam_library_drafter"]
    heads = {h["name"]: h["value"] for h in run.headlines}
    # the headline is the library drafter's row of the replay table
    assert heads["sam ns/token (append, bulk)"] == next(r["ns_per_token"] for r in tables["replay"] if r["drafter"] == lib)
    # the sweep spans 256..4096 tokens (>= 8x), so the flatness gate is judged: its value is sam's
    # per-step cost at 4096 over that at 256 from the sweep table, passed when <= 2
    step = {r["context_tokens"]: r["ns_per_step"] for r in tables["context_sweep"] if r["drafter"] == "sam"}
    (flat,) = [g for g in run.gates if g["name"].startswith("sam per-step cost flat")]
    assert flat["value"] == pytest.approx(step[4096] / step[256]) and flat["passed"] == (step[4096] / step[256] <= 2)


def test_accuracy_section_counts_cut_and_failed_responses_per_arm(tmp_path):
    """Responses cut at --max-gen-toks are shown per arm (zeros too); failed samples when any."""
    acc = make_run(tmp_path, "accuracy", {"gsm8k": {
        "diff": 0.0, "ci95": [0.0, 0.0], "p_value": 1.0, "n": 2, "truncated": {"off": 2, "on": 0},
        "errors": {"off": 0, "on": 1}, "responses": {"off": 2, "on": 3}}}, config={"max_gen_toks": 16})
    (run,) = collect([acc]).runs
    h = {x["name"]: x for x in run.headlines}
    cut = "gsm8k: responses cut at the token limit (16 tokens)"
    assert (h[f"{cut} without SAM"]["value"], h[f"{cut} with SAM"]["value"]) == (2, 0)
    assert h[f"{cut} without SAM"]["note"] == "of 2 responses"
    failed = "gsm8k: failed samples (left out of the pairing)"
    assert (h[f"{failed} without SAM"]["value"], h[f"{failed} with SAM"]["value"]) == (0, 1)
    md = render_markdown(collect([acc]), tmp_path)
    assert f"{cut} with SAM" in md and f"{failed} with SAM" in md
    none_failed = make_run(tmp_path, "accuracy", {"gsm8k": {"diff": 0.0, "truncated": {"off": 0, "on": 0},
                                                            "errors": {"off": 0, "on": 0}}})
    names = [x["name"] for x in summarize(json.loads((none_failed / "result.json").read_text()))[0]]
    assert sum("cut at the token limit" in n for n in names) == 2 and not any("failed samples" in n for n in names)


def test_accuracy_and_rollout_summaries(tmp_path):
    acc = make_run(tmp_path, "accuracy", {"gsm8k": {
        "diff": -0.1, "ci95": [-0.2, -0.02], "p_value": 0.01, "alpha": 0.05, "n": 200, "mdd": 0.05,
        "pass@1_off": 0.6, "pass@1_on": 0.5, "metric": "exact_match", "filter": "strict-match",
        "test": {"test": "mcnemar_exact"}, "agreement": {"identical_fraction": 0.8},
        "acceptance": {"tokens_per_step": 1.4}}})
    heads, gates = summarize(json.loads((acc / "result.json").read_text()))
    h = {x["name"]: x for x in heads}
    assert h["gsm8k: accuracy difference with SAM (on - off)"]["ci"] == [-0.2, -0.02]
    assert fmt_headline(h["gsm8k: accuracy difference with SAM (on - off)"]) == "-0.1 [-0.2, -0.02]"
    assert [(g["name"], g["passed"]) for g in gates] == [("gsm8k: no significant accuracy drop with SAM", False)]
    ok = make_run(tmp_path, "accuracy", {"gsm8k": {"diff": -0.01, "ci95": [-0.05, 0.03], "p_value": 0.6}})
    assert summarize(json.loads((ok / "result.json").read_text()))[1][0]["passed"] is True
    ro = make_run(tmp_path, "rollout", {"best_setting": "always k=3", "arms": {
        "off": {"total_s": 10.0},
        "always k=3": {"speedup_overall": 1.25, "speedup_tail": 1.5, "time_saved_fraction": 0.2,
                       "baseline_phases": {"tail_s": 4.0}}}})
    heads, gates = summarize(json.loads((ro / "result.json").read_text()))
    h = {x["name"]: x["value"] for x in heads}
    assert h["always k=3: speedup_makespan (rollout time off / on)"] == 1.25
    assert h["always k=3: speedup in the long tail"] == 1.5 and gates == []


def test_every_figure_caption_says_measured_modelled_or_counted_and_where(tmp_path):
    """A figure's caption (HTML and Markdown) says what it stands for: measured on which device,
    modelled by which step model, step counts, or that the run used no device of this machine."""
    from report_runs import rollout

    def with_figure(d: Path, device: dict | None) -> Path:
        (d / "fig.svg").write_text('<svg xmlns="http://www.w3.org/2000/svg" width="4" height="4"/>', encoding="utf-8")
        r = json.loads((d / "result.json").read_text())
        r["figures"] = ["fig.svg"]
        r["environment"]["device"] = device
        (d / "result.json").write_text(json.dumps(r))
        return d

    sampler = with_figure(make_run(tmp_path / "s", "sampler", {"verdicts": {}}),
                          {"device": "cuda:0", "name": "NVIDIA H200", "type": "cuda"})
    replay = {"device": "cpu", "used": False, "why": "the replay engine runs no model"}
    steps = with_figure(rollout(tmp_path / "c", constant=True), replay)
    priced = with_figure(rollout(tmp_path / "p", extra_metrics={"priced_by": {"kind": "roofline", "hardware": "H100 SXM",
                                                                              "spec": "roofline:hardware=h100"}}), replay)
    report = collect([sampler, steps, priced])
    html, md = render_html(report), render_markdown(report)
    for text in ("sampler A: fig.svg (measured on cuda:0 (NVIDIA H200))",
                 "rollout A: fig.svg (simulated: decode-step counts, not time (no step model))",
                 "rollout B: fig.svg (modelled by the roofline step model: H100 SXM)"):
        assert text in html and f"_{text}_" in md, text
