"""vLLM's own spec-decode metrics read back (`engines/vllm/spec_metrics.py`) from hand-written
Prometheus scrapes and "SpecDecoding metrics:" log lines, every expected figure worked out by
hand in the comments; no vLLM needed (the real formats: test_vllm_spec_metrics.py)."""

from __future__ import annotations

import json

import pytest

from samspec_bench.bench.engines.vllm import spec_metrics as sm
from samspec_bench.errors import UserError
from samspec_bench.metrics import vllm_spec_decode, vllm_tpot_ms
from samspec_bench.suites import spec_metrics as spec_metrics_command


def _scrape(drafts, tokens, accepted, per_pos, engine="0", extra=""):
    lab = f'engine="{engine}",model_name="m"'
    rows = ["# TYPE vllm:spec_decode_num_drafts_total counter",
            f"vllm:spec_decode_num_drafts_total{{{lab}}} {drafts}",
            f"vllm:spec_decode_num_drafts_created{{{lab}}} 1.7e+09",
            f"vllm:spec_decode_num_draft_tokens_total{{{lab}}} {tokens}",
            f"vllm:spec_decode_num_accepted_tokens_total{{{lab}}} {accepted}"]
    rows += [f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{{lab},position="{i}"}} {v}'
             for i, v in enumerate(per_pos)]
    return "\n".join(rows) + "\n" + extra


def test_vllm_names_from_counts():
    # 12 accepted of 30 drafted in 10 drafts: 40 %, 1 + 12/10 = 2.2, positions 7/10, 4/10, 1/10
    v = vllm_spec_decode(10, 30, 12, [7, 4, 1])
    assert v["spec_decode_acceptance_rate"] == pytest.approx(40.0)
    assert v["spec_decode_acceptance_length"] == pytest.approx(2.2)
    assert v["spec_decode_per_position_acceptance_rates"] == pytest.approx([0.7, 0.4, 0.1])
    assert vllm_spec_decode(0, 0, 0)["spec_decode_acceptance_rate"] is None


def test_tpot_is_vllms_definition():
    # (latency - ttft) / (n - 1): (1.0 - 0.1) / 9 = 0.1 s, (2.1 - 0.1) / 4 = 0.5 s; a 1-token request
    # does not count; mean 300 ms, median 300 ms
    t = vllm_tpot_ms([(0.1, 1.0, 10), (0.1, 2.1, 5), (0.2, 0.3, 1)])
    assert t["mean_tpot_ms"] == pytest.approx(300.0) and t["requests"] == 2
    assert vllm_tpot_ms([(0.1, 0.2, 1)])["mean_tpot_ms"] is None


def test_one_scrape_is_since_start_and_engines_are_summed(tmp_path):
    # two engines (data parallel): drafts 10 + 6, tokens 30 + 18, accepted 12 + 9, positions [7+5, 4+3, 1+1]
    f = tmp_path / "m.prom"
    f.write_text(_scrape(10, 30, 12, [7, 4, 1]) + _scrape(6, 18, 9, [5, 3, 1], engine="1",
                                                           extra="vllm:num_requests_running 2\nnot a sample line\n"))
    r = sm.read_files([str(f)])
    assert r.format == "prometheus" and len(r.intervals) == 1
    t = r.total().figures()
    assert (t["spec_decode_num_drafts"], t["spec_decode_draft_tokens"], t["spec_decode_accepted_tokens"]) == (16, 48, 21)
    assert t["spec_decode_acceptance_rate"] == pytest.approx(100 * 21 / 48)
    assert t["spec_decode_acceptance_length"] == pytest.approx(1 + 21 / 16)
    assert t["spec_decode_per_position_acceptance_rates"] == pytest.approx([12 / 16, 7 / 16, 2 / 16])
    assert t["acceptance_rate"] == pytest.approx(21 / 48) and t["drafts_exact"] is True
    assert r.lines["not_understood"] == 1 and r.not_understood == ["not a sample line"]
    assert r.lines["other_metric"] == 1


def test_a_scrape_with_a_byte_order_mark_reads_its_first_line(tmp_path):
    # Windows tools save UTF-8 with a BOM: the first counter line was "not understood", drafts unknown
    f = tmp_path / "m.prom"
    f.write_bytes(b"\xef\xbb\xbf" + _scrape(10, 30, 12, [7, 4, 1]).encode())
    r = sm.read_files([str(f)])
    assert r.lines["not_understood"] == 0 and r.total().figures()["spec_decode_num_drafts"] == 10


