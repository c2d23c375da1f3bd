"""The residency certificate: what a memory envelope can hold of a routed workload, and the
least traffic any cache policy needs — a JSON claim that an independent checker re-derives.

For a request trace (e.g. expert routes, object = ``(layer, expert)`` with its bytes):

* **semantic demand**: bytes of the duplicate-free union of the objects the router selected;
  each named envelope (``device=BYTES``, ``host=BYTES``...) either holds it (``fits``) or
  not (``slack`` = envelope bytes - demand, negative when it does not fit);
* for each cache capacity (bytes per cache; by default one per envelope: its bytes divided by
  the number of caches), the **minimum traffic** of any demand-paging policy (model of
  :mod:`memopt.cache.offline`: no bypass, traffic = bytes loaded on misses, first loads
  included), exact (``belady`` with equal sizes per cache; ``cp-sat`` with a witness
  schedule) or a proven lower bound (``flow``, with the dual points that prove it), next to
  the traffic of each online policy.

:func:`certify_residency` builds the certificate (``format: memopt-residency-certificate``,
version 1, described in ``docs/cache.md``). :func:`verify_residency_certificate` checks one
against the trace, re-deriving every number with code independent of the kernels that
produced it: plain-Python simulators of every policy and of Belady, a replay of the
witness schedule, a re-solve of the exactness claim with a different MIP solver (SCIP), and
for a lower bound the weak-duality proof given by its dual points (no solver needed). Any
mismatch, unknown or missing field raises
:class:`memopt.errors.CertificateError`; a certificate it cannot re-derive (a claim it has
no way to check) is refused the same way, never accepted.
"""

from __future__ import annotations

import heapq
import json
import math
import os
from collections import OrderedDict

import numpy as np

from memopt.errors import CertificateError, FormatError, InternalError, OptionError
from memopt.cache.offline import check_time_limit, flow_lower_bound, offline_optimum
from memopt.cache.policies import check_capacity, parse_policy, simulate
from memopt.cache.routes import MAX_BYTES, RequestTrace

__all__ = ["CERT_FORMAT", "CERT_VERSION", "MODEL", "certify_residency",
           "verify_residency_certificate", "reference_simulate", "parse_envelopes"]

CERT_FORMAT = "memopt-residency-certificate"
CERT_VERSION = 1
MODEL = ("demand paging without bypass: every requested object is loaded into its cache unless it "
         "is larger than the cache (then streamed); traffic = bytes loaded on misses, first loads "
         "included; capacity is per cache")
DEFAULT_POLICIES = ("lru", "lfu", "lru-2", "belady")
_METHODS = ("belady", "cp-sat", "flow")


def parse_envelopes(envelopes) -> list[tuple[str, int]]:
    """``[(name, bytes)]`` from a mapping or ``"NAME=BYTES"`` strings (names distinct)."""
    if isinstance(envelopes, dict):
        items = list(envelopes.items())
    else:
        items = []
        for e in envelopes:
            if isinstance(e, str):
                name, sep, val = e.partition("=")
                if not sep:
                    raise OptionError(f"envelope {e!r} must be NAME=BYTES")
                from memopt.cli._options import whole

                items.append((name.strip(), whole(val.replace("_", ""), f"envelope {name.strip()!r}", low=0,
                                                  high=2**62 - 1)))
            else:
                items.append(tuple(e))
    out, seen = [], set()
    for name, val in items:
        if not isinstance(name, str) or not name:
            raise OptionError(f"an envelope needs a non-empty name, got {name!r}")
        if name in seen:
            raise OptionError(f"envelope {name!r} is given twice")
        seen.add(name)
        out.append((name, check_capacity(val, f"envelope {name!r}")))
    return out


# ---------------------------------------------------------------------------- certify

