"""The report's first screen: the three answers (lossless? how much accepted? how much rollout
time saved?), each with its numbers taken from the result files and its provenance; suites that
did not run named as NOT checked (with run_state.json's reason); step counts never shown as time;
the Markdown saying the same as the HTML."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from samspec_bench.reports.answers import DEFAULT_ACCEPT, NO, PARTIAL, UNKNOWN, YES, answer_sets, pricing
from samspec_bench.reports.collect import collect
from samspec_bench.reports.html import render_html
from samspec_bench.reports.markdown import render_markdown

from report_runs import (ACCEPT, OPEQ, accept, accept_row, accuracy, answers_html, answers_of, opeq, rollout, run,
                         sampler)

# --- the three answers with their numbers -------------------------------------------------------------------

@pytest.fixture()
def full(tmp_path) -> list[Path]:
    return [opeq(tmp_path), sampler(tmp_path), accuracy(tmp_path), accept(tmp_path), rollout(tmp_path)]


def test_answers_come_first_and_carry_the_numbers_of_the_result_files(full):
    html = render_html(collect(full))
    assert html.index('id="answers"') < html.index('id="summary"') < html.index('id="suite-accept"')
    text = answers_html(html)
    # kernels: worst |Δ logprob| of the non-control rows, the exactly-equal share pooled over positions
    assert "7.5e-06" in text and f"{100 * (0.6 * 300 + 0.2 * 100) / 400:.1f} % of 400 logprobs" in text
    assert "greedy outputs identical with/without SAM 2/2" in text
    # sampler: verdicts, vocabularies and trials; the skipped one named with its reason
    assert "samspec EXACT (98 tests)" in text and "6–151,936" in text and "90–300 trials" in text
    assert "vllm (vllm is not installed)" in text and "block-verify-demo LOSSY" in text
    # accuracy: pass@1 off vs on, difference and interval in points
    assert "pass@1 62.0 % off vs 60.0 % on, difference -2.0 points [95 % CI -7.0, +2.0]" in text
    # acceptance: default and best SAM settings, tokens and drafted tokens per step
    assert f"{9000 / 6000:.2f} tokens per target step with the default" in text
    assert f"{9000 / 4000:.2f} at best (sam k=5, own context + GRPO siblings; {15000 / 4000:.2f} drafted" in text
    assert f"{12000 / 6000:.2f} drafted per step" in text and "qwen25math_math_100x8.jsonl" in text
    # rollout: the best setting, overall and tail, modelled, by which step model
    assert f"threshold<=4 k=3 saves {100 * (1 - 800 / 900):.1f} % of rollout time ({900 / 800:.2f}x)" in text
    assert f"{200 / 100:.2f}x in the long tail" in text and "modelled" in text
    assert "rollout profile: builtin:smollm2-135m" in text and "/p/profile.json" in text
    assert f"{900 / 1200:.2f}x" in text and "more rollout time" in text    # the always-on arm is slower


def test_lossless_verdicts(full, tmp_path):
    a = answers_of(full)
    assert a["lossless"].status == PARTIAL          # kernels equal only up to rounding, no tolerance given
    assert [c.status for c in a["lossless"].checks] == [PARTIAL, YES, YES]
    gate_ok = {"metric": "logprob_diff_max", "tolerance": 1e-4, "passed": True, "failed": []}
    a = answers_of([opeq(tmp_path / "g", gate_ok), *full[1:]])
    assert a["lossless"].status == YES and a["lossless"].badge == "yes"
    gate_bad = {"metric": "logprob_diff_max", "tolerance": 1e-6, "passed": False,
                "failed": [{"row": "model/reference/float32", "value": 7.5e-06}]}
    a = answers_of([opeq(tmp_path / "b", gate_bad), *full[1:]])
    assert a["lossless"].status == NO and "model/reference/float32" in a["lossless"].checks[0].text
    a = answers_of([opeq(tmp_path / "f", greedy=[{"identical": True}, {"identical": False}]), *full[1:]])
    assert a["lossless"].checks[0].status == NO
    # NaN / inf differences: the max leaves them out, the answer must not (even with a passed gate)
    nan = {**OPEQ, "model/reference/float32": {**OPEQ["model/reference/float32"], "logprob_diff_max": None,
                                                "logprob_diff_non_finite": 3}}
    a = answers_of([opeq(tmp_path / "n", gate_ok, pairs=nan), *full[1:]])
    assert a["lossless"].checks[0].status == NO and "3 logprob difference(s) are not finite" in a["lossless"].checks[0].text
    a = answers_of([full[0], sampler(tmp_path / "s", verdict="LOSSY"), *full[2:]])
    assert a["lossless"].status == NO and a["lossless"].checks[1].badge == "lossy"
    a = answers_of([full[0], sampler(tmp_path / "c", control="EXACT"), *full[2:]])   # the battery had no power
    assert a["lossless"].checks[1].status == UNKNOWN and "NOT flagged" in a["lossless"].checks[1].text
    a = answers_of([*full[:2], accuracy(tmp_path / "d", off=0.7, on=0.5, p=0.001)])
    assert a["lossless"].status == NO and a["lossless"].checks[2].status == NO
    a = answers_of([*full[:2], accuracy(tmp_path / "m", p=0.9, mdd=1.3, n=3)])
    assert a["lossless"].checks[2].status == UNKNOWN
    assert "inconclusive" in a["lossless"].text and "NOT checked" not in a["lossless"].text
    # a check too coarse to see a drop of a few points is not a plain "no drop found"
    a = answers_of([opeq(tmp_path / "g2", gate_ok), full[1], accuracy(tmp_path / "c2", p=0.9, mdd=0.3, n=20)])
    assert a["lossless"].status == PARTIAL and a["lossless"].badge == "partly checked"
    assert a["lossless"].checks[2].badge == "too few problems" and a["lossless"].checks[2].status == UNKNOWN
    assert "smallest detectable is 30.0 points" in a["lossless"].checks[2].text
    assert "accuracy inconclusive" in a["lossless"].text


# --- not checked ------------------------------------------------------------------------------------------

def test_a_missing_suite_is_named_not_checked(full):
    a = answers_of([p for p in full if "accuracy" not in p.name and "accept" not in p.name])
    acc = a["lossless"].checks[2]
    assert acc.name == "accuracy" and not acc.ran and acc.badge == "not checked"
    assert "NOT checked: no accuracy run" in acc.text and "samspec-bench accuracy" in acc.text
    assert "accuracy NOT checked" in a["lossless"].text and a["lossless"].status == PARTIAL
    assert a["accept"].status == UNKNOWN and "no accept run" in a["accept"].text


def test_not_checked_reasons_come_from_run_state(tmp_path):
    root = tmp_path / "run-1"
    opeq(root / "runs" / "op-equivalence")
    state = {"format": 1, "settings": {"model": "m"}, "steps": {
        "accuracy": {"status": "skipped", "reason": "needs the benchmark sets: pass --data-dir"},
        "sampler": {"status": "failed", "reason": "RuntimeError: out of memory"},
        "accept": {"status": "done", "run_dir": "runs/accept/x"}}}
    (root / "run_state.json").write_text(json.dumps(state), encoding="utf-8")
    report = collect([root])
    a = {x.key: x for x in answer_sets(report)[0].answers}
    checks = {c.name: c for c in a["lossless"].checks}
    assert checks["accuracy"].text == "NOT checked: the accuracy step was skipped (needs the benchmark sets: pass --data-dir)."
    assert checks["sampler"].badge == "failed" and "RuntimeError: out of memory" in checks["sampler"].text
    assert "the rollout step" not in a["rollout"].text and "not among its --steps" in a["rollout"].text
    md = render_markdown(report)
    assert "needs the benchmark sets: pass --data-dir" in md.split("## Summary")[0]


# --- units: step counts are never time ----------------------------------------------------------------------

SECONDS = re.compile(r"\d(\.\d+)?\s?s\b|second|rollout time \(|of rollout time")


@pytest.mark.parametrize("shape", ["legacy-constant", "units-steps"])
def test_step_count_rollouts_never_show_seconds(tmp_path, shape):
    if shape == "legacy-constant":   # an older result: a constant 1-second step model, no "units"
        path = rollout(tmp_path, constant=True)
    else:
        path = rollout(tmp_path, {"units": "steps", "measured": False,
                                  "priced_by": {"kind": "constant-steps", "source": None}})
    assert pricing(json.loads((path / "result.json").read_text()))["units"] == "steps"
    a = answers_of([path])["rollout"]
    assert a.badge == "not priced: step counts" and a.status == UNKNOWN
    words = " ".join([a.text, a.badge, a.source, *(c.text + c.badge for c in a.checks)])
    assert not SECONDS.search(words), words
    assert f"{900 / 820:.2f}x" in words and "900 → 820 steps" in words   # the step counts themselves
    report = collect([path])
    assert not SECONDS.search(answers_html(render_html(report)))
    md_answers = render_markdown(report).split("## Summary")[0]
    assert "not priced: step counts" in md_answers and not SECONDS.search(md_answers)


def test_units_priced_by_and_measured_are_read(tmp_path):
    roof = rollout(tmp_path / "r", {"units": "s", "measured": False, "priced_by": {
        "kind": "roofline", "source": "roofline:hardware=H100,model=Qwen/Qwen3-32B,tp=8",
        "hardware": {"name": "H100"}, "tp": 8, "model": {"name": "Qwen/Qwen3-32B"}}},
        config={"preset": "seed-qwen3-32b", "dp": 4})
    a = answers_of([roof])["rollout"]
    assert "modelled by the roofline step model: H100, TP 8, Qwen/Qwen3-32B" in a.text
    assert a.badge.endswith("(modelled)") and "preset seed-qwen3-32b" in a.source and "DP 4" in a.source
    meas = rollout(tmp_path / "m", {"units": "s", "measured": True}, config={"engine": "reference", "model": "tiny"})
    a = answers_of([meas])["rollout"]
    assert a.badge.endswith("(measured)") and "measured on the reference engine, model tiny" in a.text
    # extrapolated beyond the profile: flagged, and not a plain yes
    ex = rollout(tmp_path / "x")
    res = json.loads((ex / "result.json").read_text())
    res["metrics"]["arms"]["threshold<=4 k=3"]["step_model_extrapolation"] = {"decode_tokens": [64, 8]}
    (ex / "result.json").write_text(json.dumps(res))
    a = answers_of([ex])["rollout"]
    assert a.status == PARTIAL and "EXTRAPOLATED beyond the profiled range (decode_tokens)" in a.text
    # every SAM setting slower: the answer is no
    slow = rollout(tmp_path / "s", {"best_setting": "always k=3"})
    res = json.loads((slow / "result.json").read_text())
    del res["metrics"]["arms"]["threshold<=4 k=3"]
    (slow / "result.json").write_text(json.dumps(res))
    a = answers_of([slow])["rollout"]
    assert a.status == NO and a.text.startswith("No: every SAM setting is slower")


def test_no_tail_speedup_is_claimed_when_the_off_arm_has_no_tail(tmp_path):
    """A workload whose baseline never drains to the threshold (16 responses in one batch): no
    tail ratio (0 / x would read as '0.00x in the long tail'), and the answer says there is none."""
    off = {"total_s": 27.0, "tail_s": 0.0, "steps": 130, "tail_steps": 0}
    base = {k: off[k] for k in ("total_s", "tail_s", "tail_steps")}
    always = {"total_s": 24.0, "tail_s": 0.9, "steps": 110, "tail_steps": 8, "tail_threshold": 4,
              "speedup_overall": 27.0 / 24.0, "speedup_tail": 0.0,   # what the suite writes: ratio(0, 0.9)
              "baseline_phases": base}
    path = rollout(tmp_path, {"arms": {"off": off, "always k=3": always}, "best_setting": "always k=3"})
    a = answers_of([path])["rollout"]
    words = " ".join([a.text, a.badge, *(c.text for c in a.checks)])
    assert "in the long tail" not in words and "0.00x" not in words, words
    assert "no long-tail phase" in a.text
    assert all("no long-tail phase in this workload" in c.text for c in a.checks)


def test_a_sharded_rollouts_tail_line_gives_the_pooled_tails_its_ratio_divides(tmp_path):
    """--dp 4: the tail speed-up is off's pooled tail (each instance's own tail, summed) over the
    arm's; the line's seconds are those two, not the slowest instance's tail beside off's."""
    off = {"total_s": 900.0, "tail_s": 50.0, "steps": 900, "tail_steps": 50}
    arm = {"total_s": 400.0, "tail_s": 130.0, "steps": 400, "tail_steps": 130, "tail_threshold": 8,
           "speedup_overall": 2.25, "speedup_tail": 700.0 / 560.0,
           "dp": {"instances": 4, "tail_s_pooled": 560.0},
           "baseline_phases": {"total_s": 900.0, "tail_s_pooled": 700.0, "head_s_pooled": 2900.0}}
    path = rollout(tmp_path, {"arms": {"off": off, "arctic": arm}, "best_setting": "arctic"})
    words = " ".join(c.text for c in answers_of([path])["rollout"].checks)
    assert "1.25x in the long tail (≤8 running, each of 4 instances' own tail, summed: 700 → 560 s)" in words, words
    assert "50 → 130" not in words


def test_drawn_lengths_answer_with_the_medians_and_their_range(tmp_path):
    """Lengths drawn several times: the answer gives each figure's median [min, max] over the
    draws (as the rollout prints them) and the off arm's share of time in the tail, not the
    first draw's figures."""
    path = rollout(tmp_path)
    res = json.loads((path / "result.json").read_text())
    sp = lambda *v: {"median": sorted(v)[1], "min": min(v), "max": max(v), "n": 3, "values": list(v)}  # noqa: E731
    res["metrics"]["arms"]["threshold<=4 k=3"]["spread"] = {"speedup_overall": sp(1.05, 1.2, 1.1),
                                                           "speedup_tail": sp(1.3, 1.5, 1.4),
                                                           "baseline_tail_share": sp(0.2, 0.3, 0.25)}
    (path / "result.json").write_text(json.dumps(res))
    a = answers_of([path])["rollout"]
    assert a.status == YES and a.badge.startswith(f"saves {100 * (1 - 1 / 1.1):.1f} %")
    assert "(1.10x [1.05, 1.20] over 3 draws of the lengths), 1.40x [1.30, 1.50] in the long tail" in a.text
    assert "(the off arm spends 25.0 % [20.0 %, 30.0 %] of its time there)" in a.text
    assert f"{900 / 800:.2f}x" not in a.text   # the first draw's ratio stays in its check line only


