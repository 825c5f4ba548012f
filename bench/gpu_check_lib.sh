# Functions of bench/gpu_check.sh (sourced; tests/test_hf_gpu_check.py runs them alone). Needs OUT and FAILED.

# Seconds a step has after its limit's TERM before it is killed: the trainer checkpoints on TERM and a
# pytest step may carry on to its next test, so a limit needs the KILL behind it to hold.
KILL_AFTER_S="${KILL_AFTER_S:-10}"

# step NAME LIMIT LOGFILE COMMAND... : run COMMAND for at most LIMIT s (+ KILL_AFTER_S to end after TERM),
# record outcome and time in $OUT/steps.tsv, keep going. A step's own verdict (step_verdict_<n>, given the
# log) can fail a command that exited 0.
step() {
  local name="$1" limit="$2" log="$3"; shift 3
  local t0 rc=0
  t0=$(date +%s)
  echo; echo "== $name"
  # pytest refuses a run that changed files in the checkout: the step's own log there when OUT is inside it
  case "$(realpath -m "$OUT")/" in
    "$ROOT"/*) MIDTRAIN_CHECKOUT_CHECK=0 timeout -k "$KILL_AFTER_S" "$limit" "$@" >"$log" 2>&1 || rc=$? ;;
    *) timeout -k "$KILL_AFTER_S" "$limit" "$@" >"$log" 2>&1 || rc=$? ;;
  esac
  { grep -v -i -E "warn|^\s*(warnings\.warn|return func|checkpoint\.load_state_dict)\(" "$log" || true; } | tail -15
  local result="ok" detail=""
  if [[ $rc -eq 124 || $rc -eq 137 ]]; then result="FAIL"; detail="timed out after ${limit}s"
  elif [[ $rc -ne 0 ]]; then result="FAIL"; detail="exit $rc (see $log)"
  elif [[ -n "${STEP_VERDICT:-}" ]]; then
    detail="$("$STEP_VERDICT")" || result="FAIL"
  fi
  [[ "$result" == "ok" ]] || FAILED=1
  local summary_line
  summary_line=$(grep -E "[0-9]+ (passed|failed)" "$log" | tail -1 || true)
  printf '%s\t%s\t%s\t%s\n' "$name" "$result" "$(( $(date +%s) - t0 ))" "${detail:-$summary_line}" >>"$OUT/steps.tsv"
  echo "-> $result ${detail:-$summary_line}"
}

# The throughput step's verdict on its rows ($OUT/gpu_throughput.jsonl): fails (exit 1) unless at least one
# row was measured and every row that was not skipped for the budget was; prints what it counted.
throughput_verdict() {
  "$PYTHON" - "$OUT/gpu_throughput.jsonl" <<'PY'
import json, sys
rows = []
try:
    for line in open(sys.argv[1]):
        try:
            r = json.loads(line)
        except ValueError:
            continue  # a line cut off by a kill
        if r.get("kind") == "row":
            rows.append(r)
except FileNotFoundError:
    pass
measured = [r for r in rows if r.get("error") is None]
failed = [r for r in rows if r.get("error") is not None and not str(r["error"]).startswith("skipped:")]
print(f"{len(measured)} of {len(rows)} rows measured, {len(failed)} failed" + (f" ({failed[0]['error']})" if failed else ""))
sys.exit(0 if measured and not failed else 1)
PY
}
