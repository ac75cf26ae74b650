#!/usr/bin/env bash
# Start a single-node SLURM on this machine (Debian 12, as root, no systemd), as described in
# shared/reference/slurm-local.md: munge + slurmctld + slurmd -N localhost, all state under one temp dir.
#
#   eval "$(.ci/slurm_up.sh)"     # installs if needed, starts the daemons, exports SLURM_CONF
#   sinfo                          # debug* up idle localhost
#   .ci/slurm_down.sh              # stops them again (by their pid files)
#
# Stdout carries only the `export SLURM_CONF=...` line; progress goes to stderr.
# Idempotent: when a controller already answers `sinfo`, nothing is installed or started.
# CRUCIBLE_SLURM_DIR picks the state dir (default: $TMPDIR/crucible-slurm).
set -euo pipefail

SLURM_DIR="${CRUCIBLE_SLURM_DIR:-${TMPDIR:-/tmp}/crucible-slurm}"
CONF="$SLURM_DIR/slurm.conf"

say() { echo "slurm_up: $*" >&2; }
source "$(dirname "$0")/slurm_conf.sh"

controller_answers() {  # $1: the slurm.conf to ask with
    command -v sinfo >/dev/null && SLURM_CONF="$1" timeout 20 sinfo -h >/dev/null 2>&1
}

announce() {
    say "SLURM_CONF=$1"
    echo "export SLURM_CONF=$1"
}

if [[ -n "${SLURM_CONF:-}" ]] && controller_answers "$SLURM_CONF"; then
    say "a controller already answers; nothing to do"
    announce "$SLURM_CONF"
    exit 0
fi
if [[ -f "$CONF" ]] && controller_answers "$CONF"; then
    say "a controller already answers; nothing to do"
    announce "$CONF"
    exit 0
fi

if [[ $EUID -ne 0 ]]; then
    say "must run as root (it installs packages and starts the daemons as root)"
    exit 1
fi

if ! command -v slurmctld >/dev/null || ! command -v munged >/dev/null; then
    say "installing slurm-wlm and munge"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >/dev/null
    apt-get install -y -qq --no-install-recommends slurm-wlm munge >/dev/null
fi

mkdir -p "$SLURM_DIR"/{state,spool,log}

# munge: one key shared by all daemons of the node; the package usually creates it.
if [[ ! -s /etc/munge/munge.key ]]; then
    say "creating /etc/munge/munge.key"
    mungekey --create --keyfile=/etc/munge/munge.key
    chown munge:munge /etc/munge/munge.key
    chmod 0400 /etc/munge/munge.key
fi
mkdir -p /run/munge && chown munge:munge /run/munge
if ! munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then
    say "starting munged"
    runuser -u munge -- /usr/sbin/munged
    # we started it, so slurm_down.sh may stop it
    cp /run/munge/munged.pid "$SLURM_DIR/munged.pid"
fi

# The node as slurmd sees it; RealMemory leaves headroom for the OS (slurmd drains a node that
# claims more memory than it has).
cpus=$(nproc)
mem_mb=$(( $(awk '/^MemTotal:/ {print $2}' /proc/meminfo) / 1024 ))
if [[ -r /sys/fs/cgroup/memory.max ]] && [[ "$(cat /sys/fs/cgroup/memory.max)" =~ ^[0-9]+$ ]]; then
    cgroup_mb=$(( $(cat /sys/fs/cgroup/memory.max) / 1024 / 1024 ))
    (( cgroup_mb < mem_mb )) && mem_mb=$cgroup_mb
fi
real_memory=$(( mem_mb * 85 / 100 ))

{
slurm_conf_common local "$SLURM_DIR" "" 6817 6818
cat <<EOF
NodeName=localhost CPUs=$cpus Boards=1 SocketsPerBoard=1 CoresPerSocket=$cpus ThreadsPerCore=1 RealMemory=$real_memory State=UNKNOWN
PartitionName=debug Nodes=localhost Default=YES MaxTime=INFINITE State=UP
EOF
} >"$CONF"
export SLURM_CONF="$CONF"

say "starting slurmctld and slurmd (CPUs=$cpus RealMemory=${real_memory}MB, logs in $SLURM_DIR/log)"
/usr/sbin/slurmctld
/usr/sbin/slurmd -N localhost  # the host name is not "localhost"

# Ready when the node is idle: a job submitted before that waits for the node to register.
for _ in $(seq 60); do
    state=$(sinfo -h -n localhost -o %T 2>/dev/null || true)
    [[ "$state" == idle* ]] && break
    sleep 0.5
done
if [[ "$state" != idle* ]]; then
    say "the node did not become idle (state: '${state:-no answer}'); see $SLURM_DIR/log"
    exit 1
fi
say "node localhost is idle"
announce "$CONF"
