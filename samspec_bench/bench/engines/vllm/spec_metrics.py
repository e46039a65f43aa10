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
  Counts are exact. A counter that is not finite or negative, or counts that contradict each
  other (accepted tokens above draft tokens, a position accepted more often than there were
  drafts, positions summing above the accepted tokens: spec_counters.py) are a one-line error
  naming the file and line (or the scrapes); a counter absent from a scrape (num_drafts: vLLM V0
  has none) is unknown there, never 0 nor a reset, the figures that need it are unknown, and a
  note names it; spec-decode series that are not read (V0's acceptance-rate and efficiency
  gauges, emitted tokens) are listed as not used.
- vLLM's log lines "SpecDecoding metrics: Mean acceptance length: ..., Accepted: N tokens,
  Drafted: N tokens, Per-position acceptance rate: r0, r1, ..., Avg Draft acceptance rate: x%"
  (vllm/v1/spec_decode/metrics.py, SpecDecodingLogging.log), one interval per line. Accepted and
  drafted are exact; the number of drafts is not printed: it is drafted / k where every draft
  holding k tokens (EAGLE, MTP) agrees with the printed rates and mean length to their rounding,
  else accepted / sum of the per-position rates (= accepted / drafts, to 3 decimals), else
  accepted / (mean length - 1), else (nothing accepted) drafted / k, always within [drafted / k,
  drafted], and marked so (`drafts_exact`). vLLM 0.8's shorter lines
  ("Draft acceptance rate: x%, Accepted: N tokens, Drafted: N tokens") and fields added after the
  known ones are read too. Accepted or Drafted not finite, negative, or accepted > drafted: a
  one-line error naming file:line; a printed figure that is not finite (mean length, a
  per-position rate, the rate in %) is not used, and counted and shown (`non_finite`).
- vLLM V0's log lines "Speculative metrics: Draft acceptance rate: r, System efficiency: e, Number
  of speculative tokens: k, Number of accepted tokens: N, Number of draft tokens: N, Number of
  emitted tokens: N." (vllm/engine/metrics.py): cumulative since the engine started, so one
  interval per pair of consecutive lines of a file (the first: since the start); drafts are
  draft tokens / k (marked estimated); no per-position figures. A printed figure that is not
  finite (acceptance rate, system efficiency, emitted tokens) is not used, counted as V1's are. More accepted than drafted
  between two lines is a one-line error naming file:line; a change of k between two lines is
  counted and noted, and (counts not gone down) that interval's drafts are unknown.

Lines that are neither are counted and the first few are quoted (a spec-decode log line not
understood with the reason): nothing is dropped silently. A file that holds neither kind is a
one-line error, and so are spec-decode log lines none of which could be read. `from_get_metrics` reads the same counters
from `LLM.get_metrics()` (the offline engine).
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any, Sequence

from samspec_bench.bench.engines.vllm.spec_counters import (ACCEPTED, DRAFT_TOKENS, DRAFTS, PER_POS, PREFIX,
                                                              appeared, appeared_notes, check_counter, check_counts,
                                                              missing_notes, positions, series_increase, vanished,
                                                              vanished_notes)
from samspec_bench.bench.engines.vllm.spec_readings import Interval, Reading
from samspec_bench.errors import UserError
from samspec_bench.metrics import vllm_spec_decode

LOG_MARK = "SpecDecoding metrics:"
V0_MARK = "Speculative metrics:"   # vLLM V0's LoggingStatLogger
EXAMPLES = 3   # lines quoted of each kind not understood
_NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
_SAMPLE = re.compile(rf'^({_NAME})(?:\{{((?:[^"}}]|"(?:[^"\\]|\\.)*")*)\}})?\s+(\S+)(?:\s+-?\d+(?:\.\d+)?)?\s*$')
_LABEL = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*,?')
_FIELD_SPLIT = re.compile(r",\s+(?=[A-Za-z][A-Za-z0-9 _-]*: )")
NEITHER = ("neither a Prometheus scrape of vLLM's spec-decode counters (vllm:spec_decode_*_total, from a server's "
           "/metrics) nor a vLLM log with 'SpecDecoding metrics:' lines; give one of those")


# --- Prometheus text exposition --------------------------------------------------------------------

