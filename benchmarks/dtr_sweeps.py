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

from memopt.dtr import Heuristic  # noqa: E402
from memopt.dtr.sweep import find_holes, run_sweep  # noqa: E402


class NoStaleness(Heuristic):
    """h_DTR without its staleness factor: (c(s) + c(e*(s))) / m(s).

    A user-defined score through memopt's pluggable score API (evaluated in Python, so
    slow: use it on the small traces). Staleness is the term that makes h_DTR evict
    long-unused tensors first; without it the score is purely "recompute cost per byte",
    like MSPS but over both directions of the evicted neighbourhood.
    """

    name = "dtr-nostale"
    features = frozenset({"regions"})

    def score(self, view):
        if view.size <= 0:
            return float("inf")
        return (view.compute + view.region_compute + view.region_rev_compute) / view.size


#: User-defined scores selectable by name with --heuristics.
USER_SCORES = {"dtr-nostale": NoStaleness}

TRACES = ROOT.parent / "shared" / "data" / "dtr-traces"
OUT = ROOT / "benchmarks" / "results" / "dtr_sweeps"


def short_name(log: Path) -> str:
    return log.name.split("-")[0]


def result_path(log: Path, heuristic: str, grid: str, limit: float | None) -> Path:
    tag = grid.replace(":", "_")
    lim = "" if limit is None else f"-limit{limit:g}"
    return OUT / f"{short_name(log)}-{heuristic}{lim}-{tag}.json"


COLUMNS = ["ratio", "status", "budget", "clock", "remat_compute", "max_memory", "heuristic_evals", "seconds"]


def row_of(point: dict, columns: list[str]) -> list:
    return [point[c] for c in columns]


def compact(result) -> dict:
    """The sweep as a small JSON object: header, holes, one row per budget."""
    d = result.to_dict()
    d["columns"] = COLUMNS
    d["rows"] = [row_of(p, COLUMNS) for p in d.pop("points")]
    return d


def recount(d: dict) -> dict:
    """Recompute the derived fields of a stored sweep from its rows (after a merge)."""
    col = {name: i for i, name in enumerate(d["columns"])}
    rows = sorted(d["rows"], key=lambda r: r[col["ratio"]])
    decided = [r for r in rows if r[col["status"]] != "timeout"]
    holes = [[decided[i][0], decided[j][0]] for i, j in find_holes([r[col["status"]] == "pass" for r in decided])]
    failing = [r for r in decided if r[col["status"]] != "pass"]
    passing = [r[0] for r in decided if r[col["status"]] == "pass"]
    d.update(
        rows=rows,
        holes=holes,
        failing=len(failing),
        hole_budgets=sum(1 for r in failing if any(lo <= r[0] <= hi for lo, hi in holes)),
        min_passing_ratio=passing[0] if passing else None,
        timeouts=[r[0] for r in rows if r[col["status"]] == "timeout"],
    )
    return d


