"""`samspec-bench spec-metrics`: the suite contract, a run folder whose result.json holds the
pooled figures under vLLM's names and the tally of every line, --json, and a file that is
neither a scrape nor a log as one line and exit 2 with no folder left behind."""

from __future__ import annotations

import inspect
import json
import subprocess
import sys

import click
import pytest
from click.testing import CliRunner

from samspec_bench.cli import group, main
from samspec_bench.suites import spec_metrics as suite

SCRAPE = """# HELP vllm:spec_decode_num_drafts_total Number of spec decoding drafts.
vllm:spec_decode_num_drafts_total{engine="0"} 8.0
vllm:spec_decode_num_draft_tokens_total{engine="0"} 24.0
vllm:spec_decode_num_accepted_tokens_total{engine="0"} 6.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",position="0"} 4.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",position="1"} 2.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",position="2"} 0.0
what is this
"""


def test_contract():
    assert suite.SUITE == "spec-metrics" and isinstance(suite.command, click.Command)
    settings = {p.name for p in suite.command.params if p.name not in ("output", "json_path")}
    assert set(inspect.signature(suite.build_config).parameters) == settings


def test_run_folder_and_json(tmp_path):
    f = tmp_path / "metrics.prom"
    f.write_text(SCRAPE)
    out = tmp_path / "runs"
    res = CliRunner().invoke(group, ["spec-metrics", str(f), "--output", str(out), "--json", str(tmp_path / "r.json")])
    assert res.exit_code == 0, res.output
    # 6 accepted of 24 in 8 drafts: 25.0 %, 1 + 6/8 = 1.75, positions 0.5, 0.25, 0
    assert "acceptance rate 25.0 %" in res.output and "mean acceptance length 1.75" in res.output
    assert "per-position acceptance rate 0.500, 0.250, 0.000" in res.output
    assert "NOT UNDERSTOOD: 1 line(s), e.g. 'what is this'" in res.output
    (run,) = list(out.iterdir())
    result = json.loads((run / "result.json").read_text())
    assert result["suite"] == "spec-metrics" and result == json.loads((tmp_path / "r.json").read_text())
    total = result["metrics"]["total"]
    assert total["spec_decode_acceptance_rate"] == pytest.approx(25.0) and total["acceptance_rate"] == pytest.approx(0.25)
    assert result["metrics"]["lines"]["not_understood"] == 1
    assert result["tables"]["intervals"][0]["spec_decode_num_drafts"] == 8


def test_neither_is_one_line_exit_2(tmp_path):
    f = tmp_path / "notes.txt"
    f.write_text("nothing to see\n")
    out = tmp_path / "runs"
    proc = subprocess.run([sys.executable, "-m", "samspec_bench.cli", "spec-metrics", str(f), "--output", str(out)],
                          capture_output=True, text=True)
    assert proc.returncode == 2 and proc.stderr.strip().count("\n") == 0
    assert "notes.txt" in proc.stderr and "neither" in proc.stderr
    assert not out.exists() or not any(out.iterdir())


@pytest.mark.parametrize("second", ["same", "dot"])
def test_a_file_given_twice_is_exit_2_not_counted_twice(tmp_path, monkeypatch, capsys, second):
    # a log given twice would pool every line twice (drafted doubled); a scrape twice, an empty interval
    monkeypatch.chdir(tmp_path)
    (tmp_path / "server.log").write_text(
        "INFO 11-26 10:00:00 [metrics.py:96] SpecDecoding metrics: Mean acceptance length: 2.50, Accepted throughput: "
        "300.00 tokens/s, Drafted throughput: 600.00 tokens/s, Accepted: 3000 tokens, Drafted: 6000 tokens, "
        "Per-position acceptance rate: 0.800, 0.450, 0.250, Avg Draft acceptance rate: 50.0%\n")
    again = "server.log" if second == "same" else "./server.log"
    with pytest.raises(SystemExit) as e:
        main(["spec-metrics", "server.log", again, "--output", "runs"])
    err = capsys.readouterr().err
    assert e.value.code == 2, err
    assert "given twice" in err and "give each file once" in err and "'server.log'" in err and err.count("\n") == 1
    assert not (tmp_path / "runs").exists()


def test_log_fields_not_read_are_counted_and_shown(tmp_path):
    # a vLLM fork's extra field (its draft-length histogram) was read and then dropped without a word
    f = tmp_path / "server.log"
    f.write_text(
        "(APIServer pid=1) INFO 11-26 10:00:00 [metrics.py:96] SpecDecoding metrics: Mean acceptance length: 2.50, "
        "Accepted throughput: 300.00 tokens/s, Drafted throughput: 600.00 tokens/s, Accepted: 3000 tokens, Drafted: "
        "6000 tokens, Per-position acceptance rate: 0.800, 0.450, 0.250, Draft length histogram: 0:12, 3:2000, "
        "Avg Draft acceptance rate: 50.0%\n")
    res = CliRunner().invoke(group, ["spec-metrics", str(f), "--output", str(tmp_path / "runs"),
                                     "--json", str(tmp_path / "r.json")])
    assert res.exit_code == 0, res.output
    assert "log fields not read (not used in any figure): 'Draft length histogram' (1 line(s))" in res.output
    metrics = json.loads((tmp_path / "r.json").read_text())["metrics"]
    assert metrics["log_fields_not_read"] == {"Draft length histogram": 1}
