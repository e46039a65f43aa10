"""The dominance benchmark (bench/draft_dominance.py): its table, curves and figure."""

import json

import pytest

from samspec_bench.bench import draft_dominance
from samspec_bench.sam.draft_length import EvidenceLength
from samspec_bench.sam.drafters import arctic_available

pytestmark = pytest.mark.skipif(not arctic_available(), reason="needs arctic-inference (the 'suffix' drafter)")


def test_rows_curves_and_figure(traces_dir, qwen3_tokenizer_dir, tmp_path, capsys):
    out, fig = tmp_path / "d.json", tmp_path / "pareto.png"
    draft_dominance.main(["--traces", str(traces_dir / "qwen25math_math_100x8.jsonl"),
                          str(traces_dir / "tora70b_gsm8k.jsonl"), "--tokenizer", str(qwen3_tokenizer_dir),
                          "-k", "2", "--limit-groups", "1", "--json", str(out), "--figure", str(fig),
                          "--costs", "0.1,0.6"])
    doc = json.loads(out.read_text())
    rows = doc["rows"]
    assert doc["share_stats"] is True and doc["sam_policy"]["spec"] == EvidenceLength().spec() == "evidence"
    # the GRPO trace has both sources; the trace without groups only its own
    assert [(r["trace"][:4], r["source"]) for r in rows] == [("qwen", "own"), ("qwen", "group"), ("tora", "own")]
    assert "no GRPO groups" in capsys.readouterr().out
    for r in rows:
        sam, fixed = r["curves"]["sam"], r["curves"]["sam_fixed"]
        assert [p["cost"] for p in sam] == [0.1, 0.6]
        assert sam[1]["drafted_per_step"] < sam[0]["drafted_per_step"]   # a dearer verify token: fewer drafted
        assert [p["k"] for p in fixed] == [1, 2]
        # the curve's last point is the table's sam-fixed replay
        assert fixed[-1]["tokens_per_step"] == r["sam_fixed"]["tokens_per_step"]
        assert fixed[-1]["drafted_per_step"] == r["sam_fixed"]["drafted_per_step"]
        assert r["dominates"] == (r["sam"]["tokens_per_step"] >= r["suffix"]["tokens_per_step"]
                                  and r["sam"]["drafted_per_step"] <= r["suffix"]["drafted_per_step"])
    assert fig.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_bad_costs_and_specs_stop_before_any_replay(tmp_path, capsys):
    assert draft_dominance.main(["--traces", str(tmp_path / "none.jsonl"), "--figure", str(tmp_path / "f.png"),
                                 "--costs", "0.2,1.5"]) == 2
    assert "--costs 0.2,1.5" in capsys.readouterr().err
    assert draft_dominance.main(["--traces", str(tmp_path / "none.jsonl"), "--sam-length", "evidence:cost=2"]) == 2
    assert "evidence:cost=2" in capsys.readouterr().err


def test_shared_stats_change_only_the_corrected_policy(traces_dir, qwen3_tokenizer_dir, capsys):
    """Sharing (the default) carries acceptance statistics across replay units, never draft content:
    a policy without the per-token correction replays the same either way."""
    def sam(spec, share):
        rows = draft_dominance.run([traces_dir / "qwen25math_math_100x8.jsonl"], str(qwen3_tokenizer_dir), [3],
                                   spec, 1, progress=lambda s: None, share_stats=share)
        return [(r["sam"]["tokens_per_step"], r["sam"]["drafted_per_step"]) for r in rows]
    assert sam("evidence:tokens=0,shape=0", True) == sam("evidence:tokens=0,shape=0", False)
    assert sam("evidence:tokens=2", True) != sam("evidence:tokens=2", False)
    assert draft_dominance.main(["--traces", str(traces_dir / "qwen25math_math_100x8.jsonl"), "--tokenizer",
                                 str(qwen3_tokenizer_dir), "-k", "2", "--limit-groups", "1", "--no-share-stats",
                                 "--sam-length", "evidence:tokens=2"]) in (0, 1)
    assert "a fresh record per replay unit" in capsys.readouterr().out
