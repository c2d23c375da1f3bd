"""memopt.zoo.real and memopt.adapters.onnx_costs: real architectures exported through the ONNX
importer give valid graphs whose op costs are exact multiply-accumulate counts."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
onnx = pytest.importorskip("onnx")

from memopt.adapters.onnx_costs import node_cost  # noqa: E402
from memopt.core import peak  # noqa: E402
from memopt.errors import OptionError  # noqa: E402
from memopt.io import load_graph, save_graph  # noqa: E402
from memopt.zoo import real  # noqa: E402


def _has_torchvision() -> bool:
    try:
        real.torchvision()
    except OptionError:
        return False
    return True


needs_torchvision = pytest.mark.skipif(not _has_torchvision(),
                                       reason="torchvision not installed (pip install --no-deps torchvision==0.28.0)")


def _costs_by_op(g) -> dict:
    return dict(zip(g.op_names, g.op_cost.tolist()))


def _check_graph(g, tmp_path):
    assert g.num_ops > 0
    assert all(c >= 0 and float(c).is_integer() for c in g.op_cost.tolist())
    # the strict reader accepts the written file and gives back the same graph
    save_graph(g, tmp_path / "g.json")
    back = load_graph(tmp_path / "g.json")
    assert back.op_names == g.op_names and back.op_cost.tolist() == g.op_cost.tolist()
    assert back.tensor_size.tolist() == g.tensor_size.tolist()
    assert peak(back, list(range(back.num_ops))) == peak(g, list(range(g.num_ops))) > 0


def _first_conv(model_path: str):
    m = onnx.load(model_path)
    return next(n for n in m.graph.node if n.op_type == "Conv" and n.input[0] == "input")


@pytest.fixture(scope="module")
def speaker(tmp_path_factory):
    path = tmp_path_factory.mktemp("real") / "speaker.onnx"
    return real.graph("speaker", size=20, onnx_path=path), str(path)


def test_speaker_net_imports_as_a_valid_graph(speaker, tmp_path):
    g, _ = speaker
    _check_graph(g, tmp_path)
    assert g.name == "speaker"


def test_speaker_first_conv_costs_8_out_channels_times_64x20_times_9_macs(speaker):
    g, path = speaker
    # 1 -> 8 channels, 3x3, stride 1 on 64 bins x 20 frames: 8 * 64 * 20 outputs of 1 * 3 * 3 terms
    assert _costs_by_op(g)[_first_conv(path).name] == 8 * 64 * 20 * 9


def test_speaker_depthwise_conv1d_and_gemm_costs_are_exact(speaker):
    g, path = speaker
    m = onnx.load(path)
    inits = {i.name: tuple(i.dims) for i in m.graph.initializer}
    costs = _costs_by_op(g)
    depthwise = [n.name for n in m.graph.node if n.op_type == "Conv" and inits[n.input[1]] == (512, 1, 3)]
    assert len(depthwise) == 12  # one per 1-D block: 4 stages x 3 blocks
    # 512 channels x 20 frames, each a 3-tap dot product of one channel
    assert {costs[n] for n in depthwise} == {512 * 20 * 3}
    gemm = [n.name for n in m.graph.node if n.op_type == "Gemm"]
    assert [costs[n] for n in gemm] == [192 * 1536]  # the embedding layer: 1536 -> 192


def test_speaker_stack_is_twelve_unsqueezes_read_by_one_concat(speaker):
    _, path = speaker
    m = onnx.load(path)
    unsq = {n.output[0] for n in m.graph.node if n.op_type == "Unsqueeze"}
    readers = [n for n in m.graph.node if n.op_type == "Concat" and set(n.input) <= unsq]
    assert len(readers) == 1 and len(readers[0].input) == 12


@needs_torchvision
def test_mobilenet_v3_large_at_32px_imports_with_exact_stem_conv_macs(tmp_path):
    path = tmp_path / "mbv3.onnx"
    g = real.graph("mobilenet_v3_large", size=32, onnx_path=path)
    _check_graph(g, tmp_path)
    # the stem: 3 -> 16 channels, 3x3, stride 2 on 32x32: 16 * 16 * 16 outputs of 3 * 3 * 3 terms
    assert _costs_by_op(g)[_first_conv(str(path)).name] == 16 * 16 * 16 * 27


def test_node_cost_of_each_contraction_is_its_mac_count():
    assert node_cost("Conv", [(1, 4, 8, 8), (6, 2, 3, 3)], [(1, 6, 8, 8)]) == 6 * 64 * 2 * 9
    assert node_cost("ConvTranspose", [(1, 4, 5, 5), (4, 3, 2, 2)], [(1, 3, 10, 10)]) == 4 * 25 * 3 * 4
    assert node_cost("MatMul", [(2, 3, 5, 7), (7, 11)], [(2, 3, 5, 11)]) == 2 * 3 * 5 * 11 * 7
    assert node_cost("Gemm", [(5, 7), (7, 11), (11,)], [(5, 11)]) == 5 * 11 * 7
    assert node_cost("Gemm", [(7, 5), (7, 11)], [(5, 11)], trans_a=True) == 5 * 11 * 7
    assert node_cost("Relu", [(3, 4)], [(3, 4)]) == 12
    assert node_cost("Split", [(4, 6)], [(4, 2), (4, 4)]) == 24


def test_node_cost_2_pow_53_plus_1_stays_an_exact_int():
    # integers throughout: no float rounding even past 2**53
    assert node_cost("MatMul", [(1, 2 ** 53 + 1)], [(1, 1)]) == 2 ** 53 + 1


def test_unknown_real_model_is_a_clear_error():
    with pytest.raises(OptionError, match="unknown real model 'nope'"):
        real.build("nope")


def test_bad_size_is_a_clear_error():
    with pytest.raises(OptionError, match="multiple of 32"):
        real.build("unet", size=100)


def test_tuning_and_held_out_split_the_corpus():
    assert set(real.TUNING).isdisjoint(real.HELD_OUT)
    assert set(real.TUNING) | set(real.HELD_OUT) == set(real.names())
    assert len(real.names()) >= 11


def test_matmul_costing_2_pow_54_macs_is_refused(tmp_path):
    from onnx import TensorProto, helper

    from memopt.adapters.onnx import load
    from memopt.errors import FormatError

    n = 2 ** 27
    model = helper.make_model(helper.make_graph(
        [helper.make_node("MatMul", ["a", "b"], ["y"], name="big")], "big",
        [helper.make_tensor_value_info("a", TensorProto.FLOAT, [1, n]),
         helper.make_tensor_value_info("b", TensorProto.FLOAT, [n, n])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, n])]))
    onnx.save(model, tmp_path / "big.onnx")
    with pytest.raises(FormatError, match=r"node 'big' \(MatMul\) costs 18014398509481984 multiply-accumulates"):
        load(tmp_path / "big.onnx")


@needs_torchvision
@pytest.mark.slow
def test_vit_b_16_static_forward_equals_torchvisions_forward():
    model, (x,) = real.build("vit_b_16")
    torch.nn.init.normal_(model.vit.heads.head.weight)   # torchvision starts the head at zero
    with torch.no_grad():
        ours, theirs = model(x), model.vit(x)
    assert theirs.abs().max() > 1
    torch.testing.assert_close(ours, theirs)
