"""memopt.adapters.onnx and ``memopt onnx``: exact sizes, reordered models that pass the ONNX
checker, bitwise-identical outputs in onnxruntime, and modelled = measured to the byte after
every kernel (real onnxruntime, no timings)."""

from __future__ import annotations

import json

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

import _onnx_models as M
from onnx import TensorProto, helper

from memopt.adapters import onnx as adapter
from memopt.cli import main
from memopt.core import peak as model_peak
from memopt.errors import FormatError, MemoptError


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("onnx")
    out = {}
    for name, fn in M.ALL.items():
        out[name] = d / f"{name}.onnx"
        onnx.save(fn(), out[name])
    out["unknown_shape"] = d / "unknown_shape.onnx"
    onnx.save(M.unknown_shape(), out["unknown_shape"])
    out["subgraph"] = d / "subgraph.onnx"
    onnx.save(M.with_subgraph(), out["subgraph"])
    return out


@pytest.fixture(scope="module")
def reports(files, tmp_path_factory):
    d = tmp_path_factory.mktemp("reordered")
    return {name: adapter.reorder(files[name], d / f"{name}.onnx", time_limit=10) for name in M.ALL}


# ------------------------------------------------------------------------------------- loading
def test_load_sizes_are_exact(files):
    g, mp = adapter.load(files["diamond"])
    size = dict(zip(g.tensor_names, g.tensor_size.tolist()))
    resident = dict(zip(g.tensor_names, g.tensor_resident.tolist()))
    output = dict(zip(g.tensor_names, g.tensor_output.tolist()))
    model = onnx.load(files["diamond"])
    # every initializer: resident, its exact bytes
    for init in model.graph.initializer:
        arr = onnx.numpy_helper.to_array(init)
        assert size[init.name] == arr.nbytes and resident[init.name]
    assert size["x"] == 32 * 64 * 4 and resident["x"]  # a caller-owned input
    assert size["y"] == 32 * 64 * 4 and output["y"] and not resident["y"]
    # MatMul outputs: full size; the in-place Relu after each is a size-0 view of it
    for n in model.graph.node:
        if n.op_type == "MatMul":
            w = next(i for i in model.graph.initializer if i.name == n.input[1])
            assert size[n.output[0]] == 32 * w.dims[1] * 4
        if n.op_type == "Relu":
            assert size[n.output[0]] == 0 and mp.alias[n.output[0]] == n.input[0]
    assert mp.resident_bytes == sum(size[t] for t in g.tensor_names if resident[t])
    assert g.num_ops == len(model.graph.node)


def test_views_keep_their_base_alive_and_constants_are_resident(files):
    g, mp = adapter.load(files["views"])
    size = dict(zip(g.tensor_names, g.tensor_size.tolist()))
    model = onnx.load(files["views"])
    nodes: dict = {}
    for n in model.graph.node:
        nodes.setdefault(n.op_type, n)  # the first node of each type
    base = nodes["MatMul"].output[0]
    for op in ("Reshape", "Squeeze", "Flatten", "Identity", "Sigmoid", "Tanh"):
        out = nodes[op].output[0]
        assert size[out] == 0 and mp.alias[out] == base
    # every reader of a view also reads the base (it stays alive)
    mul = g.op_index[nodes["Mul"].name]
    assert base in {g.tensor_names[t] for t in g.inputs_of(mul)}
    # Constant nodes are not ops: onnxruntime turns them into initializers
    assert len(mp.constant_nodes) == 2 and g.num_ops == len(model.graph.node) - 2
    assert all(mp.kind[model.graph.node[i].output[0]] == "constant" for i in mp.constant_nodes)
    # the graph output produced by a Reshape gets a fresh buffer (onnxruntime copies into it)
    assert size["y"] == 64 * 4 * 4 and "y" not in mp.alias
    # the Softmax writes in place only if it runs after the Mul that also reads its input
    assert mp.conditional_inplace == (nodes["Softmax"].name,)


