#!/bin/sh
# Idempotent: fetch the console's charting library (uPlot) from the npm registry into a
# gitignored folder the console serves, so the page needs no CDN and works offline.
set -e
VERSION=1.6.32
DEST=streams/console/static/vendor
if [ -f "$DEST/uPlot.iife.min.js" ] && [ -f "$DEST/uPlot.min.css" ] && grep -q "$VERSION" "$DEST/VERSION" 2>/dev/null; then
  exit 0
fi
command -v npm >/dev/null 2>&1 || { echo "tools/install_web_assets.sh: npm not found (needed once to fetch uPlot $VERSION)" >&2; exit 2; }
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
(cd "$TMP" && npm pack --silent "uplot@$VERSION" >/dev/null)
tar -xzf "$TMP"/uplot-"$VERSION".tgz -C "$TMP"
mkdir -p "$DEST"
cp "$TMP/package/dist/uPlot.iife.min.js" "$TMP/package/dist/uPlot.min.css" "$TMP/package/LICENSE" "$DEST/"
echo "uplot $VERSION" > "$DEST/VERSION"
