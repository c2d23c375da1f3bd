"""The ``memopt`` command.

One sub-module per command family registers its sub-commands through ``register(subparsers)``
(:mod:`memopt.cli.schedule`: ``schedule``, ``bound``, ``verify``; :mod:`memopt.cli.dtr`:
``dtr replay|sweep|explain``; :mod:`memopt.cli.cache`: ``cache experts|certify|verify|sweep|kv|record-attention|kv-eval``; :mod:`memopt.cli.remat`, :mod:`memopt.cli.onnx`, :mod:`memopt.cli.train`: ``train-remat``); output goes through the shared helpers of
:mod:`memopt.cli._output`. Building the parser imports no solver, no kernel, no numba and
no numpy: each command imports what it drives when it runs.

Bare ``memopt`` prints the help on stdout and exits 0, as ``pip`` and ``cargo`` do: nothing
was asked, nothing failed, and the list of commands is what the user needs.

Exit status: 0 success; 1 a sweep found non-deterministic replays or lost points; 2 bad input or options
(:class:`~memopt.errors.MemoptError`, an unreadable file, a usage error), one line on
stderr; 3 an internal error (:class:`~memopt.errors.InternalError` or any other
unexpected exception), one line asking for a report (``MEMOPT_DEBUG=1`` re-raises it with
its traceback); 130 interrupted.
"""

from __future__ import annotations

import argparse
import errno
import os
import sys

from memopt import __version__
from memopt.cli import _options as opt
from memopt.errors import InternalError, MemoptError

__all__ = ["main", "console", "build_parser"]


class _Parser(argparse.ArgumentParser):
    """Usage errors as one line too (sub-command parsers inherit this class)."""

    def error(self, message: str):
        where = self.prog.split(" ", 1)[1] + ": " if " " in self.prog else ""
        print(f"memopt: error: {where}{_one_line(message)}", file=sys.stderr)
        raise SystemExit(2)


def build_parser() -> argparse.ArgumentParser:
    """The ``memopt`` argument parser (cheap: imports no solver, kernel or numpy)."""
    from memopt.cli import cache, dtr, remat, schedule, train
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
    train.register(sub)
    return parser


#: A word longer than this in an error message (a 5,000-digit option echoed back) is shortened.
LONG_WORD = 200


def _one_line(text) -> str:
    words = [w if len(w) <= LONG_WORD else f"{w[:60]}...({len(w)} characters)" for w in str(text).split()]
    return " ".join(words) or "(no message)"


#: The arguments that name input files, whatever the command (``--certificate`` of ``schedule``
#: is an output: ``cache verify`` names its input ``cert_file``).
_INPUTS = ("file", "plan", "cert_file", "trace", "text")


def _input_files(args) -> list[str]:
    out = []
    for key in _INPUTS:
        value = getattr(args, key, None)
        out.extend(str(v) for v in (value if isinstance(value, list) else [value] if value else []))
    return out


def main(argv: list[str] | None = None) -> int:
    """Run the ``memopt`` command with ``argv`` (default ``sys.argv[1:]``); returns the exit status."""
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        parser = build_parser()
        if not argv:
            parser.print_help()
            return 0
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help, --version, usage errors (already printed)
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 2)
    try:
        from memopt import _jit

        _jit.env_mode()  # an unknown $MEMOPT_JIT is refused by every command, before any work
        for path in _input_files(args):
            opt.not_a_device(path)
        code = int(args.func(args) or 0)
        sys.stdout.flush()  # a full disk behind stdout is an error now, not a message at exit
        return code
    except BrokenPipeError:
        # the reader went away (`memopt ... | head`): not an error of ours; keep the
        # interpreter from complaining when it flushes stdout at exit
        _drop_stdout()
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
        if exc.filename is None and exc.errno in _WRITE_ERRNOS:  # files are guarded by _output.writing
            _drop_stdout()
            print(f"memopt: error: stdout: cannot write: {exc.strerror or exc}", file=sys.stderr)
            return 2
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


def console() -> None:
    """The ``memopt`` command: :func:`main`, then the process ends without the interpreter's
    teardown, which frees every loaded kernel one by one (1-3 s on a loaded machine, after the
    time limit the call kept) once the answer is out."""
    code = main()
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except (OSError, ValueError):
        code = code or 120   # what the interpreter's own failed flush at exit returns
    os._exit(code)


#: Errors only a write raises: with no file name, they come from stdout (``> /dev/full``),
#: since every output file is written under :func:`memopt.cli._output.writing`.
_WRITE_ERRNOS = (errno.ENOSPC, errno.EFBIG, errno.EDQUOT)


def _drop_stdout() -> None:
    """Point stdout at /dev/null, so that the interpreter's flush at exit has nothing to fail on."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):
        pass


def _debug_reraise() -> None:
    if os.environ.get("MEMOPT_DEBUG"):
        raise
