"""The extra-cost lower bound in a second process, beside the heuristic (``auto``'s use of a second core).

``auto`` (:mod:`memopt.remat.api`) needs both a plan (the heuristic) and a bound that can prove
it optimal (:func:`memopt.remat.lower_bounds.cost_lower_bound`). Both are single-threaded
Python, and neither needs the other to start: the bound needs only the graph, the limit and the
caps; the plan's cost only lets the bound stop early (``stop_at``). On a machine with two or
more cores, :class:`CostBoundProcess` runs the bound in a child process while the heuristic runs
in the caller, so each gets the whole time instead of a share of it (on ``random_layered_n250``
at 0.9, cap 2, the bound gets more than twice the time it had after the heuristic).

Protocol: the child is ``python -m memopt.remat.cost_bound_process`` (a fresh interpreter: no
``fork`` of a process that holds solver threads, and no re-import of the caller's ``__main__``
as ``multiprocessing``'s ``spawn`` does). The parent writes pickles to its stdin: first the
request (graph, limit, caps, time limit, ``stop_at``), then control messages: ``("stop_at",
c)`` when a cheaper plan is found (the bound stops once it reaches ``c``: the plan is then
optimal) and ``("stop",)`` when the caller needs the bound now (it returns the best bound
proved so far, still valid). The child writes one pickle to its stdout: ``("ok",
CostBound)`` or ``("error", text)``.

The child works to the caller's clock (:class:`memopt.clock.Clock`): it is sent the seconds
left on it and makes its own clock from them. It is ended (terminated, then killed after
:data:`KILL_GRACE` seconds) at the latest when the caller's clock runs out, answer or not.

A child that fails (it crashes, is killed, or answers nothing within :data:`STOP_GRACE`
seconds of a ``stop``, nor by the caller's deadline) yields ``None``: the caller then runs the bound in its own process
with the time left, as on one core. The bound the child returns is exactly
``cost_lower_bound``'s (same code, same arguments); ``auto`` treats it as it treats the
in-process one.
"""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import Future

__all__ = ["CostBoundProcess", "usable_cores"]

#: seconds a child may take to return its bound after ``stop`` (one oracle call of the bound
#: finishes first; those are capped at a tenth of its time limit) before it is killed; never
#: past the caller's deadline
STOP_GRACE = 30.0
#: seconds between asking a child that is to end to terminate and killing it
KILL_GRACE = 0.5


