#!/usr/bin/env bash
# bench/pb_fidelity.sh: the PB paper's claim at depth (PB-paper = Kosson et al., arXiv 2003.11666, §5):
# fine-grained Pipelined Backpropagation at micro-batch size 1 on a ResNet, every conv its own stage
# (--stages layer: ResNet-20 20 stages, delays 38 ... 0; ResNet-56 56 stages, 110 ... 0), with each mitigation,
# against batched SGD, over seeds, with the same data, epochs and cosine learning-rate schedule.
#
# Variants (--variants, default all):
#   sgd32     --mode sgd --batch 32 --lr LR --momentum M                       (the reference)
#   sgd128    --mode sgd --batch 128, lr and momentum scaled from B = 32 by the rules of docs/pb-semantics.md §4
#             (m = M^4, lr = 4 LR (1 - m) / (1 - M))
#   none sc lwp lwp_wd sc_lwp stash pipemare
#             --mode pb --stages layer --batch 1 --mitigation <variant> --reference-batch 32 --lr LR --momentum M
#             (lr and momentum scaled from B = 32 to b = 1 by the same rules; lwp is the velocity form of linear
#             weight prediction, lwp_wd its weight-difference form)
# Every run writes its metrics (--metrics, with --log-every interval lines of the training loss) and its JSON result
# line under OUT/runs/; bench/fidelity_table.py then writes OUT/table.md and OUT/table.json (per variant: mean and
# sample std of the test accuracy and of the final epoch's training loss over the seeds, PB minus SGD B = 32, and the
# mean wall time of a run) and prints the markdown table; bench/plot_fidelity.py draws OUT/*.png from the metrics.
# PB runs use the sequential executor (the same bits as the concurrent one; one core each), --jobs of them at once.
#
# Usage: bench/pb_fidelity.sh [--build DIR | --program PATH] [--network resnet20|resnet56] [--norm gn|on] [--seeds "1 2 3"]
#          [--variants "sgd32 none sc_lwp"] [--epochs E] [--samples N] [--lr LR] [--momentum M] [--jobs J]
#          [--out DIR] [--label TEXT] [--batch B] [--adamw-lr LR] [--test-samples T]
#          [--runs "sgd32:1 none:1 ..."] [--data DIR] [--no-plots] [--stages CUT]
#          [-- more pipeprop_train options for every run]
# --runs: the runs as variant:seed, started in this order (instead of every variant of every seed, seed by seed).
# --no-plots: no figures (and no scripts/install-deps.sh); the table is still written.
# --stages: the PB runs' cut (pipeprop_train --stages: layer, fine or split points; default layer for the image
# networks, fine for the text networks), e.g. a coarser cut of the same network to see what its delays cost; give
# another cut its own --out (a study refuses runs whose recorded command differs).
# --network mlp / cnn (small studies, e.g. the resume test) take no --norm and name OUT bench/results/<network>.
# --program runs that pipeprop_train binary as it is (no build). Defaults: build, resnet20, gn, seeds "1 2 3", all variants, 3 epochs of 10000 samples (each epoch a fresh
# permutation of Fashion-MNIST's 60000 training images), lr 0.05, momentum 0.9, jobs = cores,
# out bench/results/<network>-<norm>[-<label>].
# A run that fails (a diverging run exits 1: non-finite loss) is recorded as diverged in the table, not retried.
#
# --network llama-tiny (PB on the transformer; 11 stages with --stages fine, delays 20 ... 0) trains
# on Debian's fortunes (64-byte sequences, validation every 10th fortune, --test-samples of them) with its own variants
# and defaults (batch B = --batch, default 8; 1 epoch of 36000 sequences (of 36156), 4096 validation sequences; lr 0.05 / momentum 0.9 for momentum SGD,
# --adamw-lr 3e-3 with betas 0.9 / 0.99 for AdamW; out bench/results/llama-tiny[-<label>]):
#   adamw     --mode sgd --batch B --optimizer adamw --lr ADAMW_LR                  (the AdamW reference)
#   sgd       --mode sgd --batch B --optimizer sgd --lr LR --momentum M             (the momentum-SGD reference)
#   none sc lwp lwp_wd sc_lwp stash pipemare
#             --mode pb --stages fine --batch 1 --optimizer sgd --mitigation <variant> --reference-batch B
#             --lr LR --momentum M (scaled from B to b = 1 as above)
#   sgd1      --mode sgd --batch 1 --optimizer sgd, lr and momentum scaled from B to 1 as for PB: batch 1 without
#             delays, the control that separates PB's staleness from the cost of b = 1 itself
#   adamw1    --mode sgd --batch 1 --optimizer adamw with PB AdamW's scaled hyperparameters (the same control)
#   adamw_none adamw_stash adamw_pipemare adamw_lwp_opt adamw_nesterov
#             --mode pb --stages fine --batch 1 --optimizer adamw --mitigation <none|stash|pipemare|lwp_opt|nesterov>,
#             AdamW's hyperparameters scaled from B to b = 1 by the square-root rule (Malladi et al., NeurIPS 2022, "On
#             the SDEs and scaling rules for adaptive gradient algorithms"): lr = ADAMW_LR sqrt(b / B), and each beta
#             raised to the power b / B (the momentum rule of docs/pb-semantics.md §4: the same decay per sample)
#   adamw_2bw --mode pb --stages fine --batch 1 --optimizer adamw --mitigation 2bw --2bw-accumulation N (N = 40, at
#             least D_0 of both text networks' fine cuts): one update per N micro-batches with their mean gradient,
#             so AdamW's hyperparameters scaled from B to N by the same rule
# --network llama-4x128 (4 blocks of width 128, 19 stages with --stages fine, delays 36 ... 0) takes the same
# variants and defaults.
# bench/fidelity_table.py then tabulates the validation loss per byte and its perplexity (mean, min, max over seeds)
# and the difference to the reference of the same optimizer (adamw for AdamW rows, sgd for momentum-SGD rows).
# study.txt gets one header per invocation (appended): runs of an earlier invocation into OUT stay in OUT/runs/ and
# in the table, so seeds or variants can be added later.
#
# Resumable: invoke the same command again and the study continues where it stopped. A run is finished
# when it has OUT/runs/<run>.status (exit 0, or exit 1 after 'training diverged'): it is skipped. An unfinished run
# lives in OUT/unfinished/<run>.{cmd,attempts,out,log,metrics.jsonl} with its checkpoint (written after every epoch)
# in OUT/checkpoints/<run>/; the next invocation resumes it with --checkpoint-in from its last completed epoch (the
# program drops the metrics lines of later epochs and appends; train/check_resume*.cmake: the same bits as an
# uninterrupted run, tested for a killed study by examples/train/check_study_resume.sh). When a run finishes its files
# move to OUT/runs/: <run>.cmd (the fresh command), <run>.attempts (JSON lines: at each attempt's start the exact
# command, the checkpoint's epoch, git commit, program hash, host; at its end the exit code and wall time, for a killed
# attempt written by the next one with the time of its last output), <run>.out (stdout, the result JSON last),
# <run>.log (an attempt header line before each attempt's stderr), <run>.metrics.jsonl, <run>.status (wall_seconds
# summed over the attempts). Checkpoints stay in OUT/checkpoints/ (not committed:
# bench/results/.gitignore ignores checkpoints/ and unfinished/, so 'git add OUT' takes the finished runs only).
# A run whose recorded command differs from this invocation's (other than the program path) stops the study before
# anything runs: use another --out, or delete that run. Other failures (killed, exit 2, ...) leave the run unfinished.
set -euo pipefail
cd "$(dirname "$0")/.."

