#!/usr/bin/env bash
# Stop the dockerd that scripts/provision-docker.sh started, and only that one:
# an engine that was already running when provisioning ran has no pidfile in
# our state dir and is left alone. The data root (images) is kept, so the next
# provision run is fast.
set -euo pipefail

PROG=stop-docker
STATE=${OSMO_RUN_DOCKER_STATE:-/var/lib/osmo-run-docker}
STATE=${STATE%/}
PIDFILE=$STATE/dockerd.pid

case ${1:-} in
  -h|--help)
    echo "Usage: scripts/stop-docker.sh   (stops the dockerd recorded in \$OSMO_RUN_DOCKER_STATE/dockerd.pid, default $PIDFILE)"
    exit 0 ;;
  "") ;;
  *) echo "$PROG: unknown option: $1 (see --help)" >&2; exit 2 ;;
esac

pid=$(cat "$PIDFILE" 2>/dev/null || true)
if [ -z "$pid" ]; then
  echo "$PROG: no dockerd started by provision-docker.sh ($PIDFILE absent); nothing to stop"
  exit 0
fi
# Pids are reused: only signal a live dockerd that runs on our data root.
if [ "$(cat "/proc/$pid/comm" 2>/dev/null)" != dockerd ] \
   || ! tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -qF -- "--data-root $STATE/data "; then
  rm -f "$PIDFILE"
  echo "$PROG: stale $PIDFILE (pid $pid is not our dockerd); removed it"
  exit 0
fi
[ "$(id -u)" -eq 0 ] || { echo "$PROG: must be root to stop dockerd pid $pid" >&2; exit 1; }

# Its managed containerd is a child; remember it in case we must SIGKILL
# dockerd, which would orphan containerd instead of shutting it down.
children=$(pgrep -P "$pid" 2>/dev/null || true)

kill -TERM "$pid" 2>/dev/null || true
# dockerd gives running containers their stop timeout (10 s by default) plus
# its own shutdown; 30 s covers that.
for _ in $(seq 1 100); do
  kill -0 "$pid" 2>/dev/null || break
  sleep 0.3
done
how=stopped
if kill -0 "$pid" 2>/dev/null; then
  kill -9 "$pid" 2>/dev/null || true
  how="killed (SIGKILL after 30 s)"
  for c in $children; do
    if [ "$(cat "/proc/$c/comm" 2>/dev/null)" = containerd ]; then kill -9 "$c" 2>/dev/null || true; fi
  done
fi
for _ in $(seq 1 20); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
if kill -0 "$pid" 2>/dev/null; then
  echo "$PROG: dockerd pid $pid still alive after SIGKILL; see $STATE/dockerd.log" >&2
  exit 1
fi
rm -f "$PIDFILE"
echo "$PROG: dockerd pid $pid $how"
