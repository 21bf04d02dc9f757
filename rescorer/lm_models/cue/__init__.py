"""CUE (Novotney et al. 2022): a frozen sentence LM, a context encoder over context strings and a
decoder that attends to one context vector.

* :mod:`~rescorer.lm_models.cue.model` -- sentence LM, context encoder, decoder, proxy auto-encoder.
* :mod:`~rescorer.lm_models.cue.train` -- the family's training stages.
* :mod:`~rescorer.lm_models.cue.shards` -- training data read from a shard folder, one shard at a
  time.

The frozen string encoders are shared with the LSTM family's text context variables:
:mod:`rescorer.lm_models.text_encoders`.

Importing the package registers its checkpoint types (:mod:`rescorer.lm_models.checkpoint`).
"""

from rescorer.lm_models.cue import model  # noqa: F401  (registers the checkpoint types)