# --- Markdown, several runs, defaults ------------------------------------------------------------------------

def test_markdown_states_the_same_answers(full, tmp_path):
    report = collect(full)
    md = render_markdown(report)
    head = md.split("## Summary")[0]
    assert "## Answers" in head
    for a in answer_sets(report)[0].answers:
        assert f"{a.question} — {a.badge}" in head and a.text in head and a.source in head
        for c in a.checks:
            assert c.text in head
    html_text = answers_html(render_html(report))
    for a in answer_sets(report)[0].answers:
        assert a.text in html_text


def test_two_run_folders_side_by_side(tmp_path):
    for name, rows in (("run-a", ACCEPT), ("run-b", {"sam k=3 own": accept_row("sam", 3, "own", 9000, 5000, 1, 1)})):
        accept(tmp_path / name / "runs" / "accept", rows)
        (tmp_path / name / "run_state.json").write_text(json.dumps({"format": 1, "steps": {}}), encoding="utf-8")
    report = collect([tmp_path / "run-a", tmp_path / "run-b"])
    sets = answer_sets(report)
    assert [Path(s.title).name for s in sets] == ["run-a", "run-b"]
    assert sets[0].answers[1].badge == f"{9000 / 4000:.2f} tok/step" and sets[1].answers[1].badge == f"{9000 / 5000:.2f} tok/step"
    html = render_html(report)
    assert 'class="answers-grid"' in html and html.count('data-answer="accept"') == 2
    md = render_markdown(report)
    assert "| question | " in md and md.index("### " + str(tmp_path / "run-a")) < md.index("## Summary")


