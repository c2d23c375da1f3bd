"""Bounded-memory caches (``docs/cache.md``): request traces, eviction policies, offline optima and
residency certificates for expert offloading.

* :func:`load_routes` reads MoE expert-routing logs (object = ``(layer, expert)``),
  :func:`load_requests` / :func:`dump_requests` the ``memopt-requests`` format
  (:mod:`memopt.cache.routes`, ``docs/cache.md``);
* :func:`simulate` runs LRU, LFU, LRU-k or Belady (:mod:`memopt.cache.policies`);
* :func:`offline_optimum` (exact MIP, CP-SAT) and :func:`flow_lower_bound` (FOO-style
  min-cost flow) give the least traffic any policy needs (:mod:`memopt.cache.offline`);
* :func:`certify_residency` / :func:`verify_residency_certificate` build and check the
  residency certificate (:mod:`memopt.cache.certificate`);
* KV caches: :func:`load_attention` reads ``memopt-attention`` traces
  (:mod:`memopt.cache.kv_trace`; recorded from a real LM by :mod:`memopt.cache.kv_record`),
  :func:`simulate_kv` replays StreamingLLM, H2O, SnapKV, TOVA, LRU and fixed-lag commit
  (:mod:`memopt.cache.kv_policies`; per-head or per-layer budgets, one online
  :class:`KVPolicy` state machine per policy), :func:`kv_optimum` is the exact offline optimum
  (:mod:`memopt.cache.kv_optimum`), :func:`evaluate_kv` runs the same policies inside a real
  model, closed loop: perplexity, agreement, retained attention (:mod:`memopt.cache.kv_eval`;
  torch and transformers imported lazily).
"""

from memopt.cache.kv_optimum import KVOptimum, kv_optimum
from memopt.cache.kv_eval import KVEvalResult, KVEvaluation, KVSetting, evaluate_kv
from memopt.cache.kv_policies import KV_POLICIES, KVPolicy, KVResult, simulate_kv
from memopt.cache.kv_trace import (AttentionTrace, dump_attention, load_attention,
                                   make_attention_trace)
from memopt.cache.certificate import (CERT_FORMAT, certify_residency, parse_envelopes,
                                      verify_residency_certificate)
from memopt.cache.offline import (FlowBound, OfflineResult, flow_lower_bound, offline_optimum,
                                  schedule_traffic)
from memopt.cache.policies import POLICIES, SimResult, belady, simulate
from memopt.cache.routes import (RequestTrace, dump_requests, load_requests, load_routes,
                                 make_trace, parse_requests)

__all__ = ["RequestTrace", "make_trace", "load_routes", "load_requests", "parse_requests",
           "dump_requests", "POLICIES", "SimResult", "simulate", "belady", "OfflineResult",
           "FlowBound", "offline_optimum", "flow_lower_bound", "schedule_traffic",
           "CERT_FORMAT", "certify_residency", "verify_residency_certificate", "parse_envelopes",
           "AttentionTrace", "make_attention_trace", "load_attention", "dump_attention",
           "KV_POLICIES", "KVResult", "KVPolicy", "simulate_kv", "KVOptimum", "kv_optimum",
           "KVSetting", "KVEvalResult", "KVEvaluation", "evaluate_kv"]
