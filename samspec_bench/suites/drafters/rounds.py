"""The drafter benchmark's records in its run folder, so an interrupted run keeps its finished
work: the run's identity (config.json, what --resume checks), one record per finished round
(rounds.jsonl: a replay round times every drafter once, a sweep round every drafter at every
length, so a round's figures are comparable with each other), read back by --resume, and the
sessions (process and start) that measured them: rounds from two sessions mix machine states."""

from __future__ import annotations

import datetime as _dt
import math
import os

from samspec_bench.results import INPUT_FILES, RunDir, check_resume, check_same_files, file_sha256
from samspec_bench.suites.drafters.config import SUITE, DraftersConfig
from samspec_bench.suites.drafters.timing import MODES, SWEEP_REPEAT_SECONDS

ROUNDS_FILE = "rounds.jsonl"
KINDS = ("replay", "sweep")


def run_identity(cfg: DraftersConfig, names: list[str]) -> dict:
    """What the rounds measured: a resumed run must measure the same (config.json). The trace
    files carry their sha256 (INPUT_FILES): an edited file would be timed as if it were the old one."""
    return {"drafters": list(cfg.drafters), "measured_drafters": list(names), "k": cfg.k,
            "traces": list(cfg.traces), "tokenizer": cfg.tokenizer, "max_tokens": cfg.max_tokens,
            "sweep": list(cfg.sweep), "sweep_steps": cfg.sweep_steps, "repeats": cfg.repeats,
            "chat_template": cfg.chat_template, "on_error": cfg.on_error,
            INPUT_FILES: {t: file_sha256(t) for t in cfg.traces}}


def check_identity(resume, identity: dict) -> None:
    """Refuse (one line) a --resume folder of another suite, or whose run measured something else."""
    saved = check_resume(resume, SUITE, identity, [k for k in identity if k != INPUT_FILES])
    check_same_files(saved, identity[INPUT_FILES], resume)


def new_session() -> dict:
    """This process's start of the run: the rounds it measures carry it."""
    return {"pid": os.getpid(), "started": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="microseconds")}


def _number(x, low: float = 0.0, integer: bool = False) -> bool:
    """A finite number >= low (`integer`: an int), not a bool: what a measured round writes."""
    return (isinstance(x, int if integer else (int, float)) and not isinstance(x, bool) and math.isfinite(x)
            and x >= low)


def _replay_ok(data, names: list[str]) -> bool:
    # a pass takes time and indexes tokens (the figures divide by them); drafts and bytes may be 0
    return isinstance(data, dict) and set(data) == set(names) and all(
        isinstance(d, dict) and all(isinstance(d.get(m), dict) and _number(d[m].get("seconds"), 1e-12)
                                    and _number(d[m].get("loops"), 1, True) for m in MODES)
        and _number(d.get("tokens"), 1, True) and _number(d.get("drafts"), 0, True) and _number(d.get("mem"))
        for d in data.values())


def _point_ok(p, names: list[str], lengths: list[int]) -> bool:
    return isinstance(p, dict) and p.get("drafter") in names and p.get("context_tokens") in lengths and all(
        _number(p.get(f), 1e-12) for f in ("ns_per_step", "ns_per_token_build", "seconds"))


class Rounds:
    """The rounds of one run folder: those recorded (read back on --resume) and those this
    session adds, each appended and flushed as it finishes."""

    def __init__(self, run_dir: RunDir, cfg: DraftersConfig, names: list[str], session: dict):
        self.run_dir, self.session, self.names, self.cfg = run_dir, session, names, cfg
        self.done: dict[str, dict[int, dict]] = {kind: {} for kind in KINDS}   # kind -> round -> record
        self.ignored = 0   # records that do not fit this run (damaged by hand): measured again
        self.resumed = {kind: 0 for kind in KINDS}

    def load(self) -> None:
        """Read the recorded rounds back (the last record of a round wins)."""
        sweep_points = []
        for rec in self.run_dir.samples(ROUNDS_FILE):
            kind, rep, sess = rec.get("kind"), rec.get("round"), rec.get("session")
            ok = (kind in KINDS and isinstance(rep, int) and 0 <= rep < self.cfg.repeats and isinstance(sess, dict)
                  and isinstance(sess.get("pid"), int) and isinstance(sess.get("started"), str))
            if ok and kind == "replay":
                ok = _replay_ok(rec.get("data"), self.names)
            elif ok:
                pts = rec.get("data")
                ok = isinstance(pts, list) and all(_point_ok(p, self.names, self.cfg.sweep) for p in pts) and len(
                    {(p["drafter"], p["context_tokens"]) for p in pts}) == len(pts)
                sweep_points += pts if ok else []
            if ok:
                self.ignored += rep in self.done[kind]   # a round recorded twice: the earlier is not used
                self.done[kind][rep] = rec
            else:
                self.ignored += 1
        # a sweep round holds every point but those that ran once (slower than SWEEP_REPEAT_SECONDS)
        slow = {(p["drafter"], p["context_tokens"]) for p in sweep_points if p["seconds"] > SWEEP_REPEAT_SECONDS}
        every = {(n, L) for n in self.names for L in self.cfg.sweep}
        for rep, rec in list(self.done["sweep"].items()):
            if every - {(p["drafter"], p["context_tokens"]) for p in rec["data"]} - slow:
                del self.done["sweep"][rep]
                self.ignored += 1
        self.resumed = {kind: len(self.done[kind]) for kind in KINDS}

    def recorded(self, kind: str) -> dict[int, object]:
        """Round -> its measurements, as timing.measure_replay / fastest_sweep take them."""
        return {rep: rec["data"] for rep, rec in self.done[kind].items()}

    def record(self, kind: str, rep: int, data) -> None:
        rec = {"kind": kind, "round": rep, "session": self.session, "data": data}
        self.run_dir.append_sample(rec, ROUNDS_FILE)
        self.done[kind][rep] = rec

    def sessions(self) -> list[dict]:
        """The sessions that measured the rounds used, in the order they started, with their rounds."""
        seen: dict[tuple, dict] = {}
        for kind in KINDS:
            for rep in sorted(self.done[kind]):
                s = self.done[kind][rep]["session"]
                row = seen.setdefault((s["started"], s["pid"]), {"pid": s["pid"], "started": s["started"],
                                                                 "replay_rounds": 0, "sweep_rounds": 0})
                row[f"{kind}_rounds"] += 1
        return [seen[key] for key in sorted(seen)]

    def extra(self) -> dict:
        """result.json's record of the rounds: the same keys for a run measured at once."""
        sessions = self.sessions()
        note = None
        if len(sessions) > 1:
            note = (f"rounds measured in {len(sessions)} sessions (processes "
                    f"{', '.join(str(s['pid']) for s in sessions)}; the run was resumed): timings from different "
                    "sessions mix machine states, and a drafter's fastest round and its baseline's may come from "
                    "different ones")
        return {"rounds_file": ROUNDS_FILE, "sessions": sessions, "sessions_note": note,
                "resumed_rounds": dict(self.resumed), "ignored_round_records": self.ignored}
