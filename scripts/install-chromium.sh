#!/bin/sh
# Installs Debian's Chromium for the browser tests (test/browser). Never downloads a browser of its own:
# playwright-core drives /usr/bin/chromium from the distribution. Idempotent: does nothing when present.
set -eu
# Only the tests need a browser: `npm start` on a clean machine does not wait for an apt install.
if [ "${npm_lifecycle_event:-}" = "prestart" ] || [ -x /usr/bin/chromium ]; then
  exit 0
fi
if [ "$(id -u)" != "0" ]; then
  echo "install-chromium: /usr/bin/chromium is missing. Install it with 'sudo apt-get install -y chromium'" >&2
  echo "install-chromium: (browser tests under test/browser are skipped until it is installed)" >&2
  exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
  echo "install-chromium: /usr/bin/chromium is missing and apt-get is not available; install Chromium by hand." >&2
  exit 0
fi
echo "install-chromium: installing Debian chromium (first run only)" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends chromium >/dev/null
echo "install-chromium: $(/usr/bin/chromium --version 2>/dev/null || echo 'installed')" >&2
