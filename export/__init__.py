"""ONNX export of the context LSTMs, with the context folded into the weights ahead of time.

* :mod:`export.graph` -- the ONNX graphs (step model, sentence scorer; single or multi-context),
  built node by node with ``onnx.helper`` from numpy weights.
* :mod:`export.exporter` -- checkpoint -> weights (``ContextLSTM.adapt`` per context) -> graph,
  metadata, ``onnx.checker``, the vocabulary file beside the model (``rescorer export``).
* :mod:`export.quantize` -- dynamic int8 quantisation and the perplexity change it costs.
* :mod:`export.parity` -- ONNX Runtime vs PyTorch on random batches.

Running an export needs ONNX Runtime and numpy only: :mod:`rescorer.onnx_lm` (``onnx:MODEL``).
"""
