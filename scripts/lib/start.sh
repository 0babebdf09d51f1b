# Sourced by the demo and the benchmarks: start a server and wait until it listens.
#
#   start_listening OUT_PREFIX CMD...
#
# Runs CMD in the background with stdout to OUT_PREFIX.stdout and stderr to OUT_PREFIX.stderr,
# and waits (up to 60 s) for the `listening on URL` line every server of this project (and the
# benchmarks' peers) prints. Sets $started_url (e.g. http://127.0.0.1:41234) and $started_pid, and
# appends the pid to the caller's $pids array. If CMD exits first or never prints the line, the
# script exits with CMD's stderr.
start_listening() {
  local prefix=$1; shift
  : >"$prefix.stdout"   # exists before the loop reads it (the background redirection may come later)
  "$@" >"$prefix.stdout" 2>"$prefix.stderr" &
  started_pid=$!
  pids+=("$started_pid")
  for _ in $(seq 1 600); do
    started_url=$(sed -n 's/^listening on //p' "$prefix.stdout" | head -n 1)
    [ -n "$started_url" ] && return 0
    if ! kill -0 "$started_pid" 2>/dev/null; then
      echo "exited before listening: $*" >&2; cat "$prefix.stderr" >&2; exit 1
    fi
    sleep 0.1
  done
  echo "not listening within 60 s: $*" >&2; cat "$prefix.stderr" >&2; exit 1
}
