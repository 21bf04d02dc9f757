"""The shared output layers: exact, normalised, and the target path equal to the full one."""

from __future__ import annotations

import pytest
import torch

from rescorer.lm_models.output import ClassFactoredSoftmax, FullSoftmax
from rescorer.lm_models.word_classes import frequency_classes, shortlist_classes

V, IN, N = 53, 7, 11


def setup(num_classes: int, seed: int = 0, never: tuple[int, ...] = (), shortlist: int = 0):
    gen = torch.Generator().manual_seed(seed)
    counts = torch.randint(1, 1000, (V,), generator=gen).tolist()
    if shortlist:
        classes = shortlist_classes(counts, shortlist, num_classes)
    else:
        classes = frequency_classes(counts, num_classes)
    layer = ClassFactoredSoftmax(classes, IN, never=never).double()
    with torch.no_grad():
        layer.class_layer.weight.normal_(generator=gen)
        layer.class_layer.bias.normal_(generator=gen)
    weight = torch.randn(V, IN, generator=gen, dtype=torch.float64, requires_grad=True)
    bias = torch.randn(V, generator=gen, dtype=torch.float64, requires_grad=True)
    z = torch.randn(N, IN, generator=gen, dtype=torch.float64)
    targets = torch.randint(0, V, (N,), generator=gen)
    return layer, weight, bias, z, targets


LAYOUTS = [(1, 0), (2, 0), (8, 0), (30, 0), (3, 10), (1, 20), (4, 40)]


@pytest.mark.parametrize(("num_classes", "shortlist"), LAYOUTS)
def test_class_factored_sums_to_one(num_classes: int, shortlist: int) -> None:
    layer, weight, bias, z, _ = setup(num_classes, shortlist=shortlist)
    lp = layer.log_probs(z, weight, bias)
    assert lp.shape == (N, V)
    torch.testing.assert_close(
        lp.exp().sum(-1), torch.ones(N, dtype=torch.float64), atol=1e-12, rtol=0
    )
    assert layer.num_classes == len(set(layer.class_of.tolist())) <= num_classes + shortlist


def test_class_factored_sums_to_one_in_float32_to_1e5() -> None:
    layer, weight, bias, z, _ = setup(12, seed=3)
    layer = layer.float()
    lp = layer.log_probs(z.float() * 5, weight.detach().float(), bias.detach().float())
    assert float((lp.detach().exp().sum(-1) - 1).abs().max()) < 1e-5


def test_one_class_is_the_full_softmax() -> None:
    layer, weight, bias, z, targets = setup(1)
    full = FullSoftmax(V)
    torch.testing.assert_close(layer.log_probs(z, weight, bias), full.log_probs(z, weight, bias))
    torch.testing.assert_close(
        layer.log_prob(z, targets, weight, bias), full.log_prob(z, targets, weight, bias)
    )


def test_it_is_not_the_full_softmax_with_several_classes() -> None:
    layer, weight, bias, z, _ = setup(8)
    full = FullSoftmax(V).log_probs(z, weight, bias)
    assert float((layer.log_probs(z, weight, bias) - full).detach().abs().max()) > 1e-3


@pytest.mark.parametrize("shortlist", [0, 12])
@pytest.mark.parametrize("per_row_bias", [False, True])
def test_target_path_equals_the_full_distribution_and_its_gradient(
    per_row_bias: bool, shortlist: int
) -> None:
    layer, weight, bias, z, targets = setup(5 if shortlist else 9, seed=1, shortlist=shortlist)
    b = (
        bias.unsqueeze(0).repeat(N, 1) + torch.randn(N, V, dtype=torch.float64)
        if per_row_bias
        else bias
    )
    picked = layer.log_probs(z, weight, b).gather(1, targets.unsqueeze(1)).squeeze(1)
    direct = layer.log_prob(z, targets, weight, b)
    torch.testing.assert_close(direct, picked, atol=1e-12, rtol=0)
    wrt = [weight, bias, layer.class_layer.weight, layer.class_layer.bias]
    g_full = torch.autograd.grad(picked.sum(), wrt)
    g_direct = torch.autograd.grad(direct.sum(), wrt)
    for a, c in zip(g_full, g_direct, strict=True):
        torch.testing.assert_close(a, c, atol=1e-10, rtol=0)


