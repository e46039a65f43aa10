"""`samspec-bench spec-metrics` on counters that are missing or contradict each other: a counter
absent from a scrape is unknown (shown as unknown, with a note naming the counter and the
scrape), never 0, and its absence from the next scrape is not a reset; per-position accepted
counts above the drafts, or summing above the accepted tokens, are one-line errors (exit 2)
naming the file and the counters; vLLM V0 lines whose difference accepts more than it drafts
are exit 2 naming file:line, and a change of k between them is counted and noted."""

from __future__ import annotations

import pytest

from samspec_bench.bench.engines.vllm import spec_metrics as sm
from samspec_bench.cli import main
from samspec_bench.errors import UserError

P = "vllm:spec_decode_"


def _scrape(drafts=10, tokens=30, accepted=12, per_pos=(7, 4, 1)) -> str:
    """One scrape; a counter given as None is left out."""
    rows = [f'{P}num_drafts_total{{engine="0"}} {drafts}' if drafts is not None else None,
            f'{P}num_draft_tokens_total{{engine="0"}} {tokens}' if tokens is not None else None,
            f'{P}num_accepted_tokens_total{{engine="0"}} {accepted}' if accepted is not None else None]
    rows += [f'{P}num_accepted_tokens_per_pos_total{{engine="0",position="{i}"}} {v}' for i, v in enumerate(per_pos)]
    return "\n".join(r for r in rows if r is not None) + "\n"


V0 = ("INFO metrics.py:455] Speculative metrics: Draft acceptance rate: 0.400, System efficiency: 0.350, Number of "
      "speculative tokens: K, Number of accepted tokens: ACC, Number of draft tokens: DRA, Number of emitted tokens: 9.")


def _v0(k, acc, dra):
    return V0.replace("K", str(k)).replace("ACC", str(acc)).replace("DRA", str(dra))


def _run(tmp_path, capsys, name, text):
    f = tmp_path / name
    f.write_text(text)
    try:
        main(["spec-metrics", str(f), "--output", str(tmp_path / "runs")])
        code = 0
    except SystemExit as e:
        code = e.code
    out = capsys.readouterr()
    return f, code, out.out + out.err


# --- 1. a missing counter is unknown, not 0 ---------------------------------------------------------

def test_missing_accepted_counter_is_unknown_not_zero(tmp_path, capsys):
    f, code, out = _run(tmp_path, capsys, "m.prom", _scrape(accepted=None))
    assert code == 0, out
    total = next(line for line in out.splitlines() if line.startswith("total:"))
    assert "acceptance rate -" in total and "mean acceptance length -" in total and "accepted unknown" in total
    assert "0.0 %" not in out and "1.00" not in out
    assert "per-position acceptance rate 0.700, 0.400, 0.100" in total   # drafts known: still shown
    assert f"note: accepted tokens unknown (not 0): no {P}num_accepted_tokens_total counter in 1 scrape(s): {f} scrape 1" in out
    t = sm.read_files([str(f)]).total().figures()
    assert t["spec_decode_accepted_tokens"] is None and t["spec_decode_acceptance_rate"] is None
    assert t["spec_decode_acceptance_length"] is None and t["acceptance_rate"] is None


def test_missing_draft_tokens_counter_is_unknown_not_zero(tmp_path, capsys):
    f, code, out = _run(tmp_path, capsys, "m.prom", _scrape(tokens=None))
    assert code == 0, out
    total = next(line for line in out.splitlines() if line.startswith("total:"))
    assert "drafted unknown" in total and "drafted 0" not in out and "acceptance rate -" in total
    assert "mean acceptance length 2.20" in total   # 1 + 12 / 10: needs no draft tokens
    assert f"note: draft tokens unknown (not 0): no {P}num_draft_tokens_total counter in 1 scrape(s): {f} scrape 1" in out
    assert sm.read_files([str(f)]).total().figures()["spec_decode_draft_tokens"] is None


def test_counter_absent_from_the_next_scrape_is_not_a_reset(tmp_path, capsys):
    f, code, out = _run(tmp_path, capsys, "w.prom",
                        _scrape() + "# EOF\n" + _scrape(20, 60, None, (14, 8, 2)))
    assert code == 0, out
    assert "counter resets" not in out and "accepted 0" not in out and "accepted unknown" in out
    assert f"no {P}num_accepted_tokens_total counter in 1 scrape(s): {f} scrape 2" in out
    r = sm.read_files([str(f)])
    (iv,) = r.intervals
    assert r.resets == 0 and (iv.drafts, iv.draft_tokens, iv.accepted) == (10, 30, None)
    assert iv.figures()["spec_decode_per_position_acceptance_rates"] == pytest.approx([0.7, 0.4, 0.1])


