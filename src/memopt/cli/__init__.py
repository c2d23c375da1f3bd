"""The ``memopt`` command.

One sub-module per command family registers its sub-commands through ``register(subparsers)``
(:mod:`memopt.cli.schedule`: ``schedule``, ``bound``, ``verify``; :mod:`memopt.cli.dtr`:
``dtr replay|sweep|explain``; :mod:`memopt.cli.cache`: ``cache experts|certify|verify|sweep|kv|record-attention``; :mod:`memopt.cli.remat`, :mod:`memopt.cli.onnx`); output goes through the shared helpers of
:mod:`memopt.cli._output`. Building the parser imports no solver, no kernel, no numba and
no numpy: each command imports what it drives when it runs.

Exit status: 0 success; 1 a sweep found non-deterministic replays or lost points; 2 bad input or options
(:class:`~memopt.errors.MemoptError`, an unreadable file, a usage error), one line on
stderr; 3 an internal error (:class:`~memopt.errors.InternalError` or any other
unexpected exception), one line asking for a report (``MEMOPT_DEBUG=1`` re-raises it with
its traceback); 130 interrupted.
"""

from __future__ import annotations

import argparse
import os
import sys

from memopt import __version__
from memopt.errors import InternalError, MemoptError

__all__ = ["main", "build_parser"]


class _Parser(argparse.ArgumentParser):
    """Usage errors as one line too (sub-command parsers inherit this class)."""

    def error(self, message: str):
        where = self.prog.split(" ", 1)[1] + ": " if " " in self.prog else ""
        print(f"memopt: error: {where}{_one_line(message)}", file=sys.stderr)
        raise SystemExit(2)


def build_parser() -> argparse.ArgumentParser:
    """The ``memopt`` argument parser (cheap: imports no solver, kernel or numpy)."""
    from memopt.cli import cache, dtr, remat, schedule
    from memopt.cli import onnx as onnx_cli

    parser = _Parser(
        prog="memopt",
        description="Exact memory scheduling, lower bounds and rematerialization studies.",
        epilog="Exit status: 0 ok, 1 a sweep found non-deterministic replays or lost points with their worker, 2 bad input or options, "
               "3 internal error (please report), 130 interrupted.",
    )
    parser.add_argument("--version", action="version", version=f"memopt {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True
    schedule.register(sub)
    dtr.register(sub)
    cache.register(sub)
    remat.register(sub)
    onnx_cli.register(sub)
    return parser


def _one_line(text) -> str:
    return " ".join(str(text).split()) or "(no message)"


def _input_files(args) -> list[str]:
    return [str(getattr(args, k)) for k in ("file", "plan", "trace") if getattr(args, k, None)]


def main(argv: list[str] | None = None) -> int:
    """Run the ``memopt`` command with ``argv`` (default ``sys.argv[1:]``); returns the exit status."""
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as exc:  # --help, --version, usage errors (already printed)
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 2)
    try:
        from memopt import _jit

        _jit.env_mode()  # an unknown $MEMOPT_JIT is refused by every command, before any work
        return int(args.func(args) or 0)
    except BrokenPipeError:
        # the reader went away (`memopt ... | head`): not an error of ours; keep the
        # interpreter from complaining when it flushes stdout at exit
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
        except (OSError, ValueError, AttributeError):
            pass
        return 0
    except KeyboardInterrupt:
        print("memopt: interrupted", file=sys.stderr)
        return 130
    except MemoptError as exc:
        _debug_reraise()
        print(f"memopt: error: {_one_line(exc)}", file=sys.stderr)
        return 2
    except UnicodeDecodeError as exc:
        _debug_reraise()
        files = ", ".join(_input_files(args)) or "input"
        print(f"memopt: error: {files}: not UTF-8 text ({exc.reason} at byte {exc.start})", file=sys.stderr)
        return 2
    except OSError as exc:
        _debug_reraise()
        if exc.filename is not None:
            what = f"{exc.filename}: {exc.strerror or type(exc).__name__}"
        else:
            what = f"{', '.join(_input_files(args)) or 'I/O'}: {exc}"
        print(f"memopt: error: {_one_line(what)}", file=sys.stderr)
        return 2
    except InternalError as exc:
        _debug_reraise()
        print(f"memopt: internal error: {_one_line(exc)} — please report this "
              "(set MEMOPT_DEBUG=1 for a traceback)", file=sys.stderr)
        return 3
    except Exception as exc:  # a bug, not bad input: still one line, the traceback on request
        _debug_reraise()
        print(f"memopt: internal error: {type(exc).__name__}: {_one_line(exc)} — please report this "
              "(set MEMOPT_DEBUG=1 for a traceback)", file=sys.stderr)
        return 3


def _debug_reraise() -> None:
    if os.environ.get("MEMOPT_DEBUG"):
        raise
