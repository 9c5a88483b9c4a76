#!/usr/bin/python3
"""ctest helper for examples/pipeprop_train_reliability.cmake: running out of memory is reported with what was being
built, the run's network and mode and the options that lower it, not as a bare "std::bad_alloc".

  check_out_of_memory.py PROGRAM DATA LIMIT_MIB CONTROL EXPECTED_ACTIVITY_REGEX [options...]

Runs PROGRAM --network mlp --data DATA options... under an address-space limit (RLIMIT_AS, `ulimit -v`) of
LIMIT_MIB MiB and checks: exit 1, not killed; stderr says "out of memory (std::bad_alloc) while <activity>" with the
activity matching the regex, names --network mlp and the mode, and suggests --batch. With CONTROL "yes", a control
run with the same limit and --batch 32 on 320 samples must succeed (the limit is not simply too low to start; "no"
where the limit is meant to be below what the data need)."""
import re
import resource
import signal
import subprocess
import sys

program, data, limit_mib, control_wanted, activity = sys.argv[1:6]
options = sys.argv[6:]
limit = int(limit_mib) * 1024 * 1024


def limited():
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


def run(args):
    return subprocess.run([program, "--network", "mlp", "--max-test-samples", "100", "--progress", "log", "--data",
                           data] + args, capture_output=True, text=True, preexec_fn=limited, timeout=600)


def fail(message, err):
    print(f"FAIL: {message}\n---- stderr ----\n{err}")
    sys.exit(1)


control = run(["--batch", "32", "--max-samples", "320"]) if control_wanted == "yes" else None
if control is not None and control.returncode != 0:
    fail(f"the control run (--batch 32) failed under the same limit with exit code {control.returncode}",
         control.stderr)
r = run(options)
print(r.stderr)
if r.returncode < 0:
    fail(f"killed by {signal.Signals(-r.returncode).name}", r.stderr)
if r.returncode != 1:
    fail(f"exit code {r.returncode}, expected 1", r.stderr)
pattern = r"out of memory \(std::bad_alloc\) while " + activity + r".*--network mlp.*--mode \w+.*Lower --batch"
if not re.search(pattern, r.stderr, re.S):
    fail("no message matching " + pattern, r.stderr)
print("the out-of-memory message names the activity, the network, the mode and what lowers it")
