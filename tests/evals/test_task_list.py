"""`--tasks` is a comma list whose items are all used: a stray comma or a task named twice is
refused, not dropped."""

import pytest

from samspec_bench.errors import UserError
from samspec_bench.evals.tasks import parse_tasks


@pytest.mark.parametrize("text, says", [("gsm8k,,math500", "empty item"), ("gsm8k,", "empty item"),
                                        ("gsm8k,gsm8k", "gsm8k is given twice"), ("", "empty")])
def test_a_stray_comma_or_a_repeat_is_refused(text, says):
    with pytest.raises(UserError, match=says) as e:
        parse_tasks(text)
    assert "--tasks" in str(e.value) and "\n" not in str(e.value)


def test_our_tasks_parse_in_order():
    assert parse_tasks("math500, gsm8k") == ["math500", "gsm8k"]


GSM8K_ROW = '{"question": "Ann has 3 pens and buys 4 more. How many?", "answer": "3 + 4 = 7\\n#### 7"}\n'


@pytest.mark.usefixtures("needs_lm_eval")
@pytest.mark.parametrize("test_file, says", [
    ("", "holds no problems (empty)"),
    (GSM8K_ROW + '{"question": "broken\n', "gsm8k_test.jsonl:2 is not JSON"),
    (GSM8K_ROW.replace('"question"', '"problem"'), "gsm8k_test.jsonl:1 has no question field (it has problem, answer)"),
    (GSM8K_ROW + "[1, 2]\n", "gsm8k_test.jsonl:2 is a JSON list, not an object"),
])
def test_a_data_dir_file_lm_eval_cannot_load_is_named(tmp_path, test_file, says):
    """An empty, damaged or other-layout --data-dir file failed inside lm-eval's loader (StopIteration,
    DatasetGenerationError: exit 3); it is named with its line before the run."""
    from samspec_bench.evals.tasks import write_task_dir

    bench = tmp_path / "benchmarks"
    bench.mkdir()
    (bench / "gsm8k_train.jsonl").write_text(GSM8K_ROW)
    (bench / "gsm8k_test.jsonl").write_text(test_file)
    with pytest.raises(UserError, match="task gsm8k") as e:
        write_task_dir(tmp_path / "tasks", ["gsm8k"], tmp_path)
    assert says in str(e.value) and "hub's fields (question, answer)" in str(e.value) and "\n" not in str(e.value)
    # the same rows as a JSON array load (lm-eval's json loader reads both)
    (bench / "gsm8k_test.jsonl").write_text("[" + GSM8K_ROW.strip() + "]")
    assert write_task_dir(tmp_path / "tasks", ["gsm8k"], tmp_path) == {"gsm8k": "samspec_gsm8k"}
