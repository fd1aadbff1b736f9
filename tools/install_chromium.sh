#!/bin/sh
# Idempotent: install Debian's headless Chromium and its WebDriver for the console's browser tests.
# `make test` runs this; it does nothing when both binaries are already on PATH.
set -e
if command -v chromium >/dev/null 2>&1 && command -v chromedriver >/dev/null 2>&1; then
  exit 0
fi
"$(dirname "$0")/apt-install.sh" chromium chromium-driver
command -v chromedriver >/dev/null || { echo "tools/install_chromium.sh: chromedriver missing after install" >&2; exit 2; }
