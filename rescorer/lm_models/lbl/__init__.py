"""The multiplicative attribute LBL (Kiros et al. 2014): a log-bilinear LM whose word tensor is
gated by attribute vectors.

* :mod:`~rescorer.lm_models.lbl.model` -- :class:`~rescorer.lm_models.lbl.model.LBL` and its config.
* :mod:`~rescorer.lm_models.lbl.train` -- training, attribute inference, neighbours, samples
  (``rescorer lbl-train``, ``lbl-infer``).

Importing the package registers its checkpoint types (:mod:`rescorer.lm_models.checkpoint`).
"""

from rescorer.lm_models.lbl import model  # noqa: F401  (registers the checkpoint types)
