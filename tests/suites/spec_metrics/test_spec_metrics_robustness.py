"""`samspec-bench spec-metrics` on damaged or unusual input: counters or counts that are not
finite, negative, or accepted > drafted are one-line errors naming the file and line; a NaN
printed figure is counted and shown; a scrape without num_drafts says drafts unknown and lists
V0 series not used; vLLM 0.8's short lines, extra trailing fields and V0 'Speculative metrics:'
lines are read; spec-decode lines none of which is understood say why."""

from __future__ import annotations

import pytest

from samspec_bench.bench.engines.vllm import spec_metrics as sm
from samspec_bench.cli import main
from samspec_bench.errors import UserError

SCRAPE = """vllm:spec_decode_num_drafts_total{engine="0"} 10
vllm:spec_decode_num_draft_tokens_total{engine="0"} 30
vllm:spec_decode_num_accepted_tokens_total{engine="0"} ACC
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",position="0"} 7
"""
V1 = ("INFO x [metrics.py:1] SpecDecoding metrics: Mean acceptance length: 2.20, Accepted throughput: 1.20 tokens/s, "
      "Drafted throughput: 3.00 tokens/s, Accepted: ACC tokens, Drafted: 30 tokens, Per-position acceptance rate: "
      "0.700, POS, 0.100, Avg Draft acceptance rate: 40.0%")
V0 = ("INFO metrics.py:455] Speculative metrics: Draft acceptance rate: 0.400, System efficiency: 0.350, Number of "
      "speculative tokens: 3, Number of accepted tokens: ACC, Number of draft tokens: DRA, Number of emitted tokens: 9.")


class _Res:
    def __init__(self, exit_code, output):
        self.exit_code, self.output = exit_code, output


def _run(tmp_path, capsys, name, text):
    """The CLI's own handling (main): exit code and stdout + stderr."""
    f = tmp_path / name
    f.write_text(text)
    try:
        main(["spec-metrics", str(f), "--output", str(tmp_path / "runs")])
        code = 0
    except SystemExit as e:
        code = e.code
    out = capsys.readouterr()
    return f, _Res(code, out.out + out.err)


@pytest.mark.parametrize("value, says", [("NaN", "not finite"), ("+Inf", "not finite"), ("-5", "negative")])
def test_scrape_counter_not_finite_or_negative_is_exit_2_with_line(tmp_path, capsys, value, says):
    f, res = _run(tmp_path, capsys, "m.prom", SCRAPE.replace("ACC", value))
    assert res.exit_code == 2, res.output
    assert f"{f}:3" in res.output and says in res.output and "counter resets" not in res.output


def test_scrape_accepted_above_drafted_is_exit_2(tmp_path, capsys):
    _, res = _run(tmp_path, capsys, "m.prom", SCRAPE.replace("ACC", "90"))
    assert res.exit_code == 2 and "accepted tokens 90 > draft tokens 30" in res.output


def test_scrapes_whose_differences_are_impossible_are_refused(tmp_path):
    # 10 -> 20 drafted (+10), 5 -> 25 accepted (+20): more accepted than drafted between them
    a, b = tmp_path / "a.prom", tmp_path / "b.prom"
    a.write_text(SCRAPE.replace("ACC", "5"))
    b.write_text(SCRAPE.replace("ACC", "25").replace("} 30", "} 40"))
    with pytest.raises(UserError, match="between these scrapes"):
        sm.read_files([str(a), str(b)])


@pytest.mark.parametrize("acc, says", [("inf", "not finite"), ("nan", "not finite"), ("-12", "negative"),
                                       ("50", "Accepted 50 > Drafted 30")])
def test_log_counts_impossible_are_exit_2_with_line(tmp_path, capsys, acc, says):
    f, res = _run(tmp_path, capsys, "s.log", "start\n" + V1.replace("ACC", acc).replace("POS", "0.4") + "\n")
    assert res.exit_code == 2, res.output
    assert f"{f}:2" in res.output and says in res.output


def test_nan_per_position_rate_is_counted_and_shown(tmp_path, capsys):
    f, res = _run(tmp_path, capsys, "s.log", V1.replace("ACC", "12").replace("POS", "nan") + "\n")
    assert res.exit_code == 0, res.output
    assert "NOT FINITE, not used: 1 log line(s)" in res.output and "Per-position acceptance rate" in res.output
    r = sm.read_files([str(f)])
    assert r.non_finite == [f"{f}:1 (Per-position acceptance rate)"]
    assert r.intervals[0].drafts == 10   # from the mean length instead: 12 / (2.2 - 1)


