# bench/study_background.sh: sourced by the resumable study drivers (bench/pb_depth_study.sh,
# bench/transformer_study.sh): start a driver detached, stop a detached one, tabulate a study.
#   study_modes OUT NAME TITLE DRIVER ARG...  ARG: the driver's arguments after NAME; with --background,
#                                             --stop or --collect among them it does that and exits, else returns
#   study_start_background OUT DRIVER ARG...  run DRIVER ARG... detached (setsid nohup; autogroup nice 19 and nice
#                                             19; output appended to OUT/driver.log; its process group in
#                                             OUT/driver.pid, neither committed) and return
#   study_stop OUT NAME                       SIGTERM to the process group of OUT/driver.pid; waits up to 30 s
# A study stopped or killed this way loses at most the current epoch of each running run (its checkpoints).

study_start_background() {
  local out=$1 driver=$2
  shift 2
  mkdir -p "$out"
  # setsid makes a new scheduling autogroup, in which nice alone does not yield to the other sessions' work (builds):
  # the autogroup's own nice value (/proc/self/autogroup, Linux) does.
  setsid nohup sh -c 'echo 19 >/proc/self/autogroup 2>/dev/null; exec nice -n 19 "$0" "$@"' "$driver" "$@" \
    >>"$out/driver.log" 2>&1 </dev/null &
  echo "$!" >"$out/driver.pid"  # setsid: the process group of the study (setsid does not fork here)
  echo "$(basename "$driver" .sh): running in the background (process group $!, log $out/driver.log)"
}

study_stop() {
  local out=$1 name=$2 pid
  pid=$(cat "$out/driver.pid" 2>/dev/null || true)
  if [[ -n $pid && "$(ps -o pgid= -p "$pid" 2>/dev/null | tr -d ' ')" == "$pid" ]]; then
    kill -TERM -- "-$pid"
    for _ in $(seq 30); do kill -0 -- "-$pid" 2>/dev/null || break; sleep 1; done
    echo "$(basename "$0" .sh): stopped process group $pid (the same command with --background resumes)"
  else
    echo "$(basename "$0" .sh): no $name study running from $out/driver.pid" >&2
  fi
}

study_modes() {
  local out=$1 name=$2 title=$3 driver=$4 a background=false stop=false collect=false
  shift 4
  local rest=()
  for a in "$@"; do
    case $a in
      --background) background=true ;;
      --stop) stop=true ;;
      --collect) collect=true ;;
      *) rest+=("$a") ;;
    esac
  done
  if $background; then study_start_background "$out" "$driver" "$name" "${rest[@]}"; exit 0; fi
  if $stop; then study_stop "$out" "$name"; exit 0; fi
  if $collect; then
    /usr/bin/python3 bench/fidelity_table.py "$out"
    /usr/bin/python3 bench/plot_fidelity.py "$out" "$out/curves.png" --title "$title"
    exit 0
  fi
}
