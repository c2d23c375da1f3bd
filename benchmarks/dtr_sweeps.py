"""Budget sweeps of the public DTR traces, for the findings in docs/dtr.md.

Runs ``memopt.dtr.sweep.run_sweep`` for every selected (trace, heuristic, grid) and
writes one small JSON file per sweep under ``benchmarks/results/dtr_sweeps/`` (points
stored as compact rows), plus ``summary.json`` with the holes of every sweep found
there. Sweeps whose result file exists are skipped unless ``--force``, so an
interrupted campaign resumes where it stopped.

Examples (2 cores: one sweep at a time, two worker processes)::

    python benchmarks/dtr_sweeps.py --grid 0.01:1.0:0.01 --jobs 2
    python benchmarks/dtr_sweeps.py --traces resnet32 unet --grid 0.01:1.0:0.001 --jobs 2
    python benchmarks/dtr_sweeps.py --heuristics dtr-eqclass lru --grid 0.01:1.0:0.01 --jobs 2
    python benchmarks/dtr_sweeps.py --summary-only
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from memopt.dtr.sweep import run_sweep  # noqa: E402

TRACES = ROOT.parent / "shared" / "data" / "dtr-traces"
OUT = ROOT / "benchmarks" / "results" / "dtr_sweeps"


def short_name(log: Path) -> str:
    return log.name.split("-")[0]


def result_path(log: Path, heuristic: str, grid: str, limit: float | None) -> Path:
    tag = grid.replace(":", "_")
    lim = "" if limit is None else f"-limit{limit:g}"
    return OUT / f"{short_name(log)}-{heuristic}{lim}-{tag}.json"


def compact(result) -> dict:
    """The sweep as a small JSON object: header, holes, one row per budget."""
    d = result.to_dict()
    rows = [[p["ratio"], p["status"], p["remat_compute"], p["max_memory"], p["budget"]] for p in d.pop("points")]
    d["columns"] = ["ratio", "status", "remat_compute", "max_memory", "budget"]
    d["rows"] = rows
    return d


def summarize() -> dict:
    summary = {}
    for path in sorted(OUT.glob("*.json")):
        if path.name == "summary.json":
            continue
        d = json.loads(path.read_text())
        summary[path.stem] = {
            "trace": d["trace"],
            "heuristic": d["heuristic"],
            "grid": d["grid"],
            "overhead_limit": d["overhead_limit"],
            "budgets": len(d["rows"]),
            "failing": d["failing"],
            "min_passing_ratio": d["min_passing_ratio"],
            "holes": d["holes"],
            "hole_budgets": d["hole_budgets"],
            "nondeterministic": d["nondeterministic"],
            "seconds": d["seconds"],
        }
    (OUT / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    return summary


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--traces", nargs="*", default=None, help="substrings of trace file names (default: all)")
    ap.add_argument("--heuristics", nargs="*", default=["dtr"])
    ap.add_argument("--grid", default="0.01:1.0:0.01")
    ap.add_argument("--overhead-limit", type=float, default=None)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--force", action="store_true", help="re-run sweeps whose result exists")
    ap.add_argument("--summary-only", action="store_true")
    args = ap.parse_args(argv)

    OUT.mkdir(parents=True, exist_ok=True)
    if not args.summary_only:
        logs = sorted(TRACES.glob("*.log"), key=lambda p: p.stat().st_size)  # small first
        if args.traces:
            logs = [p for p in logs if any(s in p.name for s in args.traces)]
        for heuristic in args.heuristics:
            for log in logs:
                out = result_path(log, heuristic, args.grid, args.overhead_limit)
                if out.exists() and not args.force:
                    print(f"skip {out.name} (exists)", flush=True)
                    continue
                t0 = time.perf_counter()
                result = run_sweep(log, args.grid, heuristic, overhead_limit=args.overhead_limit,
                                   jobs=args.jobs, repeats=args.repeats, progress=True)
                out.write_text(json.dumps(compact(result), separators=(",", ":")) + "\n")
                holes = ", ".join(f"[{lo:g}, {hi:g}]" for lo, hi in result.to_dict()["holes"]) or "none"
                print(f"{short_name(log):>12} {heuristic:>12} {args.grid}: {len(result.failing)} failing, "
                      f"min pass {result.min_passing_ratio}, holes {holes} "
                      f"({time.perf_counter() - t0:.1f}s)", flush=True)
    summary = summarize()
    print(f"summary of {len(summary)} sweeps: {OUT / 'summary.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
