"""Capped recomputation on the published graphs: memopt's methods, and Moccasin side by side.

    python benchmarks/remat_table.py [--time-limit 300] [--graphs NAME ...] [--ratios 0.9 0.8]
        [--caps 2 1] [--methods auto cpsat ...] [--moccasin PATH] [--json out.json] [--real]
    python benchmarks/remat_table.py --from-json run1.json run2.json    # merge saved runs

Instances: every training graph in ``../shared/data/checkmate-graphs/`` (``*_train_nx.json``),
the four random layered graphs there (Gagrani et al.; n100, n250, n500, n1000) and the
late-reuse networks of ``instances/late_reuse_*.json`` (``instances/make_instances.py``);
with ``--real`` instead, the real-network training graphs ``benchmarks/corpus/train_*.json``
(one training step, forward and backward, of the models of :mod:`memopt.zoo.real`, written
by ``benchmarks/real_corpus.py --training``; tune on :data:`memopt.zoo.real.TUNING`, judge
on the rest). ``--graphs`` keeps the instances whose name contains one of the given words (or loads the
given files). For each graph, ``P0`` is the least no-recomputation peak, from
:func:`memopt.schedule` (its ``status`` says whether it is proved); for each ratio ``r`` the
memory limit is ``M = floor(r * P0)`` bytes, and every method answers the same question:
the least extra cost of a plan with peak ``<= M`` where every op runs at most ``1 + cap``
times (``docs/remat.md``).

Columns per (graph, ratio, cap, method): ``status`` (``optimal`` = proved, ``feasible`` =
gap open, ``infeasible`` = proved no plan, ``unknown`` = no plan within the limit found),
``extra`` (extra compute, in the file's cost units: ``cost_cpu`` / ``duration`` of the
node-link files, FLOPs for the late-reuse networks),
``extra %`` (of the total compute of one run of every op), ``peak`` (bytes, measured by
memopt's independent checker), ``cost LB`` (proved lower bound on the extra cost),
``gap`` (the relative optimality gap on the objective Checkmate and Moccasin minimise, the
total compute of all runs: ``(extra - cost LB) / (total + extra)``; 0 when proved optimal;
the gap on the extra cost alone, ``(extra - cost LB) / extra``, is larger and is printed in the
summary),
``seconds`` (wall clock of the whole ``memopt.remat`` call, including its own baseline).
The summary counts the targets: rows proved, rows with neither a plan nor a proof
(``unknown``), plans within twice the proved lower bound on the extra cost, and calls that
ended more than a second after their time limit.

Moccasin (Bartan et al., ICML 2023, ``haoming-codes/moccasin``, GPL-3.0) runs where a local,
patched copy is given (``--moccasin PATH``: the copy's root with ``src/moccasin``, or the
folder holding the ``moccasin`` package); nothing of it is part of memopt. It runs in a
subprocess (:data:`MOCCASIN_DRIVER`) on the same file, loaded as its ``main.py`` loads it,
with its published settings (``use_stage``, log-spaced interval lengths, reservoir option 2,
two phases, 16 CP-SAT workers) and the mapping:

* memory limit: Moccasin's ``B`` is given ``M`` itself, rounded down to a multiple of the
  gcd of the node sizes (Moccasin divides sizes by that gcd and rounds ``B`` *up*, which
  would otherwise loosen the limit). Its own ``-m`` multiplier is relative to the peak of the
  file's topological order, not to ``P0``, so it is not used;
* cap: Moccasin's ``C`` is the number of computations of a node (first one included), so
  ``C = cap + 1`` (its default ``C = 2`` is memopt's cap 1);
* time: each of its two phases gets half of ``--time-limit`` (as its ``main.py`` does for
  graphs under 500 nodes); the subprocess is ended after ``1.5 x`` the limit + 60 s;
* its plan (the run sequence ordered by start time) is re-evaluated in memopt's model:
  converted into memopt steps with every value freed after its last use
  (:func:`memopt.remat.plan_from_runs`) and measured by memopt's checker
  (:func:`memopt.remat.check_plan`) with cap ``C - 1``; ``valid`` says whether the plan
  passes the checker and meets ``M``. The single graph output of these files is their last
  op, so Moccasin freeing it after it runs and memopt keeping it live agree;
* Moccasin runs only on the node-link files: the memopt-graph instances (graph inputs that
  cannot be recomputed, resident weights) have no equivalent in its model.

Timings are wall clock on the machine the table runs on; they belong here, not in tests.
"""

