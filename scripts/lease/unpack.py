"""GPU lease kit, this side: the parts that came back from the device made into checkpoints.

    python scripts/lease/unpack.py DIR [DIR ...] --dest recipes/librispeech_nbest/exp/lease

Every NAME.sha256 found in the DIRs (the device tool's files_at folders, or copies of them)
names a packed run: its NAME.tar.partNN files are gathered from all DIRs, joined, checked
against the SHA-256 and unpacked into DEST/NAME: best/ (weights back in float32, as
model.safetensors; loadable as torch:DEST/NAME/best), last/trainer.json (the epoch log),
split.json and train.log. A run whose parts are not all there yet is named and skipped.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import sys
import tarfile
from pathlib import Path

from safetensors.torch import load, save_file


def gather(dirs: list[Path]) -> dict[str, dict[str, Path]]:
    """NAME -> {file name -> path} over the dirs (the later dir wins for a repeated file)."""
    found: dict[str, dict[str, Path]] = {}
    for d in dirs:
        for f in sorted(d.rglob("*")):
            if f.is_file() and (f.suffix == ".sha256" or ".tar.part" in f.name):
                name = f.name.split(".tar.part")[0] if ".tar.part" in f.name else f.stem
                found.setdefault(name, {})[f.name] = f
    return found


def unpack(name: str, files: dict[str, Path], dest: Path) -> str:
    sha_file = files.get(f"{name}.sha256")
    if sha_file is None:
        return f"{name}: no {name}.sha256 yet (its last call has not come back)"
    digest, n_parts, size = sha_file.read_text().split()
    names = [f"{name}.tar.part{i:02d}" for i in range(int(n_parts))]
    missing = [p for p in names if p not in files]
    if missing:
        return f"{name}: waiting for {len(missing)} of {n_parts} parts ({', '.join(missing)})"
    blob = b"".join(files[p].read_bytes() for p in names)
    if len(blob) != int(size) or hashlib.sha256(blob).hexdigest() != digest:
        raise SystemExit(f"{name}: the joined parts do not match {sha_file} (a damaged copy)")
    out = dest / name
    with tarfile.open(fileobj=io.BytesIO(blob)) as tar:
        for member in tar.getmembers():
            rel = Path(member.name)
            if not member.isfile() or rel.is_absolute() or ".." in rel.parts:
                raise SystemExit(f"{name}: unexpected tar member {member.name!r}")
            data = tar.extractfile(member).read()  # type: ignore[union-attr]
            target = dest / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            if target.name == "model.fp16.safetensors":
                tensors = {
                    k: (v.float() if v.is_floating_point() else v) for k, v in load(data).items()
                }
                tmp = target.with_name(".model.safetensors.tmp")
                save_file(tensors, str(tmp))
                tmp.replace(target.with_name("model.safetensors"))
            else:
                tmp = target.with_name(f".{target.name}.tmp")
                tmp.write_bytes(data)
                tmp.replace(target)
    return f"{name}: unpacked into {out} ({int(size) / 2**20:.1f} MiB packed)"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dirs", type=Path, nargs="+")
    ap.add_argument("--dest", type=Path, required=True)
    args = ap.parse_args()
    found = gather(args.dirs)
    if not found:
        print(f"no packed runs under {', '.join(map(str, args.dirs))}", file=sys.stderr)
        return 2
    for name, files in sorted(found.items()):
        print(unpack(name, files, args.dest))
    return 0


if __name__ == "__main__":
    sys.exit(main())