def _scrapes(text: str, tally: dict[str, int], bad: list[str], name: str = "scrape") -> list[dict[tuple, float]]:
    """The scrapes in one file's text: {(name, labels): value}; a series seen again, or `# EOF`,
    starts the next scrape. A spec-decode counter not finite or negative: a UserError naming
    name:line."""
    scrapes: list[dict[tuple, float]] = [{}]
    for lineno, line in enumerate(text.splitlines(), start=1):
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
            check_counter(m.group(1), m.group(3), f"{name}:{lineno}")
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


def scrape_totals(scrape: dict[tuple, float], not_used: dict[str, int] | None = None) -> dict[str, Any] | None:
    """The spec-decode counters of one scrape, summed over their other labels (DRAFTS, DRAFT_TOKENS
    or ACCEPTED None when the scrape has no such counter: unknown, not 0); None when it has none.
    Spec-decode series not read (gauges, other counters, a per-position series without a numeric
    position) are counted into `not_used` by name; `_created` timestamps are not."""
    out: dict[str, Any] = {DRAFTS: None, DRAFT_TOKENS: None, ACCEPTED: None, PER_POS: {}}
    found = False
    unused = not_used if not_used is not None else {}
    for (name, labels), value in scrape.items():
        if not name.startswith(PREFIX) or name.endswith("_created"):
            continue
        base = name[: -len("_total")] if name.endswith("_total") else None
        if base == PER_POS:
            pos = dict(labels).get("position")
            if pos is None or not pos.isdigit():
                key = f'{name}{{position="{pos}"}}' if pos is not None else f"{name} (no position label)"
                unused[key] = unused.get(key, 0) + 1
                continue
            out[PER_POS][int(pos)] = out[PER_POS].get(int(pos), 0.0) + value
            found = True
        elif base in (DRAFTS, DRAFT_TOKENS, ACCEPTED):
            out[base] = (out[base] or 0.0) + value
            found = True
        else:
            unused[name] = unused.get(name, 0) + 1
    return out if found else None


def _interval(t: dict, source: str, between: bool, positions_before: list[float] | None = None) -> Interval:
    """The interval of the counts `t` (scrape_totals of one scrape, or of an increase): checked;
    per-position counts unknown where a position is missing, or where the scrape before had
    other positions (k changed)."""
    pa = positions(t[PER_POS])
    per_pos = pa if pa is not None and (not between or (positions_before is not None
                                                        and len(positions_before) == len(pa))) else None
    drafts, tokens, accepted = (t[c] for c in (DRAFTS, DRAFT_TOKENS, ACCEPTED))
    check_counts(source, drafts, tokens, accepted, per_pos, between=between)
    return Interval(source, drafts, None if tokens is None else int(tokens),
                    None if accepted is None else int(accepted), per_pos)


def read_prometheus(texts: Sequence[tuple[str, str]]) -> Reading:
    """(name, text) of each scrape file, in order -> the intervals between consecutive scrapes,
    each series differenced on its own and then summed over engines."""
    tally = {"blank": 0, "comment": 0, "spec_decode": 0, "other_metric": 0, "not_understood": 0}
    bad: list[str] = []
    scrapes: list[tuple[str, dict, dict]] = []   # (name, raw series, totals)
    not_used: dict[str, int] = {}
    for name, text in texts:
        for i, sc in enumerate(_scrapes(text, tally, bad, name)):
            t = scrape_totals(sc, not_used)
            if t is not None:
                scrapes.append((f"{name} scrape {i + 1}", sc, t))
    gone: list[tuple[str, str, str]] = []   # (scrape before, scrape after, labels) of a series gone
    new: list[tuple[str, str, str]] = []   # ... of a series new in the scrape after
    if len(scrapes) == 1:
        intervals, resets = [_interval(scrapes[0][2], f"{scrapes[0][0]} (since the server started)", False)], 0
    else:
        intervals, resets = [], 0
        for (nb, sb, tb), (na, sa, _) in zip(scrapes[:-1], scrapes[1:]):
            inc, r = series_increase(sa, sb)
            gone += [(nb, na, lab) for lab in vanished(sa, sb)]
            new += [(nb, na, lab) for lab in appeared(sa, sb)]
            t = scrape_totals(inc) or {DRAFTS: None, DRAFT_TOKENS: None, ACCEPTED: None, PER_POS: {}}
            intervals.append(_interval(t, f"{nb} -> {na}", True, positions(tb[PER_POS])))
            resets += r
        for n, _, t in scrapes:   # each scrape on its own: counts since its server started
            _interval(t, n, between=False)
    return Reading("prometheus", intervals, tally, bad, resets, not_used=not_used,
                   notes=missing_notes([(n, t) for n, _, t in scrapes]) + vanished_notes(gone) + appeared_notes(new))


