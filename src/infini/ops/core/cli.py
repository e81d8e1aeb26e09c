"""How the command lines (`python -m infini.ops`, `examples/generate.py`)
report errors: one line on stderr, ``prog: error: ...``, and exit status 2
for usage errors (arguments the parser refuses, `UsageError`) or 1 for
errors while running (a damaged model file, a library error). `--debug`
shows the traceback instead. A reader that closes the output pipe early
(``python -m infini.ops info | head -1``) ends the output quietly, status 0.
See "Command line" in `docs/behaviour.md`.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

USAGE_ERROR = 2
RUNTIME_ERROR = 1
INTERRUPTED = 130

# Errors that carry a message meant for the user (the library raises these
# for bad input); any other exception is reported as an internal error with
# its type.
_EXPLAINED = (ValueError, TypeError, RuntimeError, OSError, ImportError)


class UsageError(Exception):
    """Command-line input the parser cannot check (an empty prompt, a
    prompt longer than the model's context): exit status 2."""


class ArgumentParser(argparse.ArgumentParser):
    """`argparse.ArgumentParser` with a `--debug` option and one-line
    errors (argparse prints the whole usage text first)."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.add_argument(
            "--debug",
            action="store_true",
            help="show the traceback of an error instead of one line",
        )

    def error(self, message: str) -> None:
        self.exit(USAGE_ERROR, f"{self.prog}: error: {message} (see --help)\n")


def _one_line(text: str) -> str:
    return " ".join(text.split())


def error_line(prog: str, error: BaseException) -> str:
    """The line that reports `error`: its message for the errors the
    library explains, its type too for anything else."""
    message = _one_line(str(error))
    if isinstance(error, (UsageError, *_EXPLAINED)):
        return f"{prog}: error: {message or type(error).__name__}"
    return (
        f"{prog}: internal error: {type(error).__name__}: {message} "
        "(run with --debug for the traceback)"
    )


def _quiet_stdout() -> None:
    """Points standard output at the null device, so that the interpreter's
    final flush does not hit the closed pipe again."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, sys.stdout.fileno())
    finally:
        os.close(devnull)


def run(
    main: Callable[[list[str]], int | None],
    argv: Sequence[str] | None = None,
    prog: str | None = None,
) -> int:
    """Runs ``main(argv)`` (argv defaults to ``sys.argv[1:]``) and returns
    the exit status, turning its exceptions into one line on stderr unless
    `argv` holds `--debug`."""
    arguments = list(sys.argv[1:] if argv is None else argv)
    prog = prog or Path(sys.argv[0]).name
    debug = "--debug" in arguments
    try:
        status = main(arguments)
        # A closed pipe shows up here rather than at interpreter exit.
        sys.stdout.flush()
        return status or 0
    except BrokenPipeError:
        _quiet_stdout()
        return 0
    except KeyboardInterrupt:
        if debug:
            raise
        print(f"{prog}: interrupted", file=sys.stderr)
        return INTERRUPTED
    except Exception as error:
        if debug:
            raise
        print(error_line(prog, error), file=sys.stderr)
        return USAGE_ERROR if isinstance(error, UsageError) else RUNTIME_ERROR
