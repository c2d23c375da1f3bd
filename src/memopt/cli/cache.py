"""``memopt cache experts`` and ``memopt cache certify``: expert caches on routing traces.

Both read MoE routing logs (one file per layer; :func:`memopt.cache.load_routes`, the reading
is in ``docs/cache.md``) or a ``memopt-requests`` trace, and drive :mod:`memopt.cache`.
"""

from __future__ import annotations

import argparse

from memopt.cli import _options as opt
from memopt.cli._output import fmt_bytes, print_table, write_json
from memopt.errors import OptionError

POLICY_CHOICES = ("lru", "lfu", "lru-k", "belady", "opt")


def register(sub) -> None:
    c = sub.add_parser("cache", help="expert caches: online policies, offline optimum, residency certificates",
                       description="Bounded-memory caches of mixture-of-experts weights on routing traces.")
    csub = c.add_subparsers(dest="cache_command", metavar="SUBCOMMAND", parser_class=type(c))
    csub.required = True

    e = csub.add_parser("experts", help="hits, misses and bytes moved of a policy at one or more capacities",
                        description="Simulate an expert cache on routing traces. Capacities are in bytes per "
                                    "cache (with --object-bytes 1, the default, they count experts).")
    _trace_args(e)
    e.add_argument("--capacity", required=True, action="append", metavar="C",
                   help="bytes per cache (repeat for several capacities)")
    e.add_argument("--policy", default="lru", choices=POLICY_CHOICES,
                   help="lru, lfu, lru-k, belady (exact for equal sizes) or opt (offline optimum)")
    e.add_argument("--k", type=int, default=2, help="k of lru-k (default 2)")
    e.add_argument("--time-limit", type=float, default=30.0, metavar="S",
                   help="time limit of --policy opt in seconds (default 30)")
    e.add_argument("--json", action="store_true", help="print exactly one JSON object on stdout")
    e.set_defaults(func=cmd_experts)

    r = csub.add_parser("certify", help="residency certificate: semantic demand against named envelopes",
                        description="Semantic demand (bytes of the distinct experts the router selected), "
                                    "whether it fits each envelope, and the minimum traffic any policy "
                                    "needs at each capacity next to the online policies' traffic.")
    _trace_args(r)
    r.add_argument("--envelope", required=True, action="append", metavar="NAME=BYTES",
                   help="a named memory envelope, e.g. device=25769803776 (repeat)")
    r.add_argument("--capacity", action="append", metavar="C",
                   help="bytes per cache to evaluate (default: each envelope / number of caches)")
    r.add_argument("--time-limit", type=float, default=30.0, metavar="S",
                   help="time limit of the exact minimum in seconds (default 30)")
    r.add_argument("-o", "--output", metavar="CERT", help="write the certificate JSON here")
    r.add_argument("--json", action="store_true", help="print the certificate as one JSON object on stdout")
    r.set_defaults(func=cmd_certify)


    v = csub.add_parser("verify", help="independently check a residency certificate against its traces",
                        description="Re-derive every number of a residency certificate from the traces "
                                    "(exit 0 only if every claim holds).")
    v.add_argument("certificate", help="a memopt-residency-certificate JSON (from `memopt cache certify -o`)")
    _trace_args(v)
    v.add_argument("--time-limit", type=float, default=60.0, metavar="S",
                   help="time limit of re-proving an exact minimum in seconds (default 60)")
    v.add_argument("--json", action="store_true", help="print exactly one JSON object on stdout")
    v.set_defaults(func=cmd_verify)

    w = csub.add_parser("sweep", help="hits, misses and bytes moved of several policies over a capacity grid",
                        description="Simulate every policy at every capacity (bytes per cache), in parallel "
                                    "on local processes, threads or a Dask cluster; a point whose worker "
                                    "dies is reported 'lost' and every finished point is kept.")
    _trace_args(w)
    w.add_argument("--policies", required=True, metavar="P,P,...",
                   help="comma-separated: lru, lfu, lru-k (with --k), lru-2, lru-3..., belady")
    w.add_argument("--capacities", required=True, metavar="A:B:STEP|A,B,C",
                   help="bytes per cache: a grid A, A+STEP, ... <= B, or a comma list")
    w.add_argument("--k", type=int, default=2, help="k of lru-k (default 2)")
    w.add_argument("--executor", default="local", metavar="SPEC",
                   help="where points run: local (--jobs worker processes, default), threads, or "
                        "dask://HOST:PORT (a Dask scheduler; needs memopt[dask] and the traces at the same "
                        "paths on the workers)")
    w.add_argument("--jobs", type=int, default=1, metavar="N",
                   help="local worker processes or threads (default 1 = in-process)")
    w.add_argument("--plot", metavar="FILE", help="write a hit-rate-vs-capacity plot (needs matplotlib)")
    w.add_argument("--json", action="store_true", help="print exactly one JSON object on stdout")
    w.set_defaults(func=cmd_sweep)


