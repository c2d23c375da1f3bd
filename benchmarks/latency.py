"""Start-up and per-call latency of memopt against the start-up targets (instant start).

Each figure is measured in a fresh subprocess:

* ``memopt --help`` wall time (best of ``--repeat``);
* ``memopt schedule instances/mlp_train.json`` wall time with a **cold** numba cache
  (``NUMBA_CACHE_DIR`` pointed at a fresh temporary directory; on a machine where the
  kernels were never compiled, this is what a first run after ``pip install`` costs) and
  with a **warm** one (the default cache, after a run that filled it);
* compiling every kernel a ``remat`` call (which includes a ``schedule`` call's) may run, with
  a cold cache (:func:`memopt._jit.warm` in ``compiled`` mode), and loading them again;
* the warm library call ``memopt.schedule(g)`` on ``mlp_train`` and on each of the 14
  Checkmate graphs in ``../shared/data/checkmate-graphs`` (graph already loaded with
  ``memopt.load_graph``; best of ``--calls`` calls in one process, after a first call
  that is reported separately as ``first call``, with its compile and solve seconds).

The CLI is invoked as ``python -m memopt`` (its internals are not imported). Output: one
table with the target of each row and pass/fail; ``--json FILE`` also writes the rows.

    python benchmarks/latency.py [--repeat 3] [--calls 5] [--time-limit 10] [--json out.json]

Numbers measured on the 2-core reference machine are quoted in README.md ("First run").
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, ".."))
MLP = os.path.join(ROOT, "instances", "mlp_train.json")
CHECKMATE = os.path.normpath(os.path.join(ROOT, "..", "shared", "data", "checkmate-graphs"))

TARGET_HELP = 0.3
TARGET_COLD_CLI = 5.0
TARGET_WARM_CLI = 1.0
TARGET_CALL = 0.050
TARGET_COMPILE_ALL = 20.0

# runs in a fresh interpreter: compile every kernel of memopt._jit_signatures, then load them
# in a second fresh interpreter from the cache the first one filled
_COMPILE_SCRIPT = r"""
import json, subprocess, sys, time
from memopt import _jit
t, c = time.perf_counter(), time.process_time()
with _jit.mode("compiled"):
    _jit.warm("remat")
wall, cpu = time.perf_counter() - t, time.process_time() - c
load = subprocess.run([sys.executable, "-c", "from memopt import _jit\nwith _jit.mode('compiled'):\n"
                       "    print(_jit.warm('remat'))"], capture_output=True, text=True, check=True).stdout
print(json.dumps({"wall": wall, "cpu": cpu, "load": float(load.strip().splitlines()[-1])}))
"""

# runs in a fresh interpreter: load the graph, call schedule() repeatedly, print JSON
_CALL_SCRIPT = r"""
import json, sys, time
t0 = time.perf_counter()
import memopt
t_import = time.perf_counter() - t0
g = memopt.load_graph(sys.argv[1])
calls, limit = int(sys.argv[2]), float(sys.argv[3])
times, res, first = [], None, None
for _ in range(calls + 1):
    t = time.perf_counter()
    res = memopt.schedule(g, time_limit=limit)
    times.append(time.perf_counter() - t)
    first = first or res
print(json.dumps({"import": t_import, "first": times[0], "best": min(times[1:]) if calls else times[0],
                  "first_compile": first.stats.get("compile_seconds", 0.0), "first_solve": first.seconds,
                  "peak": int(res.peak), "lower_bound": int(res.lower_bound), "status": str(res.status),
                  "ops": int(g.num_ops)}))
