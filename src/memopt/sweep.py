"""Sweeps on any :class:`concurrent.futures.Executor`, local or Dask: the machinery shared by
the DTR budget sweeps (:mod:`memopt.dtr.sweep`) and the expert-cache capacity sweeps
(:mod:`memopt.cache.sweep`).

A sweep is a list of independent *tasks* ``(key, args)``, each run as ``fn(*args)`` by a
module-level function ``fn``; :func:`run_tasks` runs them and yields every task's outcome as
it arrives, as ``(key, kind, payload)``:

* ``("done", value)``: ``fn`` returned ``value``;
* ``("timeout", seconds)``: the task overran its time limit and its worker was ended
  (only on memopt's own local worker processes, see below);
* ``("lost", reason)``: the worker running the task died (killed, crashed, out of memory)
  or, on another executor, the executor reported the task's worker dead.

An exception raised *by* ``fn`` (bad input found by a worker) is not an outcome: it ends the
sweep and is raised to the caller, as a serial loop would.

Where tasks run (:func:`parse_executor_spec`, the ``--executor SPEC`` option):

``local`` (the default)
    ``jobs`` worker processes of memopt's own (started with ``spawn``); ``jobs == 1`` runs
    the tasks in the calling process. Each worker runs one task at a time over a pipe, so the
    parent always knows which task a worker holds: when a worker process dies (it exits, a
    signal or the OOM killer ends it), its pipe closes, the parent reaps it, reports exactly
    that task as ``lost`` with the exit code or signal, starts a fresh worker, and the sweep
    goes on. Per-task time limits (``timeout``) also need these workers (a running
    ``concurrent.futures`` task cannot be cancelled): CPU time where the OS enforces one
    (RLIMIT_CPU, whole seconds), else wall time.
``threads``
    a :class:`~concurrent.futures.ThreadPoolExecutor` of ``jobs`` threads.
``dask://HOST:PORT``
    a Dask cluster: ``distributed.Client("tcp://HOST:PORT").get_executor(pure=False)``
    (``pip install 'memopt[dask]'``). Dask reschedules the tasks of a worker that dies; a task
    that was on ``distributed.scheduler.allowed-failures + 1`` dying workers fails with
    ``KilledWorker`` and is reported ``lost``.

From Python, ``executor`` may also be any ``concurrent.futures.Executor`` (used, never shut
down) or a ``dask.distributed.Client`` (its ``get_executor(pure=False)``). On a foreign
executor, a future that fails with a broken-executor error (``BrokenProcessPool``...) or
``KilledWorker`` is reported ``lost`` with that error; a broken ``ProcessPoolExecutor``
cannot tell which task killed it, so every task still pending on it is reported ``lost``.
A future failed by the executor's own code (Dask's ``ClientExecutor`` when a computed result
dies with its worker before it is fetched) is submitted again, up to :data:`MAX_RESUBMITS`
times. Finished tasks are always kept.
"""

from __future__ import annotations

import concurrent.futures as cf
import contextlib
import math
import multiprocessing
import re
import signal
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Iterator, Sequence

from memopt._progress import Progress
from memopt.errors import MemoptError, OptionError

__all__ = ["ExecutorSpec", "parse_executor_spec", "open_executor", "run_tasks", "InlineExecutor",
           "is_worker_death", "plot_lines", "WALL_GUARD_FACTOR", "EXECUTOR_GRAMMAR"]

#: One-line description of the ``--executor`` grammar (used in help texts and errors).
EXECUTOR_GRAMMAR = "local, threads or dask://HOST:PORT"

#: How long to try to reach a ``dask://`` scheduler before giving up (a Dask duration).
DASK_CONNECT_TIMEOUT = "10s"

#: With CPU-time limits, the parent still kills a task after this many times the limit in
#: wall time (a guard against a worker that makes no progress at all).
WALL_GUARD_FACTOR = 20


# ---------------------------------------------------------------------------------------
# Executor specs
# ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ExecutorSpec:
    """A parsed ``--executor`` value: ``kind`` is ``local``, ``threads`` or ``dask``;
    ``address`` is the Dask scheduler's ``tcp://HOST:PORT`` (``None`` otherwise)."""

    kind: str
    address: str | None = None

    def __str__(self) -> str:
        return self.kind if self.address is None else "dask://" + self.address[len("tcp://"):]


_HOST = re.compile(r"^(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9._-]+)$")


