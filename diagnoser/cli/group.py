"""The click plumbing of `diagnose`: `diagnose FILE...` runs the main command, known words are
subcommands, the top-level help shows the main command's options, every error is one line."""
from __future__ import annotations

import os
import sys

import click

from .. import limits
from ..errors import DiagnoserError
from ..text_safety import visible_line


class OneLineError(click.ClickException):
    """Shown as `diagnose: error: ...` on one line; exit code 1."""

    def show(self, file=None):
        click.echo(f"diagnose: error: {visible_line(self.format_message())}", err=True)


class DefaultGroup(click.Group):
    """`diagnose FILE...` runs the diagnosis; known words are subcommands. Errors become one line."""

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except (click.ClickException, click.exceptions.Exit, click.Abort):
            raise
        except BrokenPipeError:  # `diagnose ... | head`: the reader left; stop quietly
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
            raise click.exceptions.Exit(0) from None
        except DiagnoserError as e:
            raise OneLineError(str(e)) from None
        except MemoryError:
            raise OneLineError(f"out of memory ({limits.memory_limit_text()})") from None
        except Exception as e:  # noqa: BLE001 - never a traceback for the user
            if os.environ.get("DIAGNOSER_DEBUG"):
                raise
            raise OneLineError(f"{type(e).__name__}: {e} (set DIAGNOSER_DEBUG=1 for a traceback)") from None

    def parse_args(self, ctx, args):
        if args and args[0] not in self.commands and args[0] not in ("--help", "-h", "--version"):
            first = args[0]
            if not first.startswith("-") and not os.path.exists(first) and not set("/.*?[") & set(first):
                import difflib
                close = difflib.get_close_matches(first, [c for c in self.commands if c != "run"], n=1)
                if close:
                    raise click.UsageError(f"no such file or command `{first}`; did you mean `diagnose {close[0]}`?", ctx)
            args = ["run"] + list(args)
        elif not args:
            args = ["--help"]
        return super().parse_args(ctx, args)

    def format_usage(self, ctx, formatter):
        formatter.write("Usage: diagnose [OPTIONS] FILE...\n       diagnose COMMAND [ARGS]...\n")

    def format_options(self, ctx, formatter):
        """The main command's options first (they are what `diagnose FILE` takes), then the commands."""
        main_cmd = self.commands["run"]
        with click.Context(main_cmd, info_name="diagnose", parent=None) as run_ctx:
            records = [p.get_help_record(run_ctx) for p in main_cmd.get_params(run_ctx)
                       if isinstance(p, click.Option) and "--help" not in p.opts]
        records += [p.get_help_record(ctx) for p in self.get_params(ctx)]
        with formatter.section("Options (diagnose FILE...)"):
            formatter.write_dl([r for r in records if r])
        self.format_commands(ctx, formatter)


class MainCommand(click.Command):
    """`diagnose FILE...`: its help is the top-level help (it has no name of its own to show)."""

    def get_help(self, ctx):
        root = ctx.find_root()
        return root.command.get_help(root)
