"""The adapters benchmark: memopt against the compilers' own orders, per zoo model, in one run.

    python benchmarks/adapters_table.py [--time-limit 1] [--no-training | --training-models M ...] [--no-onnx]
                                        [--json FILE] [MODEL...]
    python benchmarks/adapters_table.py --zoo real [--time-limit 1] [--json FILE] [--no-onnx]
                                        [--inductor [--inductor-jsonl FILE]] [MODEL...]

Sections (bytes; "stock" is what the compiler or runtime does by itself, "memopt" the same
program in memopt's order, "measured" taken at the allocator, see docs/adapters.md):

1. PyTorch Inductor, inference (``torch.compile`` on CPU, ``no_grad``): the generated wrapper
   as Inductor emitted it against memopt's permutation of its statements, with Inductor's own
   ``estimate_peak_memory`` for its order;
2. PyTorch Inductor, training: the forward and backward programs of one training step;
3. ONNX / onnxruntime: onnxruntime's default execution order against the model rewritten in
   memopt's order (the ``onnx.helper`` models and the zoo exported to ONNX);
4. every difference between Inductor's estimate and the stock program's peak, itemised by
   cause (:func:`memopt.adapters.inductor.attribute_estimate`);
5. the targets, checked: modelled = measured to the byte and bitwise-identical outputs
   in every run, certified optimal on >= 90 % of the programs each in < 1 s of scheduling,
   memopt's measured peak lower than stock on branching networks and higher on none, and no
   unattributed estimate difference.

``--zoo real`` runs section 3 on :mod:`memopt.zoo.real` (exported as
``benchmarks/real_corpus.py`` does), with each model's peaks under onnxruntime's default
session options too, and checks the ONNX targets; ``--inductor`` adds section 1 on the same
models (``benchmarks/adapters_inductor.py --real``: the wrapper path and the ``torch.compile``
pass path, capture and stock compile seconds; capturing a real model costs minutes per
compile, so ``--inductor-jsonl FILE`` keeps the rows and lays out those of earlier runs).
"seconds" / "sched s" is the scheduling call's own time (:attr:`ScheduleResult.seconds`);
"first use s" / "compile s" what a first call in the process spent compiling memopt's
kernels and importing its modules, reported apart.

The rows come from the two per-adapter benchmarks (``adapters_inductor.inductor_rows``,
``adapters_onnx.onnx_rows``); this script only lays them out and checks the targets.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

INDUCTOR_COLS = ["model", "family", "stmts", "inductor est.", "stock model", "stock measured", "memopt model",
                 "memopt measured", "lower bound", "certified", "sched s", "bitwise", "exact"]
ONNX_COLS = ["model", "family", "ops", "workspaces", "ort modelled", "ort measured", "memopt modelled",
             "memopt measured", "lower bound", "certified", "seconds", "bitwise", "exact"]
REAL_ONNX_COLS = ["model", "family", "ops", "resident", "ort measured", "memopt measured", "saved", "lower bound",
                  "certified", "seconds", "first use s", "bitwise", "exact", "default before", "default after",
                  "default saved", "held before", "held after", "kept input"]
PROVED = ("certified", "optimal")


def _certified(status: str) -> str:
    return f"yes ({status})" if status in PROVED else f"no ({status})"


def _onnx_family(name: str) -> str:
    import _onnx_models as M

    if name.startswith("real/"):
        from memopt.zoo import real

        return real.family(name[5:])
    if name.startswith("zoo/"):
        from memopt import zoo

        return zoo.family(name[4:])
    return "multi-branch" if name in M.BRANCHING or name == "conv_scratch" else "chain"


def _table(rows: list[dict], cols: list[str]) -> str:
    from adapters_inductor import markdown

    return markdown(rows, cols)


def check_targets(inductor: list[dict], onnx: list[dict], time_limit: float) -> list[str]:
    """The targets as ``PASS``/``FAIL`` lines, over every program of the run."""
    lines = []
    programs = [("inductor", r, r["memopt model"], r["memopt measured"], r["stock model"], r["stock measured"])
                for r in inductor]
    programs += [("onnx", r, r["memopt modelled"], r["memopt measured"], r["ort modelled"], r["ort measured"])
                 for r in onnx]
    n = len(programs)

    def verdict(ok: bool) -> str:
        return "PASS" if ok else "FAIL"

    exact = [r["model"] for kind, r, *_ in programs if (r["exact"] is True) or (r["exact"] == "yes")]
    not_exact = [f"{kind}:{r['model']}" for kind, r, *_ in programs if r["model"] not in exact]
    lines.append(f"{verdict(len(exact) == n)} modelled = measured to the byte (stock and memopt, every statement / "
                 f"kernel, kernel scratch included): {len(exact)}/{n}" + (f"; not: {', '.join(not_exact)}" if not_exact else ""))
    bitwise = [r for _, r, *_ in programs if r["bitwise"] in (True, "yes")]
    lines.append(f"{verdict(len(bitwise) == n)} bitwise-identical outputs: {len(bitwise)}/{n}")
    proved = [r for _, r, *_ in programs if r["certified"].startswith("yes")
              and float(r.get("sched s", r.get("seconds"))) < 1.0]
    lines.append(f"{verdict(len(proved) >= 0.9 * n)} certified optimal in < 1 s of scheduling: {len(proved)}/{n} "
                 f"({100.0 * len(proved) / max(n, 1):.0f} %, target >= 90 %; time limit {time_limit:g} s)")
    higher = [f"{kind}:{r['model']}" for kind, r, _, measured, _, stock in programs if measured > stock]
    lines.append(f"{verdict(not higher)} memopt's measured peak higher than stock on none: "
                 + (", ".join(higher) if higher else "none higher"))
    branching = [(kind, r, measured, stock) for kind, r, _, measured, _, stock in programs
                 if r["family"] not in ("microcontroller", "chain")]
    lower = [f"{kind}:{r['model']} ({stock} -> {measured}, {100.0 * (measured - stock) / stock:+.2f} %)"
             for kind, r, measured, stock in branching if measured < stock]
    tied = [r for _, r, measured, stock in branching if measured == stock]
    tied_proved = [r for r in tied if r["certified"].startswith("yes")]
    lines.append(f"{'PASS' if lower else 'FAIL'} branching networks where memopt's measured peak is lower than stock: "
                 f"{len(lower)}/{len(branching)}: {'; '.join(lower) or 'none'}")
    lines.append(f"     on the other {len(tied)} branching programs stock is already optimal for the program it "
                 f"generated ({len(tied_proved)} of them proved: memopt's lower bound equals the stock peak)")
    attributed = [r for r in inductor if r.get("estimate_differences")]
    unexplained = [f"{r['model']} ({d.bytes:+d})" for r in attributed for d in r["estimate_differences"]
                   if d.cause == "unattributed" and d.bytes]
    differs = [r for r in attributed if r["inductor est."] != r["stock model"]]
    lines.append(f"{verdict(not unexplained and len(attributed) == len(inductor))} Inductor's estimate vs the measured "
                 f"stock peak: differs on {len(differs)}/{len(inductor)} programs, every difference itemised by cause "
                 f"(section 4)" + (f"; unattributed: {', '.join(unexplained)}" if unexplained else "")
                 + ("" if len(attributed) == len(inductor) else
                    f"; no estimate recorded for {len(inductor) - len(attributed)}"))
    return lines


def real_inductor_targets(rows: list[dict], time_limit: float) -> list[str]:
    """The Inductor targets on the real zoo's rows (``adapters_inductor.real_inductor_rows``)."""
    passed = [r for r in rows if "pass measured" in r]  # rows whose pass path was run

    def count(pred, over=rows) -> str:
        if not over:
            return "n/a {}: the pass path was not run"
        bad = [r["model"] for r in over if not pred(r)]
        return (f"{'PASS' if not bad else 'FAIL'} {{}}: {len(over) - len(bad)}/{len(over)}"
                + (f"; not: {', '.join(bad)}" if bad else ""))

    return [
        count(lambda r: r["exact"]).format("measured = modelled to the byte (stock and memopt)"),
        count(lambda r: r["bitwise"]).format("bitwise-equal outputs (wrapper path)"),
        count(lambda r: r["pass bitwise"], passed).format("bitwise-equal outputs (pass path)"),
        count(lambda r: r["memopt measured"] <= r["stock measured"]).format("memopt's measured peak never above stock"),
        count(lambda r: r["pass measured"] <= r["stock measured"], passed).format(
            "the pass path's measured peak never above stock"),
        count(lambda r: r["sched s"] <= time_limit + 1.0).format(f"scheduling within the time limit + 1 s ({time_limit:g} s)"),
        count(lambda r: r["status"] in PROVED and r["sched s"] < 1.0).format("certified optimal within 1 s of scheduling"),
        count(lambda r: "hit 1" in r["pass 2nd cache"], passed).format("FX-graph cache hit on the pass path's second compile"),
        count(lambda r: r["memopt measured"] < r["stock measured"] if r["lower bound"] < r["stock measured"]
              else r["status"] in PROVED).format("a saving wherever the lower bound allows one, else stock proved optimal"),
        count(lambda r: capture_cost_ratio(r) <= 1.5, [r for r in rows if capture_cost_ratio(r) is not None]).format(
            "capture + optimize within 1.5x stock torch.compile (CPU seconds, first use included)"),
    ]


