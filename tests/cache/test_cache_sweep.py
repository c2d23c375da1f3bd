"""Sweeps on the shared sweep machinery (memopt.cache.sweep, ``memopt cache sweep``): policies x
capacities of expert caches, and KV policies x budgets x commit lags on attention traces."""

from __future__ import annotations

import concurrent.futures as cf
import json
import math
from concurrent.futures.process import BrokenProcessPool

import numpy as np
import pytest

from conftest import SHARED
from memopt.cache import (dump_attention, dump_requests, kv_optimum, load_routes, make_attention_trace,
                          make_trace, simulate, simulate_kv)
from memopt.cache.sweep import (AttentionSource, TraceSource, parse_capacities, parse_kv_policies, parse_lags,
                                parse_policies, plot_cache_sweep, plot_kv_sweep, run_cache_sweep, run_kv_sweep)
from memopt.cli import main
from memopt.errors import OptionError
from memopt.sweep import InlineExecutor

ROUTES = SHARED / "data" / "moe-routes"
QWEN0 = ROUTES / "qwen15moe_layer0.jsonl"

# the hand-worked trace of the policy tests: LRU misses 7, Belady 5 at capacity 2
HAND = make_trace([0, 1, 2, 0, 1, 3, 0], [1, 1, 1, 1])


@pytest.fixture
def trace_file(tmp_path):
    path = tmp_path / "t.jsonl"
    dump_requests(HAND, path)
    return path


# ------------------------------------------------------------------ options


def test_capacity_grids():
    assert parse_capacities("1:4:1") == (1, 2, 3, 4)
    assert parse_capacities("0:10:4") == (0, 4, 8)  # B off the grid is not included
    assert parse_capacities("16,4, 8,4") == (4, 8, 16)
    assert parse_capacities("7") == (7,)


@pytest.mark.parametrize("spec", ["", "1:4", "1:4:1:1", "a:4:1", "4:1:1", "1:4:0", "1:4:-1", "-1,2", "1.5",
                                  "1,,2", "0:1000000000:1", str(2**62)])
def test_bad_capacity_grids(spec):
    with pytest.raises(OptionError) as err:
        parse_capacities(spec)
    assert "\n" not in str(err.value)


def test_policy_lists():
    assert parse_policies("lru,lfu,belady") == ("lru", "lfu", "belady")
    assert parse_policies("LRU, lru-k,lru-3,lru", k=4) == ("lru", "lru-4", "lru-3")
    for bad in ("lru,,belady", "fifo", ""):
        with pytest.raises(OptionError):
            parse_policies(bad)


# ------------------------------------------------------------------ sweeps


def test_sweep_equals_simulate_on_the_hand_worked_trace(trace_file):
    res = run_cache_sweep(HAND, "lru,lfu,belady", "1:4:1")
    assert [(p.policy, p.capacity) for p in res.points] == \
        [(pol, c) for pol in ("lru", "lfu", "belady") for c in (1, 2, 3, 4)]
    for p in res.points:
        want = simulate(HAND, p.policy, p.capacity)
        assert (p.status, p.hits, p.misses, p.bytes_moved, p.optimal) == \
            ("ok", want.hits, want.misses, want.bytes_moved, want.optimal)
    assert res.point("lru", 2).misses == 7 and res.point("belady", 2).misses == 5
    doc = res.to_dict()
    assert doc["requests"] == 7 and doc["lost"] == [] and doc["capacities"] == [1, 2, 3, 4]
    # the same sweep from the file, in-process and on threads (local processes: the CLI test)
    source = TraceSource.of(trace_file)
    for kw in ({}, {"executor": "threads", "jobs": 2}):
        other = run_cache_sweep(source, "lru,lfu,belady", [4, 3, 2, 1, 2], **kw).to_dict()
        assert other["points"] == doc["points"], kw


