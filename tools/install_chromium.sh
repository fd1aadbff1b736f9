#!/bin/sh
# Idempotent: install Debian's headless Chromium and its WebDriver for the console's browser tests.
# `make test` runs this; it does nothing when both binaries are already on PATH.
set -e
if command -v chromium >/dev/null 2>&1 && command -v chromedriver >/dev/null 2>&1; then
  exit 0
fi
if [ "$(id -u)" != "0" ] && ! command -v sudo >/dev/null 2>&1; then
  echo "tools/install_chromium.sh: need root (or sudo) to apt-get install chromium chromium-driver" >&2
  exit 2
fi
SUDO=""; [ "$(id -u)" = "0" ] || SUDO=sudo
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends chromium chromium-driver >/dev/null
command -v chromedriver >/dev/null || { echo "tools/install_chromium.sh: chromedriver missing after install" >&2; exit 2; }