def parse_executor_spec(spec: str) -> ExecutorSpec:
    """Parse an executor spec: ``local``, ``threads`` or ``dask://HOST:PORT`` (``HOST`` a
    name, an IPv4 address or a bracketed IPv6 address; ``PORT`` in 1..65535).

    >>> parse_executor_spec("dask://scheduler:8786")
    ExecutorSpec(kind='dask', address='tcp://scheduler:8786')
    >>> parse_executor_spec("ftp://x:1")
    Traceback (most recent call last):
    ...
    memopt.errors.OptionError: --executor 'ftp://x:1': unknown scheme 'ftp'; expected local, threads or dask://HOST:PORT
    """
    if not isinstance(spec, str):
        raise OptionError(f"--executor must be a string ({EXECUTOR_GRAMMAR}), got {type(spec).__name__}")
    text = spec.strip()
    if text in ("local", "threads"):
        return ExecutorSpec(text)
    scheme, sep, rest = text.partition("://")
    if not sep:
        raise OptionError(f"--executor {spec!r}: unknown executor; expected {EXECUTOR_GRAMMAR}")
    if scheme != "dask":
        raise OptionError(f"--executor {spec!r}: unknown scheme {scheme!r}; expected {EXECUTOR_GRAMMAR}")
    host, colon, port = rest.rpartition(":")
    if not colon or "]" in port:
        raise OptionError(f"--executor {spec!r}: a Dask scheduler is dask://HOST:PORT (the port is required)")
    if not host:
        raise OptionError(f"--executor {spec!r}: a Dask scheduler is dask://HOST:PORT (the host is missing)")
    if not _HOST.match(host):
        raise OptionError(f"--executor {spec!r}: bad host {host!r}")
    from memopt.cli._options import whole

    number = whole(port, f"--executor {spec!r}: bad port", low=1, high=65535)
    return ExecutorSpec("dask", f"tcp://{host}:{number}")


class InlineExecutor(cf.Executor):
    """Runs each task in the calling process at ``submit`` time (``jobs == 1``)."""

    def submit(self, fn, /, *args, **kwargs):  # type: ignore[override]
        future: cf.Future = cf.Future()
        try:
            future.set_result(fn(*args, **kwargs))
        except BaseException as exc:  # handed to the caller through the future
            future.set_exception(exc)
        return future


def _is_dask_client(obj: Any) -> bool:
    return type(obj).__name__ == "Client" and hasattr(obj, "get_executor") and hasattr(obj, "scheduler")


def _connect_dask(address: str):
    try:
        from distributed import Client
    except ImportError:
        raise OptionError("--executor dask://... needs dask.distributed (pip install 'memopt[dask]')") from None
    try:
        return Client(address, timeout=DASK_CONNECT_TIMEOUT, set_as_default=False)
    except (OSError, TimeoutError) as exc:
        raise MemoptError(f"--executor {address.replace('tcp://', 'dask://')}: cannot reach the Dask "
                          f"scheduler ({type(exc).__name__}: {' '.join(str(exc).split())})") from None


@contextlib.contextmanager
def open_executor(executor: Any = None, jobs: int = 1) -> Iterator[cf.Executor | None]:
    """A ``concurrent.futures`` executor for ``executor`` (a spec string, an
    :class:`ExecutorSpec`, an executor, a Dask ``Client`` or ``None``), closed on exit if it
    was made here. Yields ``None`` for ``local``/``None``: memopt's own workers (see
    :func:`run_tasks`), which are not a ``concurrent.futures`` pool."""
    if isinstance(executor, str):
        executor = parse_executor_spec(executor)
    if executor is None or (isinstance(executor, ExecutorSpec) and executor.kind == "local"):
        yield None
    elif isinstance(executor, ExecutorSpec) and executor.kind == "threads":
        pool = cf.ThreadPoolExecutor(max_workers=jobs, thread_name_prefix="memopt-sweep")
        try:
            yield pool
        finally:
            pool.shutdown(wait=True, cancel_futures=True)
    elif isinstance(executor, ExecutorSpec) and executor.kind == "dask":
        client = _connect_dask(executor.address)
        try:
            yield client.get_executor(pure=False)
        finally:
            client.close()
    elif _is_dask_client(executor):
        yield executor.get_executor(pure=False)
    elif isinstance(executor, cf.Executor):
        yield executor
    else:
        raise OptionError(f"executor must be a spec ({EXECUTOR_GRAMMAR}), a concurrent.futures.Executor "
                          f"or a dask.distributed.Client, got {type(executor).__name__}")


# ---------------------------------------------------------------------------------------
# Running tasks
# ---------------------------------------------------------------------------------------