def test_unread_results_are_held_to_the_end(files):
    """onnxruntime has no release action for a buffer nobody reads: it stays allocated until the
    run ends, so the graph keeps it as if it were an output."""
    g, mp = adapter.load(files["edges"])
    out = dict(zip(g.tensor_names, g.tensor_output.tolist()))
    assert out["unused"] and out["y"] and out["z"] and not out["b"]
    assert mp.conditional_inplace == ("Relu_4",) and mp.node_names[0] == "MatMul_0"


def test_views_of_resident_buffers(tmp_path):
    onnx.save(M.resident_views(), tmp_path / "rv.onnx")
    g, mp = adapter.load(tmp_path / "rv.onnx")
    assert mp.alias == {"r": "W", "f": "W", "xi": "x"}
    size = dict(zip(g.tensor_names, g.tensor_size.tolist()))
    assert size["rf"] == 8 * 8 * 4 and size["xs"] == 4 * 8 * 4  # in place on a resident view: fresh
    rep = adapter.reorder(tmp_path / "rv.onnx", tmp_path / "o.onnx", time_limit=2)
    assert rep.kernels_equal_before and rep.kernels_equal_after and rep.bitwise_equal
    assert rep.measured_after == rep.modelled_after == rep.peak_after


def test_unknown_shape_names_the_tensor(files):
    with pytest.raises(FormatError, match=r"tensor 'x' has an unknown dimension 0 \('batch'\)"):
        adapter.load(files["unknown_shape"])


def test_subgraph_is_refused_naming_the_node(files):
    with pytest.raises(FormatError, match=r"node 'the_if' .*If.*not supported"):
        adapter.load(files["subgraph"])


def test_missing_and_garbage_files(tmp_path):
    with pytest.raises(FormatError, match="not found"):
        adapter.load(tmp_path / "nope.onnx")
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"\x08\x07garbage that is not protobuf\xff\xff")
    with pytest.raises(FormatError, match="bad.onnx"):
        adapter.load(bad)


