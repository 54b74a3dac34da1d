"""`appliance`: the root command. It only adds the commands, one module per command or group of them.

Exit codes: 0 success, 1 a regression gate failed, 2 bad input or
configuration (one line on stderr, no traceback), 3 a run's store lacks what its journal holds and
could not be restored, 130 interrupted.
"""

from __future__ import annotations

import sys

import typer

from appliance.offline import enforce_offline

enforce_offline()

from appliance.engine.load_order import load_llama_first_for  # noqa: E402

load_llama_first_for(sys.argv[1:])  # before the commands' modules import the store (and duckdb)

from appliance.cli.adapter import adapter_app  # noqa: E402
from appliance.cli.bench import bench_app  # noqa: E402
from appliance.cli.compare import compare  # noqa: E402
from appliance.cli.imports import add_import_commands  # noqa: E402
from appliance.cli.judging import calibrate, labels_app, score  # noqa: E402
from appliance.cli.models import models_app  # noqa: E402
from appliance.cli.options import error_console  # noqa: E402
from appliance.cli.report import export, report  # noqa: E402
from appliance.cli.run import run  # noqa: E402
from appliance.cli.scenarios import scenarios_app  # noqa: E402
from appliance.cli.store import merge, store_app  # noqa: E402
from appliance.cli.view import view  # noqa: E402
from appliance.errors import ApplianceError  # noqa: E402
from appliance.run.interrupts import INTERRUPTED_EXIT  # noqa: E402
from appliance.store.damage import damage_line  # noqa: E402

app = typer.Typer(add_completion=False, no_args_is_help=True, help="Offline LLM evaluation appliance.")
import_app = typer.Typer(no_args_is_help=True, help="Import other systems' formats.")
app.add_typer(models_app, name="models")
app.add_typer(scenarios_app, name="scenarios")
app.add_typer(import_app, name="import")
app.add_typer(labels_app, name="labels")
app.add_typer(store_app, name="store")
app.add_typer(adapter_app, name="adapter")
app.add_typer(bench_app, name="bench")
for command in (run, report, export, calibrate, compare, merge, score, view):
    app.command()(command)


def main() -> None:
    try:
        add_import_commands(import_app)  # finding the families' importers can fail on a bad $APPLIANCE_FAMILIES
        code = app(standalone_mode=False)  # click returns an Exit's code here instead of raising it
        if isinstance(code, int) and code:
            sys.exit(code)
    except ApplianceError as error:
        error_console.print(f"error: {error}", markup=False, highlight=False, soft_wrap=True)
        sys.exit(2)
    except KeyboardInterrupt:
        error_console.print("interrupted: finished episodes are stored; resume with --resume RUN_ID")
        sys.exit(INTERRUPTED_EXIT)
    except typer.Exit as exit_:
        sys.exit(exit_.exit_code)
    except typer.Abort:
        sys.exit(130)
    except Exception as error:
        _usage_error(error)  # a command line click refused: one line and its exit code (2)
        damaged = damage_line(error)  # a block failed its checksum mid-command, in whatever query read it
        if damaged is not None:
            error_console.print(f"error: {damaged}", markup=False, highlight=False, soft_wrap=True)
            sys.exit(2)
        raise


def _usage_error(error: Exception) -> None:
    """Exit with one line for an error click raised while reading the command line (an unknown option, a
    missing one); return for anything else. Typer carries its own copy of click; a separately installed
    click (which the base install need not have) is checked too."""
    refused: tuple[type[Exception], ...] = (typer.exceptions.TyperException,)
    try:
        import click

        refused += (click.ClickException,)
    except ImportError:
        pass
    if not isinstance(error, refused):
        return
    message = error.format_message() if hasattr(error, "format_message") else str(error)
    error_console.print(f"error: {message}", markup=False, highlight=False, soft_wrap=True)
    sys.exit(getattr(error, "exit_code", 2))


if __name__ == "__main__":
    main()
