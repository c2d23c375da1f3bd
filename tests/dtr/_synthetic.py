"""A small hand-written DTR log exercising every record type, and simrd's outcomes on it.

The expected outcomes were produced by running the unmodified simrd
(uwsampl/dtr-prototype, ``RuntimeV2EagerOptimized``; baseline ``RuntimeV1`` with an
infinite budget) on exactly this log.
"""

import json
from pathlib import Path

RECORDS = [
    {"INSTRUCTION": "CONSTANT", "NAME": "pre"},
    {"INSTRUCTION": "MEMORY", "NAME": "pre", "MEMORY": "4"},
    {"INSTRUCTION": "ANNOTATE", "ANNOTATION": "START"},
    {"INSTRUCTION": "CONSTANT", "NAME": "w"},
    {"INSTRUCTION": "MEMORY", "NAME": "w", "MEMORY": "10"},
    {"INSTRUCTION": "CALL", "NAME": "f", "ARGS": ["w"], "RESULT": ["a"], "TIME": "5"},
    {"INSTRUCTION": "MEMORY", "NAME": "a", "MEMORY": "100"},
    {"INSTRUCTION": "ALIAS", "NAME": "a", "ALIAS": "-1"},
    {"INSTRUCTION": "CALL", "NAME": "g", "ARGS": ["a"], "RESULT": ["b"], "TIME": "7"},
    {"INSTRUCTION": "MEMORY", "NAME": "b", "MEMORY": "100"},
    {"INSTRUCTION": "ALIAS", "NAME": "b", "ALIAS": "-1"},
    {"INSTRUCTION": "CALL", "NAME": "view", "ARGS": ["b"], "RESULT": ["bv"], "TIME": "1"},
    {"INSTRUCTION": "MEMORY", "NAME": "bv", "MEMORY": "100"},
    {"INSTRUCTION": "ALIAS", "NAME": "bv", "ALIAS": "0"},
    {"INSTRUCTION": "CALL", "NAME": "h", "ARGS": ["bv", "w"], "RESULT": ["c", "c2"],
     "TIME": "11"},
    {"INSTRUCTION": "MEMORY", "NAME": "c", "MEMORY": "100"},
    {"INSTRUCTION": "ALIAS", "NAME": "c", "ALIAS": "-1"},
    {"INSTRUCTION": "MEMORY", "NAME": "c2", "MEMORY": "30"},
    {"INSTRUCTION": "ALIAS", "NAME": "c2", "ALIAS": "-1"},
    {"INSTRUCTION": "RELEASE", "NAME": "b"},
    {"INSTRUCTION": "COPY", "DST": "c3", "SRC": "c"},
    {"INSTRUCTION": "RELEASE", "NAME": "bv"},
    {"INSTRUCTION": "CALL", "NAME": "k", "ARGS": ["c", "c2"], "RESULT": ["d"], "TIME": "3"},
    {"INSTRUCTION": "MEMORY", "NAME": "d", "MEMORY": "50"},
    {"INSTRUCTION": "ALIAS", "NAME": "d", "ALIAS": "-1"},
    {"INSTRUCTION": "MUTATE", "NAME": "relu_", "ARGS": ["d"], "MUTATE": [0], "TIME": "2"},
    {"INSTRUCTION": "RELEASE", "NAME": "c"},
    {"INSTRUCTION": "CALL", "NAME": "m", "ARGS": ["a", "d"], "RESULT": ["e"], "TIME": "13"},
    {"INSTRUCTION": "MEMORY", "NAME": "e", "MEMORY": "20"},
    {"INSTRUCTION": "ALIAS", "NAME": "e", "ALIAS": "-1"},
    {"INSTRUCTION": "RELEASE", "NAME": "unknown_name_is_ignored"},
    {"INSTRUCTION": "COPY_FROM", "DST": "c3", "SRC": "e"},
    {"INSTRUCTION": "RELEASE", "NAME": "a"},
    {"INSTRUCTION": "RELEASE", "NAME": "c2"},
    {"INSTRUCTION": "CALL", "NAME": "n", "ARGS": ["e", "c3", "w"], "RESULT": ["f"],
     "TIME": "17"},
    {"INSTRUCTION": "MEMORY", "NAME": "f", "MEMORY": "60"},
    {"INSTRUCTION": "ALIAS", "NAME": "f", "ALIAS": "-1"},
]

LINES = [json.dumps(r, separators=(",", ":")) for r in RECORDS]

BASELINE_PEAK = 340
BASELINE_COMPUTE = 59

# heuristic -> budget -> (status, clock, remat_compute, max_memory, heuristic_evals)
_COMMON = {
    1000: ("pass", 60, 0, 340, 0),
    400: ("pass", 60, 0, 340, 0),
    300: ("pass", 65, 5, 290, 3),
    260: ("pass", 65, 5, 240, 3),
    240: ("pass", 65, 5, 240, 3),
    200: ("OOM", 6, 0, 110, 0),
    150: ("OOM", 6, 0, 110, 0),
}
SIMRD = {h: dict(_COMMON) for h in ("DTR", "DTREqClass", "DTRLocal", "MSPS",
                                      "LargestStorage")}
SIMRD["LRU"] = {**_COMMON, 260: ("pass", 65, 5, 260, 4), 240: ("pass", 65, 5, 240, 4)}
# DTR, budget 260, overhead limit 1.05 (remat limit 2.95): thrash
THRASH = ("thrash", 35, 29, 5, 240, 3)   # status, clock, model, remat, max_memory, evals


def write(tmp_path: Path, lines=None, name="synth.log") -> Path:
    path = tmp_path / name
    path.write_text("\n".join(LINES if lines is None else lines) + "\n")
    return path