build=build network=resnet20 norm=gn seeds="1 2 3" epochs=3 samples=10000 lr=0.05 momentum=0.9
variants="sgd32 sgd128 none sc lwp lwp_wd sc_lwp stash pipemare"
jobs=$(nproc) out="" label="" program="" batch="" adamw_lr=3e-3 test_samples="" given_epochs="" given_samples=""
given_variants="" given_runs="" data=/usr/share/datasets/fashion-mnist plots=true stages=""
extra=()
while (($#)); do
  case "$1" in
    --build) build=$2; shift 2 ;;
    --program) program=$2; shift 2 ;;
    --network) network=$2; shift 2 ;;
    --norm) norm=$2; shift 2 ;;
    --seeds) seeds=$2; shift 2 ;;
    --variants) given_variants=$2; shift 2 ;;
    --epochs) given_epochs=$2; shift 2 ;;
    --samples) given_samples=$2; shift 2 ;;
    --batch) batch=$2; shift 2 ;;
    --adamw-lr) adamw_lr=$2; shift 2 ;;
    --test-samples) test_samples=$2; shift 2 ;;
    --lr) lr=$2; shift 2 ;;
    --momentum) momentum=$2; shift 2 ;;
    --jobs) jobs=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --label) label=$2; shift 2 ;;
    --runs) given_runs=$2; shift 2 ;;
    --data) data=$2; shift 2 ;;
    --no-plots) plots=false; shift ;;
    --stages) stages=$2; shift 2 ;;
    --) shift; extra=("$@"); break ;;
    *) echo "pb_fidelity: unknown argument '$1' (see the usage in $0)" >&2; exit 2 ;;
  esac
