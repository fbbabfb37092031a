# Sourced by hack/demo.sh: `step CMD ARGS...` prints "$ " and the command, each argument
# shell-quoted (Python's shlex.join: a shell, or shlex.split, reads back the same argv), on
# stderr in bold, then runs it; `say TEXT` prints a "# TEXT" heading.
step() {
  printf '\n\033[1m$ %s\033[0m\n' "$("${py:-python3}" -c 'import shlex, sys; print(shlex.join(sys.argv[1:]))' "$@")" >&2
  "$@"
}
say() { printf '\n\033[1m# %s\033[0m\n' "$*"; }