from __future__ import annotations

import argparse
import glob
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from fractions import Fraction

HERE = os.path.dirname(os.path.abspath(__file__))
SHARED = os.path.join(HERE, "..", "..", "shared", "data", "checkmate-graphs")
INSTANCES = os.path.join(HERE, "..", "instances")
CORPUS = os.path.join(HERE, "corpus")

#: Run by ``python -c`` in the subprocess: loads the file as Moccasin's ``main.py`` does, runs
#: its ``remat`` and writes the run sequence (file labels) and its statistics as JSON.
MOCCASIN_DRIVER = r"""
import json, sys, time
spec = json.loads(sys.argv[1])
sys.path.insert(0, spec["moccasin"])
import networkx as nx
from moccasin.cp import remat
from moccasin.util import gcd_process
with open(spec["graph"]) as fh:
    doc = json.load(fh)
layered = "out_cost" in doc["nodes"][0]
kw = {"source": "0", "target": "1"} if layered else {}
G = nx.node_link_graph(doc, directed=True, multigraph=False, edges="links", **kw)
if layered:
    for v, data in G.nodes(data=True):
        data["cost_ram"] = data.pop("out_cost")
        data["cost_cpu"] = data.pop("duration")
label = {v: (G.nodes[v].get("name", v) if layered else v) for v in G.nodes}
topo = G.graph["order"] if "order" in G.graph else list(nx.topological_sort(G))
_, g_mem, _ = gcd_process(G)
B = spec["limit"] // g_mem * g_mem
t0 = time.perf_counter()
res = remat(G=G, B=B, C=spec["C"], timeout=spec["phase_seconds"], discretized=True, reservoir=True,
            use_end_global=False, use_stage=True, topo_order=topo, phase1=True,
            use_interval_length_domain=True, use_gcd=True, reservoir_option=2, log_dir=spec["log_dir"])
seconds = time.perf_counter() - t0
sched = res.get("schedule")
if sched is not None and max(G.nodes) >= G.number_of_nodes():
    sched = [topo[v] for v in sched]   # Moccasin relabelled the nodes by topological position
out = {"status": res.get("status"), "seconds": seconds, "B": B,
       "runs": None if sched is None else [str(label[v]) for v in sched],
       "objective": res.get("obj_val"), "mem_footprint": res.get("mem_footprint"),
       "solutions": [[d["time"], d["objective"]] for d in res.get("solns", {}).values()]}
with open(spec["out"], "w") as fh:
    json.dump(out, fh)
"""


def default_graphs() -> list[str]:
    files = sorted(glob.glob(os.path.join(SHARED, "*_train_nx.json")))
    files += sorted(glob.glob(os.path.join(SHARED, "random_layered_n*.json")),
                    key=lambda f: int(os.path.basename(f).split("_n")[1].split("_")[0]))
    files += sorted(glob.glob(os.path.join(INSTANCES, "late_reuse_*.json")))
    return files


def real_graphs() -> list[str]:
    """The real-network training graphs (forward and backward of one step) of the corpus."""
    return sorted(glob.glob(os.path.join(CORPUS, "train_*.json")))


def short_name(path: str) -> str:
    base = os.path.basename(path).replace("_nx.json", "").replace(".json", "")
    if base.startswith("random_layered_"):
        return base.split("_w")[0]
    return base


def moccasin_src(path: str) -> str:
    """The folder to put on ``sys.path`` for ``import moccasin``."""
    for cand in (os.path.join(path, "src"), path):
        if os.path.isfile(os.path.join(cand, "moccasin", "cp.py")):
            return os.path.abspath(cand)
    raise SystemExit(f"--moccasin {path}: no moccasin/cp.py under it (give the patched copy's root)")


