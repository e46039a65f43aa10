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
