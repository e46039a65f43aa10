"""The reports package's building blocks, called directly: value helpers, number formatting,
tables, labels, metadata, the summarizer registry; its imports point one way."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import samspec_bench
from samspec_bench.errors import UserError
from samspec_bench.reports import model, suite_headlines, tool_headlines
from samspec_bench.reports.collect import SUITE_ORDER, find_run_dirs, load_figures, run_label
from samspec_bench.reports.fmt import fmt, fmt_headline, run_setting
from samspec_bench.reports.headlines import REGISTRY, register, summarize
from samspec_bench.reports.metadata import model_of
from samspec_bench.reports.model import headline
from samspec_bench.reports.tables import shape_tables
from samspec_bench.reports.values import flatten, is_number

PKG = Path(samspec_bench.__file__).parent
REPORTS = PKG / "reports"


# --- values and formatting ------------------------------------------------------------------------------

def test_is_number():
    assert is_number(1) and is_number(-2.5) and is_number(0)
    assert not is_number(True) and not is_number(float("nan")) and not is_number(float("inf"))
    assert not is_number("1") and not is_number(None)


def test_flatten_keeps_scalars_and_short_lists():
    obj = {"a": {"b": 1, "c": [1, 2]}, "long": list(range(17)), "recs": [{"x": 1}], "s": "t"}
    assert flatten(obj) == {"a.b": 1, "a.c[0]": 1, "a.c[1]": 2, "s": "t"}
    assert "long[16]" in flatten(obj, max_list=64)


@pytest.mark.parametrize("value, text", [
    (None, "–"), (True, "yes"), (False, "no"), (1234567, "1,234,567"), (0.0, "0"), (1e-5, "1e-05"),
    (12345678.0, "1.23e+07"), (1234.6, "1,235"), (0.123456, "0.1235"), (float("inf"), "inf"),
    ([1, 2.5, None], "[1, 2.5, –]"), ({"b": 1, "a": 2}, '{"a": 2, "b": 1}'), ("text", "text"),
])
def test_fmt(value, text):
    assert fmt(value) == text


def test_fmt_of_a_long_list_is_short_json():
    assert fmt(list(range(100))).startswith("[0, 1, 2") and len(fmt(list(range(100)))) == 200


def test_fmt_headline_with_and_without_interval():
    assert fmt_headline(headline("x", 0.5)) == "0.5"
    assert fmt_headline(headline("x", 0.5, (0.25, 0.75))) == "0.5 [0.25, 0.75]"


# --- labels, tables, metadata ---------------------------------------------------------------------------

@pytest.mark.parametrize("i, label", [(0, "A"), (25, "Z"), (26, "AA"), (27, "AB"), (701, "ZZ"), (702, "AAA")])
def test_run_label(i, label):
    assert run_label(i) == label


def test_shape_tables_by_shape():
    (t,) = shape_tables("rows", [{"n": 1, "v": [0.5, 0.25]}, {"n": 2, "w": {"deep": 3}}])
    assert t.columns == ["n", "v", "w.deep"] and t.rows == [[1, [0.5, 0.25], None], [2, None, 3]]
    (t,) = shape_tables("by key", {"r1": {"q": 1}, "r2": {"q": 2}})
    assert t.columns == ["key", "q"] and t.rows == [["r1", 1], ["r2", 2]]
    (t,) = shape_tables("two keys", {"a": {"x": {"p": 1}, "y": {"p": 2}}, "b": {"z": {"p": 3}}})
    assert t.columns == ["key", "sub-key", "p"] and t.rows == [["a", "x", 1], ["a", "y", 2], ["b", "z", 3]]
    scal, sub = shape_tables("mixed", {"s": 5, "deep": [1, 2]})
    assert (scal.columns, scal.rows) == (["name", "value"], [["s", 5]])
    assert (sub.title, sub.columns, sub.rows) == ("mixed / deep", ["value"], [[1], [2]])
    assert shape_tables("e", [])[0].columns == ["(empty)"] and shape_tables("e", {})[0].columns == ["(empty)"]


def test_model_of_looks_where_suites_record_it():
    assert model_of({"config": {"model": "m"}}) == "m"
    assert model_of({"engine": {"model": "e"}}) == "e"
    assert model_of({"model_level": {"x": {"engine": {"model": "tiny"}}}}) == "tiny"
    assert model_of({"engine": {"name": "replay"}}) == "none (replay engine)"
    assert model_of({}) is None


def test_find_run_dirs_errors_name_the_path(tmp_path):
    with pytest.raises(UserError, match="no such directory"):
        find_run_dirs(tmp_path / "missing")
    f = tmp_path / "file.txt"
    f.write_text("x")
    with pytest.raises(UserError, match="not a directory"):
        find_run_dirs(f)


def test_load_figures_notes_what_it_cannot_inline(tmp_path):
    (tmp_path / "a.svg").write_text("<svg/>")
    figs = load_figures(tmp_path, ["a.png", "a.svg", "data.csv", 3])
    assert [(f.name, f.mime, f.data is not None) for f in figs] == [("a.svg", "image/svg+xml", True),
                                                                     ("data.csv", None, False)]
    assert "not an image type" in figs[1].note and figs[0].data_uri().startswith("data:image/svg+xml;base64,")


# --- the summarizer registry ----------------------------------------------------------------------------

def test_every_suite_in_the_report_order_has_a_summarizer():
    own = {**suite_headlines.SUITE_SUMMARIZERS, **tool_headlines.TOOL_SUMMARIZERS}
    assert not set(suite_headlines.SUITE_SUMMARIZERS) & set(tool_headlines.TOOL_SUMMARIZERS)
    assert set(own) == set(SUITE_ORDER)
    assert all(REGISTRY[s] is own[s] for s in SUITE_ORDER)


def test_register_a_summarizer_and_fall_back_when_it_fails():
    @register("mine")
    def mine(result):
        if result["metrics"].get("bad"):
            raise KeyError("bad")
        return [headline("x", result["metrics"]["x"])], []

    try:
        heads, gates = summarize({"suite": "mine", "metrics": {"x": 2.0}})
        assert [(h["name"], h["value"]) for h in heads] == [("x", 2.0)] and gates == []
        heads, _ = summarize({"suite": "mine", "metrics": {"bad": True, "y_ok": True}})
        assert heads[0]["name"] == "summary" and "KeyError" in heads[0]["note"]
    finally:
        REGISTRY.pop("mine")


def test_status_of_gates():
    assert model.status([]) == "no gates"
    assert model.status([model.gate("a", True), model.gate("b", None)]) == "pass"
    assert model.status([model.gate("a", True), model.gate("b", False)]) == "fail"


# --- the layout -----------------------------------------------------------------------------------------

def _own_imports(path: Path) -> tuple[set[str], list[str]]:
    """(modules of ours imported at module top, those imported inside a function or class)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    top, nested = set(), []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("samspec_bench"):
            names = [f"{node.module}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names if a.name.startswith("samspec_bench")]
        else:
            continue
        if node in tree.body:
            top.update(names)
        else:
            nested.extend(names)
    return top, nested


# Each module of the package imports only modules to its left.
LAYERS = ["values", "fmt", "model", "suite_headlines", "tool_headlines", "headlines", "run_comparison", "tables", "malformed", "source_tables", "metadata",
          "collect", "pricing", "strategy_answer", "answers", "html", "markdown"]


def test_reports_imports_point_down_and_sit_at_the_top():
    assert sorted(p.stem for p in REPORTS.glob("*.py") if p.stem != "__init__") == sorted(LAYERS)
    for i, name in enumerate(LAYERS):
        top, nested = _own_imports(REPORTS / f"{name}.py")
        assert not nested, f"reports/{name}.py imports {nested} inside a function"
        ours = {m.split(".")[2] for m in top if m.startswith("samspec_bench.reports.")}
        assert ours <= set(LAYERS[:i]), f"reports/{name}.py imports {sorted(ours - set(LAYERS[:i]))} (not below it)"
        assert not any(m.startswith(("samspec_bench.suites", "samspec_bench.evals", "samspec_bench.bench"))
                       for m in top), f"reports/{name}.py imports above its floor"
    top, nested = _own_imports(PKG / "suites" / "report_cmd.py")
    assert not nested


def test_no_module_of_the_package_is_over_500_lines():
    for p in [*REPORTS.glob("*.py"), PKG / "suites" / "report_cmd.py"]:
        assert p.read_text(encoding="utf-8").count("\n") <= 500, p.name


def test_a_run_setting_no_step_used_reads_none_not_the_python_value():
    settings = {"model": None, "engine": "reference", "not_used": {"model": "HuggingFaceTB/SmolLM2-135M"}}
    assert run_setting(settings, "model", "default") == "none (no selected step uses it)"
    assert run_setting(settings, "engine", "default") == "reference"
    assert run_setting({"model": None}, "model", "default") == "default"     # an older run_state: no not_used
