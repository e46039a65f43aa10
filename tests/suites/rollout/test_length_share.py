"""--length-group-share: the responses of one prompt drawn with correlated lengths (a Gaussian
copula, each length keeping --length-dist's distribution), the share measured on traces (the
one-way ANOVA intraclass correlation of log length), and its refusals (suites/rollout/length_share.py)."""

import collections
import json
import math
from types import SimpleNamespace

import click
import numpy as np
import pytest
from click.testing import CliRunner

from samspec_bench.cli import main
from samspec_bench.errors import UserError
from samspec_bench.suites import rollout as ro
from samspec_bench.suites.rollout.length_share import group_share, replay_groups
from samspec_bench.suites.rollout.measured import rollout_requests
from samspec_bench.suites.rollout.replay_arm import draw

BIG = 10 ** 9   # no clipping


def _anova_icc(groups) -> float:
    """The one-way ANOVA ICC(1) of log lengths, written out plainly (unequal group sizes: n0)."""
    logs = [[math.log(x) for x in g] for g in groups if len(g) >= 2]
    k, n = len(logs), sum(len(g) for g in logs)
    grand = sum(sum(g) for g in logs) / n
    means = [sum(g) / len(g) for g in logs]
    msb = sum(len(g) * (m - grand) ** 2 for g, m in zip(logs, means)) / (k - 1)
    msw = sum((x - m) ** 2 for g, m in zip(logs, means) for x in g) / (n - k)
    n0 = (n - sum(len(g) ** 2 for g in logs) / n) / (k - 1)
    return (msb - msw) / (msb + (n0 - 1) * msw)


# ---------- drawing ----------

@pytest.mark.parametrize("seed", [0, 7])
def test_share_0_draws_exactly_the_independent_lognormal(seed):
    want = np.exp(np.random.default_rng(seed).normal(math.log(300), 0.8, 1000))
    want = np.clip(np.round(want), 4, 2000).astype(np.int64)
    got = ro.draw_lengths("lognormal:300:0.8", 1000, seed, 4, 2000, group_size=8, share=0.0)
    assert np.array_equal(got, want)
    assert np.array_equal(ro.draw_lengths("lognormal:300:0.8", 1000, seed, 4, 2000), want)   # the default


def test_share_07_gives_that_icc_and_keeps_the_lognormal():
    g, k = 8, 4000
    x = ro.draw_lengths("lognormal:300:0.8", g * k, 3, 1, BIG, group_size=g, share=0.7)
    groups = x.reshape(k, g)
    icc = _anova_icc(groups.tolist())
    assert abs(icc - 0.7) < 0.03, icc   # standard error about 0.005 at 4000 groups of 8
    logs = np.log(x)
    assert abs(np.median(logs) - math.log(300)) < 0.05 and abs(np.std(logs) - 0.8) < 0.03
    indep = ro.draw_lengths("lognormal:300:0.8", g * k, 3, 1, BIG)
    assert abs(_anova_icc(indep.reshape(k, g).tolist())) < 0.03   # today's draws: independent


def test_share_1_gives_every_response_of_a_group_the_same_length():
    x = ro.draw_lengths("lognormal:300:0.8", 8 * 50 + 3, 1, 1, BIG, group_size=8, share=1.0)   # a last short group
    for q in range(0, len(x), 8):
        assert len(set(x[q:q + 8].tolist())) == 1
    assert len(set(x.tolist())) > 10   # the groups differ
    p = ro.draw_lengths("pareto:50:1.5", 80, 1, 1, BIG, group_size=8, share=1.0).reshape(10, 8)
    assert (p == p[:, :1]).all()


def test_share_keeps_the_pareto_marginal():
    mn, alpha, n = 50.0, 1.5, 80000
    x = ro.draw_lengths("pareto:50:1.5", n, 2, 1, BIG, group_size=8, share=0.7)
    for p in (0.1, 0.5, 0.9, 0.99):
        want = mn * (1 - p) ** (-1 / alpha)
        assert abs(np.quantile(x, p) / want - 1) < 0.05, (p, np.quantile(x, p), want)
    assert _anova_icc(x.reshape(-1, 8).tolist()) > 0.4   # and a prompt's responses are alike


