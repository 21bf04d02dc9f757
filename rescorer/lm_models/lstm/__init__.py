"""The FactorCell family (Jaech & Ostendorf 2018): Unadapted, SoftmaxBias, ConcatCell and FactorCell
LSTMs over words with context variables.

* :mod:`~rescorer.lm_models.lstm.model` -- :class:`~rescorer.lm_models.lstm.model.ContextLSTM` and
  its config.
* :mod:`~rescorer.lm_models.lstm.transformer` -- a small causal Transformer in the unadapted LSTM's
  place (same embedding, output layer, training and scoring; ``model.arch: "transformer"``).
* :mod:`~rescorer.lm_models.lstm.context` -- context variables (categorical, numerical) and their
  embeddings.
* :mod:`~rescorer.lm_models.lstm.data` -- its training data: read, split, counted, encoded; in
  memory or streamed from a sharded corpus, each process its share under torchrun.
* :mod:`~rescorer.lm_models.lstm.train` -- the family's training (``rescorer train``).
* :mod:`~rescorer.lm_models.lstm.evaluate` -- perplexity and context classification.
* :mod:`~rescorer.lm_models.lstm.inspect` -- how strongly each context value adapts the model.

Importing the package registers its checkpoint types (:mod:`rescorer.lm_models.checkpoint`).
"""

from rescorer.lm_models.lstm import model, transformer  # noqa: F401  (register the checkpoint types)