@pytest.mark.parametrize("shortlist", [0, 10])
def test_a_bias_table_with_bias_rows_equals_the_expanded_per_row_bias(shortlist: int) -> None:
    """bias (S, V) and bias_rows (N,) give what bias[bias_rows] (N, V) gives, values and
    gradients alike (the table's gradient: the rows' gradients summed per table row)."""
    layer, weight, _, z, targets = setup(5 if shortlist else 9, seed=2, shortlist=shortlist)
    table = torch.randn(3, V, dtype=torch.float64, requires_grad=True)
    rows = torch.tensor([2, 0, 0, 1, 2, 2, 1, 0, 2, 1, 1])  # (N,) the table row of each z
    expanded = layer.log_prob(z, targets, weight, table[rows])
    direct = layer.log_prob(z, targets, weight, table, bias_rows=rows)
    torch.testing.assert_close(direct, expanded, atol=1e-12, rtol=0)
    g_expanded = torch.autograd.grad(expanded.sum(), [weight, table])
    g_direct = torch.autograd.grad(direct.sum(), [weight, table])
    for a, c in zip(g_expanded, g_direct, strict=True):
        torch.testing.assert_close(a, c, atol=1e-10, rtol=0)
    # a different table row per z is not the same as the first row for all
    shared = layer.log_prob(z, targets, weight, table[0])
    assert not torch.allclose(shared, direct)
    with pytest.raises(ValueError, match="bias_rows"):
        layer.log_prob(z, targets, weight, table[0], bias_rows=rows)


def test_words_already_in_segment_order_are_read_without_a_gather() -> None:
    # shortlist words first, then each cluster's words: the ids are the segment order
    classes = [0, 1, 2, 3, 3, 3, 4, 4, 4, 4]
    layer = ClassFactoredSoftmax(classes, IN).double()
    assert layer.grouped_is_identity and layer.segment_sizes == [3, 3, 4]
    shuffled = ClassFactoredSoftmax([3, 0, 4, 1, 3, 2, 4, 3, 4, 4], IN).double()
    assert not shuffled.grouped_is_identity
    gen = torch.Generator().manual_seed(5)
    weight = torch.randn(10, IN, generator=gen, dtype=torch.float64, requires_grad=True)
    bias = torch.randn(10, generator=gen, dtype=torch.float64, requires_grad=True)
    z = torch.randn(N, IN, generator=gen, dtype=torch.float64)
    targets = torch.randint(0, 10, (N,), generator=gen)
    picked = layer.log_probs(z, weight, bias).gather(1, targets.unsqueeze(1)).squeeze(1)
    direct = layer.log_prob(z, targets, weight, bias)
    torch.testing.assert_close(direct, picked, atol=1e-12, rtol=0)
    g_full = torch.autograd.grad(picked.sum(), [weight, bias])
    g_direct = torch.autograd.grad(direct.sum(), [weight, bias])
    for a, c in zip(g_full, g_direct, strict=True):
        torch.testing.assert_close(a, c, atol=1e-10, rtol=0)


def test_a_class_per_word_is_the_full_softmax() -> None:
    layer, weight, bias, z, targets = setup(1)
    layer = ClassFactoredSoftmax(list(range(V)), IN).double()
    assert layer.class_layer.weight.shape == (0, IN) and len(layer.single_words) == V
    full = FullSoftmax(V)
    torch.testing.assert_close(layer.log_probs(z, weight, bias), full.log_probs(z, weight, bias))
    torch.testing.assert_close(
        layer.log_prob(z, targets, weight, bias), full.log_prob(z, targets, weight, bias)
    )


def test_singleton_classes_take_the_word_logit() -> None:
    layer, weight, bias, z, _ = setup(3, shortlist=10)
    lp = layer.log_probs(z, weight, bias)
    singles = layer.single_words
    assert len(singles) >= 10
    # two singleton words: their log-prob difference is their logit difference
    a, b = int(singles[0]), int(singles[1])
    logit = z @ weight.T + bias
    torch.testing.assert_close(lp[:, a] - lp[:, b], logit[:, a] - logit[:, b])