def run_moccasin(src: str, graph_file: str, limit: int, cap: int, time_limit: float) -> dict:
    """Moccasin on one instance in a subprocess; its outcome, or ``status`` timeout/crash."""
    with tempfile.TemporaryDirectory(prefix="moccasin_run_") as tmp:
        spec = {"moccasin": src, "graph": os.path.abspath(graph_file), "limit": int(limit), "C": cap + 1,
                "phase_seconds": time_limit / 2, "log_dir": tmp, "out": os.path.join(tmp, "result.json")}
        t0 = time.perf_counter()
        with open(os.path.join(tmp, "log.txt"), "w") as log:
            try:
                proc = subprocess.run([sys.executable, "-c", MOCCASIN_DRIVER, json.dumps(spec)], cwd=tmp,
                                      stdout=log, stderr=subprocess.STDOUT, timeout=1.5 * time_limit + 60)
                rc = proc.returncode
            except subprocess.TimeoutExpired:
                rc = None
        wall = time.perf_counter() - t0
        if rc is None:
            return {"status": "timeout", "wall": wall}
        if rc != 0 or not os.path.exists(spec["out"]):
            with open(os.path.join(tmp, "log.txt")) as fh:
                tail = fh.read().strip().splitlines()[-1:] or [""]
            return {"status": f"crash (exit {rc})", "wall": wall, "error": tail[0][:200]}
        with open(spec["out"]) as fh:
            out = json.load(fh)
        out["wall"] = wall
        return out


def reevaluate(graph, runs_labels: list[str], cap: int, limit: int) -> dict:
    """Moccasin's run sequence measured in memopt's model: peak, extra cost, validity."""
    from memopt.errors import MemoptError
    from memopt.remat import check_plan, plan_from_runs

    try:
        plan = plan_from_runs(graph, runs_labels)
        peak, extra = check_plan(graph, plan, cap=cap)
    except MemoptError as exc:
        return {"valid": False, "why": f"{type(exc).__name__}: {exc}"}
    ok = peak <= limit
    return {"valid": ok, "peak": int(peak), "extra_cost": extra,
            "why": "" if ok else f"peak {peak} above the limit {limit}"}


def total_gap(extra, cost_lb, total) -> float | None:
    """``(extra - cost_lb) / (total + extra)``: the relative gap on the total compute (first
    runs included), the objective of Checkmate's MIP and of Moccasin; ``None`` without both."""
    if extra is None or cost_lb is None:
        return None
    return float((Fraction(extra) - Fraction(cost_lb)) / (Fraction(total) + Fraction(extra)))


