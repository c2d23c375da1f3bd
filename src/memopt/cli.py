"""The ``memopt`` command.

Each sub-command lives next to the code it drives and registers itself here through a
``register(subparsers)`` function that sets ``func`` on its parser. Errors that come from
bad input (:class:`memopt.errors.MemoptError`, unreadable files) are printed as a single
line on stderr and the command exits with status 2; no traceback.
"""

from __future__ import annotations

import argparse
import os
import sys

from memopt.errors import MemoptError


class _Parser(argparse.ArgumentParser):
    """Usage errors as one line too (sub-command parsers inherit this class)."""

    def error(self, message: str):
        print(f"memopt: error: {self.prog.split(' ', 1)[-1] + ': ' if ' ' in self.prog else ''}{message}",
              file=sys.stderr)
        raise SystemExit(2)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="memopt",
        description="Exact memory scheduling, lower bounds and rematerialization studies.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    from memopt import schedule_cli, dtr

    schedule_cli.register(sub)
    dtr.cli.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except BrokenPipeError:
        # the reader went away (`memopt ... | head`): not an error of ours
        sys.stderr.close()
        return 0
    except MemoptError as exc:
        print(f"memopt: error: {exc}", file=sys.stderr)
        return 2
    except (OSError, UnicodeDecodeError) as exc:
        print(f"memopt: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("memopt: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # a bug, not bad input: still one line, the traceback on request
        if os.environ.get("MEMOPT_DEBUG"):
            raise
        print(f"memopt: internal error: {type(exc).__name__}: {exc} (set MEMOPT_DEBUG=1 for a traceback)",
              file=sys.stderr)
        return 3


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
