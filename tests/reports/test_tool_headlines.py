"""The report names the figures of tool-facing suites as the tool does: verl's tags for curves
(the project's family beside them), `vllm bench serve`'s keys for compare and spec-metrics."""

from __future__ import annotations

from click.testing import CliRunner

from samspec_bench.cli import group
from samspec_bench.reports.collect import collect
from samspec_bench.reports.headlines import summarize


def _by_name(heads: list[dict]) -> dict[str, dict]:
    return {h["name"]: h for h in heads}


def _curves_result(normalised: bool) -> dict:
    speed = {"gen_time": {"metric": "timing_s/gen", "unit": "s", "ratio": 0.8, "ci": [0.7, 0.9], "change": "faster",
                          "source": "as logged by the trainer", "steps": 40},
             "throughput": {"metric": "perf/throughput", "unit": "tokens/s (all GPUs)" if normalised else
                            "tokens/s/GPU", "ratio": 1.3, "ci": None, "change": "faster" if normalised else "n/a",
                            "source": "as logged", "normalised": normalised}}
    learning = {"reward": {"metric": "critic/score/mean", "unit": "", "verdict": "EQUIVALENT",
                           "whole": {"diff": 0.01, "ci_tost": [-0.02, 0.03], "margin": 0.05, "steps": 40}}}
    return {"suite": "curves", "runs": [{"label": "A"}, {"label": "B"}],
            "metrics": {"baseline": "A", "metrics": [{"name": "reward"}, {"name": "throughput"}],
                        "comparisons": {"B": {"verdict": "EQUIVALENT", "counts": {}, "speed": speed,
                                              "learning": learning}}}}


def test_curves_headlines_carry_verls_tags_and_units():
    heads, gates = summarize(_curves_result(normalised=True))
    h = _by_name(heads)
    assert h["B: timing_s/gen (gen_time) ratio B/A"]["value"] == 0.8
    assert h["B: timing_s/gen (gen_time) ratio B/A"]["note"].endswith("40 steps s")
    assert h["B: critic/score/mean (reward)"]["value"] == "EQUIVALENT"
    assert "tokens/s (all GPUs)" in h["B: perf/throughput (throughput) ratio B/A"]["note"]
    assert "NOT normalised" not in h["B: perf/throughput (throughput) ratio B/A"]["note"]
    assert [g["passed"] for g in gates] == [True]


def test_an_unnormalised_throughput_says_so():
    h = _by_name(summarize(_curves_result(normalised=False))[0])
    assert "NOT normalised by GPU count" in h["B: perf/throughput (throughput) ratio B/A"]["note"]


def test_spec_metrics_headlines_from_a_real_run_folder(tmp_path):
    # two scrapes of one server: the second minus the first is what happened between them
    scrape = ("vllm:spec_decode_num_drafts_total{{engine=\"0\"}} {d}\n"
              "vllm:spec_decode_num_draft_tokens_total{{engine=\"0\"}} {t}\n"
              "vllm:spec_decode_num_accepted_tokens_total{{engine=\"0\"}} {a}\n"
              "vllm:spec_decode_num_accepted_tokens_per_pos_total{{engine=\"0\",position=\"0\"}} {p0}\n"
              "vllm:spec_decode_num_accepted_tokens_per_pos_total{{engine=\"0\",position=\"1\"}} {p1}\n")
    (tmp_path / "a.prom").write_text(scrape.format(d=10, t=20, a=5, p0=4, p1=1))
    (tmp_path / "b.prom").write_text(scrape.format(d=30, t=60, a=35, p0=20, p1=15))
    out = tmp_path / "runs"
    res = CliRunner().invoke(group, ["spec-metrics", str(tmp_path / "a.prom"), str(tmp_path / "b.prom"),
                                     "--output", str(out)])
    assert res.exit_code == 0, res.output
    (run,) = collect([next(out.iterdir())]).runs
    h = _by_name(run.headlines)
    # between the scrapes: 20 drafts, 40 drafted, 30 accepted -> 75 %, 1 + 30/20 = 2.5, positions 16/20, 14/20
    assert h["spec_decode_acceptance_rate"]["value"] == 75.0
    assert h["spec_decode_acceptance_length"]["value"] == 2.5
    assert h["per-position acceptance"]["value"] == "0.8, 0.7"