def test_a_utf16_scrape_is_refused_naming_the_encoding(tmp_path):
    f = tmp_path / "m.prom"
    f.write_bytes(_scrape(10, 30, 12, [7, 4, 1]).encode("utf-16"))   # PowerShell 5's `>`
    with pytest.raises(UserError, match=r"m\.prom: UTF-16 text .* convert it \(iconv -f UTF-16 -t UTF-8"):
        sm.read_files([str(f)])


def test_scrapes_give_differences_with_a_reset(tmp_path):
    # one file, three scrapes (the series repeat); the third after a restart: counters went down
    text = (_scrape(10, 30, 12, [7, 4, 1]) + _scrape(20, 60, 30, [15, 10, 5])
            + "# EOF\n" + _scrape(4, 12, 2, [2, 0, 0]))
    f = tmp_path / "watch.prom"
    f.write_text(text)
    r = sm.read_files([str(f)])
    assert len(r.intervals) == 2 and r.resets == 1   # the one engine's counters went down: one restart
    a, b = (iv.figures() for iv in r.intervals)
    # 10 -> 20 drafts, 30 -> 60 tokens, 12 -> 30 accepted: 10, 30, 18; 60 %, 1 + 18/10
    assert (a["spec_decode_num_drafts"], a["spec_decode_draft_tokens"], a["spec_decode_accepted_tokens"]) == (10, 30, 18)
    assert a["spec_decode_acceptance_rate"] == pytest.approx(60.0) and a["spec_decode_acceptance_length"] == pytest.approx(2.8)
    assert a["spec_decode_per_position_acceptance_rates"] == pytest.approx([0.8, 0.6, 0.4])
    # after the restart the new values are the increase (Prometheus' rule)
    assert (b["spec_decode_num_drafts"], b["spec_decode_accepted_tokens"]) == (4, 2)
    t = r.total().figures()   # 14 drafts, 42 tokens, 20 accepted
    assert t["spec_decode_acceptance_length"] == pytest.approx(1 + 20 / 14)


def test_one_engine_of_two_restarting_is_differenced_per_series(tmp_path):
    # engines 0 and 1 at 1000 drafts each; then engine 0 at 3000 and engine 1 restarted at 100:
    # 2000 + 100 drafts happened (summing first would show 3100 - 2000 = 1100 and no restart)
    before, after = tmp_path / "a.prom", tmp_path / "b.prom"
    before.write_text(_scrape(1000, 3000, 1200, [700, 400, 100]) + _scrape(1000, 3000, 1200, [700, 400, 100], engine="1"))
    after.write_text(_scrape(3000, 9000, 3600, [2100, 1200, 300]) + _scrape(100, 300, 30, [20, 10, 0], engine="1"))
    r = sm.read_files([str(before), str(after)])
    (iv,) = r.intervals
    assert (iv.drafts, iv.draft_tokens, iv.accepted) == (2100, 6300, 2430) and r.resets == 1
    assert iv.accepted_per_pos == [1420, 810, 200]
    # an engine that joins after the first scrape counts from 0
    joined = tmp_path / "c.prom"
    joined.write_text(_scrape(3000, 9000, 3600, [2100, 1200, 300]) + _scrape(1000, 3000, 1200, [700, 400, 100], engine="1")
                      + _scrape(50, 150, 20, [15, 5, 0], engine="2"))
    (iv,) = sm.read_files([str(after), str(joined)]).intervals
    assert (iv.drafts, iv.accepted) == (0 + 900 + 50, 0 + 1170 + 20)