def test_the_newest_run_of_a_suite_answers(tmp_path):
    old = accept(tmp_path / "a", {"sam k=3 own": accept_row("sam", 3, "own", 100, 80, 10, 5)})
    new = accept(tmp_path / "b")
    for p, when in ((old, "2026-01-01T00:00:00+00:00"), (new, "2026-02-01T00:00:00+00:00")):
        res = json.loads((p / "result.json").read_text())
        res["created"] = when
        (p / "result.json").write_text(json.dumps(res))
    (s,) = answer_sets(collect([new, old]))
    assert s.answers[1].badge == f"{9000 / 4000:.2f} tok/step" and new.name in s.answers[1].source
    assert "Several runs of accept" in s.note


def test_default_accept_setting_matches_the_accept_command():
    from samspec_bench.suites.accept import command as accept_cmd

    params = {p.name: p.default for p in accept_cmd.params}
    assert params["drafters"] == DEFAULT_ACCEPT["drafter"]
    assert str(params["ks"]) == str(DEFAULT_ACCEPT["k"]) and params["sources"] == DEFAULT_ACCEPT["sources"]


def test_answers_are_embedded_in_the_data(full):
    html = render_html(collect(full))
    data = json.loads(re.search(r'id="samspec-data">(.*?)</script>', html, re.S).group(1))
    keys = [a["key"] for a in data["answers"][0]["answers"]]
    assert keys == ["lossless", "accept", "rollout"]


