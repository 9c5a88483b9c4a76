#!/usr/bin/python3
"""ctest helper for examples/pipeprop_train_reliability.cmake: the main program stops cleanly on SIGINT / SIGTERM.

  check_stop_signal.py PROGRAM DATA WORK SIGNAL [options...]     SIGNAL: INT or TERM

Starts a long run (options + --checkpoint-out WORK/ck, --metrics with --log-every), waits until its metrics file
shows that training has started (an interval line; no blind sleep), sends the signal and checks: the program EXITED
(not killed by the signal) with 128 + the signal's number (130 / 143); stderr says it stopped by the signal and where
the checkpoint was saved; no WORK/ck.tmp-* is left; the checkpoint resumes (--checkpoint-in, exit 0) at the sample
the message names.

  check_stop_signal.py PROGRAM DATA WORK XFSZ [options...]

Runs with a file size limit (RLIMIT_FSIZE, `ulimit -f`) below the checkpoint's size: the save fails with a message
naming the file (EFBIG, "File too large") and exit 1, instead of the program being killed by SIGXFSZ."""
import glob
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
import time

program, data, work, which = sys.argv[1:5]
options = sys.argv[5:]
shutil.rmtree(work, ignore_errors=True)
os.makedirs(work)
ck = os.path.join(work, "ck")
common = ["--network", "mlp", "--max-test-samples", "100", "--progress", "log", "--data", data] + options


def fail(message, err=""):
    print(f"FAIL: {message}\n---- stderr ----\n{err}")
    sys.exit(1)


if which == "XFSZ":
    def limit():
        resource.setrlimit(resource.RLIMIT_FSIZE, (16384, 16384))  # bytes: below an mlp weight tensor's file
    run = subprocess.run([program] + common + ["--epochs", "1", "--checkpoint-out", ck], capture_output=True,
                         text=True, preexec_fn=limit, timeout=600)
    print(run.stderr)
    if run.returncode < 0:
        fail(f"killed by signal {-run.returncode} ({signal.Signals(-run.returncode).name})", run.stderr)
    if run.returncode != 1 or not re.search(r"checkpoint error: .*File too large", run.stderr):
        fail(f"exit code {run.returncode}, expected 1 with a 'File too large' checkpoint error", run.stderr)
    if glob.glob(ck + ".tmp-*") or os.path.exists(ck):
        fail("the failed save left files: " + str(os.listdir(work)), run.stderr)
    print("the write past the file size limit failed with a message, exit 1")
    sys.exit(0)

sig = {"INT": signal.SIGINT, "TERM": signal.SIGTERM}[which]
metrics = os.path.join(work, "metrics.jsonl")
with open(os.path.join(work, "stderr.txt"), "w+") as err_file:
    p = subprocess.Popen([program] + common + ["--epochs", "1000", "--checkpoint-out", ck, "--metrics", metrics,
                                               "--log-every", "64"], stdout=subprocess.DEVNULL, stderr=err_file)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and p.poll() is None:
        if os.path.exists(metrics) and '"interval":true' in open(metrics).read():
            break
        time.sleep(0.05)
    else:
        p.kill()
        err_file.seek(0)
        fail("training did not start (no interval line in the metrics file) or the program ended early",
             err_file.read())
    p.send_signal(sig)
    try:
        rc = p.wait(timeout=300)
    except subprocess.TimeoutExpired:
        p.kill()
        fail("the program did not stop within 300 s of the signal")
    err_file.seek(0)
    err = err_file.read()
print(err)
if rc < 0:
    fail(f"killed by {signal.Signals(-rc).name} instead of stopping (exit code {128 - rc} in a shell)", err)
if rc != 128 + sig:
    fail(f"exit code {rc}, expected {128 + sig}", err)
m = re.search(r"stopped by " + sig.name + r" at epoch (\d+), sample (\d+) .*checkpoint: saved to " + re.escape(ck),
              err)
if not m:
    fail("no message 'stopped by " + sig.name + " at epoch E, sample N ... checkpoint: saved to " + ck + "'", err)
leftovers = glob.glob(ck + ".tmp-*") + glob.glob(ck + ".old-*") + glob.glob(metrics + ".tmp-*")
if leftovers:
    fail("temporary files left: " + " ".join(leftovers), err)
epoch, sample = m.group(1), m.group(2)
resume = subprocess.run([program] + common + ["--epochs", epoch, "--checkpoint-in", ck], capture_output=True,
                        text=True, timeout=600)
if resume.returncode != 0:
    fail(f"resuming from the checkpoint saved at the signal failed (exit code {resume.returncode})", resume.stderr)
if f"resumed from {ck} at epoch {epoch}, sample {sample}" not in resume.stderr:
    fail(f"the resumed run did not start at epoch {epoch}, sample {sample}", resume.stderr)
print(f"stopped by {sig.name} with exit code {rc}, saved at epoch {epoch}, sample {sample}; the resume finished")