def usable_cores() -> int:
    """Cores this process may run on (its CPU affinity where the OS tells it)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


class CostBoundProcess:
    """``cost_lower_bound(graph, memory_limit, caps, clock=..., stop_at=...)`` running in
    a child process; :meth:`result` returns its :class:`~memopt.remat.lower_bounds.CostBound`,
    or ``None`` if the child failed. ``clock``: the bound's :class:`memopt.clock.Clock` (else
    one of ``time_limit`` seconds)."""

    def __init__(self, graph, memory_limit: int, caps, *, time_limit: float | None = None, clock=None,
                 stop_at=None):
        import memopt
        from memopt.time_shares import remat_clock

        self.clock = remat_clock(time_limit, clock)
        self.time_limit = self.clock.left()
        self.started = time.perf_counter()
        self._done: Future = Future()
        self._lock = threading.Lock()
        self.error = None  # why the child gave no bound (None while it runs, or when it gave one)
        self._err = tempfile.TemporaryFile()
        env = dict(os.environ)
        # the child imports the memopt this process runs, installed or not
        root = os.path.dirname(os.path.dirname(os.path.abspath(memopt.__file__)))
        env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        try:
            self._proc = subprocess.Popen([sys.executable, "-m", "memopt.remat.cost_bound_process"],
                                          stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._err, env=env)
            self._send({"graph": graph, "memory_limit": int(memory_limit), "caps": list(caps),
                        "time_limit": self.clock.left(), "stop_at": stop_at})
        except (OSError, pickle.PicklingError) as exc:
            self._proc = None
            self._finish(None, f"cannot start the child: {exc}")
            return
        threading.Thread(target=self._read, name="memopt-cost-bound-reader", daemon=True).start()

    def _send(self, msg) -> bool:
        try:
            pickle.dump(msg, self._proc.stdin, protocol=pickle.HIGHEST_PROTOCOL)
            self._proc.stdin.flush()
            return True
        except (OSError, ValueError):  # the child has gone: result() reports it
            return False

    def _read(self) -> None:
        try:
            kind, payload = pickle.load(self._proc.stdout)
        except Exception:  # noqa: BLE001 — a dead child's truncated pipe, whatever the unpickler says
            kind, payload = "error", None
        self._finish(payload if kind == "ok" else None, None if kind == "ok" else payload or "the child ended without an answer")

    def _finish(self, bound, error) -> None:
        """Settle the result once: the reader thread and :meth:`close` may both try."""
        with self._lock:
            if not self._done.done():
                self.error = error
                self._done.set_result(bound)

    def stop_at(self, value) -> None:
        """A plan of extra cost ``value`` exists: the bound may stop once it reaches it."""
        if self._proc is not None and not self._done.done():
            self._send(("stop_at", value))

    def done(self) -> bool:
        return self._done.done()

    def wait(self, clock) -> bool:
        """Wait until the child is done or ``clock`` runs out, without stopping it: done?"""
        try:
            self._done.result(timeout=clock.left())
        except TimeoutError:
            pass
        return self._done.done()

    def result(self, *, stop: bool = False, timeout: float | None = None, clock=None):
        """The child's bound (``None`` if it failed). ``stop``: ask for it now; otherwise wait
        for the child's own deadline (plus :data:`STOP_GRACE`, or ``timeout``), never past the
        deadline of ``clock`` (the caller's): then the child is killed."""
        if self._proc is None:
            return None
        if stop and not self._done.done():
            self._send(("stop",))
        if timeout is None:
            timeout = STOP_GRACE + (0.0 if stop else self.clock.left())
        if clock is not None:
            timeout = min(timeout, clock.left())
        try:
            self._done.result(timeout=timeout)
        except TimeoutError:
            self._finish(None, f"no answer within {timeout:.1f} s")
        self.close()
        return self._done.result()

    def close(self) -> None:
        """End the child (if it still runs) and release its pipes."""
        if self._proc is None:
            return
        proc, self._proc = self._proc, None
        try:
            proc.stdin.close()
        except OSError:
            pass
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(KILL_GRACE)
            except subprocess.TimeoutExpired:
                proc.kill()
        proc.wait()
        self._finish(None, "the child ended without an answer")  # nothing if it answered
        if self.error is not None and proc.returncode not in (0, None):
            self._err.seek(0)
            tail = self._err.read().decode(errors="replace").strip().splitlines()[-1:]
            self.error += f" (exit {proc.returncode}{': ' + tail[0] if tail else ''})"
        proc.stdout.close()
        self._err.close()

    def __del__(self):  # a caller that dropped it without result(): no orphan child
        try:
            self.close()
        except Exception:  # noqa: BLE001 — interpreter shutdown
            pass


def _child() -> None:
    """The child's side of the protocol (``python -m memopt.remat.cost_bound_process``)."""
    from memopt.remat.lower_bounds import cost_lower_bound

    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    req = pickle.load(stdin)
    state = {"stop_at": req["stop_at"], "stop": False}

    def listen():
        while True:
            try:
                msg = pickle.load(stdin)
            except Exception:  # noqa: BLE001 — the parent closed the pipe (or died): stop
                state["stop"] = True
                return
            if msg[0] == "stop":
                state["stop"] = True
            elif msg[0] == "stop_at":
                state["stop_at"] = msg[1] if state["stop_at"] is None else min(state["stop_at"], msg[1])

    threading.Thread(target=listen, name="memopt-cost-bound-control", daemon=True).start()
    try:
        out = ("ok", cost_lower_bound(req["graph"], req["memory_limit"], req["caps"], time_limit=req["time_limit"],
                                      stop_at=lambda: state["stop_at"], cancel=lambda: state["stop"]))
    except Exception as exc:  # noqa: BLE001 — reported to the parent, which runs the bound itself
        out = ("error", f"{type(exc).__name__}: {exc}")
    pickle.dump(out, stdout, protocol=pickle.HIGHEST_PROTOCOL)
    stdout.flush()


if __name__ == "__main__":
    _child()