done
text=false
if [[ $network == llama-tiny || $network == llama-4x128 ]]; then  # the text networks: variants, defaults (header)
  text=true variants="adamw sgd sgd1 adamw1 none sc lwp sc_lwp adamw_none adamw_stash" epochs=1 samples=36000
  : "${batch:=8}" "${test_samples:=4096}"
  [[ -n "$out" ]] || out=bench/results/$network${label:+-$label}
fi
if $text; then : "${stages:=fine}"; else : "${stages:=layer}"; fi
[[ -z "$given_variants" ]] || variants=$given_variants
[[ -z "$given_epochs" ]] || epochs=$given_epochs
[[ -z "$given_samples" ]] || samples=$given_samples
resnet=false norm_args=()
[[ $network != resnet* ]] || resnet=true norm_args=(--norm "$norm")
if $resnet; then [[ -n "$out" ]] || out=bench/results/$network-$norm${label:+-$label}; fi
[[ -n "$out" ]] || out=bench/results/$network${label:+-$label}
mkdir -p "$out/runs" "$out/unfinished" "$out/checkpoints"
runs=()  # variant:seed, in start order
if [[ -n "$given_runs" ]]; then
  read -ra runs <<<"$given_runs"
else
  for seed in $seeds; do for v in $variants; do runs+=("$v:$seed"); done; done
fi
variants=$(printf '%s\n' "${runs[@]}" | cut -d: -f1 | awk '!seen[$0]++' | tr '\n' ' ')

! $plots || scripts/install-deps.sh --with-plots >&2  # idempotent: python3-matplotlib for the figures
if [[ -z "$program" ]]; then
  cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release >/dev/null
  cmake --build "$build" --target pipeprop_train -j"$(nproc)" >/dev/null
  program=$build/examples/pipeprop_train
fi

# SGD at B = 128 with the scaling rules from B = 32 (pipeprop::optim::scale_hyperparameters, docs/pb-semantics.md §4).
read -r lr128 m128 < <(awk -v lr="$lr" -v m="$momentum" 'BEGIN {
  r = 4; mb = m ^ r; printf "%.10g %.10g\n", r * lr * (1 - mb) / (1 - m), mb }')

common=(--network "$network" "${norm_args[@]}" --epochs "$epochs" --max-samples "$samples" --lr-schedule cosine
        --progress none --data "$data" --log-every 1000)
if $text; then
  common=(--network "$network" --epochs "$epochs" --max-samples "$samples" --max-test-samples "$test_samples"
          --lr-schedule cosine --progress none --data /usr/share/games/fortunes --log-every 1000)
  # AdamW from B to b = 1: lr sqrt(1 / B), betas to the power 1 / B (the header's rule).
  read -r lr_b1 beta1_b1 beta2_b1 < <(awk -v lr="$adamw_lr" -v B="$batch" 'BEGIN {
    printf "%.10g %.10g %.10g\n", lr * sqrt(1 / B), 0.9 ^ (1 / B), 0.99 ^ (1 / B) }')
  two_bw=40  # adamw_2bw: micro-batches per update; AdamW from B to 40 by the same rule
  read -r lr_2bw beta1_2bw beta2_2bw < <(awk -v lr="$adamw_lr" -v B="$batch" -v N="$two_bw" 'BEGIN {
    printf "%.10g %.10g %.10g\n", lr * sqrt(N / B), 0.9 ^ (N / B), 0.99 ^ (N / B) }')
  # Momentum SGD from B to 1 (docs/pb-semantics.md §4, what --reference-batch B does in --mode pb).
  read -r lr1 m1 < <(awk -v lr="$lr" -v m="$momentum" -v B="$batch" 'BEGIN {
    r = 1 / B; mb = m ^ r; printf "%.10g %.10g\n", r * lr * (1 - mb) / (1 - m), mb }')
