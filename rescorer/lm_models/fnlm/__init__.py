"""The factored neural LM (Alexandrescu & Kirchhoff 2006): word factors as inputs, unknown-factor
backoff, class-factored output.

* :mod:`~rescorer.lm_models.fnlm.model` -- :class:`~rescorer.lm_models.fnlm.model.FNLM` and its
  config.
* :mod:`~rescorer.lm_models.fnlm.factors` -- factor extraction (plain text and CoNLL-U annotation).
* :mod:`~rescorer.lm_models.fnlm.train` -- the family's training (``rescorer fnlm-train``).
* :mod:`~rescorer.lm_models.fnlm.evaluate` -- perplexity tables.

Importing the package registers its checkpoint types (:mod:`rescorer.lm_models.checkpoint`).
"""

from rescorer.lm_models.fnlm import model  # noqa: F401  (registers the checkpoint types)
