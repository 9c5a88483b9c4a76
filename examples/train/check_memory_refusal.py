#!/usr/bin/python3
"""ctest helper for examples/pipeprop_train_reliability.cmake: an engine that cannot fit in the memory the process can
get is refused before it is allocated, with its memory estimate and the options that lower it
(examples/train/memory_check.hpp); the same run under a larger limit trains.

  check_memory_refusal.py PROGRAM DATA LIMIT_MIB CONTROL_LIMIT_MIB REMEDY_REGEX [options...]

Runs PROGRAM --network mlp --data DATA options... under an address-space limit (RLIMIT_AS, `ulimit -v`) of LIMIT_MIB
MiB and checks: exit 1, not killed, no std::bad_alloc; stderr says "not enough memory: the --mode <mode> engine needs
about <size> (activations and stashes <size> over <S> stages, ...), <size> are available (the address-space limit
...); lower it with ..." naming REMEDY_REGEX; the run's peak resident memory stayed below the estimate (nothing was
allocated for the engine). Then the same run under CONTROL_LIMIT_MIB MiB must succeed (the estimate refuses only what
cannot fit); CONTROL_LIMIT_MIB "none": no control run (one that fits would train too long for a test)."""
import re
import resource
import signal
import subprocess
import sys

program, data, limit_mib, control_mib, remedy = sys.argv[1:6]
options = sys.argv[6:]
UNITS = {"kB": 1e3, "MB": 1e6, "GB": 1e9}


def run(limit):
    def limited():
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    return subprocess.run([program, "--network", "mlp", "--max-test-samples", "100", "--progress", "log", "--data",
                           data] + options, capture_output=True, text=True, preexec_fn=limited, timeout=600)


def fail(message, err):
    print(f"FAIL: {message}\n---- stderr ----\n{err}")
    sys.exit(1)


r = run(int(limit_mib) * 1024 * 1024)
peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024  # of the one run so far, in bytes
print(r.stderr)
if r.returncode < 0:
    fail(f"killed by {signal.Signals(-r.returncode).name}", r.stderr)
if r.returncode != 1:
    fail(f"exit code {r.returncode}, expected 1", r.stderr)
if "bad_alloc" in r.stderr:
    fail("the engine was allocated (std::bad_alloc) instead of refused before", r.stderr)
size = r"([\d.]+) (kB|MB|GB)"
pattern = (r"not enough memory: the --mode \w+ engine needs about " + size + r" \(activations and stashes " + size +
           r" over \d+ stages?, .*\), " + size + r" are available \(the address-space limit .*\); lower it with .*" +
           remedy)
m = re.search(pattern, r.stderr, re.S)
if not m:
    fail("no message matching " + pattern, r.stderr)
need = float(m.group(1)) * UNITS[m.group(2)]
available = float(m.group(5)) * UNITS[m.group(6)]
if not need > available:
    fail(f"refused although the estimate {need:.0f} B does not exceed the {available:.0f} B available", r.stderr)
if not peak < need:
    fail(f"the refused run reached {peak} bytes resident, the engine's estimate is {need:.0f}: it allocated", r.stderr)
print(f"refused before allocating: estimate {need:.3g} B > {available:.3g} B available; peak resident {peak:.3g} B")
if control_mib == "none":
    sys.exit(0)
control = run(int(control_mib) * 1024 * 1024)
if control.returncode != 0:
    fail(f"the same run under {control_mib} MiB failed with exit code {control.returncode}", control.stderr)
print(f"the same run under {control_mib} MiB trains")
