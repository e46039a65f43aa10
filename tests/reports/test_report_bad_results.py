"""Damaged run folders in `samspec-bench report`: nothing in them is silent. A gated value that is
not a finite number is an unknown gate that fails; a figure that is not an image (or lies
outside its run folder) is not embedded and is counted; malformed tables and rows, an unknown
suite and a broken result.json link are named."""

from __future__ import annotations

import base64
import json
import re
from pathlib import Path

import pytest

from samspec_bench.cli import main
from samspec_bench.reports.collect import collect
from samspec_bench.reports.headlines import summarize
from samspec_bench.reports.html import render_html
from samspec_bench.reports.markdown import render_markdown
from samspec_bench.reports.model import status

from report_runs import make_run, run

UNKNOWN = "unknown (value not a finite number)"
BYTES_GATE = "sam holds at most 64 bytes per indexed token"
DRAFT_GATE = "sam drafts k tokens in under 1 µs"


def _patch(run_dir: Path, fn) -> Path:
    """Rewrite result.json through `fn(result)` with Python's json (NaN written as NaN)."""
    p = run_dir / "result.json"
    r = json.loads(p.read_text())
    fn(r)
    p.write_text(json.dumps(r))
    return run_dir


def _report(args, tmp_path, capsys, kind="md", fail_on_gate=True):
    out = tmp_path / f"r.{kind}"
    capsys.readouterr()
    code = 0
    try:
        main(["report", kind, *map(str, args), "-o", str(out)] + (["--fail-on-gate"] if fail_on_gate else []))
    except SystemExit as e:
        code = e.code
    io = capsys.readouterr()
    return code, out.read_text() if out.is_file() else "", io.out, io.err


def _drafters(root: Path, **metrics) -> Path:
    return make_run(root, "drafters", {"k": 8, "sam_library_drafter": "sam", "sam_ns_per_token": 63.0,
                                       "sam_ns_per_draft": 306.0, "sam_bytes_per_token": 40.0, **metrics})


# --- 1. a gate whose value is not a finite number ------------------------------------------------------------

def test_a_nan_in_a_failing_gate_keeps_the_gate_unknown_and_failed(tmp_path, capsys):
    d = _patch(_drafters(tmp_path, sam_bytes_per_token=94.7),
               lambda r: r["metrics"].__setitem__("sam_bytes_per_token", float("nan")))
    code, md, out, _ = _report([d], tmp_path, capsys)
    assert code == 1, out   # --fail-on-gate: an unknown gate counts as failed
    assert "No pass/fail gate" not in md
    row = next(line for line in md.splitlines() if line.startswith(f"| {BYTES_GATE} |"))
    assert UNKNOWN in row and "NaN / Infinity are read as null" in row
    assert "| drafters | **FAIL** | 1 | 1/2 |" in md   # the page's gate count: 1 of 2 passed
    (r,) = collect([d]).runs
    g = {x["name"]: x for x in r.gates}
    assert g[BYTES_GATE]["passed"] is False and g[BYTES_GATE]["unknown"] is True and status(r.gates) == "fail"
    html = render_html(collect([d]))
    assert f'<span class="badge fail">{UNKNOWN}</span>' in html


def test_a_string_in_a_passing_gate_is_not_dropped(tmp_path, capsys):
    d = _drafters(tmp_path, sam_ns_per_draft="50%")
    code, md, out, _ = _report([d], tmp_path, capsys)
    assert code == 1
    row = next(line for line in md.splitlines() if line.startswith(f"| {DRAFT_GATE} |"))
    assert UNKNOWN in row and "50%" in row
    assert "| drafters | **FAIL** | 1 | 1/2 |" in md   # the bytes gate passes, the draft gate is unknown


def test_a_drafting_cost_below_the_noise_is_gated_by_its_bound(tmp_path):
    # ns/draft unresolved (the draft pass was not slower): the gate judges the noise bound and says so
    for bound, passed in ((120.0, True), (4000.0, False)):
        d = _drafters(tmp_path / str(bound), sam_ns_per_draft=None, sam_ns_per_draft_at_most=bound)
        _, gates = summarize(json.loads((d / "result.json").read_text()))
        g = next(x for x in gates if x["name"] == DRAFT_GATE)
        assert g["passed"] is passed and g["value"] == bound and "upper bound" in g["note"]
    d = _drafters(tmp_path / "none", sam_ns_per_draft=None)   # no bound either: unknown, failed
    _, gates = summarize(json.loads((d / "result.json").read_text()))
    g = next(x for x in gates if x["name"] == DRAFT_GATE)
    assert g["passed"] is False and g["unknown"] is True


