"""Speed of memopt's DTR replay against simrd, on the reference replays.

Usage::

    python benchmarks/dtr_vs_simrd.py [--filter TEXT] [--repeats 3] [--clock wall|cpu]
                                      [--simrd PATH [--simrd-python EXE]]

For every row of ``../shared/data/dtr-reference/reference.jsonl`` (or only rows whose
trace/heuristic contain ``--filter``) memopt replays the same budget; the time measured
is the replay alone (trace parsed and baseline computed beforehand, numba kernels
loaded by one untimed warm-up replay), best of ``--repeats``. simrd's time is

* by default the ``simrd_wall_s`` recorded in the reference file (unmodified simrd on a
  2-core machine like this one: ``callback(rt)`` of its ``pareto`` runner, parse and
  baseline excluded), or
* with ``--simrd PATH`` (the ``simrd/`` folder of a uwsampl/dtr-prototype checkout,
  which contains the ``simrd`` package) simrd run here, in the same benchmark run, in a
  subprocess of ``--simrd-python`` (default: this interpreter; simrd needs ``attrs``),
  timed the same way as its runner does, once per row. Its outcomes are also checked
  against memopt's.

Prints one line per row and the summary: the median speed-up over rows, the speed-up on
the slowest trace (largest total simrd time: sum of simrd times / sum of memopt times)
and on the slowest single row.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_DATA = ROOT.parent / "shared" / "data"


# --------------------------------------------------------------------------------------
# simrd side (runs in a subprocess; imports simrd only, from the folder given)
# --------------------------------------------------------------------------------------
def _simrd_worker(simrd_dir: str) -> None:
    """Read jobs (JSON lines) on stdin, run simrd, write outcomes (JSON lines)."""
    import math
    sys.path.insert(0, simrd_dir)
    sys.setrecursionlimit(10 ** 6)
    from simrd.heuristic import HEURISTICS, Heuristic
    from simrd.parse import parse_file
    from simrd.runtime import RematExceededError, RuntimeV1, RuntimeV2EagerOptimized

    loaded = {}
    for line in sys.stdin:
        job = json.loads(line)
        path = job["path"]
        if path not in loaded:
            with open(path) as fh:
                callback = parse_file(fh, start=True).get_closure()
            rt = RuntimeV1(math.inf, Heuristic(), stats=False, trace=False)
            callback(rt)
            loaded[path] = (callback, rt.telemetry.summary["max_memory"],
                            rt.telemetry.summary["model_compute"])
        callback, peak, compute = loaded[path]
        kwargs = {}
        if job["overhead_limit"] is not None:
            kwargs["remat_limit"] = compute * (job["overhead_limit"] - 1)
        rt = RuntimeV2EagerOptimized(int(job["ratio"] * peak), HEURISTICS[job["heuristic"]](),
                                     stats=False, trace=False, **kwargs)
        status = "pass"
        start = time.time()
        try:
            callback(rt)
        except MemoryError:
            status = "OOM"
        except RematExceededError:
            status = "thrash"
        wall = time.time() - start
        summary = rt.telemetry.summary
        print(json.dumps({"status": status, "clock": rt.clock,
                          "remat_compute": summary["remat_compute"],
                          "max_memory": summary["max_memory"], "wall": wall}), flush=True)


class _Simrd:
    def __init__(self, simrd_dir: Path, python: str):
        if not (simrd_dir / "simrd" / "runtime").is_dir():
            raise SystemExit(f"--simrd: {simrd_dir} does not contain the simrd package "
                             "(expected simrd/runtime/ inside)")
        self.proc = subprocess.Popen(
            [python, __file__, "--simrd-worker", str(simrd_dir)], stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, text=True)

    def run(self, path: Path, row: dict) -> dict:
        job = {"path": str(path), "heuristic": row["heuristic"], "ratio": row["ratio"],
               "overhead_limit": row["overhead_limit"]}
        self.proc.stdin.write(json.dumps(job) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise SystemExit("simrd worker died (is attrs installed for --simrd-python?)")
        return json.loads(line)

    def close(self):
        self.proc.stdin.close()
        self.proc.wait()


# --------------------------------------------------------------------------------------
def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reference", type=Path,
                    default=DEFAULT_DATA / "dtr-reference" / "reference.jsonl")
    ap.add_argument("--traces", type=Path, default=DEFAULT_DATA / "dtr-traces")
    ap.add_argument("--filter", default="", help="rows whose trace or heuristic contains this")
    ap.add_argument("--repeats", type=int, default=1,
                    help="memopt: best of N (default 1, like the single recorded simrd run)")
    ap.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                    help="memopt timer: wall clock (default) or process CPU time, which is "
                         "steadier on a machine busy with other work")
    ap.add_argument("--simrd", type=Path, help="simrd folder of a dtr-prototype checkout")
    ap.add_argument("--simrd-python", default=sys.executable)
    ap.add_argument("--simrd-worker", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.simrd_worker:
        _simrd_worker(args.simrd_worker)
        return 0

    from memopt.dtr import baseline, load_trace, replay, replay_ratio

    rows = [json.loads(line) for line in args.reference.read_text().splitlines() if line]
    rows = [r for r in rows if args.filter in r["trace"] or args.filter == r["heuristic"]]
    if not rows:
        raise SystemExit("no reference rows selected")
    traces = {}
    for r in rows:
        if r["trace"] not in traces:
            traces[r["trace"]] = load_trace(args.traces / r["trace"])
            baseline(traces[r["trace"]])
    # warm-up: load the compiled kernels (numba cache) outside the timings
    warm = next(iter(traces.values()))
    for h in {r["heuristic"] for r in rows}:
        replay_ratio(warm, 0.5, h)
    simrd = _Simrd(args.simrd, args.simrd_python) if args.simrd else None

    source = "measured now" if simrd else "recorded in reference file"
    timer = time.perf_counter if args.clock == "wall" else time.process_time
    print(f"memopt: best of {args.repeats} ({args.clock} time); simrd: {source}")
    print(f"{'trace':<14} {'heuristic':<15} {'ratio':>6} {'limit':>5} {'status':>6} "
          f"{'memopt s':>10} {'simrd s':>9} {'speed-up':>9}")
    results = []
    mismatches = 0
    for r in rows:
        trace = traces[r["trace"]]
        budget = int(r["ratio"] * baseline(trace).peak)
        best = float("inf")
        for _ in range(max(1, args.repeats)):
            t0 = timer()
            res = replay(trace, budget, r["heuristic"], overhead_limit=r["overhead_limit"])
            best = min(best, timer() - t0)
        if simrd:
            out = simrd.run(args.traces / r["trace"], r)
            simrd_s = out["wall"]
            ref = out
        else:
            simrd_s = r["simrd_wall_s"]
            ref = r
        same = all(getattr(res, k) == ref[k] for k in ("status", "clock", "remat_compute",
                                                       "max_memory"))
        mismatches += not same
        speed = simrd_s / best if best > 0 else float("inf")
        results.append((r, best, simrd_s, speed))
        print(f"{r['trace'].split('-')[0]:<14} {r['heuristic']:<15} {r['ratio']:>6} "
              f"{str(r['overhead_limit']):>5} {res.status:>6} {best:>10.4f} {simrd_s:>9.3f} "
              f"{speed:>8.1f}x{'' if same else '  OUTCOME DIFFERS'}")
    if simrd:
        simrd.close()

    per_trace = defaultdict(lambda: [0.0, 0.0])
    for r, mem_s, sim_s, _ in results:
        per_trace[r["trace"]][0] += mem_s
        per_trace[r["trace"]][1] += sim_s
    print()
    print(f"{'trace':<14} {'memopt s':>10} {'simrd s':>10} {'speed-up':>9}")
    for name, (mem_s, sim_s) in sorted(per_trace.items(), key=lambda kv: -kv[1][1]):
        print(f"{name.split('-')[0]:<14} {mem_s:>10.3f} {sim_s:>10.3f} {sim_s / mem_s:>8.1f}x")
    slowest_trace = max(per_trace, key=lambda n: per_trace[n][1])
    mem_s, sim_s = per_trace[slowest_trace]
    slowest_row = max(results, key=lambda x: x[2])
    print()
    print(f"rows: {len(results)}; outcomes equal to simrd's: {len(results) - mismatches}")
    print(f"median speed-up over rows: {statistics.median(x[3] for x in results):.1f}x")
    print(f"slowest trace ({slowest_trace.split('-')[0]}, simrd {sim_s:.1f} s in total): "
          f"{sim_s / mem_s:.1f}x")
    print(f"slowest row ({slowest_row[0]['trace'].split('-')[0]} {slowest_row[0]['heuristic']} "
          f"ratio {slowest_row[0]['ratio']}, simrd {slowest_row[2]:.1f} s): "
          f"{slowest_row[3]:.1f}x")
    print(f"total: memopt {sum(x[1] for x in results):.2f} s, "
          f"simrd {sum(x[2] for x in results):.1f} s")
    return 1 if mismatches else 0


if __name__ == "__main__":
    sys.exit(main())
