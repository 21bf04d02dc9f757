"""GPU lease kit, device side: one training run's best checkpoint packed for the trip back.

    python scripts/lease/pack.py .lease/exp/NAME NAME .lease/packed [--part-mib 15]

Writes NAME.tar.partNN files of at most --part-mib MiB (what the device tool brings back per
file) and NAME.sha256 (the whole tar's SHA-256). The tar holds best/ with its weights in float16
(model.fp16.safetensors: half the bytes; unpack.py turns them back into float32), the run's
per-epoch log (last/trainer.json), split.json and the training log. No torch model code runs:
tensors are read and written by safetensors alone.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import tarfile
from pathlib import Path

from safetensors.torch import load_file, save

MIB = 1024 * 1024


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run", type=Path)
    ap.add_argument("name")
    ap.add_argument("out", type=Path)
    ap.add_argument("--part-mib", type=float, default=15.0)
    args = ap.parse_args()
    best = args.run / "best"
    if not (best / "model.safetensors").is_file():
        raise SystemExit(f"{best}: no checkpoint (did the run finish an epoch?)")
    weights = load_file(str(best / "model.safetensors"))
    half = {k: (v.half() if v.is_floating_point() else v) for k, v in weights.items()}
    members: dict[str, bytes] = {"best/model.fp16.safetensors": save(half)}
    for f in sorted(best.iterdir()):
        if f.is_file() and f.name != "model.safetensors":
            members[f"best/{f.name}"] = f.read_bytes()
    for extra, arc in [
        (args.run / "last" / "trainer.json", "last/trainer.json"),
        (args.run / "split.json", "split.json"),
        (args.run.with_suffix(".log"), "train.log"),
    ]:
        if extra.is_file():
            members[arc] = extra.read_bytes()
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for arc, data in members.items():
            info = tarfile.TarInfo(f"{args.name}/{arc}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    blob = buf.getvalue()
    args.out.mkdir(parents=True, exist_ok=True)
    step = max(1, int(args.part_mib * MIB))
    parts = [blob[i : i + step] for i in range(0, len(blob), step)]
    for i, part in enumerate(parts):
        (args.out / f"{args.name}.tar.part{i:02d}").write_bytes(part)
    digest = hashlib.sha256(blob).hexdigest()
    (args.out / f"{args.name}.sha256").write_text(f"{digest} {len(parts)} {len(blob)}\n")
    params = sum(v.numel() for v in weights.values())
    print(
        f"packed {args.name}: {params:,} parameters, {len(blob) / MIB:.1f} MiB in "
        f"{len(parts)} part(s), sha256 {digest[:12]}"
    )


if __name__ == "__main__":
    main()