def test_an_engine_gone_from_the_next_scrape_is_counted_and_named_its_figures_unchanged(tmp_path):
    # engines 0 and 1 in the first scrape, only engine 0 in the second (engine 1 went away): the
    # interval is engine 0's increase (1000 drafts, 3000 tokens, 1200 accepted), and engine 1 is said
    before, after = tmp_path / "a.prom", tmp_path / "b.prom"
    before.write_text(_scrape(1000, 3000, 1200, [700, 400, 100]) + _scrape(800, 2400, 900, [500, 300, 100], engine="1"))
    after.write_text(_scrape(2000, 6000, 2400, [1400, 800, 200]))
    r = sm.read_files([str(before), str(after)])
    (iv,) = r.intervals
    assert (iv.drafts, iv.draft_tokens, iv.accepted, iv.accepted_per_pos) == (1000, 3000, 1200, [700, 400, 100])
    (note,) = [n for n in r.notes if "gone from the next scrape" in n]
    assert note.startswith("the series of 1 label set(s) gone")
    assert f'{{engine="1",model_name="m"}} in {before} scrape 1, not in {after} scrape 1' in note
    # both engines in both scrapes, or k shrinking on one engine (noted as a k change): no such note
    same = sm.read_files([str(before), str(before)])
    assert not any("gone from the next scrape" in n for n in same.notes)
    shorter = tmp_path / "c.prom"
    shorter.write_text(_scrape(2000, 6000, 2400, [1400, 800]) + _scrape(900, 2700, 1000, [550, 330, 110], engine="1"))
    assert not any("gone from the next scrape" in n for n in sm.read_files([str(before), str(shorter)]).notes)



def test_a_gone_engine_is_said_in_the_terminal_and_result_json(tmp_path, capsys):
    before, after = tmp_path / "a.prom", tmp_path / "b.prom"
    before.write_text(_scrape(1000, 3000, 1200, [700, 400, 100]) + _scrape(800, 2400, 900, [500, 300, 100], engine="1"))
    after.write_text(_scrape(2000, 6000, 2400, [1400, 800, 200]))
    cfg = spec_metrics_command.build_config(files=(str(before), str(after)))
    assert spec_metrics_command.execute(cfg, output=str(tmp_path / "runs"), json_path=str(tmp_path / "r.json")) == 0
    m = json.loads((tmp_path / "r.json").read_text())["metrics"]
    assert any("1 label set(s) gone from the next scrape" in n for n in m["notes"])
    assert m["total"]["spec_decode_num_drafts"] == 1000
    assert "note: the series of 1 label set(s) gone from the next scrape" in capsys.readouterr().out


def test_scrape_files_in_order(tmp_path):
    before, after = tmp_path / "before.prom", tmp_path / "after.prom"
    before.write_text(_scrape(10, 30, 12, [7, 4, 1]))
    after.write_text(_scrape(15, 45, 16, [10, 5, 1]))
    (iv,) = sm.read_files([str(before), str(after)]).intervals
    # 5 drafts, 15 tokens, 4 accepted: 26.7 %, 1.8, positions 3/5, 1/5, 0
    f = iv.figures()
    assert f["spec_decode_acceptance_rate"] == pytest.approx(100 * 4 / 15)
    assert f["spec_decode_per_position_acceptance_rates"] == pytest.approx([0.6, 0.2, 0.0])
    assert iv.source.startswith(str(before))


LINE = ("INFO 05-02 10:00:00 [metrics.py:99] SpecDecoding metrics: Mean acceptance length: 2.20, Accepted "
        "throughput: 1.20 tokens/s, Drafted throughput: 3.00 tokens/s, Accepted: 12 tokens, Drafted: 30 tokens, "
        "Per-position acceptance rate: 0.700, 0.400, 0.100, Avg Draft acceptance rate: 40.0%")
# a second interval: 3 accepted of 24 drafted in 8 drafts (1 + 3/8 = 1.375 printed 1.38; 2/8, 1/8, 0)
LINE2 = ("SpecDecoding metrics: Mean acceptance length: 1.38, Accepted throughput: 0.30 tokens/s, Drafted throughput: "
         "2.40 tokens/s, Accepted: 3 tokens, Drafted: 24 tokens, Per-position acceptance rate: 0.250, 0.125, 0.000, "
         "Avg Draft acceptance rate: 12.5%")


