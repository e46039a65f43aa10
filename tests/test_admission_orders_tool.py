"""tools/admission_orders.py: the admission orders compared in decode steps on drawn lengths."""

import importlib.util
import json
from pathlib import Path

TOOL = Path(__file__).resolve().parents[1] / "tools" / "admission_orders.py"
_spec = importlib.util.spec_from_file_location("admission_orders", TOOL)
admission_orders = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(admission_orders)


def test_orders_cannot_matter_when_every_request_runs_at_once(tmp_path, capsys):
    out = tmp_path / "o.json"
    rc = admission_orders.main(["--draws", "2", "--groups", "3", "--group-size", "4", "--slots", "12",
                                "--median", "60", "--max-len", "400", "--json", str(out)])
    assert rc == 0
    for d in json.loads(out.read_text())["draws"]:
        assert d["fcfs_over_context"] == d["fcfs_over_oracle"] == 1.0
    assert "over 2 draws (decode steps, modelled)" in capsys.readouterr().out


def test_with_a_queue_longest_first_by_the_true_lengths_is_never_slower(tmp_path):
    out = tmp_path / "o.json"
    assert admission_orders.main(["--draws", "3", "--groups", "6", "--group-size", "4", "--slots", "8",
                                  "--median", "60", "--sigma", "1.0", "--max-len", "400", "--json", str(out)]) == 0
    for d in json.loads(out.read_text())["draws"]:
        assert d["steps"]["longest_first_oracle"] <= d["steps"]["fcfs"]


def test_bad_sizes_exit_2(capsys):
    assert admission_orders.main(["--slots", "0"]) == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1
