# cmake -DFUZZER=<libFuzzer program> -DWORK=<dir> -DSEEDS=<seed corpus dir> -DRUNS=<n> -DSEED=<s> [-DEXTRA=a|b]
#       -P run_fuzzer.cmake
# A short fixed-seed libFuzzer run for ctest: WORK/corpus is emptied first (libFuzzer adds the inputs it finds to its
# first corpus directory, which must not be the source tree's seeds), crash / leak / OOM / timeout artifacts go to
# WORK/. Limits: inputs up to 16 KiB; no single allocation over 64 MiB (-malloc_limit_mb: a gzip input of 16 KiB
# inflates to at most ~16 MiB, deflate's ratio being ~1032:1; a plain input implies less); RSS under 2 GiB (ASan's own
# overhead included); 10 s per input. Fails when libFuzzer exits non-zero (it reports the finding and the input).
file(REMOVE_RECURSE ${WORK}/corpus)
file(MAKE_DIRECTORY ${WORK}/corpus)
string(REPLACE "|" ";" extra "${EXTRA}")
execute_process(
  COMMAND ${FUZZER} -seed=${SEED} -runs=${RUNS} -max_len=16384 -malloc_limit_mb=64 -rss_limit_mb=2048 -timeout=10
          -print_final_stats=1 -artifact_prefix=${WORK}/ ${extra} ${WORK}/corpus ${SEEDS}
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
string(LENGTH "${out}" n)
if(n GREATER 6000)
  math(EXPR start "${n} - 6000")
  string(SUBSTRING "${out}" ${start} -1 out)
endif()
message("${out}")
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "fuzzer ${FUZZER} exited with ${rc}: a finding (see above; the input is in ${WORK}/)")
endif()