def _trace_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("trace", nargs="+", help="routing log(s) (JSON lines, one file per layer) or one "
                                            "memopt-requests file")
    p.add_argument("--object-bytes", default="1", metavar="B",
                   help="bytes of one expert (an integer, default 1), or LAYER=B,LAYER=B,...")
    p.add_argument("--per-layer", action="store_true", help="one cache per layer instead of one global cache")
    p.add_argument("--drop-warmup", action="store_true", help="drop the warm-up passes of each file")
    p.add_argument("--skip-passes", type=int, default=0, metavar="N", help="drop N further leading passes")


def _byte_count(text: str, option: str) -> int:
    try:
        value = int(str(text).strip())
    except ValueError:
        raise OptionError(f"{option} must be a whole number of bytes, got {text!r}") from None
    return opt.integer(value, option, low=0, high=2**62)


def _object_bytes(text: str):
    if "=" not in text:
        return _byte_count(text, "--object-bytes")
    out = {}
    for part in text.split(","):
        layer, _, b = part.partition("=")
        try:
            out[int(layer)] = _byte_count(b, "--object-bytes")
        except ValueError:
            raise OptionError(f"--object-bytes: bad layer in {part!r} (expected LAYER=BYTES)") from None
    return out


def _load(args):
    from memopt.cache import load_requests, load_routes

    opt.integer(args.skip_passes, "--skip-passes", low=0)
    if len(args.trace) == 1:
        with open(args.trace[0], "rb") as fh:
            head = fh.read(200)
        if b"memopt-requests" in head:
            return load_requests(args.trace[0])
    return load_routes(args.trace, object_bytes=_object_bytes(args.object_bytes), per_layer=args.per_layer,
                       drop_warmup=args.drop_warmup, skip_passes=args.skip_passes)


def cmd_experts(args) -> int:
    from memopt.cache import offline_optimum, simulate

    tl = opt.seconds(args.time_limit, "--time-limit")
    caps = [_byte_count(c, "--capacity") for c in args.capacity]
    opt.integer(args.k, "--k", low=1, high=64)
    for path in args.trace:
        opt.read_text_input(path, "trace")
    trace = _load(args)
    rows = []
    for cap in caps:
        if args.policy == "opt":
            res = offline_optimum(trace, cap, time_limit=tl)
        else:
            res = simulate(trace, args.policy, cap, k=args.k if args.policy == "lru-k" else None)
        rows.append(res.to_dict())
    if args.json:
        write_json({"trace": [str(t) for t in args.trace], "policy": args.policy, "caches": len(trace.caches),
                    "results": rows})
        return 0
    print(f"{', '.join(args.trace)}: {len(trace.caches)} cache(s), policy {args.policy}")
    cols = ["capacity", "requests", "hits", "misses", "hit rate", "bytes moved"]
    table = [[str(r["capacity"]), str(r["requests"]), str(r["hits"]), str(r["misses"]),
              f"{r['hits'] / r['requests']:.1%}" if r["requests"] else "-", fmt_bytes(r["bytes_moved"])]
             for r in rows]
    if args.policy == "opt":
        cols += ["lower bound", "status"]
        for t, r in zip(table, rows):
            t += [fmt_bytes(r["lower_bound"]), r["status"]]
    print_table(table, header=cols, align="r" * len(cols))
    return 0


