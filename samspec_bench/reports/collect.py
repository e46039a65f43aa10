"""Run directories (or folders holding them) into the `Report` the renderers draw: runs grouped
by suite in a fixed order, each summarized (headlines, gates) with its figures loaded, several
runs of one suite compared. Nothing here depends on the time of rendering, so the same inputs
give the same report.

One bad run never blocks the others: a run whose result.json cannot be read (truncated, not
JSON, a list, another schema, damaged fields) or summarized is left out and listed in
`Report.unreadable` with the reason, as is a result of an unknown suite without the record every
suite writes (`check_known`), a torn run_state.json and a symbolic link loop met while
searching a folder for runs (not followed); only when nothing at all can be read is that an
error (a result.json that is a broken link says where it points, a loop is named). A
`samspec-bench run` folder whose steps all failed (a run_state.json, no result) is a report of
its steps.

What a run's result.json holds that the report cannot use as it is, is named on the run and
counted among its headlines: malformed tables and rows (malformed.py), a suite this version does
not know, figures not embedded. A figure is embedded only when it is a file inside its run
folder (links followed) whose first bytes are the image type its name says.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

from samspec_bench.errors import UserError, one_line
from samspec_bench.reports.run_comparison import compare_runs
from samspec_bench.reports.headlines import REGISTRY, summarize
from samspec_bench.reports.malformed import malformed
from samspec_bench.reports.model import Figure, Report, Run, SuiteGroup, headline
from samspec_bench.results import load_result, read_json

# Suites in the order a report shows them (others follow alphabetically).
SUITE_ORDER = ("workload", "accept", "drafters", "dominance", "sampler", "op-equivalence", "accuracy", "compare",
               "spec-metrics", "rollout", "step-model", "curves")
RUN_STATE_FILE = "run_state.json"
FIGURE_TYPES = {".png": "image/png", ".svg": "image/svg+xml", ".jpg": "image/jpeg", ".jpeg": "image/jpeg"}


def link_loop(link: Path) -> str | None:
    """Why `link` is a symbolic link loop ("it points to ., its own folder"), or None when it is
    no link or no loop: a chain of links that never ends, or a link to the folder holding it or
    one above it (followed, a search below it would never end)."""
    if not link.is_symlink():
        return None
    target = os.readlink(link)
    try:
        real = Path(os.path.realpath(link, strict=True))
    except OSError as e:   # a dangling link is no loop (a broken result.json link is named by check_link)
        return f"it points to {target}, a chain of links that never ends" if e.errno == errno.ELOOP else None
    here = Path(os.path.realpath(link.parent))
    if real.is_dir() and here.is_relative_to(real):
        return f"it points to {target}, " + ("its own folder" if real == here else f"{real}, a folder above it")
    return None


LOOP_SKIPPED = "a symbolic link loop ({why}): not followed; remove the link"


def _search(root: Path) -> tuple[list[Path], list[tuple[Path, str]]]:
    """The run directories below `root` (links to folders are not followed, as pathlib's glob
    does not follow them) and the symbolic link loops met on the way, with why each is one."""
    found: set[Path] = set()
    loops: list[tuple[Path, str]] = []
    for here, dirs, files in os.walk(root):
        d = Path(here)
        f = d / "result.json"
        if f.is_file() or f.is_symlink():   # a broken link too: named by collect (check_link)
            found.add(d)
        loops += [(d / n, why) for n in sorted(dirs + files) if (why := link_loop(d / n)) is not None]
    return sorted(found, key=lambda x: x.as_posix()), sorted(loops, key=lambda x: x[0].as_posix())


def find_run_dirs(path: str | os.PathLike, allow_none: bool = False, loops: list[dict] | None = None) -> list[Path]:
    """A run directory itself, or every run directory (holding result.json) below a folder
    (none found: a UserError, or [] with allow_none). The symbolic link loops met below a
    folder are added to `loops` ({"path", "reason"}: not followed); with no run found, the
    error names them."""
    p = Path(path)
    if (p / "result.json").is_file() or (p / "result.json").is_symlink():   # a broken link: named by collect
        return [p]
    why = link_loop(p)
    if why is not None:
        raise UserError(f"{path}: a symbolic link loop ({why}); pass the folder that holds the runs")
    if not p.exists():
        raise UserError(f"{path}: no such directory; pass run directories (holding result.json) or folders "
                        "that contain them")
    if not p.is_dir():
        raise UserError(f"{path}: not a directory; pass run directories (holding result.json)")
    found, met = _search(p)
    if loops is not None:
        loops += [{"path": str(link), "reason": LOOP_SKIPPED.format(why=why)} for link, why in met]
    if not found and not allow_none and met:
        more = f" and {len(met) - 1} more loop(s)" if len(met) > 1 else ""
        raise UserError(f"{path}: no result.json found in it, and {met[0][0]} is a symbolic link loop ({met[0][1]})"
                        f"{more}, not followed; remove the link, or pass the folder that holds the runs")
    if not found and not allow_none:
        raise UserError(f"{path}: no result.json found in it; pass the directory a samspec-bench suite wrote "
                        "(results/<suite>-<timestamp>/) or a folder that holds such directories")
    return found


# what an image's first bytes are, by type (a file is embedded only when they match its name's type)
_MAGIC = {"image/png": ("PNG", lambda b: b.startswith(b"\x89PNG\r\n\x1a\n")),
          "image/jpeg": ("JPEG", lambda b: b.startswith(b"\xff\xd8\xff")),
          "image/svg+xml": ("SVG", lambda b: b.lstrip(b"\xef\xbb\xbf \t\r\n").startswith(b"<") and b"<svg" in b[:65536])}


def _figure(run_dir: Path, name: str) -> Figure:
    """One figure: embedded only when it is a file inside its run folder (after links are
    followed) whose first bytes are the image its name says; otherwise a note says why not."""
    mime = FIGURE_TYPES.get(Path(name).suffix.lower())
    if mime is None:
        return Figure(name, None, None, note=f"{name}: not an image type the report inlines", why="not an image type")
    p = run_dir / name
    try:
        root, target = run_dir.resolve(), p.resolve()
    except (OSError, RuntimeError, ValueError) as e:   # a link loop, a name no file can have
        return Figure(name, mime, None, why="unreadable", note=f"{name}: cannot be followed ({one_line(e)})")
    if not target.is_relative_to(root):
        return Figure(name, mime, None, why="not an image",
                      note=f"{name}: not an image (it resolves to {target}, outside the run folder {run_dir}); not embedded")
    if not p.is_file():
        return Figure(name, mime, None, why="missing", note=f"{name} is listed in result.json but missing from {run_dir}")
    try:
        data = p.read_bytes()
    except OSError as e:
        return Figure(name, mime, None, why="unreadable", note=f"{name}: cannot be read ({e.strerror or type(e).__name__})")
    kind, looks_right = _MAGIC[mime]
    if not looks_right(data):
        return Figure(name, mime, None, why="not an image",
                      note=f"{name}: not an image (its first bytes are not {kind}); not embedded")
    return Figure(name, mime, data)


def load_figures(run_dir: Path, names: list) -> list[Figure]:
    """The run's figures, one per stem (SVG preferred to PNG when a suite wrote both)."""
    by_stem: dict[str, list[str]] = {}
    for n in names:
        if isinstance(n, str):
            by_stem.setdefault(Path(n).stem, []).append(n)
    return [_figure(run_dir, sorted(files, key=lambda n: (Path(n).suffix.lower() != ".svg", n))[0])
            for files in by_stem.values()]


