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