def test_the_acceptance_answer_names_the_dev_chosen_setting_with_its_held_out_figure(tmp_path):
    """With `accept --dev-split`, the answer's best is the dev groups' choice at its held-out
    figure, not the run's in-sample maximum; without a split the in-sample best says so."""
    plain = answers_of([accept(tmp_path / "plain")])["accept"]
    best = next(c for c in plain.checks if c.name == "best")
    assert "in-sample" in best.text and "--dev-split" in best.text
    split = {"best": "sam k=3 own", "chosen_by": "the highest estimated speed-up", "groups": {"dev": 3, "heldout": 4},
             "heldout": {"sam k=3 own": {"tokens_per_step": 1.375, "drafted_per_step": 2.25},
                         "sam k=5 own+group(concurrent)": {"tokens_per_step": 2.5, "drafted_per_step": 3.0}}}
    path = run(tmp_path / "split", "accept", ACCEPT, {"engine": "replay"}, extra={"split": split,
                                                                               "engine": {"name": "replay"}})
    a = answers_of([path])["accept"]
    held = next(c for c in a.checks if c.name == "best (held out)")
    assert held.badge == "1.38 tok/step" and "3 dev trace groups" in held.text and "4 held-out" in held.text
    assert not any(c.name == "best" for c in a.checks)   # the in-sample maximum (k=5) is not offered as best
    assert "held-out ones: sam k=3 own" in a.text


