#!/usr/bin/env bash
# Make sure a Chromium is available for the browser tests. Playwright's own browser
# download cannot work offline, so the tests drive a system Chromium. Order:
# $PLAYBOOK_CHROMIUM if set, else /usr/bin/chromium, else install Debian's package when root.
set -euo pipefail
if [ -n "${PLAYBOOK_CHROMIUM:-}" ]; then
  [ -x "$PLAYBOOK_CHROMIUM" ] && exit 0
  echo "PLAYBOOK_CHROMIUM=$PLAYBOOK_CHROMIUM is not an executable file" >&2; exit 1
fi
for candidate in /usr/bin/chromium /usr/bin/chromium-browser; do
  [ -x "$candidate" ] && exit 0
done
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  echo "Installing Debian's chromium for the browser tests..."
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
  exit 0
fi
cat >&2 <<'MSG'
No Chromium found for the browser tests, and this user cannot install one.
Install Debian's package (sudo apt-get install chromium) or point the tests at any
Chromium/Chrome binary:  PLAYBOOK_CHROMIUM=/path/to/chromium make test
MSG
exit 1
