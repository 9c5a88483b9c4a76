#!/bin/bash
# kill -9 at random times while the main program writes checkpoints (docs/howto-resume.md: checkpoints are
# written atomically). Usage:
#   kill_during_checkpoint.sh PROGRAM DATA_DIR WORK_DIR [KILLS=20] [SEED=12]
# Makes a tiny Fashion-MNIST subset (512 training, 128 test images, plain IDX) from DATA_DIR in WORK_DIR/data, writes
# a first checkpoint, then KILLS times: resumes from the checkpoint with --checkpoint-out on the same directory and
# an epoch of 256 samples (a save every few milliseconds of training, so most of the run is spent saving), waits
# until the run has saved at least once, sleeps a random 0-250 ms (fixed seed) and kills it with SIGKILL. After each
# kill the checkpoint must load (the program resumes from it with --epochs 0, exit 0) and hold the old or a newer
# epoch, never an older one. Prints how many kills hit a save in progress (its temporary directory was left).
set -u
program=$1
data=$2
work=$3
kills=${4:-20}
RANDOM=${5:-12}

fail() {
    echo "FAIL: $*" >&2
    exit 1
}

rm -rf "$work"
mkdir -p "$work/data" || fail "cannot create $work"
ck="$work/checkpoint"

# ---- a tiny dataset (the full one takes seconds to load) ----
be32() { printf "$(printf '\\x%02x\\x%02x\\x%02x\\x%02x' $((($1 >> 24) & 255)) $((($1 >> 16) & 255)) $((($1 >> 8) & 255)) $(($1 & 255)))"; }
subset() {  # source file, target name, magic, count, bytes per item, header bytes
    local src=$data/$1.gz
    [ -f "$src" ] || src=$data/$1
    [ -f "$src" ] || fail "$data: no $1(.gz)"
    {
        be32 "$3"
        be32 "$4"
        if [ "$6" = 16 ]; then
            be32 28
            be32 28
        fi
        gzip -dcf "$src" | tail -c +$(($6 + 1)) | head -c $(($4 * $5))
    } >"$work/data/$2"
}
subset train-images-idx3-ubyte train-images-idx3-ubyte 2051 512 784 16
subset train-labels-idx1-ubyte train-labels-idx1-ubyte 2049 512 1 8
subset t10k-images-idx3-ubyte t10k-images-idx3-ubyte 2051 128 784 16
subset t10k-labels-idx1-ubyte t10k-labels-idx1-ubyte 2049 128 1 8

common=(--network mlp --batch 32 --max-samples 256 --max-test-samples 64 --data "$work/data" --progress none)
epoch_of() { sed -n 's/^scalar epoch \([0-9]*\)$/\1/p' "$ck/manifest.txt" 2>/dev/null; }

timeout 60 "$program" "${common[@]}" --epochs 1 --checkpoint-out "$ck" >"$work/first.log" 2>&1 ||
    fail "the first run failed: $(cat "$work/first.log")"
previous=$(epoch_of)
[ "$previous" = 1 ] || fail "the first checkpoint holds epoch '$previous', expected 1"

in_save=0
start=$SECONDS
for ((i = 1; i <= kills; ++i)); do
    "$program" "${common[@]}" --epochs 1000000 --checkpoint-in "$ck" --checkpoint-out "$ck" >"$work/run.log" 2>&1 &
    pid=$!
    # Wait until this run has saved once (the manifest shows a newer epoch), at most 30 s.
    for ((w = 0; w < 1500; ++w)); do
        e=$(epoch_of)
        [ -n "$e" ] && [ "$e" -gt "$previous" ] && break
        kill -0 "$pid" 2>/dev/null || fail "kill $i: the run ended by itself: $(cat "$work/run.log")"
        sleep 0.02
    done
    [ "$w" -lt 1500 ] || {
        kill -9 "$pid"
        fail "kill $i: the run did not save within 30 s"
    }
    sleep "0.$(printf '%03d' $((RANDOM % 250)))"
    kill -9 "$pid"
    wait "$pid" 2>/dev/null
    rc=$?
    [ "$rc" = 137 ] || fail "kill $i: the run ended with exit code $rc before the kill: $(cat "$work/run.log")"
    if compgen -G "$ck.tmp-*" >/dev/null; then in_save=$((in_save + 1)); fi
    # The checkpoint must load and resume (exit 0), and hold the old or a newer epoch.
    if ! timeout 60 "$program" "${common[@]}" --epochs 0 --checkpoint-in "$ck" >"$work/check.log" 2>&1; then
        fail "kill $i: the checkpoint does not load: $(cat "$work/check.log")"
    fi
    e=$(epoch_of)
    [ -n "$e" ] && [ "$e" -ge "$previous" ] || fail "kill $i: the checkpoint holds epoch '$e', older than $previous"
    echo "kill $i: checkpoint loads, epoch $previous -> $e"
    previous=$e
    rm -rf "$ck".tmp-*  # left by the killed save (cleaning them is not what this test checks)
done
echo "PASS: $kills kills with SIGKILL, $in_save of them during a save (a temporary directory was left), the" \
    "checkpoint loaded after every one; $((SECONDS - start)) s"
