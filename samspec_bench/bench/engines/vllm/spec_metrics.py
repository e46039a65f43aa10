"""vLLM's own speculative-decoding metrics of a real run, read back as a trace of acceptance:
one interval per reading, each with per-position acceptance, acceptance in % and the mean
acceptance length under vLLM's names (metrics.vllm_spec_decode) and the project's.

Two sources, told apart by their content:
- a Prometheus text exposition scrape of a vLLM server's /metrics: the cumulative counters
  `vllm:spec_decode_num_drafts_total`, `..._num_draft_tokens_total`, `..._num_accepted_tokens_total`
  and `..._num_accepted_tokens_per_pos_total{position="i"}`, summed over their other labels
  (engines, models) as `vllm bench serve` sums them. Several scrapes (several files, or one
  file where a series repeats or `# EOF` ends a scrape) give one interval per pair of
  consecutive scrapes (differences; a counter that went down restarted: its new value is the
  increase, and the reset is counted); one scrape gives one interval, since the server started.
  Counts are exact.
- vLLM's log lines "SpecDecoding metrics: Mean acceptance length: ..., Accepted: N tokens,
  Drafted: N tokens, Per-position acceptance rate: r0, r1, ..., Avg Draft acceptance rate: x%"
  (vllm/v1/spec_decode/metrics.py, SpecDecodingLogging.log), one interval per line. Accepted and
  drafted are exact; the number of drafts is not printed: it is estimated as accepted / sum of
  the per-position rates (= accepted / drafts, to 3 decimals), else accepted / (mean length - 1),
  else (nothing accepted) drafted / k, and marked so (`drafts_exact`).

Lines that are neither are counted and the first few are quoted: nothing is dropped silently.
A file that holds neither kind is a one-line error. `from_get_metrics` reads the same counters
from `LLM.get_metrics()` (the offline engine).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from samspec_bench.errors import UserError
from samspec_bench.metrics import vllm_spec_decode

PREFIX = "vllm:spec_decode_"
DRAFTS, DRAFT_TOKENS, ACCEPTED, PER_POS = (f"{PREFIX}num_drafts", f"{PREFIX}num_draft_tokens",
                                           f"{PREFIX}num_accepted_tokens", f"{PREFIX}num_accepted_tokens_per_pos")
LOG_MARK = "SpecDecoding metrics:"
EXAMPLES = 3   # lines quoted of each kind not understood
_NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
_SAMPLE = re.compile(rf'^({_NAME})(?:\{{((?:[^"}}]|"(?:[^"\\]|\\.)*")*)\}})?\s+(\S+)(?:\s+-?\d+(?:\.\d+)?)?\s*$')
_LABEL = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*,?')
_FIELD_SPLIT = re.compile(r",\s+(?=[A-Z][A-Za-z -]*: )")
NEITHER = ("neither a Prometheus scrape of vLLM's spec-decode counters (vllm:spec_decode_*_total, from a server's "
           "/metrics) nor a vLLM log with 'SpecDecoding metrics:' lines; give one of those")


@dataclass
class Interval:
    """The counts of one reading: exact from counters; from a log line, drafts maybe estimated."""

    source: str
    drafts: float | None
    draft_tokens: int
    accepted: int
    accepted_per_pos: list[float]
    drafts_exact: bool = True
    printed: dict[str, Any] = field(default_factory=dict)   # a log line's own figures, as printed

    def figures(self) -> dict[str, Any]:
        """vLLM's names (metrics.vllm_spec_decode), the project's beside them, and the source."""
        d = self.drafts if self.drafts else 0
        v = vllm_spec_decode(d, self.draft_tokens, self.accepted, self.accepted_per_pos)
        v["spec_decode_num_drafts"] = _number(self.drafts)
        v["spec_decode_per_position_acceptance_rates"] = [p / d for p in self.accepted_per_pos] if d else []
        ours = {"acceptance_rate": None if v["spec_decode_acceptance_rate"] is None
                else v["spec_decode_acceptance_rate"] / 100,
                "acceptance_length": v["spec_decode_acceptance_length"],
                "per_position_acceptance": v["spec_decode_per_position_acceptance_rates"]}
        return {"source": self.source, **v, **ours, "drafts_exact": self.drafts_exact,
                **({"printed": self.printed} if self.printed else {})}


def _number(x: float | None) -> float | int | None:
    return None if x is None else (int(x) if float(x).is_integer() else float(x))


@dataclass
class Reading:
    """What a set of files gave: the format, the intervals, and a tally of every line."""

    format: str
    intervals: list[Interval]
    lines: dict[str, int]
    not_understood: list[str]
    resets: int = 0
    inconsistent: list[str] = field(default_factory=list)   # log lines whose printed rate disagrees

    def total(self) -> Interval:
        """Every interval pooled (sums, then ratios); drafts exact only if every interval's is."""
        iv = self.intervals
        k = max((len(i.accepted_per_pos) for i in iv), default=0)
        drafts = None if any(i.drafts is None for i in iv) else sum(i.drafts for i in iv)
        per_pos = [sum(i.accepted_per_pos[p] for i in iv if p < len(i.accepted_per_pos)) for p in range(k)]
        return Interval(f"{len(iv)} interval(s) pooled", drafts, sum(i.draft_tokens for i in iv),
                        sum(i.accepted for i in iv), per_pos, all(i.drafts_exact for i in iv))


