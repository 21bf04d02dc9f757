"""rescorer.lm_models.curves: the training-curve PNG of every recipe."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from rescorer.lm_models.curves import plot_dev_curves


def _png_size(path: Path) -> tuple[int, int]:
    head = path.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", head[16:24])


def test_one_panel_per_entry_and_a_style_per_run(tmp_path: Path) -> None:
    seen: list[str] = []

    def style(name: str) -> dict[str, str]:
        seen.append(name)
        return {"linestyle": "--"}

    one = plot_dev_curves({"a": {"x": [3.0, 2.0, 2.5]}}, tmp_path / "one.png", style_of=style)
    three = plot_dev_curves(
        {"a": {"x": [3.0, 2.0]}, "b": {"y": [5.0, 4.0], "empty": []}, "c": {}},
        tmp_path / "three.png",
        style_of=style,
        log_y=True,
    )
    assert one == tmp_path / "one.png" and three.exists()
    w1, h1 = _png_size(one)
    w3, h3 = _png_size(three)
    assert (w1, h1) == (840, 540)  # 7 x 4.5 inches at 120 dpi
    assert (w3, h3) == (1656, 540)  # three panels of 4.6 inches
    assert seen == ["x", "x", "y"]  # runs without values are left out
    assert not list(tmp_path.glob(".*.tmp.png"))  # written through a temporary file


def test_no_panel_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="at least one panel"):
        plot_dev_curves({}, tmp_path / "x.png")
