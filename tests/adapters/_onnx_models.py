"""Small branching ONNX models built with ``onnx.helper`` (random weights, static shapes).

Each builder returns a ``ModelProto``. onnxruntime's default execution order is a depth-first
search from the graph outputs that, among a node's inputs, first finishes the one whose
producer comes later in the file (as measured with onnxruntime 1.32); the branching models
list their branches so that this search takes the worse branch first, as an exporter's
arbitrary module order does. On them memopt's order holds less memory than the default one.
Used by ``tests/adapters/test_onnx.py`` and ``benchmarks/adapters_onnx.py``.
"""

from __future__ import annotations

import numpy as np


class _Builder:
    def __init__(self, name: str, seed: int = 0):
        self.name = name
        self.nodes: list = []
        self.inits: list = []
        self.rng = np.random.default_rng(seed)
        self.k = 0
        self.prefix = ""  # node names; onnxruntime's default order visits inputs by node name

    def _id(self, prefix: str) -> str:
        self.k += 1
        return f"{prefix}{self.k}"

    def node(self, op: str, inputs, name: str | None = None, **attrs) -> str:
        from onnx import helper

        out = self._id(op.lower() + "_out")
        self.nodes.append(helper.make_node(op, list(inputs), [out], name=name or self.prefix + self._id(op.lower()),
                                           **attrs))
        return out

    def weight(self, shape) -> str:
        from onnx import numpy_helper

        name = self._id("w")
        arr = (self.rng.standard_normal(shape) / np.sqrt(shape[0])).astype(np.float32)
        self.inits.append(numpy_helper.from_array(arr, name))
        return name

    def linear(self, x: str, n_in: int, n_out: int, relu: bool = True, prefix: str | None = None) -> str:
        if prefix is not None:
            self.prefix = prefix
        y = self.node("MatMul", [x, self.weight((n_in, n_out))])
        return self.node("Relu", [y]) if relu else y

    def model(self, inputs: dict, outputs: dict):
        import onnx
        from onnx import TensorProto, helper

        g = helper.make_graph(
            self.nodes, self.name,
            [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs.items()],
            [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in outputs.items()],
            self.inits)
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], producer_name="memopt-tests")
        m.ir_version = 8
        onnx.checker.check_model(m, full_check=True)
        return m

    def rename_output(self, value: str, new: str) -> None:
        for n in self.nodes:
            n.output[:] = [new if o == value else o for o in n.output]
            n.input[:] = [new if i == value else i for i in n.input]


def inception(width: int = 64, batch: int = 32):
    """Four parallel branches joined by a Concat: two expand 64x and reduce back (a big peak, a
    small result), two keep a wide result (8x) after no expansion. The best order runs the
    expanding branches first, while little is held."""
    b = _Builder("inception")
    stem = b.linear("x", width, width, prefix="stem/")
    outs = []
    for k, (mid, out) in enumerate([(width * 8, width * 8), (width * 64, width)] * 2):
        h = b.linear(stem, width, mid, prefix=f"branch{k}/")
        outs.append((b.linear(h, mid, out), out))
    cat = b.node("Concat", [o for o, _ in outs], name="join/concat", axis=1)
    y = b.linear(cat, sum(n for _, n in outs), width, relu=False, prefix="head/")
    b.rename_output(y, "y")
    return b.model({"x": [batch, width]}, {"y": [batch, width]})


def long_skip(width: int = 64, depth: int = 3, expand: int = 8, chain_expand: int = 32, batch: int = 32):
    """Encoder-decoder with a long skip: a wide skip tensor computed from the input is only
    needed at the very end, after a deep chain whose layers expand 32x. Computing the skip
    after the chain saves its bytes at the chain's peak."""
    b = _Builder("long_skip")
    h = "x"
    b.prefix = "a_chain/"
    for _ in range(depth):
        h = b.linear(h, width, width * chain_expand)
        h = b.linear(h, width * chain_expand, width)
    up = b.linear(h, width, width * expand)
    skip = b.linear("x", width, width * expand, prefix="b_skip/")  # listed last: run first by default
    skip2 = b.linear(skip, width * expand, width * expand)
    s = b.node("Add", [up, skip2], name="c_join/add")
    y = b.linear(s, width * expand, width, relu=False, prefix="d_head/")
    b.rename_output(y, "y")
    return b.model({"x": [batch, width]}, {"y": [batch, width]})


