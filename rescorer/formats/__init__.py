"""N-best file formats: readers, writers and format detection.

Every reader returns an :class:`~rescorer.nbest.NBest` whose log-probability scores are in
**natural log** (higher is better); formats that store log10 (``srilm3``), bytelog
(``srilm1``, ``srilm2``) or costs (``kaldi``) are converted on read and back on write.
Malformed input raises :class:`~rescorer.core.errors.InputError` naming the file (and line).

==========  ==========================================================  =====================
format      layout                                                      scores (stored as)
==========  ==========================================================  =====================
espnet      ``raw_hypotheses/<k>best_recog/{text,score,scores,token}``  as in the files (ln)
srilm1      ``NBestList1.0`` files, one per utterance                   ``score`` (bytelog)
srilm2      ``NBestList2.0`` files, one per utterance                   ``score``, ``acoustic``,
                                                                        ``lm`` (bytelog)
srilm3      ``ascore lscore nwords words`` files, one per utterance     ``acoustic``, ``lm``
                                                                        (log10), ``nwords``
kaldi       ``text`` + ``*_cost`` files, ids ``<uttid>-<N>``           ``<name> = -cost``
json        ``{utt: {hyp1: {score, text}, ..., ref}}``                  as in the file
jsonl       one ``{"utt", "hyps", "ref"}`` object per line              as in the file
hyporadise  ``[{"input": [hyp, ...], "output": ref, "score": [...]}]``  as in the file
==========  ==========================================================  =====================

``srilm2`` has no writer (it needs word times).

The registry (:data:`READERS`, :data:`WRITERS`, :func:`detect_format`, :func:`read_nbest`,
:func:`write_nbest`) lives in :mod:`rescorer.formats.registry` and is imported on first use
(PEP 562): importing one format's module, or :mod:`rescorer.refs`, does not import them all.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rescorer.formats.registry import (
        FILE_FORMATS,
        READERS,
        WRITERS,
        detect_format,
        read_nbest,
        write_nbest,
    )

__all__ = ["FILE_FORMATS", "READERS", "WRITERS", "detect_format", "read_nbest", "write_nbest"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        import rescorer.formats.registry as registry

        return getattr(registry, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