def test_shortlist_classes_layout() -> None:
    counts = [0, 50, 3, 900, 7, 1, 400, 2, 0, 60]
    classes = shortlist_classes(counts, 3, 2)
    assert len({classes[3], classes[6], classes[9]}) == 3  # the 3 most frequent: own classes
    assert all(classes.count(classes[u]) == 1 for u in (3, 6, 9))
    rest = sorted({classes[u] for u in (0, 1, 2, 4, 5, 7, 8)})
    assert len(rest) == 2 and sorted(set(classes)) == list(range(5))
    # clusters in descending count: every unit of the first outranks every unit of the second
    first, second = sorted(
        rest, key=lambda c: -max(counts[u] for u in range(10) if classes[u] == c)
    )
    low = min(counts[u] for u in range(10) if classes[u] == first)
    assert all(counts[u] <= low for u in range(10) if classes[u] == second)
    assert classes[0] == classes[8] == second  # count 0: the last cluster


def test_target_path_touches_only_the_targets_classes() -> None:
    layer, weight, bias, z, targets = setup(10, seed=2)
    layer.log_prob(z, targets, weight, bias).sum().backward()
    touched = weight.grad.abs().sum(1) > 0
    in_target_classes = torch.isin(layer.class_of, layer.class_of[targets])
    assert bool(touched.any())
    assert not bool((touched & ~in_target_classes).any())


def test_never_predicted_units_get_zero_and_the_rest_still_sums_to_one() -> None:
    layer, weight, bias, z, targets = setup(6, never=(1,))
    lp = layer.log_probs(z, weight, bias)
    assert bool(torch.isneginf(lp[:, 1]).all())
    torch.testing.assert_close(
        lp.exp().sum(-1), torch.ones(N, dtype=torch.float64), atol=1e-12, rtol=0
    )
    targets = targets.masked_fill(targets == 1, 0)
    picked = lp.gather(1, targets.unsqueeze(1)).squeeze(1)
    torch.testing.assert_close(layer.log_prob(z, targets, weight, bias), picked)


def test_bad_classes_are_refused() -> None:
    with pytest.raises(ValueError, match="have no word"):
        ClassFactoredSoftmax([0, 2, 2], IN)
    with pytest.raises(ValueError, match="never predicted"):
        ClassFactoredSoftmax([0, 1, 1], IN, never=(0,))
    layer, weight, bias, z, targets = setup(3)
    with pytest.raises(ValueError, match="expected z"):
        layer.log_prob(z.unsqueeze(0), targets, weight, bias)


def test_untied_singletons_get_rows_of_their_own_and_stay_exact() -> None:
    _, weight, bias, z, targets = setup(3, shortlist=10)
    classes = ClassFactoredSoftmax(setup(3, shortlist=10)[0].class_of.tolist(), IN)
    untied = ClassFactoredSoftmax(classes.class_of.tolist(), IN, tie_singletons=False).double()
    assert untied.class_layer.weight.shape == (untied.num_classes, IN)
    assert len(untied.single_words) == 0 and len(classes.single_words) >= 10
    lp = untied.log_probs(z, weight, bias)
    torch.testing.assert_close(lp.exp().sum(-1), torch.ones(N, dtype=torch.float64))
    picked = lp.gather(1, targets.unsqueeze(1)).squeeze(1)
    torch.testing.assert_close(untied.log_prob(z, targets, weight, bias), picked)


# -- the blocked full softmax (issue 20: no (N, V) tensor per step) --------------------------


@pytest.fixture
def small_blocks(monkeypatch: pytest.MonkeyPatch) -> None:
    """Blocks of 16 rows, so that N = 70 rows take five blocks, the last one partial."""
    import rescorer.lm_models.output as output

    monkeypatch.setattr(output, "BLOCK_BYTES", 16 * V * 8)


def _blocked_case(seed: int = 0, n: int = 70):
    gen = torch.Generator().manual_seed(seed)
    z = torch.randn(n, IN, generator=gen, dtype=torch.float64, requires_grad=True)
    weight = torch.randn(V, IN, generator=gen, dtype=torch.float64, requires_grad=True)
    bias = torch.randn(V, generator=gen, dtype=torch.float64, requires_grad=True)
    return gen, z, weight, bias


def test_blocked_target_log_softmax_equals_the_gathered_distribution(small_blocks: None) -> None:
    from rescorer.lm_models.output import block_rows, target_log_softmax

    assert block_rows(V, 8) == 16
    gen, z, weight, bias = _blocked_case()
    rows = torch.randint(0, 70, (150,), generator=gen)  # unsorted, repeated, some rows unused
    targets = torch.randint(1, V, (150,), generator=gen)
    never = torch.tensor([0])
    with torch.no_grad():
        got = target_log_softmax(z, weight, bias, rows, targets, never)
    full = torch.log_softmax((z @ weight.T + bias).index_fill(1, never, -torch.inf), 1)
    torch.testing.assert_close(got, full[rows, targets], atol=1e-12, rtol=0)
    # a never-predicted target is impossible
    with torch.no_grad():
        assert target_log_softmax(z, weight, bias, rows[:1], never, never).item() == -torch.inf


