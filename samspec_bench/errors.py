"""One exception type for bad input: the CLI prints its message as a single line and exits 2."""


class UserError(Exception):
    """Bad input from the user. The message names the input and says how to fix it."""

    exit_code = 2


def int_list(text: str, option: str, minimum: int = 1) -> list[int]:
    """A comma-separated integer option ("4,8,16"), each value >= minimum; else a UserError
    naming the option."""
    try:
        vals = [int(v) for v in str(text).split(",") if v.strip()]
    except ValueError:
        raise UserError(f"{option} {text!r}: give comma-separated integers, e.g. 4,8,16") from None
    if not vals or min(vals) < minimum:
        raise UserError(f"{option} {text!r}: give integers >= {minimum}")
    return vals
