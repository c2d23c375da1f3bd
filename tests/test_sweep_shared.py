"""The shared sweep machinery (memopt.sweep): executor specs, local worker processes that survive
a dying worker, foreign executors, per-task timeouts, progress, and Dask (LocalCluster), for
DTR budget sweeps and expert-cache sweeps alike."""

from __future__ import annotations

import concurrent.futures as cf
import importlib.util
import io
import json
import os
import signal
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path

import pytest

from memopt.cli import main
from memopt.errors import OptionError
from memopt.sweep import ExecutorSpec, InlineExecutor, is_worker_death, parse_executor_spec, run_tasks

REPO = Path(__file__).resolve().parents[1]
_SYNTH = importlib.util.spec_from_file_location("_dtr_synthetic_shared", REPO / "tests" / "dtr" / "_synthetic.py")
synthetic = importlib.util.module_from_spec(_SYNTH)
_SYNTH.loader.exec_module(synthetic)


# Task functions live at module level: spawned workers import them by name.
def square(x: int) -> int:
    return x * x


def square_or_die(x: int) -> int:
    """Kills its own worker process at x == 3 (exit code 17) and x == 4 (SIGKILL)."""
    if x == 3:
        os._exit(17)
    if x == 4:
        os.kill(os.getpid(), signal.SIGKILL)
    return x * x


def die_at_three(x: int) -> int:
    if x == 3:
        os._exit(17)
    return x * x


def refuse_negative(x: int) -> int:
    if x < 0:
        raise OptionError(f"negative point {x}")
    return x


def spin_at_one(x: int) -> int:
    """Burns CPU forever at x == 1 (stopped by the per-task CPU limit)."""
    while x == 1:
        pass
    return x


CALLS: list[int] = []


def record(x: int) -> int:
    CALLS.append(x)
    return x


def _tasks(n: int):
    return [((i,), (i,)) for i in range(n)]


def _collect(stream) -> dict:
    return {key[0]: (kind, payload) for key, kind, payload in stream}


# ------------------------------------------------------------------ executor specs


@pytest.mark.parametrize("spec, kind, address", [
    ("local", "local", None), ("threads", "threads", None), (" local ", "local", None),
    ("dask://scheduler:8786", "dask", "tcp://scheduler:8786"),
    ("dask://10.0.0.7:1", "dask", "tcp://10.0.0.7:1"),
    ("dask://[::1]:65535", "dask", "tcp://[::1]:65535"),
])
def test_executor_specs(spec, kind, address):
    parsed = parse_executor_spec(spec)
    assert parsed == ExecutorSpec(kind, address)
    if kind == "dask":
        assert str(parsed) == spec.strip()


@pytest.mark.parametrize("spec, needle", [
    ("", "unknown executor"), ("processes", "unknown executor"), ("ftp://host:21", "unknown scheme 'ftp'"),
    ("tcp://host:8786", "unknown scheme 'tcp'"), ("dask://host", "port is required"),
    ("dask://:8786", "host is missing"), ("dask://host:0", "bad port"), ("dask://host:65536", "bad port"),
    ("dask://host:port", "bad port"), ("dask://host:80/x", "bad port"), ("dask://ho st:80", "bad host"),
])
def test_bad_executor_specs_are_one_line_option_errors(spec, needle):
    with pytest.raises(OptionError) as err:
        parse_executor_spec(spec)
    assert needle in str(err.value) and "\n" not in str(err.value)


def test_bad_executor_objects_and_timeouts():
    with pytest.raises(OptionError, match="executor must be"):
        list(run_tasks(square, _tasks(2), executor=42))
    with pytest.raises(OptionError, match="timeout"):
        list(run_tasks(square, _tasks(2), executor="threads", timeout=5))


# ------------------------------------------------------------------ local workers


def test_every_executor_gives_the_same_outcomes():
    want = {i: ("done", i * i) for i in range(6)}
    assert _collect(run_tasks(square, _tasks(6))) == want  # in-process
    assert _collect(run_tasks(square, _tasks(6), executor="threads", jobs=3)) == want
    assert _collect(run_tasks(square, _tasks(6), executor="local", jobs=2)) == want
    with cf.ThreadPoolExecutor(2) as pool:
        assert _collect(run_tasks(square, _tasks(6), executor=pool)) == want
        assert pool.submit(square, 3).result() == 9  # a caller's executor is left open
    assert _collect(run_tasks(square, _tasks(3), executor=InlineExecutor())) == {i: ("done", i * i) for i in range(3)}


