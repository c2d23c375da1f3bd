"""Expert caches on real MoE routing traces: hits, misses and bytes moved per policy at several
capacities, next to the offline optimum / lower bound; and the speed of Belady and of the flow
bound on large synthetic traces.

Usage::

    python benchmarks/cache_experts.py [--routes ../shared/data/moe-routes] [--no-speed]
                                       [--belady-requests 10000000] [--flow-requests 1000000]

Traces (``../shared/data/moe-routes``, read with ``memopt.cache.load_routes``, warm-up rows
dropped as the MANIFEST says):

* ``qwen x5 global``: the five Qwen1.5-MoE-A2.7B layers (0, 8, 12, 18, 23) lined up pass by
  pass, one global cache of (layer, expert) objects; one expert = 3 x 2048 x 1408 bf16
  weights = 17,301,504 bytes;
* ``qwen x5 per-layer``: the same trace, one cache per layer (capacity per layer);
* ``olmoe L0``: OLMoE-1B-7B layer 0, 64 experts of 3 x 2048 x 1024 bf16 = 12,582,912 bytes;
* ``qwen x5 mixed``: a what-if with unequal sizes on the real routes: layers 0 and 23 kept in
  bf16, the other three at 4 bits (a quarter of the bytes). The flow bound runs on the whole
  trace, the exact MIP (CP-SAT) on the first 2,000 requests of the decode steps (400 per layer,
  ``qwen x5 mixed dec2k``).

Capacities are given in experts (times the expert size, in bytes, for the mixed trace: the
bf16 size). ``OPT`` is the minimum bytes any policy moves: Belady where each cache holds one
object size (exact), the CP-SAT optimum on the short slice; ``flow LB`` is the FOO-style
min-cost-flow lower bound (equal to Belady on equal sizes, a proof of that in the tests).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from memopt import _jit  # noqa: E402
from memopt.cache import (flow_lower_bound, load_routes, make_trace, offline_optimum,  # noqa: E402
                          simulate)

QWEN_EXPERT = 3 * 2048 * 1408 * 2
OLMOE_EXPERT = 3 * 2048 * 1024 * 2
POLICIES = ("lru", "lfu", "lru-2", "belady")


def _row(trace_name, cap_label, results, opt, opt_kind, flow, seconds):
    base = results["belady"].requests
    cells = [f"{trace_name:<20}", f"{cap_label:>8}"]
    for p in POLICIES:
        r = results[p]
        cells.append(f"{r.hits / base:6.1%} {r.bytes_moved / 2**30:9.2f}")
    cells.append(f"{opt / 2**30:9.2f}{opt_kind}")
    cells.append(f"{flow / 2**30:9.2f}" if flow is not None else f"{'-':>9}")
    cells.append(f"{seconds:6.2f}")
    return " | ".join(cells)


def header():
    top = [f"{'':<20}", f"{'':>8}"] + [f"{p:^16}" for p in POLICIES] + [f"{'':>10}", f"{'':>9}", f"{'':>6}"]
    sub = [f"{'trace':<20}", f"{'capacity':>8}"] + [f"{'hit%':>6} {'GiB moved':>9}" for _ in POLICIES]
    sub += [f"{'OPT GiB':>10}", f"{'flow LB':>9}", f"{'sec':>6}"]
    return " | ".join(top) + "\n" + " | ".join(sub)


def run_trace(name, trace, capacities, unit, *, exact_mip=False, flow=True, out=print):
    for c in capacities:
        cap = c * unit
        t0 = time.perf_counter()
        res = {p: simulate(trace, p, cap) for p in POLICIES}
        if exact_mip:
            o = offline_optimum(trace, cap, method="cp-sat", time_limit=120)
            opt, kind = o.bytes_moved, ("*" if o.status == "optimal" else "?")
        elif trace.equal_sizes():
            opt, kind = res["belady"].bytes_moved, "*"
        else:
            opt, kind = None, ""
        fb = flow_lower_bound(trace, cap).lower_bound if flow else None
        if opt is None:
            opt, kind = fb, "≥"
        dt = time.perf_counter() - t0
        for p in POLICIES:
            assert res[p].bytes_moved >= (fb or 0), (name, c, p)
            if kind == "*":
                assert res[p].bytes_moved >= opt, (name, c, p)
        out(_row(name, c, res, opt, kind, fb, dt))


def speed(belady_n, flow_n, out=print):
    rng = np.random.default_rng(0)
    with _jit.mode("compiled"):
        simulate(make_trace([0, 1, 0], [1, 1]), "belady", 1)     # compile / load outside the timing
        simulate(make_trace([0, 1, 0], [1, 1]), "lru", 1)
        m = 10_000
        req = (rng.zipf(1.2, belady_n) - 1) % m
        tr = make_trace(req, np.ones(m, dtype=np.int64))
        for pol in ("belady", "lru"):
            t0 = time.perf_counter()
            r = simulate(tr, pol, 1000)
            dt = time.perf_counter() - t0
            out(f"speed: {pol} on {belady_n:,} requests, {m:,} objects, capacity 1,000: {dt:.2f} s "
                f"(hit rate {r.hit_rate:.1%})")
        m = 20_000
        req = (rng.zipf(1.2, flow_n) - 1) % m
        sizes = rng.integers(1, 65, m) * 4096
        tr = make_trace(req, sizes)
        cap = int(sizes.mean() * 500)
        t0 = time.perf_counter()
        f = flow_lower_bound(tr, cap)
        dt = time.perf_counter() - t0
        b = simulate(tr, "belady", cap)
        out(f"speed: flow bound on {flow_n:,} variable-size requests ({m:,} objects, 4-256 KiB, "
            f"capacity {cap:,} B): {dt:.2f} s; bound {f.lower_bound:,} B vs Belady-size heuristic "
            f"{b.bytes_moved:,} B")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--routes", type=Path, default=ROOT.parent / "shared" / "data" / "moe-routes")
    ap.add_argument("--no-speed", action="store_true")
    ap.add_argument("--belady-requests", type=int, default=10_000_000)
    ap.add_argument("--flow-requests", type=int, default=1_000_000)
    args = ap.parse_args(argv)
    qwen = [args.routes / f"qwen15moe_layer{layer}.jsonl" for layer in (0, 8, 12, 18, 23)]
    olmoe = args.routes / "olmoe_layer0.jsonl"
    print("hit% and GiB moved per policy; OPT: * exact, ≥ lower bound; capacity in experts")
    print(header())
    with _jit.mode("compiled"):
        if all(p.exists() for p in qwen):
            g = load_routes(qwen, drop_warmup=True, object_bytes=QWEN_EXPERT)
            run_trace("qwen x5 global", g, (30, 60, 120, 200), QWEN_EXPERT)
            pl = load_routes(qwen, drop_warmup=True, object_bytes=QWEN_EXPERT, per_layer=True)
            run_trace("qwen x5 per-layer", pl, (6, 12, 24, 40), QWEN_EXPERT)
            mixed = {0: QWEN_EXPERT, 8: QWEN_EXPERT // 4, 12: QWEN_EXPERT // 4, 18: QWEN_EXPERT // 4,
                     23: QWEN_EXPERT}
            mx = load_routes(qwen, drop_warmup=True, object_bytes=mixed)
            run_trace("qwen x5 mixed", mx, (30, 60, 120), QWEN_EXPERT)
            start = (65 + 1406) * 4 * 5          # the decode steps begin after the two prefill passes
            short = make_trace(mx.requests[start:start + 2000], mx.sizes, objects=mx.objects,
                               name="mixed decode 2k")
            run_trace("qwen x5 mixed dec2k", short, (30, 60, 120), QWEN_EXPERT, exact_mip=True)
        else:
            print(f"(Qwen route files not found under {args.routes})")
        if olmoe.exists():
            o = load_routes(olmoe, drop_warmup=True, object_bytes=OLMOE_EXPERT)
            run_trace("olmoe L0", o, (8, 16, 32, 48), OLMOE_EXPERT)
        else:
            print(f"(OLMoE route file not found under {args.routes})")
    if not args.no_speed:
        speed(args.belady_requests, args.flow_requests)
    return 0


if __name__ == "__main__":
    sys.exit(main())
