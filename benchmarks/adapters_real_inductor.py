"""memopt on PyTorch Inductor's programs for the real-model zoo (:mod:`memopt.zoo.real`), CPU.

Per model (random weights, batch 1, the zoo's small resolution), in a child process of its
own (a crash or an exporter limitation costs one row; every row starts from a cold process):

1. stock ``torch.compile`` and its first call, no grad, FX-graph cache off: ``stock compile s``;
2. :func:`memopt.adapters.inductor.capture` (compile, warm-up run, profiled run): ``capture s``;
3. :func:`memopt.adapters.inductor.optimize_capture` at ``--time-limit``: the stock wrapper and
   memopt's permutation of its statements, both run and measured at the CPU allocator
   (``stock measured``, ``memopt measured``), memopt's model of its order (``modelled``), the
   lower bound and status, ``saving %`` against the stock measured peak, bitwise equality of
   the outputs, ``sched s`` (the solve, as :func:`memopt.schedule` reports it) and ``compile s``
   (memopt's kernels compiled or loaded on first use, reported apart);
4. the ``torch.compile`` path (:class:`MemoptSchedulerPass` as ``_post_fusion_custom_pass``,
   ``reorder_for_peak_memory=False``, FX-graph cache on): compiled twice; the first compile is
   captured (``measure=False``) and its program run and measured (``pass measured``; ``pass
   modelled`` is Inductor's model of the pass's order, ``pass stock modelled`` that of
   Inductor's order), its outputs compared bitwise with stock; the second is a plain
   ``torch.compile`` with equal options; ``pass cache``: the FX-graph cache's hits, misses and
   bypasses of each compile.

Each phase starts from a fresh Inductor cache directory with Inductor's in-process caches
cleared, so that no phase reuses another's compiled kernels (a tiny function is compiled first
so that Inductor's one-time start-up is paid by none of them).

    python benchmarks/adapters_real_inductor.py [--time-limit 10] [--jsonl FILE] [--no-compile-path] [MODEL...]

``benchmarks/adapters_table.py --zoo real`` prints these rows as its Inductor section.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))

COLUMNS = ["model", "family", "stmts", "stock measured", "memopt measured", "modelled", "lower bound", "status",
           "saving %", "bitwise", "exact", "sched s", "compile s", "capture s", "stock compile s"]
PASS_COLUMNS = ["model", "pass stock modelled", "pass modelled", "pass measured", "pass vs stock", "pass bitwise",
                "pass status", "pass 1st s", "pass 1st cache", "pass 2nd s", "pass 2nd cache"]


def _cold(tmp: str, tag: str) -> None:
    """A fresh Inductor cache directory and Inductor's in-process caches cleared."""
    from torch._inductor.utils import clear_inductor_caches

    os.environ["TORCHINDUCTOR_CACHE_DIR"] = os.path.join(tmp, tag)
    clear_inductor_caches()


def _cache_counts(before: dict) -> str:
    from torch._dynamo.utils import counters

    keys = ("fxgraph_cache_hit", "fxgraph_cache_miss", "fxgraph_cache_bypass")
    got = {k[14:]: counters["inductor"][k] - before.get(k, 0) for k in keys}
    return " ".join(f"{k} {v}" for k, v in got.items())


def _start_up() -> None:
    """Inductor's one-time start-up, paid before any timed phase."""
    import torch

    with torch.no_grad():
        torch.compile(lambda x: (x + 1).relu(), backend="inductor", options={"fx_graph_cache": False})(
            torch.ones(8))


def row(name: str, *, time_limit: float = 10.0, compile_path: bool = True, size: int | None = None,
        save_dir: str | None = None) -> dict:
    """One row (``COLUMNS`` and, with ``compile_path``, ``PASS_COLUMNS``) for real-zoo model ``name``;
    ``save_dir``: also write the captured program there (``NAME.program.json``)."""
    import torch
    from torch._dynamo.utils import counters

    from memopt.adapters import inductor
    from memopt.zoo import real

    if name in real.names():
        model, inputs = real.build(name, size=size)
        out: dict = {"model": name, "family": real.family(name)}
    else:  # a hand-written mini (a quick check of the benchmark itself)
        from memopt import zoo

        model, inputs = zoo.build(name)
        out = {"model": name, "family": zoo.family(name)}
    with tempfile.TemporaryDirectory(prefix="memopt-real-inductor-") as tmp:
        _cold(tmp, "start")
        _start_up()
        _cold(tmp, "stock")
        torch._dynamo.reset()
        t0 = time.perf_counter()
        with torch.no_grad():
            torch.compile(model, backend="inductor", options={"fx_graph_cache": False})(*inputs)
        out["stock compile s"] = round(time.perf_counter() - t0, 1)

        _cold(tmp, "capture")
        t0 = time.perf_counter()
        cap = inductor.capture(model, *inputs)
        out["capture s"] = round(time.perf_counter() - t0, 1)
        out["capture phases"] = {k: round(v, 2) for k, v in cap.seconds.items()}
        if save_dir:  # the program itself, for re-running the scheduler on it alone
            from memopt.io import program_to_doc

            with open(os.path.join(save_dir, f"{name}.program.json"), "w") as f:
                json.dump(program_to_doc(cap.program), f)
        rep = inductor.optimize_capture(cap, time_limit=time_limit)
        stock = rep.measured_peak_stock
        out.update({"stmts": len(cap.program.statements), "stock measured": stock,
                    "memopt measured": rep.measured_peak, "modelled": rep.modelled_peak,
                    "stock modelled": rep.modelled_peak_stock, "lower bound": rep.lower_bound,
                    "status": rep.status, "saving %": f"{100.0 * (stock - rep.measured_peak) / stock:.3f}",
                    "bitwise": rep.bitwise_equal,
                    "exact": (rep.modelled_peak == rep.measured_peak and rep.modelled_peak_stock == stock
                              and not cap.mismatches),
                    "sched s": round(rep.seconds, 3), "compile s": round(rep.compile_seconds, 3),
                    "schedule call s": round(rep.call_seconds, 3)})
        reference = cap.run()
        del cap, rep
        if compile_path:
            out.update(_pass_columns(model, inputs, reference, time_limit, tmp, stock, counters))
    return out