def test_a_dying_worker_loses_only_its_own_point():
    got = _collect(run_tasks(square_or_die, _tasks(8), jobs=2))
    assert got.pop(3) == ("lost", "worker process died: exit code 17")
    kind, reason = got.pop(4)
    assert kind == "lost" and "SIGKILL" in reason
    # every other point finished, on the workers started in place of the dead ones
    assert got == {i: ("done", i * i) for i in (0, 1, 2, 5, 6, 7)}


def test_an_error_raised_by_a_task_is_the_sweeps_error():
    tasks = [((i,), (x,)) for i, x in enumerate([1, 2, -3, 4])]
    for kw in ({}, {"jobs": 2}, {"executor": "threads", "jobs": 2}):
        with pytest.raises(OptionError, match="negative point -3"):
            list(run_tasks(refuse_negative, tasks, **kw))


def test_a_broken_process_pool_keeps_finished_points():
    import multiprocessing

    with cf.ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        got = _collect(run_tasks(die_at_three, _tasks(6), executor=pool))
    assert set(got) == set(range(6))
    assert got[3][0] == "lost" and "BrokenProcessPool" in got[3][1]
    for i, (kind, payload) in got.items():
        assert (kind, payload) == ("done", i * i) or (kind == "lost" and "BrokenProcessPool" in payload)
    assert is_worker_death(cf.BrokenExecutor()) and not is_worker_death(ValueError())


def _error_raised_inside_dask_cfexecutor() -> TypeError:
    # what Dask's ClientExecutor raises (from its own code) when the worker holding a finished
    # result dies before the result is fetched: TypeError: cannot unpack non-iterable int object
    ns: dict = {}
    exec(compile("def cascade(result):\n    typ, exc, tb = result\n",
                 "/site-packages/distributed/cfexecutor.py", "exec"), ns)
    try:
        ns["cascade"](1)
    except TypeError as exc:
        return exc
    raise AssertionError("unreachable")


class LosesResults(cf.Executor):
    """Runs tasks inline, but the first ``fail`` submissions of point 2 fail as Dask's executor
    does when a result is lost with its worker."""

    def __init__(self, fail: int):
        self.fail, self.submitted = fail, []

    def submit(self, fn, /, *args, **kwargs):
        key = args[1]
        self.submitted.append(key)
        if key == (2,) and self.submitted.count(key) <= self.fail:
            fut = cf.Future()
            fut.set_exception(_error_raised_inside_dask_cfexecutor())
            return fut
        return InlineExecutor().submit(fn, *args, **kwargs)


def test_a_result_lost_inside_the_executor_is_computed_again():
    from memopt.sweep import MAX_RESUBMITS

    pool = LosesResults(fail=1)
    assert _collect(run_tasks(square, _tasks(4), executor=pool)) == {i: ("done", i * i) for i in range(4)}
    assert pool.submitted.count((2,)) == 2
    pool = LosesResults(fail=99)
    got = _collect(run_tasks(square, _tasks(4), executor=pool))
    assert got.pop(2) == ("lost", "TypeError: cannot unpack non-iterable int object")
    assert got == {i: ("done", i * i) for i in (0, 1, 3)} and pool.submitted.count((2,)) == 1 + MAX_RESUBMITS
    # a task's own TypeError is the sweep's error, not a lost point
    with pytest.raises(TypeError):
        list(run_tasks(square, [((0,), ("x", "y"))], executor=LosesResults(fail=0)))


def test_a_task_over_its_cpu_limit_times_out_and_the_rest_finish():
    got = _collect(run_tasks(spin_at_one, _tasks(4), jobs=2, timeout=1))
    assert got == {0: ("done", 0), 1: ("timeout", 1), 2: ("done", 2), 3: ("done", 3)}


def test_progress_is_drawn_on_a_terminal_only(monkeypatch):
    class Tty(io.StringIO):
        def isatty(self):
            return True

    tty = Tty()
    monkeypatch.setattr("sys.stderr", tty)
    list(run_tasks(square, _tasks(3), progress=True, desc="demo", describe=lambda k, kind, p: f"x={p}"))
    assert "demo [" in tty.getvalue() and "3/3" in tty.getvalue() and "x=4" in tty.getvalue()
    pipe = io.StringIO()
    monkeypatch.setattr("sys.stderr", pipe)
    list(run_tasks(square, _tasks(3), progress=True))
    assert pipe.getvalue() == ""


# ------------------------------------------------------------------ DTR sweeps on the machinery


@pytest.fixture
def dtr_log(tmp_path) -> Path:
    path = tmp_path / "synthetic.log"
    path.write_text("\n".join(synthetic.LINES) + "\n")
    return path


