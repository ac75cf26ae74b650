#!/usr/bin/env bash
# Stop the daemons that .ci/slurm_up.sh started, by the pids in their pid files under the state dir
# (munged only when slurm_up.sh started it). The state dir itself is kept for its logs.
set -euo pipefail

SLURM_DIR="${CRUCIBLE_SLURM_DIR:-${TMPDIR:-/tmp}/crucible-slurm}"

stop() {  # $1: daemon name, $2: its pid file
    local pid
    [[ -s "$2" ]] || return 0
    pid=$(cat "$2")
    if kill "$pid" 2>/dev/null; then
        # wait so that a following slurm_up.sh finds the ports free
        for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        echo "slurm_down: stopped $1 (pid $pid)" >&2
    fi
    rm -f "$2"
}

stop slurmd "$SLURM_DIR/slurmd.pid"
stop slurmctld "$SLURM_DIR/slurmctld.pid"
stop munged "$SLURM_DIR/munged.pid"
