#!/usr/bin/env bash
# A one-node Slurm on this machine for the tests (tests/cluster/test_slurm.py): munged, slurmctld
# and slurmd on localhost, one node of 2 CPUs, everything (config, key, spool, state, logs) in
# one folder. The tests find it through $SLURM_CONF; a second call finds it running and says so.
#
#   .ci/slurm_up.sh [--install] [DIR]   start it (DIR defaults to /tmp/libai-slurm); --install
#                                       first installs Debian's slurm-wlm and munge with apt
#   .ci/slurm_up.sh --stop [DIR]        stop the daemons this script started in DIR
#
# It prints `export SLURM_CONF=DIR/slurm.conf` as its last line on success. On failure it prints
# one line saying what failed and exits 1 (.ci/run goes on: the Slurm tests then skip, saying why).
# Needs root, or passwordless sudo (slurmd starts jobs as their user), and Slurm 22.05 or newer.
set -uo pipefail

# a CI user with passwordless sudo (GitHub's runners): the daemons run as root, jobs as the user
if [ "$(id -u)" != 0 ] && command -v sudo >/dev/null && sudo -n true 2>/dev/null; then
    exec sudo -n bash "$0" "$@"
fi
install=0 stop=0
while [ $# -gt 0 ]; do
    case "$1" in
        --install) install=1; shift ;;
        --stop) stop=1; shift ;;
        *) break ;;
    esac
done
dir=$(realpath -m "${1:-/tmp/libai-slurm}")
# ports of our own: a system Slurm on the default ports (6817/6818) is left alone
ctld_port=${LIBAI_SLURMCTLD_PORT:-16817} slurmd_port=${LIBAI_SLURMD_PORT:-16818}

fail() { echo "slurm_up: $*" >&2; exit 1; }

if [ "$stop" = 1 ]; then
    for name in slurmd slurmctld munged; do
        [ -f "$dir/$name.pid" ] && kill "$(cat "$dir/$name.pid")" 2>/dev/null
    done
    exit 0
fi

if [ "$install" = 1 ] && ! command -v slurmctld >/dev/null; then
    if ! (timeout 300 apt-get update -qq \
            && DEBIAN_FRONTEND=noninteractive timeout 600 apt-get install -y -qq slurm-wlm munge) \
        >"/tmp/libai-slurm-apt.log" 2>&1; then
        fail "apt-get install slurm-wlm munge failed (/tmp/libai-slurm-apt.log); the Slurm tests will skip"
    fi
fi
for tool in munged slurmctld slurmd sbatch scontrol; do
    command -v "$tool" >/dev/null || fail "$tool not found (apt-get install slurm-wlm munge)"
done
[ "$(id -u)" = 0 ] || fail "needs root: slurmd starts each job as its user"

export SLURM_CONF="$dir/slurm.conf"
if [ -f "$SLURM_CONF" ] && timeout 10 scontrol ping 2>/dev/null | grep -q UP \
    && timeout 10 sinfo -h -o %T 2>/dev/null | grep -qE "idle|mix|alloc"; then
    echo "slurm_up: already running in $dir"
    echo "export SLURM_CONF=$SLURM_CONF"
    exit 0
fi

mkdir -p "$dir"/{spool,state,log} && chmod 755 "$dir" || fail "cannot create $dir"
user=$(id -un)
# munge: a key and a socket of our own
if [ ! -f "$dir/munge.key" ]; then
    dd if=/dev/urandom of="$dir/munge.key" bs=1024 count=1 status=none && chmod 400 "$dir/munge.key" \
        || fail "cannot write the munge key"
fi
socket="$dir/munge.socket"
if ! [ -S "$socket" ] || ! munge -n -S "$socket" 2>/dev/null | unmunge -S "$socket" >/dev/null 2>&1; then
    rm -f "$socket" "$socket.lock"
    munged --force --key-file="$dir/munge.key" --socket="$socket" --pid-file="$dir/munged.pid" \
        --log-file="$dir/log/munged.log" --seed-file="$dir/munged.seed" 2>"$dir/log/munged.err" \
        || fail "munged did not start: $(tail -n 1 "$dir/log/munged.err")"
fi

cat >"$SLURM_CONF" <<EOF
# written by .ci/slurm_up.sh: a one-node test cluster
ClusterName=libai
SlurmctldHost=localhost
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
SlurmUser=$user
SlurmdUser=root
AuthType=auth/munge
# cred_expire: also how long a requeued job waits before it may start again (120 s by default)
AuthInfo=socket=$socket,cred_expire=10
CredType=cred/munge
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
# no cgroups: containers rarely allow them
MpiDefault=none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SlurmdParameters=config_overrides
# batch jobs may be requeued (the tests requeue them)
JobRequeue=1
MinJobAge=600
KillWait=30
ReturnToService=2
SchedulerType=sched/builtin
SchedulerParameters=sched_interval=1
MailProg=/bin/true
NodeName=localhost NodeAddr=127.0.0.1 CPUs=2 RealMemory=1000 State=UNKNOWN
PartitionName=debug Nodes=localhost Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO
EOF

for name in slurmd slurmctld; do
    [ -f "$dir/$name.pid" ] && kill "$(cat "$dir/$name.pid")" 2>/dev/null && sleep 1
done
slurmctld -i 2>"$dir/log/slurmctld.err" || fail "slurmctld did not start: $(tail -n 1 "$dir/log/slurmctld.err")"
slurmd -N localhost 2>"$dir/log/slurmd.err" || fail "slurmd did not start: $(tail -n 1 "$dir/log/slurmd.err")"
for _ in $(seq 1 30); do
    if timeout 5 sinfo -h -o %T 2>/dev/null | grep -qE "idle|mix|alloc"; then
        echo "slurm_up: started in $dir (munged, slurmctld on port $ctld_port, slurmd on $slurmd_port)"
        echo "export SLURM_CONF=$SLURM_CONF"
        exit 0
    fi
    sleep 1
done
fail "the node did not come up in 30 s: $(tail -n 1 "$dir/log/slurmctld.log" 2>/dev/null)"