_DEATH_NAMES = {"KilledWorker", "BrokenProcessPool", "BrokenThreadPool", "BrokenExecutor", "CommClosedError"}


def is_worker_death(exc: BaseException) -> bool:
    """Whether a future's exception means its worker died (not that the task raised)."""
    return isinstance(exc, cf.BrokenExecutor) or any(c.__name__ in _DEATH_NAMES for c in type(exc).__mro__)


def _call(fn: Callable, key: Any, args: tuple) -> Any:
    """What a foreign executor runs: ``fn(*args)``. ``key`` is unused but makes every task's
    arguments distinct, so that an executor that deduplicates identical calls (Dask with
    ``pure=True``) still runs every repeat."""
    return fn(*args)


def _exit_reason(code: int | None) -> str:
    if code is None:
        return "worker process died (exit status unknown)"
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        hint = " (out of memory, or ended from outside?)" if -code == signal.SIGKILL else ""
        return f"worker process died: killed by {name}{hint}"
    return f"worker process died: exit code {code}"


def run_tasks(fn: Callable, tasks: Sequence[tuple[Any, tuple]], *, executor: Any = None, jobs: int = 1,
              timeout: float | None = None, initializer: Callable | None = None, initargs: tuple = (),
              progress: bool = False, desc: str = "sweep",
              describe: Callable[[Any, str, Any], str] | None = None) -> Iterator[tuple[Any, str, Any]]:
    """Run ``fn(*args)`` for every ``(key, args)`` of ``tasks``; yield ``(key, kind, payload)``
    as tasks finish (``kind``: ``done``, ``timeout`` or ``lost``; see the module doc).

    ``executor``: a spec (``local``, ``threads``, ``dask://HOST:PORT``), an executor, a Dask
    ``Client`` or ``None`` (``local``). ``jobs``: workers of ``local`` and ``threads``.
    ``timeout``: seconds per task (``local`` only; CPU time where enforceable).
    ``initializer(*initargs)`` runs once in each of memopt's own worker processes before its
    first task (e.g. to parse a trace once). ``progress`` draws a bar on a terminal's stderr
    (never when stderr is not a terminal); ``describe(key, kind, payload)`` gives its status.
    """
    tasks = list(tasks)
    if isinstance(executor, str):
        executor = parse_executor_spec(executor)
    local = executor is None or (isinstance(executor, ExecutorSpec) and executor.kind == "local")
    if timeout is not None and not local:
        raise OptionError("a per-point timeout needs the built-in local worker processes "
                          "(--executor local), not another executor")
    with Progress(len(tasks), desc, enabled=progress) as bar, open_executor(executor, jobs) as pool:
        if pool is not None:
            stream = _executor_results(pool, fn, tasks)
        elif jobs > 1 or timeout is not None:
            stream = _process_results(fn, tasks, jobs, timeout, initializer, initargs)
        else:
            stream = _inline_results(fn, tasks)
        for key, kind, payload in stream:
            bar.update(1, status=describe(key, kind, payload) if describe else None)
            yield key, kind, payload


def _inline_results(fn, tasks):
    for key, args in tasks:
        yield key, "done", fn(*args)


#: How many times a task is submitted again when the executor itself lost its result (see
#: :func:`_executor_internal`) before it is reported ``lost``.
MAX_RESUBMITS = 3


def _executor_internal(exc: BaseException) -> bool:
    """Whether a future's exception was raised by the executor's own machinery rather than by
    the task: the innermost frame of its traceback is in ``distributed/cfexecutor.py``. (A
    task's own exception is re-raised there with the task's traceback below it.) Dask's
    ``ClientExecutor`` fails a future this way when the worker holding an already computed
    result dies before the result is fetched; the task itself is fine and is run again."""
    tb = exc.__traceback__
    if tb is None:
        return False
    while tb.tb_next is not None:
        tb = tb.tb_next
    return tb.tb_frame.f_code.co_filename.replace("\\", "/").endswith("distributed/cfexecutor.py")