@pytest.mark.skipif(not QWEN0.exists(), reason=f"{QWEN0} not found")
def test_sweep_on_real_routes_matches_simulate():
    source = TraceSource.of([QWEN0], drop_warmup=True, skip_passes=20)
    trace = load_routes([QWEN0], drop_warmup=True, skip_passes=20)
    res = run_cache_sweep(source, "lru,lru-2,belady", "4,16,40")
    assert res.requests == trace.n_requests > 0
    for p in res.points:
        assert p.to_dict()["hits"] == simulate(trace, p.policy, p.capacity).hits
    # Belady is optimal for unit sizes: never more misses than an online policy
    for c in res.capacities:
        assert res.point("belady", c).misses <= min(res.point(q, c).misses for q in ("lru", "lru-2"))


def test_a_lost_point_is_reported_and_the_others_kept():
    class BreaksOnBelady3(cf.Executor):
        def submit(self, fn, /, *args, **kwargs):
            if ("belady", 3) == tuple(args[1]):  # the task key
                fut = cf.Future()
                fut.set_exception(BrokenProcessPool("a worker was terminated abruptly"))
                return fut
            return InlineExecutor().submit(fn, *args, **kwargs)

    res = run_cache_sweep(HAND, "lru,belady", "2:3:1", executor=BreaksOnBelady3())
    lost = res.point("belady", 3)
    assert lost.status == "lost" and lost.reason.startswith("BrokenProcessPool")
    assert [p.status for p in res.points] == ["ok", "ok", "ok", "lost"]
    assert res.to_dict()["lost"] == [{"policy": "belady", "capacity": 3, "reason": lost.reason}]
    assert res.point("belady", 2).misses == 5


def test_hit_rate_plot(tmp_path):
    pytest.importorskip("matplotlib")
    out = tmp_path / "hit.png"
    plot_cache_sweep(run_cache_sweep(HAND, "lru,belady", "1:4:1"), out)
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


# ------------------------------------------------------------------ CLI


def test_cli_json_text_and_plot(trace_file, tmp_path, capsys):
    plot = tmp_path / "p.png"
    argv = ["cache", "sweep", str(trace_file), "--policies", "lru,belady", "--capacities", "2,3"]
    assert main(argv + ["--json"]) == 0
    out, err = capsys.readouterr()
    doc = json.loads(out)
    assert out.count("\n") == 1 and err == ""  # one JSON object, no progress bar
    assert {"trace", "caches", "requests", "policies", "capacities", "points", "lost", "seconds"} <= set(doc)
    assert [(p["policy"], p["capacity"], p["misses"]) for p in doc["points"]] == \
        [("lru", 2, 7), ("lru", 3, 4), ("belady", 2, 5), ("belady", 3, 4)]
    assert main(argv + ["--jobs", "2", "--plot", str(plot)]) == 0
    out = capsys.readouterr().out
    assert "belady" in out and "hit rate" in out and plot.stat().st_size > 0


@pytest.mark.parametrize("extra, needle", [
    (["--capacities", "1:4"], "bad capacities"), (["--capacities", "x"], "bad capacities"),
    (["--policies", "fifo"], "unknown policy"), (["--executor", "dask://h:70000"], "bad port"),
    (["--executor", "mpi://h:1"], "unknown scheme"), (["--jobs", "0"], "--jobs"),
])
def test_cli_bad_options_are_one_line(trace_file, capsys, extra, needle):
    argv = {"--policies": "lru", "--capacities": "2"}
    for flag, value in zip(extra[::2], extra[1::2]):
        argv[flag] = value
    code = main(["cache", "sweep", str(trace_file)] + [x for kv in argv.items() for x in kv])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and needle in err[0]


def test_cli_plot_must_not_overwrite_a_trace(trace_file, capsys):
    before = trace_file.read_bytes()
    assert main(["cache", "sweep", str(trace_file), "--policies", "lru", "--capacities", "2",
                 "--plot", str(trace_file)]) == 2
    assert "input file" in capsys.readouterr().err and trace_file.read_bytes() == before


# ------------------------------------------------------------------ KV sweeps (attention traces)

KV_TRACE = make_attention_trace(np.tril(np.random.default_rng(5).integers(0, 30, (2, 2, 20, 20))),
                                np.random.default_rng(6).random(20) < 0.6, scale=30, name="kv")


