"""``memopt onnx reorder`` and ``memopt onnx import``: ONNX models (:mod:`memopt.adapters.onnx`).

``reorder`` writes a model whose node order is memopt's plan, runs the original (onnxruntime's
default order) and the reordered model (the file's order) in onnxruntime, and prints the
modelled and measured peaks and whether the outputs are bitwise identical: in exact mode
(every tensor its own buffer) and under onnxruntime's default session options (memory
pattern and buffer reuse on, graph optimizations; ``--provider``, ``--optimization-level``,
``--threads``), where the input is written unchanged if memopt's order would be worse. ``import`` writes
the memopt-graph JSON of a model. onnx and onnxruntime are imported when a command runs.
"""

from __future__ import annotations

from memopt.cli import _options as opt
from memopt.cli._output import fmt_bytes, print_table, write_json, writing


def register(sub) -> None:
    c = sub.add_parser("onnx", help="ONNX models: reorder nodes for a lower peak, import as a graph",
                       description="ONNX models (needs the onnx extra: pip install 'memopt[onnx]').")
    csub = c.add_subparsers(dest="onnx_command", metavar="SUBCOMMAND", parser_class=type(c))
    csub.required = True

    r = csub.add_parser("reorder", help="write the model with memopt's node order; measure both in onnxruntime",
                        description="Schedule the model's nodes with memopt, write the reordered model "
                                    "(it passes onnx.checker full_check), run the original in onnxruntime's "
                                    "default order and the reordered model in its file order, and report "
                                    "modelled and measured peaks (docs/adapters.md).")
    r.add_argument("file", metavar="IN.onnx", help="the ONNX model (static shapes, no If/Loop/Scan)")
    r.add_argument("-o", "--output", required=True, metavar="OUT.onnx", help="where to write the reordered model")
    r.add_argument("--time-limit", type=float, default=10.0, metavar="S",
                   help=f"scheduling time limit in seconds, 0 to {opt.MAX_SECONDS:.0e} (default 10)")
    r.add_argument("--no-measure", action="store_true",
                   help="do not run onnxruntime: the baseline is the file's order, no measured peaks")
    r.add_argument("--provider", default="CPUExecutionProvider", metavar="NAME",
                   help="onnxruntime execution provider of the default-mode runs (default CPUExecutionProvider; "
                        "the exact-mode runs are CPU)")
    r.add_argument("--optimization-level", default="all", metavar="LEVEL",
                   help="graph optimization of the default-mode runs: disable, basic, extended or all "
                        "(default all, onnxruntime's default)")
    r.add_argument("--threads", default="0", metavar="N",
                   help="intra-op threads of every run, 0 to 1024 (default 0: onnxruntime's default)")
    r.add_argument("--json", action="store_true", help="print exactly one JSON object on stdout")
    r.set_defaults(func=cmd_reorder)

    i = csub.add_parser("import", help="write the memopt-graph JSON of an ONNX model",
                        description="Convert an ONNX model to a memopt-graph JSON (docs/formats.md): exact "
                                    "byte sizes, resident weights and inputs, views as size-0 aliases.")
    i.add_argument("file", metavar="IN.onnx", help="the ONNX model")
    i.add_argument("-o", "--output", required=True, metavar="GRAPH.json", help="where to write the graph")
    i.add_argument("--json", action="store_true", help="print exactly one JSON object on stdout")
    i.set_defaults(func=cmd_import)


def _check_paths(args) -> None:
    opt.read_text_input(args.file, "ONNX file")
    opt.not_an_input({"-o": args.output}, [args.file])