def _executor_results(pool: cf.Executor, fn, tasks):
    if isinstance(pool, InlineExecutor):
        # Submitting would run every task before the first result is seen; run them one
        # by one instead so that progress is reported as it happens.
        for key, args in tasks:
            yield key, "done", pool.submit(fn, *args).result()
        return
    futures: dict[cf.Future, tuple[Any, tuple, int]] = {}  # future -> (key, args, resubmissions)
    try:
        for key, args in tasks:
            try:
                futures[pool.submit(_call, fn, key, args)] = (key, args, 0)
            except cf.BrokenExecutor as exc:  # broke while submitting: the rest cannot run
                yield key, "lost", f"not run: the executor is broken ({type(exc).__name__}: {exc})"
        while futures:
            finished, _ = cf.wait(list(futures), return_when=cf.FIRST_COMPLETED)
            for fut in finished:
                key, args, again = futures.pop(fut)
                if fut.cancelled():  # not by us: the executor gave the task up
                    yield key, "lost", "the executor cancelled the task"
                    continue
                exc = fut.exception()
                if exc is None:
                    yield key, "done", fut.result()
                elif is_worker_death(exc) or (_executor_internal(exc) and again >= MAX_RESUBMITS):
                    text = " ".join(str(exc).split()).split(". ")[0]  # the first sentence says it
                    yield key, "lost", f"{type(exc).__name__}: {text}"[:300]
                elif _executor_internal(exc):
                    futures[pool.submit(_call, fn, key, args)] = (key, args, again + 1)
                else:
                    raise exc
    finally:
        for fut in futures:
            fut.cancel()


def _limit_cpu(seconds: float) -> bool:
    """Let the calling process use about ``seconds`` more CPU time (RLIMIT_CPU, whole
    seconds): past it the kernel sends SIGXCPU, whose default action ends the process.
    False where this is unavailable (no ``resource`` module, or a hard limit in the way)."""
    try:
        import resource
    except ImportError:
        return False
    usage = resource.getrusage(resource.RUSAGE_SELF)
    soft = int(math.ceil(usage.ru_utime + usage.ru_stime + seconds))
    _, hard = resource.getrlimit(resource.RLIMIT_CPU)
    if hard != resource.RLIM_INFINITY and soft > hard:
        return False
    resource.setrlimit(resource.RLIMIT_CPU, (soft, hard))
    return True


def _worker_main(conn, fn, timeout, initializer, initargs) -> None:
    """Body of one of memopt's own worker processes: initialize, then serve one task at a
    time, each under a CPU-time limit of ``timeout`` seconds where the OS supports it."""
    try:
        if initializer is not None:
            initializer(*initargs)
        cpu_limited = _limit_cpu(timeout) if timeout is not None else False
        conn.send(("ready", cpu_limited))
    except Exception as exc:  # reported by the parent as the sweep's error
        _send_error(conn, exc)
        return
    while True:
        msg = conn.recv()
        if msg is None:
            return
        key, args = msg
        if cpu_limited:
            _limit_cpu(timeout)
        try:
            value = fn(*args)
        except Exception as exc:
            _send_error(conn, exc)
            return
        conn.send(("done", (key, value)))


def _send_error(conn, exc: BaseException) -> None:
    try:
        conn.send(("error", exc))
    except Exception:  # an exception that does not pickle: keep its text
        conn.send(("error", MemoptError(f"{type(exc).__name__}: {exc}")))


