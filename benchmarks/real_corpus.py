"""The real-network corpus: every model of :mod:`memopt.zoo.real` as memopt-graph JSON, and one table.

Each model (batch 1, its documented small resolution, random weights) is exported with the
TorchScript ONNX exporter and read by memopt's ONNX importer (op costs: multiply-accumulates
for Conv/ConvTranspose/MatMul/Gemm, element counts for the rest); the graph is written to
``OUT/<model>.json`` and scheduled without recomputation by :func:`memopt.schedule`.

Columns: the set the model belongs to (``tuning`` or ``held-out``, :data:`memopt.zoo.real.TUNING`
— tune methods on the first, report on the second), the input shape, ops and tensors of the
graph, the multiply-accumulates of its Conv/ConvTranspose/MatMul/Gemm nodes, the sum of all op
costs, the resident bytes (weights and the input), the peak of the exporter's node order, and
memopt's peak, that peak less the resident bytes (activations), its lower bound, status and
wall time (the whole ``schedule`` call, numba kernels compiled beforehand).

    python benchmarks/real_corpus.py [OUT] [--models M ...] [--time-limit 10] [--keep-onnx]

``OUT`` defaults to ``benchmarks/corpus/`` (git-ignored: the files are large). Needs torch and
torchvision (``pip install --no-deps torchvision==0.28.0``) and the onnx extra.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_OUT = os.path.join(HERE, "corpus")
MAC_OPS = ("Conv", "ConvTranspose", "MatMul", "Gemm")


def corpus_row(name: str, out_dir: str, onnx_dir: str, time_limit: float) -> dict:
    """Export, import, write and schedule one model; its table row."""
    import onnx

    import memopt
    from memopt.adapters.onnx import load
    from memopt.core import peak
    from memopt.io import save_graph
    from memopt.zoo import real

    onnx_path = real.export_onnx(name, os.path.join(onnx_dir, f"{name}.onnx"))
    g, mapping = load(onnx_path, name=name)
    save_graph(g, os.path.join(out_dir, f"{name}.json"))
    nodes = onnx.load(onnx_path, load_external_data=False).graph.node
    cost = g.op_cost.tolist()
    macs = sum(int(cost[v]) for v, f in enumerate(mapping.op_node) if nodes[f].op_type in MAC_OPS)
    t0 = time.perf_counter()
    res = memopt.schedule(g, time_limit=time_limit)
    secs = time.perf_counter() - t0
    shape = "x".join(map(str, real.input_shape(name)))
    return {"model": name, "set": "tuning" if name in real.TUNING else "held-out", "input": shape,
            "ops": g.num_ops, "tensors": g.num_tensors, "MACs": macs, "total cost": sum(int(c) for c in cost),
            "resident": mapping.resident_bytes, "file-order peak": int(peak(g, list(range(g.num_ops)))),
            "memopt peak": int(res.peak), "activations": int(res.peak) - mapping.resident_bytes,
            "lower bound": int(res.lower_bound), "status": res.status,
            "seconds": round(secs, 1)}


def markdown(rows: list[dict]) -> str:
    cols = list(rows[0])
    lines = ["| " + " | ".join(cols) + " |", "|" + "|".join("---:" if isinstance(rows[0][c], (int, float)) else "---"
                                                          for c in cols) + "|"]
    for r in rows:
        lines.append("| " + " | ".join(f"{r[c]:,}" if isinstance(r[c], int) else str(r[c]) for c in cols) + " |")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", nargs="?", default=DEFAULT_OUT, help="folder for the graph JSON files")
    ap.add_argument("--models", nargs="*", help="a subset of memopt.zoo.real.names()")
    ap.add_argument("--time-limit", type=float, default=10.0, help="memopt.schedule's limit per model (seconds)")
    ap.add_argument("--keep-onnx", action="store_true", help="also keep the exported ONNX files in OUT")
    args = ap.parse_args(argv)

    from memopt.errors import MemoptError
    from memopt.zoo import real

    try:
        names = args.models or real.names()
        for n in names:
            real.family(n)   # an unknown name is an OptionError before any export
        os.makedirs(args.out, exist_ok=True)
        # compile the numba kernels once, outside the timings (as benchmarks/schedule_table.py)
        from memopt import _jit
        from memopt.io import load_instance
        from memopt.schedule import schedule_instance

        with _jit.mode("compiled"):
            schedule_instance(load_instance(os.path.join(HERE, "..", "instances", "mlp_train.json")), time_limit=1.0)
        rows = []
        with tempfile.TemporaryDirectory(prefix="memopt-corpus-") as tmp:
            for n in names:
                rows.append(corpus_row(n, args.out, args.out if args.keep_onnx else tmp, args.time_limit))
                r = rows[-1]
                print(f"  {n}: {r['ops']} ops, peak {r['memopt peak']:,} ({r['status']}, {r['seconds']} s)",
                      file=sys.stderr, flush=True)
    except MemoptError as exc:
        print(f"real_corpus: {exc}", file=sys.stderr)
        return 2
    print(markdown(rows))
    print(f"\ntuning set: {', '.join(real.TUNING)}; held-out: {', '.join(real.HELD_OUT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
