"""Length bucketing, padding, and the sampled softmax loss."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from rescorer.lm_models.batching import Example, bucket_batches, collate
from rescorer.lm_models.sampled_softmax import UnigramSampler, sampled_softmax_loss


def test_buckets_respect_the_token_budget_and_cover_everything() -> None:
    lengths = [3, 9, 4, 4, 12, 1, 7, 7, 7, 30]
    batches = bucket_batches(lengths, batch_tokens=16, seed=0)
    assert sorted(i for b in batches for i in b) == list(range(len(lengths)))
    for b in batches:
        longest = max(lengths[i] for i in b)
        assert longest * len(b) <= 16 or len(b) == 1
    assert [9] in batches  # longer than the budget: alone
    assert batches == bucket_batches(lengths, batch_tokens=16, seed=0)
    assert batches != bucket_batches(lengths, batch_tokens=16, seed=1)
    with pytest.raises(ValueError, match="batch_tokens"):
        bucket_batches(lengths, 0, seed=0)


def test_collate_pads_and_masks() -> None:
    batch = collate([Example((1, 5, 6), (5, 6, 2), {"g": "a"}), Example((1,), (2,))], pad_id=2)
    assert batch.inputs.tolist() == [[1, 5, 6], [1, 2, 2]]
    assert batch.targets.tolist() == [[5, 6, 2], [2, 2, 2]]
    assert batch.lengths.tolist() == [3, 1]
    assert batch.mask().tolist() == [[True, True, True], [True, False, False]]
    assert batch.num_tokens == 4 and batch.records == ({"g": "a"}, None)
    with pytest.raises(ValueError, match="same non-zero length"):
        Example((1, 2), (2,))


def test_sampled_softmax_equals_full_softmax_when_every_word_is_sampled() -> None:
    torch.manual_seed(0)
    V, N, T = 11, 3, 4
    logits = torch.randn(N, T, V)
    targets = torch.randint(0, V, (N, T))
    mask = torch.ones(N, T)
    mask[2, 2:] = 0
    samples = torch.arange(V)
    log_expected = torch.full((V,), math.log(V * (1 / V)))  # uniform q, S = V: a constant
    loss = sampled_softmax_loss(lambda ids: logits[..., ids], targets, samples, log_expected, mask)
    full = F.cross_entropy(logits.reshape(-1, V), targets.reshape(-1), reduction="none")
    want = (full * mask.reshape(-1)).sum() / mask.sum()
    assert loss.item() == pytest.approx(want.item(), abs=1e-6)


def test_sampled_softmax_by_hand_with_an_accidental_hit() -> None:
    # One position, target 0, samples {0, 2}: candidates are words 0 and 2 only.
    logits = torch.tensor([[[1.0, 5.0, 2.0]]])
    log_expected = torch.log(torch.tensor([0.5, 0.25, 0.25]) * 2)
    loss = sampled_softmax_loss(
        lambda ids: logits[..., ids],
        torch.tensor([[0]]),
        torch.tensor([0, 2]),
        log_expected,
        torch.ones(1, 1),
    )
    a, c = 1.0 - math.log(1.0), 2.0 - math.log(0.5)
    assert loss.item() == pytest.approx(-(a - math.log(math.exp(a) + math.exp(c))), abs=1e-6)


def test_unigram_sampler() -> None:
    sampler = UnigramSampler(torch.tensor([0.0, 3.0, 1.0]), num_samples=4000)
    draws = sampler.sample(torch.Generator().manual_seed(0))
    assert draws.shape == (4000,) and 0 not in draws.tolist()
    assert (draws == 1).float().mean().item() == pytest.approx(0.75, abs=0.03)
    with pytest.raises(ValueError, match="positive total"):
        UnigramSampler(torch.zeros(3), 5)