"""


def _env(**extra) -> dict:
    env = dict(os.environ)
    env.pop("MEMOPT_JIT", None)
    env.update(extra)
    return env


def _wall(cmd: list[str], env: dict, timeout: float) -> tuple[float, int, str]:
    t = time.perf_counter()
    p = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True, timeout=timeout)
    return time.perf_counter() - t, p.returncode, (p.stderr or "").strip()


def _best_wall(cmd, env, repeat, timeout):
    best, rc, err = None, 0, ""
    for _ in range(max(1, repeat)):
        t, rc, err = _wall(cmd, env, timeout)
        if rc != 0:
            return t, rc, err
        best = t if best is None else min(best, t)
    return best, rc, err


def _row(name: str, seconds: float | None, target: float, note: str = "", ok: bool | None = None) -> dict:
    passed = (seconds is not None and seconds < target) if ok is None else ok
    return {"name": name, "seconds": seconds, "target": target, "pass": bool(passed), "note": note}


def measure(repeat: int = 3, calls: int = 5, time_limit: float = 10.0, graphs: list[str] | None = None,
            timeout: float = 600.0) -> list[dict]:
    py = sys.executable
    rows = []
    # (a) memopt --help
    t, rc, err = _best_wall([py, "-m", "memopt", "--help"], _env(), repeat, timeout)
    rows.append(_row("memopt --help", t, TARGET_HELP, "" if rc == 0 else f"exit {rc}: {err[-200:]}",
                     None if rc == 0 else False))
    # (b) the CLI on mlp_train, cold numba cache then warm
    cli = [py, "-m", "memopt", "schedule", MLP, "--time-limit", str(time_limit)]
    with tempfile.TemporaryDirectory(prefix="memopt-numba-cold-") as cold:
        t, rc, err = _wall(cli, _env(NUMBA_CACHE_DIR=cold), timeout)
        rows.append(_row("CLI schedule mlp_train, cold cache", t, TARGET_COLD_CLI,
                         "" if rc == 0 else f"exit {rc}: {err[-200:]}", None if rc == 0 else False))
        # the same cache directory, now filled by the run above
        t, rc, err = _best_wall(cli, _env(NUMBA_CACHE_DIR=cold), repeat, timeout)
        rows.append(_row("CLI schedule mlp_train, warm cache", t, TARGET_WARM_CLI,
                         "" if rc == 0 else f"exit {rc}: {err[-200:]}", None if rc == 0 else False))
    # (c) compiling every kernel a remat call (a superset of a schedule call) may run, cold cache
    with tempfile.TemporaryDirectory(prefix="memopt-numba-cold-") as cold:
        p = subprocess.run([py, "-c", _COMPILE_SCRIPT], env=_env(NUMBA_CACHE_DIR=cold), cwd=ROOT,
                           capture_output=True, text=True, timeout=timeout)
        if p.returncode == 0:
            r = json.loads(p.stdout.strip().splitlines()[-1])
            rows.append(_row("compile every kernel, cold cache", r["wall"], TARGET_COMPILE_ALL,
                             f"{r['cpu']:.1f} s CPU; loading them again: {r['load']:.3f} s"))
        else:
            rows.append(_row("compile every kernel, cold cache", None, TARGET_COMPILE_ALL,
                             f"exit {p.returncode}: {p.stderr.strip()[-200:]}", False))
    # (d) warm library calls
    if graphs is None:
        graphs = [MLP] + sorted(f for f in glob.glob(os.path.join(CHECKMATE, "*.json"))
                                if not os.path.basename(f).startswith("random_layered"))
    for f in graphs:
        name = os.path.basename(f).replace("_nx.json", "").replace(".json", "")
        try:
            p = subprocess.run([py, "-c", _CALL_SCRIPT, f, str(calls), str(time_limit)], env=_env(), cwd=ROOT,
                               capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            rows.append(_row(f"schedule() {name}", None, TARGET_CALL, "timeout", False))
            continue
        if p.returncode != 0:
            rows.append(_row(f"schedule() {name}", None, TARGET_CALL, f"exit {p.returncode}: {p.stderr.strip()[-200:]}",
                             False))
            continue
        r = json.loads(p.stdout.strip().splitlines()[-1])
        proved = r["status"] in ("optimal", "certified")
        note = (f"{r['ops']} ops, {r['status']}, first call {r['first']:.3f} s "
                f"(compiling {r['first_compile']:.3f} s, solve {r['first_solve']:.3f} s)")
        rows.append(_row(f"schedule() {name}", r["best"], TARGET_CALL, note, r["best"] < TARGET_CALL and proved))
    return rows


def print_table(rows: list[dict], out=sys.stdout) -> None:
    w = max(len(r["name"]) for r in rows)
    print(f"{'measurement':<{w}}  {'seconds':>8}  {'target':>8}  {'':4}  note", file=out)
    for r in rows:
        sec = f"{r['seconds']:.3f}" if r["seconds"] is not None else "-"
        print(f"{r['name']:<{w}}  {sec:>8}  {'< ' + format(r['target'], 'g'):>8}  {'pass' if r['pass'] else 'FAIL':4}  "
              f"{r['note']}", file=out)
    n_ok = sum(r["pass"] for r in rows)
    print(f"{n_ok}/{len(rows)} within target", file=out)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3, help="fresh processes per CLI figure (best is kept)")
    ap.add_argument("--calls", type=int, default=5, help="library calls per graph after the first (best is kept)")
    ap.add_argument("--time-limit", type=float, default=10.0)
    ap.add_argument("--json", metavar="FILE", help="also write the rows as JSON")
    ap.add_argument("graphs", nargs="*", help="graphs for the library rows (default: mlp_train + 14 Checkmate)")
    args = ap.parse_args(argv)
    rows = measure(args.repeat, args.calls, args.time_limit, args.graphs or None)
    print_table(rows)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"rows": rows, "python": sys.version.split()[0], "cpus": os.cpu_count()}, fh, indent=1)
    return 0 if all(r["pass"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