def fmt_pct(x) -> str:
    return "-" if x is None else f"{100 * x:.3f}%"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--graphs", nargs="+", metavar="NAME",
                    help="instances whose name contains one of these words, or graph files")
    ap.add_argument("--real", action="store_true",
                    help="only the real-network training graphs of benchmarks/corpus/train_*.json "
                         "(written by benchmarks/real_corpus.py --training)")
    ap.add_argument("--ratios", type=float, nargs="+", default=[0.9, 0.8])
    ap.add_argument("--caps", type=int, nargs="+", default=[2, 1])
    ap.add_argument("--methods", nargs="+", default=None,
                    help="memopt methods (default: auto and every registered method); 'none' for Moccasin only")
    ap.add_argument("--time-limit", type=float, default=300.0, help="seconds per method and instance")
    ap.add_argument("--baseline-time-limit", type=float, default=60.0,
                    help="seconds for the no-recomputation optimum P0 of each graph")
    ap.add_argument("--moccasin", metavar="PATH", help="a patched local copy of haoming-codes/moccasin")
    ap.add_argument("--json", metavar="FILE", help="also write the rows as JSON (rewritten after every instance)")
    ap.add_argument("--from-json", nargs="+", metavar="FILE",
                    help="print the table and summary of rows saved by --json (several runs merged); run nothing")
    args = ap.parse_args(argv)
    if args.from_json:
        rows = []
        for f in args.from_json:
            with open(f) as fh:
                rows += json.load(fh)
        report(rows)
        return 0

    from memopt._progress import Progress
    from memopt.io import load_instance
    from memopt.io._json import read_json
    from memopt.io.checkmate import is_node_link
    from memopt.remat.registry import method_names
    from memopt.remat.result import json_number
    from memopt.schedule import schedule

    import memopt

    files = real_graphs() if args.real else default_graphs()
    if args.graphs:
        given = [g for g in args.graphs if os.path.isfile(g)]
        words = [g for g in args.graphs if not os.path.isfile(g)]
        files = given + [f for f in files if any(w in short_name(f) for w in words)]
    if not files:
        print(f"no graphs (looked in {os.path.normpath(SHARED)} and {os.path.normpath(INSTANCES)})", file=sys.stderr)
        return 2
    methods = args.methods or ["auto", *method_names()]
    methods = [m for m in methods if m != "none"]
    for m in methods:
        if m != "auto" and m not in method_names():
            ap.error(f"unknown method {m!r} (auto, {', '.join(method_names())})")
    src = moccasin_src(args.moccasin) if args.moccasin else None
    print(f"# {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; load average "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}; {os.cpu_count()} cores; "
          f"time limit {args.time_limit:g} s; command: {' '.join(sys.argv)}", flush=True)

    rows = []
    cells = len(args.ratios) * len(args.caps) * (len(methods) + (src is not None))  # an upper bound
    with Progress(len(files) * cells, "remat table") as bar:
        for path in files:
            name = short_name(path)
            graph = load_instance(path).graph
            node_link = is_node_link(read_json(path))   # the only files Moccasin can read
            total = Fraction(sum(Fraction(float(c)) for c in graph.op_cost))
            t0 = time.perf_counter()
            base = schedule(graph, time_limit=args.baseline_time_limit)
            p0, p0_status, p0_seconds = int(base.peak), base.status, time.perf_counter() - t0
            for ratio in args.ratios:
                limit = math.floor(Fraction(str(ratio)) * p0)
                for cap in args.caps:
                    common = {"graph": name, "ops": graph.num_ops, "P0": p0, "P0 status": p0_status,
                              "time limit": args.time_limit,
                              "P0 seconds": round(p0_seconds, 2), "ratio": ratio, "cap": cap, "limit": limit}
                    for m in methods:
                        bar.set_status(f"{name} r={ratio} cap={cap} {m}")
                        r = memopt.remat(graph, memory_limit=limit, cap=cap, method=m, time_limit=args.time_limit)
                        extra = r.extra_cost if r.plan is not None and r.status != "unknown" else None
                        rows.append({**common, "method": m, "status": r.status, "peak": r.peak if extra is not None
                                     else None, "extra": json_number(extra), "extra %": None if extra is None else
                                     float(Fraction(extra) / total), "cost LB": json_number(r.cost_lower_bound),
                                     "peak LB": r.lower_bound, "gap": total_gap(extra, r.cost_lower_bound, total),
                                     "seconds": round(r.seconds, 2),
                                     "valid": True if extra is not None else None, "detail": r.method})
                        bar.update(1)
                    if src is not None and node_link:
                        bar.set_status(f"{name} r={ratio} cap={cap} moccasin")
                        out = run_moccasin(src, path, limit, cap, args.time_limit)
                        row = {**common, "method": f"moccasin C={cap + 1}", "status": out["status"], "peak": None,
                               "extra": None, "extra %": None, "cost LB": None, "peak LB": None, "gap": None,
                               "seconds": round(out.get("seconds", out["wall"]), 2), "valid": None,
                               "detail": out.get("error", "")}
                        if out.get("runs") is not None:
                            ev = reevaluate(graph, out["runs"], cap, limit)
                            row.update(valid=ev["valid"], peak=ev.get("peak"), extra=json_number(ev.get("extra_cost")),
                                       detail=ev["why"] or f"Moccasin's own objective {out.get('objective')}")
                            if ev.get("extra_cost") is not None:
                                row["extra %"] = float(Fraction(ev["extra_cost"]) / total)
                        rows.append(row)
                        bar.update(1)
                    if args.json:
                        save(rows, args.json)
                    for row in rows[-(len(methods) + (src is not None and node_link)):]:
                        print(f"  {name} r={ratio} cap={cap} {row['method']}: {row['status']}, extra "
                              f"{row['extra']} ({fmt_pct(row['extra %'])}), peak {row['peak']}, "
                              f"{row['seconds']} s", file=sys.stderr, flush=True)

    report(rows)
    return 0


def save(rows: list[dict], path: str) -> None:
    from memopt.cli._output import jsonable

    with open(path, "w") as fh:
        json.dump(jsonable(rows), fh, indent=1)