def test_blocked_target_log_softmax_gradients_equal_autograd_of_the_full_softmax(
    small_blocks: None,
) -> None:
    from rescorer.lm_models.output import target_log_softmax

    gen, z, weight, bias = _blocked_case(seed=1)
    targets = torch.randint(1, V, (70,), generator=gen)
    upstream = torch.randn(70, generator=gen, dtype=torch.float64)  # any incoming gradient
    rows = torch.arange(70)
    got = torch.autograd.grad(
        (target_log_softmax(z, weight, bias, rows, targets) * upstream).sum(), (z, weight, bias)
    )
    ref = torch.log_softmax(z @ weight.T + bias, 1)[rows, targets]
    want = torch.autograd.grad((ref * upstream).sum(), (z, weight, bias))
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g, w, atol=1e-12, rtol=0)


def test_blocked_target_log_softmax_with_a_bias_table_equals_the_expanded_bias(
    small_blocks: None,
) -> None:
    """A bias per sequence: table (C, V) and bias_of (N,) give the values and gradients of the
    softmax over z W^T + table[bias_of] (blocks of 16 rows cross the sequences' bounds)."""
    from rescorer.lm_models.output import target_log_softmax

    gen, z, weight, _ = _blocked_case(seed=3)
    table = torch.randn(5, V, generator=gen, dtype=torch.float64, requires_grad=True)
    bias_of = torch.randint(0, 5, (70,), generator=gen)
    targets = torch.randint(0, V, (70,), generator=gen)
    upstream = torch.randn(70, generator=gen, dtype=torch.float64)
    rows = torch.arange(70)
    got = target_log_softmax(z, weight, table, rows, targets, bias_of=bias_of)
    ref = torch.log_softmax(z @ weight.T + table[bias_of], 1)[rows, targets]
    torch.testing.assert_close(got, ref, atol=1e-12, rtol=0)
    g_got = torch.autograd.grad((got * upstream).sum(), (z, weight, table))
    g_ref = torch.autograd.grad((ref * upstream).sum(), (z, weight, table))
    for g, w in zip(g_got, g_ref, strict=True):
        torch.testing.assert_close(g, w, atol=1e-10, rtol=0)
    assert not torch.allclose(got, target_log_softmax(z, weight, table[0], rows, targets))
    with pytest.raises(ValueError, match="bias_of must name a table row per row"):
        target_log_softmax(z, weight, table, rows, targets, bias_of=bias_of[:3])


def test_blocked_target_log_softmax_refuses_gradients_with_several_targets_per_row() -> None:
    from rescorer.lm_models.output import target_log_softmax

    _, z, weight, bias = _blocked_case()
    rows = torch.tensor([0, 0, 1])
    with pytest.raises(ValueError, match="one target per row"):
        target_log_softmax(z, weight, bias, rows, torch.tensor([3, 4, 5]))


def test_full_softmax_target_path_uses_blocks_and_matches_log_probs(small_blocks: None) -> None:
    gen, z, weight, bias = _blocked_case(seed=2)
    layer = FullSoftmax(V, never=(0,))
    targets = torch.randint(1, V, (70,), generator=gen)
    got = layer.log_prob(z, targets, weight, bias)
    assert got.grad_fn is not None and "TargetLogSoftmax" in type(got.grad_fn).__name__
    want = layer.log_probs(z, weight, bias).gather(1, targets[:, None]).squeeze(1)
    torch.testing.assert_close(got, want, atol=1e-12, rtol=0)


