"""Regenerate ``src/memopt/_jit_signatures.py``: the numba signatures each kind of call compiles.

Each kind (``schedule``, ``remat``) runs its representative calls in a fresh interpreter with
``MEMOPT_JIT=compiled`` (every kernel compiled, whatever the size), twice (the second pass runs
the phases a first pass may have cut short while compiling), and records the overloads every
kernel of memopt then holds, and which kernels each phase of a scheduling call chose
(:func:`memopt._jit.phase`). :func:`memopt._jit.warm` compiles exactly these before a call's
(or a phase's) clock starts; ``tests/test_jit_first_call.py`` checks that a call compiles
nothing else. Then every kernel is compiled once more, in table order, in a fresh process with an
empty ``NUMBA_CACHE_DIR``: the CPU seconds of each are the estimates by which ``warm`` shares
the kernels between two processes (``SECONDS``), and are printed as a table.

    python benchmarks/jit_table.py            # rewrites src/memopt/_jit_signatures.py
    python benchmarks/jit_table.py --times    # only measures: per kernel, then every kernel
                                              # at once (one process, two processes, cached)

Run it after changing a kernel's arguments or adding a kernel. Timings vary with the machine's
load: the load average is printed with them.
"""

from __future__ import annotations

import json
import os
import pprint
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, ".."))
OUT = os.path.join(ROOT, "src", "memopt", "_jit_signatures.py")
DATA = os.path.normpath(os.path.join(ROOT, "..", "shared", "data", "checkmate-graphs"))
RESNET = os.path.join(DATA, "ResNet50_256_224_224_3_train_nx.json")
LAYERED = os.path.join(DATA, "random_layered_n100_w0.27_nlv0.75_ed0.2_scd0.14.json")
MLP = os.path.join(ROOT, "instances", "mlp_train.json")

_WORKLOADS = {
    "schedule": r"""
import memopt
from memopt.schedule.api import compute_bounds
for _ in range(2):
    for path in (MLP, LAYERED, RESNET):
        g = memopt.load_graph(path)
        memopt.schedule(g, time_limit=5)
        for m in ("exact", "greedy", "local-search", "ideal-search"):
            memopt.schedule(g, method=m, time_limit=3)
        with _jit.phase("schedule:bounds"):
            compute_bounds(g, time_limit=3)
    memopt.schedule(memopt.load_instance(MLP), time_limit=3)
""",
    "remat": r"""
import memopt
for _ in range(2):
    for path in (MLP, LAYERED):
        g = memopt.load_graph(path)
        for ratio in ("0.9", "0.7"):
            memopt.remat(g, memory_ratio=ratio, time_limit=5, jobs=1)
        memopt.remat(g, memory_ratio="0.9", method="heuristic", time_limit=3, jobs=1)
        memopt.remat(g, cost_budget=0, time_limit=3, jobs=1)
        memopt.remat(g, pareto=True, time_limit=3, jobs=1)
""",
}

INCLUDES = {"remat": ("schedule",)}

# warm compiles nothing while recording (an empty table): every overload recorded is one a call
# compiled on first use, not one an older table listed
_PRELUDE = r"""
from memopt import _jit
import memopt._jit_signatures
memopt._jit_signatures.SIGNATURES.clear()
_jit.record_uses(True)
"""

_RECORD = r"""
import json, sys
print()
json.dump({"signatures": _jit.recorded_signatures(),
           "uses": {str(k): v for k, v in _jit.record_uses(False).items()}}, sys.stdout)
"""

# compile every kernel of the table in table order, one process, empty cache: CPU seconds each
_TIME_EACH = r"""
import json, sys, time
from memopt import _jit
from memopt._jit_signatures import SIGNATURES
out = {}
for name in _jit.kernels_of("remat"):
    d = _jit._table_dispatcher(name)
    c, w = time.process_time(), time.perf_counter()
    _jit._compile([(name, d, [_jit._signature(t) for t in SIGNATURES[name]])])
    out[name] = (time.process_time() - c, time.perf_counter() - w)
print()
json.dump(out, sys.stdout)
"""

_WARM_ALL = r"""
import json, sys, time, resource
w = time.perf_counter()
from memopt import _jit
inner = _jit.warm("remat", processes=PROCESSES)
ru = [resource.getrusage(r) for r in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)]
print()
json.dump({"wall": time.perf_counter() - w, "warm": inner, "cpu": ru[0].ru_utime + ru[0].ru_stime,
           "child": ru[1].ru_utime + ru[1].ru_stime}, sys.stdout)
"""


def _run(code: str, what: str, **env_extra) -> dict:
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "src"), **env_extra)
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"jit_table.py: {what} failed:\n{proc.stderr}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def record(kind: str) -> dict:
    prelude = f"MLP, LAYERED, RESNET = {MLP!r}, {LAYERED!r}, {RESNET!r}\n"
    return _run(prelude + _PRELUDE + _WORKLOADS[kind] + _RECORD, f"the {kind} workload", MEMOPT_JIT="compiled")


