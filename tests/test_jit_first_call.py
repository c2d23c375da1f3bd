"""First calls: kernels are compiled before a call's clock starts, and ``$MEMOPT_JIT`` is checked.

``memopt.schedule`` / ``memopt.remat`` call :func:`memopt._jit.warm` with their kind before
their deadline exists; the seconds it takes are ``stats["compile_seconds"]`` and are not part
of ``seconds``. The table of kernels and signatures (:mod:`memopt._jit_signatures`) must cover
what a call compiles: after warming, a call compiles nothing. No timing assertions: every
check below holds whatever the machine's speed and whatever the solver reaches in its time.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

import memopt
from memopt import _jit
from memopt._jit_signatures import KINDS, SIGNATURES
from memopt.errors import OptionError

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
MLP = os.path.join(ROOT, "instances", "mlp_train.json")
LAYERED = os.path.join(ROOT, "..", "shared", "data", "checkmate-graphs",
                       "random_layered_n100_w0.27_nlv0.75_ed0.2_scd0.14.json")


def _layered():
    if not os.path.exists(LAYERED):
        pytest.skip(f"shared data absent: {LAYERED}")
    return memopt.load_graph(LAYERED)


def _overloads() -> dict:
    """Every overload (kernel, signature) memopt holds in this process."""
    return {(name, sig) for name, sigs in _jit.recorded_signatures().items() for sig in sigs}


# ---------------------------------------------------------------------------- MEMOPT_JIT

def test_memopt_jit_bogus_cli_exits_2_with_one_line():
    env = {**os.environ, "MEMOPT_JIT": "bogus", "PYTHONPATH": os.path.join(ROOT, "src")}
    proc = subprocess.run([sys.executable, "-m", "memopt", "schedule", MLP], capture_output=True, text=True,
                          env=env, cwd=ROOT)
    assert proc.returncode == 2
    assert proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1
    assert "MEMOPT_JIT" in lines[0] and "'bogus'" in lines[0] and "auto, pure, compiled" in lines[0]
    assert "Traceback" not in proc.stderr


def test_memopt_jit_bogus_schedule_raises_option_error(monkeypatch):
    g = memopt.load_graph(MLP)
    monkeypatch.setenv("MEMOPT_JIT", "bogus")
    with pytest.raises(OptionError, match="MEMOPT_JIT='bogus'"):
        memopt.schedule(g, time_limit=1)
    with pytest.raises(OptionError, match="MEMOPT_JIT='bogus'"):
        memopt.remat(g, memory_ratio=0.9, time_limit=1)


@pytest.mark.parametrize("value, expected", [("", "auto"), ("  ", "auto"), ("pure", "pure"),
                                             (" Compiled ", "compiled"), ("AUTO", "auto")])
def test_memopt_jit_accepted_values(monkeypatch, value, expected):
    monkeypatch.setenv("MEMOPT_JIT", value)
    assert _jit.env_mode() == expected
    assert _jit.current_mode() == (expected, None)


def test_memopt_jit_unset_is_auto(monkeypatch):
    monkeypatch.delenv("MEMOPT_JIT", raising=False)
    assert _jit.env_mode() == "auto"


# ---------------------------------------------------------------------------- the table

def test_kernel_table_names_kernels_with_signatures():
    assert set(KINDS) == {"schedule", "remat"}
    assert set(_jit.kernels_of("schedule")) < set(_jit.kernels_of("remat"))  # a remat call schedules first
    assert set(SIGNATURES) == set(_jit.kernels_of("remat"))
    for kind in KINDS:
        for name in _jit.kernels_of(kind):
            d = _jit._dispatcher(name)
            assert d.py_func.__module__ + "." + d.__name__ == name
            assert SIGNATURES[name]
            for text in SIGNATURES[name]:
                assert isinstance(_jit._signature(text), tuple)


def test_every_table_signature_compiles():
    # warm skips only stale entries (another arity, an unknown type): check the table has none
    with _jit.mode("compiled"):
        _jit.warm("remat")
    for name in _jit.kernels_of("remat"):
        d = _jit._dispatcher(name)
        assert [t for t in SIGNATURES[name] if _jit._signature(t) not in d.overloads] == [], name


def test_unknown_kind_is_an_internal_error():
    from memopt.errors import InternalError

    with pytest.raises(InternalError):
        _jit.kernels_of("bogus")


def test_warm_in_pure_mode_compiles_nothing():
    before = _overloads()
    with _jit.mode("pure"):
        assert _jit.warm("remat", 10 ** 6) == 0.0
    assert _overloads() == before


def test_warm_on_a_tiny_instance_leaves_uncompiled_kernels_pure(monkeypatch):
    # size 1 is below every kernel's threshold: auto runs them in pure Python, so warming
    # compiles none that is not compiled yet (unless its pure calls already cost more than
    # compiling would, the ski-rental escalation)
    monkeypatch.delenv("MEMOPT_JIT", raising=False)
    names = [n for n in _jit.kernels_of("remat") if not _jit.is_compiled(_jit._dispatcher(n))
             and _jit.pure_seconds(_jit._dispatcher(n)) <= _jit.ESCALATE_SECONDS]
    assert _jit.warm("remat", 1) >= 0.0
    assert [n for n in names if _jit.is_compiled(_jit._dispatcher(n))] == []


# ---------------------------------------------------------------------------- compile time apart

def test_schedule_reports_compile_seconds_apart_from_seconds():
    g = memopt.load_graph(MLP)
    with _jit.mode("compiled"):
        t = time.perf_counter()
        r = memopt.schedule(g, time_limit=2)
        wall = time.perf_counter() - t
    c = r.stats["compile_seconds"]
    assert isinstance(c, float) and c >= 0.0
    # the solve's clock starts after compiling: both intervals lie inside the call
    assert r.seconds >= 0.0
    assert r.seconds + c <= wall + 1e-3
    assert r.to_dict()["stats"]["compile_seconds"] == c


def test_remat_reports_compile_seconds_apart_from_seconds():
    g = memopt.load_graph(MLP)
    with _jit.mode("compiled"):
        t = time.perf_counter()
        r = memopt.remat(g, memory_ratio=0.9, time_limit=2, jobs=1)
        p = memopt.remat(g, pareto=True, time_limit=1, jobs=1)
        wall = time.perf_counter() - t
    for res in (r, p):
        c = res.stats["compile_seconds"]
        assert isinstance(c, float) and c >= 0.0
        assert res.seconds >= 0.0
    assert r.seconds + r.stats["compile_seconds"] + p.seconds + p.stats["compile_seconds"] <= wall + 1e-3
    assert r.to_dict()["stats"]["compile_seconds"] == r.stats["compile_seconds"]
    assert p.to_dict()["stats"]["compile_seconds"] == p.stats["compile_seconds"]


def test_cli_table_shows_compile_seconds_after_seconds():
    from dataclasses import replace

    from memopt.cli._output import fmt_seconds

    r = memopt.schedule(memopt.load_graph(MLP), time_limit=1)
    assert (fmt_seconds(replace(r, seconds=1.5, stats={"compile_seconds": 2.25}))
            == "1.500 (+ 2.250 s compiling or loading kernels)")
    assert fmt_seconds(replace(r, seconds=1.5, stats={"compile_seconds": 0.0})) == "1.500"
    assert fmt_seconds(replace(r, seconds=1.5, stats={})) == "1.500"


def test_cli_json_shows_compile_seconds():
    env = {**os.environ, "PYTHONPATH": os.path.join(ROOT, "src")}
    env.pop("MEMOPT_JIT", None)
    proc = subprocess.run([sys.executable, "-m", "memopt", "schedule", MLP, "--json", "--time-limit", "1"],
                          capture_output=True, text=True, env=env, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    import json

    doc = json.loads(proc.stdout)
    assert doc["stats"]["compile_seconds"] >= 0.0


# ---------------------------------------------------------------------------- nothing compiles in a solve

def test_schedule_random_layered_n100_compiles_nothing_after_warm():
    g = _layered()
    with _jit.mode("compiled"):
        _jit.warm("schedule")
        before = _overloads()
        memopt.schedule(g, time_limit=2)
        memopt.schedule(g, method="exact", time_limit=1)
    assert _overloads() == before


def test_remat_random_layered_n100_compiles_nothing_after_warm():
    g = _layered()
    with _jit.mode("compiled"):
        _jit.warm("remat")
        before = _overloads()
        memopt.remat(g, memory_ratio=0.9, time_limit=2, jobs=1)
    assert _overloads() == before


def test_warm_compiles_a_mid_size_instance_even_with_a_cold_cache(tmp_path):
    """Between the pure-Python threshold and COLD_FACTOR times it, ``choose`` on a cold cache
    runs pure Python; a call must not (a later call, with the kernel on disk, runs compiled), so
    ``warm`` compiles such sizes whatever the cache holds. Asked in a fresh process with an empty
    NUMBA_CACHE_DIR, nothing compiled (``_would_compile`` only decides)."""
    code = (
        "from memopt import _jit\n"
        "from memopt.core._kernels import kahn_order\n"
        "assert not _jit.on_disk(kahn_order) and not _jit.is_compiled(kahn_order)\n"
        "hit = _jit._LIMIT.get(id(kahn_order))\n"
        "limit = hit[1] if hit is not None and hit[0] is kahn_order else _jit.PURE_MAX\n"
        "assert _jit.COLD_FACTOR > 1\n"
        "print(_jit._would_compile(kahn_order, limit + 1, 'auto'), _jit._would_compile(kahn_order, limit, 'auto'))\n"
    )
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path), "MEMOPT_JIT": "auto"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["True", "False"]


# ---------------------------------------------------------------------------- stale table entries

def test_warm_skips_stale_entries_and_raises_real_compile_errors(monkeypatch):
    """A name that is no longer a kernel, or a signature of another arity, is a stale table
    (skipped: the kernel compiles on first use); a signature that does not type-check is a
    compile error and surfaces."""
    from memopt import _jit_signatures as table
    from memopt.core._kernels import kahn_order

    good = table.SIGNATURES["memopt.core._kernels.kahn_order"]
    monkeypatch.setitem(table.SIGNATURES, "memopt.core._kernels.gone", good)
    monkeypatch.setitem(table.SIGNATURES, "memopt.no_such_module.kernel", good)
    monkeypatch.setitem(table.SIGNATURES, "memopt.core._kernels.kahn_order", good + ("(int64,)", "(Bogus,)"))
    monkeypatch.setitem(table.PHASES, "schedule:stale", ("memopt.core._kernels.gone", "memopt.no_such_module.kernel",
                                                         "memopt.core._kernels.kahn_order"))
    with _jit.mode("compiled"):
        assert _jit.warm("schedule:stale") >= 0.0
    assert {_jit._signature(t) for t in good} <= set(kahn_order.overloads)
    # float arrays where the kernel indexes with them: numba cannot type it, and warm says so
    monkeypatch.setitem(table.SIGNATURES, "memopt.core._kernels.kahn_order",
                        ("(float64, float64, float64)",))
    from numba.core.errors import TypingError

    with _jit.mode("compiled"), pytest.raises(TypingError):
        _jit.warm("schedule:stale")


def test_unknown_phase_runs_no_kernel():
    assert _jit.kernels_of("schedule:no-such-phase") == ()
    assert "memopt.schedule.local_search._ils" in _jit.kernels_of("schedule:local-search")
    assert "memopt.schedule.ideal_search._search" in _jit.kernels_of("schedule:ideal-search")
    assert set(_jit.kernels_of("schedule:greedy")) <= set(_jit.kernels_of("schedule"))


# ---------------------------------------------------------------------------- phase by phase

def test_schedule_warms_only_the_phases_it_reaches(monkeypatch):
    """A call certified by its first bounds never warms the searches; every phase it runs is
    warmed before it runs (the phase names are those of the table)."""
    asked = []
    real = _jit.warm

    def recording(kind, size=None, **kw):
        asked.append(kind)
        return real(kind, size, **kw)

    monkeypatch.setattr(_jit, "warm", recording)
    resnet = os.path.join(ROOT, "..", "shared", "data", "checkmate-graphs", "ResNet50_256_224_224_3_train_nx.json")
    if not os.path.exists(resnet):
        pytest.skip(f"shared data absent: {resnet}")
    r = memopt.schedule(memopt.load_graph(resnet), time_limit=30)
    ran = set(r.stats.get("methods", {})) | set(r.stats.get("not_applicable", {}))
    assert asked[0] == "schedule:base" and "schedule:trap" in asked
    assert set(asked) - {"schedule:base", "schedule:trap", "schedule:pair"} == {"schedule:" + m for m in ran}
    # the training graph is certified by its first bounds: the searches are neither run nor compiled
    assert r.status == "certified"
    assert "schedule:local-search" not in asked and "schedule:ideal-search" not in asked


def test_phase_gives_compile_seconds_back_to_the_deadline(tmp_path):
    """In a fresh process with an empty cache: the ski-rental switch inside a phase compiles,
    and the session moves its deadline by exactly what the phase spent compiling."""
    code = (
        "import memopt\n"
        "from memopt import _jit\n"
        "from memopt.core._kernels import kahn_order\n"
        "from memopt.core.problem import SchedulingProblem\n"
        "from memopt.schedule.portfolio import Session\n"
        f"g = memopt.load_graph({MLP!r})\n"
        "s = Session(SchedulingProblem(g, None), 10.0)\n"
        "e0 = s.end\n"
        "assert not _jit.is_compiled(kahn_order)\n"
        "with s.phase('test'):\n"
        "    _jit._escalate(kahn_order)\n"
        "assert _jit.is_compiled(kahn_order) and _jit.escalation_seconds() > 0\n"
        "assert s.compile_seconds >= _jit.escalation_seconds()\n"
        "assert abs((s.end - e0) - s.compile_seconds) < 1e-9\n"
        "print('ok')\n"
    )
    assert _fresh_process(code, tmp_path).split() == ["ok"]


def _fresh_process(code: str, cache_dir, *args) -> str:
    """What ``python -c code args`` prints in a fresh process with numba's disk cache in
    ``cache_dir`` and the default jit mode (it must exit 0)."""
    env = {**os.environ, "NUMBA_CACHE_DIR": str(cache_dir), "PYTHONPATH": os.path.join(ROOT, "src")}
    env.pop("MEMOPT_JIT", None)
    out = subprocess.run([sys.executable, "-c", code, *args], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    return out.stdout


# ---------------------------------------------------------------------------- two processes

def test_two_process_compile_fills_the_cache_with_the_same_kernels(tmp_path):
    """Kernels compiled by ``warm``'s child process (a few small ones, forced in parallel) are
    in the disk cache, load in a fresh process, and compute what their pure twins compute."""
    names = ["memopt.core._kernels.kahn_order", "memopt.core._kernels.segment_max",
             "memopt.core._kernels.csr_from_pairs", "memopt.core._kernels.dedupe_csr_rows"]
    compile_code = (
        "from memopt import _jit\n"
        "from memopt._jit_signatures import SIGNATURES\n"
        "_jit.PARALLEL_MIN_SECONDS = 0.0\n"
        f"names = {names!r}\n"
        "todo = [(n, _jit._table_dispatcher(n), [_jit._signature(t) for t in SIGNATURES[n]]) for n in names]\n"
        "mine, theirs = _jit._split(todo)\n"
        "assert mine and theirs\n"
        "_jit.compile_kernels(todo, processes=2)\n"
        "print(' '.join(n for n, _d, _s in theirs))\n"
    )
    check_code = (
        "import numpy as np\n"
        "from memopt import _jit\n"
        "from memopt._jit_signatures import SIGNATURES\n"
        "import sys\n"
        "for n in sys.argv[1:]:\n"
        "    d = _jit._table_dispatcher(n)\n"
        "    assert _jit.on_disk(d), n\n"
        "    for t in SIGNATURES[n]:\n"
        "        d.compile(_jit._signature(t))\n"
        "    assert all(o.metadata is None for o in d.overloads.values()), n  # loaded, not compiled\n"
        "from memopt.core._kernels import kahn_order\n"
        "ptr = np.array([0, 2, 3, 3, 3], np.int64); idx = np.array([1, 2, 3], np.int64)\n"
        "indeg = np.array([0, 1, 1, 1], np.int64)\n"
        "a = kahn_order(ptr, idx, indeg.copy()); b = _jit.pure(kahn_order)(ptr, idx, indeg.copy())\n"
        "assert list(a) == list(b) == [0, 1, 2, 3], (a, b)\n"
        "print('ok')\n"
    )
    theirs = _fresh_process(compile_code, tmp_path).split()
    assert theirs and set(theirs) < set(names)
    assert _fresh_process(check_code, tmp_path, *names).split() == ["ok"]


def test_memopt_kernels_lock_their_cache():
    from memopt.core._kernels import kahn_order
    from memopt.schedule.local_search import _ils

    for d in (kahn_order, _ils):
        assert d._cache._cache_file.memopt_locked


def test_no_kernel_compiles_twice_for_read_only_and_writable_arrays():
    """Each such pair is a second compile of the whole kernel and its callees (seconds each):
    call sites pass one kind (``_jit.readonly`` or a writable copy)."""
    import numba

    def loosen(t):
        return t.copy(readonly=False) if isinstance(t, numba.core.types.Array) else t

    for name, texts in SIGNATURES.items():
        sigs = [_jit._signature(t) for t in texts]
        loose = [tuple(loosen(t) for t in s) for s in sigs]
        assert len(set(loose)) == len(loose), name


def test_readonly_is_a_view_that_leaves_the_array_writable():
    import numpy as np

    a = np.arange(5, dtype=np.int64)
    v = _jit.readonly(a)
    assert not v.flags.writeable and a.flags.writeable and np.shares_memory(a, v)
    assert _jit.readonly(v) is v