def test_a_sam_fixed_accept_run_answers_with_sam_fixed(tmp_path):
    """`accept --drafter sam-fixed` (SAM-Decoding's SAM) is a SAM run, not "no SAM drafter"."""
    path = accept(tmp_path, {"sam-fixed k=3 own": accept_row("sam-fixed", 3, "own", 9000, 5000, 12000, 4000),
                             "ngram k=3 own": accept_row("ngram", 3, "own", 9000, 7000, 6000, 2000)})
    a = answers_of([path])["accept"]
    assert a.badge == f"{9000 / 5000:.2f} tok/step" and "sam-fixed k=3" in a.text
    assert [c.name for c in a.checks] == ["best", "other drafter"]


def test_sam_figures_that_are_not_finite_are_named_not_called_no_sam_run(tmp_path):
    """SAM rows whose tokens_per_step was NaN / Infinity (read as null) are counted in the
    answer; with none left it is unknown, never "measured no SAM drafter"."""
    nan_row = {**accept_row("sam", 5, "own", 9000, 4000, 15000, 5000), "tokens_per_step": float("nan")}
    some = accept(tmp_path / "some", {**ACCEPT, "sam k=5 own+group(concurrent)": nan_row})
    a = answers_of([some])["accept"]
    assert a.badge == "1.50 tok/step" and "Left out: 1 SAM configuration(s) without a finite tokens_per_step" in a.text
    none = accept(tmp_path / "none", {"sam k=5 own": nan_row, "ngram k=3 own": ACCEPT["ngram k=3 own"]})
    a = answers_of([none])["accept"]
    assert a.status == UNKNOWN and a.badge == "unknown" and "no SAM drafter" not in a.text
    assert "1 SAM configuration(s) without a finite tokens_per_step" in a.text


def test_the_acceptance_source_says_what_limit_groups_kept(tmp_path):
    """--limit-groups: the rule the run recorded (a verl folder keeps the same prompts at every RL
    step, not the first N of each file); a run that recorded none is not told one."""
    rule = "the same prompts at every RL step, taken by a stable hash of their token ids until 5 group(s) per step"
    inputs = {"traces": [{"file": "/data/rollouts", "sha256": "ab"}], "responses": 40, "response_tokens": 9000}
    path = run(tmp_path / "new", "accept", ACCEPT, {"engine": "replay", "limit_groups": 5},
               extra={"inputs": {**inputs, "limit": {"groups": 5, "rule": rule}}, "engine": {"name": "replay"}})
    assert f"--limit-groups 5 ({rule})" in answers_of([path])["accept"].source
    old = answers_of([accept(tmp_path / "old")])["accept"].source   # no record of the rule
    assert "--limit-groups 5;" in old and "groups per file" not in old
