"""Constants shared across the toolkit: log bases, special tokens, default names."""

from __future__ import annotations

import math

# Natural log is the toolkit's only log base. These convert *into* it, in one place.
LN10 = math.log(10.0)
"""ln(10): multiply a log10 value by this to get a natural-log value."""

# SRILM "bytelog" scores: log base 1.0001, divided by 1024 and rounded (nbest-format(5)).
BYTELOG_TO_LN = 1024.0 * math.log(1.0001)
"""Multiply a SRILM bytelog value by this to get a natural-log value."""

BOS = "<s>"
EOS = "</s>"
UNK = "<unk>"

# Name of the derived length feature in log-linear combination (number of words).
LENGTH_FEATURE = "length"
# Name of the combined score column written by `rescore`.
TOTAL_SCORE = "total"
# Names no score or model feature may take: the ones the combination itself writes.
RESERVED_FEATURES = (TOTAL_SCORE, LENGTH_FEATURE)
# Suffix of the OOV-count feature added beside an LM's score ("4gram" -> "4gram_oov").
OOV_SUFFIX = "_oov"
# Name of the list-order feature (rescorer.features.add_rank_feature): what the first pass left
# of its ranking when the lists carry no score.
RANK_FEATURE = "rank"
# Its value for the hypothesis at 0-based `position` in its list, in words (the weights' meta,
# --help); rescorer.features.rank_values computes it.
RANK_DEFINITION = "-log(1 + position)"

# Hypotheses per chunk when commands stream an N-best set (rescorer.formats.source): whole
# lists are read, scored and written a chunk at a time, so a command's memory is that of a chunk
# (a few tens of MB) whatever the size of the set; large enough for full model batches.
CHUNK_HYPOTHESES = 20_000

# The N-best formats read, the keys of rescorer.formats.READERS in their order (a test holds the
# two equal): option choices name them without importing every reader (`rescorer wer`'s
# start-up).
NBEST_FORMATS = ("espnet", "srilm1", "srilm2", "srilm3", "kaldi", "json", "jsonl", "hyporadise")
