"""File formats: round trips, the published-graph importer, and errors on bad files."""

from __future__ import annotations

import json

import numpy as np
import pytest

from memopt.core import peak, validate_order
from memopt.errors import FormatError, GraphError
from memopt.io import graph_to_doc, instance_from_doc, load_instance, plan_order, plan_to_doc, program_to_doc
from memopt.core import program_from_graph
from memopt.schedule.brute_force import random_tensor_graph

from conftest import shared_graph


def test_graph_round_trip(tmp_path):
    rng = np.random.default_rng(3)
    for _ in range(20):
        g = random_tensor_graph(rng, 7)
        path = tmp_path / "g.json"
        path.write_text(json.dumps(graph_to_doc(g)))
        inst = load_instance(path)
        order = g.topological_order()
        assert inst.graph.op_names == g.op_names
        assert peak(inst.graph, order) == peak(g, order)


def test_program_round_trip(tmp_path):
    g = random_tensor_graph(np.random.default_rng(5), 6)
    prog = program_from_graph(g)
    path = tmp_path / "p.json"
    path.write_text(json.dumps(program_to_doc(prog)))
    inst = load_instance(path)
    assert inst.program is not None
    assert inst.program.peak() == prog.peak() == peak(g, g.topological_order())


def test_plan_round_trip():
    inst = instance_from_doc(graph_to_doc(random_tensor_graph(np.random.default_rng(1), 5)))
    order = inst.graph.topological_order()
    doc = plan_to_doc(inst, order, peak=peak(inst.graph, order), status="feasible")
    back, _ = plan_order(inst, json.loads(json.dumps(doc)))
    assert back.tolist() == order.tolist()


@pytest.mark.parametrize("name,ops,out_peak", [
    ("VGG16_256_224_224_3_test_nx.json", 22, 6576668672),
    ("random_layered_n100_w0.27_nlv0.75_ed0.2_scd0.14.json", 100, 46319),
])
def test_published_graph_import(name, ops, out_peak):
    inst = load_instance(shared_graph(name))
    assert inst.num_ops == ops
    validate_order(inst.graph, inst.input_order)
    assert peak(inst.graph, inst.input_order) == out_peak


def test_random_layered_uses_graph_order():
    inst = load_instance(shared_graph("random_layered_n100_w0.27_nlv0.75_ed0.2_scd0.14.json"))
    doc = json.loads(shared_graph("random_layered_n100_w0.27_nlv0.75_ed0.2_scd0.14.json").read_text())
    assert [inst.labels[i] for i in inst.input_order] == doc["graph"]["order"]
    # sinks are graph outputs; node ids are the labels
    assert inst.labels[1] == 1 and bool(inst.graph.tensor_output[1])


def test_checkmate_semantics_small():
    doc = {"directed": True, "graph": {"name": "tiny"},
           "nodes": [{"id": 0, "cost_ram": 5, "cost_cpu": 1}, {"id": 1, "cost_ram": 3, "cost_cpu": 2},
                     {"id": 2, "cost_ram": 4, "cost_cpu": 1}],
           "links": [{"source": 0, "target": 1}, {"source": 0, "target": 2}, {"source": 1, "target": 2}]}
    inst = instance_from_doc(doc)
    g = inst.graph
    assert g.tensor_output.tolist() == [False, False, True]
    # 0 runs: 5; 1 runs: 5+3; 2 runs: 5+3+4 (inputs freed after)
    assert peak(g, [0, 1, 2]) == 12


BAD_FILES = [
    ('{"format": "memopt-graph", "version": 1, "tensors": [{"name": "a", "size": 3}], "ops": [{"name": "f", "inputs": ["b"]}]',
     FormatError, "truncated JSON"),
    ('{"format": "memopt-graph", "version": 1, "tensors": [{"name": "a", "size": -3}], "ops": []}', GraphError, "'a'.*negative"),
    ('{"format": "memopt-graph", "version": 1, "tensors": [{"name": "a", "size": 3}], "ops": [{"name": "f", "inputs": ["b"]}]}',
     GraphError, "op 'f' reads unknown tensor 'b'"),
    ('{"format": "memopt-graph", "version": 7, "tensors": [], "ops": []}', FormatError, "version 7"),
    ('{"format": "memopt-graph", "version": 1, "tensors": [{"size": 3}], "ops": []}', FormatError, "tensor #0: missing field 'name'"),
    ('{"nodes": [{"id": 0, "cost_ram": 1, "cost_cpu": 1}], "links": [{"source": 0, "target": 9}]}', GraphError, "unknown node 9"),
    ('{"nodes": [{"id": 0, "cost_ram": 1, "cost_cpu": 1}, {"id": 1, "cost_ram": 1, "cost_cpu": 1}],'
     ' "links": [{"source": 0, "target": 1}, {"source": 1, "target": 0}]}', GraphError, "cycle among ops"),
    ('{"nodes": [{"id": 0, "cost_ram": -1, "cost_cpu": 1}], "links": []}', GraphError, "node 0.*negative"),
    ('{"nodes": [{"id": 0, "cost_cpu": 1, "cost_ram": 1}, {"id": 0, "cost_ram": 1, "cost_cpu": 1}], "links": []}',
     FormatError, "appears twice"),
    ('{"format": "memopt-graph", "version": 1, "tensors": [{"name": "a', FormatError, "truncated JSON at line 1"),
    ('{"format": "memopt-graph" "version": 1}', FormatError, "malformed JSON at line 1, column 27"),
    ('{"format": "memopt-graph", "version": 1, "tensors": [{"name": "a", "size": 1, "output": "false"}], "ops": []}',
     FormatError, "tensor 'a': field 'output' must be true or false"),
    ('{"nodes": [{"id": 0, "cost_ram": 1e300, "cost_cpu": 1}], "links": []}', FormatError, "node 0.*beyond"),
    ('{"nodes": [{"id": 0, "cost_ram": 1, "cost_cpu": 1}], "links": [{"source": [0], "target": 0}]}',
     FormatError, "link #0: endpoint \\[0\\] is not a node id"),
    ("[" * 100000 + "]" * 100000, FormatError, "nested too deeply"),
    ('{"hello": 1}', FormatError, "not a memopt graph"),
    ('', FormatError, "empty file"),
]


@pytest.mark.parametrize("text,exc,message", BAD_FILES)
def test_bad_files_get_clear_errors(tmp_path, text, exc, message):
    path = tmp_path / "bad.json"
    path.write_text(text)
    with pytest.raises(exc, match=message):
        load_instance(path)


def test_node_list_not_topological_falls_back_to_kahn():
    doc = {"nodes": [{"id": 5, "cost_ram": 1, "cost_cpu": 1}, {"id": 3, "cost_ram": 2, "cost_cpu": 1}],
           "links": [{"source": 3, "target": 5}]}
    inst = instance_from_doc(doc)
    assert [inst.labels[i] for i in inst.input_order] == [3, 5]
    assert "Kahn" in inst.meta["input_order"]
