# bench/merge_options.sh (sourced by the bench scripts): a script's default pipeprop_train options, minus those the
# user's extra options name again, followed by the extra options (CLI11 rejects an option given twice).
# Usage: merge_options RESULT_ARRAY_NAME "${defaults[@]}" -- "$@"    (defaults: "--name value" pairs)
merge_options() {
  local -n merged=$1
  shift
  local defaults=()
  while (($# > 0)) && [[ $1 != -- ]]; do
    defaults+=("$1")
    shift
  done
  (($# > 0)) && shift  # the --
  merged=()
  local i extra overridden
  for ((i = 0; i < ${#defaults[@]}; i += 2)); do
    overridden=0
    for extra in "$@"; do
      [[ $extra == "${defaults[i]}" || $extra == "${defaults[i]}="* ]] && overridden=1
    done
    ((overridden)) || merged+=("${defaults[i]}" "${defaults[i + 1]}")
  done
  merged+=("$@")
}
