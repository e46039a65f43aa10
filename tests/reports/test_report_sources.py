"""The report shows accept's draft sources side by side: own / group / history / group+history
per drafter and k, per RL step of a verl dump, and what the history store held. A real replay
of a verl rollout_data_dir (built from the shared traces in verl's schema) is rendered; every
figure of its result.json must be found in the HTML and Markdown tables."""

from __future__ import annotations

import html as html_lib
import re
from pathlib import Path

import pytest
from trace_fixtures import grouped_rows, write_verl_dump

from samspec_bench.data import load_tokenizer
from samspec_bench.reports.collect import collect
from samspec_bench.reports.fmt import fmt
from samspec_bench.reports.html import render_html
from samspec_bench.reports.markdown import render_markdown
from samspec_bench.reports.source_tables import SOURCES, draft_source_tables
from samspec_bench.suites import accept

QWEN = "qwen25math_math_100x8.jsonl"


@pytest.fixture(scope="module")
def verl_run(traces_dir, qwen3_tokenizer_dir, tmp_path_factory) -> Path:
    """accept over a verl dump: 4 prompts, 2 a step, 4 responses each, 2 epochs (steps 3 and 4
    see the prompts of steps 1 and 2 again), sam at k=3 and 5, all four sources."""
    root = tmp_path_factory.mktemp("verl_report")
    dump = root / "rollout_data_dir"
    write_verl_dump(dump, load_tokenizer(qwen3_tokenizer_dir), grouped_rows(traces_dir / QWEN, 4), batch=2, n=4,
                    epochs=2)
    cfg = accept.AcceptConfig(traces=[str(dump)], tokenizer=str(qwen3_tokenizer_dir), num_spec_tokens=[3, 5],
                              sources=["own", "group", "history", "group+history"], workers=1, progress=False)
    return accept.run(cfg, output=root / "out", progress=False)[1]


def _md_rows(md: str, title: str) -> list[list[str]]:
    """The body rows of the Markdown table under **title**."""
    block = md.split(f"**{title}**", 1)[1].split("\n\n", 2)[1]
    return [[c.strip() for c in line.strip("|").split("|")] for line in block.splitlines()[2:]]


def _html_rows(page: str, title: str) -> list[list[str]]:
    part = page.split(html_lib.escape(title), 1)[1].split("</table>", 1)[0]
    return [[html_lib.unescape(re.sub(r"<[^>]+>", "", c)).strip() for c in re.findall(r"<td[^>]*>(.*?)</td>", row)]
            for row in re.findall(r"<tr>(.*?)</tr>", part) if "<td" in row]


def test_sources_side_by_side_and_per_step_in_the_report(verl_run):
    report = collect([verl_run])
    (run,) = report.runs
    result = run.result
    side, steps, store = draft_source_tables(result)
    md, page = render_markdown(report), render_html(report)
    cols = [c for _, c in SOURCES]
    assert side.columns[-4:] == steps.columns[-4:] == cols == ["own", "group", "history", "group+history"]

    # side by side: the figures of tables.sources, one row per k and metric, in the source's column
    for rows in (_md_rows(md, side.title), _html_rows(page, side.title)):
        assert len(rows) == 4   # k=3, k=5 x tokens_per_step, acceptance_length
        for r in result["tables"]["sources"]:
            for metric in ("tokens_per_step", "acceptance_length"):
                (row,) = [x for x in rows if x[1] == str(r["k"]) and x[2].startswith(metric)]
                assert row[3:] == [fmt(r[src][metric]) for src, _ in SOURCES]

    # per RL step: the figures of tables.by_step under each source's configuration label
    by_step = result["tables"]["by_step"]
    for rows in (_md_rows(md, steps.title), _html_rows(page, steps.title)):
        assert [x[2] for x in rows] == ["1", "2", "3", "4"] * 2
        for r in result["tables"]["sources"]:
            for st in (1, 2, 3, 4):
                (row,) = [x for x in rows if x[1] == str(r["k"]) and x[2] == str(st)]
                want = [fmt(next(s["tokens_per_step"] for s in by_step[r[src]["label"]] if s["step"] == st))
                        for src, _ in SOURCES]
                assert row[3:] == want
    # history: epoch 1 (steps 1, 2) has nothing earlier; epoch 2 drafts from it and gains
    for r in result["tables"]["sources"]:
        per = {src: {s["step"]: s["tokens_per_step"] for s in by_step[r[src]["label"]]} for src, _ in SOURCES}
        assert per["own+history"][1] == per["own"][1] and per["own+history"][3] > per["own"][3]

    # the history store, per configuration that had the source
    hist = result["engine"]["history"]["by_configuration"]
    rows = _md_rows(md, store.title)
    assert sorted(x[0] for x in rows) == sorted(hist)
    for x in rows:
        assert x[1:3] == [fmt(hist[x[0]]["replayed_with_history"]), fmt(hist[x[0]]["replayed_responses"])]
        assert x[1] == "16" and x[2] == "32"   # the 16 responses of steps 3 and 4 of 32
    # the figures are counts: the titles say so, in both renderings
    assert "(counts, not time)" in side.title and side.title in md and html_lib.escape(side.title) in page


def test_other_results_get_no_source_tables(verl_run, tmp_path):
    report = collect([verl_run])
    result = dict(report.runs[0].result)
    assert draft_source_tables({**result, "suite": "drafters"}) == []
    plain = {**result, "tables": {"binned": result["tables"]["binned"]}, "engine": {}}
    assert draft_source_tables(plain) == []
