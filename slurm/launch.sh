# ---- launch (slurm/launch.sh, the same in every job): the ranks, signals, requeue, retries ----
# One log per start of the job: a requeued job (same id) writes ..._<restart>.out beside the first one.
LOG={{log_dir}}/"{{log_name}}-${SLURM_JOB_ID}_${SLURM_RESTART_COUNT:-0}.out"
echo "[midtrain] job ${SLURM_JOB_ID} restart ${SLURM_RESTART_COUNT:-0}: log in $LOG"
exec >>"$LOG" 2>&1
echo "[midtrain] job ${SLURM_JOB_ID} restart ${SLURM_RESTART_COUNT:-0}: ${SLURM_NNODES} nodes x {{ranks_per_node}} ranks, master ${MASTER_ADDR}:${MASTER_PORT}"

# Each rank records its pid here (pid.<node>.<rank>) and, when it ends by itself, its exit status
# (exit.<rank>): 75 means "checkpoint complete, requeue me". The requeue is decided on these records, not on
# srun's exit code, which is that of whichever rank was killed last. A rank records a signal that came
# before the trainer's handler was installed in early_signal.<rank>.
STATUS_DIR={{status_dir}}/"${SLURM_JOB_ID}.${SLURM_RESTART_COUNT:-0}"
RETRIES={{status_dir}}/"${SLURM_JOB_ID}.retries"  # crash and hang retries so far (requeues for USR1 are not)
rm -rf "$STATUS_DIR"
mkdir -p "$STATUS_DIR"

# Send signal $1 to each rank's main process only (one task per node): signalling the whole step would also
# kill the helper processes that write checkpoints. The step takes no GRES (--gres=none: the ranks' step holds
# the GPUs). In a GPU job sbatch exports SLURM_GPUS_PER_NODE (and the like), which srun reads as its own
# GPU request; with --gres=none Slurm then refuses the step ("Invalid Trackable RESource (TRES)
# specification"), so they are left out of its environment. Fails, saying why on stderr, unless every rank
# recorded on every node got the signal (a rank that already ended by itself, exit.<rank>, needs none).
signal_ranks() {
  env -u SLURM_GPUS -u SLURM_GPUS_PER_NODE -u SLURM_GPUS_PER_TASK -u SLURM_GPUS_PER_SOCKET -u SLURM_GRES \
    -u SLURM_CPUS_PER_GPU -u SLURM_MEM_PER_GPU -u SLURM_GPU_BIND -u SLURM_GPU_FREQ -u SLURM_TRES_PER_TASK \
    srun --overlap --nodes="$SLURM_NNODES" --ntasks="$SLURM_NNODES" --ntasks-per-node=1 --cpus-per-task=1 \
    --gres=none bash -c '
      sent=0 failed=0
      for f in "$0/pid.$SLURMD_NODENAME".*; do
        [ -f "$f" ] || continue
        rank="${f##*.}"
        if kill "-$1" "$(cat "$f")" 2>/dev/null; then sent=$((sent + 1))
        elif [ ! -f "$0/exit.$rank" ]; then echo "rank $rank (pid $(cat "$f")): kill -$1 failed" >&2; failed=1; fi
      done
      [ "$sent" -gt 0 ] || [ "$failed" -ne 0 ] || [ -n "$(ls "$0"/exit.* 2>/dev/null)" ] \
        || { echo "no rank on $SLURMD_NODENAME has recorded its pid in $0" >&2; failed=1; }
      exit "$failed"' "$STATUS_DIR" "$1"
}

# A signal the ranks should have got and did not: an error in this log, in the job's record (its Comment,
# scontrol show job) and in its exit status (see the end), never a "forwarded".
signal_failed() {
  echo "[midtrain] ERROR: $1" >&2
  echo "$1" >>"$STATUS_DIR/signal_failed"
  scontrol update JobId="$SLURM_JOB_ID" Comment="midtrain: $1" \
    || echo "[midtrain] could not record the error in job ${SLURM_JOB_ID}'s Comment" >&2
}

# USR1 reaches this script {{signal_before_s}}s before the time limit (--signal=B:...), and at preemption
# with PreemptParameters=send_user_signal: forwarded to the ranks, a trainer checkpoints and exits 75, and
# the job requeues itself. TERM means the job is ending: scancel (slurmd signals every step, the ranks' too)
# or a preemption, which Slurm requeues itself with PreemptMode=REQUEUE; it never requeues here. When only
# this shell got it (`scancel --batch --signal=TERM`: the job is still RUNNING), it goes to each rank as USR1
# does (srun would turn a TERM into a kill of its tasks: no checkpoint), and once they have checkpointed and
# stopped the script cancels its job, which ends CANCELLED as after a plain scancel.
got_usr1=""
terminated=""
cancel_at_end=""
forward() {
  got_usr1=1
  echo "[midtrain] USR1 (time limit or preemption ahead): asking every rank to checkpoint"
  if signal_ranks USR1; then
    echo "[midtrain] USR1 forwarded to the ranks"
  else
    signal_failed "USR1 not delivered to every rank: they do not checkpoint before the time limit"
  fi
}
terminate() {
  [ -n "$terminated" ] && return 0  # the scancel below signals this shell once more
  terminated=1
  echo "[midtrain] TERM: the job is ending (scancel or preemption); it is not requeued by this script"
  if scontrol show job -o "$SLURM_JOB_ID" 2>/dev/null | grep -q ' JobState=RUNNING '; then
    cancel_at_end=1
    if signal_ranks TERM; then
      echo "[midtrain] TERM passed on to the ranks (only the batch shell got it): they checkpoint and stop"
    else
      signal_failed "TERM to the batch shell not delivered to every rank"
    fi
  fi
  return 0
}
trap forward USR1
trap terminate TERM