def capture_cost_ratio(row: dict) -> float | None:
    """(capture + optimize) / stock ``torch.compile``, in CPU seconds of the process and its compile
    workers (``None`` for a row without them); a training row's capture and stock compile are the
    whole step's, its optimize its own program's."""
    cpu = [row.get(k) for k in ("capture cpu s", "optimize cpu s", "stock compile cpu s")]
    if any(c is None for c in cpu) or not cpu[2]:
        return None
    return (cpu[0] + cpu[1]) / cpu[2]


def real_inductor_section(names, time_limit: float, jsonl: str | None) -> list[dict]:
    """Section 1 on the real zoo: rows computed now (one child process per model) or, with
    ``jsonl`` naming an existing file, the rows collected there by earlier runs."""
    import adapters_inductor as R

    if jsonl and os.path.exists(jsonl):
        with open(jsonl) as f:
            rows = [json.loads(line) for line in f if line.strip()]
        rows = [r for r in rows if not names or r["model"] in names]
        notes = []
    else:
        from memopt.zoo import real

        rows, notes = R.real_inductor_rows(names or real.names(), time_limit=time_limit, jsonl=jsonl,
                                           progress=lambda r: print(f"done: {r['model']}", file=sys.stderr, flush=True))
    for r in rows:
        if "pass measured" in r:  # against the stock wrapper's measured peak; negative: above stock
            r["pass saving %"] = f"{100.0 * (r['stock measured'] - r['pass measured']) / r['stock measured']:.3f}"
    print("## 1. PyTorch Inductor, inference, memopt.zoo.real (stock = the wrapper Inductor generated)\n")
    print(_table(rows, R.REAL_COLUMNS))
    print("\n### torch.compile path (MemoptSchedulerPass as _post_fusion_custom_pass)\n")
    print(_table(rows, R.REAL_PASS_COLUMNS))
    for n in notes:
        print("note:", n)
    print("\n### Targets (Inductor)\n")
    for line in real_inductor_targets(rows, time_limit):
        print(line)
    print()
    return rows