@pytest.fixture
def kv_file(tmp_path):
    path = tmp_path / "kv.jsonl"
    dump_attention(KV_TRACE, path)
    return path


def test_kv_sweep_equals_simulate_and_optimum(kv_file):
    res = run_kv_sweep(KV_TRACE, "h2o,rmm,opt", [6, 0.2, 3], lags="0,2,inf", prefill=2)
    assert res.budgets == (3, 4, 6) and res.lags == (0, 2, math.inf)
    assert [(p.policy, p.budget, p.lag) for p in res.points][:4] == \
        [("h2o", 3, None), ("h2o", 4, None), ("h2o", 6, None), ("rmm", 3, 0)]
    assert len(res.points) == 3 + 9 + 3 and not res.lost
    for p in res.points:
        if p.policy == "opt":
            want = kv_optimum(KV_TRACE, p.budget, prefill=2)
        else:
            want = simulate_kv(KV_TRACE, p.policy, p.budget, prefill=2,
                               **({"lag": p.lag} if p.policy == "rmm" else {}))
        assert (p.status, p.retained, p.total, p.optimal) == ("ok", want.retained, want.total, p.policy == "opt")
    for b in res.budgets:  # the end of the lag axis: nothing beats the optimum
        assert all(p.retained <= res.point("opt", b).retained for p in res.points if p.budget == b)
    doc = res.to_dict()
    assert doc["lags"] == [0, 2, "inf"] and doc["lost"] == [] and doc["steps"] == 20
    # the same from the file, on threads (local processes: the CLI test)
    for kw in ({}, {"executor": "threads", "jobs": 2}):
        other = run_kv_sweep(AttentionSource.of(kv_file), "h2o,rmm,opt", [3, 4, 6], lags=[2, 0, math.inf],
                             prefill=2, **kw)
        assert other.to_dict()["points"] == doc["points"], kw


def test_kv_sweep_with_layer_shared_budgets(kv_file, capsys):
    # share="layer": each point equals simulate_kv with the layer's KV heads sharing 2 x B
    res = run_kv_sweep(KV_TRACE, "h2o,rmm,tova", [2, 5], lags="0,3", prefill=1, share="layer")
    assert res.share == "layer" and res.to_dict()["share"] == "layer" and not res.lost
    differs = False
    for p in res.points:
        extra = {"lag": p.lag} if p.policy == "rmm" else {}
        want = simulate_kv(KV_TRACE, p.policy, p.budget, prefill=1, share="layer", **extra)
        assert (p.status, p.retained, p.total) == ("ok", want.retained, want.total)
        differs |= want.retained != simulate_kv(KV_TRACE, p.policy, p.budget, prefill=1, **extra).retained
    assert differs  # sharing changed some schedule: the option reached the policies
    with pytest.raises(OptionError, match="per KV head"):
        run_kv_sweep(KV_TRACE, "h2o,opt", [4], share="layer")
    with pytest.raises(OptionError, match="sharing"):
        run_kv_sweep(KV_TRACE, "h2o", [4], share="model")
    argv = ["cache", "sweep", str(kv_file), "--policies", "h2o,tova", "--budgets", "2,5", "--prefill", "1",
            "--share", "layer", "--json"]
    assert main(argv) == 0
    assert json.loads(capsys.readouterr().out)["points"] == \
        run_kv_sweep(KV_TRACE, "h2o,tova", [2, 5], prefill=1, share="layer").to_dict()["points"]
    assert main(argv[:-1] + ["--policies", "h2o,opt"]) == 2
    assert "per KV head" in capsys.readouterr().err


def test_kv_sweep_lost_point_is_reported_and_the_others_kept():
    class BreaksOnOpt(cf.Executor):
        def submit(self, fn, /, *args, **kwargs):
            if tuple(args[1])[0] == "opt":  # the task key (policy, budget, lag)
                fut = cf.Future()
                fut.set_exception(BrokenProcessPool("a worker was terminated abruptly"))
                return fut
            return InlineExecutor().submit(fn, *args, **kwargs)

    res = run_kv_sweep(KV_TRACE, "h2o,opt", [4], executor=BreaksOnOpt())
    assert [p.status for p in res.points] == ["ok", "lost"]
    assert res.to_dict()["lost"] == [{"policy": "opt", "budget": 4, "lag": None,
                                      "reason": res.points[1].reason}]
    assert res.points[1].reason.startswith("BrokenProcessPool")


