"""A small causal Transformer word LM (:mod:`~lm_models.transformer.model`), trained by the LSTM
family's loop (``rescorer train``, ``model.arch: "transformer"``) and scored by ``torch:``.

Importing the package registers its checkpoint type (:mod:`lm_models.checkpoint`).
"""

from lm_models.transformer import model  # noqa: F401  (registers the checkpoint type)
