"""curves: a --margin that no equivalence test reads is refused (nothing silent).

Speed rows are ratios B/A with an interval, not equivalence tests: `--margin speed=1%`,
`--margin throughput=5` or a speed tag used to be accepted and ignored (exit 0). Now a one-line
error naming the argument and the families that take margins, exit 2. Margins on learning
families, metrics and tags keep working.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from samspec_bench.cli import main
from samspec_bench.errors import UserError
from samspec_bench.suites import curves
from samspec_bench.suites.curves import build_config

BASE = {"critic/score/mean": 0.6, "response_length/mean": 300.0, "actor/entropy": 0.3, "timing_s/gen": 30.0,
        "timing_s/step": 100.0, "perf/throughput": 1000.0, "actor/pg_loss": 0.1}
LEARNING = "reward, response_length, entropy, validation, kl"


def _log(path: Path, seed: int) -> Path:
    rng = np.random.default_rng(seed)
    data = {k: v * (1 + 0.01 * rng.standard_normal(40)) for k, v in BASE.items()}
    path.write_text("".join(" - ".join([f"step:{i + 1}"] + [f"{k}:{float(v[i])!r}" for k, v in data.items()]) + "\n"
                            for i in range(40)))
    return path


@pytest.fixture(scope="module")
def logs(tmp_path_factory) -> tuple[str, str]:
    d = tmp_path_factory.mktemp("logs")
    return str(_log(d / "A.log", 1)), str(_log(d / "B.log", 2))


def _execute(logs, tmp_path, *margins: str, **over) -> dict:
    ctx = curves.command.make_context("curves", [], resilient_parsing=True)
    p = {k: v for k, v in ctx.params.items() if k not in ("output", "json_path")}
    p.update(runs=logs, margins=margins, **over)
    out = tmp_path / "r.json"
    curves.execute(build_config(**p), output=str(tmp_path / "out"), json_path=str(out))
    return json.loads(out.read_text())


@pytest.mark.parametrize("arg, what", [("speed=1%", "the speed family"), ("throughput=5", "throughput (a speed metric)"),
                                       ("gen_time=2", "gen_time (a speed metric)"),
                                       ("timing_s/gen=0.1", "timing_s/gen (a speed metric)"),
                                       ("timing_s/step=5%", "timing_s/step (a speed metric)")])
def test_a_margin_on_a_speed_ratio_is_refused_naming_the_families_that_take_one(arg, what, logs, tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        main(["curves", *logs, "--margin", arg, "--output", str(tmp_path / "out")])
    err = capsys.readouterr().err.strip()
    assert e.value.code == 2 and len(err.splitlines()) == 1, err
    assert err == (f"error: --margin {arg}: {what} is compared as a ratio B/A with an interval, not by an equivalence "
                   f"test, so no margin applies; margins are for the families {LEARNING} (their metrics and tags) "
                   "and tags given with --metric")
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").glob("curves-*/result.json"))


def test_a_speed_metric_tag_and_a_requested_subset_name_the_right_families(logs, tmp_path):
    with pytest.raises(UserError, match=r"^--margin actor/pg_loss=0.1: actor/pg_loss \(a speed metric\) .* the "
                                        r"families reward, kl \(their"):
        _execute(logs, tmp_path, "actor/pg_loss=0.1", speed_metrics=("actor/pg_loss",), families="reward,kl,speed")
    # "extra" (the family name of --metric tags) is no family a margin reads
    with pytest.raises(UserError, match=r"^--margin extra=5%: names no compared family, metric or tag"):
        _execute(logs, tmp_path, "extra=5%", metrics=("actor/pg_loss",))


def test_margins_on_learning_families_metrics_and_tags_still_apply(logs, tmp_path):
    res = _execute(logs, tmp_path, "reward=0.02", "length=5%", "actor/entropy=0.01", "actor/pg_loss=0.5",
                   metrics=("actor/pg_loss",))
    learning = res["metrics"]["comparisons"]["B"]["learning"]
    assert learning["reward"]["margin"].startswith("±0.02")
    assert learning["length"]["margin"].startswith("±5%")
    assert learning["entropy"]["margin"].startswith("±0.01")
    assert learning["actor/pg_loss"]["margin"].startswith("±0.5")
    # the same tag as a learning metric (--metric) and not a speed one: its margin is read
    res = _execute(logs, tmp_path, "timing_s/gen=1", metrics=("timing_s/gen",), families="reward")
    assert res["metrics"]["comparisons"]["B"]["learning"]["timing_s/gen"]["margin"].startswith("±1")