# --- vLLM's log lines --------------------------------------------------------------------------------

_UNIT = re.compile(r"^\s*([-+]?(?:nan|inf(?:inity)?|[0-9.]+(?:[eE][-+]?[0-9]+)?))\s*(tokens/s|tokens|%)?\s*$", re.I)
_KNOWN = {"Accepted", "Drafted", "Mean acceptance length", "Avg Draft acceptance rate", "Draft acceptance rate",
          "Per-position acceptance rate", "Accepted throughput", "Drafted throughput"}


def _value(text: str, unit: str | None) -> float:
    m = _UNIT.match(text)
    if m is None or (m.group(2) or None) != unit:
        raise ValueError(f"{text!r} is not a number{f' in {unit}' if unit else ''}")
    return float(m.group(1))


def _fields(rest: str) -> dict[str, str]:
    """"Key: value, Key: value" -> {key: value} (a value may hold commas: a list of rates)."""
    fields = {}
    for part in _FIELD_SPLIT.split(rest.strip().rstrip(".")):
        key, sep, val = part.partition(": ")
        if not sep:
            raise ValueError(f"{part[:40]!r} is not 'Field: value'")
        fields[key.strip()] = val.strip()
    return fields


def _need(fields: dict[str, str], name: str, unit: str | None) -> float:
    if name not in fields:
        raise ValueError(f"no '{name}' field")
    return _value(fields[name], unit)


def _counts(accepted: float, drafted: float, source: str, names: tuple[str, str]) -> tuple[int, int]:
    """Accepted and drafted token counts of a log line: finite, >= 0, accepted <= drafted; else
    a UserError naming source (file:line)."""
    for name, x in zip(names, (accepted, drafted)):
        if not math.isfinite(x) or x < 0:
            raise UserError(f"{source}: {name} {x:g} is {'not finite' if not math.isfinite(x) else 'negative'}; "
                            "a token count is a finite number >= 0: give vLLM's log lines unedited")
    if accepted > drafted:
        raise UserError(f"{source}: {names[0]} {accepted:g} > {names[1]} {drafted:g}, impossible (vLLM accepts at "
                        "most what it drafts): give vLLM's log lines unedited")
    return int(accepted), int(drafted)


def _finite(x: float | None, name: str, non_finite: list[str]) -> float | None:
    if x is not None and not math.isfinite(x):
        non_finite.append(name)
        return None
    return x


def parse_log_line(line: str, source: str) -> Interval:
    """One "SpecDecoding metrics:" line (ValueError saying why when its fields are not vLLM's;
    UserError when its counts are impossible)."""
    prefix, _, rest = line.partition(LOG_MARK)
    fields = _fields(rest)
    accepted, drafted = _counts(_need(fields, "Accepted", "tokens"), _need(fields, "Drafted", "tokens"), source,
                                ("Accepted", "Drafted"))
    bad: list[str] = []
    length = _finite(_need(fields, "Mean acceptance length", None) if "Mean acceptance length" in fields else None,
                     "Mean acceptance length", bad)
    rate_text = fields.get("Avg Draft acceptance rate", fields.get("Draft acceptance rate"))
    try:
        rates = [float(x) for x in fields.get("Per-position acceptance rate", "").split(",") if x.strip()]
    except ValueError:
        raise ValueError(f"Per-position acceptance rate {fields['Per-position acceptance rate'][:40]!r} is not a "
                         "list of numbers") from None
    if not all(math.isfinite(r) for r in rates):
        bad.append("Per-position acceptance rate")
        rates = []
    printed: dict[str, Any] = {"mean_acceptance_length": length, "per_position_acceptance_rate": rates,
                               "at": prefix.strip() or None}
    if rate_text is not None:
        printed["avg_draft_acceptance_rate_pct"] = _finite(_value(rate_text, "%"), "Draft acceptance rate", bad)
    for name in ("Accepted throughput", "Drafted throughput"):
        if name in fields:
            printed[name.lower().replace(" ", "_") + "_tok_s"] = _value(fields[name], "tokens/s")
    if set(fields) - _KNOWN:
        printed["fields_not_read"] = sorted(set(fields) - _KNOWN)
    if bad:
        printed["non_finite"] = bad
    full = drafted // len(rates) if rates and drafted > 0 and drafted % len(rates) == 0 else None
    if full and _printed_fit(full, accepted, rates, length):   # every draft k long (EAGLE, MTP): exact
        drafts = full
    elif sum(rates) > 0 and accepted > 0:
        drafts = round(accepted / sum(rates))
    elif length is not None and length > 1 and accepted > 0:
        drafts = round(accepted / (length - 1))
    elif rates and drafted > 0:
        drafts = math.ceil(drafted / len(rates))   # nothing accepted: as if every draft were k long
    else:
        drafts = None if drafted > 0 else 0
    if drafts and rates and drafted > 0:   # k tokens a draft at most, one at least
        drafts = min(max(drafts, math.ceil(drafted / len(rates))), drafted)
    per_pos = [r * drafts for r in rates] if drafts else [0.0] * len(rates)
    return Interval(source, drafts, drafted, accepted, per_pos, drafts_exact=False, printed=printed)


