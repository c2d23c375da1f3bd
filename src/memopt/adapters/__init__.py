"""memopt.adapters: connections to compilers and runtimes.

* :mod:`memopt.adapters.onnx` — ONNX models: import as a tensor graph, reorder the nodes with
  memopt, run both orders in onnxruntime and measure their peaks.
* :mod:`memopt.adapters.inductor` — PyTorch Inductor's generated programs.
* :mod:`memopt.adapters.training` — a PyTorch training step (forward and backward) as a tensor
  graph, from AOTAutograd's joint graph.

This package imports nothing: each adapter imports its heavy optional dependency (onnx,
onnxruntime, torch) lazily, inside its own functions.
"""
