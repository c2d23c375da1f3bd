"""Why does a DTR replay fail at one budget and pass at another? An allocation-level diagnosis.

Model
-----
DTR (Kirisame et al., ICLR 2021) evicts, whenever an allocation does not fit, the
evictable storage with the smallest heuristic score (h_DTR = compute of the storage and
its evicted neighbourhood / (memory x staleness), or a variant), and rematerializes evicted
tensors recursively when an operator needs them. In simrd's ``RuntimeV2EagerOptimized``
every storage on the rematerialization path is *locked* while its consumer runs, so a
deep recomputation cascade pins memory; when the pool of evictable storages empties
before an allocation fits, the run is ``OOM``. With an overhead limit the run instead
stops as ``thrash`` once the recomputation exceeds ``baseline_compute * (limit - 1)``.

Given a failing ratio R1 and a passing ratio R2 of the same trace and heuristic, this
module replays both with the eviction/remat log enabled and reports

* the first eviction decision where the two runs diverge (its index in the eviction
  sequence, and what each run evicted, where): budgets differ, so the first divergence
  is often only one of *timing*; the first divergence in *choice* (a different tensor
  at the same position) is reported too;
* where the failing run runs out of memory: instruction, operator, bytes requested,
  available and short, and the cascade of tensors being rematerialized at that moment
  (the tensors whose recomputation could not fit), with the locked and pinned storages;
* counterfactuals: the failing budget replayed with the implicated tensors kept
  resident (the simulator's ``keep_resident``: pinned once computed, never evicted) --
  all of them together, each alone (up to ``singles`` of them), and the tensor the
  failing run evicted at the first choice divergence. If the failure disappears, that
  eviction was necessary for it.

With a ``thrash`` failure there is no allocation failure; the implicated tensors are the
ones the failing run rematerialized most often.
"""

from __future__ import annotations

import dataclasses
import os
from collections import Counter
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any

from memopt.errors import OptionError
from memopt.dtr.sweep import (
    MAX_RATIO,
    cached_trace,
    check_heuristic,
    check_trace_path,
    heuristic_name,
    ratio_budget,
)

#: With several implicated tensors, each is also tried alone (a replay each), to tell
#: which ones matter; beyond this many, an evenly spaced sample of them is tried.
MAX_SINGLE_COUNTERFACTUALS = 40

#: For a thrash failure, how many of the most-rematerialized tensors are implicated.
THRASH_IMPLICATED = 3


def _as_dict(obj: Any) -> dict:
    if obj is None:
        return {}
    if isinstance(obj, dict):
        return dict(obj)
    if hasattr(obj, "to_dict"):
        return obj.to_dict()
    if dataclasses.is_dataclass(obj):
        return dataclasses.asdict(obj)
    return {k: v for k, v in vars(obj).items() if not k.startswith("_")}


def _jsonable(value: Any) -> Any:
    if isinstance(value, (frozenset, set)):
        return sorted(_jsonable(v) for v in value)
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, Decimal):
        return float(value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return _jsonable(dataclasses.asdict(value))
    return value


def _from_dict(cls, doc, what: str, build):
    """``build(doc)``, with a malformed ``doc`` reported as a FormatError naming ``what``."""
    try:
        return build(doc)
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        from memopt.errors import FormatError

        raise FormatError(f"not a DTR {what}: {type(exc).__name__}: {exc}") from None


@dataclass(frozen=True)
class RunSummary:
    """The outcome of one of the two replays."""

    ratio: float
    budget: int
    status: str
    clock: int
    remat_compute: int
    max_memory: int
    evictions: int
    remats: int

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, doc: dict) -> "RunSummary":
        return _from_dict(cls, doc, "run summary", lambda d: cls(
            ratio=float(d["ratio"]), budget=int(d["budget"]), status=str(d["status"]), clock=int(d["clock"]),
            remat_compute=int(d["remat_compute"]), max_memory=int(d["max_memory"]),
            evictions=int(d["evictions"]), remats=int(d["remats"])))


@dataclass(frozen=True)
class Divergence:
    """The first position at which the two eviction sequences differ.

    ``kind`` is ``"choice"`` (different tensors evicted), ``"timing"`` (the same tensor,
    evicted at a different instruction) or ``"length"`` (one run has no further
    evictions). ``fail`` and ``pass_`` are the two evictions at that position (``None``
    for a run that has none).
    """

    index: int
    kind: str
    fail: dict | None
    pass_: dict | None

    def to_dict(self) -> dict:
        return {"index": self.index, "kind": self.kind, "fail": self.fail, "pass": self.pass_}

    @classmethod
    def from_dict(cls, doc: dict) -> "Divergence":
        return _from_dict(cls, doc, "divergence", lambda d: cls(
            index=int(d["index"]), kind=str(d["kind"]), fail=d.get("fail"), pass_=d.get("pass")))


