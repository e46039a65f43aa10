"""The `samspec-bench` command. Subcommands are imported only when invoked, so
`samspec-bench --help` stays fast and imports no torch, vLLM or lm-eval.

One error path for every command (exit codes in samspec_bench.errors):
- bad input (UserError, click's usage errors, an unusable path): one line `error: ...` naming
  the input and the fix on stderr, exit 2;
- anything else: one line naming the exception and the file the full traceback was written to
  (under <cache>/errors/), exit 3;
- either way, a run folder the command created but put no work in is removed.
Output paths are checked before a command runs: `--output` of a suite (a results root) must not
be a file, `--json` and a report's `--output` must not be a directory.
"""

from __future__ import annotations

import datetime as _dt
import importlib
import os
import signal
import sys
import tempfile
import traceback
from pathlib import Path

import click

from samspec_bench import __version__
from samspec_bench.commands import COMMANDS
from samspec_bench.errors import EXIT_INTERNAL, EXIT_INTERRUPTED, EXIT_USAGE, UserError, one_line
from samspec_bench.paths import cache_dir
from samspec_bench.output_paths import check_output_file, check_output_root
from samspec_bench.results import created_mark, discard_unfinished, kept_unfinished


def _checked_callback(param: click.Parameter, check):
    """`param`'s callback, followed by `check(value)` for a given value."""
    inner = param.callback

    def callback(ctx, p, value):
        if inner is not None:
            value = inner(ctx, p, value)
        if value not in (None, "", "-") and not isinstance(value, (tuple, list)):
            check(value)
        return value
    return callback


def guard_outputs(cmd: click.Command) -> click.Command:
    """Check a command's output paths as they are parsed (before anything runs): `--json`
    is a file; `--output` is a results root, or a file where its default names one
    (report.html, step_model.json)."""
    if getattr(cmd, "_samspec_guarded", False):
        return cmd
    cmd._samspec_guarded = True   # commands are module-level objects: wrap each callback once
    for p in cmd.params:
        if not isinstance(p, click.Option):
            continue
        flags = set(p.opts) | set(p.secondary_opts)
        if "--json" in flags:
            p.callback = _checked_callback(p, lambda v: check_output_file(v, "--json"))
        elif "--output" in flags:
            shown = "/".join(sorted(flags, key=len))
            if isinstance(p.default, str) and Path(p.default).suffix:
                p.callback = _checked_callback(p, lambda v, s=shown, e=Path(p.default).name: check_output_file(v, s, e))
            else:
                p.callback = _checked_callback(p, lambda v: check_output_root(v, "--output"))
    for sub in getattr(cmd, "commands", {}).values():
        guard_outputs(sub)
    return cmd


def repeated_single_options(cmd: click.Command, args) -> list[tuple[str, int]]:
    """Options of `cmd` that take one value but appear more than once in `args` (click keeps
    the last silently, so `--traces A --traces B` would drop A). Values are skipped as click
    parses them; scanning stops at `--` and, for a group, at its subcommand's name."""
    single = {}
    for p in cmd.params:
        if isinstance(p, click.Option) and not p.multiple and not p.count:
            for opt in (*p.opts, *p.secondary_opts):
                single[opt] = p
    seen: dict[str, list[str]] = {}
    i = 0
    while i < len(args):
        tok = str(args[i])
        if tok == "--" or (isinstance(cmd, click.Group) and not tok.startswith("-")):
            break
        if not tok.startswith("-") or tok == "-":
            i += 1
            continue
        name, has_value = (tok.split("=", 1)[0], True) if "=" in tok else (tok, False)
        if name not in single and len(name) > 2 and not name.startswith("--") and name[:2] in single:
            name, has_value = name[:2], True          # -k3: a short option with its value
        p = single.get(name)
        i += 1
        if p is None:
            continue
        seen.setdefault(p.name, []).append(name)
        if not p.is_flag and not has_value:
            i += max(p.nargs, 1)
    return [(" / ".join(dict.fromkeys(opts)), len(opts)) for opts in seen.values() if len(opts) > 1]


def refuse_repeated_options(cmd: click.Command) -> click.Command:
    """One-line usage error, exit 2, for an option given twice that takes one value."""
    if getattr(cmd, "_samspec_repeats_refused", False):
        return cmd
    cmd._samspec_repeats_refused = True
    parse = cmd.parse_args

    def parse_args(ctx, args):
        for opt, n in repeated_single_options(cmd, args):
            raise click.UsageError(f"{opt} given {n} times, but it takes one value and only the last "
                                   "would count: give it once", ctx=ctx)
        return parse(ctx, args)
    cmd.parse_args = parse_args
    for sub in getattr(cmd, "commands", {}).values():
        refuse_repeated_options(sub)
    return cmd


