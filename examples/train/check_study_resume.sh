#!/usr/bin/env bash
# ctest helper for examples/pipeprop_train_study.cmake: a bench/pb_fidelity.sh study that is killed in the
# middle of a run (the whole study, script and program, with SIGKILL, as at the end of a session) and then invoked
# again with the same command ends with the same bits as an uninterrupted study.
#   A: the study straight.   B: the same study, killed once run sc_lwp-seed1 has saved a checkpoint (the sgd32 run
#   before it has finished), then invoked again: it skips sgd32-seed1 and resumes sc_lwp-seed1 from its checkpoint.
# Checked: every metrics line (interval and epoch lines, without the timing keys) and the result line's losses,
# accuracy and delays equal A's; the final checkpoints byte-identical; B's sc_lwp-seed1 took 2 attempts (the second
# resumed from epoch >= 1), its sgd32-seed1 one; a third invocation runs nothing and changes nothing; a changed
# option is refused (exit 1) before anything runs.
# A bash script, not a cmake -P one: the kill needs a background process. Usage: check_study_resume.sh PROGRAM DATA WORK
set -euo pipefail
program=$1 data=$2 work=$3
root=$(cd "$(dirname "$0")/../.." && pwd)
fail() { echo "check_study_resume: FAIL: $*" >&2; exit 1; }

rm -rf "$work"
mkdir -p "$work"
# The small study: small CNN, 3 epochs of 800 samples, SGD B = 32 and PB + SC + LWP. Usage: study OUT [more options]
study() {
  local out=$1
  shift
  bash "$root/bench/pb_fidelity.sh" --program "$program" --data "$data" --network cnn --epochs 3 --samples 800 \
    --runs "sgd32:1 sc_lwp:1" --jobs 1 --no-plots --out "$out" "$@" -- --max-test-samples 200 --warmup 0.5
}

study "$work/a" >"$work/a.txt" 2>&1 || fail "the uninterrupted study failed: $(cat "$work/a.txt")"

# B, first invocation: killed (SIGKILL to its process group) once sc_lwp-seed1 has a checkpoint.
setsid bash -c "$(declare -f study); root='$root' program='$program' data='$data'; study '$work/b'" \
  >"$work/b1.txt" 2>&1 &
pid=$!
ckpt=$work/b/checkpoints/sc_lwp-seed1/manifest.txt
for ((i = 0; i < 30000; ++i)); do
  [[ ! -f $ckpt ]] || break
  kill -0 "$pid" 2>/dev/null || break
  sleep 0.002
done
kill -KILL -- "-$pid" 2>/dev/null || true
wait "$pid" 2>/dev/null || true
[[ -f $ckpt ]] || fail "sc_lwp-seed1 saved no checkpoint before the study ended or timed out: $(cat "$work/b1.txt")"
[[ -f $work/b/runs/sgd32-seed1.status ]] || fail "sgd32-seed1 did not finish before the kill"
[[ ! -f $work/b/runs/sc_lwp-seed1.status ]] ||
  fail "the kill came after sc_lwp-seed1 had finished (a loaded machine?): nothing was interrupted"
[[ -f $work/b/unfinished/sc_lwp-seed1.metrics.jsonl ]] || fail "no metrics of the interrupted run in unfinished/"
killed_at=$(grep -c '"test_accuracy"' "$work/b/unfinished/sc_lwp-seed1.metrics.jsonl" || true)
echo "killed: sc_lwp-seed1 after ${killed_at} epoch line(s), checkpoint of epoch" \
  "$(sed -n 's/^scalar epoch //p' "$ckpt")"

# B, second invocation: the same command finishes the study.
study "$work/b" >"$work/b2.txt" 2>&1 || fail "the resumed study failed: $(cat "$work/b2.txt")"
grep -q "finished before: 1; to run or resume: sc_lwp:1" "$work/b2.txt" ||
  fail "not skipped / resumed: $(cat "$work/b2.txt")"
