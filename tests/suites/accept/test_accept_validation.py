"""`accept` on a verl run's dumps: validation generations (trainer.validation_data_dir, the same
{global_step}.jsonl naming) are kept out of the RL steps unless asked, and what was left out is
counted and printed."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from samspec_bench import cli
from samspec_bench.bench.engines.replay import EMULATED_STEPS
from samspec_bench.data import load_tokenizer
from samspec_bench.trace_formats.validation import SHAPE_REASON
from trace_fixtures import grouped_rows, write_tool_dump, write_verl_dump

QWEN = "qwen25math_math_100x8.jsonl"
HIST = "sam k=3 own+history"


@pytest.fixture(scope="module")
def verl_run(traces_dir, qwen3_tokenizer_dir, tmp_path_factory) -> tuple[Path, dict]:
    """run/rollout: steps 1-4, 8 responses each (4 prompts, 2 a step, 2 epochs); run/val: the
    validation rounds of steps 0, 2 and 4, 4 multi-turn responses each, told apart by their
    folder only (no 'reward' key)."""
    run = tmp_path_factory.mktemp("verl_run")
    tok = load_tokenizer(qwen3_tokenizer_dir)
    write_verl_dump(run / "rollout", tok, grouped_rows(traces_dir / QWEN, 4), batch=2, n=4, epochs=2)
    val = write_tool_dump(run / "val", tok, steps=[0, 2, 4])
    return run, val


def accept(args: list[str], tok: Path, out: Path, capsys, code: int = 0) -> tuple[dict | None, str]:
    argv = ["accept", *args, "--tokenizer", str(tok), "--output", str(out), "--no-progress", "--sources", "own,history"]
    if code:
        with pytest.raises(SystemExit) as e:
            cli.main(argv)
        assert e.value.code == code
        return None, capsys.readouterr().err
    cli.main([*argv, "--json", "-"])
    got = capsys.readouterr()
    return json.loads(got.out), got.err


def steps_of(result: dict) -> list:
    return [r["step"] for r in result["tables"]["by_step"][HIST]]


def test_a_validation_folder_beside_the_rollouts_is_left_out_and_said(verl_run, qwen3_tokenizer_dir, tmp_path,
                                                                      capsys):
    run, _ = verl_run
    result, err = accept(["--traces", str(run / "rollout"), "--traces", str(run / "val")], qwen3_tokenizer_dir,
                         tmp_path / "a", capsys)
    v = result["inputs"]["validation"]
    assert (v["responses"], v["excluded"], v["rollout_responses"], v["included"]) == (12, 12, 32, False)
    assert sorted(Path(f).name for f in v["files"]) == ["0.jsonl", "2.jsonl", "4.jsonl"]
    assert set(v["files"].values()) == {"in a folder named 'val'"}
    assert result["inputs"]["responses"] == 32 and steps_of(result) == [1, 2, 3, 4]
    assert result["inputs"]["tool_output"] is None   # the left-out validation turns are not counted either
    assert "validation generations: 12 response(s) in 3 file(s)" in err and "12 left out, 32 rollout" in err
    # asked for: the validation rounds are RL steps again (as before), their tool turns prefilled
    result, err = accept(["--traces", str(run / "rollout"), "--traces", str(run / "val"),
                          "--history-includes-validation"], qwen3_tokenizer_dir, tmp_path / "b", capsys)
    assert result["inputs"]["responses"] == 44 and steps_of(result) == [0, 1, 2, 3, 4]
    assert result["inputs"]["validation"]["included"] and result["inputs"]["validation"]["excluded"] == 0
    assert result["inputs"]["tool_output"]["responses"] == 12
    assert "--history-includes-validation" in err
    # steps 2 and 4 merge with the validation rounds on purpose: said so, not "pass one run's folder"
    assert result["inputs"]["merged_steps"] == 2
    assert result["inputs"]["merged_validation_folders"] == [str(run / "val")]
    assert f"{run / 'val'}: verl validation generations, their rounds included as history" in err
    assert "pass one run's" not in err


def test_validation_lines_are_known_by_their_shape_in_any_folder(verl_run, qwen3_tokenizer_dir, tmp_path, capsys):
    run, _ = verl_run
    # outside a val* folder and without the validation shape: rollouts of steps 0, 2 and 4
    gens = tmp_path / "generations"
    shutil.copytree(run / "val", gens)
    result, err = accept(["--traces", str(run / "rollout"), "--traces", str(gens)], qwen3_tokenizer_dir,
                         tmp_path / "o", capsys)
    assert result["inputs"]["validation"] is None and steps_of(result) == [0, 1, 2, 3, 4]
    # merged by step (steps 2 and 4 are in both folders), and said: counted in the JSON, one line on stderr
    assert result["inputs"]["merged_steps"] == 2
    assert [m["step"] for m in result["inputs"]["merged_step_folders"]] == [2, 4]
    assert f"verl step 2, 4 found in 2 folders ({run / 'rollout'}, {gens})" in err
    # the lines verl's _validate dumps carry its scores again as 'reward'
    for f in gens.glob("*.jsonl"):
        rows = [json.loads(x) for x in f.read_text().splitlines()]
        f.write_text("".join(json.dumps({**r, "reward": r["score"]}) + "\n" for r in rows))
    result, _ = accept(["--traces", str(run / "rollout"), "--traces", str(gens)], qwen3_tokenizer_dir,
                       tmp_path / "p", capsys)
    v = result["inputs"]["validation"]
    assert v["excluded"] == 12 and set(v["files"].values()) == {SHAPE_REASON} and steps_of(result) == [1, 2, 3, 4]
    assert result["inputs"]["merged_steps"] == 0   # the validation rounds left out: no step is in two folders


def test_validation_generations_alone_have_no_rl_steps(verl_run, qwen3_tokenizer_dir, tmp_path, capsys):
    run, _ = verl_run
    result, err = accept(["--traces", str(run / "val")], qwen3_tokenizer_dir, tmp_path, capsys)
    v = result["inputs"]["validation"]
    assert v["responses"] == 12 and v["excluded"] == 0 and v["handling"].startswith("validation generations only")
    assert result["inputs"]["responses"] == 12 and result["inputs"]["steps"] == EMULATED_STEPS
    assert "validation generations only" in err