fi
args_of() {  # the pipeprop_train options of variant $1
  if $text; then text_args_of "$1"; return; fi
  case "$1" in
    sgd32) echo --mode sgd --batch 32 --lr "$lr" --momentum "$momentum" ;;
    sgd128) echo --mode sgd --batch 128 --lr "$lr128" --momentum "$m128" ;;
    none | sc | lwp | lwp_wd | sc_lwp | stash | pipemare)
      echo --mode pb --stages "$stages" --executor sequential --batch 1 --mitigation "$1" --reference-batch 32 \
        --lr "$lr" --momentum "$momentum" ;;
    *) echo "pb_fidelity: unknown variant '$1'" >&2; return 2 ;;
  esac
}
text_args_of() {  # the pipeprop_train options of variant $1 of the text network
  case "$1" in
    adamw) echo --mode sgd --batch "$batch" --optimizer adamw --lr "$adamw_lr" ;;
    sgd) echo --mode sgd --batch "$batch" --optimizer sgd --lr "$lr" --momentum "$momentum" ;;
    sgd1) echo --mode sgd --batch 1 --optimizer sgd --lr "$lr1" --momentum "$m1" ;;
    adamw1) echo --mode sgd --batch 1 --optimizer adamw --lr "$lr_b1" --beta1 "$beta1_b1" --beta2 "$beta2_b1" ;;
    none | sc | lwp | lwp_wd | sc_lwp | stash | pipemare)
      echo --mode pb --stages "$stages" --executor sequential --batch 1 --optimizer sgd --mitigation "$1" \
        --reference-batch "$batch" --lr "$lr" --momentum "$momentum" ;;
    adamw_none | adamw_stash | adamw_pipemare | adamw_lwp_opt | adamw_nesterov)
      echo --mode pb --stages "$stages" --executor sequential --batch 1 --optimizer adamw --mitigation "${1#adamw_}" \
        --lr "$lr_b1" --beta1 "$beta1_b1" --beta2 "$beta2_b1" ;;
    adamw_2bw)
      echo --mode pb --stages "$stages" --executor sequential --batch 1 --optimizer adamw --mitigation 2bw \
        --2bw-accumulation "$two_bw" --lr "$lr_2bw" --beta1 "$beta1_2bw" --beta2 "$beta2_2bw" ;;
    *) echo "pb_fidelity: unknown variant '$1' for $network" >&2; return 2 ;;
  esac
}
for v in $variants; do args_of "$v" >/dev/null; done  # fail on a bad variant before anything runs

# One invocation at a time per study directory (held by this script and its run subshells; the programs close it).
exec 9>"$out/.lock"
flock -n 9 || { echo "pb_fidelity: another invocation is running on $out (lock $out/.lock)" >&2; exit 1; }

argv_of() {  # variant seed: sets run_argv to the run's fresh command line (program first)
  local v=$1 seed=$2 name=$1-seed$2 a
  read -ra a <<<"$(args_of "$v")"
  run_argv=("$program" "${a[@]}" "${common[@]}" "${extra[@]}" --seed "$seed"
            --metrics "$out/unfinished/$name.metrics.jsonl" --checkpoint-out "$out/checkpoints/$name")
}
quoted() { printf '%q ' "$@" | sed 's/ $//'; }  # a command line as one shell-quoted line
run_files=(cmd attempts out log metrics.jsonl status)
finish_move() {  # run name: move its files from unfinished/ to runs/, the status last (idempotent)
  local f
  for f in "${run_files[@]}"; do
    [[ $f == status || ! -f $out/unfinished/$1.$f ]] || mv "$out/unfinished/$1.$f" "$out/runs/$1.$f"
  done
  mv "$out/unfinished/$1.status" "$out/runs/$1.status"
}