def test_per_position_series_absent_from_one_scrape_is_unknown_not_a_reset(tmp_path):
    f = tmp_path / "w.prom"
    f.write_text(_scrape() + "# EOF\n" + _scrape(20, 60, 26, ()))
    r = sm.read_files([str(f)])
    (iv,) = r.intervals
    assert r.resets == 0 and iv.accepted == 14 and iv.accepted_per_pos is None
    assert iv.figures()["spec_decode_per_position_acceptance_rates"] is None
    assert any("per-position acceptance unknown" in n and f"{f} scrape 2" in n for n in r.notes)


# --- 3. counters that contradict each other ---------------------------------------------------------

def test_per_position_above_drafts_is_exit_2(tmp_path, capsys):
    # 100 drafts, 700 accepted at position 0: more than once per draft
    f, code, out = _run(tmp_path, capsys, "m.prom", _scrape(100, 3000, 1500, (700, 500, 300)))
    assert code == 2, out
    assert str(f) in out and f'{P}num_accepted_tokens_per_pos_total{{position="0"}} 700' in out
    assert f"> {P}num_drafts_total 100" in out and out.strip().count("\n") == 0


def test_per_position_sum_above_accepted_is_exit_2(tmp_path, capsys):
    # positions 700 + 900 + 300 = 1900 > 1500 accepted (each at most the 1000 drafts)
    f, code, out = _run(tmp_path, capsys, "m.prom", _scrape(1000, 3000, 1500, (700, 900, 300)))
    assert code == 2, out
    assert str(f) in out and f"{P}num_accepted_tokens_per_pos_total summed over positions 1900" in out
    assert f"> {P}num_accepted_tokens_total 1500" in out


def test_contradicting_difference_between_scrapes_is_refused(tmp_path):
    # each scrape consistent alone; between them 10 drafts but 15 more accepted at position 0
    a, b = tmp_path / "a.prom", tmp_path / "b.prom"
    a.write_text(_scrape(10, 30, 12, (7, 4, 1)))
    b.write_text(_scrape(20, 60, 30, (22, 7, 1)))
    with pytest.raises(UserError, match="between these scrapes") as e:
        sm.read_files([str(a), str(b)])
    assert f'position="0"}} 15 > {P}num_drafts_total 10' in str(e.value)


# --- 2. vLLM V0 lines -----------------------------------------------------------------------------------

def test_v0_difference_accepting_more_than_drafted_is_exit_2_with_line(tmp_path, capsys):
    # 150 of 300, then 300 of 301: +150 accepted of +1 drafted between lines 1 and 2
    f, code, out = _run(tmp_path, capsys, "v0.log", _v0(3, 150, 300) + "\n" + _v0(5, 300, 301) + "\n")
    assert code == 2, out
    assert f"{f}:2" in out and f"since {f}:1" in out and "150" in out and "k 3 -> 5" in out
    assert out.strip().count("\n") == 0


def test_v0_change_of_k_is_counted_and_noted(tmp_path, capsys):
    # 12 of 30 at k=3, then 20 of 60 at k=5: +8 of +30, but drafts = 30 / k with which k?
    f, code, out = _run(tmp_path, capsys, "v0.log", _v0(3, 12, 30) + "\n" + _v0(5, 20, 60) + "\n")
    assert code == 0, out
    assert f"Number of speculative tokens changed 1 time(s) between consecutive V0 lines: {f}:2 (3 -> 5)" in out
    r = sm.read_files([str(f)])
    a, b = r.intervals
    assert a.drafts == 10 and (b.accepted, b.draft_tokens, b.drafts) == (8, 30, None)
    assert b.printed["speculative_tokens_before"] == 3
    assert not any("vLLM 0.8" in n for n in r.notes)


def test_per_position_gap_or_changed_positions_are_unknown_with_a_note(tmp_path):
    # position 1 absent: not 0; then 3 positions -> 5 (k changed) between two scrapes: not a reset
    gap = tmp_path / "gap.prom"
    gap.write_text(_scrape().replace(f'{P}num_accepted_tokens_per_pos_total{{engine="0",position="1"}} 4\n', ""))
    r = sm.read_files([str(gap)])
    assert r.intervals[0].accepted_per_pos is None and r.intervals[0].accepted == 12
    assert any("lacks a position below the highest" in n and f"{gap} scrape 1" in n for n in r.notes)
    k = tmp_path / "k.prom"
    k.write_text(_scrape() + "# EOF\n" + _scrape(20, 60, 26, (13, 8, 3, 1, 1)))
    r = sm.read_files([str(k)])
    assert r.resets == 0 and r.intervals[0].accepted_per_pos is None and r.intervals[0].accepted == 14
    assert any("different positions" in n and f"{k} scrape 1 -> {k} scrape 2" in n for n in r.notes)
