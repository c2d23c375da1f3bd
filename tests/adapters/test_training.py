"""memopt.adapters.training on real PyTorch training steps (CPU, no mocks, no timings).

A tiny MLP (Linear, BatchNorm1d, ReLU, Linear) and a tiny CNN (Conv2d, BatchNorm2d, an
in-place ReLU, a strided Conv2d, a global mean, Linear), each with a cross-entropy loss, are
captured once (module fixtures): the graph, its sizes, views, costs and phases are checked
against the FX graph's own metadata and a run on real tensors, and the modelled peak of the
captured order against the allocator's measured peak.
"""

from __future__ import annotations

import operator

import pytest

torch = pytest.importorskip("torch")

import memopt  # noqa: E402
from memopt.adapters import training  # noqa: E402
from memopt.core import validate_order  # noqa: E402
from _torch_models import CNN  # noqa: E402


class MLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.l1 = torch.nn.Linear(64, 256)
        self.bn = torch.nn.BatchNorm1d(256)
        self.l2 = torch.nn.Linear(256, 10)

    def forward(self, x):
        return self.l2(torch.relu(self.bn(self.l1(x))))


def _capture(model_cls, x):
    torch.manual_seed(0)
    model = model_cls().train()
    labels = torch.randint(0, 10, (x.shape[0],))
    return model, training.capture(model, x, torch.nn.functional.cross_entropy, targets=labels)


@pytest.fixture(scope="module")
def mlp():
    torch.manual_seed(1)
    return _capture(MLP, torch.randn(8, 64))


@pytest.fixture(scope="module")
def cnn():
    torch.manual_seed(2)
    return _capture(CNN, torch.randn(4, 3, 16, 16))


def _values(tg) -> dict:
    """The real value of every FX node of one interpreted run (for aliasing checks)."""
    values = {}

    class Keep(torch.fx.Interpreter):
        def run_node(self, n):
            out = super().run_node(n)
            values[n.name] = out
            return out

    with torch.no_grad():
        Keep(tg.module, garbage_collect_values=False).run(*tg.args)
    return values


@pytest.mark.parametrize("case", ["mlp", "cnn"])
def test_capture_is_a_valid_graph_with_exact_sizes_and_explicit_views(case, request):
    model, tg = request.getfixturevalue(case)
    g = tg.graph
    validate_order(g, list(range(g.num_ops)))  # the captured order is a valid schedule
    nodes = {n.name: n for n in tg.module.graph.nodes}
    values = _values(tg)
    size = dict(zip(g.tensor_names, g.tensor_size.tolist()))
    checked_views = 0
    for t in g.tensor_names:
        if t not in nodes:
            continue  # an output of a multi-output op nobody selects
        meta = nodes[t].meta["tensor_meta"]
        value = values[t]
        if t in tg.views:
            base = tg.views[t]
            assert size[t] == 0 and size[base] > 0
            # the view shares its base's storage in the real run
            assert value.untyped_storage().data_ptr() == values[base].untyped_storage().data_ptr()
            # every reader of the view also reads its base (the base stays alive)
            for v in g.consumers_of(g.tensor_index[t]).tolist():
                assert g.tensor_index[base] in g.inputs_of(v).tolist()
            checked_views += 1
        else:
            numel = 1
            for d in meta.shape:
                numel *= int(d)
            assert size[t] == numel * meta.dtype.itemsize == value.untyped_storage().nbytes(), t
    assert checked_views > 0
    # parameters, buffers and inputs are resident; nothing else is
    resident = {g.tensor_names[i] for i in range(g.num_tensors) if g.tensor_resident[i]}
    assert resident == {n.name for n in tg.module.graph.nodes if n.op == "placeholder"}
    # functional: the in-place ReLU of the CNN is captured as its out-of-place form
    assert not any(n.target._schema.is_mutable for n in tg.nodes.values())


@pytest.mark.parametrize("case", ["mlp", "cnn"])
def test_gradients_and_loss_are_graph_outputs_and_phases_split_at_the_backward(case, request):
    model, tg = request.getfixturevalue(case)
    g = tg.graph
    out = {g.tensor_names[i] for i in range(g.num_tensors) if g.tensor_output[i]}
    assert sorted(tg.gradients.values()) == sorted(f"model.{n}" for n, _ in model.named_parameters())
    for t in list(tg.gradients) + [tg.loss] + list(tg.buffer_updates):
        assert tg.views.get(t, t) in out
    assert {"model.bn.running_mean", "model.bn.running_var"} <= set(tg.buffer_updates.values())
    # the loss's ops are forward, the gradients' producers backward; no forward op after a backward one
    phases = [tg.phase[n] for n in g.op_names]
    assert phases == sorted(phases, key=lambda p: p == "backward")
    producer = {g.tensor_names[t]: g.op_names[p] for t, p in enumerate(g.tensor_producer.tolist()) if p >= 0}
    assert tg.phase[producer[tg.views.get(tg.loss, tg.loss)]] == "forward"
    assert all(tg.phase[producer[tg.views.get(t, t)]] == "backward" for t in tg.gradients)
    assert set(tg.forward_ops) | set(tg.backward_ops) == set(g.op_names) == set(tg.nodes)