def test_share_keeps_the_trace_marginal():
    trace = np.array([5, 20, 20, 80, 300, 1200, 4000])   # 20 twice: drawn twice as often
    x = ro.draw_lengths("trace", 70000, 4, 1, BIG, trace_lengths=trace, group_size=8, share=0.7)
    assert set(x.tolist()) <= set(trace.tolist())
    freq = {v: np.mean(x == v) for v in set(trace.tolist())}
    for v, f in freq.items():
        assert abs(f - np.mean(trace == v)) < 0.02, (v, f)
    assert _anova_icc(x.reshape(-1, 8).tolist()) > 0.4   # and a prompt's responses are alike


def test_fixed_lengths_refuse_a_share():
    with pytest.raises(UserError, match="--length-group-share 0.3") as e:
        ro.draw_lengths("fixed:50", 8, 0, 1, 100, group_size=4, share=0.3)
    assert "drop it" in str(e.value) and "\n" not in str(e.value)


def test_both_paths_lay_requests_out_prompt_major():
    """Request q is prompt q // group_size's: a replay's draw and a measured engine's requests."""
    rep = SimpleNamespace(idx=[0, 1, 2, 0, 3, 4, 5, 3], group_size=4, n_prompts=2,
                          pairs=[([1], [1] * n) for n in range(3, 9)], trace_lengths=np.arange(3, 9))
    cfg = ro.RolloutConfig(length_dist="lognormal:300:0.8", length_group_share=1.0, min_len=1, max_response_len=BIG)
    lengths, stretch = draw(cfg, rep)
    assert stretch and len(set(lengths[:4].tolist())) == 1 and len(set(lengths[4:].tolist())) == 1
    lengths = ro.draw_lengths("lognormal:32:0.8", 4 * 3, 0, 1, BIG, group_size=3, share=1.0)
    reqs = rollout_requests(ro.RolloutConfig(engine="reference"), None, 4, 3, lengths)
    for r in reqs:
        assert r.group == r.req_id // 3 and r.params.max_tokens == lengths[r.group * 3]


# ---------- the measured share ----------

def test_group_share_on_groups_with_a_known_answer():
    assert group_share([[10, 10, 10], [50, 50], [400, 400, 400]])["share"] == 1.0   # identical within: 1
    assert group_share([[10, 50, 400], [10, 50, 400], [400, 10, 50]])["share"] == 0.0   # nothing between (clipped)
    e = math.e
    got = group_share([[1, e ** 0.2], [e, e ** 1.2], [e ** 2, e ** 2.2]])   # MSB 2, MSW 0.02, n0 2
    assert got == {"share": pytest.approx(1.98 / 2.02), "groups": 3, "responses": 6}
    assert group_share([[10, 20], [30, 40], [7]]) == {"share": pytest.approx(_anova_icc([[10, 20], [30, 40]])),
                                                      "groups": 2, "responses": 4}   # a group of one left out
    assert group_share([[10, 20], [30]]) is None   # fewer than 2 groups of 2 or more
    assert group_share([[5, 5], [5, 5]])["share"] == 0.0   # no spread at all: nothing shared


def test_replay_groups_count_a_trace_group_once():
    # 3 prompts x 2: the third prompt replays the first trace group again (--prompts beyond the traces)
    rep = SimpleNamespace(idx=[0, 1, 2, 3, 1, 0], group_size=2, pairs=[([1], [1] * n) for n in (10, 20, 30, 40)])
    assert replay_groups(rep) == [[10, 20], [30, 40]]


