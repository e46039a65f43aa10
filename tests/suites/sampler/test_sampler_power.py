"""The audit catches small losses: samplers written from the math with a planted loss (1 % at
one position, a smoothed draft, acceptance x 0.97, the per-token residual in block
verification, seeded-only and temperature-only bugs) come out LOSSY on every seed tried, at the
default sample count of the cases that target them, while exact samplers of other
constructions stay EXACT. Each test audits only the battery cases its loss concerns (the
others cannot see it), so it stays fast; the power statement says which case covers what."""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch
from rich.console import Console

from samspec_bench.bench.rejection import samspec_logits_sampler, samspec_sampler
from samspec_bench.bench.rejection.loop import loop_logits_sampler, loop_sampler
from samspec_bench.suites.sampler import adapters, controls
from samspec_bench.suites.sampler.adapters import Audited, adapt
from samspec_bench.suites.sampler.audit import audit, plan_cases, where
from samspec_bench.suites.sampler.battery import build_battery
from samspec_bench.suites.sampler.config import SamplerConfig
from samspec_bench.suites.sampler.power import headline, mark_not_applicable, planned_power
from samspec_bench.suites.sampler.running import print_power

SEEDS = (0, 1, 2)


def _cfg(seed: int, **over) -> SamplerConfig:
    # max_vocab keeps the greedy check off the 151,936-token batches (the cases are picked below)
    return SamplerConfig(**{"seed": seed, "speed": False, "max_vocab": 1000, **over})


def _audit(fn, seed, *prefixes, logits_fn=None, shape="probs", **over):
    cfg = _cfg(seed, **over)
    cases = [c for c in build_battery(cfg) if c.name.startswith(prefixes)]
    assert cases, prefixes
    a = Audited("t", "t", "test", fn, "contract", logits_fn, shape=shape)
    return audit(a, cfg, cases)


def _where(rec) -> list[str]:
    return [where(e) for e in rec["evidence"] if "case" in e]


# ------------------------------------------------------------------------- lossy on every seed


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("mode", ["over", "under", "leak"])
@pytest.mark.parametrize("position", [0, 4])
def test_a_planted_loss_of_one_percent_at_one_position_is_lossy(mode, position, seed):
    rec = _audit(controls.planted_loss(mode, position, 0.01), seed, "power-")
    assert rec["verdict"] == "LOSSY", rec["power"]
    # the evidence points at the position (or, for over-acceptance, at A >= position + 1)
    assert any(w.endswith(f"token@{position}") or w.endswith(f"A>={position + 1}") for w in _where(rec)), _where(rec)


@pytest.mark.parametrize("seed", SEEDS)
def test_a_smoothed_draft_distribution_is_lossy(seed):
    rec = _audit(controls.smoothed_draft_demo, seed, "power-")
    assert rec["verdict"] == "LOSSY"
    # it accepts more than any exact sampler can: the over-acceptance bound decides
    assert any(e["kind"] == "over-acceptance" for e in rec["evidence"])


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("position", [1, 4])
def test_acceptance_times_097_at_one_position_is_lossy(position, seed):
    rec = _audit(controls.scaled_acceptance(position, 0.97), seed, "power-")
    assert rec["verdict"] == "LOSSY"
    assert any(w.endswith(f"token@{position}") for w in _where(rec))


@pytest.mark.parametrize("seed", SEEDS)
def test_block_verification_with_the_per_token_residual_is_lossy(seed):
    rec = _audit(controls.block_verification_token_residual_demo, seed, "bv-")
    assert rec["verdict"] == "LOSSY"
    assert any(w.startswith("bv-v3-k2/residual") and w.endswith("token@1") for w in _where(rec))


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("fn", [controls.seeded_reuse_demo, controls.seeded_scaled_demo], ids=["reuse", "scaled"])
def test_seeded_only_bugs_are_lossy_and_only_seeded_requests_fail(fn, seed):
    rec = _audit(fn, seed, "power-", "bv-")
    assert rec["verdict"] == "LOSSY"
    failing = {e["template"] for e in rec["evidence"] if "template" in e}
    assert failing and all(t.endswith("/seeded") for t in failing), failing


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("fn", [controls.temperature_residual_demo, controls.temperature_bonus_demo,
                                controls.top_p_before_temperature_demo], ids=["residual", "bonus", "top-p"])
def test_temperature_only_bugs_are_lossy_through_the_logits_shape(fn, seed):
    wrapped, shape, _ = adapt(fn, "test:logits")
    assert shape == "logits"
    rec = _audit(None, seed, "logits-", "power-", logits_fn=wrapped, shape="logits")
    assert rec["verdict"] == "LOSSY"
    # exact at temperature 1: the probability cases (run as log p at T = 1) and T = 1.0 templates pass
    assert all(e["case"].startswith("logits-") and not e["template"].startswith("T=1.0,") for e in rec["evidence"]
               if "case" in e), _where(rec)


