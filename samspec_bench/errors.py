"""One exception type for bad input: the CLI prints its message as a single line and exits 2."""


class UserError(Exception):
    """Bad input from the user. The message names the input and says how to fix it."""

    exit_code = 2