def _pass_columns(model, inputs, reference, time_limit: float, tmp: str, stock: int, counters) -> dict:
    """The ``torch.compile`` path's columns: the first compile with the pass is captured
    (``measure=False``: the program is only run and measured, FX-graph cache on), the second
    is a plain ``torch.compile`` with equal options, which the cache should serve."""
    import torch

    from memopt.adapters import inductor

    out: dict = {}
    _cold(tmp, "pass")
    torch._dynamo.reset()
    opts = inductor.compile_path_options(time_limit)
    before = dict(counters["inductor"])
    t0 = time.perf_counter()
    pcap = inductor.capture(model, *inputs, measure=False, fx_graph_cache=True, **opts)
    out["pass 1st s"] = round(time.perf_counter() - t0, 1)
    out["pass 1st cache"] = _cache_counts(before)
    last = opts["_post_fusion_custom_pass"].last
    if last is not None:
        out["pass stock modelled"], out["pass modelled"], _, out["pass status"] = last
    measured, got = pcap.measure()
    out["pass measured"] = measured
    out["pass vs stock"] = f"{100.0 * (stock - measured) / stock:+.3f} %"
    out["pass bitwise"] = inductor._bitwise_equal(got, reference, torch)
    del pcap
    torch._dynamo.reset()
    opts = dict(inductor.compile_path_options(time_limit), fx_graph_cache=True)
    before = dict(counters["inductor"])
    t0 = time.perf_counter()
    with torch.no_grad():
        torch.compile(model, backend="inductor", options=opts)(*inputs)
    out["pass 2nd s"] = round(time.perf_counter() - t0, 1)
    out["pass 2nd cache"] = _cache_counts(before)
    return out


def real_inductor_rows(names, *, time_limit: float = 10.0, compile_path: bool = True, jsonl: str | None = None,
                       save_dir: str | None = None, progress=None,
                       timeout: float = 7200.0) -> tuple[list[dict], list[str]]:
    """One row per model, each computed in a child process (``--row``); notes for the models
    whose child failed. With ``jsonl`` every row is appended to that file as it is done."""
    rows, notes = [], []
    for name in names:
        cmd = [sys.executable, os.path.abspath(__file__), "--row", name, "--time-limit", str(time_limit)]
        if not compile_path:
            cmd.append("--no-compile-path")
        if save_dir:
            cmd += ["--save-programs", save_dir]
        try:
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            notes.append(f"{name}: not done within {timeout:g} s")
            continue
        lines = [ln for ln in p.stdout.splitlines() if ln.startswith("{")]
        if p.returncode != 0 or not lines:
            err = (p.stderr.strip().splitlines() or ["no output"])[-1]
            notes.append(f"{name}: exit {p.returncode}: {err[:200]}")
            continue
        r = json.loads(lines[-1])
        rows.append(r)
        if jsonl:
            with open(jsonl, "a") as f:
                f.write(json.dumps(r) + "\n")
        if progress is not None:
            progress(r)
    return rows, notes


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("models", nargs="*", help="memopt.zoo.real models (default: all)")
    ap.add_argument("--time-limit", type=float, default=10.0)
    ap.add_argument("--no-compile-path", action="store_true", help="skip the torch.compile pass path")
    ap.add_argument("--jsonl", metavar="FILE", help="append each row to FILE as one JSON line")
    ap.add_argument("--save-programs", metavar="DIR", help="write each captured program to DIR/MODEL.program.json")
    ap.add_argument("--row", metavar="MODEL", help=argparse.SUPPRESS)  # the child process: one row, as JSON
    args = ap.parse_args(argv)
    from memopt._torchvision import allow_import

    allow_import()
    if args.row:
        print(json.dumps(row(args.row, time_limit=args.time_limit, compile_path=not args.no_compile_path,
                             save_dir=args.save_programs)))
        return 0
    from adapters_inductor import markdown

    from memopt.zoo import real

    rows, notes = real_inductor_rows(args.models or real.names(), time_limit=args.time_limit,
                                     compile_path=not args.no_compile_path, jsonl=args.jsonl,
                                     save_dir=args.save_programs,
                                     progress=lambda r: print(f"done: {r['model']}", file=sys.stderr, flush=True))
    print(markdown(rows, COLUMNS))
    if not args.no_compile_path:
        print()
        print(markdown(rows, PASS_COLUMNS))
    for n in notes:
        print("note:", n)
    return 0


if __name__ == "__main__":
    sys.path.insert(0, HERE)
    raise SystemExit(main())
