"""Synthetic tensor graphs with the shapes of real networks, built directly (no torch).

:func:`stacked_taps` is the pattern of speaker-embedding networks of the ReDimNet family
(Yakovlev et al., "Reshape Dimensions Network for Speaker Recognition", Interspeech 2024): many
cheap views of an early feature map (pooling, ``Unsqueeze``) built early and read together
late by a stacking head, while the backbone reaches its peak in between.

>>> from memopt.zoo.synthetic import stacked_taps
>>> g = stacked_taps(taps=4, stages=3)
>>> g.num_ops
15
"""

from __future__ import annotations

from memopt.core import Op, Tensor, TensorGraph

__all__ = ["stacked_taps"]


def stacked_taps(taps: int = 12, chain: int = 2, stages: int = 12, *, unit: int = 4096, input_units: int = 2,
                 feature_units: int = 16, tap_units: int = 1, wide: int = 4, conv_macs: int = 64) -> TensorGraph:
    """A stem, ``taps`` cheap views of its output stacked at the end, a backbone in between.

    The graph input ``mel`` (``input_units``) goes through a stem convolution to ``stem``
    (``feature_units``); each tap ``i`` is a chain of ``chain`` cheap ops from ``stem``
    (``Pool_i``, then ``Unsqueeze_i`` ops; ``tap_units`` each); the backbone is ``stages``
    convolutions over ``feature_units`` tensors, the middle one through an expansion of
    ``wide`` times that (the peak); ``Concat`` reads every tap and the backbone's output, and
    ``Reduce`` makes the graph output. Sizes are in units of ``unit`` bytes (float32
    elements: ``unit // 4`` per unit); a cheap op costs its output's element count, a
    convolution ``conv_macs`` times that (the stem: times its input's, a convolution of one
    input channel).

    With ``tap_units < input_units < taps * tap_units`` and ``taps * tap_units <
    feature_units`` (the defaults), the least-peak order holds the taps across the peak; no
    single tap is worth re-making (that holds ``mel`` or ``stem``, larger than a tap), all of
    them together are (``mel`` held once, the stem and the taps re-run before ``Concat``).

    Parameters
    ----------
    taps : int
        Number of stacked views (at least 1).
    chain : int
        Cheap ops per view (at least 1).
    stages : int
        Backbone convolutions (at least 1).
    unit : int
        Bytes per size unit (a multiple of 4).
    input_units, feature_units, tap_units : int
        Sizes of the input, the stem's and backbone's outputs, each view.
    wide : int
        Expansion factor of the middle stage.
    conv_macs : int
        Multiply-accumulates per output element of a convolution.

    Returns
    -------
    TensorGraph
        ``1 + taps * chain + stages + 3`` ops.

    Examples
    --------
    >>> g = stacked_taps()
    >>> (g.num_ops, int(g.tensor_size.max()))
    (40, 262144)
    """
    if min(taps, chain, stages, unit, input_units, feature_units, tap_units, wide, conv_macs) < 1 or unit % 4:
        raise ValueError("stacked_taps: every count and size must be positive, unit a multiple of 4")
    el = unit // 4
    tensors = [Tensor("mel", input_units * unit), Tensor("stem", feature_units * unit)]
    ops = [Op("Stem", ("mel",), ("stem",), cost=conv_macs * input_units * el)]
    names = []
    for i in range(taps):
        prev = "stem"
        for k in range(chain):
            name = f"tap{i}_{k}"
            tensors.append(Tensor(name, tap_units * unit))
            ops.append(Op(f"Pool{i}" if k == 0 else f"Unsqueeze{i}_{k}", (prev,), (name,), cost=tap_units * el))
            prev = name
        names.append(prev)
    prev = "stem"
    for s in range(stages):
        out = f"h{s}"
        tensors.append(Tensor(out, feature_units * unit))
        if s == stages // 2:
            tensors.append(Tensor(f"wide{s}", wide * feature_units * unit))
            ops.append(Op(f"Expand{s}", (prev,), (f"wide{s}",), cost=conv_macs * wide * feature_units * el))
            ops.append(Op(f"Project{s}", (f"wide{s}",), (out,), cost=conv_macs * wide * feature_units * el))
        else:
            ops.append(Op(f"Conv{s}", (prev,), (out,), cost=conv_macs * feature_units * el))
        prev = out
    stacked = taps * tap_units + feature_units
    tensors += [Tensor("stack", stacked * unit), Tensor("embedding", unit, output=True)]
    ops.append(Op("Concat", tuple(names) + (prev,), ("stack",), cost=stacked * el))
    ops.append(Op("Reduce", ("stack",), ("embedding",), cost=stacked * el))
    return TensorGraph.build(tensors, ops)