def _strip(doc: dict) -> dict:
    doc = dict(doc)
    doc.pop("seconds")
    doc["points"] = [{k: v for k, v in p.items() if k != "seconds"} for p in doc["points"]]
    return doc


def __getattr__(name: str):
    # DyingHeuristic is built on first use (here, and in a worker unpickling it), so that
    # importing this module to run a plain task does not import the DTR kernels (numba).
    if name != "DyingHeuristic":
        raise AttributeError(name)
    from memopt.dtr.heuristics import Heuristic

    class DyingHeuristic(Heuristic):
        """A user heuristic that kills its worker the first time it is asked to evict."""

        name = "dying"

        def score(self, view):
            os._exit(23)

    DyingHeuristic.__module__, DyingHeuristic.__qualname__ = __name__, "DyingHeuristic"
    globals()["DyingHeuristic"] = DyingHeuristic
    return DyingHeuristic


def test_dtr_sweep_keeps_finished_budgets_when_a_worker_dies(dtr_log):
    # at ratio 0.9 the replay must evict (the heuristic kills the worker); 1.0 needs no eviction
    import test_sweep_shared as me  # the module-level __getattr__ builds the class

    result = run_sweep(dtr_log, "0.9:1.0:0.1", me.DyingHeuristic(), jobs=2)
    lost, ok = result.points
    assert (lost.status, lost.reason, lost.budget) == ("lost", "worker process died: exit code 23", 306)
    assert ok.status == "pass" and ok.budget == synthetic.BASELINE_PEAK
    assert result.lost == [lost] and result.failing == [] and result.holes == ()
    doc = result.to_dict()
    assert doc["lost"] == [{"ratio": 0.9, "reason": "worker process died: exit code 23"}]
    assert doc["points"][0]["reason"] == "worker process died: exit code 23"
    from memopt.dtr.sweep import SweepResult, format_sweep

    back = SweepResult.from_dict(json.loads(json.dumps(doc)))
    assert back.to_dict() == doc and back.lost[0].reason == lost.reason
    assert "lost       1 budget(s) whose worker died" in format_sweep(result)


def run_sweep(*args, **kwargs):
    from memopt.dtr.sweep import run_sweep as run

    return run(*args, **kwargs)


def test_dtr_sweep_json_has_no_lost_key_when_complete(dtr_log):
    doc = run_sweep(dtr_log, "0.5:1.0:0.1", jobs=1).to_dict()
    assert "lost" not in doc and all("reason" not in p for p in doc["points"])


def test_dtr_sweep_on_a_broken_executor_reports_lost_budgets(dtr_log):
    class BreaksAtPoint9(InlineExecutor):
        def submit(self, fn, /, *args, **kwargs):
            if "0.9" in repr(args):
                fut = cf.Future()
                fut.set_exception(BrokenProcessPool("a worker was terminated abruptly"))
                return fut
            return super().submit(fn, *args, **kwargs)

    class Foreign(cf.Executor):  # not InlineExecutor: goes through the futures path
        def __init__(self):
            self.inner = BreaksAtPoint9()

        def submit(self, fn, /, *args, **kwargs):
            return self.inner.submit(fn, *args, **kwargs)

    result = run_sweep(dtr_log, "0.8:1.0:0.1", executor=Foreign())
    assert [p.status for p in result.points][1] == "lost"
    assert result.points[1].reason.startswith("BrokenProcessPool: a worker was terminated abruptly")
    plain = run_sweep(dtr_log, "0.8:1.0:0.1", jobs=1)
    strip = lambda p: {k: v for k, v in p.to_dict().items() if k != "seconds"}
    assert [strip(p) for i, p in enumerate(result.points) if i != 1] == \
        [strip(p) for i, p in enumerate(plain.points) if i != 1]


