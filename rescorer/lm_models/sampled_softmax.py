"""Sampled softmax (Jean et al. 2015) with a unigram proposal, for training only.

For each batch, ``S`` candidate words are drawn from the proposal ``q`` (the training unigram
distribution) and shared by every position. The loss is the cross entropy over {target} plus the
samples, with every logit corrected by ``-log(S * q(w))`` (the expected number of times w is
drawn) so the estimate of the full softmax is consistent; a sample that equals the position's own
target is masked out. Evaluation always uses the full softmax.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F


class UnigramSampler:
    """Draws negative samples from a unigram distribution (with replacement)."""

    def __init__(self, counts: torch.Tensor, num_samples: int):
        if num_samples < 1:
            raise ValueError(f"num_samples must be >= 1, got {num_samples}")
        counts = counts.to(torch.float64).clamp(min=0)
        if counts.sum() <= 0:
            raise ValueError("unigram counts must have a positive total")
        self.probs = (counts / counts.sum()).to(torch.float32)
        self.num_samples = num_samples

    def sample(self, generator: torch.Generator | None = None) -> torch.Tensor:
        """(S,) sampled word ids."""
        return torch.multinomial(
            self.probs, self.num_samples, replacement=True, generator=generator
        )


def sampled_softmax_loss(
    logits_of: Callable[[torch.Tensor], torch.Tensor],
    targets: torch.Tensor,
    samples: torch.Tensor,
    log_expected: torch.Tensor,
    mask: torch.Tensor,
) -> torch.Tensor:
    """Mean sampled-softmax cross entropy over the real positions.

    ``logits_of(ids)`` returns the (N, T, len(ids)) logits of the given word ids (the model's
    output layer restricted to them); ``targets`` (N, T); ``samples`` (S,); ``log_expected``
    (V,) is ``log(S * q)``; ``mask`` (N, T) marks real positions.
    """
    ids = torch.cat([samples, targets.reshape(-1)]).unique()  # (U,) the words scored at all
    sub = logits_of(ids)  # (N, T, U)
    sub = sub - log_expected[ids]  # correct for the sampling frequency of each word
    # Column of each position's target within `ids`, and which columns are samples.
    target_col = torch.searchsorted(ids, targets)  # (N, T)
    is_sample = torch.isin(ids, samples)  # (U,)
    # Keep the target's own column and the sampled columns; drop all other targets' columns and
    # the accidental hit of the target among the samples (it is already the positive).
    keep = is_sample[None, None, :].expand_as(sub).clone()  # (N, T, U)
    keep.scatter_(2, target_col.unsqueeze(-1), True)
    sub = sub.masked_fill(~keep, float("-inf"))
    loss = F.cross_entropy(sub.reshape(-1, sub.shape[-1]), target_col.reshape(-1), reduction="none")
    loss = loss.reshape(targets.shape)
    return (loss * mask).sum() / mask.sum().clamp(min=1)
