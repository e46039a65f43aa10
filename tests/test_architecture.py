"""The package's dependency direction (docs/architecture.md), asserted on its source.

Imports point down the layers below; inside a layer any direction is allowed as long as there
is no loop. A lazy (function-level) import of one of our modules is allowed only where that
module pulls torch, vLLM or lm-eval in at import time: everything else is imported at the top,
so a module's first lines show what it depends on. Imports under a module-level
`if __name__ == "__main__":` are a script entry point (`python -m <old path>` handing its
arguments to the CLI), not a dependency of the module: they are left out of every rule.
"""

from __future__ import annotations

import ast
from pathlib import Path

PKG = Path(__file__).resolve().parents[1] / "samspec_bench"
NAME = "samspec_bench"
HEAVY = ("torch", "vllm", "vllm_ascend", "torch_npu", "lm_eval", "transformers")
MAX_LINES = 500  # a longer module is split along its seams
MAX_FUNCTION_LINES = 120

# lowest first; a module belongs to the longest prefix listed
LAYERS: tuple[tuple[str, ...], ...] = (
    ("errors", "paths", "output_paths", "run_environment"),
    ("sam", "metrics", "results", "commands", "devices", "dev_split"),
    ("data", "models", "model_catalog", "rl_models", "trace_formats"),
    ("bench",),
    ("workload", "evals"),
    ("reports",),
    ("suites",),
    ("cli", "__main__"),
)


def _modules() -> dict[str, Path]:
    out = {}
    for p in PKG.rglob("*.py"):
        rel = p.relative_to(PKG.parent).with_suffix("")
        name = ".".join(rel.parts)
        out[name.removesuffix(".__init__")] = p
    return out


MODULES = _modules()


def _resolve(name: str) -> str | None:
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def _script_entry_nodes(tree: ast.Module) -> set[int]:
    """The nodes under a module-level `if __name__ == "__main__":` (the script entry point)."""
    out: set[int] = set()
    for n in tree.body:
        t = n.test if isinstance(n, ast.If) else None
        if (isinstance(t, ast.Compare) and isinstance(t.left, ast.Name) and t.left.id == "__name__"
                and len(t.ops) == 1 and isinstance(t.ops[0], ast.Eq) and isinstance(t.comparators[0], ast.Constant)
                and t.comparators[0].value == "__main__"):
            out.update(id(c) for c in ast.walk(n))
    return out