def test_log_lines_pooled(tmp_path):
    f = tmp_path / "server.log"
    f.write_text(f"starting\n{LINE}\n\nINFO something else\n{LINE2}\n"
                 "SpecDecoding metrics: Mean acceptance length: oops\n")
    r = sm.read_files([str(f)])
    assert r.format == "log" and len(r.intervals) == 2
    assert r.lines == {"spec_decoding_lines": 2, "other_log_lines": 2, "blank": 1, "not_understood": 1}
    one = r.intervals[0]
    # drafts = accepted / sum of per-position rates = 12 / 1.2 = 10
    assert one.drafts == 10 and not one.drafts_exact
    assert one.printed["at"].startswith("INFO 05-02") and one.printed["accepted_throughput_tok_s"] == 1.2
    assert r.intervals[1].drafts == 8   # 3 / 0.375
    t = r.total().figures()
    # 15 accepted / 54 drafted = 27.8 %; 1 + 15 / 18 drafts; position 0: (7 + 2) / 18
    assert t["spec_decode_acceptance_rate"] == pytest.approx(100 * 15 / 54)
    assert t["spec_decode_acceptance_length"] == pytest.approx(1 + 15 / 18)
    assert t["spec_decode_per_position_acceptance_rates"] == pytest.approx([9 / 18, 5 / 18, 1 / 18])
    assert r.inconsistent == []


def test_log_lines_of_two_ks_pool_no_per_position_rates(tmp_path):
    # k=3 then (a restart) k=5: positions 3 and 4 were drafted only in the second interval, so
    # dividing their counts by every interval's drafts would understate them
    five = ("SpecDecoding metrics: Mean acceptance length: 3.00, Accepted throughput: 1.00 tokens/s, Drafted "
            "throughput: 2.50 tokens/s, Accepted: 10 tokens, Drafted: 25 tokens, Per-position acceptance rate: 0.800, "
            "0.600, 0.400, 0.200, 0.000, Avg Draft acceptance rate: 40.0%")
    f = tmp_path / "k.log"
    f.write_text(LINE + "\n" + five + "\n")
    r = sm.read_files([str(f)])
    assert [len(i.accepted_per_pos) for i in r.intervals] == [3, 5]
    assert r.total().accepted_per_pos is None and r.total().accepted == 22
    assert any("3 or 5 positions" in n for n in r.notes)
    f.write_text(LINE + "\n" + LINE2 + "\n")   # one k: pooled as before, no note
    r = sm.read_files([str(f)])
    assert r.total().accepted_per_pos is not None and not any("positions (k changed" in n for n in r.notes)


def test_log_drafts_of_k_tokens_each_when_the_printed_figures_agree(tmp_path):
    # EAGLE / MTP draft k tokens every time: Drafted / k is exact where the rounded rates and mean
    # length agree with it; accepted / sum(rates) was 12000 here (the 3-decimal rates are 0.001 + 0 + 0)
    line = ("INFO 11-26 10:00:00 [metrics.py:86] SpecDecoding metrics: Mean acceptance length: 1.00, Accepted: 12 "
            "tokens, Drafted: 30000 tokens, Per-position acceptance rate: 0.001, 0.000, 0.000\n")
    f = tmp_path / "low.log"
    f.write_text(line)
    (iv,) = sm.read_files([str(f)]).intervals
    assert iv.drafts == 10000 and iv.drafts_exact is False
    # drafts shorter than k (n-gram): the rates disagree with Drafted / k, so the rates' estimate stands,
    # within what the counts allow (at least Drafted / k drafts, at most one per drafted token)
    f.write_text(line.replace("1.00", "1.40").replace("Accepted: 12", "Accepted: 4000")
                 .replace("0.001, 0.000, 0.000", "0.300, 0.080, 0.020"))
    (iv,) = sm.read_files([str(f)]).intervals
    assert iv.drafts == 10000   # 4000 / 0.4: also Drafted / k here
    f.write_text(line.replace("1.00", "1.33").replace("Accepted: 12", "Accepted: 4000")
                 .replace("0.001, 0.000, 0.000", "0.200, 0.100, 0.033"))
    (iv,) = sm.read_files([str(f)]).intervals
    assert iv.drafts == 12012   # 4000 / 0.333; Drafted / k = 10000 would give 0.4 accepted per draft
    f.write_text(line.replace("1.00", "1.80").replace("Accepted: 12", "Accepted: 4000")
                 .replace("0.001, 0.000, 0.000", "0.600, 0.150, 0.050"))
    (iv,) = sm.read_files([str(f)]).intervals
    assert iv.drafts == 10000   # 4000 / 0.8 = 5000 drafts would hold 6 tokens each, more than k = 3


