"""Run records of the context-LM recipe driver (recipes/common/context_lm.py)."""

from __future__ import annotations

import importlib.util
import json
import logging
from pathlib import Path

import pytest

from tests.paths import REPO


def load_driver():
    spec = importlib.util.spec_from_file_location(
        "context_lm_driver", REPO / "recipes" / "common" / "context_lm.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


drv = load_driver()

SPEC = {
    "title": "Toy, topic as context",
    "field": "topic",
    "seeds": [0, 1, 2],
    "train_config": {"data": {"path": "x.csv", "split": [0.8, 0.1, 0.1]}, "model": {}, "train": {}},
}


def info(mode: str, seed: int, dev: float) -> dict:
    return {
        "mode": mode,
        "seed": seed,
        "best_dev_ppl": dev,
        "best_epoch": 2,
        "epochs": 3,
        "wall_s": 10.0,
        "train_tokens_per_s": 1000.0,
        "device": "cpu",
    }


def write_exp_log(recipe: Path, mode: str, seed: int, devs: list[float]) -> None:
    last = recipe / "exp" / f"{mode}_seed{seed}" / "last"
    last.mkdir(parents=True)
    log_rows = [{"dev_ppl": d, "extra": {"adapt_ratio": 0.5}} for d in devs]
    (last / "trainer.json").write_text(json.dumps({"log": log_rows}))


def test_record_round_trips_with_its_epoch_log(tmp_path):
    write_exp_log(tmp_path, "factor", 1, [90.0, 80.0, 85.0])
    drv.save_record(tmp_path, SPEC, info("factor", 1, 80.0), {"test_ppl": 81.0, "params": 10})
    rec = drv.load_record(drv.record_path(tmp_path, "factor", 1), SPEC)
    assert rec["info"]["best_dev_ppl"] == 80.0
    assert rec["eval"]["test_ppl"] == 81.0
    assert [e["dev_ppl"] for e in rec["log"]] == [90.0, 80.0, 85.0]


def test_record_from_another_config_is_ignored(tmp_path, caplog):
    drv.save_record(tmp_path, SPEC, info("concat", 0, 70.0), {"test_ppl": 71.0, "params": 10})
    changed = json.loads(json.dumps(SPEC))
    changed["train_config"]["train"]["lr"] = 0.01
    path = drv.record_path(tmp_path, "concat", 0)
    assert drv.load_record(path, SPEC) is not None
    with caplog.at_level(logging.WARNING):
        assert drv.load_record(path, changed) is None
    assert "another train_config" in caplog.text
    assert drv.all_records(tmp_path, changed) == []


def test_a_factor_only_setting_keeps_the_other_modes_records(tmp_path):
    """adapt_weight_decay is read by the FactorCell alone: setting it leaves the other modes'
    records (and hashes) as they were and sends only the FactorCell to be trained again."""
    for mode in ("unadapted", "concat", "factor"):
        drv.save_record(tmp_path, SPEC, info(mode, 0, 70.0), {"test_ppl": 71.0, "params": 10})
    changed = json.loads(json.dumps(SPEC))
    changed["train_config"]["train"]["adapt_weight_decay"] = 0.01
    for mode in ("unadapted", "concat"):
        assert drv.config_hash(changed, mode) == drv.config_hash(SPEC, mode)
        assert drv.load_record(drv.record_path(tmp_path, mode, 0), changed) is not None
    assert drv.config_hash(changed, "factor") != drv.config_hash(SPEC, "factor")
    assert drv.load_record(drv.record_path(tmp_path, "factor", 0), changed) is None
    other = json.loads(json.dumps(changed))
    other["train_config"]["train"]["adapt_weight_decay"] = 0.1
    assert drv.config_hash(other, "factor") != drv.config_hash(changed, "factor")
    # any other setting still counts for every mode
    other["train_config"]["train"]["lr"] = 0.01
    assert drv.config_hash(other, "concat") != drv.config_hash(SPEC, "concat")


def test_broken_record_names_file_and_line(tmp_path):
    path = drv.record_path(tmp_path, "factor", 0)
    path.parent.mkdir(parents=True)
    path.write_text('{\n  "info": \n')
    with pytest.raises(ValueError, match=r"factor_seed0\.json: not a run record .*line 3"):
        drv.load_record(path, SPEC)
    path.write_text('{"config_hash": "x", "info": {}}')
    with pytest.raises(ValueError, match="expected key 'eval'"):
        drv.load_record(path, SPEC)


def test_results_table_comes_from_records_alone(tmp_path):
    """No checkpoints: the table is rebuilt from the records, complete seeds averaged, the rest
    named; a seed some mode has not run yet (2: Unadapted only) stays out of every row. It goes
    under exp/, the recipe folder untouched."""
    runs = [
        ("unadapted", 0, 100.0),
        ("unadapted", 1, 110.0),
        ("unadapted", 2, 200.0),
        ("factor", 0, 90.0),
        ("factor", 1, 90.0),
    ]
    for mode, seed, test in runs:
        ev = {"test_ppl": test, "params": 10}
        if mode == "factor":
            ev["acc_docs"] = 0.5
        drv.save_record(tmp_path, SPEC, info(mode, seed, test - 1), ev)
    rec = drv.load_record(drv.record_path(tmp_path, "factor", 0), SPEC)
    rec["inspection"] = ["", "## kept inspection lines"]
    drv.record_path(tmp_path, "factor", 0).write_text(json.dumps(rec))
    text = drv.write_results(tmp_path, SPEC, drv.all_records(tmp_path, SPEC), "cmd", 0.0)
    assert "| Unadapted | 105.00 ± 5.00 |" in text
    assert "| FactorCell | 90.00 ± 0.00 | 50.00 ± 0.00 |" in text
    assert "- Seeds: 0, 1 (conf/recipe.json lists 0, 1, 2; not yet run: 2)" in text
    assert "200.00" not in text
    assert "## kept inspection lines" in text
    assert (tmp_path / "exp" / "RESULTS.md").read_text() == text
    assert (tmp_path / "exp" / "training_curves.png").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["exp"]


def test_unpublished_runs_join_the_committed_records_and_publish_copies_them(tmp_path):
    """Committed records (runs/) and this checkout's (exp/runs/, in place of a committed one of
    the same run) make one table; --publish copies the new records into runs/ and writes the
    page (and README.md's table) in the recipe folder, every committed run still in it."""
    for mode, seed, test in [("unadapted", 0, 100.0), ("factor", 0, 90.0)]:
        drv.save_record(tmp_path, SPEC, info(mode, seed, test), {"test_ppl": test, "params": 10})
    drv.publish_records(tmp_path, SPEC)  # published earlier: committed
    for mode in ("unadapted", "factor"):
        drv.record_path(tmp_path, mode, 0).unlink()
    assert sorted(p.name for p in (tmp_path / "runs").iterdir()) == [
        "factor_seed0.json",
        "unadapted_seed0.json",
    ]
    drv.save_record(tmp_path, SPEC, info("factor", 1, 80.0), {"test_ppl": 80.0, "params": 10})
    drv.save_record(tmp_path, SPEC, info("unadapted", 1, 120.0), {"test_ppl": 120.0, "params": 10})
    drv.save_record(tmp_path, SPEC, info("factor", 0, 70.0), {"test_ppl": 70.0, "params": 10})
    records = drv.all_records(tmp_path, SPEC)
    assert [(r["info"]["mode"], r["info"]["seed"], r["eval"]["test_ppl"]) for r in records] == [
        ("unadapted", 0, 100.0),
        ("unadapted", 1, 120.0),
        ("factor", 0, 70.0),  # this checkout's, in place of the committed 90.0
        ("factor", 1, 80.0),
    ]
    assert drv.find_record(tmp_path, SPEC, "unadapted", 0)["eval"]["test_ppl"] == 100.0
    assert drv.find_record(tmp_path, SPEC, "factor", 0)["eval"]["test_ppl"] == 70.0
    assert drv.find_record(tmp_path, SPEC, "factor", 2) is None
    readme = (
        '# Toy\n\n<!-- results table: "| model | test perplexity" from RESULTS.md -->\n'
        "<!-- end of results table -->\n"
    )
    (tmp_path / "README.md").write_text(readme)
    drv.write_results(tmp_path, SPEC, records, "cmd", 0.0)
    assert (tmp_path / "README.md").read_text() == readme  # unpublished: untouched
    assert not (tmp_path / "RESULTS.md").exists()
    text = drv.write_results(tmp_path, SPEC, records, "cmd", 0.0, published=True)
    assert (tmp_path / "RESULTS.md").read_text() == text
    assert (tmp_path / "training_curves.png").exists()
    assert "| Unadapted | 110.00 ± 10.00 |" in (tmp_path / "README.md").read_text()
    assert "one record per run in `runs/`." in text
    drv.publish_records(tmp_path, SPEC)
    assert len(list((tmp_path / "runs").iterdir())) == 4
    assert drv.load_record(drv.record_path(tmp_path, "factor", 0, True), SPEC)["eval"] == {
        "test_ppl": 70.0,
        "params": 10,
    }


def test_a_run_folder_from_another_config_is_set_aside_not_reused(tmp_path, caplog):
    """A finished run (done.json, eval.json) left by another train_config must not become this
    config's result: its folder is moved aside and a fresh one stamped."""
    out = drv.run_dir(tmp_path, SPEC, "concat", 1)
    (out / "done.json").write_text(json.dumps(info("concat", 1, 70.0)))
    assert drv.run_dir(tmp_path, SPEC, "concat", 1) == out  # same config: kept
    assert (out / "done.json").exists()
    changed = json.loads(json.dumps(SPEC))
    changed["train_config"]["model"]["context_activation"] = "none"
    with caplog.at_level(logging.WARNING):
        again = drv.run_dir(tmp_path, changed, "concat", 1)
    assert again == out and not (out / "done.json").exists()
    assert (out / "config_hash").read_text().strip() == drv.config_hash(changed, "concat")
    aside = out.with_name(f"{out.name}.{drv.config_hash(SPEC, 'concat')}")
    assert (aside / "done.json").exists() and "set aside" in caplog.text
    legacy = tmp_path / "exp" / "factor_seed0"  # a folder from before the stamps
    (legacy / "best").mkdir(parents=True)
    drv.run_dir(tmp_path, SPEC, "factor", 0)
    assert (tmp_path / "exp" / "factor_seed0.unstamped" / "best").is_dir()
