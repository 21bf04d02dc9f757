"""Commands for factored neural LMs and linear mixtures: ``fnlm-train``, ``fnlm-eval``,
``mix-weights``. Registered on the ``rescorer`` group by :mod:`rescorer.cli.main`."""

from __future__ import annotations

import math
from pathlib import Path

import click
import numpy as np

from rescorer.cli.options import (
    EXISTING_FILE,
    MODEL_DIR,
    InputFailure,
    LMSpecType,
    config_trainer_options,
    device_option,
    handle_errors,
    lm_case_option,
    out_option,
    read_text_sentences,
    run_config_trainer,
    text_format_option,
)
from rescorer.core.json_input import read_json
from rescorer.lms import load_lm
from rescorer.lms.contract import LanguageModel, LMSpec
from rescorer.lms.mixture import MixtureSpec, em_weights, relative_spec

STRATEGY_NAMES = ("null", "all", "tail", "least")  # = rescorer.lm_models.fnlm.factors.STRATEGIES


# -- fnlm-train -----------------------------------------------------------------------------------


@click.command(name="fnlm-train")
@config_trainer_options("fnlm")
@handle_errors
def fnlm_train(
    config_path: Path,
    out_dir: Path,
    data_dir: Path | None,
    seed: int | None,
    device: str | None,
    train_shards: Path | None,
) -> None:
    """Train a factored neural LM (Alexandrescu & Kirchhoff 2006) from a JSON config.

    The config has "data", "model" and "train" sections (see rescorer.lm_models.fnlm.train): corpus
    (conllu, plain, brown), factors (word, lemma, upos, xpos, feats, feat:NAME, lower, stem,
    suffix1-3, shape), order, sizes, class-factored output, count flattening, L2.

    \b
    Examples:
      rescorer fnlm-train conf/tr_fnlm.json --out exp/tr/fnlm_seed0 --seed 0
      rescorer fnlm-train conf/big.json --train-shards shards/ --out exp/big  # plain/conllu
    """
    from rescorer.lm_models.fnlm.train import FNLMTrainConfig, train_fnlm  # torch: imported here

    run_config_trainer(
        FNLMTrainConfig, train_fnlm, config_path, out_dir, data_dir, seed, device, train_shards
    )


# -- fnlm-eval ------------------------------------------------------------------------------------


@click.command(name="fnlm-eval")
@click.option(
    "--model",
    "model_dir",
    type=MODEL_DIR,
    required=True,
    help="An FNLM checkpoint folder (rescorer fnlm-train).",
)
@click.option("--text", "text_path", type=EXISTING_FILE, required=True, help="Text to score.")
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["conllu", "plain"]),
    default="conllu",
    show_default=True,
    help="conllu: annotated (every factor available); plain: one sentence per line (factors "
    "that need annotation are unknown).",
)
@click.option(
    "--unit",
    type=click.Choice(["token", "word"]),
    default=None,
    help="CoNLL-U units (default: as in training).",
)
@click.option(
    "--drop-punct/--keep-punct",
    default=None,
    help="Leave out punctuation (default: as in training).",
)
@click.option(
    "--strategy",
    "strategies",
    type=click.Choice(STRATEGY_NAMES),
    multiple=True,
    help="Unknown-factor strategies to evaluate (repeatable; default: all four).",
)
@device_option()
@handle_errors
def fnlm_eval(
    model_dir: Path,
    text_path: Path,
    fmt: str,
    unit: str | None,
    drop_punct: bool | None,
    strategies: tuple[str, ...],
    device: str,
) -> None:
    """Perplexity of an FNLM with and without unknown words, per unknown-factor strategy.

    For each strategy: perplexity over the tokens whose word was seen in training ("no unk"),
    over every token with unknown words scored as <unk> ("w/unk"), and the average probability
    of known words with an unknown word among the two before them (the paper's Tables 2 and 1).

    \b
    Example:
      rescorer fnlm-eval --model exp/tr/fnlm_seed0 --text tr_imst-ud-test.conllu
    """
    from rescorer.lm_models.fnlm.evaluate import (
        mean_prob_after_unknown,
        perplexity_report,
        token_flags,
    )
    from rescorer.lm_models.fnlm.model import load_fnlm
    from rescorer.lm_models.fnlm.train import read_sentences

    lm = load_fnlm(model_dir, device)
    trained = {}
    meta_file = model_dir / "training.json"
    if meta_file.is_file():
        meta = read_json(meta_file)
        trained = meta.get("config", {}).get("data", {})
    unit = unit or trained.get("unit", "token")
    drop = trained.get("drop_punct", False) if drop_punct is None else drop_punct
    sentences = read_sentences(text_path, fmt, unit, drop)
    if not sentences:
        raise InputFailure(f"{text_path}: no sentences")
    tokens = [[lm.token(w) for w in s] for s in sentences]
    flags = token_flags(tokens, lm.word_counts)
    click.echo(f"{model_dir}: factors {list(lm.config.factors)}, order {lm.config.order}")
    for strategy in strategies or STRATEGY_NAMES:
        logprobs = np.concatenate(lm.token_logprobs(sentences, strategy))
        report = perplexity_report(logprobs, flags)
        mean_p, n = mean_prob_after_unknown(logprobs, flags)
        click.echo(f"{strategy:>5s}: {report.describe()}")
        click.echo(f"       mean P of known words after an unknown one {mean_p:.6f} over {n}")


