"""One TensorBoard run (an event file, or a folder of one run's event files) as a TrainingRun,
with what damage cost it: counted records and bytes, the points lost around each damaged spot
(damage.py), and damage before a file's first intact record bounded by its bytes. In a restarted
run, damage in an earlier file at steps a later file logged again is told as the run stood after
that file: the points it cost there that later files logged again were replaced, not lost."""

from __future__ import annotations

from pathlib import Path

from samspec_bench.errors import UserError
from samspec_bench.evals.training_logs.damage import lost_points, lost_text, untold_text
from samspec_bench.evals.training_logs.runs_folder import tensorboard_groups
from samspec_bench.evals.training_logs.series import RELOGGED_DAMAGE, SeriesBuilder, TrainingRun, step_notes
from samspec_bench.evals.training_logs.tensorboard import EventScalars, HeadDamage, event_files, read_event_file


def _one_run(path: Path, files: list[Path]) -> None:
    """Event files of one run share a folder and a name prefix; several folders or prefixes are
    several runs: a UserError."""
    groups = tensorboard_groups(files)
    if len(groups) > 1:
        shown = ", ".join(str(Path(d) / (pre + "*")) if pre else d for d, pre in groups[:4])
        raise UserError(f"{path}: holds {len(groups)} TensorBoard runs ({shown}{', ...' if len(groups) > 4 else ''}); "
                        "pass each run's folder or event file as its own argument, or their parent folder")


def _head_note(h: HeadDamage) -> str:
    where = f"{Path(h.file).name}: {h.bytes} byte(s) of damage before a file's first intact record"
    if h.junk_only:
        return f"{where}, in front of its intact version record: no record lost"
    upto = f"at steps up to {h.first_step}" if h.first_step is not None else "(no intact step after it)"
    return (f"{where}: at most {h.points_at_most} point(s) lost {upto}; which tags cannot be told (no intact "
            "record before it)")


def _as_of(scalars: EventScalars, f: int) -> tuple[dict[str, list[int]], set[tuple[int, str]]]:
    """The run as file `f` left it (an earlier file's steps from f's first step on were re-logged
    by f: those are f's) and the (step, tag) points the later files logged."""
    starts = scalars.file_start
    own, earlier, later = {}, {}, set()
    for tag, pts in scalars.points.items():
        a = starts[f].get(tag, 0)
        b = starts[f + 1].get(tag, 0) if f + 1 < len(starts) else len(pts)
        own[tag], earlier[tag] = [p[0] for p in pts[a:b]], [p[0] for p in pts[:a]]
        later.update((p[0], tag) for p in pts[b:])
    first = min((s[0] for s in own.values() if s), default=None)
    view = {t: [s for s in earlier[t] if first is None or s < first] + own[t] for t in own}
    return view, later


def _relogged(scalars: EventScalars, untold: list) -> tuple[int, list]:
    """A damaged spot of a restarted run's earlier file that no point can be pinned on in the whole
    run, because a later file logged its step again: the points it lost as that file left the run,
    when later files logged every one of them, were replaced, not lost. (points replaced, spots
    still unknown)."""
    still, replaced = list(untold), 0
    for k, w in enumerate(scalars.windows):
        f = scalars.window_file[k]
        if w not in still or f + 1 >= len(scalars.files):
            continue
        view, later = _as_of(scalars, f)
        pts = {(s, t) for s, tags in lost_points(view, [w]).items() for t in tags}
        if pts and pts <= later:
            replaced += len(pts)
            still.remove(w)
    return replaced, still


def read_tensorboard(path: Path, label: str) -> TrainingRun:
    files = event_files(path) if path.is_dir() else [path]
    if not files:
        raise UserError(f"{path}: no TensorBoard event files (*.tfevents.*) in it")
    _one_run(path, files)
    scalars = EventScalars()
    for f in files:
        read_event_file(f, scalars)
    run = TrainingRun(path=str(path), format="tensorboard", label=label)
    builder = SeriesBuilder()
    for tag, pts in scalars.points.items():
        for step, value, wall in pts:
            builder.add(tag, step, value, wall)
    builder.build_into(run)
    st = scalars.stats
    run.read.update({"files": len(files), "records": st.records})
    run.count("corrupt_records", st.corrupt)
    run.count("truncated_records", st.truncated_tail)
    run.count("undecodable_records", st.undecodable)
    run.count("skipped_bytes", st.skipped_bytes)
    run.count("non_scalar_values", scalars.non_scalar_values)   # text, histograms, images, vectors: not curves
    run.count("negative_steps", scalars.negative_steps)
    step_notes(run, "record(s)")
    untold: list = []
    lost = lost_points({t: [p[0] for p in pts] for t, pts in scalars.points.items()}, scalars.windows, untold)
    run.count("lost_points", sum(len(t) for t in lost.values()))
    run.count("steps_lost", len(lost))
    relogged, untold = _relogged(scalars, untold)
    run.count(RELOGGED_DAMAGE, relogged)
    run.count("lost_points_at_most", sum(h.points_at_most for h in scalars.head))
    run.count("damage_cost_unknown", len(untold))
    if len(files) > 1 and builder.duplicates:
        run.notes.append(f"{len(files)} event files read as one restarted run, oldest first (by the time in their "
                         f"names): {builder.duplicates} point(s) logged again at a step already read; the later "
                         "file's value kept")
    if st.corrupt or st.truncated_tail or st.undecodable:
        cost = (([lost_text(lost)] if lost else []) + ([untold_text(untold)] if untold else [])
                + ([f"{relogged} point(s) the damage cost logged again by a later event file of the restarted "
                    "run: replaced, not lost (the later file's value kept)"] if relogged else [])
                + [_head_note(h) for h in scalars.head])
        if not cost:      # damage with no intact step on either side, and no head damage: nothing to bound it
            cost = ["points lost: unknown"]
        run.notes.append(f"{st.corrupt} corrupt (CRC mismatch), {st.truncated_tail} truncated and "
                         f"{st.undecodable} undecodable record(s) skipped ({st.skipped_bytes} bytes passed over, "
                         f"reading resumed after each): " + "; ".join(cost))
    if st.records == 0:
        raise UserError(f"{path}: no readable TensorBoard record (the file is empty or damaged from its first "
                        "record); pass an intact event file")
    return run