[[ $(grep -c '"started"' "$work/b/runs/sgd32-seed1.attempts") == 1 ]] || fail "sgd32-seed1 ran again"
attempts=$(cat "$work/b/runs/sc_lwp-seed1.attempts")
[[ $(grep -c '"started"' <<<"$attempts") == 2 ]] || fail "sc_lwp-seed1: not 2 attempts: $attempts"
grep -q '^{"attempt":1,"ended":"[0-9TZ:-]*","exit":"killed","wall_seconds":[0-9]*}$' <<<"$attempts" ||
  fail "sc_lwp-seed1: the killed attempt has no end line: $attempts"
grep -q '^{"attempt":2,"started":"[0-9TZ:-]*","resumed_from_epoch":[12],.*--checkpoint-in ' <<<"$attempts" ||
  fail "sc_lwp-seed1's second attempt did not resume: $attempts"
grep -q '"attempts":2}$' "$work/b/runs/sc_lwp-seed1.status" ||
  fail "sc_lwp-seed1.status: $(cat "$work/b/runs/sc_lwp-seed1.status")"
[[ -z "$(ls -A "$work/b/unfinished")" ]] || fail "unfinished/ not empty: $(ls "$work/b/unfinished")"

# Same bits: metrics without the timing keys, the result's numbers, the final checkpoints.
untimed() { sed -E 's/,"(seconds|samples_per_second)":[^,}]*//g' "$1"; }
for run in sgd32-seed1 sc_lwp-seed1; do
  for f in "$work"/{a,b}/runs/$run.{metrics.jsonl,out,cmd,status}; do [[ -s $f ]] || fail "missing $f"; done
  diff <(untimed "$work/a/runs/$run.metrics.jsonl") <(untimed "$work/b/runs/$run.metrics.jsonl") >&2 ||
    fail "$run: metrics differ"
  [[ $(grep -c . "$work/b/runs/$run.metrics.jsonl") -ge 6 ]] || fail "$run: too few metrics lines"
  for key in epochs train_loss test_loss test_accuracy delays; do
    va=$(tail -n 1 "$work/a/runs/$run.out" | grep -o "\"$key\":[^,}]*" || true)
    vb=$(tail -n 1 "$work/b/runs/$run.out" | grep -o "\"$key\":[^,}]*" || true)
    [[ $va == "$vb" ]] || fail "$run: $key: straight '$va', resumed '$vb'"
    [[ -n $va || $key == delays ]] || fail "$run: no $key in the result"
  done
  n=0
  for t in "$work/a/checkpoints/$run"/*.npy; do
    cmp -s "$t" "$work/b/checkpoints/$run/${t##*/}" || fail "$run: ${t##*/} differs"
    n=$((n + 1))
  done
  ((n >= 4)) || fail "$run: only $n tensors in the checkpoint"
  echo "$run: $(grep -c . "$work/b/runs/$run.metrics.jsonl") metrics lines equal," \
    "$n checkpoint tensors bit-identical," \
    "result $(tail -n 1 "$work/b/runs/$run.out" | grep -o '"test_accuracy":[^,}]*')"
done

# A third invocation runs nothing and changes nothing; a changed option is refused.
before=$(cat "$work"/b/runs/* | sha256sum)
study "$work/b" >"$work/b3.txt" 2>&1 || fail "the third invocation failed: $(cat "$work/b3.txt")"
grep -q "finished before: 2; to run or resume: none$" "$work/b3.txt" || fail "third invocation: $(cat "$work/b3.txt")"
[[ $(cat "$work"/b/runs/* | sha256sum) == "$before" ]] || fail "the third invocation changed the runs"
rc=0
bash "$root/bench/pb_fidelity.sh" --program "$program" --data "$data" --network cnn --epochs 4 --samples 800 \
  --runs "sgd32:1 sc_lwp:1" --jobs 1 --no-plots --out "$work/b" -- --max-test-samples 200 --warmup 0.5 \
  >"$work/b4.txt" 2>&1 || rc=$?
[[ $rc == 1 ]] && grep -q "was started with other options" "$work/b4.txt" ||
  fail "changed options: exit $rc: $(cat "$work/b4.txt")"
echo "study resume: killed and resumed study equals the uninterrupted one"
