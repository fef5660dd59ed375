"""The `ninferc` command line (click). Each subcommand lives in its own module and is registered here."""

import sys

import click

from ninferc import __version__
from ninferc.errors import NinfercError


class _Group(click.Group):
    """A click group that turns :class:`NinfercError` and click's usage errors (a bad option value, an unknown option
    or subcommand, a missing argument) into a one-line message and exit status 2."""

    def invoke(self, ctx):
        """Run the subcommand; a NinfercError becomes ``error: ...`` on stderr and exit status 2, and so does a click
        :class:`~click.UsageError` (click's own message, e.g. "Invalid value for '--draft-tokens': 9 is not in the
        range 1<=x<=5.", then where the command's help is), instead of click's usage block and ``Error:`` line."""
        try:
            return super().invoke(ctx)
        except NinfercError as exc:
            click.echo(f"error: {exc}", err=True)
            sys.exit(2)
        except click.UsageError as exc:
            where = exc.ctx.command_path if exc.ctx is not None else ctx.command_path
            click.echo(f"error: {exc.format_message()} (see '{where} --help')", err=True)
            sys.exit(2)
        except BrokenPipeError:  # the reader of stdout left (`ninferc plan ... | head`): stop quietly, as Unix tools do
            _quiet_stdout()
            sys.exit(1)
        except OSError as exc:
            if exc.filename is not None or exc.errno not in _OUTPUT_ERRNOS:
                raise
            # writing stdout failed (`> /dev/full`, a full disk behind a redirection): the reason, not a traceback
            _quiet_stdout()
            click.echo(f"error: cannot write the output ({exc.strerror})", err=True)
            sys.exit(2)


def _output_errnos() -> frozenset:
    import errno

    return frozenset(getattr(errno, n) for n in ("ENOSPC", "EDQUOT", "EIO", "EFBIG", "EROFS") if hasattr(errno, n))


#: an OSError without a file name and of one of these errnos is a failed write of the command's output
_OUTPUT_ERRNOS = _output_errnos()


def _quiet_stdout() -> None:
    """Point stdout at /dev/null so that the interpreter's final flush of what is still buffered cannot fail again."""
    import os

    try:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    except (OSError, ValueError):
        pass


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="ninferc")
def main():
    """ninferc: compile a Qwen3.5/3.6/3.8 hybrid checkpoint for one NVIDIA target and run it."""


def _register():
    """Import the subcommand modules and attach their commands (kept lazy-safe and explicit)."""
    import importlib

    for mod_name, cmd_name in [
        ("ninferc.cmd_inspect", "inspect_cmd"),
        ("ninferc.cmd_run", "run_cmd"),
        ("ninferc.cmd_plan", "plan_cmd"),
        ("ninferc.cmd_compile", "compile_cmd"),
        ("ninferc.cmd_bench", "bench_cmd"),
        ("ninferc.cmd_serve", "serve_cmd"),
    ]:
        try:
            mod = importlib.import_module(mod_name)
        except ModuleNotFoundError as exc:  # a subcommand not written yet
            if exc.name == mod_name:
                continue
            raise
        main.add_command(getattr(mod, cmd_name))


_register()