def test_cost_of_a_linear_layer_is_its_flop_formula(mlp):
    _, tg = mlp
    cost = dict(zip(tg.graph.op_names, tg.graph.op_cost_exact))
    addmm = [n for n, node in tg.nodes.items() if node.target is torch.ops.aten.addmm.default]
    batch = 8
    # l1: 8x64 @ 64x256 and l2: 8x256 @ 256x10, two FLOPs per multiply-add
    assert sorted(cost[n] for n in addmm) == sorted([2 * batch * 64 * 256, 2 * batch * 256 * 10])
    # the backward's weight gradient of l1: (256x8) @ (8x64)
    mms = [cost[n] for n, node in tg.nodes.items() if node.target is torch.ops.aten.mm.default]
    assert 2 * 256 * batch * 64 in mms
    # an op without a formula costs the elements it outputs; costs are exact ints
    relu = next(n for n, node in tg.nodes.items() if node.target is torch.ops.aten.relu.default)
    assert cost[relu] == batch * 256
    assert all(isinstance(c, int) for c in cost.values())


def test_convolution_costs_use_the_flop_counter_forward_and_backward(cnn):
    _, tg = cnn
    cost = dict(zip(tg.graph.op_names, tg.graph.op_cost_exact))
    conv = [n for n, node in tg.nodes.items() if node.target is torch.ops.aten.convolution.default]
    # c1: 4x16x16x16 outputs, each 3*3*3 multiply-adds
    assert 2 * 4 * 16 * 16 * 16 * 3 * 3 * 3 in [cost[n] for n in conv]
    back = [n for n, node in tg.nodes.items() if node.target is torch.ops.aten.convolution_backward.default]
    assert len(back) == 2 and all(cost[n] > 0 for n in back)


def test_the_modelled_peak_of_the_captured_order_is_the_measured_one(mlp, cnn):
    for _, tg in (mlp, cnn):
        m = training.measure(tg)
        assert m.differences[-1] == ("unattributed", 0)
        assert m.measured_peak == m.modelled_peak + sum(b for _, b in m.differences)
        # with the measured library transients as op workspace, the model is the measurement
        assert tg.with_workspace(m.transients).modelled_peak() == m.measured_peak
    # measuring a graph that already carries its transients: nothing left to itemise
    with_ws = cnn[1].with_workspace(training.measure(cnn[1]).transients)
    again = training.measure(with_ws)
    assert again.modelled_peak == again.measured_peak and again.differences[-1] == ("unattributed", 0)
    # the MLP's peak holds no transient at all: modelled = measured without workspace
    assert training.measure(mlp[1]).differences == [("library transients", 0), ("unattributed", 0)]


def test_remat_and_schedule_accept_the_graph(mlp):
    _, tg = mlp
    g = tg.graph
    res = memopt.schedule(g, time_limit=5)
    assert res.peak <= memopt.peak(g, list(range(g.num_ops)))
    r = memopt.remat(g, memory_ratio=1.0, cap=1, time_limit=5)
    assert r.status in ("optimal", "certified", "feasible") and r.peak is not None


def test_a_getitem_of_a_masked_gradient_is_not_a_tensor(cnn):
    _, tg = cnn
    # the first convolution's input needs no gradient: convolution_backward computes none
    masked = [n for n in tg.module.graph.nodes if n.target is operator.getitem
              and n.args[0].target is torch.ops.aten.convolution_backward.default and n.args[1] == 0
              and n.args[0].args[-1][0] is False]
    assert all(n.name not in tg.graph.tensor_index for n in masked)


class _ScaleParameterInPlace(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, x):
        with torch.no_grad():
            self.lin.weight.mul_(0.5)
        return self.lin(x)


class _ChangeSavedTensorInPlace(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, x):
        y = torch.sigmoid(self.lin(x))  # sigmoid's backward needs y
        y.mul_(2)
        return y


class _DataDependent(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, x):
        y = self.lin(x)
        return y * 2 if y.sum() > 0 else y