def test_class_factored_scoring_reuses_its_gathered_rows_only_while_weights_are_unchanged() -> None:
    layer, weight, bias, z, targets = setup(4, shortlist=10)
    layer.eval()
    assert not layer.grouped_is_identity
    w, b = weight.detach().clone(), bias.detach().clone()
    with torch.no_grad():
        first = layer.log_prob(z, targets, w, b)
        cache = layer._grouped_cache
        assert cache is not None and cache[0].data_ptr() == w.data_ptr()
        torch.testing.assert_close(layer.log_prob(z, targets, w, b), first, atol=0, rtol=0)
        assert layer._grouped_cache is cache  # reused, not gathered again
        # a change that bumps no version (as a fused optimizer step): train mode drops the copy
        w.data.mul_(2.0)
        layer.train()
        assert layer._grouped_cache is None
        layer.eval()
        torch.testing.assert_close(
            layer.log_prob(z, targets, w, b),
            layer.log_probs(z, w, b).gather(1, targets[:, None]).squeeze(1),
            atol=1e-12,
            rtol=0,
        )
        w.data.mul_(0.5)
        w.mul_(0.5)  # changed in place: the cached rows must not be used
        again = layer.log_prob(z, targets, w, b)
        want = layer.log_probs(z, w, b).gather(1, targets[:, None]).squeeze(1)
        torch.testing.assert_close(again, want, atol=1e-12, rtol=0)
        other = b + 1.0  # another bias object
        torch.testing.assert_close(
            layer.log_prob(z, targets, w, other),
            layer.log_probs(z, w, other).gather(1, targets[:, None]).squeeze(1),
            atol=1e-12,
            rtol=0,
        )
    with torch.inference_mode():  # inference tensors keep no version counter
        inf_b = b * 2.0
        torch.testing.assert_close(
            layer.log_prob(z, targets, w, inf_b),
            layer.log_probs(z, w, inf_b).gather(1, targets[:, None]).squeeze(1),
            atol=1e-12,
            rtol=0,
        )


class _Owner(torch.nn.Module):
    """A family's shape: the word weights and bias are its parameters, the layer a submodule."""

    def __init__(self, layer: ClassFactoredSoftmax, weight: torch.Tensor, bias: torch.Tensor):
        super().__init__()
        self.layer = layer
        self.weight = torch.nn.Parameter(weight.detach().clone())
        self.bias = torch.nn.Parameter(bias.detach().clone())

    def forward(self, z: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return self.layer.log_prob(z, targets, self.weight, self.bias)

    def fresh(self, z: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """The same values by the full distribution (no cached rows)."""
        full = self.layer.log_probs(z, self.weight, self.bias)
        return full.gather(1, targets[:, None]).squeeze(1)


@pytest.mark.parametrize(
    "change",
    ["float", "double", "to", "data_assigned", "data_copied", "data_to", "inference_copied"],
)
def test_class_factored_cached_rows_follow_dtype_changes_and_new_weights(change: str) -> None:
    """Module.to/.double/.float and assignments to .data replace a Parameter's data without
    changing the Parameter object or its version; copies through .data change no version
    either. After each, scoring equals a fresh computation (no stale rows, no dtype error)."""
    layer, weight, bias, z, targets = setup(4, shortlist=10)
    owner = _Owner(layer, weight, bias).eval()
    assert not layer.grouped_is_identity
    gen = torch.Generator().manual_seed(7)
    new_w = torch.randn(V, IN, generator=gen, dtype=torch.float64)
    with torch.no_grad():
        owner(z, targets)  # the rows are gathered and kept
        assert layer._grouped_cache is not None
        if change == "float":
            owner.float()
            z = z.float()
        elif change == "double":
            owner.float()
            owner(z.float(), targets)  # kept in float32
            owner.double()
        elif change == "to":
            owner.to(torch.float32)
            z = z.float()
        elif change == "data_assigned":
            owner.weight.data = new_w.clone()
        elif change == "data_copied":
            owner.weight.data.copy_(new_w)
        elif change == "data_to":
            owner.weight.data = new_w.to(torch.float32).to(torch.float64)
        if change != "inference_copied":
            got, want = owner(z, targets), owner.fresh(z, targets)
    if change == "inference_copied":  # an inference tensor keeps no version counter
        with torch.inference_mode():
            w = weight.detach() * 1.0
            b = bias.detach() * 1.0
            layer.log_prob(z, targets, w, b)
            w.copy_(new_w)
            got = layer.log_prob(z, targets, w, b)
            want = layer.log_probs(z, w, b).gather(1, targets[:, None]).squeeze(1)
    assert got.dtype == z.dtype
    tol = 1e-12 if z.dtype == torch.float64 else 1e-5
    torch.testing.assert_close(got, want, atol=tol, rtol=0)