def refuse_output_beside_resume(cmd: click.Command) -> click.Command:
    """A usage error, exit 2, for `--output ROOT` given with `--resume DIR` when DIR is not a run
    folder directly under ROOT: a resumed run keeps writing into DIR, so ROOT would be ignored."""
    names = {p.name for p in cmd.params}
    if getattr(cmd, "_samspec_output_resume", False) or not {"output", "resume"} <= names:
        for sub in getattr(cmd, "commands", {}).values():
            refuse_output_beside_resume(sub)
        return cmd
    cmd._samspec_output_resume = True
    parse = cmd.parse_args

    def parse_args(ctx, args):
        rest = parse(ctx, args)
        resume, output = ctx.params.get("resume"), ctx.params.get("output")
        given = ctx.get_parameter_source("output") not in (None, click.core.ParameterSource.DEFAULT)
        if resume and output and given and Path(resume).resolve().parent != Path(output).resolve():
            raise click.UsageError(f"--output {output} with --resume {resume}: a resumed run keeps writing into "
                                   f"{resume}, so --output would be ignored; leave out --output", ctx=ctx)
        return rest
    cmd.parse_args = parse_args
    return cmd


class LazyGroup(click.Group):
    def list_commands(self, ctx):
        return sorted(COMMANDS)

    def get_command(self, ctx, name):
        if name not in COMMANDS:
            return None
        target, _ = COMMANDS[name]
        module, attr = target.split(":")
        cmd = getattr(importlib.import_module(module), attr)
        return refuse_output_beside_resume(refuse_repeated_options(guard_outputs(cmd)))

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
    print its metrics as JSON. Exit codes: 0 done, 1 a gate or step failed, 2 bad input,
    3 internal error (the message names the file with the traceback), 130 interrupted."""


def save_traceback(argv) -> Path:
    """The current exception's traceback in <cache>/errors/<time>-<pid>.txt (else the temp dir)."""
    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    text = (f"samspec-bench {__version__}\nargv: {list(argv) if argv is not None else sys.argv}\n"
            f"python: {sys.version.split()[0]}\n\n{traceback.format_exc()}")
    for base in (cache_dir() / "errors", Path(tempfile.gettempdir())):
        try:
            base.mkdir(parents=True, exist_ok=True)
            path = base / f"samspec-bench-error-{stamp}-{os.getpid()}.txt"
            path.write_text(text, encoding="utf-8")
            return path
        except OSError:
            continue
    return Path("(not saved: no writable cache or temp directory)")


def _fail(message: str, code: int, mark: int) -> None:
    discard_unfinished(mark)
    click.echo(message, err=True)
    sys.exit(code)


def _interrupted(mark: int) -> None:
    """Ctrl-C or SIGTERM: the folders with finished work are named for --resume, those without
    any removed; exit 130."""
    discard_unfinished(mark)
    kept = kept_unfinished(mark)
    click.echo(f"interrupted: finished work is kept in {', '.join(map(str, kept))}; continue with --resume "
               f"{kept[0]}" if kept else "interrupted: nothing finished was kept", err=True)
    sys.exit(EXIT_INTERRUPTED)


def _term_as_interrupt():
    """SIGTERM (timeout, Slurm, Kubernetes) ends a run as Ctrl-C does, in this process only: a
    forked worker dies of it as before. Returns the handler it replaced (None: not settable here)."""
    pid = os.getpid()

    def on_term(signum, frame):
        if os.getpid() != pid:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGTERM)
            return
        raise KeyboardInterrupt

    try:
        return signal.signal(signal.SIGTERM, on_term)
    except ValueError:   # not the main thread (embedded): left as it is
        return None


def main(argv=None):
    previous = _term_as_interrupt()
    try:
        _main(argv)
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


def _main(argv=None):
    mark = created_mark()
    try:
        rv = group.main(args=argv, prog_name="samspec-bench", standalone_mode=False)
    except UserError as e:
        _fail(f"error: {one_line(e)}", e.exit_code, mark)
    except click.UsageError as e:
        # one line, naming the bad option, instead of click's usage block
        where = f"{e.ctx.command_path} --help" if e.ctx and e.ctx.parent else "samspec-bench --help"
        _fail(f"error: {one_line(e.format_message())} (see {where})", EXIT_USAGE, mark)
    except click.exceptions.Abort:   # click's form of Ctrl-C (and of SIGTERM, above)
        _interrupted(mark)
    except click.ClickException as e:   # e.g. a file click could not open
        _fail(f"error: {one_line(e.format_message())}", EXIT_USAGE, mark)
    except click.exceptions.Exit as e:
        sys.exit(e.exit_code)
    except KeyboardInterrupt:
        _interrupted(mark)
    except BrokenPipeError:   # the reader of stdout went away (| head): nothing more to say
        try:   # so that the interpreter's final flush of stdout does not fail again
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        except (OSError, ValueError, AttributeError):
            pass
        sys.exit(1)
    except OSError as e:
        # a path the command could not use (permissions, disk full, a vanished file)
        where = save_traceback(argv)
        what = f"{e.strerror or type(e).__name__}: {e.filename}" if e.filename else one_line(e) or type(e).__name__
        _fail(f"error: {what}: check the path and its permissions (traceback: {where})", EXIT_USAGE, mark)
    except Exception as e:  # noqa: BLE001 - the one place an unexpected error becomes a message
        where = save_traceback(argv)
        _fail(f"error: internal error, {type(e).__name__}: {one_line(e)[:300]} (full traceback: {where})",
              EXIT_INTERNAL, mark)
    # without standalone mode, click returns the code of a command that raised Exit(n)
    if isinstance(rv, int) and rv != 0:
        sys.exit(rv)


if __name__ == "__main__":
    main()