def _printed_fit(drafts: int, accepted: int, rates: list[float], length: float | None) -> bool:
    """Whether `drafts` drafts agree with the printed figures to their rounding: the per-position
    rates (3 decimals each, summing to accepted / drafts) and the mean acceptance length (2 decimals)."""
    return (abs(accepted / drafts - sum(rates)) <= 0.0005 * len(rates) + 1e-9
            and (length is None or abs(1 + accepted / drafts - length) <= 0.005 + 1e-9))


def parse_v0_line(line: str, source: str) -> dict[str, Any]:
    """One vLLM V0 "Speculative metrics:" line: its cumulative counts and printed figures
    (ValueError saying why when its fields are not V0's)."""
    fields = _fields(line.partition(V0_MARK)[2])
    accepted, drafted = _counts(_need(fields, "Number of accepted tokens", None),
                                _need(fields, "Number of draft tokens", None), source,
                                ("Number of accepted tokens", "Number of draft tokens"))
    k = _need(fields, "Number of speculative tokens", None)
    if not (math.isfinite(k) and k >= 1):
        raise ValueError(f"Number of speculative tokens {k:g} is not >= 1")
    bad: list[str] = []   # a printed figure that is not a number: not used, counted as V1's are
    printed: dict[str, Any] = {name.lower().replace(" ", "_"): _finite(_value(fields[name], None), name, bad)
                               for name in ("Draft acceptance rate", "System efficiency", "Number of emitted tokens")
                               if name in fields}
    if bad:
        printed["non_finite"] = bad
    return {"accepted": accepted, "drafted": drafted, "k": int(k), "printed": printed}


def _v0_interval(now: dict[str, Any], before: dict[str, Any] | None, source: str) -> tuple[Interval, int]:
    """The interval between two cumulative V0 lines (before None: since the engine started); a
    count that went down restarted (its new value is the increase). More accepted than drafted
    between the lines: a UserError naming source (file:line); k changed between them (counts not
    gone down): drafts unknown (draft tokens / k needs one k); `speculative_tokens_before` says so."""
    resets = 0
    acc, dra = now["accepted"], now["drafted"]
    k_changed = before is not None and before["k"] != now["k"]
    if before is not None:
        if acc < before["accepted"] or dra < before["drafted"]:
            resets = 1
        else:
            acc, dra = acc - before["accepted"], dra - before["drafted"]
            if acc > dra:
                k = f", k {before['k']} -> {now['k']}: a different engine?" if k_changed else ""
                raise UserError(f"{source}: Number of accepted tokens rose by {acc} but Number of draft tokens by "
                                f"{dra} since {before['source']}, impossible (vLLM accepts at most what it "
                                f"drafts{k}): give the lines of one engine run, unedited")
    printed = {**now["printed"], "cumulative": True, "speculative_tokens": now["k"]}
    if k_changed:
        printed["speculative_tokens_before"] = before["k"]
    drafts = None if k_changed and not resets else round(dra / now["k"])
    return Interval(source + " (V0, cumulative)", drafts, dra, acc, [], drafts_exact=False, printed=printed), resets


