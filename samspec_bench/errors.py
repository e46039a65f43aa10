"""One exception type for bad input (the CLI prints its message as a single line and exits 2),
the exit codes, and the checks of option values that every suite shares.

Exit codes of `samspec-bench`: 0 done; 1 a gate or a step failed (the report says which);
2 bad input (one line naming the input and the fix); 3 an internal error (one line naming the
file that holds the traceback); 130 interrupted.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
from typing import Any, Iterable, Mapping

EXIT_GATE = 1
EXIT_USAGE = 2
EXIT_INTERNAL = 3
EXIT_INTERRUPTED = 130


class UserError(Exception):
    """Bad input from the user. The message names the input and says how to fix it."""

    exit_code = EXIT_USAGE


def one_line(text: Any) -> str:
    """A message on one line: the lines of a multi-line text joined with '; '."""
    parts = [p.strip() for p in str(text).splitlines() if p.strip()]
    return "; ".join(parts)


def comma_list(text: Any, option: str, example: str) -> list[str]:
    """A comma-separated option ("own,group") as its items, stripped, in order. Nothing is
    dropped: blank text, an empty item ('own,,group', a leading or trailing comma) or an item
    given twice ('3,3') is a one-line UserError naming the option, the text and the fix."""
    items = [x.strip() for x in str(text).split(",")]
    if not any(items):
        raise UserError(f"{option} {text!r}: empty; give a comma list, e.g. {example}")
    if "" in items:
        raise UserError(f"{option} {text!r}: an empty item (a stray comma); give the values separated by single "
                        f"commas, e.g. {example}")
    return no_repeats(items, option, text, example)


def no_repeats(values, option: str, text: Any, example: str) -> list:
    """`values` (a comma list's items as they compare: strings, integers, canonical names) as a
    list; one given twice is a UserError ("-k '3,03': 3 is given twice; ...")."""
    seen: set = set()
    for v in values:
        if v in seen:
            raise UserError(f"{option} {text!r}: {v} is given twice; give each value once (e.g. {example})")
        seen.add(v)
    return list(values)


def int_list(text: str, option: str, minimum: int = 1, maximum: int | None = None,
             example: str = "4,8,16") -> list[int]:
    """A comma-separated integer option ("4,8,16"), each value in minimum..maximum and none
    twice (as integers: '3,03' repeats 3); else a UserError naming the option."""
    items = comma_list(text, option, example)
    try:
        vals = [int(v) for v in items]
    except ValueError:
        raise UserError(f"{option} {text!r}: give comma-separated integers, e.g. {example}") from None
    if min(vals) < minimum or (maximum is not None and max(vals) > maximum):
        bound = f">= {minimum}" if maximum is None else f"in {minimum}..{maximum}"
        raise UserError(f"{option} {text!r}: give integers {bound}")
    return no_repeats(vals, option, text, example)


def field_default(cfg: Any, name: str) -> Any:
    """The default of field `name` of the dataclass `cfg` (its default_factory's value where it
    has one): what a run takes when the option is not given."""
    f = next(f for f in dataclasses.fields(cfg) if f.name == name)
    return f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default


def options_set(cfg: Any, options: Mapping[str, str] | Iterable[str]) -> list[str]:
    """Of `options` (field -> option name, or field names), those whose field in the dataclass
    `cfg` is away from its default, each named once: the options a run would be told it ignores."""
    named = options if isinstance(options, Mapping) else {n: n for n in options}
    return list(dict.fromkeys(opt for name, opt in named.items() if getattr(cfg, name) != field_default(cfg, name)))


def int_at_least(value: Any, option: str, lo: int = 1, hi: int | None = None, *, optional: bool = False) -> int | None:
    """`value` as an integer in lo..hi (hi None: no upper bound); None passes when `optional`.
    Otherwise a UserError naming the option and the range, e.g. "--max-num-seqs 0: give an
    integer >= 1"."""
    if value is None and optional:
        return None
    bound = f">= {lo}" if hi is None else f"in {lo}..{hi}"
    if isinstance(value, bool) or not isinstance(value, int):
        try:
            ok = not isinstance(value, bool) and float(value) == int(value)
        except (TypeError, ValueError, OverflowError):
            ok = False
        if not ok:
            raise UserError(f"{option} {value!r}: give an integer {bound}")
        value = int(value)
    if value < lo or (hi is not None and value > hi):
        raise UserError(f"{option} {value}: give an integer {bound}")
    return value


def number_in(value: Any, option: str, lo: float | None = None, hi: float | None = None, *,
              lo_open: bool = False, hi_open: bool = False, optional: bool = False) -> float | None:
    """`value` as a finite number in the interval [lo, hi] (an end None: unbounded; *_open:
    that end excluded); None passes when `optional`. Otherwise a UserError naming the option."""
    if value is None and optional:
        return None
    left = "" if lo is None else ("(" if lo_open else "[") + f"{lo:g}"
    right = "" if hi is None else f"{hi:g}" + (")" if hi_open else "]")
    want = (f"a number in {left}, {right}" if lo is not None and hi is not None
            else f"a number {'>' if lo_open else '>='} {lo:g}" if lo is not None
            else f"a number {'<' if hi_open else '<='} {hi:g}" if hi is not None else "a finite number")
    try:
        x = float(value)
    except (TypeError, ValueError, OverflowError):
        raise UserError(f"{option} {value!r}: give {want}") from None
    if isinstance(value, bool) or not math.isfinite(x):   # inf passes ">= 0": say finite
        raise UserError(f"{option} {value!r}: give {want.replace('a number', 'a finite number', 1)}")
    if lo is not None and (x < lo or (lo_open and x == lo)):
        raise UserError(f"{option} {value}: give {want}")
    if hi is not None and (x > hi or (hi_open and x == hi)):
        raise UserError(f"{option} {value}: give {want}")
    return x


def nearest(name: str, valid, n: int = 3) -> str:
    """' (nearest: a, b)' for the valid names closest to a mistyped one (difflib), else ''."""
    close = difflib.get_close_matches(str(name), sorted({str(v) for v in valid}), n=n, cutoff=0.5)
    return f" (nearest: {', '.join(close)})" if close else ""