def test_log_line_whose_rate_disagrees_is_reported(tmp_path):
    f = tmp_path / "edited.log"
    f.write_text(LINE.replace("40.0%", "45.0%") + "\n")
    assert sm.read_files([str(f)]).inconsistent == [f"{f}:1"]


def test_log_line_with_nothing_accepted_estimates_drafts_from_k():
    line = ("SpecDecoding metrics: Mean acceptance length: 1.00, Accepted throughput: 0.00 tokens/s, Drafted "
            "throughput: 1.00 tokens/s, Accepted: 0 tokens, Drafted: 10 tokens, Per-position acceptance rate: "
            "0.000, 0.000, 0.000, Avg Draft acceptance rate: 0.0%")
    iv = sm.parse_log_line(line, "x")
    assert iv.drafts == 4 and iv.figures()["spec_decode_acceptance_rate"] == 0.0   # ceil(10 / 3)


@pytest.mark.parametrize("content, says", [("hello\nworld\n", "neither"),
                                           ("vllm:num_requests_running 2\n", "neither")])
def test_a_file_that_is_neither_is_one_line(tmp_path, content, says):
    f = tmp_path / "x.txt"
    f.write_text(content)
    with pytest.raises(UserError, match=says) as e:
        sm.read_files([str(f)])
    assert "\n" not in str(e.value) and str(f) in str(e.value)


def test_mixed_kinds_and_missing_files_are_refused(tmp_path):
    log, prom = tmp_path / "a.log", tmp_path / "b.prom"
    log.write_text(LINE + "\n")
    prom.write_text(_scrape(1, 3, 1, [1, 0, 0]))
    with pytest.raises(UserError, match="one kind"):
        sm.read_files([str(log), str(prom)])
    with pytest.raises(UserError, match="cannot read"):
        sm.read_files([str(tmp_path / "missing.log")])


def test_from_get_metrics():
    counters = {"vllm:spec_decode_num_drafts": 10, "vllm:spec_decode_num_draft_tokens": 30,
                "vllm:spec_decode_num_accepted_tokens": 12, "vllm:spec_decode_num_accepted_tokens_per_pos": [7, 4, 1]}
    v = sm.from_get_metrics(counters)
    assert v["spec_decode_acceptance_rate"] == pytest.approx(40.0) and v["spec_decode_acceptance_length"] == 2.2
    assert sm.from_get_metrics({}) is None and sm.from_get_metrics(None) is None


def test_a_label_change_between_scrapes_says_both_halves_and_what_the_delta_counts(tmp_path, capsys):
    # one engine relabelled between the scrapes ("0" -> "7", e.g. a restart): its old series gone
    # (left out), its new series counted whole (from 0) -- both counted and named
    before, after = tmp_path / "a.prom", tmp_path / "b.prom"
    before.write_text(_scrape(1000, 3000, 1200, [700, 400, 100]))
    after.write_text(_scrape(40, 120, 50, [30, 15, 5], engine="7"))
    r = sm.read_files([str(before), str(after)])
    (iv,) = r.intervals
    assert (iv.drafts, iv.draft_tokens, iv.accepted) == (40, 120, 50) and r.resets == 0
    assert any('{engine="0",model_name="m"} in ' in n and "gone from the next scrape" in n for n in r.notes)
    (new,) = [n for n in r.notes if "new in the next scrape" in n]
    assert new.startswith("the series of 1 label set(s) new in the next scrape")
    assert f'{{engine="7",model_name="m"}} in {after} scrape 1, not in {before} scrape 1' in new
    assert "their whole value is counted in that interval" in new
    cfg = spec_metrics_command.build_config(files=(str(before), str(after)))
    assert spec_metrics_command.execute(cfg, output=str(tmp_path / "runs"), json_path=str(tmp_path / "r.json")) == 0
    assert new in json.loads((tmp_path / "r.json").read_text())["metrics"]["notes"]
    assert f"note: {new}" in capsys.readouterr().out
    # the same engines in both scrapes, or k growing on one engine (a k change, noted as such): no such note
    assert not any("new in the next scrape" in n for n in sm.read_files([str(before), str(before)]).notes)
    longer = tmp_path / "c.prom"
    longer.write_text(_scrape(2000, 6000, 2400, [1400, 800, 200, 0]))
    assert not any("new in the next scrape" in n for n in sm.read_files([str(before), str(longer)]).notes)
