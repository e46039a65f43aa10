"""The `samspec-bench` command. Subcommands are imported only when invoked, so
`samspec-bench --help` stays fast and imports no torch, vLLM or lm-eval."""

from __future__ import annotations

import importlib
import sys

import click

from samspec_bench import __version__
from samspec_bench.commands import COMMANDS
from samspec_bench.errors import UserError

class LazyGroup(click.Group):
    def list_commands(self, ctx):
        return sorted(COMMANDS)

    def get_command(self, ctx, name):
        if name not in COMMANDS:
            return None
        target, _ = COMMANDS[name]
        module, attr = target.split(":")
        return getattr(importlib.import_module(module), attr)

    def format_commands(self, ctx, formatter):
        rows = [(name, COMMANDS[name][1]) for name in self.list_commands(ctx)]
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="samspec-bench")
def group():
    """Validate and benchmark suffix-automaton (SAM) speculative decoding for RL rollouts.

    Every command writes a result directory (result.json, samples, figures) and can
    print its metrics as JSON."""


def main(argv=None):
    try:
        rv = group.main(args=argv, prog_name="samspec-bench", standalone_mode=False)
    except UserError as e:
        click.echo(f"error: {e}", err=True)
        sys.exit(e.exit_code)
    except click.UsageError as e:
        # one line, naming the bad option, instead of click's usage block
        where = f"samspec-bench {e.ctx.info_name} --help" if e.ctx and e.ctx.parent else "samspec-bench --help"
        click.echo(f"error: {e.format_message()} (see {where})", err=True)
        sys.exit(2)
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        sys.exit(130)
    except click.ClickException as e:
        e.show()
        sys.exit(e.exit_code)
    except click.exceptions.Exit as e:
        sys.exit(e.exit_code)
    except KeyboardInterrupt:
        click.echo("interrupted: finished samples are kept; re-run with --resume DIR to continue", err=True)
        sys.exit(130)
    # without standalone mode, click returns the code of a command that raised Exit(n)
    if isinstance(rv, int) and rv != 0:
        sys.exit(rv)


if __name__ == "__main__":
    main()