def diamond(width: int = 64, expand: int = 64, batch: int = 32):
    """Two branches from one input joined by an Add: one with small intermediates and a wide
    result, one with a huge intermediate (64x) and a result as wide; the huge branch should
    run first, while the other result is not yet held."""
    b = _Builder("diamond")
    c1 = b.linear("x", width, width * expand, prefix="huge/")
    c2 = b.linear(c1, width * expand, width * 8)
    a1 = b.linear("x", width, width * 4, prefix="wide/")
    a2 = b.linear(a1, width * 4, width * 4)
    a3 = b.linear(a2, width * 4, width * 8)
    y = b.node("Add", [a3, c2], name="join/add")
    y = b.linear(y, width * 8, width, relu=False, prefix="head/")
    # onnxruntime's default order finishes the branch listed later in the file ("wide/") first
    # and holds its result through the "huge/" branch's peak
    b.rename_output(y, "y")
    return b.model({"x": [batch, width]}, {"y": [batch, width]})


def random_branches(seed: int, width: int = 16, batch: int = 8):
    """A stem, 2-4 branches of 1-3 linear layers of random widths (1x-32x), a Concat and a
    head. With seed 3, memopt's order holds less in exact mode but more under onnxruntime's
    default options (whose default execution order it changes), as measured with
    onnxruntime 1.32."""
    rng = np.random.default_rng(seed)
    b = _Builder(f"random_branches{seed}", seed)
    stem = b.linear("x", width, width, prefix="s/")
    outs = []
    for k in range(int(rng.integers(2, 5))):
        h, w = stem, width
        for _ in range(int(rng.integers(1, 4))):
            w2 = int(width * rng.choice([1, 2, 4, 8, 16, 32]))
            h = b.linear(h, w, w2, prefix=f"b{k}/")
            w = w2
        outs.append((h, w))
    cat = b.node("Concat", [o for o, _ in outs], name="join/concat", axis=1)
    y = b.linear(cat, sum(n for _, n in outs), width, relu=False, prefix="head/")
    b.rename_output(y, "y")
    return b.model({"x": [batch, width]}, {"y": [batch, width]})


def views_chain(width: int = 64):
    """A chain through view ops (Reshape, Flatten, Unsqueeze/Squeeze, Identity) and in-place
    activations, with a Constant node and two graph outputs, one of them a view."""
    from onnx import TensorProto, helper

    b = _Builder("views")
    h = b.linear("x", width, width * 4)                        # MatMul + Relu (in place)
    shape = "shape_c"
    b.nodes.append(helper.make_node("Constant", [], [shape], name="const_shape",
                                    value=helper.make_tensor("v", TensorProto.INT64, [3], [1, 4, width])))
    r = b.node("Reshape", [h, shape])                           # view
    s = b.node("Sigmoid", [r])                                  # in place
    axes = "axes0"
    b.nodes.append(helper.make_node("Constant", [], [axes], name="const_axes",
                                    value=helper.make_tensor("a", TensorProto.INT64, [1], [0])))
    u = b.node("Squeeze", [s, axes])                            # view
    f = b.node("Flatten", [u], axis=0)                          # view
    i = b.node("Identity", [f])
    t = b.node("Tanh", [i])                                     # in place, read twice below
    m = b.node("Mul", [t, t])
    side = b.node("Softmax", [t], axis=1)                       # in place only if last reader of t
    side = b.node("Neg", [side])
    y = b.node("Reshape", [m, "shape1"])
    b.inits.append(helper.make_tensor("shape1", TensorProto.INT64, [2], [1, width * 4]))
    b.rename_output(y, "y")
    b.rename_output(side, "z")
    return b.model({"x": [1, width]}, {"y": [1, width * 4], "z": [1, width * 4]})


