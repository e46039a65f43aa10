"""`rollout --dev-split`: prompts split by trace group, each family's parameters chosen on the dev
prompts, the figures and the best setting reported from the held-out prompts but chosen on dev."""

import json

import pytest
from click.testing import CliRunner

from samspec_bench.errors import UserError
from samspec_bench.suites import rollout as ro
from samspec_bench.suites.rollout import heldout
from samspec_bench.suites.rollout.config import RolloutConfig
from samspec_bench.suites.rollout.replay_arm import Replay


def replay(n_prompts=6, group_size=2, groups=3):
    """Prompts cycled over `groups` trace groups of `group_size` responses (pairs numbered by group)."""
    idx = [(p % groups) * group_size + j for p in range(n_prompts) for j in range(group_size)]
    return Replay(pairs=[([1], [2])] * groups * group_size, idx=idx, n_prompts=n_prompts, group_size=group_size,
                  profiles={}, profile_s=0.0)


def test_split_keeps_a_trace_group_on_one_side():
    rep = replay()
    assert heldout.prompt_keys(rep) == [0, 2, 4, 0, 2, 4]     # prompts 0 and 3 replay the same group
    dev, held = heldout.split_prompts(rep, 0.34, seed=1)       # round(0.34 x 3) = 1 group: its 2 prompts
    assert len(dev) == 2 and sorted(dev + held) == list(range(6))
    keys = heldout.prompt_keys(rep)
    assert not {keys[p] for p in dev} & {keys[p] for p in held}
    assert len(heldout.split_prompts(rep, 0.99, seed=1)[0]) == 4   # at most all groups but one
    sub = heldout.subset(rep, [1, 4])
    assert sub.n_prompts == 2 and sub.idx == [2, 3, 2, 3]
    with pytest.raises(UserError, match="at least 2"):
        heldout.split_prompts(replay(groups=1), 0.5, seed=0)


def sp(x):
    return {"median": x, "min": x, "max": x, "n": 1, "values": [x]}


SETTINGS = [{"arm": "off", "label": "off"},
            {"arm": "always", "label": "always k=3", "source": "own"},
            {"arm": "always", "label": "always k=8", "source": "own"},
            {"arm": "strategy", "label": "seed", "strategy": "seed"},
            {"arm": "strategy", "label": "seed:k=8", "strategy": "seed:k=8"},
            {"arm": "strategy", "label": "histospec", "strategy": "histospec"}]


def metrics(totals):
    return {lbl: {"total_s": t, "spread": {"total_s": sp(t)}} for lbl, t in totals.items()}


def test_choice_per_family_and_best_on_the_dev_figures():
    m = metrics({"off": 10, "always k=3": 8, "always k=8": 9, "seed": 7, "seed:k=8": 6, "histospec": 6.5})
    got = heldout.choose(SETTINGS, m)
    assert got["chosen"] == {"source own": "always k=3", "seed@own": "seed:k=8", "histospec@history": "histospec"}
    assert got["best_setting"] == got["best_strategy"] == "seed:k=8"
    assert got["best_one_path"] == "seed:k=8"   # no trees in the sweep: the same arm


def test_best_one_path_is_chosen_among_every_arm_without_trees():
    """The tree arm wins its family and the sweep; the best one-path arm is the shortest dev total
    among every strategy arm without trees, chosen in its family or not (arctic here)."""
    settings = SETTINGS + [{"arm": "strategy", "label": "arctic", "strategy": "arctic"},
                           {"arm": "strategy", "label": "arctic:paths=4", "strategy": "arctic:paths=4"}]
    m = metrics({"off": 10, "always k=3": 8, "always k=8": 9, "seed": 7, "seed:k=8": 6, "histospec": 6.5,
                 "arctic": 5.5, "arctic:paths=4": 5})
    got = heldout.choose(settings, m)
    assert got["chosen"]["arctic@group+history"] == "arctic:paths=4" == got["best_strategy"]
    assert got["best_one_path"] == "arctic"


def test_the_held_out_figures_are_reported_but_the_dev_prompts_choose(monkeypatch):
    """Planted: on dev `seed` wins, on held-out `seed:k=8` would; the run names `seed`."""
    dev = metrics({"off": 10, "seed": 5, "seed:k=8": 7})
    held = metrics({"off": 10, "seed": 9, "seed:k=8": 6})
    calls = []

    def fake(cfg, model, rep):
        calls.append(rep.n_prompts)
        return {"settings": SETTINGS[:1] + SETTINGS[3:5], "metrics": dev if len(calls) == 1 else held}
    monkeypatch.setattr(heldout, "run_replay", fake)
    out, rep = heldout.run_heldout(RolloutConfig(dev_split=0.5, seed=0), replay(n_prompts=4, groups=4), None)
    assert calls == [2, 2] and rep.n_prompts == 2
    assert out["metrics"] is held and out["split"]["best_setting"] == "seed"
    assert out["split"]["dev"]["seed"]["total_s"]["median"] == 5
    lines = heldout.split_lines(out["split"])
    assert "HELD-OUT" in lines[0] and any("seed@own: seed (dev median total 5)" in ln for ln in lines)


def test_dev_split_run(shared_data, tmp_path):
    res = CliRunner().invoke(ro.command, ["--data-dir", str(shared_data), "--prompts", "6", "--group-size", "2",
                                          "--max-num-seqs", "4", "--arms", "off,always", "-k", "2,6",
                                          "--strategy", "seed,seed:k=6", "--dev-split", "0.5",
                                          "--output", str(tmp_path)])
    assert res.exit_code == 0, res.output
    (run,) = list(tmp_path.iterdir())
    m = json.loads((run / "result.json").read_text())["metrics"]
    split = m["split"]
    assert split["dev_prompts"] + split["heldout_prompts"] == 6 and m["workload"]["requests"] == 2 * split[
        "heldout_prompts"]
    assert set(split["chosen"]) == {"source own", "seed@own"} and m["best_setting"] == split["best_setting"]
    rows = m["strategy_table"]["rows"]
    assert {r["split"] for r in rows} == {"held-out"}
    assert sum(r["chosen_on_dev"] for r in rows if r["strategy"]) == 1
    assert "HELD-OUT" in res.output and "chosen on the dev prompts" in res.output


@pytest.mark.parametrize("value", ["0", "1", "1.5"])
def test_bad_dev_split(shared_data, tmp_path, capsys, value):
    from samspec_bench.cli import main
    with pytest.raises(SystemExit) as e:
        main(["rollout", "--data-dir", str(shared_data), "--output", str(tmp_path), "--dev-split", value])
    err = capsys.readouterr().err.strip()
    assert e.value.code == 2 and "--dev-split" in err and len(err.splitlines()) == 1, err