def retry_timeouts(path: Path, timeout: float, jobs: int) -> None:
    """Re-run the budgets of a stored sweep that hit its time limit, with ``timeout``."""
    d = json.loads(path.read_text())
    if not d.get("timeouts"):
        return
    log = next(TRACES.glob(d["trace"]))
    t0 = time.perf_counter()
    score = USER_SCORES[d["heuristic"]]() if d["heuristic"] in USER_SCORES else d["heuristic"]
    again = run_sweep(log, d["timeouts"], score, overhead_limit=d["overhead_limit"],
                      jobs=jobs, timeout=timeout, progress=True)
    new = {float(p.ratio): p.to_dict() for p in again.points}
    d["rows"] = [row_of(new[r[0]], d["columns"]) if r[0] in new else r for r in d["rows"]]
    d["timeout"] = f"{d.get('timeout')} then {timeout} for {len(new)} budgets"
    d["seconds"] = round(d["seconds"] + time.perf_counter() - t0, 3)
    recount(d)
    path.write_text(json.dumps(d, separators=(",", ":")) + "\n")
    print(f"{path.name}: retried {len(new)} budgets with {timeout}s: {len(d['timeouts'])} still undecided, "
          f"holes {d['holes']}", flush=True)


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
            "timeout": d.get("timeout"),
            "timeouts": d.get("timeouts", []),
            "seconds": d["seconds"],
        }
    (OUT / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    return summary


def markdown(summary: dict) -> str:
    """The stored sweeps as a Markdown table (for docs/dtr.md)."""
    lines = [
        "| trace | heuristic | grid | budgets | failing | smallest passing ratio | timeouts | holes |",
        "|---|---|---|---:|---:|---:|---:|---|",
    ]
    order = lambda kv: (kv[1]["grid"], kv[1]["heuristic"] != "dtr", kv[1]["heuristic"], kv[1]["trace"])
    for _, v in sorted(summary.items(), key=order):
        holes = ", ".join(f"[{lo:g}, {hi:g}]" for lo, hi in v["holes"]) or "none"
        lines.append(
            f"| {v['trace'].split('-')[0]} | {v['heuristic']} | {v['grid']} | {v['budgets']} | {v['failing']} "
            f"| {v['min_passing_ratio']} | {len(v.get('timeouts') or [])} | {holes} |"
        )
    return "\n".join(lines)


REFERENCE = ROOT.parent / "shared" / "data" / "dtr-reference" / "reference.jsonl"
SIMRD_NAMES = {"dtr": "DTR", "dtr-eqclass": "DTREqClass", "dtr-local": "DTRLocal", "msps": "MSPS",
               "lru": "LRU", "largest": "LargestStorage"}


def check_reference() -> tuple[int, list[str]]:
    """Compare every stored sweep row that simrd's reference file also has (same trace,
    heuristic, no overhead limit, same ratio): status, remat_compute, max_memory (and
    clock when stored) must be equal. Returns (rows compared, mismatches)."""
    ref = {}
    for line in REFERENCE.read_text().splitlines():
        r = json.loads(line)
        if r["overhead_limit"] is None:
            ref[(r["trace"], r["heuristic"], r["ratio"])] = r
    compared, bad = 0, []
    for path in sorted(OUT.glob("*.json")):
        if path.name == "summary.json":
            continue
        d = json.loads(path.read_text())
        if d["overhead_limit"] is not None:
            continue
        col = {name: i for i, name in enumerate(d["columns"])}
        for row in d["rows"]:
            r = ref.get((d["trace"], SIMRD_NAMES.get(d["heuristic"]), row[col["ratio"]]))
            if r is None or row[col["status"]] == "timeout":
                continue
            compared += 1
            for key in ("status", "budget", "clock", "remat_compute", "max_memory"):
                if key in col and row[col[key]] != r[key]:
                    bad.append(f"{path.name} ratio {row[0]}: {key} {row[col[key]]} != simrd {r[key]}")
    return compared, bad


def compare_markdown(summary: dict, grid: str, heuristics: list[str]) -> str:
    """One row per trace, one column group per heuristic: failing budgets (undecided),
    smallest passing ratio, holes -- on ``grid``."""
    by = {(v["trace"].split("-")[0], v["heuristic"]): v for v in summary.values() if v["grid"] == grid}
    traces = sorted({t for t, _ in by})
    head = "| trace | " + " | ".join(f"{h}: failing (undecided) / min pass / holes" for h in heuristics) + " |"
    lines = [head, "|---|" + "---|" * len(heuristics)]
    for t in traces:
        cells = []
        for h in heuristics:
            v = by.get((t, h))
            if v is None:
                cells.append("not run")
                continue
            holes = ", ".join(f"[{lo:g}, {hi:g}]" for lo, hi in v["holes"]) or "none"
            cells.append(f"{v['failing']} ({len(v.get('timeouts') or [])}) / {v['min_passing_ratio']} / {holes}")
        lines.append(f"| {t} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--traces", nargs="*", default=None, help="substrings of trace file names (default: all)")
    ap.add_argument("--heuristics", nargs="*", default=["dtr"])
    ap.add_argument("--grid", default="0.01:1.0:0.01")
    ap.add_argument("--overhead-limit", type=float, default=None)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--timeout", type=float, default=None, help="seconds per budget (undecided beyond)")
    ap.add_argument("--force", action="store_true", help="re-run sweeps whose result exists")
    ap.add_argument("--summary-only", action="store_true")
    ap.add_argument("--markdown", action="store_true", help="print the summary as a Markdown table")
    ap.add_argument("--compare", nargs="*", metavar="HEURISTIC",
                    help="print a Markdown table comparing these heuristics on --grid, per trace")
    ap.add_argument("--check-reference", action="store_true",
                    help="compare the stored sweep rows with simrd's recorded outcomes at the same ratios")
    ap.add_argument("--retry-timeouts", type=float, default=None, metavar="SECONDS",
                    help="instead of sweeping, re-run the timed-out budgets of the stored sweeps "
                         "(selected by --traces/--heuristics/--grid) with this time limit")
    args = ap.parse_args(argv)

    OUT.mkdir(parents=True, exist_ok=True)
    if args.retry_timeouts is not None:
        logs = sorted(TRACES.glob("*.log"), key=lambda p: p.stat().st_size)
        if args.traces:
            logs = [p for p in logs if any(sub in p.name for sub in args.traces)]
        for heuristic in args.heuristics:
            for log in logs:
                out = result_path(log, heuristic, args.grid, args.overhead_limit)
                if out.exists():
                    retry_timeouts(out, args.retry_timeouts, args.jobs)
    elif not args.summary_only:
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
                score = USER_SCORES[heuristic]() if heuristic in USER_SCORES else heuristic
                result = run_sweep(log, args.grid, score, overhead_limit=args.overhead_limit,
                                   jobs=args.jobs, repeats=args.repeats, timeout=args.timeout,
                                   progress=True)
                out.write_text(json.dumps(compact(result), separators=(",", ":")) + "\n")
                holes = ", ".join(f"[{lo:g}, {hi:g}]" for lo, hi in result.to_dict()["holes"]) or "none"
                print(f"{short_name(log):>12} {heuristic:>12} {args.grid}: {len(result.failing)} failing, "
                      f"{len(result.timeouts)} timeouts, min pass {result.min_passing_ratio}, holes {holes} "
                      f"({time.perf_counter() - t0:.1f}s)", flush=True)
    summary = summarize()
    print(f"summary of {len(summary)} sweeps: {OUT / 'summary.json'}")
    if args.markdown:
        print(markdown(summary))
    if args.compare:
        print(compare_markdown(summary, args.grid, args.compare))
    if args.check_reference:
        compared, bad = check_reference()
        print(f"reference check: {compared} sweep rows compared with simrd's recorded outcomes, "
              f"{len(bad)} mismatches")
        for line in bad:
            print("  " + line)
        if bad:
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
