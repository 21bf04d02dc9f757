"""Typed options from JSON: every config and checkpoint reader refuses a wrong type at load."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from rescorer.core.errors import InputError
from rescorer.core.json_input import check_json_value, json_fields


@dataclass(frozen=True)
class Inner:
    name: str
    size: int = 1


@dataclass(frozen=True)
class Options:
    path: str
    epochs: int = 3
    lr: float = 0.1
    amp: bool = False
    seed: int | None = None
    dims: tuple[int, ...] = ()
    triple: tuple[float, float, float] = (0.0, 0.0, 0.0)
    names: list[str] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)
    inner: tuple[Inner, ...] = ()


@pytest.mark.parametrize(
    ("values", "message"),
    [
        (
            {"path": "x", "epochs": "abc"},
            r"opts\.epochs: expected an integer, got a string \('abc'\)",
        ),
        ({"path": "x", "epochs": True}, r"opts\.epochs: expected an integer, got a boolean"),
        ({"path": "x", "epochs": 2.5}, r"opts\.epochs: expected an integer, got a number \(2\.5\)"),
        ({"path": "x", "lr": "0.1"}, r"opts\.lr: expected a number, got a string"),
        ({"path": "x", "lr": float("inf")}, r"opts\.lr: expected a finite number, got inf"),
        ({"path": "x", "amp": 1}, r"opts\.amp: expected a boolean, got a number"),
        ({"path": "x", "seed": "1"}, r"opts\.seed: expected an integer, got a string"),
        ({"path": "x", "dims": [1, "2"]}, r"opts\.dims\[1\]: expected an integer, got a string"),
        ({"path": "x", "dims": 3}, r"opts\.dims: expected an array, got a number"),
        ({"path": "x", "triple": [1, 2]}, r"opts\.triple: expected an array of 3 values, got 2"),
        ({"path": "x", "names": [None]}, r"opts\.names\[0\]: expected a string, got null"),
        ({"path": "x", "counts": {"a": 1.5}}, r"opts\.counts\['a'\]: expected an integer"),
        ({"path": "x", "counts": []}, r"opts\.counts: expected an object, got an array"),
        (
            {"path": "x", "inner": [3]},
            r"opts\.inner\[0\]: expected an object \(Inner\), got a number",
        ),
        ({"path": 5}, r"opts\.path: expected a string, got a number \(5\)"),
        ({}, r"opts: missing field\(s\) \['path'\]"),
        ({"path": "x", "epoch": 3}, r"unknown opts key\(s\) \['epoch'\]; expected some of"),
        ([1], r"opts: expected a JSON object, got an array"),
    ],
)
def test_wrong_types_are_refused_with_the_key_named(values: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        json_fields(Options, values, "opts")  # type: ignore[arg-type]


def test_right_types_pass_unchanged() -> None:
    values = {
        "path": "x",
        "epochs": 4,
        "lr": 1,  # an integer is a number
        "amp": True,
        "seed": None,
        "dims": [1, 2],
        "triple": [0.5, 1, 2],
        "names": ["a"],
        "counts": {"a": 1},
        "inner": [{"name": "g"}],
    }
    assert json_fields(Options, values, "opts") == values
    with pytest.raises(ValueError, match="missing field"):
        json_fields(Options, None, "opts")


def test_unions_name_every_arm() -> None:
    with pytest.raises(ValueError, match=r"v: expected a string or an integer, got an array"):
        check_json_value([1], str | int, "v")
    check_json_value(None, str | None, "v")
    check_json_value("a", str | int, "v")


def test_training_configs_are_type_checked_at_load(tmp_path: Path) -> None:
    """A mistyped value is the config file's input error at load, not a failure mid-training."""
    from rescorer.lm_models.fnlm.train import FNLMTrainConfig
    from rescorer.lm_models.lstm.train import TrainConfig

    bad = tmp_path / "c.json"
    bad.write_text(
        json.dumps({"data": {"corpus": "jsonl", "path": "x"}, "train": {"epochs": "abc"}})
    )
    with pytest.raises(
        InputError, match=r"c\.json: train\.epochs: expected an integer, got a string"
    ):
        TrainConfig.load(bad)
    data = {"corpus": "brown", "train": "brown"}
    bad.write_text(json.dumps({"data": data, "model": {"embed_dim": 1.5}}))
    with pytest.raises(InputError, match=r"c\.json: model\.embed_dim: expected an integer"):
        FNLMTrainConfig.load(bad)


def test_checkpoint_configs_are_type_checked() -> None:
    from rescorer.lm_models.lstm.model import LSTMConfig

    with pytest.raises(
        ValueError, match=r"LSTM config\.hidden_dim: expected an integer, got a string"
    ):
        LSTMConfig.from_json({"vocab_size": 10, "hidden_dim": "big"})
    with pytest.raises(ValueError, match=r"LSTM config: missing field\(s\) \['vocab_size'\]"):
        LSTMConfig.from_json({})
    with pytest.raises(ValueError, match=r"context variable\.values\[0\]: expected a string"):
        LSTMConfig.from_json(
            {
                "vocab_size": 10,
                "context_vars": [{"name": "g", "kind": "categorical", "values": [1]}],
            }
        )