# --- Prometheus text exposition --------------------------------------------------------------------

def _scrapes(text: str, tally: dict[str, int], bad: list[str]) -> list[dict[tuple, float]]:
    """The scrapes in one file's text: {(name, labels): value}; a series seen again, or `# EOF`,
    starts the next scrape."""
    scrapes: list[dict[tuple, float]] = [{}]
    for line in text.splitlines():
        s = line.strip()
        if not s:
            tally["blank"] += 1
        elif s == "# EOF":
            tally["comment"] += 1
            scrapes.append({})
        elif s.startswith("#"):
            tally["comment"] += 1
        elif (m := _SAMPLE.match(s)) is None or not _is_float(m.group(3)):
            tally["not_understood"] += 1
            if len(bad) < EXAMPLES:
                bad.append(s[:200])
        else:
            labels = tuple(sorted(_LABEL.findall(m.group(2) or "")))
            key = (m.group(1), labels)
            if key in scrapes[-1]:
                scrapes.append({})
            scrapes[-1][key] = float(m.group(3))
            tally["spec_decode" if m.group(1).startswith(PREFIX) else "other_metric"] += 1
    return [sc for sc in scrapes if sc]


def _is_float(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def scrape_totals(scrape: dict[tuple, float]) -> dict[str, Any] | None:
    """The spec-decode counters of one scrape, summed over their other labels; None when it has none."""
    out: dict[str, Any] = {DRAFTS: 0.0, DRAFT_TOKENS: 0.0, ACCEPTED: 0.0, PER_POS: {}}
    found = False
    for (name, labels), value in scrape.items():
        if not name.endswith("_total"):
            continue   # _created timestamps and the like
        base = name[: -len("_total")]
        if base == PER_POS:
            pos = dict(labels).get("position")
            if pos is None or not pos.isdigit():
                continue
            out[PER_POS][int(pos)] = out[PER_POS].get(int(pos), 0.0) + value
            found = True
        elif base in (DRAFTS, DRAFT_TOKENS, ACCEPTED):
            out[base] += value
            found = True
    return out if found else None


def _difference(a: dict, b: dict | None, source: str) -> tuple[Interval, int]:
    """Interval from scrape b (None: the server's start) to scrape a; a counter that went
    down restarted (Prometheus' rule: its new value is the increase)."""
    resets = 0

    def inc(x: float, y: float) -> float:
        nonlocal resets
        if x < y:
            resets += 1
            return x
        return x - y

    z = b or {DRAFTS: 0.0, DRAFT_TOKENS: 0.0, ACCEPTED: 0.0, PER_POS: {}}
    k = max([*a[PER_POS], *z[PER_POS], -1]) + 1
    per_pos = [inc(a[PER_POS].get(p, 0.0), z[PER_POS].get(p, 0.0)) for p in range(k)]
    iv = Interval(source, inc(a[DRAFTS], z[DRAFTS]), int(inc(a[DRAFT_TOKENS], z[DRAFT_TOKENS])),
                  int(inc(a[ACCEPTED], z[ACCEPTED])), per_pos)
    return iv, resets


def read_prometheus(texts: Sequence[tuple[str, str]]) -> Reading:
    """(name, text) of each scrape file, in order -> the intervals between consecutive scrapes."""
    tally = {"blank": 0, "comment": 0, "spec_decode": 0, "other_metric": 0, "not_understood": 0}
    bad: list[str] = []
    totals: list[tuple[str, dict]] = []
    for name, text in texts:
        for i, sc in enumerate(_scrapes(text, tally, bad)):
            t = scrape_totals(sc)
            if t is not None:
                totals.append((f"{name} scrape {i + 1}", t))
    if len(totals) == 1:
        iv, resets = _difference(totals[0][1], None, f"{totals[0][0]} (since the server started)")
        intervals = [iv]
    else:
        intervals, resets = [], 0
        for (na, a), (nb, b) in zip(totals[1:], totals[:-1]):
            iv, r = _difference(a, b, f"{nb} -> {na}")
            intervals.append(iv)
            resets += r
    return Reading("prometheus", intervals, tally, bad, resets)


# --- vLLM's log lines --------------------------------------------------------------------------------

_UNIT = re.compile(r"^\s*([-+0-9.eE]+|nan|inf)\s*(tokens/s|tokens|%)?\s*$", re.I)


def _value(text: str, unit: str | None) -> float:
    m = _UNIT.match(text)
    if m is None or (m.group(2) or None) != unit:
        raise ValueError(text)
    return float(m.group(1))


def parse_log_line(line: str, source: str) -> Interval:
    """One "SpecDecoding metrics:" line (ValueError when its fields are not vLLM's)."""
    prefix, _, rest = line.partition(LOG_MARK)
    fields = {}
    for part in _FIELD_SPLIT.split(rest.strip()):
        key, sep, val = part.partition(": ")
        if not sep:
            raise ValueError(part)
        fields[key.strip()] = val.strip()
    accepted = _value(fields["Accepted"], "tokens")
    drafted = _value(fields["Drafted"], "tokens")
    length = _value(fields["Mean acceptance length"], None)
    rate_text = fields.get("Avg Draft acceptance rate", fields.get("Draft acceptance rate"))
    rates = [float(x) for x in fields.get("Per-position acceptance rate", "").split(",") if x.strip()]
    printed = {"mean_acceptance_length": length, "per_position_acceptance_rate": rates,
               "at": prefix.strip() or None}
    if rate_text is not None:
        printed["avg_draft_acceptance_rate_pct"] = _value(rate_text, "%")
    for name in ("Accepted throughput", "Drafted throughput"):
        if name in fields:
            printed[name.lower().replace(" ", "_") + "_tok_s"] = _value(fields[name], "tokens/s")
    known = {"Accepted", "Drafted", "Mean acceptance length", "Avg Draft acceptance rate", "Draft acceptance rate",
             "Per-position acceptance rate", "Accepted throughput", "Drafted throughput"}
    if set(fields) - known:
        printed["fields_not_read"] = sorted(set(fields) - known)
    if sum(rates) > 0 and accepted > 0:
        drafts = round(accepted / sum(rates))
    elif length > 1 and accepted > 0:
        drafts = round(accepted / (length - 1))
    elif rates and drafted > 0:
        drafts = math.ceil(drafted / len(rates))   # nothing accepted: as if every draft were k long
    else:
        drafts = None if drafted > 0 else 0
    per_pos = [r * drafts for r in rates] if drafts else [0.0] * len(rates)
    return Interval(source, drafts, int(drafted), int(accepted), per_pos, drafts_exact=False, printed=printed)


def read_logs(texts: Sequence[tuple[str, str]]) -> Reading:
    """(name, text) of each log file -> one interval per SpecDecoding line, in order."""
    tally = {"spec_decoding_lines": 0, "other_log_lines": 0, "blank": 0, "not_understood": 0}
    bad: list[str] = []
    intervals: list[Interval] = []
    inconsistent: list[str] = []
    for name, text in texts:
        for lineno, line in enumerate(text.splitlines(), start=1):
            if LOG_MARK not in line:
                tally["blank" if not line.strip() else "other_log_lines"] += 1
                continue
            try:
                iv = parse_log_line(line, f"{name}:{lineno}")
            except (KeyError, ValueError):
                tally["not_understood"] += 1
                if len(bad) < EXAMPLES:
                    bad.append(line.strip()[:200])
                continue
            tally["spec_decoding_lines"] += 1
            shown = iv.printed.get("avg_draft_acceptance_rate_pct")
            if shown is not None and iv.draft_tokens and abs(100 * iv.accepted / iv.draft_tokens - shown) > 0.051:
                inconsistent.append(iv.source)
            intervals.append(iv)
    return Reading("log", intervals, tally, bad, inconsistent=inconsistent)


# --- files -------------------------------------------------------------------------------------------

def kind_of(text: str) -> str | None:
    """"prometheus", "log" or None (neither) for one file's text."""
    if LOG_MARK in text:
        return "log"
    if any(_SAMPLE.match(s.strip()) and s.strip().startswith(PREFIX) and "_total" in s.split("{")[0].split()[0]
           for s in text.splitlines()):
        return "prometheus"
    return None


def read_files(paths: Sequence[str]) -> Reading:
    """Scrapes or logs (one kind for all files), each file checked: a one-line error names a
    file that is neither, cannot be read, or is of the other kind."""
    if not paths:
        raise UserError("spec-metrics: give one or more files: Prometheus scrapes of a vLLM server's /metrics, or "
                        "vLLM logs with 'SpecDecoding metrics:' lines")
    texts, kinds = [], []
    for p in paths:
        try:
            text = Path(p).read_text(encoding="utf-8", errors="replace")
        except OSError as e:
            raise UserError(f"{p}: cannot read it ({e.strerror or e}); give a scrape or log file") from None
        kind = kind_of(text)
        if kind is None:
            raise UserError(f"{p}: {NEITHER}")
        texts.append((str(p), text))
        kinds.append(kind)
    if len(set(kinds)) > 1:
        raise UserError(f"{paths[kinds.index('log')]} is a log and {paths[kinds.index('prometheus')]} a Prometheus "
                        "scrape: give files of one kind per run")
    reading = read_logs(texts) if kinds[0] == "log" else read_prometheus(texts)
    if not reading.intervals:
        raise UserError(f"{', '.join(map(str, paths))}: no complete spec-decode reading (drafts, draft tokens, "
                        f"accepted tokens); {NEITHER}")
    return reading


def from_get_metrics(counters: dict[str, Any] | None) -> dict[str, Any] | None:
    """vLLM's names from `LLM.get_metrics()` spec-decode counters (name -> value, or a list per
    position for the per-position vector; e.g. VllmEngine's per-call differences); None when
    there are none."""
    if not counters or DRAFTS not in counters or counters.get(DRAFTS) is None:
        return None
    per_pos = counters.get(PER_POS) or []
    return vllm_spec_decode(int(counters[DRAFTS]), int(counters.get(DRAFT_TOKENS) or 0),
                            int(counters.get(ACCEPTED) or 0), [int(x) for x in per_pos])