@pytest.mark.parametrize("model_cls, words", [
    (_ScaleParameterInPlace, ("aten.mul_", "parameter")),
    (_ChangeSavedTensorInPlace, ("aten.mul_", "saved for the backward")),
    (_DataDependent, ("data-dependent", "aten._local_scalar_dense")),
])
def test_unsupported_steps_are_refused_in_one_line_naming_the_op(model_cls, words):
    model = model_cls()
    before = model.lin.weight.detach().clone()
    with pytest.raises(training.TrainingCaptureError) as err:
        training.capture(model, torch.randn(2, 4))
    msg = str(err.value)
    assert "\n" not in msg
    assert all(w in msg for w in words), msg
    assert torch.equal(model.lin.weight, before)  # the diagnosis ran on a copy


def test_a_loss_that_is_not_one_element_is_refused():
    with pytest.raises(training.TrainingCaptureError, match="one element"):
        training.capture(torch.nn.Linear(4, 3), torch.randn(2, 4), loss_fn=lambda out: out)


@pytest.mark.parametrize("groups", [1, 4, 8])
def test_convolution_backward_costs_each_gradient_as_the_forward_convolution(groups):
    from torch.utils.flop_counter import flop_registry

    aten = torch.ops.aten
    x, w = torch.randn(2, 8, 10, 10), torch.randn(16, 8 // groups, 3, 3)
    conv = (None, [2, 2], [1, 1], [1, 1], False, [0, 0], groups)
    y = aten.convolution(x, w, *conv)
    args = (torch.ones_like(y), x, w, *conv, [True, True, False])
    out = aten.convolution_backward(*args)
    fwd = training.op_flops(aten.convolution.default, (x, w, *conv), {}, y)
    assert fwd == 2 * 2 * 5 * 5 * 16 * (8 // groups) * 9
    assert training.op_flops(aten.convolution_backward.default, args, {}, out) == 2 * fwd
    if groups == 1:  # the registry's own count, used as it is
        assert flop_registry[aten.convolution_backward](*args, out_val=out) == 2 * fwd


def _per_op_profilers(tg) -> dict:
    """Each op's peak with a profiler started and stopped around its call (the reference the
    one-profiler run of ``training._run_per_op`` must equal)."""
    from memopt.adapters.inductor import measure_peak

    highs = {}

    class PerOp(torch.fx.Interpreter):
        def run_node(self, n):
            if n.name in tg.nodes and tg.nodes[n.name] is n:
                high, out = measure_peak(lambda: super(PerOp, self).run_node(n))
                highs[n.name] = int(high)
                return out
            return super().run_node(n)

    with torch.no_grad():
        PerOp(tg.module).run(*tg.args)
    return highs


def test_the_op_by_op_run_under_one_profiler_measures_what_a_profiler_per_op_does(cnn, mlp):
    for _, tg in (cnn, mlp):
        training.measure(tg)  # warm: the reference and the run under test see the same library state
        marked = training._run_per_op(tg)
        assert marked == _per_op_profilers(tg)
        assert set(marked) == set(tg.graph.op_names)
    # the CNN has convolution scratch: the comparison is not between zeros
    assert any(h > 0 for h in training._run_per_op(cnn[1]).values())
    assert training.measure(cnn[1]).transients


def test_the_transients_alone_are_those_of_the_full_measurement(cnn, mlp):
    for _, tg in (cnn, mlp):
        assert training.transients(tg) == training.measure(tg).transients


def test_marked_peaks_are_the_peaks_of_a_profiler_around_each_span():
    from memopt.adapters.inductor import measure_peak
    from memopt.adapters.inductor.profiling import _profile, marked_peaks

    held = {}

    def scratch_then_result():
        t = torch.empty(4096, dtype=torch.uint8)
        del t
        held["a"] = torch.empty(1024, dtype=torch.uint8)

    def free_then_grow():
        # its first event is a free: the peak counts from what was allocated before it
        held.pop("a")
        held["b"] = torch.empty(2048, dtype=torch.uint8)

    parts = [scratch_then_result, free_then_grow, lambda: None]
    with _profile() as prof:
        for i, fn in enumerate(parts):
            with torch.profiler.record_function(f"memopt#{i}"):
                fn()
            outside = torch.empty(1 << 20, dtype=torch.uint8)  # between spans: no span's
            del outside
    assert marked_peaks(prof) == {0: 4096, 1: 1024, 2: 0}
    held.clear()
    assert [measure_peak(fn)[0] for fn in parts] == [4096, 1024, 0]