def test_dtr_cli_executor_option(dtr_log, capsys):
    assert main(["dtr", "sweep", str(dtr_log), "--grid", "0.5:1.0:0.1", "--jobs", "1", "--json"]) == 0
    inline = json.loads(capsys.readouterr().out)
    code = main(["dtr", "sweep", str(dtr_log), "--grid", "0.5:1.0:0.1", "--jobs", "2", "--executor", "threads",
                 "--json"])
    out, err = capsys.readouterr()
    assert code == 0 and err == ""
    assert _strip(json.loads(out)) == _strip(inline)
    for spec, needle in (("dask://h:99999", "bad port"), ("spark://h:1", "unknown scheme")):
        assert main(["dtr", "sweep", str(dtr_log), "--grid", "0.5:1:0.5", "--executor", spec]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and needle in err
    assert main(["dtr", "sweep", str(dtr_log), "--grid", "0.5:1:0.5", "--executor", "threads",
                 "--timeout", "5"]) == 2
    assert "--timeout needs --executor local" in capsys.readouterr().err


# ------------------------------------------------------------------ Dask


@pytest.fixture(scope="module")
def dask_cluster():
    distributed = pytest.importorskip("distributed")
    with distributed.LocalCluster(n_workers=1, threads_per_worker=2, processes=False, protocol="tcp",
                                  host="127.0.0.1", dashboard_address=":0") as cluster, \
            distributed.Client(cluster, set_as_default=False) as client:
        yield cluster, client


def test_dtr_and_cache_sweeps_on_a_dask_cluster(dask_cluster, dtr_log, tmp_path, capsys):
    cluster, client = dask_cluster
    spec = "dask://" + cluster.scheduler_address.split("://", 1)[1]
    inline = run_sweep(dtr_log, "0.5:1.0:0.1", jobs=1, repeats=2)
    on_client = run_sweep(dtr_log, "0.5:1.0:0.1", executor=client, repeats=2)
    on_spec = run_sweep(dtr_log, "0.5:1.0:0.1", executor=spec)
    on_cf = run_sweep(dtr_log, "0.5:1.0:0.1", executor=client.get_executor())
    # identical calls are not merged by Dask's pure=True executor: every repeat runs
    CALLS.clear()
    got = _collect(run_tasks(record, [((i,), (5,)) for i in range(3)], executor=client.get_executor()))
    assert got == {i: ("done", 5) for i in range(3)} and CALLS == [5, 5, 5]
    assert _strip(on_client.to_dict()) == _strip(inline.to_dict())
    for other in (on_spec, on_cf):
        assert [_strip(other.to_dict())["points"]] == [_strip(inline.to_dict())["points"]]

    # the documented CLI option
    assert main(["dtr", "sweep", str(dtr_log), "--grid", "0.5:1.0:0.1", "--jobs", "1", "--json"]) == 0
    want = json.loads(capsys.readouterr().out)
    assert main(["dtr", "sweep", str(dtr_log), "--grid", "0.5:1.0:0.1", "--executor", spec, "--json"]) == 0
    out, err = capsys.readouterr()
    assert err == "" and _strip(json.loads(out)) == _strip(want)

    from memopt.cache import dump_requests, make_trace

    trace = tmp_path / "t.jsonl"
    dump_requests(make_trace([0, 1, 2, 0, 1, 3, 0], [1, 1, 1, 1]), trace)
    argv = ["cache", "sweep", str(trace), "--policies", "lru,belady", "--capacities", "1:4:1", "--json"]
    assert main(argv) == 0
    local = json.loads(capsys.readouterr().out)
    assert main(argv + ["--executor", spec]) == 0
    remote = json.loads(capsys.readouterr().out)
    local.pop("seconds"), remote.pop("seconds")
    assert remote == local and remote["lost"] == []


def test_a_dask_worker_dying_mid_sweep_keeps_finished_points():
    dask = pytest.importorskip("dask")
    distributed = pytest.importorskip("distributed")
    # Dask retries the tasks of a dead worker and fails a task (KilledWorker) once it was on
    # allowed-failures + 1 dying workers; 0 keeps the test short (a task that merely shared the
    # worker with the culprit may then be lost too, which is Dask's policy, not memopt's)
    with dask.config.set({"distributed.scheduler.allowed-failures": 0,
                          "distributed.scheduler.worker-saturation": 1.0}), \
            distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=True,
                                     dashboard_address=":0", silence_logs=50) as cluster, \
            distributed.Client(cluster, set_as_default=False) as client:
        got = _collect(run_tasks(die_at_three, _tasks(6), executor=client))
    assert set(got) == set(range(6))
    kind, reason = got.pop(3)
    assert kind == "lost" and reason.startswith("KilledWorker: Attempted to run task")
    for i, (kind, payload) in got.items():
        assert (kind, payload) == ("done", i * i) or (kind == "lost" and payload.startswith("KilledWorker"))
    assert sum(kind == "done" for kind, _ in got.values()) >= 3


def test_unreachable_dask_scheduler_is_a_one_line_error(dtr_log, capsys, monkeypatch):
    pytest.importorskip("distributed")
    import socket

    import memopt.sweep as sweep

    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    monkeypatch.setattr(sweep, "DASK_CONNECT_TIMEOUT", "1s")
    assert main(["dtr", "sweep", str(dtr_log), "--grid", "0.5:1:0.5", "--executor", f"dask://127.0.0.1:{port}"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"dask://127.0.0.1:{port}: cannot reach the Dask scheduler" in err
