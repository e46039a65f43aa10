"""`accept --dev-split F` (suites/accept/heldout.py): groups stay on one side, the dev side
chooses and the held-out side is reported, both sides add up to the pooled counts, bad input."""

from __future__ import annotations

import json
from collections import defaultdict
from types import SimpleNamespace

import numpy as np
import pytest

from samspec_bench import cli
from samspec_bench.bench.draft_config import DraftConfig
from samspec_bench.errors import UserError
from samspec_bench.metrics import AcceptanceCounts
from samspec_bench.suites.accept import heldout

QWEN = "qwen25math_math_100x8.jsonl"


def _items(groups: list[str]) -> list:
    return [SimpleNamespace(group=g, id=f"{g}:{i}", source="t.jsonl", line=i, sub=None) for i, g in enumerate(groups)]


def test_a_groups_responses_stay_on_one_side_and_the_seed_fixes_the_split():
    items = _items([f"g{i % 10}" for i in range(80)])   # 10 groups of 8, interleaved
    sides, groups = heldout.split_sides(items, 0.3, seed=4)
    assert groups == {"dev": 3, "heldout": 7}
    by_group = defaultdict(set)
    for it in items:
        by_group[it.group].add(sides[f"t.jsonl:{it.line}"])
    assert all(len(s) == 1 for s in by_group.values())
    assert sum(s == {"dev"} for s in by_group.values()) == 3
    assert heldout.split_sides(items, 0.3, seed=4)[0] == sides
    assert any(heldout.split_sides(items, 0.3, seed=s)[0] != sides for s in range(5, 10))
    assert heldout.split_sides(_items(["a", "b"]), 0.99, 0)[1] == {"dev": 1, "heldout": 1}   # never a side empty
    # a later model turn (suites/accept/turns.py gives it a group of its own) stays with its response
    turn = SimpleNamespace(group="g#3#7.t1", id="x.t1", source="t.jsonl", line=7, sub="t1", turn=1,
                           response_group="g#3")
    sides, groups = heldout.split_sides(_items(["g#3", "h"]) + [turn], 0.5, 0)
    assert groups == {"dev": 1, "heldout": 1} and sides["t.jsonl:7#t1"] == sides["t.jsonl:0"]
    with pytest.raises(UserError, match="--dev-split"):
        heldout.split_sides(_items(["a"] * 5), 0.5, 0)


def _counts(steps: int, tokens: int, drafted: int) -> AcceptanceCounts:
    """`steps` verify steps that each drafted drafted/steps tokens and emitted tokens/steps."""
    d = np.full(steps, drafted // steps, dtype=np.int64)
    e = np.full(steps, tokens // steps, dtype=np.int64)
    return AcceptanceCounts.from_arrays(d, e - 1, e)


def test_the_dev_side_chooses_and_the_held_out_side_is_reported():
    """k=3 wins on dev and k=8 held out: the family's choice is k=3 (dev), its reported figures
    are held out; a strategy family is chosen on its own."""
    a, b = DraftConfig(drafter="sam", k=3), DraftConfig(drafter="sam", k=8)
    s = DraftConfig(drafter="sam-fixed", k=3, strategy="seed:k=3")
    runnable = [a, b, s]
    per_side = [{"dev": _counts(10, 30, 20), "heldout": _counts(10, 20, 20)},
                {"dev": _counts(10, 20, 20), "heldout": _counts(10, 40, 80)},
                {"dev": _counts(10, 40, 30), "heldout": _counts(10, 10, 30)}]
    costs = {3: {"ratio": 1.0}, 8: {"ratio": 1.0}}
    block = heldout.split_block(runnable, per_side, costs, 0.5, 0, {"dev": 1, "heldout": 1}, {"dev": 5, "heldout": 5})
    assert block["chosen"] == {"sam@own": a.label, "seed@own": s.label}
    assert block["best"] == s.label and block["best_heldout"]["tokens_per_step"] == pytest.approx(1.0)
    assert block["heldout"][a.label]["tokens_per_step"] == pytest.approx(2.0)
    assert block["dev"][a.label]["speedup_estimate"] == pytest.approx(3.0)
    lines = heldout.split_lines(block)
    assert "HELD-OUT" in lines[0] and any(a.label in ln and ln.rstrip().endswith("chosen") for ln in lines)


@pytest.mark.slow
def test_accept_dev_split_end_to_end(traces_dir, qwen3_tokenizer_dir, tmp_path, capsys):
    src = tmp_path / QWEN
    with (traces_dir / QWEN).open(encoding="utf-8") as f:
        src.write_text("".join(next(f) for _ in range(48)), encoding="utf-8")   # 6 groups of 8
    args = ["accept", "--engine", "replay", "--traces", str(src), "--tokenizer", str(qwen3_tokenizer_dir),
            "-k", "2,4", "--sources", "own,group", "--dev-split", "0.5", "--split-seed", "1", "--workers", "1",
            "--no-progress", "--output", str(tmp_path / "out"), "--json", str(tmp_path / "r.json")]
    cli.main(args)
    out = capsys.readouterr().out
    r = json.loads((tmp_path / "r.json").read_text())
    split = r["split"]
    assert split["groups"] == {"dev": 3, "heldout": 3} and split["responses"] == {"dev": 24, "heldout": 24}
    for label, m in r["metrics"].items():   # the two sides add up to the pooled counts
        assert split["dev"][label]["steps"] + split["heldout"][label]["steps"] == m["counts"]["steps"]
        assert split["dev"][label]["tokens"] + split["heldout"][label]["tokens"] == m["counts"]["tokens"]
    assert set(split["chosen"]) == {"sam@own", "sam@own+group"} and split["best"] in split["chosen"].values()
    assert "HELD-OUT" in out and split["best"] in out
    # the split changes no record: the pooled metrics are those of the same run without it
    at = args.index("--dev-split")
    plain = args[:at] + args[at + 4:]   # without --dev-split 0.5 --split-seed 1
    plain[plain.index("--json") + 1] = str(tmp_path / "p.json")
    cli.main(plain)
    capsys.readouterr()
    p = json.loads((tmp_path / "p.json").read_text())
    assert "split" not in p and p["metrics"] == r["metrics"]


@pytest.mark.parametrize("bad", ["0", "1", "1.5", "-0.2"])
def test_a_dev_split_outside_zero_one_is_one_line_exit_2(bad, tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        cli.main(["accept", "--engine", "replay", "--traces", str(tmp_path / "x.jsonl"), "--tokenizer", str(tmp_path),
                  "--dev-split", bad, "--output", str(tmp_path)])
    assert e.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--dev-split" in err[0]
