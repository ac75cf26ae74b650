#!/usr/bin/env bash
# A second SLURM cluster on this one machine with two nodes, n1 and n2: two slurmd daemons on
# localhost (slurmd -N), so that a job gets a real two-node allocation (SLURM_NNODES=2, one task per
# node, SLURM_NODEID 0 and 1) without a second machine. For tests/test_slurm_two_nodes.py.
#
#   bash .ci/slurm_two_nodes.sh        # start (after .ci/slurm_up.sh: it reuses its munge); prints
#                                      #   export CRUCIBLE_SLURM_TWO_NODES=<its slurm.conf>
#   bash .ci/slurm_two_nodes.sh stop   # stop its daemons
#
# Its own ports (6917, 6921, 6922) and state dir, so the single-node cluster keeps running beside it.
# The node names do not resolve to an address: jobs set MASTER_ADDR=127.0.0.1 themselves.
set -euo pipefail

DIR="${CRUCIBLE_SLURM_TWO_NODES_DIR:-${TMPDIR:-/tmp}/crucible-slurm-two-nodes}"
CONF="$DIR/slurm.conf"
export SLURM_CONF="$CONF"

say() { echo "slurm_two_nodes: $*" >&2; }
source "$(dirname "$0")/slurm_conf.sh"

stop() {  # $1: pid file
    [[ -s "$1" ]] || return 0
    local pid
    pid=$(cat "$1")
    if kill "$pid" 2>/dev/null; then
        for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    fi
    rm -f "$1"
}

if [[ "${1:-}" == stop ]]; then
    stop "$DIR/slurmd.n1.pid"; stop "$DIR/slurmd.n2.pid"; stop "$DIR/slurmctld.pid"
    say "stopped"
    exit 0
fi

both_idle() {
    [[ -f "$CONF" ]] && [[ "$(timeout 20 sinfo -h -p two -t idle -o %D 2>/dev/null || true)" == 2 ]]
}

if both_idle; then
    say "already up"
    echo "export CRUCIBLE_SLURM_TWO_NODES=$CONF"
    exit 0
fi
if [[ $EUID -ne 0 ]] || ! command -v slurmd >/dev/null || ! munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then
    say "needs root, slurm and a running munged (start .ci/slurm_up.sh first)"
    exit 1
fi

mkdir -p "$DIR"/{state,log,spool/n1,spool/n2}
mem_mb=$(( $(awk '/^MemTotal:/ {print $2}' /proc/meminfo) / 1024 * 40 / 100 ))  # each node: 40%
{
slurm_conf_common two "$DIR" .%n 6917 6920
cat <<EOF
NodeName=n1 NodeHostname=localhost Port=6921 CPUs=1 RealMemory=$mem_mb State=UNKNOWN
NodeName=n2 NodeHostname=localhost Port=6922 CPUs=1 RealMemory=$mem_mb State=UNKNOWN
PartitionName=two Nodes=n1,n2 Default=YES MaxTime=INFINITE State=UP
EOF
} >"$CONF"

say "starting slurmctld and two slurmd (n1, n2; ${mem_mb}MB each; logs in $DIR/log)"
/usr/sbin/slurmctld
/usr/sbin/slurmd -N n1
/usr/sbin/slurmd -N n2
for _ in $(seq 60); do both_idle && break; sleep 0.5; done
if ! both_idle; then
    say "the two nodes did not become idle; see $DIR/log"
    exit 1
fi
say "nodes n1 and n2 are idle"
echo "export CRUCIBLE_SLURM_TWO_NODES=$CONF"