def test_traces_share_of_the_shared_trace(shared_data, tmp_path):
    """Measured in tokens (the replay's unit: the shared qwen3 tokenizer, responses as raw text),
    against a plain ANOVA over the file; about 0.79 in tokens (0.76 in characters)."""
    from tokenizers import Tokenizer

    path = shared_data / "traces" / "qwen25math_math_100x8.jsonl"
    tok = Tokenizer.from_file(str(shared_data / "tokenizers" / "qwen3" / "tokenizer.json"))
    groups = collections.defaultdict(list)
    for line in path.read_text().splitlines():
        r = json.loads(line)
        groups[r["group"]].append(len(tok.encode(r["response"], add_special_tokens=False).ids))
    want = _anova_icc(list(groups.values()))
    assert 0.72 < want < 0.85
    res = CliRunner().invoke(ro.command, ["--data-dir", str(shared_data), "--arms", "off", "--length-dist",
                                          "lognormal:300:0.8", "--length-group-share", "traces", "--draws", "1",
                                          "--output", str(tmp_path / "o"), "--json", str(tmp_path / "r.json")])
    assert res.exit_code == 0, res.output
    w = json.loads((tmp_path / "r.json").read_text())["metrics"]["workload"]
    assert abs(w["length_group_share_traces"] - want) < 0.005, (w["length_group_share_traces"], want)
    assert w["length_group_share"] == w["length_group_share_traces"]
    assert w["length_group_share_traces_basis"] == {"groups": 100, "responses": 800, "unit": "tokens"}
    assert (f"share {want:.2f} of their log-length variance in the traces (100 groups" in res.output
            and f"drawn with {want:.2f} (--length-group-share)" in res.output), res.output


# ---------- refusals: exit 2, one line ----------

_WRAPPER = click.Command("samspec-bench", add_help_option=False, context_settings={"ignore_unknown_options": True},
                         params=[click.Argument(["argv"], nargs=-1, type=click.UNPROCESSED)],
                         callback=lambda argv: main(list(argv)))


@pytest.mark.parametrize("args, needle", [
    (["--length-dist", "lognormal:300:0.8", "--length-group-share", "1.5"],
     "--length-group-share 1.5: give a number in [0, 1]"),
    (["--length-dist", "lognormal:300:0.8", "--length-group-share", "-0.1"], "--length-group-share -0.1: give"),
    (["--length-dist", "lognormal:300:0.8", "--length-group-share", "nan"], "--length-group-share 'nan': give"),
    (["--length-dist", "lognormal:300:0.8", "--length-group-share", "inf"], "--length-group-share 'inf': give"),
    (["--length-dist", "lognormal:300:0.8", "--length-group-share", "half"], "--length-group-share 'half': give"),
    (["--length-group-share", "0.5"], "--length-group-share 0.5: it correlates the drawn lengths"),
    (["--length-group-share", "traces"], "--length-group-share traces: it correlates the drawn lengths"),
    (["--length-dist", "fixed:50", "--length-group-share", "0.3"], "--length-group-share 0.3: it correlates"),
    (["--engine", "reference", "--length-group-share", "traces"],
     "--length-group-share traces with --engine reference"),
    (["--engine", "reference", "--length-dist", "fixed:9", "--length-group-share", "0.2"],
     "--length-group-share 0.2: it correlates"),
    # --length-rank-share (length_order.py), refused alike
    (["--length-dist", "lognormal:300:0.8", "--length-rank-share", "1.5"], "--length-rank-share 1.5: give a number"),
    (["--length-dist", "lognormal:300:0.8", "--length-rank-share", "nan"], "--length-rank-share nan: give"),
    (["--length-rank-share", "0.5"], "--length-rank-share 0.5: it correlates the drawn lengths"),
    (["--length-dist", "fixed:50", "--length-rank-share", "0.3"], "--length-rank-share 0.3: it correlates"),
    (["--engine", "reference", "--length-dist", "lognormal:32:0.8", "--length-rank-share", "0.5"],
     "--length-rank-share 0.5 with --engine reference"),
])
def test_the_cli_refuses_a_share_in_one_line_with_exit_2(shared_data, tmp_path, args, needle):
    res = CliRunner().invoke(_WRAPPER, ["rollout", "--data-dir", str(shared_data), "--output", str(tmp_path / "o"),
                                        *args])
    assert res.exit_code == 2, res.output
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: " + needle), res.stderr
    assert "traces" in lines[0] or "drop it" in lines[0]   # the fix is named
    assert not (tmp_path / "o").exists()