def read_logs(texts: Sequence[tuple[str, str]]) -> Reading:
    """(name, text) of each log file -> one interval per SpecDecoding line, and per pair of
    consecutive V0 "Speculative metrics:" lines, in order."""
    tally = {"spec_decoding_lines": 0, "other_log_lines": 0, "blank": 0, "not_understood": 0}
    bad: list[str] = []
    why: list[str] = []
    intervals: list[Interval] = []
    inconsistent: list[str] = []
    non_finite: list[str] = []
    resets = 0
    for name, text in texts:
        v0_before = None
        for lineno, line in enumerate(text.splitlines(), start=1):
            if LOG_MARK not in line and V0_MARK not in line:
                tally["blank" if not line.strip() else "other_log_lines"] += 1
                continue
            source = f"{name}:{lineno}"
            try:
                if LOG_MARK in line:
                    iv = parse_log_line(line, source)
                else:
                    v0 = {**parse_v0_line(line, source), "source": source}
                    iv, r = _v0_interval(v0, v0_before, source)
                    v0_before, resets = v0, resets + r
            except (KeyError, ValueError) as e:
                tally["not_understood"] += 1
                if len(bad) < EXAMPLES:
                    bad.append(line.strip()[:200])
                    why.append(str(e))
                continue
            tally["spec_decoding_lines"] += 1
            if iv.printed.get("non_finite"):
                non_finite.append(f"{source} ({', '.join(iv.printed['non_finite'])})")
            shown = iv.printed.get("avg_draft_acceptance_rate_pct")
            if shown is not None and iv.draft_tokens and abs(100 * iv.accepted / iv.draft_tokens - shown) > 0.051:
                inconsistent.append(iv.source)
            intervals.append(iv)
    v0 = [i for i in intervals if i.printed.get("cumulative")]
    if v0 and len(v0) < len(intervals):
        raise UserError(f"{', '.join(n for n, _ in texts)}: both vLLM V1 '{LOG_MARK}' and V0 '{V0_MARK}' lines "
                        "(different counts, not to be pooled): give logs of one vLLM version per run")
    notes = ["vLLM V0 'Speculative metrics:' lines are cumulative since the engine started: read as differences "
             "between consecutive lines; drafts = draft tokens / k"] if v0 else []
    k_changes = [f"{i.source.removesuffix(' (V0, cumulative)')} ({i.printed['speculative_tokens_before']} -> "
                 f"{i.printed['speculative_tokens']})" for i in v0 if "speculative_tokens_before" in i.printed]
    if k_changes:
        notes.append(f"Number of speculative tokens changed {len(k_changes)} time(s) between consecutive V0 lines: "
                     f"{', '.join(k_changes[:5])}; where the counts did not go down, that interval's drafts unknown "
                     "(a restart the counts did not show?)")
    unknown = [i.source for i in intervals if i.drafts is None and not i.printed.get("cumulative")]
    if unknown:
        notes.append(f"drafts unknown for {len(unknown)} log line(s), e.g. {unknown[0]}: neither per-position rates "
                     "nor a mean acceptance length printed (vLLM 0.8's short lines)")
    return Reading("log", intervals, tally, bad, resets, inconsistent=inconsistent, why_not_understood=why,
                   non_finite=non_finite, notes=notes)


# --- files -------------------------------------------------------------------------------------------

def kind_of(text: str) -> str | None:
    """"prometheus", "log" or None (neither) for one file's text."""
    if LOG_MARK in text or V0_MARK in text:
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
            raw = Path(p).read_bytes()
        except OSError as e:
            raise UserError(f"{p}: cannot read it ({e.strerror or e}); give a scrape or log file") from None
        if raw.startswith((b"\xff\xfe", b"\xfe\xff")) or b"\x00" in raw[:200]:   # PowerShell 5's `>` writes UTF-16
            raise UserError(f"{p}: UTF-16 text (as PowerShell 5 redirects write it), not UTF-8; convert it "
                            f"(iconv -f UTF-16 -t UTF-8 {p} > {Path(p).stem}.utf8{Path(p).suffix}) and give that")
        text = raw.decode("utf-8-sig", errors="replace")   # a byte-order mark (Windows tools) is not text
        kind = kind_of(text)
        if kind is None:
            raise UserError(f"{p}: {NEITHER}")
        texts.append((str(p), text))
        kinds.append(kind)
    if len(set(kinds)) > 1:
        raise UserError(f"{paths[kinds.index('log')]} is a log and {paths[kinds.index('prometheus')]} a Prometheus "
                        "scrape: give files of one kind per run")
    reading = read_logs(texts) if kinds[0] == "log" else read_prometheus(texts)
    if not reading.intervals and reading.why_not_understood:
        n, eg = reading.lines["not_understood"], reading.not_understood[0]
        raise UserError(f"{', '.join(map(str, paths))}: {n} spec-decode log line(s) ('{LOG_MARK}' or '{V0_MARK}') "
                        f"not understood, none read: {reading.why_not_understood[0]}, e.g. "
                        f"{eg[:100] + ('...' if len(eg) > 100 else '')!r}; give vLLM's log lines unedited")
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
