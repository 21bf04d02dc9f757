"""ONNX export of the toolkit's models, with the context folded in ahead of time.

* :mod:`rescorer.export.format` -- the format itself: kinds, version, input/output names, metadata
  keys.
* :mod:`rescorer.export.runtime` -- reading an export: metadata and an ONNX Runtime session (no
  torch).
* :mod:`rescorer.export.graph` -- the context-LSTM graphs (step model, sentence scorer; single or
  multi-context; icefall's score_token and state-less nll forms for sherpa-onnx, optionally in
  an ASR model's token ids), built node by node with ``onnx.helper`` from numpy weights.
* :mod:`rescorer.export.exporter` -- checkpoint -> weights (``ContextLSTM.adapt`` per context) ->
  graph, metadata, ``onnx.checker``, the vocabulary file beside the model (``rescorer export``).
* :mod:`rescorer.export.cue_graph`, :mod:`rescorer.export.lbl_graph` -- the CUE decoder and the
  attribute LBL.
* :mod:`rescorer.export.quantize` -- dynamic int8 quantisation.
* :mod:`rescorer.export.parity` -- ONNX Runtime vs PyTorch on random batches.

Running an export needs ONNX Runtime and numpy only: :mod:`rescorer.lms.onnx` (``onnx:MODEL``).
"""