# ------------------------------------------------------------------------- exact on every seed


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("fn", [samspec_sampler, controls.token_rule_sampler, controls.block_verification],
                         ids=["samspec", "token-rule", "block-verification"])
def test_exact_samplers_of_different_construction_stay_exact(fn, seed):
    rec = _audit(fn, seed, "power-", "bv-", "flat-", "probs-", "mixed-")
    assert rec["verdict"] == "EXACT", rec["evidence"]
    assert rec["greedy"]["mismatches"] == 0 and not rec["mutated_inputs"]


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("logits_fn", [samspec_logits_sampler, controls.token_rule_logits_sampler],
                         ids=["samspec", "token-rule"])
def test_exact_logits_level_samplers_stay_exact(logits_fn, seed):
    wrapped, shape, _ = adapt(logits_fn, "test:logits")
    assert shape == "logits"
    rec = _audit(None, seed, "logits-", "power-", "bv-", logits_fn=wrapped, shape="logits")
    assert rec["verdict"] == "EXACT", rec["evidence"]
    assert rec["greedy"]["by_shape"][0]["shape"] == "logits" and rec["greedy"]["mismatches"] == 0


@pytest.mark.slow
def test_the_loop_reference_stays_exact():
    # about 40 s: the loop reference walks requests and positions in Python
    rec = _audit(loop_sampler, 0, "power-", "bv-", "logits-", logits_fn=loop_logits_sampler)
    assert rec["verdict"] == "EXACT", rec["evidence"]
    assert rec["acceptance_matches_token_rule"]


def test_block_verification_accepts_more_than_the_token_rule_and_stays_exact():
    rec = _audit(controls.block_verification, 0, "bv-")
    assert rec["verdict"] == "EXACT" and rec["acceptance_matches_token_rule"] is False
    acc = [e for e in rec["acceptance_evidence"] if e["template"] == "residual"][0]
    assert acc["observed_mean_accepted"] > acc["expected_mean_accepted"] + 0.1


# ------------------------------------------------------------------------- the worked examples


def _docstring_examples() -> dict[str, str]:
    """The two code examples of the adapters module's docstring, dedented."""
    doc = adapters.__doc__
    blocks = re.findall(r"\n((?:       .*\n|\n)+)", doc)
    code = [b for b in blocks if "def verify" in b]
    assert len(code) == 2
    return {"probs": "\n".join(line[7:] for line in code[0].splitlines()
                                if not line.strip().startswith("samspec-bench")),
            "logits": "\n".join(line[7:] for line in code[1].splitlines())}


@pytest.mark.parametrize("shape", ["probs", "logits"])
def test_the_documented_examples_are_exact(shape):
    ns: dict = {}
    exec(_docstring_examples()[shape], ns)  # noqa: S102 - our own documentation
    fn, detected, style = adapt(ns["verify"], "mysampler:verify")
    assert detected == shape and style == "contract"
    cases = ("bv-", "mixed-layout-v20") if shape == "probs" else ("bv-", "logits-")
    rec = _audit(fn if shape == "probs" else None, 0, *cases, samples=1000,
                 logits_fn=fn if shape == "logits" else None, shape=shape)
    assert rec["verdict"] == "EXACT", rec["evidence"]


# ------------------------------------------------------------------------- the power statement


def test_the_default_run_detects_a_one_percent_loss_at_every_position():
    cfg = SamplerConfig()
    power = planned_power(build_battery(cfg), cfg)
    assert power["detects_target_everywhere"], power["positions"]
    assert [p["position"] for p in power["positions"]] == [0, 1, 2, 3, 4, "bonus"]
    assert all(p["case"] == "power-v4-k5" and p["mdd"] <= 0.01 for p in power["positions"])
    assert headline(power).startswith("A loss of 1% at any single position")
    # every template of every case states its smallest detectable loss per position
    assert {r["case"] for r in power["templates"]} == {c.name for c in build_battery(cfg)}


def test_fewer_samples_lose_the_one_percent_power_and_say_so():
    cfg = SamplerConfig(samples=1000)
    power = planned_power(build_battery(cfg), cfg)
    assert not power["detects_target_everywhere"]
    assert "NOT detected" in headline(power)
    assert all(p["mdd"] > 0.01 for p in power["positions"])


