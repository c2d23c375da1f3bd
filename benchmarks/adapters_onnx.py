"""ONNX models in onnxruntime: the default execution order against memopt's order.

    python benchmarks/adapters_onnx.py [--time-limit S] [--no-zoo] [--markdown]

Models: the branching models built with ``onnx.helper`` in ``tests/adapters/_onnx_models.py``
(inception-like branches, a long skip, a diamond, a chain of views) and, when torch is
installed, every model of ``memopt.zoo`` exported to ONNX (opset 17, TorchScript exporter).

Columns, per model: ops; resident bytes (weights and inputs, the same in every order; what an
order changes is the rest); the peak of onnxruntime's default order (memopt's model = onnxruntime's
planner simulated, and measured); the same for memopt's order written to the file and run with
``ExecutionOrder.PRIORITY_BASED``; the lower bound and status of memopt's plan; scheduling
seconds; whether the outputs are bitwise identical; ``exact``: ``yes`` when the bytes measured
after every kernel equal the model's in both runs and no kernel held scratch memory, ``kernels``
when they are equal after every kernel but some kernel held scratch inside its call (a
convolution's buffers: the arena's high-water mark, rounded, is then above the model by
``scratch``). Memory in bytes; see docs/adapters.md for the measurement.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "adapters"))


def _models(tmp: str, zoo: bool):
    import _onnx_models as M
    import onnx

    for name, fn in M.ALL.items():
        path = os.path.join(tmp, f"{name}.onnx")
        onnx.save(fn(), path)
        yield name, path
    if not zoo:
        return
    try:
        import torch

        from memopt import zoo as z
    except ImportError:
        return
    for name in z.names():
        model, example = z.build(name)
        path = os.path.join(tmp, f"zoo_{name}.onnx")
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                torch.onnx.export(model, example, path, dynamo=False, opset_version=17)
        except Exception as exc:  # an exporter limitation, not memopt's
            yield f"zoo/{name}", exc
            continue
        yield f"zoo/{name}", path


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--time-limit", type=float, default=10.0)
    ap.add_argument("--no-zoo", action="store_true", help="only the onnx.helper models")
    ap.add_argument("--markdown", action="store_true", help="print a Markdown table")
    args = ap.parse_args(argv)

    from memopt.adapters import onnx as adapter
    from memopt.cli._output import print_table
    from memopt.errors import MemoptError

    head = ["model", "ops", "resident", "ort modelled", "ort measured", "memopt modelled", "memopt measured", "saved",
            "lower bound", "status", "seconds", "bitwise", "exact", "scratch"]
    rows = []
    notes = []
    with tempfile.TemporaryDirectory(prefix="memopt-onnx-bench-") as tmp:
        for name, path in _models(tmp, not args.no_zoo):
            if isinstance(path, Exception):
                notes.append(f"{name}: export failed ({type(path).__name__})")
                continue
            try:
                r = adapter.reorder(path, os.path.join(tmp, "out.onnx"), time_limit=args.time_limit)
            except MemoptError as exc:
                notes.append(f"{name}: {' '.join(str(exc).split())[:160]}")
                continue
            if r.kernels_equal_before and r.kernels_equal_after:
                exact = "yes" if (r.scratch_before == 0 and r.scratch_after == 0) else "kernels"
            else:
                exact = "NO"
            saved = r.measured_before - r.measured_after
            rows.append([name, r.ops, r.resident_bytes, r.modelled_before, r.measured_before, r.modelled_after, r.measured_after,
                         saved, r.lower_bound, r.status, f"{r.seconds:.3f}", "yes" if r.bitwise_equal else "NO",
                         exact, max(r.scratch_before, r.scratch_after)])
    if args.markdown:
        print("| " + " | ".join(head) + " |")
        print("|" + "---|" * len(head))
        for row in rows:
            print("| " + " | ".join(str(c) for c in row) + " |")
    else:
        print_table(rows, header=head, align="lrrrrrrrrlrlll")
    for n in notes:
        print("note:", n)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