@dataclass(frozen=True)
class Counterfactual:
    """The failing budget replayed with ``keep_resident`` never evicted."""

    keep_resident: tuple[str, ...]
    status: str
    clock: int
    remat_compute: int
    max_memory: int
    #: Where the counterfactual run itself ran out of memory, if it did.
    oom_instruction: int | None = None
    oom_op: str | None = None
    oom_short: int | None = None

    @property
    def resolved(self) -> bool:
        return self.status == "pass"

    def to_dict(self) -> dict:
        out = dataclasses.asdict(self)
        out["keep_resident"] = list(self.keep_resident)
        out["resolved"] = self.resolved
        return out

    @classmethod
    def from_dict(cls, doc: dict) -> "Counterfactual":
        def build(d):
            opt = {k: d.get(k) for k in ("oom_instruction", "oom_short")}
            return cls(keep_resident=tuple(str(t) for t in d["keep_resident"]), status=str(d["status"]),
                       clock=int(d["clock"]), remat_compute=int(d["remat_compute"]),
                       max_memory=int(d["max_memory"]), oom_op=d.get("oom_op"),
                       **{k: None if v is None else int(v) for k, v in opt.items()})

        return _from_dict(cls, doc, "counterfactual", build)


@dataclass(frozen=True)
class Explanation:
    """The diagnosis of a failing/passing budget pair; see the module docstring."""

    trace: str
    heuristic: str
    overhead_limit: float | None
    fail: RunSummary
    pass_: RunSummary
    divergence: Divergence | None
    choice_divergence: Divergence | None
    oom: dict | None
    implicated: tuple[str, ...]
    implicated_reason: str
    counterfactual: Counterfactual | None
    single_counterfactuals: tuple[Counterfactual, ...]
    #: The failing budget with the tensor the failing run evicted at the first choice
    #: divergence kept resident: was that decision the one that mattered?
    divergence_counterfactual: Counterfactual | None = None

    @property
    def resolving_singles(self) -> list[str]:
        """Implicated tensors that, kept resident alone, make the failing budget pass."""
        return [c.keep_resident[0] for c in self.single_counterfactuals if c.resolved]

    def to_dict(self) -> dict:
        return {
            "trace": self.trace,
            "heuristic": self.heuristic,
            "overhead_limit": self.overhead_limit,
            "fail": self.fail.to_dict(),
            "pass": self.pass_.to_dict(),
            "divergence": self.divergence.to_dict() if self.divergence else None,
            "choice_divergence": self.choice_divergence.to_dict() if self.choice_divergence else None,
            "oom": _jsonable(self.oom),
            "implicated": list(self.implicated),
            "implicated_reason": self.implicated_reason,
            "counterfactual": self.counterfactual.to_dict() if self.counterfactual else None,
            "single_counterfactuals": [c.to_dict() for c in self.single_counterfactuals],
            "resolving_singles": self.resolving_singles,
            "divergence_counterfactual": (
                self.divergence_counterfactual.to_dict() if self.divergence_counterfactual else None
            ),
        }

    @classmethod
    def from_dict(cls, doc: dict) -> "Explanation":
        """Inverse of :meth:`to_dict` (``resolving_singles`` is derived, so it is not read back)."""
        def opt(kind, value):
            return None if value is None else kind.from_dict(value)

        return _from_dict(cls, doc, "explanation", lambda d: cls(
            trace=str(d["trace"]), heuristic=str(d["heuristic"]),
            overhead_limit=None if d.get("overhead_limit") is None else float(d["overhead_limit"]),
            fail=RunSummary.from_dict(d["fail"]), pass_=RunSummary.from_dict(d["pass"]),
            divergence=opt(Divergence, d.get("divergence")),
            choice_divergence=opt(Divergence, d.get("choice_divergence")), oom=d.get("oom"),
            implicated=tuple(str(t) for t in d.get("implicated", ())),
            implicated_reason=str(d.get("implicated_reason", "")),
            counterfactual=opt(Counterfactual, d.get("counterfactual")),
            single_counterfactuals=tuple(Counterfactual.from_dict(c) for c in d.get("single_counterfactuals", ())),
            divergence_counterfactual=opt(Counterfactual, d.get("divergence_counterfactual"))))

    def to_text(self) -> str:
        return format_explanation(self)