def _imports(mod: str, path: Path):
    """(target module, is_top_level, imported names, line) for each import of our package."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    top = set(id(n) for n in tree.body)
    # imports under `if TYPE_CHECKING:` or try/except at module level count as top level
    for n in tree.body:
        if isinstance(n, (ast.If, ast.Try)):
            top.update(id(c) for c in ast.walk(n))
    is_pkg = path.name == "__init__.py"
    entry = _script_entry_nodes(tree)
    for node in ast.walk(tree):
        if id(node) in entry:
            continue
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = mod.split(".") if is_pkg else mod.split(".")[:-1]
                parts = parts[: len(parts) - node.level + 1]
                base = ".".join(parts + ([node.module] if node.module else []))
            for a in node.names:
                tgt = _resolve(f"{base}.{a.name}") or _resolve(base)
                if tgt and tgt.startswith(NAME):
                    yield tgt, id(node) in top, a.name, node.lineno
        elif isinstance(node, ast.Import):
            for a in node.names:
                tgt = _resolve(a.name)
                if tgt and tgt.startswith(NAME):
                    yield tgt, id(node) in top, a.name, node.lineno


def _heavy_at_top(path: Path) -> bool:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for n in tree.body:
        if isinstance(n, ast.Import) and any(a.name.split(".")[0] in HEAVY for a in n.names):
            return True
        if isinstance(n, ast.ImportFrom) and not n.level and (n.module or "").split(".")[0] in HEAVY:
            return True
    return False


def _layer(mod: str) -> int:
    rest = mod.removeprefix(NAME + ".")
    best, best_len = None, -1
    for i, names in enumerate(LAYERS):
        for n in names:
            if (rest == n or rest.startswith(n + ".")) and len(n) > best_len:
                best, best_len = i, len(n)
    assert best is not None, f"{mod}: no layer in tests/test_architecture.py LAYERS; place it (and in docs/architecture.md)"
    return best


EDGES = {m: list(_imports(m, p)) for m, p in MODULES.items()}


def _top_graph() -> dict[str, set[str]]:
    return {m: {t for t, top, _, _ in EDGES[m] if top and t != m} for m in MODULES}


def _pulls_heavy(mod: str, graph: dict[str, set[str]], seen=None) -> bool:
    seen = set() if seen is None else seen
    if mod in seen:
        return False
    seen.add(mod)
    if _heavy_at_top(MODULES[mod]):
        return True
    return any(_pulls_heavy(t, graph, seen) for t in graph[mod])


def test_every_module_has_a_layer():
    for m in MODULES:
        if m != NAME:
            _layer(m)


def test_imports_point_down():
    bad = []
    for m, edges in EDGES.items():
        if m == NAME:
            continue
        for tgt, _, name, line in edges:
            if tgt != NAME and _layer(tgt) > _layer(m):
                bad.append(f"{m}:{line} imports {tgt} ({name}), a higher layer")
    assert not bad, "\n".join(bad)


def test_no_import_loops():
    graph = {m: {t for t, _, _, _ in EDGES[m] if t != m and t != NAME} for m in MODULES
             if not MODULES[m].name == "__init__.py"}
    graph = {m: {t for t in ts if t in graph} for m, ts in graph.items()}
    index, low, stack, on, loops = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                loops.append(sorted(comp))

    for v in graph:
        if v not in index:
            visit(v)
    assert not loops, "import loops: " + "; ".join(" <-> ".join(c) for c in loops)


def test_no_suite_imports_another_suites_private_names():
    bad = []
    for m, edges in EDGES.items():
        if not m.startswith(f"{NAME}.suites."):
            continue
        own = m.split(".")[2]
        for tgt, _, name, line in edges:
            if tgt.startswith(f"{NAME}.suites.") and tgt.split(".")[2] != own and name.startswith("_"):
                bad.append(f"{m}:{line} imports {tgt}.{name}")
    assert not bad, "\n".join(bad)


def test_lazy_imports_only_for_heavy_modules():
    graph = _top_graph()
    bad = []
    for m, edges in EDGES.items():
        for tgt, top, name, line in edges:
            if not top and tgt != m and not _pulls_heavy(tgt, graph):
                bad.append(f"{m}:{line} imports {tgt} ({name}) inside a function; it imports no torch/vLLM/lm-eval: "
                           "import it at the top")
    assert not bad, "\n".join(bad)


def test_no_module_over_the_cap():
    long = {m: n for m, p in MODULES.items() if (n := p.read_text(encoding="utf-8").count("\n")) > MAX_LINES}
    assert not long, f"modules over {MAX_LINES} lines (split them along their seams): {long}"


def _long_functions(tree: ast.AST, limit: int) -> list[tuple[str, int, int]]:
    return [(n.name, n.lineno, n.end_lineno - n.lineno + 1) for n in ast.walk(tree)
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.end_lineno - n.lineno + 1 > limit]


def test_no_function_over_the_cap():
    bad = [f"{m}:{line} {name} ({n} lines)" for m, p in MODULES.items()
           for name, line, n in _long_functions(ast.parse(p.read_text(encoding="utf-8")), MAX_FUNCTION_LINES)]
    assert not bad, f"functions over {MAX_FUNCTION_LINES} lines (name their steps): " + "; ".join(bad)


def test_the_function_check_sees_a_long_function():
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_FUNCTION_LINES))
    tree = ast.parse(f"def short():\n    return 1\n\ndef long():\n{body}\n")
    assert [(name, n) for name, _, n in _long_functions(tree, MAX_FUNCTION_LINES)] == [("long", MAX_FUNCTION_LINES + 1)]


def _function_level_imports(path: Path) -> list[int]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return sorted(n.lineno for f in ast.walk(tree) if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))
                  for n in ast.walk(f) if isinstance(n, (ast.Import, ast.ImportFrom)))


def test_the_sampler_suite_imports_at_the_top():
    """suites/sampler imports everything at its modules' tops (the torch side is its own modules,
    loaded when the command runs), so what a module depends on is in its first lines."""
    bad = {str(p.relative_to(PKG)): lines for p in sorted((PKG / "suites" / "sampler").glob("*.py"))
           if (lines := _function_level_imports(p))}
    assert not bad, f"function-level imports in suites/sampler: {bad}"


def test_the_drafting_library_needs_no_torch():
    """sam/ is the pure layer: its modules that the drafters use import no torch."""
    graph = _top_graph()
    for m in (f"{NAME}.sam", f"{NAME}.sam.automaton", f"{NAME}.sam.drafters", f"{NAME}.sam.python_automaton"):
        assert not _pulls_heavy(m, graph), m


def _torch_imports(tree: ast.AST) -> list[int]:
    """Lines importing torch (or a torch submodule) anywhere in a module, functions included."""
    lines = []
    for n in ast.walk(tree):
        if isinstance(n, ast.Import) and any(a.name.split(".")[0] == "torch" for a in n.names):
            lines.append(n.lineno)
        elif isinstance(n, ast.ImportFrom) and not n.level and (n.module or "").split(".")[0] == "torch":
            lines.append(n.lineno)
    return lines


def test_nothing_under_sam_imports_torch():
    """The drafting library is torch-free throughout (the rejection sampler is bench/rejection):
    no module under sam/ imports torch, at its top or inside a function, and none imports one
    of our modules that pulls torch (or vLLM, lm-eval) in at import time."""
    graph = _top_graph()
    sam = [m for m in MODULES if m == f"{NAME}.sam" or m.startswith(f"{NAME}.sam.")]
    assert f"{NAME}.sam.drafters" in sam
    bad = []
    for m in sam:
        tree = ast.parse(MODULES[m].read_text(encoding="utf-8"))
        bad += [f"{m}:{line} imports torch" for line in _torch_imports(tree)]
        bad += [f"{m}:{line} imports {tgt} ({name}), which imports torch" for tgt, _, name, line in EDGES[m]
                if tgt != m and _pulls_heavy(tgt, graph)]
    assert not bad, "\n".join(bad)


def test_the_torch_check_sees_a_lazy_torch_import():
    """The sam/ rule can fail: an import inside a function, and a module that pulls torch in."""
    src = "def f():\n    from torch.nn import functional\n\n\ndef g():\n    import numpy, torch.cuda\n"
    assert _torch_imports(ast.parse(src)) == [2, 6]
    assert _pulls_heavy(f"{NAME}.bench.rejection.vectorised", _top_graph())


def test_only_the_script_entry_point_is_left_out():
    """The entry-point rule is narrow: an import under `if __name__ == "__main__":` is left out,
    one under any other module-level `if` still counts."""
    src = ("import os\nif __name__ == '__main__':\n    from samspec_bench.cli import main\n"
           "if __name__ != '__main__':\n    from samspec_bench.cli import group\n"
           "if DEBUG:\n    from samspec_bench.cli import main\n")
    tree = ast.parse(src)
    entry = _script_entry_nodes(tree)
    left_out = [n.lineno for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and id(n) in entry]
    assert left_out == [3]


def test_the_checker_sees_a_planted_upward_import(tmp_path):
    """The layer rule can fail: an import from bench into suites is reported."""
    src = "from samspec_bench.suites.accept import SUITE\n"
    tree = ast.parse(src)
    node = tree.body[0]
    tgt = _resolve(node.module)
    assert tgt is not None and _layer(tgt) > _layer(f"{NAME}.bench.engines.base")


TESTS = Path(__file__).resolve().parent


def _test_module_imports(tree: ast.AST) -> list[str]:
    """Imports of a collected test module (`test_*`) by another: under importlib mode only
    tests/ itself is on the path, so one in a sub-folder does not resolve (CI broke on this);
    shared helpers live in helper modules at tests/ (trace_fixtures, report_runs, ...)."""
    names = []
    for n in ast.walk(tree):
        if isinstance(n, ast.Import):
            names += [a.name for a in n.names if a.name.split(".")[-1].startswith("test_")]
        elif isinstance(n, ast.ImportFrom) and (n.module or "").split(".")[-1].startswith("test_"):
            names.append(n.module)
    return names


def test_no_test_module_imports_another():
    bad = {str(p.relative_to(TESTS)): names for p in sorted(TESTS.rglob("*.py"))
           if (names := _test_module_imports(ast.parse(p.read_text(encoding="utf-8"))))}
    assert not bad, f"test modules importing test modules (move the helper to a module at tests/): {bad}"


def test_the_test_import_check_sees_a_planted_import():
    src = "import os\nfrom report_runs import make_run\n\ndef f():\n    from test_report import make_run\n"
    assert _test_module_imports(ast.parse(src)) == ["test_report"]
