#!/usr/bin/env bash
# Provision a headless browser for the viewer's browser tests (tests/view/): Debian's
# chromium, driven by Playwright's Python package through executable_path (no browser
# download happens: Playwright's own `install` needs hosts this machine cannot reach).
#
# Idempotent: when chromium already answers `--version`, it does nothing and takes well
# under a second. Installing takes about a minute the first time.
set -euo pipefail

PROG=provision-browser
CHROMIUM=${OSMO_RUN_CHROMIUM:-/usr/bin/chromium}
LOG_DIR=${OSMO_RUN_BROWSER_STATE:-/var/lib/osmo-run-browser}

usage() {
  cat <<EOF
Usage: scripts/provision-browser.sh [-h|--help]

Make headless Chromium usable for the viewer's browser tests, idempotently:
  apt-get install chromium fonts-dejavu-core (only if $CHROMIUM does not run)

The tests find it at \$OSMO_RUN_CHROMIUM (default /usr/bin/chromium); with
OSMO_RUN_REQUIRE_BROWSER=1 (CI) they fail when it is missing instead of skipping.
EOF
}

die() { echo "$PROG: $*" >&2; exit 1; }

case ${1:-} in
  "") ;;
  -h|--help) usage; exit 0 ;;
  *) echo "$PROG: unknown option: $1 (see --help)" >&2; exit 2 ;;
esac

chromium_ok() { "$CHROMIUM" --version >/dev/null 2>&1; }

if chromium_ok; then
  echo "$PROG: $("$CHROMIUM" --version 2>/dev/null) already installed"
  exit 0
fi

[ "$(id -u)" -eq 0 ] || die "$CHROMIUM is missing and not root. Fix: sudo $0"

mkdir -p "$LOG_DIR"
# Two concurrent provisioners would fight over dpkg's lock; the second one waits.
exec 9>"$LOG_DIR/provision.lock"
flock -w 900 9 || die "timed out waiting for another provision-browser run"
if chromium_ok; then exit 0; fi

log=$LOG_DIR/apt.log
# fonts-dejavu-core: without any font, pages render as boxes in screenshots.
{ apt-get update -q \
  && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
       chromium fonts-dejavu-core
} >"$log" 2>&1 || die "apt-get install chromium failed; see $log"
chromium_ok || die "$CHROMIUM still does not run after installing chromium; see $log"
echo "$PROG: installed $("$CHROMIUM" --version 2>/dev/null)"
