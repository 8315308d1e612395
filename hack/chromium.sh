#!/usr/bin/env bash
# Installs headless Chromium for the dashboard's browser tests where it is
# missing: Debian's chromium package (no browser download of a test tool's
# own; this machine reaches Debian's mirrors). As root it runs apt-get; as
# another user, sudo -n apt-get where that works. Otherwise it says so: the
# browser tests then skip, or fail under CI=true.
set -euo pipefail

for name in chromium chromium-browser google-chrome; do
  if command -v "$name" >/dev/null; then
    echo "chromium: $(command -v "$name") ($("$name" --version 2>/dev/null || echo 'version unknown'))"
    exit 0
  fi
done

apt=(apt-get)
if [ "$(id -u)" != 0 ]; then
  if sudo -n true 2>/dev/null; then
    apt=(sudo -n apt-get)
  else
    echo "chromium: missing, and installing it needs root (apt-get install chromium); the browser tests will not run" >&2
    exit 0
  fi
fi
export DEBIAN_FRONTEND=noninteractive
start=$SECONDS
if ! "${apt[@]}" install -y -q --no-install-recommends chromium >/tmp/kvlive-chromium-install.log 2>&1; then
  "${apt[@]}" update -q >>/tmp/kvlive-chromium-install.log 2>&1
  "${apt[@]}" install -y -q --no-install-recommends chromium >>/tmp/kvlive-chromium-install.log 2>&1 || {
    echo "chromium: apt-get install chromium failed (/tmp/kvlive-chromium-install.log):" >&2
    tail -20 /tmp/kvlive-chromium-install.log >&2
    exit 1
  }
fi
echo "chromium: installed $(chromium --version) in $((SECONDS - start))s"