def _minimum_traffic(trace: RequestTrace, cap: int, time_limit: float, max_requests: int) -> dict:
    if trace.equal_sizes():
        r = simulate(trace, "belady", cap)
        return {"bytes": r.bytes_moved, "exact": True, "method": "belady"}
    if trace.n_requests <= max_requests:
        r = offline_optimum(trace, cap, time_limit=time_limit, method="cp-sat",
                            max_requests=max_requests)
        if r.status == "optimal":
            return {"bytes": r.bytes_moved, "exact": True, "method": "cp-sat",
                    "witness_hits": np.flatnonzero(r.hit_flags).tolist()}
    f = flow_lower_bound(trace, cap)
    return {"bytes": f.lower_bound, "exact": False, "method": "flow",
            "dual_points": f.dual_points.tolist()}


def certify_residency(trace: RequestTrace, envelopes, *, capacities=None,
                      policies=DEFAULT_POLICIES, time_limit: float = 30.0,
                      max_requests: int = 2000) -> dict:
    """The residency certificate of ``trace`` (module docstring) as a JSON-ready dict.

    Parameters
    ----------
    trace : RequestTrace
    envelopes : dict or list of str
        ``{"device": BYTES, ...}`` or ``["device=BYTES", ...]``.
    capacities : list of int, optional
        Bytes per cache to evaluate (default: each envelope's bytes divided by the number of
        caches).
    policies : tuple of str
        Online policies to report.
    time_limit : float, default 30.0
    max_requests : int, default 2000
        The exact minimum uses CP-SAT only on traces of at most this many requests with
        unequal sizes (else the flow bound).

    Returns
    -------
    dict
        The certificate (``format``, ``trace``, ``semantic_demand``, ``envelopes``,
        ``capacities``...), to check with :func:`verify_residency_certificate`.

    Raises
    ------
    OptionError
        Malformed envelopes or capacities.

    Examples
    --------
    >>> from memopt.cache.routes import make_trace
    >>> cert = certify_residency(make_trace([0, 1, 2, 0, 1, 2], [2, 2, 3]), {"gpu": 5}, time_limit=5)
    >>> cert["semantic_demand"], [c["capacity"] for c in cert["capacities"]]
    (7, [5])
    """
    if not isinstance(trace, RequestTrace):
        raise OptionError(f"certify_residency needs a RequestTrace, got {type(trace).__name__}")
    envs = parse_envelopes(envelopes)
    check_time_limit(time_limit)
    if isinstance(max_requests, bool) or not isinstance(max_requests, int) or max_requests < 0:
        raise OptionError(f"max_requests must be a non-negative integer, got {max_requests!r}")
    pols = []
    for p in policies:
        name, k = parse_policy(p)
        pols.append(name if name != "lru-k" else f"lru-{k}")
    if len(set(pols)) != len(pols):
        raise OptionError("a policy is listed twice")
    n_caches = len(trace.caches)
    entries: list[tuple[int, str | None]] = []
    if capacities is None:
        for name, b in envs:
            entries.append((b // n_caches, name))
    else:
        for c in capacities:
            entries.append((check_capacity(c), None))
    seen_caps = set()
    demand = trace.semantic_demand()
    used = np.unique(trace.requests)
    cert = {
        "format": CERT_FORMAT, "version": CERT_VERSION, "model": MODEL,
        "trace": {"name": trace.name, "digest": trace.digest(), "requests": trace.n_requests,
                  "objects": int(used.size), "caches": list(trace.caches)},
        "semantic_demand": demand,
        "largest_object": int(trace.sizes[used].max()) if used.size else 0,
        "envelopes": [{"name": n, "bytes": b, "fits": demand <= b, "slack": b - demand}
                      for n, b in envs],
        "capacities": [],
    }
    for cap, env in entries:
        if cap in seen_caps:
            continue
        seen_caps.add(cap)
        runs = [simulate(trace, p, cap) for p in pols]
        minimum = _minimum_traffic(trace, cap, time_limit, max_requests)
        for r in runs:
            if r.bytes_moved < minimum["bytes"]:
                raise InternalError("residency-minimum-above-policy",
                                    f"minimum traffic {minimum['bytes']} above {r.policy}'s {r.bytes_moved}")
        cert["capacities"].append({
            "capacity": cap, "envelope": env,
            "compulsory_traffic": _compulsory(trace, cap),
            "minimum_traffic": minimum,
            "policies": [{"policy": r.policy, "requests": r.requests, "hits": r.hits,
                          "misses": r.misses, "bytes_moved": r.bytes_moved} for r in runs],
        })
    return cert


def _compulsory(trace: RequestTrace, cap: int) -> int:
    """Traffic every policy pays: first loads, and every request of an object larger than the cache."""
    req = trace.requests.tolist()
    sizes = trace.sizes.tolist()
    seen = set()
    total = 0
    for o in req:
        if o not in seen:
            seen.add(o)
            total += sizes[o]
        elif sizes[o] > cap:
            total += sizes[o]
    return total


# ---------------------------------------------------------------------------- reference simulators

def reference_simulate(requests, sizes, capacity: int, policy: str, k: int = 2) -> tuple[int, int]:
    """``(hits, bytes_moved)`` of one cache, by a plain-Python simulator written independently
    of the compiled kernel (same policy definitions, see :mod:`memopt.cache.policies`)."""
    n = len(requests)
    hits = moved = used = 0
    if policy == "lru":
        cache: OrderedDict = OrderedDict()
        for o in requests:
            if o in cache:
                hits += 1
                cache.move_to_end(o)
                continue
            s = sizes[o]
            moved += s
            if s > capacity:
                continue
            while used + s > capacity:
                _v, vs = cache.popitem(last=False)
                used -= vs
            cache[o] = s
            used += s
        return hits, moved
    # keyed policies: lazy heap of (key, object); an entry is current iff key == cur[o]
    cur: dict = {}
    heap: list = []
    count: dict = {}
    hist: dict = {}
    nxt = [0] * n
    if policy == "belady":
        last: dict = {}
        for t in range(n - 1, -1, -1):
            o = requests[t]
            nxt[t] = last.get(o, n + o)
            last[o] = t
    for t, o in enumerate(requests):
        if policy == "lfu":
            count[o] = count.get(o, 0) + 1
            key = (count[o], t)
        elif policy == "lru-k":
            h = hist.setdefault(o, [])
            h.append(t)
            if len(h) > k:
                h.pop(0)
            key = (h[0] if len(h) == k else -1, t)
        elif policy == "belady":
            key = (-nxt[t],)
        else:
            raise CertificateError(f"unknown policy {policy!r}")
        if o in cur:
            hits += 1
            cur[o] = key
            heapq.heappush(heap, (key, o))
            continue
        s = sizes[o]
        moved += s
        if s > capacity:
            continue
        while used + s > capacity:
            key_v, v = heapq.heappop(heap)
            if cur.get(v) != key_v:
                continue
            del cur[v]
            used -= sizes[v]
        cur[o] = key
        heapq.heappush(heap, (key, o))
        used += s
    return hits, moved


def _per_cache(trace: RequestTrace):
    req = trace.requests.tolist()
    cache_of = trace.cache_of.tolist()
    parts: dict = {}
    for o in req:
        parts.setdefault(cache_of[o], []).append(o)
    return [parts[c] for c in sorted(parts)]


# ---------------------------------------------------------------------------- checking

def _fail(msg: str):
    raise CertificateError(f"residency certificate: {msg}")


def _int(val, what: str, *, minimum: int | None = 0) -> int:
    if isinstance(val, bool) or not isinstance(val, int):
        _fail(f"{what} must be an integer, got {val!r:.60}")
    if minimum is not None and val < minimum:
        _fail(f"{what} is {val}, below {minimum}")
    if abs(val) >= MAX_BYTES:
        _fail(f"{what} is beyond memopt's exact limit of 2**62")
    return val


def _keys(obj, required: set, optional: set, what: str) -> dict:
    if not isinstance(obj, dict):
        _fail(f"{what} must be a JSON object")
    missing = required - set(obj)
    if missing:
        _fail(f"{what} lacks field {sorted(missing)[0]!r}")
    extra = set(obj) - required - optional
    if extra:
        _fail(f"{what} has unknown field {sorted(extra)[0]!r}")
    return obj


def _equal(claimed, actual, what: str):
    if type(claimed) is not type(actual) or claimed != actual:
        _fail(f"{what}: the certificate says {claimed!r:.80} but the trace gives {actual!r:.80}")


def _replay_witness(trace: RequestTrace, cap: int, hits: list) -> int:
    """Bytes moved by the schedule whose hits are ``hits`` (request indices), checked step by
    step in plain Python: a hit needs its object held since its previous request, and in each
    cache the held objects plus the requested one fit at every request."""
    n = trace.n_requests
    req = trace.requests.tolist()
    sizes = trace.sizes.tolist()
    cache_of = trace.cache_of.tolist()
    hit_set = set()
    for h in hits:
        _int(h, "a witness hit")
        if h >= n:
            _fail(f"witness hit {h} is not a request index (the trace has {n})")
        if h in hit_set:
            _fail(f"witness hit {h} is listed twice")
        hit_set.add(h)
    prev: dict = {}
    held_delta: dict = {}   # (cache, request index) -> change of held bytes from there on
    moved = 0
    for t, o in enumerate(req):
        s = sizes[o]
        if t in hit_set:
            p = prev.get(o)
            if p is None or s > cap:
                _fail(f"witness hit {t}: object {trace.objects[o]!r} cannot be resident then")
            c = cache_of[o]
            held_delta[c, p + 1] = held_delta.get((c, p + 1), 0) + s   # held strictly inside (p, t)
            held_delta[c, t] = held_delta.get((c, t), 0) - s
        else:
            moved += s
        prev[o] = t
    running = [0] * len(trace.caches)
    for tau, o in enumerate(req):
        for c in range(len(running)):
            running[c] += held_delta.get((c, tau), 0)
        c = cache_of[o]
        s = sizes[o] if sizes[o] <= cap else 0
        if running[c] + s > cap:
            _fail(f"the witness schedule holds {running[c] + s} bytes in cache "
                  f"{trace.caches[c]!r} at request {tau}, over the capacity {cap}")
    return moved


def _dual_bound(trace: RequestTrace, cap: int, points: list) -> int:
    """The lower bound on every schedule's traffic proven by a set of dual points (weak LP
    duality, written independently of :mod:`memopt.cache.offline`). Per cache, with ``g`` the
    gcd of the sizes of the intervals a schedule may keep (request ``t`` to the next request
    ``u`` of a non-empty object that fits) and ``room(tau) = (cap - s(o_tau)) // g`` (``s`` read
    as 0 for an object larger than the cache): any schedule keeps at most
    ``D = sum_{tau in P} room(tau) + sum of s/g over intervals with no point of P strictly
    inside`` units of g bytes, so it moves at least
    ``compulsory + g * (sum of s/g over all intervals - D)`` bytes."""
    n = trace.n_requests
    seen = set()
    last = -1
    for p in points:
        _int(p, "a dual point")
        if p >= n:
            _fail(f"dual point {p} is not a request index (the trace has {n})")
        if p <= last:
            _fail("dual points must be strictly increasing request indices")
        last = p
        seen.add(p)
    req = trace.requests.tolist()
    sizes = trace.sizes.tolist()
    cache_of = trace.cache_of.tolist()
    positions: dict = {}
    for i, o in enumerate(req):
        positions.setdefault(cache_of[o], []).append(i)
    total = 0
    for c in sorted(positions):
        glob = positions[c]
        part = [req[i] for i in glob]
        m = len(part)
        fixed, intervals, g = _reuse_intervals(part, sizes, cap)
        total += fixed
        if not intervals:
            continue
        # prefix counts of dual points among this cache's requests
        count = [0] * (m + 1)
        dual = 0
        for t in range(m):
            inside = glob[t] in seen
            count[t + 1] = count[t] + inside
            if inside:
                s_tau = sizes[part[t]]
                dual += (cap - (s_tau if s_tau <= cap else 0)) // g
        units = 0
        for t, u, s in intervals:
            units += s // g
            if count[u] - count[t + 1] == 0:      # no dual point strictly inside (t, u)
                dual += s // g
        total += g * (units - dual)
    return total


def _reuse_intervals(part: list, sizes: list, cap: int) -> tuple[int, list, int]:
    """What every policy of one cache pays regardless (each object's first request, and every
    request of an object larger than ``cap``) and the reuse intervals ``(t, u, size)`` between
    consecutive requests ``t < u`` of an object that fits, with the gcd of their sizes."""
    nxt = [None] * len(part)
    after: dict = {}
    for t in range(len(part) - 1, -1, -1):
        nxt[t] = after.get(part[t])
        after[part[t]] = t
    fixed = 0
    first = set()
    intervals = []
    for t, o in enumerate(part):
        s = sizes[o]
        if o not in first:
            first.add(o)
            fixed += s
        elif s > cap:
            fixed += s
        if nxt[t] is not None and 0 < s <= cap:
            intervals.append((t, nxt[t], s))
    g = 0
    for _t, _u, s in intervals:
        g = math.gcd(g, s)
    return fixed, intervals, g


def _scip_lower_bound(trace: RequestTrace, cap: int, time_limit: float) -> int | None:
    """A lower bound on the minimum traffic from SCIP on an independently written interval
    MIP (exact rounding up of its dual bound); ``None`` if SCIP cannot give one whose float
    arithmetic is safe (coefficients beyond 2**40) or proves nothing in time."""
    from pyscipopt import Model, quicksum

    total = 0
    for part in _per_cache(trace):
        sizes = trace.sizes.tolist()
        n = len(part)
        fixed, ivs, g = _reuse_intervals(part, sizes, cap)
        if not ivs:
            total += fixed
            continue
        if max(s for _t, _u, s in ivs) // g > 2**40 or sum(s for *_x, s in ivs) // g > 2**50:
            return None
        m = Model()
        m.hideOutput()
        m.setParam("limits/time", time_limit)
        m.setParam("randomization/randomseedshift", 0)
        x = [m.addVar(vtype="B") for _ in ivs]
        inside: list[list[int]] = [[] for _ in range(n)]
        for j, (t, u, _s) in enumerate(ivs):
            for tau in range(t + 1, u):
                inside[tau].append(j)
        for tau in range(n):
            if inside[tau]:
                s_tau = sizes[part[tau]]
                rhs = (cap - (s_tau if s_tau <= cap else 0)) // g
                m.addCons(quicksum((ivs[j][2] // g) * x[j] for j in inside[tau]) <= rhs)
        m.setObjective(quicksum((s // g) * (1 - x[j]) for j, (_t, _u, s) in enumerate(ivs)), "minimize")
        m.optimize()
        if m.getStatus() not in ("optimal", "timelimit", "gaplimit"):
            return None
        bound = m.getDualbound()
        if not math.isfinite(bound):
            return None
        total += fixed + max(0, math.ceil(bound - 1e-6)) * g
    return total


def _load(cert):
    if isinstance(cert, (str, os.PathLike)) and not (isinstance(cert, str) and cert.lstrip().startswith("{")):
        from memopt.io._json import read_json

        try:
            return read_json(cert)
        except FormatError as exc:
            raise CertificateError(f"residency certificate: {exc}") from None
    if isinstance(cert, str):
        try:
            return json.loads(cert)
        except json.JSONDecodeError as exc:
            raise CertificateError(f"residency certificate: malformed JSON ({exc.msg})") from None
    return cert


def verify_residency_certificate(cert, trace: RequestTrace, *, time_limit: float = 60.0) -> dict:
    """Check a residency certificate against ``trace``: every number is derived again.

    Parameters
    ----------
    cert : dict, str or os.PathLike
        The certificate, as a dict, JSON text or a path.
    trace : RequestTrace
    time_limit : float, default 60.0

    Returns
    -------
    dict
        ``{"ok": True, "capacities": [...], "checked": [...]}``.

    Raises
    ------
    CertificateError
        A false, unknown, missing or uncheckable claim, named in the message.

    Examples
    --------
    >>> from memopt.cache.routes import make_trace
    >>> tr = make_trace([0, 1, 2, 0, 1, 2], [2, 2, 3])
    >>> verify_residency_certificate(certify_residency(tr, {"gpu": 5}, time_limit=5), tr)["ok"]
    True
    """
    if not isinstance(trace, RequestTrace):
        raise OptionError(f"verify_residency_certificate needs a RequestTrace, got {type(trace).__name__}")
    time_limit = check_time_limit(time_limit)
    cert = _load(cert)
    _keys(cert, {"format", "version", "model", "trace", "semantic_demand", "largest_object",
                 "envelopes", "capacities"}, set(), "the certificate")
    if cert["format"] != CERT_FORMAT:
        _fail(f"format is {cert['format']!r:.60}, expected {CERT_FORMAT!r}")
    if type(cert["version"]) is not int or cert["version"] != CERT_VERSION:
        _fail(f"unsupported version {cert['version']!r:.20} (this checker reads {CERT_VERSION})")
    if cert["model"] != MODEL:
        _fail("the model statement differs from the one this checker verifies")
    checked = []
    # --- trace identity
    tr = _keys(cert["trace"], {"name", "digest", "requests", "objects", "caches"}, set(), "trace")
    req = trace.requests.tolist()
    sizes = trace.sizes.tolist()
    distinct = set(req)
    _equal(tr["name"], trace.name, "trace name")
    _equal(tr["digest"], trace.digest(), "trace digest")
    _equal(tr["requests"], len(req), "number of requests")
    _equal(tr["objects"], len(distinct), "number of distinct objects")
    _equal(tr["caches"], list(trace.caches), "caches")
    checked.append("trace")
    # --- semantic demand
    demand = sum(sizes[o] for o in distinct)
    _equal(_int(cert["semantic_demand"], "semantic_demand"), demand, "semantic_demand")
    _equal(_int(cert["largest_object"], "largest_object"), max((sizes[o] for o in distinct), default=0),
           "largest_object")
    checked.append("semantic_demand")
    # --- envelopes
    if not isinstance(cert["envelopes"], list):
        _fail("envelopes must be a list")
    env_bytes = {}
    for i, e in enumerate(cert["envelopes"]):
        _keys(e, {"name", "bytes", "fits", "slack"}, set(), f"envelope #{i}")
        name = e["name"]
        if not isinstance(name, str) or not name:
            _fail(f"envelope #{i} needs a non-empty name")
        if name in env_bytes:
            _fail(f"envelope {name!r} is listed twice")
        b = _int(e["bytes"], f"envelope {name!r} bytes")
        env_bytes[name] = b
        _equal(e["fits"], demand <= b, f"envelope {name!r} fits")
        _equal(_int(e["slack"], f"envelope {name!r} slack", minimum=None), b - demand,
               f"envelope {name!r} slack")
    checked.append("envelopes")
    # --- capacities
    if not isinstance(cert["capacities"], list):
        _fail("capacities must be a list")
    parts = _per_cache(trace)
    n_caches = len(trace.caches)
    seen_caps = set()
    for i, entry in enumerate(cert["capacities"]):
        _keys(entry, {"capacity", "envelope", "compulsory_traffic", "minimum_traffic", "policies"}, set(),
              f"capacity #{i}")
        cap = _int(entry["capacity"], f"capacity #{i}")
        where = f"capacity {cap}"
        if cap in seen_caps:
            _fail(f"{where} is listed twice")
        seen_caps.add(cap)
        env = entry["envelope"]
        if env is not None:
            if not isinstance(env, str) or env not in env_bytes:
                _fail(f"{where} refers to envelope {env!r:.60}, which the certificate does not list")
            _equal(cap, env_bytes[env] // n_caches, f"{where}: envelope {env!r} share per cache")
        compulsory = _compulsory(trace, cap)
        _equal(_int(entry["compulsory_traffic"], f"{where} compulsory_traffic"), compulsory,
               f"{where} compulsory_traffic")
        # online policies
        if not isinstance(entry["policies"], list):
            _fail(f"{where}: policies must be a list")
        names = set()
        for j, p in enumerate(entry["policies"]):
            _keys(p, {"policy", "requests", "hits", "misses", "bytes_moved"}, set(), f"{where} policy #{j}")
            try:
                pname, k = parse_policy(p["policy"])
            except OptionError as exc:
                _fail(f"{where} policy #{j}: {exc}")
            label = pname if pname != "lru-k" else f"lru-{k}"
            _equal(p["policy"], label, f"{where} policy #{j} name")
            if label in names:
                _fail(f"{where}: policy {label} is listed twice")
            names.add(label)
            hits = moved = 0
            for part in parts:
                h, mv = reference_simulate(part, sizes, cap, pname, k)
                hits += h
                moved += mv
            what = f"{where} {label}"
            _equal(_int(p["requests"], f"{what} requests"), len(req), f"{what} requests")
            _equal(_int(p["hits"], f"{what} hits"), hits, f"{what} hits")
            _equal(_int(p["misses"], f"{what} misses"), len(req) - hits, f"{what} misses")
            _equal(_int(p["bytes_moved"], f"{what} bytes_moved"), moved, f"{what} bytes_moved")
        # minimum traffic
        mt = entry["minimum_traffic"]
        if not isinstance(mt, dict) or "method" not in mt:
            _fail(f"{where}: minimum_traffic must be an object with a method")
        method = mt["method"]
        if method not in _METHODS:
            _fail(f"{where}: unknown minimum_traffic method {method!r:.40}")
        opt = {"cp-sat": {"witness_hits"}, "flow": {"dual_points"}}.get(method, set())
        _keys(mt, {"bytes", "exact", "method"} | opt, set(), f"{where} minimum_traffic")
        value = _int(mt["bytes"], f"{where} minimum traffic")
        if method == "belady":
            _equal(mt["exact"], True, f"{where} minimum_traffic exact")
            for part in parts:
                if len({sizes[o] for o in part}) > 1:
                    _fail(f"{where}: Belady is exact only with one object size per cache")
            best = sum(reference_simulate(part, sizes, cap, "belady")[1] for part in parts)
            _equal(value, best, f"{where} minimum traffic (Belady)")
        elif method == "cp-sat":
            _equal(mt["exact"], True, f"{where} minimum_traffic exact")
            if not isinstance(mt["witness_hits"], list):
                _fail(f"{where}: witness_hits must be a list of request indices")
            achieved = _replay_witness(trace, cap, mt["witness_hits"])
            _equal(value, achieved, f"{where} minimum traffic (witness schedule)")
            lb = _scip_lower_bound(trace, cap, time_limit)
            if lb is None:
                _fail(f"{where}: cannot re-derive the lower side of the exact minimum "
                      "(SCIP gave no safe bound); refused")
            if lb < value:
                _fail(f"{where}: the minimum traffic {value} is not proven: an independent MIP bound "
                      f"is only {lb}")
        else:
            _equal(mt["exact"], False, f"{where} minimum_traffic exact")
            if not isinstance(mt["dual_points"], list):
                _fail(f"{where}: dual_points must be a list of request indices")
            _equal(value, _dual_bound(trace, cap, mt["dual_points"]),
                   f"{where} minimum traffic (bound proven by the dual points)")
        if value < compulsory:
            _fail(f"{where}: minimum traffic {value} below the compulsory traffic {compulsory}")
        for p in entry["policies"]:
            if p["bytes_moved"] < value:
                raise InternalError("residency-check-minimum", f"{where}: a re-derived policy moves "
                                    f"{p['bytes_moved']} < the re-derived minimum {value}")
        checked.append(where)
    return {"ok": True, "semantic_demand": demand, "capacities": sorted(seen_caps), "checked": checked}