# Hang watchdog: progress is a write to this start's log, which gets every rank's output (the trainer's
# line every log.interval steps, an eval's progress bar). None for {{hang_timeout_s}}s (a collective that
# never completes prints nothing): the ranks are killed and the start counts as a crash (max_retries).
watchdog() {
  while sleep {{hang_poll_s}}; do
    idle=$(( $(date +%s) - $(stat -c %Y "$LOG") ))
    if [ "$idle" -ge {{hang_timeout_s}} ]; then
      echo "[midtrain] no progress for ${idle}s (hang_timeout_s={{hang_timeout_s}}): killing the ranks"
      touch "$STATUS_DIR/hung"
      signal_ranks KILL || signal_failed "the hang watchdog could not kill every rank: hung ranks left running"
      return
    fi
  done
}

set +e
# --cpus-per-task: srun does not inherit sbatch's (srun(1)); without it every rank is bound to one CPU.
# --kill-on-bad-exit: a crashed rank ends the step at once instead of leaving the others hanging in NCCL.
srun --kill-on-bad-exit=1 --wait=120 --label --cpus-per-task={{cpus_per_task}} {{srun_container}}\
  python -m midtrain.launch.rank "$STATUS_DIR" midtrain.cli {{argv}} &
srun_pid=$!
watchdog_pid=""
if [ {{hang_timeout_s}} -gt 0 ]; then
  watchdog &
  watchdog_pid=$!
fi
# `wait` returns early (status > 128) whenever a trap ran; keep waiting until srun itself has ended, and
# collect its own status when the trap interrupted the wait in which srun ended.
while true; do
  wait "$srun_pid"
  rc=$?
  kill -0 "$srun_pid" 2>/dev/null && continue
  if [ "$rc" -gt 128 ]; then
    wait "$srun_pid"
    own=$?
    [ "$own" -ne 127 ] && rc=$own
  fi
  break
done
[ -n "$watchdog_pid" ] && kill "$watchdog_pid" 2>/dev/null
set -e
stopped="$(cat "$STATUS_DIR"/exit.* 2>/dev/null | grep -cx 75 || true)"
echo "[midtrain] ranks ended: srun exit ${rc}, ${stopped} rank(s) checkpointed and stopped (exit 75)"
# The rank that failed first (its own exit record; oldest first): srun's code is that of a rank it killed
# after it (143, 137), so the job's exit and the crash line give the failing rank's.
while IFS= read -r f; do
  code="$(cat "$f" 2>/dev/null || true)"
  case "$code" in
    0|75|"") ;;
    *)
      echo "[midtrain] rank ${f##*.} failed first, with exit ${code} (srun's ${rc} is that of the rank it ended last)" >&2
      [ "$rc" -ne 0 ] && rc="$code"
      break ;;
  esac
done < <(ls -tr "$STATUS_DIR"/exit.* 2>/dev/null)
for f in "$STATUS_DIR"/early_signal.*; do
  [ -f "$f" ] && echo "[midtrain] rank ${f##*.} got $(cat "$f") before the trainer could checkpoint" >&2
done

failed_signal=""
if [ -f "$STATUS_DIR/signal_failed" ]; then
  failed_signal=1
  echo "[midtrain] ERROR: $(paste -sd ';' "$STATUS_DIR/signal_failed"): the job fails" >&2
fi

requeue() {
  echo "[midtrain] requeueing job ${SLURM_JOB_ID} $1 (restart $(( ${SLURM_RESTART_COUNT:-0} + 1 )))"
  if scontrol requeue "${SLURM_JOB_ID}"; then
    exit 0
  fi
  echo "[midtrain] scontrol requeue ${SLURM_JOB_ID} failed" >&2
}
retries="$(cat "$RETRIES" 2>/dev/null || echo 0)"
if [ -n "$failed_signal" ]; then
  :  # not requeued: a restart would meet the same unreachable ranks
elif [ -n "$terminated" ]; then
  echo "[midtrain] job ${SLURM_JOB_ID} terminated: not requeueing"
elif [ -n "$got_usr1" ] && [ "$stopped" -gt 0 ]; then
  if [ "${SLURM_RESTART_COUNT:-0}" -lt {{max_requeues}} ]; then
    requeue "to resume"
  else
    echo "[midtrain] max_requeues={{max_requeues}} reached; not requeueing" >&2
  fi
elif [ "$rc" -ne 0 ] && [ "$stopped" -eq 0 ]; then
  what="crashed (exit ${rc})"
  [ -e "$STATUS_DIR/hung" ] && what="hung"
  if [ "$retries" -lt {{max_retries}} ]; then
    echo "$(( retries + 1 ))" > "$RETRIES"
    requeue "after it ${what}: retry $(( retries + 1 )) of max_retries={{max_retries}}"
  else
    echo "[midtrain] job ${SLURM_JOB_ID} ${what}; max_retries={{max_retries}} retries used, not requeueing" >&2
  fi
fi
[ "$stopped" -gt 0 ] && [ "$rc" -eq 0 ] && rc=75
if [ -n "$cancel_at_end" ]; then
  echo "[midtrain] cancelling job ${SLURM_JOB_ID}: a TERM ends the job (CANCELLED), as scancel does"
  scancel "$SLURM_JOB_ID" || echo "[midtrain] scancel ${SLURM_JOB_ID} failed" >&2
fi
if [ -n "$failed_signal" ] && { [ "$rc" -eq 0 ] || [ "$rc" -eq 75 ]; }; then
  rc=1
fi
exit "$rc"