def test_string_tensors_are_refused(tmp_path):
    g = helper.make_graph([helper.make_node("Identity", ["s"], ["t"], name="id")], "str",
                          [helper.make_tensor_value_info("s", TensorProto.STRING, [2])],
                          [helper.make_tensor_value_info("t", TensorProto.STRING, [2])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.save(m, tmp_path / "s.onnx")
    with pytest.raises(FormatError, match="tensor 's' .*STRING"):
        adapter.load(tmp_path / "s.onnx")


# ------------------------------------------- onnxruntime's buffer sharing, verified by measurement
def _probe_delta(tmp_path, op: str, *, shared: bool, extra=(), inits=(), attrs=None, shape=(2, 500)) -> int:
    """Bytes the kernel of ``op`` allocates when its input is an intermediate read by it alone
    (``shared=False``) or also by a later node (``shared=True``)."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))
    nodes = [helper.make_node("Sigmoid", ["x"], ["a"], name="p"),
             helper.make_node(op, ["a", *extra], ["b"], name="op", **(attrs or {})),
             helper.make_node("Neg", ["b"], ["y"], name="c")]
    outs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)]
    if shared:
        nodes.append(helper.make_node("Neg", ["a"], ["y2"], name="d"))
        outs.append(helper.make_tensor_value_info("y2", TensorProto.FLOAT, None))
    m = helper.make_model(helper.make_graph(nodes, "probe", [x], outs, list(inits)),
                          opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    m = onnx.shape_inference.infer_shapes(m)
    path = tmp_path / f"{op}.onnx"
    onnx.save(m, path)
    _, mp = adapter.load(path)
    meas = adapter.measure(m, mp)
    k = meas.order.index("op")
    before = meas.after_kernel[k - 1] if k else meas.baseline
    return meas.after_kernel[k] - before


@pytest.mark.parametrize("op", sorted(adapter.INPLACE_OPS - {"Cast", "Clip", "Shrink"}) + ["Cast", "Clip", "Shrink"])
def test_inplace_table_matches_onnxruntime(tmp_path, op):
    attrs = {"to": TensorProto.FLOAT} if op == "Cast" else None
    assert _probe_delta(tmp_path, op, shared=False, attrs=attrs) == 0          # last reader: in place
    assert _probe_delta(tmp_path, op, shared=True, attrs=attrs) == 2 * 500 * 4  # another reader left: fresh


@pytest.mark.parametrize("op", sorted(adapter.ALIAS_OPS))
def test_alias_table_matches_onnxruntime(tmp_path, op):
    extra, inits, shape = (), (), (2, 500)
    if op == "Reshape":
        extra, inits = ("s",), (helper.make_tensor("s", TensorProto.INT64, [1], [1000]),)
    if op in ("Squeeze", "Unsqueeze"):
        extra, inits = ("ax",), (helper.make_tensor("ax", TensorProto.INT64, [1], [0]),)
        shape = (1, 1000) if op == "Squeeze" else shape
    assert _probe_delta(tmp_path, op, shared=True, extra=extra, inits=inits, shape=shape) == 0  # always a view


@pytest.mark.parametrize("op", ["Add", "Mul", "Neg", "Exp", "Abs", "Transpose", "Dropout"])
def test_other_kernels_allocate(tmp_path, op):
    extra, inits = (), ()
    if op in ("Add", "Mul"):
        extra, inits = ("w",), (onnx.numpy_helper.from_array(np.ones(500, np.float32), "w"),)
    assert _probe_delta(tmp_path, op, shared=False, extra=extra, inits=inits) == 2 * 500 * 4


# ----------------------------------------------------------------------------------- reordering
@pytest.mark.parametrize("name", list(M.ALL))
def test_reordered_model_passes_full_check_and_follows_the_plan(reports, name):
    rep = reports[name]
    m = onnx.load(rep.output)
    onnx.checker.check_model(m, full_check=True)
    assert [n.name for n in m.graph.node if n.op_type != "Constant"] == list(rep.order)
    assert rep.followed_order  # onnxruntime ran exactly the written order


@pytest.mark.parametrize("name", list(M.ALL))
def test_outputs_bitwise_equal_and_measured_equals_modelled(reports, name):
    rep = reports[name]
    assert rep.bitwise_equal is True
    # the bytes in use after every kernel are the model's, to the byte, and no kernel of these
    # models holds scratch: the measured peaks are the runs' exact peaks
    assert rep.kernels_equal_before and rep.kernels_equal_after
    assert rep.scratch_before == 0 and rep.scratch_after == 0
    assert rep.exact_before and rep.exact_after
    assert rep.measured_before == rep.modelled_before == rep.peak_before
    assert rep.measured_after == rep.modelled_after == rep.peak_after


@pytest.mark.parametrize("name", list(M.BRANCHING))
def test_memopt_beats_onnxruntime_default_order_on_branching_models(reports, name):
    rep = reports[name]
    assert rep.baseline == "ort-default"
    assert rep.measured_after < rep.measured_before
    assert rep.peak_after == rep.lower_bound and rep.status in ("certified", "optimal")


def test_never_worse_than_the_default_order(reports):
    for rep in reports.values():
        assert rep.peak_after <= rep.peak_before
        assert rep.modelled_after <= rep.modelled_before
        assert rep.measured_after <= rep.measured_before


def test_order_dependent_inplace_is_simulated_exactly(files, tmp_path):
    """The views model's Softmax writes in place only when it runs after the Mul: both orders,
    measured, equal onnxruntime's simulated planner after every kernel; memopt's tensor graph
    (a fresh buffer for the Softmax) is an upper bound."""
    g, mp = adapter.load(files["views"])
    model = onnx.load(files["views"])
    soft, mul = g.op_index[mp.conditional_inplace[0]], next(v for v in range(g.num_ops)
                                                            if g.op_names[v].startswith("mul"))
    first = [int(v) for v in g.topological_order()]
    a = [v for v in first if v != soft]
    b = list(a)
    a.insert(a.index(mul), soft)      # Softmax before the Mul: a fresh buffer
    b.insert(b.index(mul) + 1, soft)  # Softmax after the Mul: in place
    model_out = model.graph.node[mp.op_node[soft]].output[0]
    allocated = []
    for k, order in enumerate((a, b)):
        written = adapter.write_order(model, mp, order, tmp_path / f"v{k}.onnx")
        meas = adapter.measure(written, mp)
        assert adapter.kernels_equal(mp, order, meas) and meas.scratch_free
        assert meas.peak == mp.ort_peak(order) <= model_peak(g, order)
        allocated.append(meas.allocated[order.index(soft)])
    # measured: a fresh buffer before the Mul, none (in place) after it
    assert allocated == [mp.sizes[model_out], 0]


def test_no_measure_uses_the_file_order(files, tmp_path):
    rep = adapter.reorder(files["long_skip"], tmp_path / "o.onnx", time_limit=5, measure_runs=False)
    g, _ = adapter.load(files["long_skip"])
    assert rep.baseline == "file" and rep.measured_before is None and rep.bitwise_equal is None
    assert rep.peak_before == model_peak(g, list(range(g.num_ops)))
    assert rep.peak_after <= rep.peak_before
    onnx.checker.check_model(onnx.load(tmp_path / "o.onnx"), full_check=True)


def test_reorder_refuses_to_overwrite_its_input(files):
    with pytest.raises(MemoptError, match="refusing to overwrite"):
        adapter.reorder(files["diamond"], files["diamond"], measure_runs=False)


# ------------------------------------------------------------------------ onnxruntime's default options
def test_never_worse_under_onnxruntime_defaults(files, reports):
    for name, rep in reports.items():
        assert "memory pattern on, memory reuse on" in rep.default_settings, name
        assert rep.default_after <= rep.default_before and rep.default_held_after <= rep.default_held_before, name
        assert rep.default_bitwise_equal, name
        if rep.kept_original_for_defaults:  # the input itself was written
            assert open(rep.output, "rb").read() == open(files[name], "rb").read(), name
        else:
            assert (rep.default_after, rep.default_held_after) == (rep.default_reordered, rep.default_held_reordered)


def test_an_order_worse_under_the_defaults_is_not_written(tmp_path, capsys):
    onnx.save(M.random_branches(3), tmp_path / "r.onnx")
    rep = adapter.reorder(tmp_path / "r.onnx", tmp_path / "o.onnx", time_limit=2)
    # lower in exact mode, higher under the defaults: the input is written unchanged
    assert rep.measured_after < rep.measured_before and rep.bitwise_equal
    assert rep.kept_original_for_defaults and rep.default_reordered > rep.default_before == rep.default_after
    assert (tmp_path / "o.onnx").read_bytes() == (tmp_path / "r.onnx").read_bytes()
    assert main(["onnx", "reorder", str(tmp_path / "r.onnx"), "-o", str(tmp_path / "o2.onnx"), "--time-limit", "2"]) == 0
    assert "the input written unchanged: memopt's order was above it under the defaults" in capsys.readouterr().out


def test_default_mode_measurement_is_deterministic_and_follows_the_settings(files):
    from memopt.adapters.onnx_defaults import RuntimeSettings, measure_defaults

    model = onnx.load(files["inception"])
    one = RuntimeSettings(threads=1)
    a, b = measure_defaults(model, one), measure_defaults(model, one, runs=4)
    assert a.peak == b.peak > 0 and a.held == b.held >= a.peak  # a run's outputs are released before the next
    assert "graph optimization basic, intra-op threads 1" in measure_defaults(
        model, RuntimeSettings(optimization_level="basic", threads=1)).settings


@pytest.mark.parametrize("flag,value,pattern", [
    ("--threads", "-1", "--threads must be"), ("--threads", "two", "--threads must be a whole number"),
    ("--optimization-level", "max", "--optimization-level must be one of"),
    ("--provider", "NoSuchExecutionProvider", "is not available"),
])
def test_cli_runtime_settings_are_validated(files, tmp_path, capsys, flag, value, pattern):
    assert main(["onnx", "reorder", str(files["diamond"]), "-o", str(tmp_path / "o.onnx"), flag, value]) == 2
    err = capsys.readouterr().err
    assert err.startswith("memopt: error:") and pattern in err and err.count("\n") == 1
    assert not (tmp_path / "o.onnx").exists()


# ------------------------------------------------------------------------------------------ CLI
def test_cli_reorder_json(files, tmp_path, capsys):
    out = tmp_path / "o.onnx"
    assert main(["onnx", "reorder", str(files["inception"]), "-o", str(out), "--time-limit", "5", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    for key in ("peak_before", "peak_after", "lower_bound", "status", "measured_before", "measured_after",
                "bitwise_equal"):
        assert key in doc
    assert doc["bitwise_equal"] is True and doc["measured_after"] < doc["measured_before"]
    assert doc["default_after"] <= doc["default_before"] and "memory pattern on" in doc["default_settings"]
    onnx.checker.check_model(onnx.load(out), full_check=True)


def test_cli_reorder_text(files, tmp_path, capsys):
    assert main(["onnx", "reorder", str(files["diamond"]), "-o", str(tmp_path / "o.onnx")]) == 0
    text = capsys.readouterr().out
    for key in ("peak_before", "peak_after", "lower_bound", "measured_before", "measured_after", "bitwise_equal",
                "default_before", "default_after"):
        assert key in text
    # which onnxruntime settings each measurement ran under
    assert "exact mode (CPU arena on, memory pattern and buffer reuse off" in text
    assert "default_*: CPUExecutionProvider, graph optimization all, intra-op threads default" in text


def test_cli_import_writes_a_memopt_graph(files, tmp_path, capsys):
    import memopt

    out = tmp_path / "g.json"
    assert main(["onnx", "import", str(files["views"]), "-o", str(out)]) == 0
    g2 = memopt.load_graph(out)
    g, _ = adapter.load(files["views"])
    assert g2.tensor_names == g.tensor_names and g2.tensor_size.tolist() == g.tensor_size.tolist()
    assert memopt.peak(g2, list(range(g2.num_ops))) == memopt.peak(g, list(range(g.num_ops)))


@pytest.mark.parametrize("case,pattern", [
    ("unknown_shape", "tensor 'x' has an unknown dimension"),
    ("subgraph", "node 'the_if'"),
    ("missing", "not found"),
    ("same", "refusing to overwrite"),
])
def test_cli_errors_exit_2_on_one_line(files, tmp_path, capsys, case, pattern):
    src = {"missing": str(tmp_path / "missing.onnx"), "same": str(files["diamond"])}.get(case, str(files.get(case)))
    out = str(files["diamond"]) if case == "same" else str(tmp_path / "o.onnx")
    for cmd in ("reorder", "import"):
        assert main(["onnx", cmd, src, "-o", out]) == 2
        err = capsys.readouterr().err
        assert err.startswith("memopt: error:") and pattern in err and err.count("\n") == 1


def test_nodes_onnxruntime_expands_cannot_be_measured_but_can_be_reordered(tmp_path, capsys):
    """HardSwish runs as two kernels (HardSigmoid, Mul) in onnxruntime: measuring node by node is
    refused on one line; --no-measure still writes the reordered model."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])
    nodes = [helper.make_node("Sigmoid", ["x"], ["a"], name="p"), helper.make_node("HardSwish", ["a"], ["b"], name="hs"),
             helper.make_node("Neg", ["b"], ["y"], name="c")]
    m = helper.make_model(helper.make_graph(nodes, "hs", [x], [helper.make_tensor_value_info("y", TensorProto.FLOAT,
                                                                                               [2, 8])]),
                          opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.save(m, tmp_path / "hs.onnx")
    out = str(tmp_path / "o.onnx")
    assert main(["onnx", "reorder", str(tmp_path / "hs.onnx"), "-o", out]) == 2
    err = capsys.readouterr().err
    assert "expanded or fused" in err and err.count("\n") == 1
    assert main(["onnx", "reorder", str(tmp_path / "hs.onnx"), "-o", out, "--no-measure", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["baseline"] == "file" and doc["measured_after"] is None and doc["default_after"] is None
    onnx.checker.check_model(onnx.load(out), full_check=True)
    # the default-mode measurement needs no node-by-node match: it runs on such models
    rep = adapter.reorder(tmp_path / "hs.onnx", tmp_path / "d.onnx", measure_runs=False, defaults=True)
    assert rep.measured_after is None and 0 < rep.default_after <= rep.default_before and rep.default_bitwise_equal


# ------------------------------------------------------------------------------ convolution scratch
def test_conv_workspace_is_measured_per_node(files, tmp_path):
    path = tmp_path / "conv.onnx"
    onnx.save(M.conv_scratch(), path)
    # MLAS's convolution working buffer: 16384 floats (65536 bytes) per thread it uses
    assert adapter.node_workspaces(path, threads=1) == {"conv": 65536}
    assert adapter.node_workspaces(path, threads=2) == {"conv": 131072}
    # MatMul kernels hold no scratch (and are not probed unless asked for)
    assert adapter.node_workspaces(files["inception"]) == {}
    assert adapter.node_workspaces(files["inception"], ops={"MatMul"}) == {}
    graph, mapping = adapter.load(path, workspaces={"conv": 65536})
    assert graph.op_workspace.tolist() == [65536, 0] and mapping.workspace == {"conv": 65536}
    with pytest.raises(MemoptError, match="'nope', which is not a node"):
        adapter.load(path, workspaces={"nope": 1})


def test_conv_scratch_modelled_equals_measured_including_the_transient_peak(tmp_path):
    path = tmp_path / "conv.onnx"
    onnx.save(M.conv_scratch(), path)
    ws = adapter.node_workspaces(path)["conv"]          # this machine's thread count decides it
    rep = adapter.reorder(path, tmp_path / "out.onnx", time_limit=5)
    resident = 16384 + 8192 + 9216 + 131072              # x, z, conv weight, matmul weight
    y, big = 16384, 64 * 1024 * 4
    assert rep.workspace_nodes == 1 and rep.resident_bytes == resident
    # onnxruntime's default order runs the MatMul first: the conv's scratch lands on top of `big`
    assert rep.measured_before == rep.modelled_before == rep.peak_before == resident + big + y + ws
    assert rep.measured_after == rep.modelled_after == rep.peak_after == resident + y + max(ws, big)
    assert rep.status in ("certified", "optimal") and rep.lower_bound == rep.peak_after
    # the arena's own high-water mark is the model's (chunk bytes): the scratch is exactly the workspace
    assert rep.scratch_modelled_before and rep.scratch_modelled_after and rep.exact_before and rep.exact_after
    assert rep.bitwise_equal and rep.followed_order
    # without the workspaces the model holds the kernel boundaries only, and the arena disagrees
    rep0 = adapter.reorder(path, tmp_path / "out0.onnx", time_limit=5, workspaces=False)
    assert rep0.workspace_nodes == 0 and rep0.kernels_equal_before
    assert rep0.measured_before == rep0.peak_before == resident + big + y
    assert rep0.scratch_modelled_before is False and rep0.exact_before is False


# ------------------------------------------------------------------------------- torch zoo models
def test_zoo_models_exported_from_torch(tmp_path):
    """Models of the torch zoo, exported to ONNX: outputs bitwise equal, memory equal to the model
    after every kernel, never worse than onnxruntime's default order."""
    torch = pytest.importorskip("torch")
    zoo = pytest.importorskip("memopt.zoo")
    import warnings

    for name in ("transformer_mini", "randwire_mini"):
        if name not in zoo.names():
            pytest.skip(f"zoo model {name} not available")
        model, example = zoo.build(name)
        path = tmp_path / f"{name}.onnx"
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.onnx.export(model, example, str(path), dynamo=False, opset_version=17)
        rep = adapter.reorder(path, tmp_path / f"{name}.out.onnx", time_limit=5)
        assert rep.bitwise_equal and rep.followed_order
        assert rep.kernels_equal_before and rep.kernels_equal_after
        assert rep.measured_before == rep.modelled_before and rep.measured_after == rep.modelled_after
        assert rep.measured_after <= rep.measured_before
        # the convolutions' scratch is each node's measured workspace, at the peak too
        assert rep.exact_before and rep.exact_after