def test_a_nan_in_the_context_growth_gate_keeps_the_other_gates(tmp_path):
    d = _patch(make_run(tmp_path, "drafters", {"sam_ns_per_draft": 306.0, "sam_bytes_per_token": 40.0,
                                               "step_cost_growth_longest_vs_shortest_context": {"sam": 1.0}},
                        config={"sweep": [1000, 16000]}),
               lambda r: r["metrics"]["step_cost_growth_longest_vs_shortest_context"].__setitem__("sam", float("nan")))
    heads, gates = summarize(json.loads((d / "result.json").read_text(), parse_constant=lambda c: None))
    assert heads[0]["name"] != "summary"   # no fallback to the generic summary (which has no gates)
    by = {g["name"]: g for g in gates}
    growth = next(g for n, g in by.items() if n.startswith("sam per-step cost flat"))
    assert growth["unknown"] is True and growth["passed"] is False
    assert by[BYTES_GATE]["passed"] is True and by[DRAFT_GATE]["passed"] is True


def test_a_summary_that_cannot_read_a_gated_suite_leaves_an_unknown_gate(tmp_path, capsys):
    d = _drafters(tmp_path, sam_bytes_per_token=94.7, step_cost_growth_longest_vs_shortest_context="not a dict")
    code, md, _, _ = _report([d], tmp_path, capsys)
    assert code == 1   # the bytes gate could not be judged: the run cannot pass --fail-on-gate
    assert "the drafters gates" in md and "unknown (the drafters summary could not read this result)" in md


def test_generic_and_other_suites_keep_non_finite_gates(tmp_path):
    toy = make_run(tmp_path / "toy", "toy", {"checks_pass": "yes", "x": 1.0})
    _, gates = summarize(json.loads((toy / "result.json").read_text()))
    assert [(g["name"], g["passed"], g.get("unknown")) for g in gates] == [("checks_pass", False, True)]
    s = make_run(tmp_path / "s", "sampler", {"exact_builtins_pass": "50%", "verdicts": {}})
    _, gates = summarize(json.loads((s / "result.json").read_text()))
    assert [(g["passed"], g.get("unknown")) for g in gates] == [(False, True)]
    acc = run(tmp_path / "acc", "accuracy", {"gsm8k": {"n": 0, "diff": None, "p_value": None, "alpha": 0.05}})
    _, gates = summarize(json.loads((acc / "result.json").read_text()))
    assert [(g["passed"], g.get("unknown")) for g in gates] == [(False, True)]


def test_an_unknown_gate_in_a_comparison_reads_unknown(tmp_path):
    a = _drafters(tmp_path / "a")
    b = _drafters(tmp_path / "b", sam_bytes_per_token="n/a")
    md = render_markdown(collect([a, b]))
    assert f"| {BYTES_GATE} | PASS | **unknown** |" in md


# --- 2. figures: only images from inside the run folder are embedded -----------------------------------------

def test_a_figure_linking_outside_its_run_folder_is_not_embedded(tmp_path, capsys):
    secret = tmp_path / "secret.txt"
    secret.write_text("TOP-SECRET-CONTENT\n" * 4)
    d = make_run(tmp_path / "runs", "toy", {"x": 1.0}, figures=("fig.png",))
    (d / "fig.png").unlink()
    (d / "fig.png").symlink_to(secret)
    code, html, out, err = _report([d], tmp_path, capsys, kind="html", fail_on_gate=False)
    assert code == 0
    assert base64.b64encode(secret.read_bytes()).decode()[:40] not in html and "data:image/png" not in html
    assert "fig.png: not an image" in html and "outside the run folder" in html
    assert re.search(r"figures not embedded: not an image</td><td class=\"num\">1<", html)
    assert "fig.png: not an image" in err