def cmd_certify(args) -> int:
    import json

    from memopt.cache import certify_residency

    tl = opt.seconds(args.time_limit, "--time-limit")
    caps = [_byte_count(c, "--capacity") for c in args.capacity] if args.capacity else None
    opt.not_an_input({"-o": args.output}, list(args.trace))
    for path in args.trace:
        opt.read_text_input(path, "trace")
    trace = _load(args)
    cert = certify_residency(trace, args.envelope, capacities=caps, time_limit=tl)
    if args.output:
        with open(args.output, "w", encoding="utf-8") as fh:
            json.dump(cert, fh)
            fh.write("\n")
    if args.json:
        write_json(cert)
        return 0
    print(f"semantic demand: {fmt_bytes(cert['semantic_demand'])}")
    print_table([[e["name"], fmt_bytes(e["bytes"]), "yes" if e["fits"] else "no", fmt_bytes(e["slack"])]
                 for e in cert["envelopes"]], header=["envelope", "bytes", "fits", "slack"])
    return 0


def cmd_verify(args) -> int:
    from memopt.cache import verify_residency_certificate

    tl = opt.seconds(args.time_limit, "--time-limit")
    opt.read_text_input(args.certificate, "certificate")
    for path in args.trace:
        opt.read_text_input(path, "trace")
    trace = _load(args)
    report = verify_residency_certificate(args.certificate, trace, time_limit=tl)
    if args.json:
        write_json(report)
    else:
        print(f"{args.certificate}: every claim checked against {len(args.trace)} trace file(s): OK")
    return 0


def cmd_sweep(args) -> int:
    import sys

    from memopt.cache.sweep import (TraceSource, format_cache_sweep, parse_capacities, parse_policies,
                                    plot_cache_sweep, run_cache_sweep)
    from memopt.sweep import parse_executor_spec

    opt.integer(args.jobs, "--jobs", low=1, high=opt.MAX_JOBS)
    opt.integer(args.k, "--k", low=1, high=64)
    opt.integer(args.skip_passes, "--skip-passes", low=0)
    executor = parse_executor_spec(args.executor)
    policies = parse_policies(args.policies, args.k)
    caps = parse_capacities(args.capacities)
    opt.not_an_input({"--plot": args.plot}, list(args.trace))
    for path in args.trace:
        opt.read_text_input(path, "trace")
    source = TraceSource.of(args.trace, object_bytes=_object_bytes(args.object_bytes), per_layer=args.per_layer,
                            drop_warmup=args.drop_warmup, skip_passes=args.skip_passes)
    result = run_cache_sweep(source, policies, caps, executor=executor, jobs=args.jobs, progress=not args.json)
    if args.json:
        write_json(result.to_dict())
    if args.plot:
        plot_cache_sweep(result, args.plot)
    if not args.json:
        print(f"{', '.join(args.trace)}: {result.caches} cache(s), {result.requests} requests, "
              f"{len(result.policies)} policies x {len(result.capacities)} capacities ({result.seconds:.1f}s)")
        print_table(format_cache_sweep(result),
                    header=["policy", "capacity", "hits", "misses", "hit rate", "bytes moved"], align="lrrrrr")
        if args.plot:
            print(f"plot: {args.plot}")
    if result.lost:
        text = "; ".join(f"{p.policy} @ {p.capacity} ({p.reason})" for p in result.lost[:5])
        print(f"memopt: error: {len(result.lost)} point(s) lost with their worker: {text}"
              + (" ..." if len(result.lost) > 5 else ""), file=sys.stderr)
        return 1
    return 0
