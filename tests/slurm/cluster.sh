#!/usr/bin/env bash
# A real single-node Slurm cluster on this machine, for tests and for trying `midtrain submit` by hand.
#
#   tests/slurm/cluster.sh start    # install slurm-wlm + munge if missing, write slurm.conf, start, wait idle
#   tests/slurm/cluster.sh status   # exit 0 when the node answers and is usable
#   tests/slurm/cluster.sh stop     # stop the daemons this script started
#
# State, spool and logs live under $MIDTRAIN_SLURM_DIR (default /tmp/midtrain-slurm). The config is
# written there and to /etc/slurm/slurm.conf (so sbatch/srun/squeue find it) unless that file is someone
# else's: a file without our marker line is never overwritten. A cluster already running from an earlier
# session is reused when it answers, and restarted cleanly when it does not.
# Needs root (the daemons run as root without systemd: SlurmUser=root, proctrack/linuxproc, task/affinity).
set -euo pipefail

DIR="${MIDTRAIN_SLURM_DIR:-/tmp/midtrain-slurm}"
CONF=/etc/slurm/slurm.conf
GRES_CONF=/etc/slurm/gres.conf  # slurmd reads gres.conf beside slurm.conf
MARKER="# midtrain single-node test cluster"
WAIT_S="${MIDTRAIN_SLURM_WAIT_S:-60}"

say() { echo "[cluster] $*" >&2; }
die() { say "ERROR: $*"; exit 1; }

need_root() {
  [ "$(id -u)" = 0 ] || die "needs root (daemons run as root without systemd); current uid $(id -u)"
}

install_packages() {
  if command -v slurmctld >/dev/null && command -v slurmd >/dev/null && command -v munged >/dev/null \
     && command -v sbatch >/dev/null; then
    return
  fi
  command -v apt-get >/dev/null || die "slurm-wlm/munge missing and no apt-get to install them"
  say "installing slurm-wlm and munge (apt-get; once per machine)"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq || die "apt-get update failed"
  apt-get install -y -qq --no-install-recommends slurm-wlm munge >"$DIR/log/apt.log" 2>&1 \
    || die "apt-get install slurm-wlm munge failed (see $DIR/log/apt.log)"
}

render_conf() {
  local node_line
  # slurmd -C reports this machine's real sockets/cores/threads/memory; a node configured with more than
  # it has would be drained. Take 5% of the memory off so the node never reports "Low RealMemory".
  node_line="$(slurmd -C | head -1)"
  local mem
  mem="$(sed -n 's/.*RealMemory=\([0-9]*\).*/\1/p' <<<"$node_line")"
  node_line="$(sed "s/RealMemory=[0-9]*/RealMemory=$((mem * 95 / 100))/" <<<"$node_line")"
  local node
  node="$(sed -n 's/^NodeName=\([^ ]*\).*/\1/p' <<<"$node_line")"
  # The node declares two GPUs as GRES, backed by dummy device files: a GPU-shaped job (--gpus-per-node) goes
  # through Slurm's real GRES logic (allocation, SLURM_GPUS_* in the job's environment, CUDA_VISIBLE_DEVICES,
  # steps that must say which GRES they take) while the trainer itself finds no CUDA and runs on CPU/gloo.
  # CPU jobs ask for no GRES and run as before.
  mkdir -p "$DIR/dev"
  touch "$DIR/dev/gpu0" "$DIR/dev/gpu1"
  cat >"$DIR/gres.conf" <<EOF
$MARKER (tests/slurm/cluster.sh): dummy GPUs, no driver
NodeName=$node Name=gpu File=$DIR/dev/gpu[0-1]
EOF
  cat >"$DIR/slurm.conf" <<EOF
$MARKER (tests/slurm/cluster.sh); state under $DIR
ClusterName=midtrain
SlurmctldHost=$node
SlurmUser=root
AuthType=auth/munge
# A requeued job may start again only after its old credential's lifetime (default 120 s): slurmctld sets its
# BeginTime that far ahead, and slurmd kills an earlier start ("Job credential revoked"). Each of the four
# requeue tests waits it out once; 10 s still leaves a loaded machine several times what launching a step with
# a fresh credential takes there (a second or two).
AuthInfo=cred_expire=10
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool
SlurmctldPidFile=$DIR/run/slurmctld.pid
SlurmdPidFile=$DIR/run/slurmd.pid
SlurmctldLogFile=$DIR/log/slurmctld.log
SlurmdLogFile=$DIR/log/slurmd.log
ProctrackType=proctrack/linuxproc
# Tasks are bound to their allocated CPUs as on a production cluster, so a job that launches its ranks
# without srun --cpus-per-task (srun does not inherit sbatch's) shows it: each rank gets one CPU.
TaskPlugin=task/affinity
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
SchedulerType=sched/builtin
# The main scheduling loop also starts jobs that no event wakes the scheduler for: a requeued job held until its
# BeginTime (cred_expire above). At the default 60 s a requeue test waited up to a minute more for nothing.
SchedulerParameters=sched_interval=2
MpiDefault=none
ReturnToService=2
JobRequeue=1
# No DependencyParameters=kill_invalid_depend: Slurm's default leaves a job whose afterok dependency failed
# PENDING forever, so the tests show that each dependent job's own --kill-on-invalid-dep cancels it.
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/filetxt
JobCompLoc=$DIR/log/jobcomp.txt
MinJobAge=600
# Seconds from a job's TERM to its KILL: the tests that end ranks which ignore TERM (a scancel, a late rank)
# wait it out each time; a production cluster gives a checkpoint longer (30 s by default).
KillWait=5
InactiveLimit=0
SlurmdTimeout=60
MaxArraySize=1001
GresTypes=gpu
$node_line Gres=gpu:2 State=UNKNOWN
PartitionName=debug Nodes=$node Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO
EOF
}