def _eviction_key(ev: dict) -> tuple:
    return (ev.get("instruction"), ev.get("tensor"))


def first_divergence(fail_evs: list[dict], pass_evs: list[dict], *, choice_only: bool = False) -> Divergence | None:
    """First index where the eviction sequences differ (in instruction or tensor; in
    tensor only with ``choice_only``), or ``None`` if they are identical."""
    for index in range(max(len(fail_evs), len(pass_evs))):
        a = fail_evs[index] if index < len(fail_evs) else None
        b = pass_evs[index] if index < len(pass_evs) else None
        if a is None or b is None:
            return Divergence(index, "length", a, b)
        if a.get("tensor") != b.get("tensor"):
            return Divergence(index, "choice", a, b)
        if not choice_only and _eviction_key(a) != _eviction_key(b):
            return Divergence(index, "timing", a, b)
    return None


def _summary(ratio: float, result: Any) -> RunSummary:
    log = result.log
    return RunSummary(
        ratio=ratio,
        budget=result.budget,
        status=result.status,
        clock=result.clock,
        remat_compute=result.remat_compute,
        max_memory=result.max_memory,
        evictions=len(log.evictions) if log is not None else 0,
        remats=len(log.remats) if log is not None else 0,
    )


def _cascade_names(oom: dict) -> list[str]:
    """Tensor names on the rematerialization cascade of an OOM record, innermost last."""
    for key in ("cascade", "cascade_stack", "stack", "pending"):
        if key in oom and oom[key]:
            names = []
            for item in oom[key]:
                if isinstance(item, str):
                    names.append(item)
                elif isinstance(item, dict):
                    names.append(str(item.get("tensor", item.get("name"))))
                else:
                    names.append(str(getattr(item, "tensor", getattr(item, "name", item))))
            return names
    return []


def _trace_names(trace: Any, names: tuple[str, ...]) -> frozenset[str]:
    """The trace-level names to keep resident for the simulator's tensor names.

    The simulator names the results of a ``MUTATE`` ``<arg>$`` (a new storage), while
    ``keep_resident`` takes names as written in the trace, where the mutated tensor
    keeps its name; keeping that name resident keeps every storage it was bound to.
    """
    known = getattr(trace, "name_storages", None)
    out = set()
    for name in names:
        if known is not None and name not in known and name.rstrip("$") in known:
            name = name.rstrip("$")
        out.add(name)
    return frozenset(out)


def _counterfactual(trace: Any, budget: int, heuristic: Any, overhead_limit, keep: tuple[str, ...]) -> Counterfactual:
    from memopt.dtr import replay

    result = replay(trace, budget, heuristic, overhead_limit=overhead_limit,
                    keep_resident=_trace_names(trace, keep), record=True)
    oom = result.log.oom if result.log is not None else None
    return Counterfactual(
        keep, result.status, result.clock, result.remat_compute, result.max_memory,
        oom_instruction=getattr(oom, "instruction", None),
        oom_op=getattr(oom, "op", None),
        oom_short=getattr(oom, "short", None),
    )