# -- mix-weights ----------------------------------------------------------------------------------


@click.command(name="mix-weights")
@click.option(
    "--lm",
    "lm_specs",
    type=LMSpecType(),
    multiple=True,
    required=True,
    help="A component [NAME=]KIND:PATH (repeat for each; same units, word models).",
)
@click.option("--text", "text_path", type=EXISTING_FILE, required=True, help="Dev text.")
@text_format_option
@lm_case_option()
@click.option(
    "--with-oov",
    is_flag=True,
    help="Fit on every token; by default tokens whose word some component does not know are "
    "left out (SRILM's ppl output leaves OOVs out).",
)
@out_option("Mixture file to write (JSON), usable as --lm mix:OUT.", required=True)
@device_option(None, "Device of torch models.")
@handle_errors
def mix_weights(
    lm_specs: tuple[LMSpec, ...],
    text_path: Path,
    text_format: str,
    lm_case: str,
    with_oov: bool,
    out_path: Path,
    device: str | None,
) -> None:
    """Linear-interpolation weights of LMs by EM on dev text (SRILM's compute-best-mix).

    p(w|h) = sum_i l_i p_i(w|h) per token; the weights maximise the dev likelihood. The
    written file is one model for ppl, score, tune and rescore: --lm NAME=mix:OUT.

    \b
    Example:
      rescorer mix-weights --lm 3gram=kenlm:3gram.bin --lm fnlm=fnlm:exp/fnlm \\
          --text dev.txt --out mix.json
      rescorer ppl --lm mix:mix.json --text test.txt
    """
    if len(lm_specs) < 2:
        raise click.UsageError("give at least two --lm components to mix")
    names = [spec.name for spec in lm_specs]
    twice = next((name for name in names if names.count(name) > 1), None)
    if twice is not None:  # the mixture file and the report name the components by it
        raise InputFailure(
            f"--lm: two components named {twice!r}; expected a NAME of its own for each "
            "(--lm NAME=KIND:PATH)"
        )
    sentences = list(read_text_sentences(text_path, text_format).values())
    options = {} if device is None else {"device": device}
    columns, keep = [], None
    for spec in lm_specs:
        lm: LanguageModel = load_lm(spec, case=lm_case, **options)
        logps = lm.token_logprobs(sentences)
        flags = np.concatenate([np.append(f, False) for f in lm.oov_flags(sentences)])
        columns.append(np.concatenate(logps))
        if len(columns[-1]) != len(columns[0]):
            raise click.UsageError(
                f"{spec.name} gives {len(columns[-1])} tokens, {lm_specs[0].name} "
                f"{len(columns[0])}: only models with the same units can be mixed"
            )
        keep = ~flags if keep is None else keep & ~flags
    assert keep is not None
    table = np.stack(columns, axis=1)
    if not with_oov:
        table = table[keep]
    if len(table) == 0:
        raise InputFailure(f"{text_path}: no token that every component knows")
    result = em_weights(table)
    what = "all tokens" if with_oov else "tokens every component knows"
    click.echo(f"{len(sentences)} sentences, {len(table)} {what} (incl. </s>)")
    for spec, col, w in zip(lm_specs, table.T, result.weights, strict=True):
        click.echo(f"  {spec.name:>12s} weight {w:.4f}  ppl {math.exp(-col.mean()):.2f}")
    click.echo(
        f"  {'mixture':>12s} ppl {result.perplexity:.2f} ({result.iterations} EM iterations"
        f"{'' if result.converged else ', not converged'})"
    )
    base = out_path.parent
    mix = MixtureSpec(
        tuple(relative_spec(s, base) for s in lm_specs),
        result.weights,
        {
            "text": str(text_path),
            "tokens": len(table),
            "with_oov": with_oov,
            "dev_ppl": result.perplexity,
        },
    )
    mix.save(out_path)
    click.echo(f"wrote {out_path}")
