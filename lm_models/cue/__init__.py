"""CUE (Novotney et al. 2022): a frozen sentence LM, a context encoder over context strings and a
decoder that attends to one context vector.

* :mod:`~lm_models.cue.model` -- sentence LM, context encoder, decoder, proxy auto-encoder.
* :mod:`~lm_models.cue.encoders` -- the pretrained string embedders (all-MiniLM-L6-v2, hashing).
* :mod:`~lm_models.cue.train` -- the family's training stages.
* :mod:`~lm_models.cue.shards` -- training data read from a shard folder, one shard at a time.

Importing the package registers its checkpoint types (:mod:`lm_models.checkpoint`).
"""

from lm_models.cue import model  # noqa: F401  (registers the checkpoint types)