def test_a_figure_whose_bytes_are_not_an_image_is_not_embedded(tmp_path):
    d = make_run(tmp_path, "toy", {"x": 1.0}, figures=("good.png", "bad.png", "bad2.svg"))
    (d / "bad.png").write_text("root:x:0:0:root:/root:/bin/bash\n")
    (d / "bad2.svg").write_bytes(b"\x89PNG\r\n\x1a\n" + b"\0" * 20)   # a PNG named .svg
    (r,) = collect([d]).runs
    figs = {f.name: f for f in r.figures}
    assert figs["good.png"].data is not None
    assert figs["bad.png"].data is None and "bad.png: not an image (its first bytes are not PNG)" in figs["bad.png"].note
    assert figs["bad2.svg"].data is None and "not SVG" in figs["bad2.svg"].note
    h = {x["name"]: x for x in r.headlines}
    assert h["figures not embedded: not an image"]["value"] == 2
    html = render_html(collect([d]))
    assert html.count("data-figure=") == 1


def test_an_absolute_or_parent_figure_path_is_not_read(tmp_path):
    src = make_run(tmp_path / "src", "toy", {"x": 1.0}, figures=("p.png",))
    png = (src / "p.png").read_bytes()
    (tmp_path / "elsewhere.png").write_bytes(png)
    (tmp_path / "other.png").write_bytes(png)
    d = make_run(tmp_path / "runs", "toy", {"x": 1.0})
    _patch(d, lambda r: r.__setitem__("figures", [str(tmp_path / "elsewhere.png"), "../../other.png"]))
    (r,) = collect([d]).runs
    assert len(r.figures) == 2
    assert all(f.data is None and "not an image" in f.note and "outside the run folder" in f.note for f in r.figures)
    assert {x["name"]: x["value"] for x in r.headlines}["figures not embedded: not an image"] == 2


# --- 3. malformed tables and rows ----------------------------------------------------------------------------

ROWS = [{"drafter": "sam", "tokens": 10, "ns": 1.0}, {"drafter": "py", "tokens": 10, "ns": 2.0},
        {"drafter": "x", "tokens": 10, "ns": 3.0}]


@pytest.mark.parametrize("tables, expect", [
    ({"replay": {"a": 1}}, [r"tables\.replay\.a: a JSON number \(1\), not rows"]),
    ({"replay": [{"drafter": "sam"}, *ROWS[1:], [1, 2, 3]]},
     [r"tables\.replay: 1 of 4 rows is not a row object \(row 3: a JSON list \[1, 2, 3\]\)",
      r"tables\.replay: 1 of 4 rows lacks columns the others have \(row 0: no ns, tokens\); shown blank"]),
    ({"replay": [1, "x", None]}, [r"tables\.replay: 3 of 3 rows are not row objects \(row 0: a JSON number 1; "
                                  r"row 1: a JSON string 'x'; row 2: null\)"]),
    ({"replay": [{"drafter": "sam"}, ROWS[1]]},   # of two rows, the one without most of the other's columns
     [r"tables\.replay: 1 of 2 rows lacks columns the others have \(row 0: no ns, tokens\)"]),
])
def test_malformed_tables_and_rows_are_counted_and_shown(tmp_path, capsys, tables, expect):
    d = make_run(tmp_path, "toy", {"x": 1.0}, tables=tables)
    code, md, out, err = _report([d], tmp_path, capsys, fail_on_gate=False)
    assert code == 0
    (r,) = collect([d]).runs
    h = {x["name"]: x for x in r.headlines}
    assert h["malformed tables / rows in result.json"]["value"] == len(expect)
    assert len([n for n in r.notes if n.startswith("tables.")]) == len(expect)
    for pat in expect:
        assert any(re.search(pat, n) for n in r.notes), (pat, r.notes)
        assert re.search(pat, md), pat   # a visible note in the run's section
        assert re.search(pat, err), pat
    html = render_html(collect([d]))
    assert re.search(expect[0], html.replace("&#x27;", "'"))


def test_a_row_that_is_not_an_object_stays_visible_beside_the_table(tmp_path):
    d = make_run(tmp_path, "toy", {"x": 1.0}, tables={"replay": [*ROWS, [1, 2, 3]]})
    md = render_markdown(collect([d]))
    assert "| drafter | ns | tokens |" in md and "| x | 3 | 10 |" in md   # the rows are still a table
    assert "**replay (not rows)**" in md and "| 3 | [1, 2, 3] |" in md


