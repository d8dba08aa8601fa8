#!/usr/bin/env bash
# Set up the browser the `browser` tests drive (tests/test_browser.py): Debian's headless-capable
# Chromium and its WebDriver (packages chromium and chromium-driver); Selenium comes with the
# dev extras of .venv.  Idempotent; `make browser` (and so `make test`) calls it.
set -euo pipefail

if command -v chromium >/dev/null 2>&1 && command -v chromedriver >/dev/null 2>&1; then
  echo "setup-browser: $(chromium --version 2>/dev/null | head -1) and its driver are installed"
  exit 0
fi
source "$(dirname "$0")/apt-root.sh"
apt_root setup-browser Chromium "chromium chromium-driver" \
  "install Chromium and its chromedriver so that 'chromium' and 'chromedriver' are on PATH" \
  || exit 0
echo "setup-browser: installing chromium and chromium-driver with apt-get (about a minute)"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends \
  chromium chromium-driver fonts-dejavu-core >/dev/null
echo "setup-browser: $(chromium --version 2>/dev/null | head -1) installed"