def report(rows: list[dict]) -> None:
    """The table (rows of one instance together, memopt's methods first) and the summary."""
    from memopt.cli._output import print_table

    order = {}
    for r in rows:
        order.setdefault((r["graph"], r["ratio"], r["cap"]), len(order))
    rows = sorted(rows, key=lambda r: (order[(r["graph"], r["ratio"], r["cap"])], r["method"].startswith("moccasin")))
    head = ["graph", "ops", "P0", "ratio", "cap", "limit", "method", "status", "extra", "extra %", "peak",
            "cost LB", "gap", "seconds", "valid"]
    print_table([[("-" if r.get(c) is None else fmt_pct(r[c]) if c in ("extra %", "gap") else r[c]) for c in head]
                 for r in rows], header=head, align="lrrrrrllrrrrrrl")
    summarize(rows)


def summarize(rows: list[dict]) -> None:
    """The targets, counted on the rows at hand."""
    unproved = sorted({r["graph"] for r in rows if r["P0 status"] not in ("certified", "optimal")})
    if unproved:
        print(f"\nP0 not proved optimal (limits relative to the best order found): {', '.join(unproved)}")
    keys = sorted({(r["graph"], r["ratio"], r["cap"]) for r in rows}, key=str)
    by = {(r["graph"], r["ratio"], r["cap"], r["method"]): r for r in rows}
    memopt_methods = sorted({r["method"] for r in rows if not r["method"].startswith("moccasin")})
    for m in memopt_methods:
        mine = [by[k + (m,)] for k in keys if k + (m,) in by]
        done = sum(r["status"] in ("optimal", "infeasible") for r in mine)
        print(f"{m}: proved (optimal or infeasible) {done}/{len(mine)}")
        unknown = [r for r in mine if r["status"] == "unknown"]
        print(f"  no plan and no proof (unknown): {len(unknown)}/{len(mine)}"
              + "".join(f"\n    {r['graph']} ratio {r['ratio']} cap {r['cap']}" for r in unknown))
        planned = [r for r in mine if r.get("extra") is not None and r.get("cost LB") is not None]
        within = sum(Fraction(r["extra"]) <= 2 * Fraction(r["cost LB"]) for r in planned)
        print(f"  extra cost within 2x of the proved lower bound: {within}/{len(planned)} rows with a plan")
        late_rows = [r for r in mine if "time limit" in r and r["seconds"] > r["time limit"] + 1]
        print(f"  ended later than the time limit + 1 s: {len(late_rows)}/{len(mine)}"
              + "".join(f"\n    {r['graph']} ratio {r['ratio']} cap {r['cap']}: {r['seconds']} s" for r in late_rows))
        gaps = [r for r in mine if r["status"] == "feasible" and r.get("gap") is not None]
        for r in gaps:
            extra_gap = (Fraction(r["extra"]) - Fraction(r["cost LB"])) / Fraction(r["extra"])
            print(f"  open: {r['graph']} ratio {r['ratio']} cap {r['cap']}: gap {fmt_pct(r['gap'])} of the total "
                  f"compute ({'under' if r['gap'] < 0.01 else 'not under'} 1 %), {fmt_pct(float(extra_gap))} of the "
                  f"extra cost")
        moc = [(by[k + (m,)], by[k + (f"moccasin C={k[2] + 1}",)]) for k in keys
               if k + (m,) in by and k + (f"moccasin C={k[2] + 1}",) in by]
        if moc:
            fin = [(a, b) for a, b in moc if b["valid"]]
            le = sum(a["extra"] is not None and Fraction(a["extra"]) <= Fraction(b["extra"]) for a, b in fin)
            faster = sum(a["status"] in ("optimal", "infeasible") and a["seconds"] < b["seconds"]
                         for a, b in moc if b["status"] == "OPTIMAL")
            n_opt = sum(b["status"] == "OPTIMAL" for a, b in moc)
            print(f"  vs Moccasin: extra cost <= Moccasin's on {le}/{len(fin)} instances where Moccasin returned a "
                  f"valid plan; proved faster than Moccasin's own 'optimal' on {faster}/{n_opt}")
    late = [r for r in rows if r["graph"].startswith("late_reuse") and r["extra %"] is not None
            and r["peak"] is not None and r["peak"] < r["P0"] and r["extra %"] < 0.01]
    for r in late:
        print(f"late reuse: {r['graph']} ratio {r['ratio']} cap {r['cap']} {r['method']}: peak {r['peak']} < P0 {r['P0']} "
              f"({r['peak'] / r['P0']:.3f} x) at {fmt_pct(r['extra %'])} extra compute ({r['status']})")


if __name__ == "__main__":
    sys.exit(main())
