#!/usr/bin/env bash
# Set up the keyboard web demo and its browser test: the npm packages pinned by
# package-lock.json (onnxruntime-web, playwright-core) and, when /usr/bin/chromium is missing,
# Debian's chromium (apt-get; root or sudo). Playwright's own browser download is not used: the
# driver launches /usr/bin/chromium (CHROMIUM to name another).
#
#   bash examples/keyboard_web/setup.sh
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
CHROMIUM=${CHROMIUM:-/usr/bin/chromium}

if [ ! -x "$CHROMIUM" ]; then
  sudo=()
  [ "$(id -u)" != 0 ] && sudo=(sudo)
  echo "installing Debian's chromium (apt-get)" >&2
  "${sudo[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq --no-install-recommends \
    chromium fonts-liberation >/dev/null
fi
command -v npm >/dev/null || { echo "setup.sh: npm not found (install Node.js 18 or later)" >&2; exit 1; }
cd "$HERE"
# npm ci (a clean install of package-lock.json) unless this lock file was installed already
stamp=node_modules/.installed-lock.sha256
if [ "$(cat "$stamp" 2>/dev/null)" != "$(sha256sum < package-lock.json)" ]; then
  npm ci --no-audit --no-fund --loglevel=error
  sha256sum < package-lock.json > "$stamp"
fi
"$CHROMIUM" --version 2>/dev/null
node -e 'console.log("onnxruntime-web", require("./node_modules/onnxruntime-web/package.json").version, "playwright-core", require("./node_modules/playwright-core/package.json").version)'