def cmd_reorder(args) -> int:
    from memopt.adapters import onnx as adapter

    from memopt.adapters.onnx_defaults import RuntimeSettings

    tl = opt.seconds(args.time_limit, "--time-limit")
    settings = RuntimeSettings(provider=args.provider, optimization_level=args.optimization_level,
                               threads=opt.whole(args.threads, "--threads", low=0, high=1024)).validate()
    _check_paths(args)
    with writing(args.output, "-o"):
        rep = adapter.reorder(args.file, args.output, time_limit=tl, measure_runs=not args.no_measure,
                              settings=settings)
    d = rep.to_dict()
    if args.json:
        write_json(d)
        return 0
    print(f"{rep.input}: {rep.nodes} nodes ({rep.ops} ops), resident {fmt_bytes(rep.resident_bytes)}; "
          f"wrote {rep.output}")
    rows = [["peak_before", fmt_bytes(rep.peak_before), f"memopt's model of the {rep.baseline} order"],
            ["peak_after", fmt_bytes(rep.peak_after), f"memopt's order ({rep.method})"
             + (", baseline kept" if rep.kept_baseline else "")],
            ["lower_bound", fmt_bytes(rep.lower_bound), f"status {rep.status}, {rep.seconds:.3f} s"]]
    if rep.measured_before is not None:
        rows += [["measured_before", fmt_bytes(rep.measured_before), "onnxruntime, default order, "
                  + _how(rep.kernels_equal_before, rep.scratch_before, rep.scratch_modelled_before)],
                 ["measured_after", fmt_bytes(rep.measured_after), "onnxruntime, file order, "
                  + _how(rep.kernels_equal_after, rep.scratch_after, rep.scratch_modelled_after)],
                 ["bitwise_equal", str(rep.bitwise_equal).lower(), "outputs of both runs, raw bytes"]]
    if rep.default_before is not None:
        after = ("the input written unchanged: memopt's order was above it under the defaults "
                 f"(peak {fmt_bytes(rep.default_reordered)}, held {fmt_bytes(rep.default_held_reordered)})"
                 if rep.kept_original_for_defaults else "the written model")
        rows += [["default_before", fmt_bytes(rep.default_before),
                  f"onnxruntime defaults, the input: arena peak in use (held {fmt_bytes(rep.default_held_before)})"],
                 ["default_after", fmt_bytes(rep.default_after),
                  f"onnxruntime defaults, {after} (held {fmt_bytes(rep.default_held_after)})"]]
    print_table(rows, align="lrl")
    if rep.measured_before is not None:
        print("measured_*: exact mode (CPU arena on, memory pattern and buffer reuse off, no graph optimization; "
              f"intra-op threads {args.threads if settings.threads else 'default'})")
    if rep.default_before is not None:
        print(f"default_*: {rep.default_settings}; arena bytes above the start of the first run, over 2 runs")
    if rep.conditional_inplace:
        print(f"note: {rep.conditional_inplace} node(s) write in place only in some orders; modelled "
              f"(onnxruntime's planner) before {fmt_bytes(rep.modelled_before)}, after {fmt_bytes(rep.modelled_after)}")
    return 0


def _how(equal: bool, scratch: int, scratch_modelled: bool | None) -> str:
    text = "= model after every kernel" if equal else "DIFFERS from the model at some kernel"
    if scratch and scratch_modelled:
        text += f"; kernel scratch (up to {fmt_bytes(scratch)}) = the modelled workspaces"
    elif scratch:
        text += f"; kernel scratch NOT as modelled: arena high-water +{fmt_bytes(scratch)} (rounded)"
    return text


def cmd_import(args) -> int:
    from memopt.adapters import onnx as adapter

    _check_paths(args)
    with writing(args.output, "-o"):
        graph, mapping = adapter.import_graph(args.file, args.output)
    if args.json:
        write_json({"input": args.file, "output": args.output, "name": graph.name, "ops": graph.num_ops,
                    "tensors": graph.num_tensors, "resident_bytes": mapping.resident_bytes,
                    "aliases": len(mapping.alias), "conditional_inplace": list(mapping.conditional_inplace)})
        return 0
    print(f"{args.file}: {graph.num_ops} ops, {graph.num_tensors} tensors, resident "
          f"{fmt_bytes(mapping.resident_bytes)}, {len(mapping.alias)} views; wrote {args.output}")
    return 0
