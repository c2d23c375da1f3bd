"""Dynamic tensor rematerialization (DTR): trace replay at parity with simrd.

``load_trace`` parses a DTR log (:mod:`memopt.dtr.trace`), ``baseline`` runs simrd's
infinite-budget ``RuntimeV1``, ``replay`` / ``replay_ratio`` run
``RuntimeV2EagerOptimized`` under a budget with one of :data:`HEURISTICS` or a
user-defined score (:mod:`memopt.dtr.heuristics`, :mod:`memopt.dtr.simulator`).
"""

from memopt.dtr.heuristics import HEURISTICS, Heuristic, StorageView
from memopt.dtr.simulator import (Baseline, Eviction, OOMInfo, Remat, ReplayLog, ReplayResult,
                                  baseline, replay, replay_ratio)
from memopt.dtr.trace import Trace, load_trace

__all__ = ["HEURISTICS", "Heuristic", "StorageView", "Trace", "load_trace", "baseline",
           "replay", "replay_ratio", "Baseline", "ReplayResult", "ReplayLog", "Eviction",
           "Remat", "OOMInfo"]