def test_scrape_without_drafts_counter_says_unknown_and_lists_v0_series(tmp_path, capsys):
    text = ("vllm:spec_decode_draft_acceptance_rate{model_name=\"m\"} 0.4\n"
            "vllm:spec_decode_efficiency{model_name=\"m\"} 0.35\n"
            "vllm:spec_decode_num_accepted_tokens_total{model_name=\"m\"} 12\n"
            "vllm:spec_decode_num_draft_tokens_total{model_name=\"m\"} 30\n"
            "vllm:spec_decode_num_emitted_tokens_total{model_name=\"m\"} 22\n")
    _, res = _run(tmp_path, capsys, "v0.prom", text)
    assert res.exit_code == 0, res.output
    assert "drafts unknown" in res.output and "drafts 0 " not in res.output
    assert "num_drafts_total counter" in res.output
    for name in ("draft_acceptance_rate", "efficiency", "num_emitted_tokens_total"):
        assert f"vllm:spec_decode_{name} (1)" in res.output.split("not used:")[1]


def test_v080_short_line_and_extra_trailing_fields_are_read(tmp_path):
    short = "SpecDecoding metrics: Draft acceptance rate: 40.0%, Accepted: 12 tokens, Drafted: 30 tokens"
    topk = V1.replace("ACC", "12").replace("POS", "0.400") + ", top1: [0.5, 0.4], top2: [0.1, 0.2]"
    f = tmp_path / "s.log"
    f.write_text(short + "\n" + topk + "\n")
    r = sm.read_files([str(f)])
    assert r.lines["spec_decoding_lines"] == 2 and r.lines["not_understood"] == 0
    a, b = r.intervals
    assert (a.accepted, a.draft_tokens, a.drafts) == (12, 30, None)
    assert b.drafts == 10 and b.printed["fields_not_read"] == ["top1", "top2"]
    assert any("drafts unknown" in n for n in r.notes)


def test_spec_decode_lines_none_understood_say_so(tmp_path):
    f = tmp_path / "s.log"
    f.write_text("SpecDecoding metrics: Mean acceptance length: 2.2, Accepted: 12 tokens\n" * 2)
    with pytest.raises(UserError) as e:
        sm.read_files([str(f)])
    msg = str(e.value)
    assert "2 spec-decode log line(s)" in msg and "no 'Drafted' field" in msg and "neither" not in msg


def test_v0_speculative_lines_are_read_as_cumulative(tmp_path):
    # cumulative: 12 of 30, then 20 of 60 -> intervals 12/30 and 8/30; drafts 30 / k=3 = 10
    f = tmp_path / "v0.log"
    f.write_text(V0.replace("ACC", "12").replace("DRA", "30") + "\n" + V0.replace("ACC", "20").replace("DRA", "60"))
    r = sm.read_files([str(f)])
    assert r.lines["spec_decoding_lines"] == 2 and r.lines["other_log_lines"] == 0
    assert [(i.accepted, i.draft_tokens, i.drafts) for i in r.intervals] == [(12, 30, 10), (8, 30, 10)]
    assert any("cumulative" in n for n in r.notes)


@pytest.mark.parametrize("field", ["Draft acceptance rate", "System efficiency", "Number of emitted tokens"])
def test_a_v0_printed_figure_not_a_number_is_counted_as_v1s_are(tmp_path, capsys, field):
    line = V0.replace("ACC", "12").replace("DRA", "30")
    bad = line.replace(f"{field}: {line.split(field + ': ')[1].split(',')[0].rstrip('.')}", f"{field}: nan")
    assert bad != line
    f, res = _run(tmp_path, capsys, "v0.log", bad + "\n" + V0.replace("ACC", "20").replace("DRA", "60"))
    assert res.exit_code == 0, res.output
    assert f"NOT FINITE, not used: 1 log line(s) print a figure that is not a number: {f}:1 ({field})" in res.output
    r = sm.read_files([str(f)])
    assert r.non_finite == [f"{f}:1 ({field})"]
    assert r.intervals[0].printed[field.lower().replace(" ", "_")] is None   # not used: no NaN passed on
    assert [(i.accepted, i.draft_tokens) for i in r.intervals] == [(12, 30), (8, 30)]   # the counts still read