conf_current() {
  # the running cluster was started from the config this script writes now (not an older version of it)
  render_conf && [ -f "$CONF" ] && cmp -s "$DIR/slurm.conf" "$CONF" && [ -f "$GRES_CONF" ] \
    && cmp -s "$DIR/gres.conf" "$GRES_CONF"
}

write_conf() {
  render_conf
  if [ -f "$CONF" ] && ! grep -qF "$MARKER" "$CONF"; then
    die "$CONF exists and is not ours; refusing to overwrite a real cluster's config"
  fi
  if [ -f "$GRES_CONF" ] && ! grep -qF "$MARKER" "$GRES_CONF"; then
    die "$GRES_CONF exists and is not ours; refusing to overwrite a real cluster's config"
  fi
  mkdir -p /etc/slurm
  cp "$DIR/slurm.conf" "$CONF"
  cp "$DIR/gres.conf" "$GRES_CONF"
}

pid_alive() { [ -f "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }

node_ready() {
  # idle, mixed or allocated all mean the node takes jobs
  local state
  state="$(timeout 10 sinfo -h -o '%t' 2>/dev/null | head -1 || true)"
  case "$state" in idle|mix|alloc|comp) return 0 ;; *) return 1 ;; esac
}

start_munge() {
  if timeout 5 munge -n </dev/null 2>/dev/null | timeout 5 unmunge >/dev/null 2>&1; then
    return  # a munged already answers (ours from before, or the system's)
  fi
  mkdir -p /etc/munge /run/munge /var/lib/munge /var/log/munge
  if [ ! -s /etc/munge/munge.key ]; then
    if command -v mungekey >/dev/null; then mungekey --create --keyfile=/etc/munge/munge.key
    else dd if=/dev/urandom bs=1 count=1024 of=/etc/munge/munge.key 2>/dev/null; fi
  fi
  # munged refuses a key or directories not owned by the user it runs as
  chown -R munge:munge /etc/munge /run/munge /var/lib/munge /var/log/munge
  chmod 0700 /etc/munge && chmod 0400 /etc/munge/munge.key && chmod 0755 /run/munge
  runuser -u munge -- /usr/sbin/munged --pid-file=/run/munge/munged.pid
  cp /run/munge/munged.pid "$DIR/run/munged.pid" 2>/dev/null || true
  for _ in $(seq 20); do
    if munge -n </dev/null | unmunge >/dev/null 2>&1; then return; fi
    sleep 0.5
  done
  die "munged did not come up"
}

stop_pidfile() {
  local f="$1" pid
  pid_alive "$f" || { rm -f "$f"; return 0; }
  pid="$(cat "$f")"
  kill "$pid" 2>/dev/null || true
  for _ in $(seq 40); do kill -0 "$pid" 2>/dev/null || break; sleep 0.25; done
  kill -9 "$pid" 2>/dev/null || true
  rm -f "$f"
}

cmd_stop() {
  need_root
  if node_ready; then
    # our cluster's jobs die with it; cancel them so their steps do not linger as orphans
    timeout 10 scancel --full --quiet --partition=debug 2>/dev/null || true
  fi
  stop_pidfile "$DIR/run/slurmd.pid"
  stop_pidfile "$DIR/run/slurmctld.pid"
  stop_pidfile "$DIR/run/munged.pid"
  say "stopped"
}

cmd_start() {
  need_root
  mkdir -p "$DIR"/{state,spool,log,run}
  if pid_alive "$DIR/run/slurmctld.pid" && pid_alive "$DIR/run/slurmd.pid" && node_ready; then
    if conf_current; then
      say "reusing the running cluster ($DIR)"
      echo reused
      return
    fi
    say "the running cluster has an older slurm.conf; restarting it with the current one"
    timeout 10 scancel --full --quiet --partition=debug 2>/dev/null || true
  fi
  install_packages
  # a half-alive cluster from an earlier session: stop what is left and start clean
  stop_pidfile "$DIR/run/slurmd.pid"
  stop_pidfile "$DIR/run/slurmctld.pid"
  write_conf
  start_munge
  # -i: ignore saved state (a crashed earlier run must not resurrect old jobs)
  /usr/sbin/slurmctld -f "$CONF" -i
  /usr/sbin/slurmd -f "$CONF"
  local node t0
  node="$(sed -n 's/^SlurmctldHost=//p' "$CONF")"
  t0=$(date +%s)
  until node_ready; do
    if [ $(( $(date +%s) - t0 )) -ge "$WAIT_S" ]; then
      timeout 10 sinfo -N -l >&2 || true
      tail -n 20 "$DIR/log/slurmctld.log" "$DIR/log/slurmd.log" >&2 || true
      die "node $node not idle after ${WAIT_S}s"
    fi
    # a node drained by an earlier unclean stop comes back with resume
    state="$(timeout 5 sinfo -h -o '%t' 2>/dev/null | head -1 || true)"
    case "$state" in drain*|down*) timeout 5 scontrol update NodeName="$node" State=RESUME 2>/dev/null || true ;; esac
    sleep 0.5
  done
  say "node $node idle after $(( $(date +%s) - t0 ))s; logs in $DIR/log"
  echo started
}

cmd_status() {
  if node_ready; then sinfo; exit 0; fi
  say "not running (or node not usable)"; exit 1
}

case "${1:-}" in
  start) cmd_start ;;
  stop) cmd_stop ;;
  status) cmd_status ;;
  restart) cmd_stop; cmd_start ;;
  *) echo "usage: $0 start|stop|status|restart   (state in \$MIDTRAIN_SLURM_DIR, default /tmp/midtrain-slurm)" >&2; exit 2 ;;
esac