def real_zoo(names, time_limit: float, json_path: str | None, *, inductor: bool = False, onnx: bool = True,
             inductor_jsonl: str | None = None) -> int:
    """``--zoo real``: the ONNX section and its targets on :mod:`memopt.zoo.real`, and with
    ``inductor`` the Inductor section (:func:`real_inductor_section`)."""
    from adapters_onnx import onnx_rows

    t0 = time.perf_counter()
    inductor_rows_ = real_inductor_section(names, time_limit, inductor_jsonl) if inductor else []
    rows, notes = [], []
    if onnx:
        rows, notes = onnx_rows(time_limit=time_limit, zoo="real", names=names or None,
                                progress=lambda row: print(f"[{time.perf_counter() - t0:7.1f} s] {row['model']}",
                                                           file=sys.stderr, flush=True))
    for r in rows:
        r["family"] = _onnx_family(r["model"])
        r["certified"] = _certified(r["status"])
        r["first use s"] = f"{r['report'].compile_seconds:.3f}"
    if not onnx:
        _dump(json_path, {"inductor": inductor_rows_})
        return 0
    print("## 3. ONNX in onnxruntime, memopt.zoo.real (exact mode: stock = onnxruntime's default order; "
          "default mode: onnxruntime's default session options)\n")
    print(_table(rows, REAL_ONNX_COLS))
    for n in notes:
        print("note:", n)
    print("\n## 5. Targets (ONNX)\n")
    exact_rows = [r for r in rows if r["ort measured"] is not None]
    print(f"(exact-mode targets on the {len(exact_rows)} models onnxruntime runs node by node)")
    for line in check_targets([], exact_rows, time_limit)[:-1]:
        print(line)
    worse = [r["model"] for r in rows if r["default after"] > r["default before"] or r["held after"] > r["held before"]]
    kept = [r["model"] for r in rows if r["kept input"] == "yes"]
    print(f"{'FAIL' if worse else 'PASS'} under onnxruntime's defaults never worse than the input: "
          + (", ".join(worse) if worse else "none worse")
          + (f" (input written unchanged: {', '.join(kept)})" if kept else ""))
    print(f"\n(total {time.perf_counter() - t0:.0f} s)")
    _dump(json_path, {"inductor": inductor_rows_,
                      "onnx": [{k: (v.to_dict() if k == "report" else v) for k, v in r.items()} for r in rows],
                      "notes": notes})
    return 0