# Which runs are finished, and whether the others' recorded commands still match (before anything runs).
pending=() finished=0
for r in "${runs[@]}"; do
  v=${r%%:*} seed=${r#*:} name=${r%%:*}-seed${r#*:}
  argv_of "$v" "$seed"
  cmd=$(quoted "${run_argv[@]}")
  [[ ! -f $out/unfinished/$name.status ]] || finish_move "$name"  # a move interrupted by a kill
  for recorded in "$out/runs/$name.cmd" "$out/unfinished/$name.cmd"; do
    if [[ -f $recorded && "$(sed 's/^[^ ]* //' "$recorded")" != "${cmd#* }" ]]; then
      echo "pb_fidelity: $name was started with other options:" >&2
      echo "  recorded: $(cat "$recorded")" >&2
      echo "  now:      $cmd" >&2
      echo "  (use another --out, or delete the run's files and $out/checkpoints/$name)" >&2
      exit 1
    fi
  done
  if [[ -f $out/runs/$name.status ]]; then finished=$((finished + 1)); else pending+=("$r"); fi
done

{
  echo "# bench/pb_fidelity.sh $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(hostname): $(lscpu | sed -n 's/^Model name: *//p')"
  echo "# flags: $(grep -m1 -ow -e avx2 -e avx512f -e fma /proc/cpuinfo | sort -u | tr '\n' ' ')($(nproc) cores)"
  echo "# load average at start: $(cut -d' ' -f1-3 /proc/loadavg); jobs $jobs; git $(git rev-parse --short HEAD); $program"
  echo "# common: ${common[*]} ${extra[*]}"
  for v in $variants; do echo "# $v: $(args_of "$v")"; done
  echo "# runs: ${runs[*]}; finished before: $finished; to run or resume: ${pending[*]:-none}"
} | tee -a "$out/study.txt" >&2
study_start=$(date +%s)
git_head=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
git diff --quiet HEAD -- include examples 2>/dev/null || git_head+="+changes"  # uncommitted changes to the program
program_sha=$(sha256sum "$program" | cut -c1-16)

iso() { date -u -d "@$1" +%Y-%m-%dT%H:%M:%SZ; }
json_string() { sed -e 's/\\/\\\\/g' -e 's/"/\\"/g'; }  # stdin as the inside of a JSON string
run_one() {  # variant seed
  local v=$1 seed=$2 name=$1-seed$2 u=$out/unfinished/$1-seed$2 ckpt=$out/checkpoints/$1-seed$2
  local start rc=0 attempt=1 from=null log_size=0 finished=false how last t0 resume=()
  argv_of "$v" "$seed"
  [[ -f $u.cmd ]] || echo "$(quoted "${run_argv[@]}")" >"$u.cmd"
  if [[ -f $ckpt/manifest.txt ]]; then
    resume=(--checkpoint-in "$ckpt")
    from=$(sed -n 's/^scalar epoch \([0-9]*\)$/\1/p' "$ckpt/manifest.txt" | head -n 1)
    from=${from:-null}
  fi
  # Attempts are counted by their header lines in the log. One that has no end line in .attempts was killed: its end
  # line is written now, with the time of its last output (metrics or log) as its end.
  if [[ -f $u.log ]]; then
    log_size=$(stat -c %s "$u.log")
    attempt=$(($(grep -c '^pb_fidelity: attempt ' "$u.log" || true) + 1))
    if ((attempt > 1)) && ! grep -q "^{\"attempt\":$((attempt - 1)),\"ended\"" "$u.attempts" 2>/dev/null; then
      t0=$(sed -n 's/^pb_fidelity: attempt [0-9]* \([0-9TZ:-]*\).*/\1/p' "$u.log" | tail -n 1)
      t0=$(date -u -d "$t0" +%s)
      last=$(stat -c %Y "$u.log" "$u.metrics.jsonl" 2>/dev/null | sort -n | tail -n 1)
      printf '{"attempt":%d,"ended":"%s","exit":"killed","wall_seconds":%d}\n' "$((attempt - 1))" "$(iso "$last")" \
        "$((last - t0))" >>"$u.attempts"
    fi
  fi
  start=$(date +%s.%N)
  echo "pb_fidelity: attempt $attempt $(iso "${start%.*}")${resume:+, resumed from the checkpoint of epoch $from}" >>"$u.log"
  printf '{"attempt":%d,"started":"%s","resumed_from_epoch":%s,"git":"%s","program_sha256":"%s","host":"%s","command":"%s"}\n' \
    "$attempt" "$(iso "${start%.*}")" "$from" "$git_head" "$program_sha" "$(hostname)" \
    "$(quoted "${run_argv[@]}" "${resume[@]}" | json_string)" >>"$u.attempts"
  OPENBLAS_NUM_THREADS=1 "${run_argv[@]}" "${resume[@]}" >>"$u.out" 2>>"$u.log" 9>&- || rc=$?
  # Finished: exit 0, or a diverging run (exit 1 with the program's divergence message); anything else (killed,
  # bad options, a failed save) leaves the run unfinished, for the next invocation to resume.
  if ((rc == 0)); then finished=true how="exit 0"
  elif ((rc == 1)) && tail -c +$((log_size + 1)) "$u.log" | grep -q "training diverged"; then finished=true how=diverged
  else how="exit $rc: unfinished (the same command resumes it)"
  fi
  awk -v s="$start" -v e="$(date +%s.%N)" -v rc="$rc" -v n="$attempt" -v t="$(date -u +%Y-%m-%dT%H:%M:%SZ)" 'BEGIN {
    printf "{\"attempt\":%d,\"ended\":\"%s\",\"exit\":%d,\"wall_seconds\":%.1f}\n", n, t, rc, e - s }' >>"$u.attempts"
  if $finished; then
    awk -v rc="$rc" -v v="$v" -v seed="$seed" -v n="$attempt" '
      match($0, /"wall_seconds":[0-9.]+/) { w += substr($0, RSTART + 15, RLENGTH - 15) }
      END { printf "{\"variant\":\"%s\",\"seed\":%s,\"exit\":%d,\"wall_seconds\":%.1f,\"attempts\":%d}\n", v, seed, rc, w, n }' \
      "$u.attempts" >"$u.status"
    finish_move "$name"
    how="$how, $(sed -n 's/.*"wall_seconds":\([0-9.]*\).*/\1 s/p' "$out/runs/$name.status")"
  fi
  echo "pb_fidelity: $v seed $seed (attempt $attempt${resume:+, from epoch $from}): $how$(tail -q -n 1 "$out"/{runs,unfinished}/"$name.out" 2>/dev/null |
    sed -n -e 's/.*"test_accuracy":\([0-9.]*\).*/, test accuracy \1/p' -e 's/.*"validation_loss":\([0-9.]*\).*/, validation loss \1/p')" >&2
}

running=0
for r in "${pending[@]}"; do
  run_one "${r%%:*}" "${r#*:}" &
  running=$((running + 1))
  if ((running >= jobs)); then wait -n || true; running=$((running - 1)); fi
done
wait || true
left=0
for r in "${runs[@]}"; do [[ -f $out/runs/${r%%:*}-seed${r#*:}.status ]] || left=$((left + 1)); done
echo "# load average at end: $(cut -d' ' -f1-3 /proc/loadavg); wall time of the runs $(($(date +%s) - study_start)) s; unfinished runs: $left" |
  tee -a "$out/study.txt" >&2

if compgen -G "$out/runs/*.status" >/dev/null; then /usr/bin/python3 bench/fidelity_table.py "$out"; fi
if $text; then
  title="$network, fortunes, $epochs x $samples sequences of 64 bytes, cosine; PB: --stages $stages, b = 1"
else
  title="$network ($norm), Fashion-MNIST, $epochs x $samples samples, cosine; PB: --stages $stages, b = 1"
fi
! $plots || /usr/bin/python3 bench/plot_fidelity.py "$out" "$out/curves.png" --title "$title"
((left == 0)) || { echo "pb_fidelity: $left run(s) unfinished: the same command resumes them" >&2; exit 3; }
