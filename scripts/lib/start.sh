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

# A scratch folder ($work) and the list of processes started ($pids, which start_listening
# appends to): at exit, or on INT or TERM, the processes are sent TERM and waited for, and the
# folder removed.
scratch() {
  work=$(mktemp -d)
  pids=()
  trap scratch_cleanup EXIT INT TERM
}
scratch_cleanup() {
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}

# CPU ticks (user + system) process $1 has used.
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
