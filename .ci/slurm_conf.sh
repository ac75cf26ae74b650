# The slurm.conf lines both local clusters share (.ci/slurm_up.sh, .ci/slurm_two_nodes.sh); sourced.
#   slurm_conf_common CLUSTER STATE_DIR DAEMON_SUFFIX CTLD_PORT SLURMD_PORT
# DAEMON_SUFFIX names slurmd's pid, log and spool per node when one machine runs several ("" or ".%n").
slurm_conf_common() {
    local cluster=$1 dir=$2 suffix=$3
    local spool="$dir/spool${suffix:+/%n}"
    cat <<EOF2
ClusterName=$cluster
MailProg=/bin/true
MpiDefault=none
SlurmctldHost=localhost
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CryptoType=crypto/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SwitchType=switch/none
ReturnToService=2
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
StateSaveLocation=$dir/state
SlurmdSpoolDir=$spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd$suffix.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd$suffix.log
SlurmctldPort=$4
SlurmdPort=$5
EOF2
}