def test_legitimate_table_shapes_are_not_flagged(tmp_path):
    tables = {"binned": {"sam k=3": [{"bin": 0, "n": 1}, {"bin": 1, "n": 2}]},
              "by_file": {"sam k=3": {"a.jsonl": {"n": 1, "counts": {"x": 1}}}},
              "arms": [{"arm": "a", "tps": 1.0, "x": 2}, {"arm": "b", "skipped": "not installed"},
                       {"arm": "c", "tps": 2.0, "x": 3, "extra": 1}],
              "empty": []}
    d = make_run(tmp_path, "compare", {"arms": {}}, tables=tables)
    (r,) = collect([d]).runs
    assert r.notes == [] and not any(h["name"].startswith("malformed") for h in r.headlines)


def test_a_rollout_arm_that_is_not_an_object_is_named(tmp_path, capsys):
    from report_runs import rollout

    d = _patch(rollout(tmp_path), lambda r: r["metrics"]["arms"].__setitem__("off", "none"))
    code, md, _, err = _report([d], tmp_path, capsys, fail_on_gate=False)
    assert code == 0
    note = "metrics.arms.off: a JSON string ('none'), not an object"
    assert note in md and note in err
    (r,) = collect([d]).runs
    assert {x["name"]: x["value"] for x in r.headlines}["malformed tables / rows in result.json"] == 1


# --- 4. a suite this samspec-bench does not know ---------------------------------------------------------------

def test_an_unknown_suite_is_noted(tmp_path, capsys):
    d = make_run(tmp_path, "frobnicate", {"x": 1.0})
    code, md, _, err = _report([d], tmp_path, capsys, fail_on_gate=False)
    note = "suite 'frobnicate' is not known to this samspec-bench (written by a newer version?)"
    assert code == 0 and note in md and note in err
    assert note in render_html(collect([d])).replace("&#x27;", "'")
    (r,) = collect([d]).runs
    assert any(n.startswith(note) for n in r.notes)
    known = make_run(tmp_path / "k", "drafters", {"sam_bytes_per_token": 40.0})
    (r,) = collect([known]).runs
    assert r.notes == []


# --- 5. a broken result.json link ------------------------------------------------------------------------------

def test_a_dangling_result_json_link_is_named_with_its_target(tmp_path, capsys):
    d = tmp_path / "dangling"
    d.mkdir()
    (d / "result.json").symlink_to(tmp_path / "nowhere" / "x.json")
    code, _, _, err = _report([d], tmp_path, capsys, fail_on_gate=False)
    err = err.strip()
    assert code == 2 and "\n" not in err and err.startswith("error:")
    assert "result.json: a broken link" in err and str(tmp_path / "nowhere" / "x.json") in err
    assert "no result.json found" not in err


def test_a_dangling_link_beside_good_runs_is_listed_unreadable(tmp_path, capsys):
    good = make_run(tmp_path / "all", "toy", {"x": 1.0})
    bad = tmp_path / "all" / "zz-dangling"
    bad.mkdir()
    (bad / "result.json").symlink_to("/nonexistent/x")
    report = collect([tmp_path / "all"])
    assert [r.path for r in report.runs] == [good]
    (u,) = report.unreadable
    assert "a broken link" in u["reason"] and "/nonexistent/x" in u["reason"]


# --- 6. the terminal and --json - ------------------------------------------------------------------------------

def test_json_to_stdout_is_json_alone_and_non_finite_values_are_said_in_the_terminal(tmp_path, capsys):
    """`report ... --json -`: stdout holds the JSON alone (the 'report:' line goes to stderr);
    NaN / Infinity read as null are named in the terminal, as on the page."""
    d = _patch(_drafters(tmp_path), lambda r: r["metrics"].update(sam_ns_per_token=float("nan"),
                                                                  sam_ns_per_draft=float("inf")))
    capsys.readouterr()
    main(["report", "md", str(d), "-o", str(tmp_path / "r.md"), "--json", "-"])
    io = capsys.readouterr()
    data = json.loads(io.out)
    assert data["format"] == "samspec-bench-report/1"
    assert "report: " in io.err and str(tmp_path / "r.md") in io.err
    assert "2 non-finite number(s) in result.json (Infinity, NaN)" in io.err