def _dump(json_path: str | None, doc: dict) -> None:
    if json_path:
        with open(json_path, "w") as f:
            json.dump(doc, f, indent=1)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("models", nargs="*", help="zoo models (default: all)")
    ap.add_argument("--time-limit", type=float, default=1.0, help="memopt's scheduling limit per program (s)")
    ap.add_argument("--no-training", action="store_true", help="skip the training programs (slow to compile)")
    ap.add_argument("--training-models", nargs="+", metavar="MODEL",
                    help="capture training steps of these zoo models only (default: the same models as inference)")
    ap.add_argument("--no-onnx", action="store_true")
    ap.add_argument("--json", metavar="FILE", help="also write every row as JSON")
    ap.add_argument("--zoo", choices=["mini", "real"], default="mini",
                    help="real: section 3 (ONNX) on memopt.zoo.real, with onnxruntime's default options")
    ap.add_argument("--inductor", action="store_true",
                    help="with --zoo real: also section 1 (Inductor, wrapper and pass paths; minutes per model)")
    ap.add_argument("--inductor-jsonl", metavar="FILE",
                    help="with --inductor: append the Inductor rows to FILE; if FILE exists, lay out its rows instead")
    args = ap.parse_args(argv)
    if args.zoo == "real":
        from memopt._torchvision import allow_import

        allow_import()
        return real_zoo(args.models, args.time_limit, args.json, inductor=args.inductor, onnx=not args.no_onnx,
                        inductor_jsonl=args.inductor_jsonl)

    from adapters_inductor import attribution_lines, inductor_rows

    from memopt import zoo

    names = args.models or zoo.names()
    t0 = time.perf_counter()

    def progress(row):
        print(f"[{time.perf_counter() - t0:7.1f} s] {row['model']}", file=sys.stderr, flush=True)

    inference = inductor_rows(names, time_limit=args.time_limit, progress=progress)
    training = [] if args.no_training else inductor_rows(args.training_models or names, time_limit=args.time_limit,
                                                         training=True, progress=progress)
    onnx: list[dict] = []
    notes: list[str] = []
    if not args.no_onnx:
        from adapters_onnx import onnx_rows

        onnx, notes = onnx_rows(time_limit=args.time_limit, zoo=True, progress=progress)
        keep = {f"zoo/{n}" for n in names}
        onnx = [r for r in onnx if not r["model"].startswith("zoo/") or r["model"] in keep]
        for r in onnx:
            r["family"] = _onnx_family(r["model"])
            r["certified"] = _certified(r["status"])
    for r in inference + training:
        r["certified"] = _certified(r["status"])

    print("## 1. PyTorch Inductor, inference (stock = the wrapper Inductor generated)\n")
    print(_table(inference, INDUCTOR_COLS))
    if training:
        print("\n## 2. PyTorch Inductor, training step (forward and backward programs)\n")
        print(_table(training, INDUCTOR_COLS))
    if onnx or notes:
        print("\n## 3. ONNX in onnxruntime (stock = onnxruntime's default order)\n")
        print(_table(onnx, ONNX_COLS))
        for n in notes:
            print("note:", n)
    print("\n## 4. Inductor's estimate -> the measured stock peak, itemised (bytes; causes in docs/adapters.md)\n")
    for line in attribution_lines(inference + training):
        print("-", line)
    print("\n## 5. Targets\n")
    for line in check_targets(inference + training, onnx, args.time_limit):
        print(line)
    print(f"\n(total {time.perf_counter() - t0:.0f} s)")
    if args.json:
        def plain(row):
            return {k: ([vars(d) for d in v] if k == "estimate_differences" else
                        v.to_dict() if k == "report" else v) for k, v in row.items()}
        with open(args.json, "w") as f:
            json.dump({"inference": [plain(r) for r in inference], "training": [plain(r) for r in training],
                       "onnx": [plain(r) for r in onnx], "notes": notes}, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
