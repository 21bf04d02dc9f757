"""Process settings of the heavy commands (rescorer.core.runtime): threads and the allocator."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

from rescorer.cli.main import main
from rescorer.core import runtime
from rescorer.core.device import resolve_device
from rescorer.lm_models.checkpoint import save_checkpoint
from rescorer.lm_models.lstm.model import ContextLSTM, LSTMConfig


@pytest.fixture(autouse=True)
def _restore() -> Iterator[None]:
    """Each test starts unconfigured and leaves torch's thread count as it found it."""
    threads = torch.get_num_threads()
    runtime.configure(runtime.RuntimeOptions())
    yield
    runtime.configure(runtime.RuntimeOptions())
    torch.set_num_threads(threads)


def test_parse_threads() -> None:
    assert runtime.parse_threads("3") == 3
    assert runtime.parse_threads(2) == 2
    assert runtime.parse_threads("default") is None
    assert runtime.parse_threads(None) is None
    assert 1 <= runtime.parse_threads("auto") <= runtime.usable_cores()  # type: ignore[operator]
    for bad in ("0", "-1", "two", "1.5"):
        with pytest.raises(ValueError, match="expected auto, default or an integer >= 1"):
            runtime.parse_threads(bad)


def test_auto_takes_omp_num_threads_when_set(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two trainings started together each saw both cores of an idle 2-core machine and took
    2 threads (4 on 2 cores: epochs 8x longer than alone), though OMP_NUM_THREADS=1 was set
    for them: ``auto`` takes the standard variable when it holds a thread count."""
    monkeypatch.setattr(runtime, "usable_cores", lambda: 8)
    monkeypatch.setattr(runtime.os, "getloadavg", lambda: (0.0, 0.0, 0.0))
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    assert runtime.parse_threads("auto") == 1
    monkeypatch.setenv("OMP_NUM_THREADS", "3,2")  # nested levels: the outer one
    assert runtime.parse_threads("auto") == 3
    for unusable in ("", "zero", "0"):  # not a count: the idle cores, as without it
        monkeypatch.setenv("OMP_NUM_THREADS", unusable)
        assert runtime.parse_threads("auto") == 8
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    assert runtime.parse_threads("4") == 4  # a count given wins


def test_idle_cores_subtracts_the_load(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(runtime, "usable_cores", lambda: 8)
    monkeypatch.setattr(runtime.os, "getloadavg", lambda: (2.6, 0.0, 0.0))
    assert runtime.idle_cores() == 5
    monkeypatch.setattr(runtime.os, "getloadavg", lambda: (11.0, 0.0, 0.0))
    assert runtime.idle_cores() == 1  # a busy machine still gets one thread


def test_settings_apply_when_a_device_is_resolved_not_before() -> None:
    other = 1 if torch.get_num_threads() != 1 else 2
    runtime.configure(runtime.RuntimeOptions(threads=other))
    assert torch.get_num_threads() != other  # recorded only
    assert resolve_device("cpu").type == "cpu"
    assert torch.get_num_threads() == other
    assert runtime.threads() == other


def test_unconfigured_leaves_torch_alone() -> None:
    before = torch.get_num_threads()
    resolve_device("cpu")
    assert torch.get_num_threads() == before
    assert runtime.threads() is None


def test_keep_freed_memory_reaches_glibc() -> None:
    assert runtime.keep_freed_memory() is True  # Linux with glibc, as CI runs


def test_cli_threads_option_sets_the_scoring_threads(tmp_path: Path) -> None:
    vocab = ["<unk>", "<s>", "</s>", "a", "b"]
    torch.manual_seed(0)
    ckpt = save_checkpoint(
        tmp_path / "lm", ContextLSTM(LSTMConfig(vocab_size=5, embed_dim=4, hidden_dim=4)), vocab
    )
    text = tmp_path / "text.txt"
    text.write_text("a b\nb a a\n", encoding="utf-8")
    other = 1 if torch.get_num_threads() != 1 else 2
    result = CliRunner().invoke(
        main, ["--threads", str(other), "ppl", "--lm", f"torch:{ckpt}", "--text", str(text)]
    )
    assert result.exit_code == 0, result.output
    assert torch.get_num_threads() == other
    assert runtime.current() == runtime.RuntimeOptions(
        threads=other, keep_freed_memory=True, threads_given=True
    )
    bad = CliRunner().invoke(main, ["--threads", "none", "wer", "--help"])
    assert bad.exit_code == 2 and "--threads" in bad.output


def test_cli_records_whether_the_threads_were_chosen(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(runtime.THREADS_ENV, raising=False)
    assert CliRunner().invoke(main, ["wer", "--help"]).exit_code == 0
    assert runtime.current().threads is not None and not runtime.current().threads_given  # auto
    monkeypatch.setenv(runtime.THREADS_ENV, "1")
    assert CliRunner().invoke(main, ["wer", "--help"]).exit_code == 0
    assert runtime.current().threads == 1 and runtime.current().threads_given


@pytest.mark.parametrize(
    ("options", "want"),
    [
        (runtime.RuntimeOptions(), 1),  # nothing configured: the work's default
        (runtime.RuntimeOptions(threads=2), 1),  # the CLI's auto, not chosen: the default
        (runtime.RuntimeOptions(threads=2, threads_given=True), 2),  # --threads 2
        (runtime.RuntimeOptions(threads=None, threads_given=True), 3),  # --threads default
    ],
)
def test_torch_threads_takes_the_chosen_count_else_the_works_default(
    options: runtime.RuntimeOptions, want: int
) -> None:
    torch.set_num_threads(3)
    runtime.configure(options)
    with runtime.torch_threads(1) as count:
        assert count == want == torch.get_num_threads()
    # put back: torch's count, or the recorded one that apply_to_torch set
    assert torch.get_num_threads() == (options.threads or 3)


def test_cli_allocator_can_be_turned_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(runtime.ALLOCATOR_ENV, "system")
    result = CliRunner().invoke(main, ["--threads", "default", "wer", "--help"])
    assert result.exit_code == 0
    assert runtime.current() == runtime.RuntimeOptions(
        threads=None, keep_freed_memory=False, threads_given=True
    )


def test_onnx_sessions_take_the_configured_threads(tmp_path: Path) -> None:
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper

    from rescorer.export.runtime import create_session

    graph = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])],
    )
    path = tmp_path / "id.onnx"
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    onnx.save(model, path)
    runtime.configure(runtime.RuntimeOptions(threads=1))
    session, _ = create_session(path, "cpu")
    assert session.get_session_options().intra_op_num_threads == 1
    session, _ = create_session(path, "cpu", threads=2)  # an explicit count wins
    assert session.get_session_options().intra_op_num_threads == 2