def test_a_headline_with_no_detectable_loss_says_so_not_an_empty_list():
    # --alpha 1e-320: every per-test alpha underflows, no position has a detectable loss
    power = {"target_tv": 0.01, "power": 0.8, "positions": [{"position": 0, "mdd": None, "case": "c"},
                                                             {"position": "bonus", "mdd": None, "case": "c"}]}
    line = headline(power)
    assert "NOT detected with 80% power at position(s) 0, bonus" in line
    assert line.endswith("per position: none: no loss is detectable at any position with these samples and --alpha.")


def test_observed_power_is_recorded_per_test():
    rec = _audit(samspec_sampler, 0, "power-")
    pos = [p for p in rec["power"] if p["kind"] in ("token", "bonus")]
    assert len(pos) == 12 and all(p["n"] > 13000 and 0 < p["mdd"] < 0.01 for p in pos)
    over = [p for p in rec["power"] if p["kind"] == "over-acceptance"]
    assert len(over) == 2 and all(np.isfinite(p["mdd"]) for p in over)


def _leak_5pct(p, q, x, j, seeded, rows):
    """The recovered law with 5 % of its mass moved onto the draft token."""
    w = controls._residual(p, q)
    w = 0.95 * w / w.sum(1, keepdim=True)
    w[torch.arange(x.numel()), x] += 0.05
    return w


def _leaky_two_level_sampler(inputs):
    return controls.token_rule(controls._batch(inputs), bonus_ids=inputs.bonus_token_ids, residual=_leak_5pct)


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 1])
def test_a_five_percent_leak_is_caught_in_the_two_level_draw(seed):
    # about 20 s each: 2,000 trials at vocabularies of 32,000 and 151,936
    # the run step's vocabularies: the low-probability draft of the leak template sits in a
    # block of the two-level draw; a 5 % leak of it into the recovered law is a loss of 0.048
    rec = _audit(_leaky_two_level_sampler, seed, "leak-", max_vocab=151936)
    assert rec["verdict"] == "LOSSY"
    hits = {w.split("/")[0] for w in _where(rec) if w.endswith("leak/token@0")}
    assert hits == {"leak-v32000-k1-3", "leak-v151936-k1-3"}, _where(rec)


def _power_for(*audited):
    """The power statement of a run auditing these (name, probability fn, logits fn) samplers."""
    cfg = SamplerConfig(samples=1000, max_vocab=60)
    cases = build_battery(cfg)
    records = [{"name": n, "verdict": "EXACT", "not_applicable": plan_cases(Audited(n, n, "t", fn, "contract", lfn),
                                                                            cases)[1]} for n, fn, lfn in audited]
    records.append({"name": "vllm", "verdict": "SKIPPED", "reason": "not installed"})   # ran nothing: not counted
    return mark_not_applicable(planned_power(cases, cfg), records)


def test_logits_path_rows_are_marked_not_applicable_for_probability_only_samplers():
    """A probability-only sampler does not run the logits-path cases: their power rows name it
    and why, counted; rows it runs name nobody; the headline comes from cases every sampler runs."""
    power = _power_for(("samspec", samspec_sampler, samspec_logits_sampler), ("token-rule", loop_sampler, None))
    logits = [r for r in power["templates"] if r["logits_only"]]
    assert logits and all(r["case"].startswith("logits-path") for r in logits)
    assert all(set(r["not_applicable_to"]) == {"token-rule"} and r["run"] for r in logits)
    assert "processed probabilities" in logits[0]["not_applicable_to"]["token-rule"]
    assert all(not r["not_applicable_to"] and r["run"] for r in power["templates"] if not r["logits_only"])
    na = power["not_applicable"]
    assert (na["templates"], na["templates_run_by_none"], na["samplers"]) == (len(logits), 0, ["token-rule"])
    assert all(not p["case"].startswith("logits-path") for p in power["positions"])


def test_the_power_table_marks_or_leaves_out_rows_the_audited_samplers_do_not_run():

    def printed(power):
        console = Console(width=400, record=True)
        print_power(power, console)
        return console.export_text()

    mixed = printed(_power_for(("samspec", samspec_sampler, samspec_logits_sampler), ("token-rule", loop_sampler, None)))
    rows = [ln for ln in mixed.splitlines() if "logits-path-v32/" in ln]
    assert len(rows) == 8 and all(" * " in ln for ln in rows)   # 4 parameter sets x (rejects, reaches)
    assert "* 8 row(s) n/a for token-rule: the probability shape receives processed probabilities" in mixed
    probs_only = _power_for(("token-rule", loop_sampler, None))
    assert probs_only["not_applicable"]["templates_run_by_none"] == 12   # the seeded twins too, in result.json
    text = printed(probs_only)
    assert "logits-path-v32/" not in text and "power-v4-k5/sure" in text
    assert "8 row(s) left out (logits-path-v32): no audited sampler runs them" in text