def figure_headlines(figures: list[Figure]) -> list[dict]:
    """A count of the figures not embedded, one headline per reason ('not an image', 'missing', ...)."""
    by: dict[str, list[Figure]] = {}
    for f in figures:
        if f.data is None:
            by.setdefault(f.why or "not available", []).append(f)
    return [headline(f"figures not embedded: {why}", len(fs), note=", ".join(f.name for f in fs))
            for why, fs in by.items()]


def check_link(run_dir: Path) -> None:
    """A result.json that is a link to nothing (or to no file) is named with where it points."""
    p = run_dir / "result.json"
    why = link_loop(p)
    if why is not None and not p.is_file():
        raise UserError(f"{p}: a symbolic link loop ({why}); restore the file, or pass the run directory it "
                        "belongs to")
    if p.is_symlink() and not p.is_file():
        target = os.readlink(p)
        what = "a folder" if p.exists() else "nothing (no such file)"
        raise UserError(f"{p}: a broken link: it points to {target}, which is {what}; restore that file, or pass "
                        "the run directory it belongs to")


def _suite_key(suite: str) -> tuple:
    return (SUITE_ORDER.index(suite), "") if suite in SUITE_ORDER else (len(SUITE_ORDER), suite)


def _reason(e: Exception) -> str:
    return one_line(e) if isinstance(e, UserError) else f"cannot be summarized ({type(e).__name__}: {one_line(e)})"


# what build_result writes into every result.json besides suite and metrics (load_result checks those)
RECORD_KEYS = ("created", "config", "environment")


