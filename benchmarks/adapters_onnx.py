"""ONNX models in onnxruntime: the default execution order against memopt's order.

    python benchmarks/adapters_onnx.py [--time-limit S] [--no-zoo | --zoo real] [--markdown] [MODEL...]

Models: the models built with ``onnx.helper`` in ``tests/adapters/_onnx_models.py``
(inception-like branches, a long skip, a diamond, a chain of views, two branches one of which
is a convolution holding scratch) and, when torch is installed, every model of ``memopt.zoo``
exported to ONNX (opset 17, TorchScript exporter). With ``--zoo real``: the models of
:mod:`memopt.zoo.real` instead (torchvision and two networks of its own, random weights,
batch 1, its small resolutions; exported by ``memopt.zoo.real.export_onnx``, the TorchScript
exporter, opset 17, as ``benchmarks/real_corpus.py`` does), or the ``MODEL`` names given.

Columns, per model: ops; resident bytes (weights and inputs, the same in every order; what an
order changes is the rest); how many nodes hold a measured scratch workspace; the peak of onnxruntime's default order (memopt's model = onnxruntime's
planner simulated, and measured); the same for memopt's order written to the file and run with
``ExecutionOrder.PRIORITY_BASED``; the lower bound and status of memopt's plan; scheduling
seconds; whether the outputs are bitwise identical; ``exact``: ``yes`` when the bytes measured
after every kernel equal the model's in both runs and the arena's own high-water mark equals
the model's (each kernel's scratch is its measured workspace), ``kernels`` when only the
former holds; ``scratch``: the largest scratch the arena saw above its kernel-boundary samples
(chunk bytes). Memory in bytes (peaks include the convolutions' scratch); see
docs/adapters.md for the measurement. ``DEFAULT_HEAD``: the same two models under
onnxruntime's default session options (arena peak in use and reservation above the start of
the first run, over two runs; ``kept input``: memopt's order was above the input there, so
the input was written unchanged).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "adapters"))


def _real_models(tmp: str, names):
    from memopt.zoo import real

    for name in names or real.names():
        try:
            yield f"real/{name}", real.export_onnx(name, os.path.join(tmp, f"real_{name}.onnx"))
        except Exception as exc:  # an exporter limitation, not memopt's
            yield f"real/{name}", exc


def _models(tmp: str, zoo, names=None):
    import _onnx_models as M
    import onnx

    if zoo == "real":
        yield from _real_models(tmp, names)
        return
    for name, fn in {**M.ALL, "conv_scratch": M.conv_scratch}.items():
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


HEAD = ["model", "ops", "resident", "workspaces", "ort modelled", "ort measured", "memopt modelled", "memopt measured",
        "saved", "lower bound", "status", "seconds", "bitwise", "exact", "scratch"]
DEFAULT_HEAD = ["model", "default before", "default after", "default saved", "held before", "held after", "kept input"]


def onnx_rows(*, time_limit: float = 10.0, zoo=True, names=None, progress=None) -> tuple[list[dict], list[str]]:
    """One row (``HEAD`` and ``DEFAULT_HEAD`` keys, plus the :class:`ReorderReport` as
    ``report``) per model, and notes for the models that could not be run. ``zoo``: ``True``
    (the minis too), ``False`` or ``"real"`` (:mod:`memopt.zoo.real`, ``names`` or all).
    ``progress(row)`` is called as each is done."""
    from memopt.adapters import onnx as adapter
    from memopt.errors import MemoptError

    rows: list[dict] = []
    notes: list[str] = []
    with tempfile.TemporaryDirectory(prefix="memopt-onnx-bench-") as tmp:
        for name, path in _models(tmp, zoo, names):
            if isinstance(path, Exception):
                notes.append(f"{name}: export failed ({type(path).__name__})")
                continue
            try:
                r = adapter.reorder(path, os.path.join(tmp, "out.onnx"), time_limit=time_limit)
            except MemoptError as exc:
                if "expanded or fused" not in str(exc):
                    notes.append(f"{name}: {' '.join(str(exc).split())[:160]}")
                    continue
                # not measurable node by node (exact mode); the defaults need no per-node match
                notes.append(f"{name}: exact mode not measurable (onnxruntime expands or fuses some nodes); "
                             "the file order is the baseline, default mode only")
                r = adapter.reorder(path, os.path.join(tmp, "out.onnx"), time_limit=time_limit, measure_runs=False,
                                    defaults=True)
            if r.measured_before is None:
                exact = "n/a"
            elif r.kernels_equal_before and r.kernels_equal_after:
                exact = "yes" if (r.exact_before and r.exact_after) else "kernels"
            else:
                exact = "NO"
            saved = None if r.measured_before is None else r.measured_before - r.measured_after
            row = dict(zip(HEAD, [name, r.ops, r.resident_bytes, r.workspace_nodes, r.modelled_before, r.measured_before,
                                  r.modelled_after, r.measured_after, saved, r.lower_bound,
                                  r.status, f"{r.seconds:.3f}", {True: "yes", False: "NO", None: "n/a"}[r.bitwise_equal],
                                  exact, max(r.scratch_before or 0, r.scratch_after or 0)]))
            row.update(dict(zip(DEFAULT_HEAD[1:], [r.default_before, r.default_after, r.default_before - r.default_after,
                                                   r.default_held_before, r.default_held_after,
                                                   "yes" if r.kept_original_for_defaults else "no"])))
            row["report"] = r
            rows.append(row)
            if progress is not None:
                progress(row)
    return rows, notes


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--time-limit", type=float, default=10.0)
    ap.add_argument("models", nargs="*", help="with --zoo real: these models only")
    ap.add_argument("--no-zoo", action="store_true", help="only the onnx.helper models")
    ap.add_argument("--zoo", choices=["real"], help="the models of memopt.zoo.real instead")
    ap.add_argument("--markdown", action="store_true", help="print a Markdown table")
    args = ap.parse_args(argv)

    from memopt.cli._output import print_table

    rows, notes = onnx_rows(time_limit=args.time_limit, zoo=args.zoo or not args.no_zoo, names=args.models)
    for head in (HEAD, DEFAULT_HEAD):
        if args.markdown:
            print("| " + " | ".join(head) + " |")
            print("|" + "---|" * len(head))
            for row in rows:
                print("| " + " | ".join(str(row[c]) for c in head) + " |")
        else:
            print_table([[row[c] for c in head] for row in rows], header=head, align="l" + "r" * (len(head) - 1))
        print()
    for n in notes:
        print("note:", n)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