def test_kv_options():
    assert parse_kv_policies("H2O, opt,h2o") == ("h2o", "opt")
    assert parse_lags("4,0,inf,4") == (0, 4, math.inf)
    for bad in ("h2o,,opt", "fifo", ""):
        with pytest.raises(OptionError):
            parse_kv_policies(bad)
    for bad in ("-1", "1.5", "x", ""):
        with pytest.raises(OptionError):
            parse_lags(bad)
    with pytest.raises(OptionError):
        run_kv_sweep(KV_TRACE, "h2o", [])
    with pytest.raises(OptionError):
        run_kv_sweep(KV_TRACE, "h2o", [4], prefill=21)


def test_kv_plots(tmp_path):
    pytest.importorskip("matplotlib")
    res = run_kv_sweep(KV_TRACE, "h2o,rmm,opt", [3, 6], lags="0,1,inf")
    plot_kv_sweep(res, tmp_path / "b.png", tmp_path / "l.png")
    for name in ("b.png", "l.png"):
        assert (tmp_path / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_kv_cli_json_text_and_plots(kv_file, tmp_path, capsys):
    argv = ["cache", "sweep", str(kv_file), "--policies", "h2o,rmm,opt", "--budgets", "3,25%,0.5",
            "--lags", "0,inf", "--prefill", "2"]
    assert main(argv + ["--json"]) == 0
    out, err = capsys.readouterr()
    doc = json.loads(out)
    assert out.count("\n") == 1 and err == ""  # one JSON object, no progress bar
    assert doc["budgets"] == [3, 5, 10] and doc["lags"] == [0, "inf"] and doc["prefill"] == 2
    want = run_kv_sweep(KV_TRACE, "h2o,rmm,opt", [3, 5, 10], lags="0,inf", prefill=2).to_dict()
    assert doc["points"] == want["points"]
    plot = tmp_path / "kv.png"
    assert main(argv + ["--jobs", "2", "--plot", str(plot)]) == 0
    out = capsys.readouterr().out
    assert "opt" in out and "rmm" in out and "retained" in out
    assert plot.stat().st_size > 0 and (tmp_path / "kv-lag.png").stat().st_size > 0


@pytest.mark.parametrize("extra, needle", [
    (["--capacities", "4"], "--capacities applies to routing traces"),
    (["--per-layer"], "--per-layer applies to routing traces"),
    (["--lags", "2"], "--lags applies to the rmm policy"),
    (["--policies", "fifo"], "unknown KV policy"),
    (["--policies", "rmm", "--lags", "-1"], "bad lags"),
    (["--budgets", "1.5"], "(0, 1]"), (["--budgets", ""], "not a number"),
    (["--prefill", "99"], "--prefill"), (["--executor", "mpi://h:1"], "unknown scheme"),
])
def test_kv_cli_bad_options_are_one_line(kv_file, capsys, extra, needle):
    argv = ["cache", "sweep", str(kv_file), "--policies", "h2o", "--budgets", "4"]
    code = main(argv + extra)
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and needle in err[0]


def test_cli_expert_and_kv_options_do_not_mix(trace_file, kv_file, capsys):
    assert main(["cache", "sweep", str(trace_file), "--policies", "lru"]) == 2
    assert "--capacities" in capsys.readouterr().err
    assert main(["cache", "sweep", str(trace_file), "--policies", "lru", "--capacities", "2",
                 "--budgets", "3"]) == 2
    assert "--budgets applies to a memopt-attention trace" in capsys.readouterr().err
    assert main(["cache", "sweep", str(trace_file), "--policies", "lru", "--capacities", "2",
                 "--share", "layer"]) == 2
    assert "--share applies to a memopt-attention trace" in capsys.readouterr().err
    assert main(["cache", "sweep", str(kv_file), "--policies", "h2o"]) == 2
    assert "--budgets" in capsys.readouterr().err