def _process_results(fn, tasks, jobs: int, timeout: float | None, initializer, initargs):
    """Run ``tasks`` on ``jobs`` worker processes of our own; see the module doc."""
    from multiprocessing.connection import wait

    ctx = multiprocessing.get_context("spawn")
    pending = list(reversed(tasks))
    workers: dict[Any, dict] = {}  # conn -> {"proc", "task", "deadline", "started", "ready", "cpu"}

    def spawn() -> None:
        parent, child = ctx.Pipe()
        proc = ctx.Process(target=_worker_main, args=(child, fn, timeout, initializer, initargs), daemon=True)
        proc.start()
        child.close()
        workers[parent] = {"proc": proc, "task": None, "deadline": None, "started": None,
                           "ready": False, "cpu": False}

    def retire(conn) -> None:
        w = workers.pop(conn)
        if w["proc"].is_alive():
            w["proc"].kill()
        w["proc"].join()
        conn.close()

    def replace(conn) -> Any:
        """End the worker behind ``conn``; a fresh one takes its place while tasks remain."""
        key = workers[conn]["task"][0]
        retire(conn)
        if pending:
            spawn()
        return key

    try:
        for _ in range(min(jobs, len(tasks))):
            spawn()
        busy = 0
        while pending or busy:
            for conn, w in list(workers.items()):
                if w["ready"] and w["task"] is None and pending:
                    key, args = pending.pop()
                    w["task"] = (key, args)
                    w["started"] = time.monotonic()
                    if timeout is not None:
                        wall = timeout * WALL_GUARD_FACTOR if w["cpu"] else timeout
                        w["deadline"] = w["started"] + wall
                    conn.send((key, args))
                    busy += 1
            deadlines = [w["deadline"] for w in workers.values() if w["deadline"] is not None]
            wait_for = max(0.0, min(deadlines) - time.monotonic()) if deadlines else None
            for conn in wait(list(workers), timeout=wait_for):
                w = workers[conn]
                try:
                    kind, payload = conn.recv()
                except (EOFError, OSError):
                    w["proc"].join(5)
                    code = w["proc"].exitcode
                    if w["task"] is None:
                        if not w["ready"]:
                            raise MemoptError(f"a sweep worker process died while starting "
                                              f"({_exit_reason(code).replace('worker process died: ', '')})"
                                              ) from None
                        retire(conn)  # died idle: nothing lost
                        if pending:
                            spawn()
                        continue
                    busy -= 1
                    ran = time.monotonic() - w["started"]
                    if timeout is not None and w["cpu"] and (
                            code == -signal.SIGXCPU or (code == -signal.SIGKILL and ran >= timeout)):
                        # The kernel ended the task at its CPU-time limit.
                        yield replace(conn), "timeout", timeout
                    else:
                        yield replace(conn), "lost", _exit_reason(code)
                    continue
                if kind == "error":
                    raise payload
                if kind == "ready":
                    w["ready"], w["cpu"] = True, payload
                    continue
                key, value = payload
                w["task"] = w["deadline"] = w["started"] = None
                busy -= 1
                yield key, "done", value
            now = time.monotonic()
            for conn, w in list(workers.items()):
                if w["task"] is not None and w["deadline"] is not None and w["deadline"] <= now:
                    busy -= 1
                    yield replace(conn), "timeout", timeout
    finally:
        for conn, w in list(workers.items()):
            if w["proc"].is_alive() and w["task"] is None:
                try:
                    conn.send(None)
                except OSError:
                    pass
            retire(conn)


# ---------------------------------------------------------------------------------------
# Plots (matplotlib, opt-in)
# ---------------------------------------------------------------------------------------


def pyplot():
    """``matplotlib.pyplot`` with the Agg backend, or :class:`MemoptError` naming the extra."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise MemoptError("--plot needs matplotlib (pip install 'memopt[plot]')") from None
    return plt


def save_figure(plt, fig, ax, path, *, xlabel: str, ylabel: str, title: str = "") -> None:
    """The house style every sweep plot ends with: labels, title, grid, legend; written to
    ``path`` at 120 dpi in the format its extension names (PNG without one) and closed. The
    image is rendered in memory and written by
    :func:`memopt.cli._output.write_file`: matplotlib's own writer lets some write errors
    pass (a plot "written" to ``/dev/full``)."""
    import io
    import os

    from memopt.cli._output import write_file

    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if title:
        ax.set_title(title, fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    ext = os.path.splitext(os.fspath(path))[1][1:].lower() or "png"
    if ext not in fig.canvas.get_supported_filetypes():
        plt.close(fig)
        raise OptionError(f"--plot {os.fspath(path)}: matplotlib cannot write .{ext} files (use .png, .svg or .pdf)")
    data = io.BytesIO()
    try:
        fig.savefig(data, format=ext, dpi=120)
    finally:
        plt.close(fig)
    write_file(path, data.getvalue(), "--plot")


def plot_lines(path, series: Iterable[tuple[str, Sequence[float], Sequence[float]]], *, xlabel: str,
               ylabel: str, title: str = "", marks: Iterable[tuple[str, Sequence[float], float]] = ()) -> None:
    """Write a line plot to ``path``: one line per ``(label, xs, ys)`` (NaN breaks a line),
    and ``(label, xs, y)`` marks (e.g. lost points) as gray crosses at height ``y``."""

    plt = pyplot()
    fig, ax = plt.subplots(figsize=(8, 4.5))
    series = list(series)
    # the default cycle repeats after 10 colours: beyond that, 20 distinct ones
    colours = plt.get_cmap("tab20").colors if len(series) > 10 else [None] * len(series)
    for i, (label, xs, ys) in enumerate(series):
        ax.plot(list(xs), list(ys), ".-", lw=1, ms=4, label=label, color=colours[i % len(colours)])
    for label, xs, y in marks:
        xs = list(xs)
        if xs:
            ax.scatter(xs, [y] * len(xs), marker="x", color="gray", s=24, zorder=3, label=label)
    save_figure(plt, fig, ax, path, xlabel=xlabel, ylabel=ylabel, title=title)
