"""`accept` on multi-turn rollouts: tool output (verl's tool turns, built in verl's exact shape by
trace_fixtures.write_tool_dump) is prefilled, not decoded: one request per model turn, drafts
over generated tokens only, the tool text in the drafter's context, tokens reported split; the
per-RL-step table in the console output."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from samspec_bench import cli
from samspec_bench.data import load_tokenizer
from trace_fixtures import piece_tokens, write_tool_dump

SAM = "sam k=3 own"


@pytest.fixture(scope="module")
def qwen3(qwen3_tokenizer_dir):
    return load_tokenizer(qwen3_tokenizer_dir)


@pytest.fixture(scope="module")
def tool_dump(tmp_path_factory, qwen3) -> tuple[Path, dict]:
    """Steps 1 and 2: 2 prompts x 2 responses, each 3 model turns around 2 tool turns."""
    d = tmp_path_factory.mktemp("multi") / "rollout_data_dir"
    return d, write_tool_dump(d, qwen3, steps=[1, 2])


def accept(args: list[str], tok: Path, out: Path, capsys) -> tuple[dict, str]:
    cli.main(["accept", *args, "--tokenizer", str(tok), "--output", str(out), "--no-progress", "--json", "-"])
    got = capsys.readouterr()
    return json.loads(got.out), got.err


def records(out: Path) -> list[dict]:
    (run,) = sorted(out.glob("accept-*"))
    return [json.loads(x) for x in (run / "responses.jsonl").read_text().splitlines() if x.strip()]


def test_tool_turns_are_prefilled_and_drafts_cover_generated_tokens_only(tool_dump, qwen3, qwen3_tokenizer_dir,
                                                                        tmp_path, capsys):
    d, info = tool_dump
    gen = sum(s["generated"] for s in info["steps"].values())
    tool = sum(s["tool"] for s in info["steps"].values())
    result, err = accept(["--traces", str(d)], qwen3_tokenizer_dir, tmp_path, capsys)
    t = result["inputs"]["tool_output"]
    assert (t["tool_tokens"], t["generated_tokens"], t["responses"], t["spans"]) == (tool, gen, 8, 16)
    assert t["shapes"]["tool-response"]["spans"] == 16 and t["requests"] == 24 and t["later_turns"] == 16
    m = result["metrics"][SAM]
    assert (m["responses"], m["requests"], m["response_tokens"]) == (8, 24, gen)
    # every request's first token comes from its prefill: decode steps emit the rest of the
    # generated tokens, none of the tool tokens
    assert m["counts"]["tokens"] == gen - 24
    assert f"tool output: {tool:,} of {gen + tool:,} response tokens" in err
    # each model turn is a request whose prompt is everything before it, tool turns included
    recs = {(r["step"], r["line"], r.get("turn", 0)): r for r in records(tmp_path)}
    assert len(recs) == 24
    for (step, line), pieces in info["pieces"].items():
        n = [piece_tokens(qwen3, [p]) for p in pieces]   # (generated, tool) of each piece
        t0, t1, t2 = (recs[(step, line, turn)] for turn in range(3))
        assert [t0["response_tokens"], t1["response_tokens"], t2["response_tokens"]] == [n[0][0], n[2][0], n[4][0]]
        assert t1["prompt_tokens"] == t0["prompt_tokens"] + n[0][0] + n[1][1]
        assert t2["prompt_tokens"] == t1["prompt_tokens"] + n[2][0] + n[3][1]
        assert t1["key"] == t0["key"] + "#t1" and t1["group"] != t0["group"]


def test_the_drafter_indexes_the_tool_text(tmp_path, qwen3, qwen3_tokenizer_dir, capsys):
    """The second turn repeats the first tool result: drafted from the tool text, it is accepted;
    the same turn after a tool that printed other words is not (the only difference)."""
    got = {}
    for echo in (True, False):
        d = tmp_path / f"echo{echo}"
        write_tool_dump(d, qwen3, steps=[1], echo=echo)
        accept(["--traces", str(d)], qwen3_tokenizer_dir, tmp_path / f"o{echo}", capsys)
        got[echo] = sum(r["accepted"] for r in records(tmp_path / f"o{echo}") if r.get("turn") == 1)
    words = len(qwen3(" bravo charlie delta echo foxtrot golf hotel india juliet kilo lima")["input_ids"])
    # 4 responses; at k=3 at most 3 of every 4 copied tokens are drafted: at least half of them
    # when the copy's source is in the context, about none otherwise
    assert got[True] - got[False] >= 4 * (words // 2)


def test_decode_replays_tool_output_as_generated(tool_dump, qwen3_tokenizer_dir, tmp_path, capsys):
    d, info = tool_dump
    gen = sum(s["generated"] for s in info["steps"].values())
    tool = sum(s["tool"] for s in info["steps"].values())
    result, err = accept(["--traces", str(d), "--tool-output", "decode"], qwen3_tokenizer_dir, tmp_path, capsys)
    m = result["metrics"][SAM]
    assert (m["responses"], m["requests"], m["response_tokens"]) == (8, 8, gen + tool)
    assert m["counts"]["tokens"] == gen + tool - 8
    assert result["inputs"]["tool_output"]["handling"].startswith("--tool-output decode")
    assert "replayed as generated tokens" in err


def _table_rows(text: str, title: str) -> list[list[str]]:
    """The body rows of the rich table under `title` in printed text."""
    lines = text.splitlines()
    at = next(i for i, x in enumerate(lines) if title in x)
    rows = []
    for x in lines[at + 4:]:
        if not x.startswith("│"):
            break
        rows.append([c.strip() for c in x.strip("│").split("│")])
    return rows


def test_the_per_step_table_is_printed(tool_dump, qwen3_tokenizer_dir, tmp_path, capsys):
    d, info = tool_dump
    result, err = accept(["--traces", str(d), "--drafter", "sam,ngram"], qwen3_tokenizer_dir, tmp_path, capsys)
    for label in (SAM, "ngram k=3 own"):
        rows = _table_rows(err, f"per RL step: {label}")
        assert [r[0] for r in rows] == ["1", "2"]
        for row, st in zip(rows, result["tables"]["by_step"][label]):
            c = st["counts"]
            want = info["steps"][int(row[0])]
            assert row == [row[0], str(want["responses"]), str(want["generated"]), str(want["tool"]),
                           str(c["drafted"]), str(c["accepted"]), f"{100 * c['accepted'] / c['drafted']:.1f}",
                           f"{c['tokens'] / c['steps']:.2f}"]
            assert st["responses"] == want["responses"] and st["response_tokens"] == want["generated"]


def _turn_accepted(out: Path, config: str, turn: int, step: int | None = None) -> int:
    return sum(r["accepted"] for r in records(out) if r["config"] == config and r.get("turn", 0) == turn
               and (step is None or r["step"] == step))


def _checksum_tokens(qwen3) -> int:
    return len(qwen3(" alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima")["input_ids"])


def test_later_turns_draft_from_earlier_steps_whole_responses(tmp_path, qwen3, qwen3_tokenizer_dir, capsys):
    """The second turn repeats words its own context never held (the tool printed others); step 1
    wrote the same turn to the same prompt. With history, step 2's second turns find step 1's
    whole responses under the response's prompt, which begins the turn's prompt."""
    d = tmp_path / "dump"
    write_tool_dump(d, qwen3, steps=[1, 2], echo=False)
    result, err = accept(["--traces", str(d), "--sources", "own,history"], qwen3_tokenizer_dir, tmp_path / "o", capsys)
    own, hist = (_turn_accepted(tmp_path / "o", f"sam k=3 {s}", 1, step=2) for s in ("own", "own+history"))
    # 4 second turns in step 2, each repeating at least the 12 checksum words (3 of every 4
    # tokens drafted at k=3): at least half of those tokens more than without history
    assert hist - own >= 4 * (_checksum_tokens(qwen3) // 2)
    # step 1 has no earlier step: history adds nothing there
    assert _turn_accepted(tmp_path / "o", "sam k=3 own+history", 1, step=1) == \
        _turn_accepted(tmp_path / "o", "sam k=3 own", 1, step=1)
    assert "later turns draft from group and history sources too" in err


def test_later_turns_share_a_group_with_the_siblings_same_turn(tmp_path, qwen3, qwen3_tokenizer_dir, capsys):
    """Siblings' second turns are one group (each with its own prompt): replayed one after the
    other, the second sibling drafts the words from the first sibling's second turn."""
    d = tmp_path / "dump"
    write_tool_dump(d, qwen3, steps=[1], echo=False)
    accept(["--traces", str(d), "--sources", "own,group", "--group-order", "sequential"], qwen3_tokenizer_dir,
           tmp_path / "o", capsys)
    own, group = (_turn_accepted(tmp_path / "o", f"sam k=3 {s}", 1) for s in ("own", "own+group(sequential)"))
    # 2 prompts x 2 responses: the second of each pair copies from the first
    assert group - own >= 2 * (_checksum_tokens(qwen3) // 2)
    groups = {r["group"] for r in records(tmp_path / "o") if r["config"] == "sam k=3 own+group(sequential)" and r.get("turn") == 1}
    assert len(groups) == 2   # one per prompt: the siblings' second turns together
