"""The toolkit's ONNX export format: kinds, version, input/output names and metadata keys.

Exports are plain ONNX models whose metadata properties (``onnx.ModelProto.metadata_props``, all
strings) describe them; a decoder needs the ``.onnx`` file and the vocabulary file named in it.
This module is the one definition of that format: the exporters (:mod:`rescorer.export.exporter`,
:mod:`rescorer.export.cue_graph`, :mod:`rescorer.export.lbl_graph`) write it and the runtime adapter
(:mod:`rescorer.lms.onnx`) reads it. It imports nothing, so the runtime needs neither torch nor
the exporters.
"""

from __future__ import annotations

FORMAT = "rescorer-onnx"
"""Metadata ``format`` of the context-LSTM and CUE exports (read by ``onnx:`` models)."""
LBL_FORMAT = "rescorer-lbl-onnx"
"""Metadata ``format`` of the LBL exports (history windows in, not recurrent state)."""
FORMAT_VERSION = 1
"""Metadata ``format_version`` (also written as ``version``, icefall's key)."""

# Context-LSTM export kinds: step models (one token, state in and out) and sentence scorers
# (whole padded sentences in, per-token and sentence log-probs out); "multi" ones take a
# context_id input choosing among the folded contexts.
STEP_KINDS = ("step", "multi")
SCORER_KINDS = ("scorer", "multi-scorer", "vector-scorer")  # whole sentences in, no state
# icefall's state-less RNN-LM form, which sherpa-onnx's offline LM rescoring loads: x holds the
# tokens without <s> and </s>, padded with 0, x_lens their counts; the output is each sentence's
# negative natural-log likelihood with <s> before and </s> after its tokens (one context folded).
NLL_KIND = "nll"
# icefall's score_token_onnx form, the one sherpa-onnx's online RNN LM (shallow fusion in
# modified beam search) loads: x (N, L), h0, c0 (layers, N, d) -> log_softmax (N, V) = log p of
# the token after x's last position, next_h0, next_c0 (one context folded). Called with L = 1.
SCORE_TOKEN_KIND = "score-token"
# The vector form: the context enters as an input vector, the context embedding c (N, k) that a
# decoder computes once per utterance (e.g. from the previous utterances' text), instead of a
# context folded in or chosen by id; every row may have its own.
VECTOR_STEP_KIND = "vector-step"
VECTOR_SCORER_KIND = "vector-scorer"
VECTOR_KINDS = (VECTOR_STEP_KIND, VECTOR_SCORER_KIND)
KINDS = ("step", "multi", "scorer", "multi-scorer", NLL_KIND, SCORE_TOKEN_KIND, *VECTOR_KINDS)
# The kinds a decoder loads with its own token ids: they may speak an ASR model's ids
# (metadata token_ids = "asr"); the others keep the toolkit's (<unk> 0, <s> 1, </s> 2).
DECODER_KINDS = (SCORE_TOKEN_KIND, NLL_KIND)
# The kinds with a state input, which a history model (LSTMConfig.history) needs: the previous
# utterances are run through the graph and the sentence starts from the state they leave.
HISTORY_KINDS = (*STEP_KINDS, SCORE_TOKEN_KIND, VECTOR_STEP_KIND)
CUE_KIND = "cue-scorer"  # CUE decoder with the CUE vector as an input
LBL_KIND = "lbl-step"  # LBL with one attribute record folded in

# Graph input and output names of each context-LSTM kind, in order.
INPUTS = {
    "step": ["x", "h0", "c0"],
    "multi": ["x", "h0", "c0", "context_id"],
    "scorer": ["x", "x_lens"],
    "multi-scorer": ["x", "x_lens", "context_id"],
    "nll": ["x", "x_lens"],
    "score-token": ["x", "h0", "c0"],
    "vector-step": ["x", "h0", "c0", "context_vector"],
    "vector-scorer": ["x", "x_lens", "context_vector"],
}
OUTPUTS = {
    "step": ["log_softmax", "next_h0", "next_c0"],
    "multi": ["log_softmax", "next_h0", "next_c0"],
    "scorer": ["token_logprobs", "sentence_logprob"],
    "multi-scorer": ["token_logprobs", "sentence_logprob"],
    "nll": ["nll"],
    "score-token": ["log_softmax", "next_h0", "next_c0"],
    "vector-step": ["log_softmax", "next_h0", "next_c0"],
    "vector-scorer": ["token_logprobs", "sentence_logprob"],
}

# Metadata keys every export of the context LSTM carries and the runtime checks (all strings;
# JSON for the lists). Exports add descriptive keys beside them (comment, mode, layer_norm, ...).
KEY_FORMAT = "format"
KEY_FORMAT_VERSION = "format_version"
KEY_KIND = "export_kind"
KEY_VOCAB_FILE = "vocab_file"
KEY_CONTEXT_VARIABLES = "context_variables"  # JSON list of {name, kind, values, dim}
KEY_CONTEXTS = "contexts"  # JSON list of the folded records, in context_id order
# Whose ids the graph's inputs and outputs are: "toolkit" (the vocabulary file is the model's
# own, <unk> 0, <s> 1, </s> 2) or "asr" (decoder kinds over an ASR model's token set: the
# vocabulary file is its tokens in id order, and blank_id names its blank).
KEY_TOKEN_IDS = "token_ids"
TOKEN_IDS = ("toolkit", "asr")
KEY_BLANK_ID = "blank_id"
# The vector form: the width k of context_vector, the context-record field that holds a vector
# (what `rescorer context vectors` writes), and the expected context's vector (every variable
# missing: what a record without one gets), a JSON list of k numbers.
KEY_CONTEXT_DIM = "context_dim"
KEY_VECTOR_FIELD = "context_vector_field"
KEY_EXPECTED_VECTOR = "expected_context_vector"
VECTOR_FIELD = "context_vector"  # the field's name unless the export says otherwise
# A history model (LSTMConfig.history): the context-record field whose text, one earlier
# utterance per line, is run through the graph as ``<s> w1 .. wn`` before the sentence (from the
# zero state, its end state the sentence's h0/c0). Absent or "": none.
KEY_HISTORY_FIELD = "history_field"
INTEGER_KEYS = (
    "vocab_size",
    "sos_id",
    "eos_id",
    "unk_id",
    "pad_id",
    "num_layers",
    "hidden_size",
)
LOG_BASE = "e"  # metadata ``log_base``: every output is a natural log