def edge_cases():
    """Unnamed nodes, a graph input that is also a graph output, an in-place kernel whose
    result is a graph output (a fresh buffer), and a result nobody reads (onnxruntime keeps
    it until the run ends) written in place only in some orders."""
    import onnx
    from onnx import TensorProto, helper

    w = onnx.numpy_helper.from_array(np.ones((8, 8), np.float32), "w")
    nodes = [helper.make_node("MatMul", ["x", "w"], ["a"]), helper.make_node("Relu", ["a"], ["y"]),
             helper.make_node("Neg", ["a"], ["b"]), helper.make_node("Relu", ["b"], ["z"]),
             helper.make_node("Relu", ["b"], ["unused"])]
    outs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [4, 8]) for n in ("x", "y", "z")]
    m = helper.make_model(helper.make_graph(nodes, "edges", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                                          [4, 8])], outs, [w]),
                          opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.checker.check_model(m, full_check=True)
    return m


def resident_views():
    """Views of resident buffers (a Reshape and a Flatten of a weight, an Identity of the
    input): no allocation; an in-place kernel reading such a view gets a fresh buffer."""
    import onnx
    from onnx import TensorProto, helper

    w = onnx.numpy_helper.from_array(np.ones((2, 4, 8), np.float32), "W")
    s = helper.make_tensor("s", TensorProto.INT64, [2], [8, 8])
    nodes = [helper.make_node("Reshape", ["W", "s"], ["r"], name="rs"), helper.make_node("Flatten", ["r"], ["f"], name="fl"),
             helper.make_node("Relu", ["f"], ["rf"], name="relu"), helper.make_node("Identity", ["x"], ["xi"], name="idx"),
             helper.make_node("Sigmoid", ["xi"], ["xs"], name="sig"), helper.make_node("MatMul", ["xs", "rf"], ["y"], name="mm")]
    m = helper.make_model(helper.make_graph(nodes, "resident_views",
                                            [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 8])],
                                            [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 8])], [w, s]),
                          opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.checker.check_model(m, full_check=True)
    return m


def conv_scratch(big: int = 1024, channels: int = 16, side: int = 16):
    """Two independent branches, both graph outputs: a MatMul with a large result and a 3x3
    convolution with a small one, whose kernel (MLAS) holds a working buffer of 16384 floats
    per thread inside its call. Running the convolution first keeps its scratch away from the
    large result; the file lists the MatMul last, so onnxruntime's default order runs it first."""
    import onnx
    from onnx import TensorProto, helper

    rng = np.random.default_rng(0)
    wc = onnx.numpy_helper.from_array(rng.standard_normal((channels, channels, 3, 3)).astype(np.float32), "wc")
    wm = onnx.numpy_helper.from_array(rng.standard_normal((32, big)).astype(np.float32), "wm")
    nodes = [helper.make_node("Conv", ["x", "wc"], ["y"], name="conv", pads=[1, 1, 1, 1]),
             helper.make_node("MatMul", ["z", "wm"], ["big"], name="matmul")]
    g = helper.make_graph(nodes, "conv_scratch",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, channels, side, side]),
                           helper.make_tensor_value_info("z", TensorProto.FLOAT, [64, 32])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, channels, side, side]),
                           helper.make_tensor_value_info("big", TensorProto.FLOAT, [64, big])], [wc, wm])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], producer_name="memopt-tests")
    m.ir_version = 8
    onnx.checker.check_model(m, full_check=True)
    return m


BRANCHING = {"inception": inception, "long_skip": long_skip, "diamond": diamond}
ALL = {**BRANCHING, "views": views_chain, "edges": edge_cases}


def unknown_shape():
    """A model whose input has a symbolic batch dimension (shape inference cannot size it)."""
    import onnx
    from onnx import TensorProto, helper

    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"], name="relu")], "dyn",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 8])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.checker.check_model(m)
    return m


def with_subgraph():
    """A model with an If node (two branch subgraphs)."""
    from onnx import TensorProto, helper

    def branch(op, name):
        return helper.make_graph([helper.make_node(op, ["x"], [name + "_y"], name=name)], name, [],
                                 [helper.make_tensor_value_info(name + "_y", TensorProto.FLOAT, [1, 8])])

    g = helper.make_graph(
        [helper.make_node("If", ["c"], ["y"], name="the_if", then_branch=branch("Relu", "then"),
                          else_branch=branch("Neg", "else"))], "cf",
        [helper.make_tensor_value_info("c", TensorProto.BOOL, []),
         helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m