def check_known(result: dict, run_dir: Path) -> None:
    """A result of a suite no summary knows is reported (generic summary) only when it has the
    record every samspec-bench suite writes; otherwise it is not a samspec-bench result and
    would show as blanks everywhere."""
    suite = result["suite"]
    missing = [k for k in RECORD_KEYS if k not in result]
    if suite not in REGISTRY and missing:
        raise UserError(f"{run_dir / 'result.json'}: suite {suite!r} is not one samspec-bench writes "
                        f"({', '.join(sorted(REGISTRY))}) and it has no {', '.join(missing)}: not a samspec-bench "
                        "result; leave it out")


# `run --resume` refuses a damaged run_state.json (run/state.py: the run's settings are in no other file)
STATE_LOST = "the run's step list is left out (its steps' results are reported); `run --resume` cannot continue it: " \
             "start a new run"


def _read_state(state_file: Path) -> dict:
    state = read_json(state_file, STATE_LOST)
    if not isinstance(state, dict) or not isinstance(state.get("steps", {}), dict):
        raise UserError(f"{state_file}: not a samspec-bench run state (a JSON {type(state).__name__}); {STATE_LOST}")
    return state


def _run(d: Path, result: dict) -> Run:
    """One run, summarized; what the report cannot use as it is is counted among its headlines
    and named in its notes (malformed tables, an unknown suite), figures checked."""
    run = Run(path=d, result=result, name=d.name)
    run.headlines, run.gates = summarize(result)
    nf = result.get("non_finite_values")
    if nf:   # numbers the report shows as missing: say so
        run.headlines.append(headline("non-finite numbers in result.json (NaN/inf, shown as –)",
                                      nf["count"], note=", ".join(nf["kinds"])))
    if result["suite"] not in REGISTRY:
        run.notes.append(f"suite {result['suite']!r} is not known to this samspec-bench (written by a newer "
                         "version?); shown with the generic summary")
    problems = malformed(result)
    if problems:
        run.headlines.append(headline("malformed tables / rows in result.json", len(problems),
                                      note="; ".join(problems) if len(problems) == 1 else "see the run's notes"))
        run.notes += problems
    run.figures = load_figures(d, result.get("figures") or [])
    run.headlines += figure_headlines(run.figures)
    return run


def collect(paths: list[str | os.PathLike]) -> Report:
    """Load every run under `paths` (in the order given; a folder's runs sorted by path).
    Runs that cannot be read are listed in the report's `unreadable` with the reason; a
    UserError only when nothing at all can be read."""
    if not paths:
        raise UserError("no results given: pass one or more run directories (or folders holding them)")
    runs: list[Run] = []
    seen: set[str] = set()
    states = []
    unreadable: list[dict] = []
    for given in paths:
        given_p = Path(given)
        state_file = given_p / RUN_STATE_FILE
        has_state = state_file.is_file()
        if has_state:
            try:
                states.append({"path": str(given_p), "state": _read_state(state_file)})
            except UserError as e:
                unreadable.append({"path": str(state_file), "reason": _reason(e)})
        loops: list[dict] = []
        for d in find_run_dirs(given_p, allow_none=has_state, loops=loops):
            key = os.path.normpath(os.path.abspath(d))
            if key in seen:
                continue
            seen.add(key)
            try:
                check_link(d)
                result = load_result(d)
                check_known(result, d)
                run = _run(d, result)
            except Exception as e:  # noqa: BLE001 - one bad run must not block the report of the others
                unreadable.append({"path": str(d), "reason": _reason(e)})
                continue
            runs.append(run)
        unreadable += [u for u in loops if u not in unreadable]   # named, as is every run left out
    if not runs and not states:
        first = unreadable[0]["reason"] if unreadable else "no run found"
        more = f" (and {len(unreadable) - 1} more unreadable)" if len(unreadable) > 1 else ""
        raise UserError(f"nothing to report: {first}{more}")
    names = [r.name for r in runs]
    for r in runs:
        if names.count(r.name) > 1:
            r.name = f"{r.path.parent.name}/{r.path.name}"
    groups: dict[str, list[Run]] = {}
    for r in runs:
        groups.setdefault(r.suite, []).append(r)
    out = []
    for suite in sorted(groups, key=_suite_key):
        g = groups[suite]
        for i, r in enumerate(g):
            r.label = run_label(i)
        out.append(SuiteGroup(suite, g, compare_runs(g) if len(g) > 1 else None))
    return Report(inputs=[str(p) for p in paths], groups=out, run_states=states, unreadable=unreadable)


def run_label(i: int) -> str:
    """A, B, ..., Z, AA, AB, ..."""
    s = ""
    i += 1
    while i:
        i, rem = divmod(i - 1, 26)
        s = chr(65 + rem) + s
    return s