def explain(
    trace_path: str | os.PathLike,
    fail_ratio: float | str | Decimal,
    pass_ratio: float | str | Decimal,
    heuristic: Any = "dtr",
    *,
    overhead_limit: float | None = None,
    singles: int = MAX_SINGLE_COUNTERFACTUALS,
) -> Explanation:
    """Diagnose why ``trace_path`` fails at ``fail_ratio`` but passes at ``pass_ratio``.

    Raises :class:`OptionError` if the first ratio does not fail or the second does not
    pass. ``singles`` bounds the replays of the failing budget that keep one implicated
    tensor alone resident (all of them if there are at most ``singles``, else an evenly
    spaced sample along the cascade; 0 = none).
    """
    from memopt.dtr import replay

    path = check_trace_path(trace_path)
    check_heuristic(heuristic)
    trace, base = cached_trace(path)
    try:
        f_ratio, p_ratio = Decimal(str(fail_ratio)), Decimal(str(pass_ratio))
    except (InvalidOperation, TypeError):
        raise OptionError(f"ratios must be numbers, got {fail_ratio!r} and {pass_ratio!r}") from None
    for label, r in (("--fail", f_ratio), ("--pass", p_ratio)):
        if not r.is_finite() or r <= 0 or r > MAX_RATIO:
            raise OptionError(f"{label} ratio must be a finite number in (0, {MAX_RATIO}], got {r}")
    f_budget = ratio_budget(f_ratio, base.peak)
    p_budget = ratio_budget(p_ratio, base.peak)
    failed = replay(trace, f_budget, heuristic, overhead_limit=overhead_limit, record=True)
    passed = replay(trace, p_budget, heuristic, overhead_limit=overhead_limit, record=True)
    if failed.status == "pass":
        raise OptionError(f"ratio {f_ratio} (budget {f_budget}) does not fail: status pass")
    if passed.status != "pass":
        raise OptionError(f"ratio {p_ratio} (budget {p_budget}) does not pass: status {passed.status}")

    fail_evs = [_as_dict(e) for e in failed.log.evictions]
    pass_evs = [_as_dict(e) for e in passed.log.evictions]
    divergence = first_divergence(fail_evs, pass_evs)
    choice = first_divergence(fail_evs, pass_evs, choice_only=True)
    if choice is not None and divergence is not None and choice.index == divergence.index:
        choice = None  # same event; do not print it twice

    oom = _as_dict(failed.log.oom) if failed.log.oom is not None else None
    if oom:
        # The cascade runs outermost first: its head is the scheduled operator's own
        # output (never evicted yet, so keeping it resident means nothing); the rest are
        # the evicted tensors being recomputed, whose eviction made the cascade.
        implicated = tuple(dict.fromkeys(_cascade_names(oom)[1:]))
        reason = "tensors being rematerialized when the allocation failed"
        if not implicated:
            # The failing allocation was a model operator with no recomputation under
            # way: blame the evictions the passing run did not make.
            passed_evicted = {e.get("tensor") for e in pass_evs}
            only = [e.get("tensor") for e in fail_evs if e.get("tensor") not in passed_evicted]
            implicated = tuple(dict.fromkeys(t for t in only if t is not None))
            reason = "no recomputation under way; tensors only the failing run evicted"
    else:
        counts = Counter(_as_dict(r).get("tensor") for r in failed.log.remats)
        implicated = tuple(t for t, _ in counts.most_common(THRASH_IMPLICATED) if t is not None)
        reason = f"{failed.status}: the {len(implicated)} most often rematerialized tensors"

    counterfactual = None
    singles_out: list[Counterfactual] = []
    if implicated:
        counterfactual = _counterfactual(trace, f_budget, heuristic, overhead_limit, implicated)
        if singles > 0 and len(implicated) > 1:
            n = len(implicated)
            if n <= singles:
                picks = list(range(n))
            elif singles == 1:
                picks = [n - 1]  # the innermost: the recomputation the cascade bottoms out on
            else:
                picks = sorted({round(k * (n - 1) / (singles - 1)) for k in range(singles)})
            for name in (implicated[i] for i in picks):
                singles_out.append(_counterfactual(trace, f_budget, heuristic, overhead_limit, (name,)))

    divergence_cf = None
    first_choice = choice if choice is not None else (
        divergence if divergence is not None and divergence.kind == "choice" else None)
    if first_choice is not None and first_choice.fail is not None and first_choice.fail.get("tensor"):
        divergence_cf = _counterfactual(trace, f_budget, heuristic, overhead_limit,
                                        (first_choice.fail["tensor"],))

    return Explanation(
        divergence_counterfactual=divergence_cf,
        trace=Path(path).name,
        heuristic=heuristic_name(heuristic),
        overhead_limit=overhead_limit,
        fail=_summary(float(f_ratio), failed),
        pass_=_summary(float(p_ratio), passed),
        divergence=divergence,
        choice_divergence=choice,
        oom=oom,
        implicated=implicated,
        implicated_reason=reason,
        counterfactual=counterfactual,
        single_counterfactuals=tuple(singles_out),
    )


def _fmt_eviction(ev: dict | None) -> str:
    if ev is None:
        return "(no further eviction)"
    parts = [f"{ev.get('tensor')}"]
    if ev.get("size") is not None:
        parts.append(f"{ev['size']} B")
    where = f"instruction {ev.get('instruction')}"
    if ev.get("op") is not None:
        where += f" ({ev['op']})"
    parts.append(where)
    if ev.get("score") is not None:
        parts.append(f"score {ev['score']:.6g}" if isinstance(ev["score"], float) else f"score {ev['score']}")
    return ", ".join(parts)