def _load() -> str:
    try:
        return "load average " + " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "load average unknown"


def time_each() -> dict:
    """``{kernel: (CPU s, wall s)}`` compiling the table's kernels in order from an empty cache."""
    with tempfile.TemporaryDirectory() as cache:
        return _run(_TIME_EACH, "compiling every kernel", NUMBA_CACHE_DIR=cache)


def print_each(times: dict) -> None:
    print(f"per kernel, cold cache, one process, table order ({_load()}):")
    print(f"| kernel | CPU s | wall s |\n|---|---:|---:|")
    for name, (cpu, wall) in times.items():
        print(f"| `{name.replace('memopt.', '')}` | {cpu:.2f} | {wall:.2f} |")
    print(f"| total | {sum(c for c, _ in times.values()):.2f} | {sum(w for _, w in times.values()):.2f} |")


def time_all() -> None:
    """Every kernel of a remat call at once: cold in one process, cold in two, then cached."""
    with tempfile.TemporaryDirectory() as cache:
        for label, procs in (("cold, one process", 1), ("cold, two processes", 2), ("cached", 2)):
            r = _run(_WARM_ALL.replace("PROCESSES", str(procs)), "warm", NUMBA_CACHE_DIR=cache)
            print(f"warm('remat') {label}: wall {r['wall']:.1f} s (warm returned {r['warm']:.1f} s), "
                  f"CPU {r['cpu']:.1f} s in the process + {r['child']:.1f} s in its child ({_load()})")
            if procs == 1:
                shutil.rmtree(cache)
                os.makedirs(cache)


def _write(sigs: dict, used: dict, phases: dict, seconds: dict) -> None:
    with open(OUT, "w") as f:
        f.write('"""The numba signatures each kind of call compiles (generated by ``benchmarks/jit_table.py``;\n'
                'regenerate it after changing a kernel\'s arguments). :func:`memopt._jit.warm` reads it."""\n\n')
        f.write("#: kernel (``module.name``) -> the numba signatures (reprs of ``numba.core.types``) it is compiled for\n")
        f.write("SIGNATURES = " + pprint.pformat({k: tuple(sorted(v)) for k, v in sorted(sigs.items())}, width=110)
                + "\n\n")
        f.write("#: call kind -> the kernels it may run besides those of the kinds it includes\n")
        f.write("KINDS = " + pprint.pformat({k: tuple(v) for k, v in used.items()}, width=110) + "\n\n")
        f.write("#: call kind -> the kinds of call it makes (a remat call schedules first)\n")
        f.write(f"INCLUDES = {INCLUDES!r}\n\n")
        f.write("#: phase of a call (``kind:phase``, :func:`memopt._jit.phase`) -> the kernels it chose\n")
        f.write("PHASES = " + pprint.pformat({k: tuple(sorted(v)) for k, v in sorted(phases.items()) if v},
                                             width=110) + "\n\n")
        f.write("#: kernel -> CPU seconds compiling it (after the kernels before it in the table) from an\n"
                "#: empty cache on the machine that generated the table: how warm shares them between processes\n")
        f.write("SECONDS = " + pprint.pformat(seconds, width=110) + "\n")


def main() -> None:
    if sys.argv[1:] == ["--times"]:
        print_each(time_each())
        time_all()
        return
    recorded = {kind: record(kind) for kind in _WORKLOADS}
    kinds = {kind: r["signatures"] for kind, r in recorded.items()}
    sigs: dict = {}
    for table in kinds.values():
        for name, ss in table.items():
            sigs.setdefault(name, set()).update(ss)
    # a remat call schedules first: its own row lists only the kernels a schedule call does not run
    used = {kind: sorted(table) for kind, table in kinds.items()}
    used["remat"] = sorted(set(used["remat"]) - set(used["schedule"]))
    # what each phase of a scheduling call chose (outside every phase: "schedule:base")
    phases: dict = {}
    for r in recorded.values():
        for ph, names in r["uses"].items():
            if ph.startswith("schedule:") or (ph == "None" and r is recorded["schedule"]):
                phases.setdefault("schedule:base" if ph == "None" else ph, set()).update(n for n in names if n in sigs)
    _write(sigs, used, phases, {})
    times = time_each()  # in table order, with the table just written
    _write(sigs, used, phases, {k: round(c, 1) for k, (c, _w) in times.items()})
    print(f"wrote {OUT}: {len(sigs)} kernels, {sum(len(v) for v in sigs.values())} signatures, "
          f"{len(phases)} phases")
    print_each(times)


if __name__ == "__main__":
    main()