def _abbrev(names, limit: int, sep: str = ", ") -> str:
    names = list(names)
    if len(names) <= limit:
        return sep.join(names)
    head = max(1, limit - 4)
    return sep.join(names[:head]) + f"{sep}... ({len(names) - head - 3} more){sep}" + sep.join(names[-3:])


def format_explanation(ex: Explanation) -> str:
    lines = [f"trace {ex.trace}, heuristic {ex.heuristic}"
             + (f", overhead limit {ex.overhead_limit}" if ex.overhead_limit else "")]
    for label, run in (("fail", ex.fail), ("pass", ex.pass_)):
        lines.append(
            f"  {label}: ratio {run.ratio} budget {run.budget}: {run.status}, clock {run.clock}, "
            f"remat {run.remat_compute}, max memory {run.max_memory}, "
            f"{run.evictions} evictions, {run.remats} remats"
        )
    lines.append("")
    for title, div in (("first divergence", ex.divergence), ("first choice divergence", ex.choice_divergence)):
        if div is None:
            continue
        lines.append(f"{title}: eviction #{div.index} ({div.kind})")
        lines.append(f"  failing run evicted {_fmt_eviction(div.fail)}")
        lines.append(f"  passing run evicted {_fmt_eviction(div.pass_)}")
    if ex.divergence is None:
        lines.append("eviction sequences are identical up to the failure")
    lines.append("")
    if ex.oom:
        oom = ex.oom
        known = ("instruction", "op", "requested", "available", "short", "cascade", "locked", "pinned")
        lines.append(
            f"out of memory at instruction {oom.get('instruction')} ({oom.get('op')}): "
            f"requested {oom.get('requested')} B, available {oom.get('available')} B, "
            f"short {oom.get('short')} B"
        )
        cascade = _cascade_names(oom)
        if oom.get("memory") is not None and oom.get("budget") is not None:
            lines.append(f"  memory in use {oom['memory']} B of budget {oom['budget']} B")
        lines.append(f"  materialization cascade ({len(cascade)}, outermost first): "
                     + (_abbrev(cascade, 14, " -> ") if cascade else "none"))
        for key in ("locked", "pinned"):
            items = oom.get(key)
            if isinstance(items, (list, tuple)):
                shown = ", ".join(map(str, items[:12])) + (" ..." if len(items) > 12 else "")
                lines.append(f"  {key} storages ({len(items)}): {shown}")
            elif items is not None:
                extra = f", {oom[key + '_bytes']} B" if oom.get(key + "_bytes") is not None else ""
                lines.append(f"  {key} storages: {items}{extra}")
        for key, value in oom.items():
            if key not in known + ("memory", "budget", "step", "cascade_stack", "stack", "pending") and not key.endswith("_bytes"):
                lines.append(f"  {key}: {value}")
    else:
        lines.append(f"no allocation failure: status {ex.fail.status}")
    lines.append("")
    lines.append(f"implicated: {len(ex.implicated)} {ex.implicated_reason}"
                 + (": " + _abbrev(ex.implicated, 14) if ex.implicated else ""))
    if ex.counterfactual is not None:
        cf = ex.counterfactual
        verdict = "the failure disappears" if cf.resolved else "the failure remains"
        lines.append(
            f"counterfactual: ratio {ex.fail.ratio} keeping {len(cf.keep_resident)} tensor(s) resident: "
            f"{cf.status} ({verdict}); clock {cf.clock}, remat {cf.remat_compute}, max memory {cf.max_memory}"
        )
        if cf.oom_instruction is not None:
            lines.append(f"  it runs out of memory at instruction {cf.oom_instruction} ({cf.oom_op}) "
                         f"instead, short {cf.oom_short} B")
        if ex.single_counterfactuals:
            fixes = ex.resolving_singles
            tried = len(ex.single_counterfactuals)
            sample = "" if tried == len(ex.implicated) else f" (a sample of {tried} along the cascade)"
            lines.append(
                f"  implicated tensors kept resident one at a time{sample}: {len(fixes)} of {tried} "
                "resolve the failure" + (": " + _abbrev(fixes, 20) if fixes else "")
            )
    dcf = ex.divergence_counterfactual
    if dcf is not None:
        verdict = "the failure disappears" if dcf.resolved else "the failure remains"
        where = (f" (out of memory at instruction {dcf.oom_instruction}, short {dcf.oom_short} B)"
                 if dcf.oom_instruction is not None else "")
        lines.append(
            f"counterfactual: keeping {dcf.keep_resident[0]} (the failing run's first diverging "
            f"choice) resident: {dcf.status} ({verdict}){where}"
        )
    return "\n".join(lines)
