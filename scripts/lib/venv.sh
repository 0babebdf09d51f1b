# shellcheck shell=bash
# Sourced by models/venv.sh, e2e/python/venv.sh and scripts/fetch-k8s-tools.sh: one virtual
# environment under .cache.
#
#   make_venv CALLER VENV REQUIREMENTS
#
# Makes (or reuses) the virtual environment VENV with the packages pinned in REQUIREMENTS (PyPI),
# and prints the path of its python. Reinstalls when the requirements file changed since the
# last install. Where `python3 -m venv` is missing (Debian without python3-venv) it installs
# python3-venv with apt-get (through sudo when not root). CALLER names the script in its messages; everything but
# the python's path goes to stderr.
make_venv() {
  local caller=$1 venv=$2 req=$3
  if ! cmp -s "$req" "$venv/.requirements.txt" 2>/dev/null; then
    echo "$caller: installing $req into $venv" >&2
    rm -rf "$venv"
    mkdir -p "$(dirname "$venv")"
    if ! python3 -m venv "$venv" >&2 2>/dev/null; then
      rm -rf "$venv"
      if command -v apt-get >/dev/null; then
        local sudo=""
        [ "$(id -u)" = 0 ] || sudo=sudo
        $sudo apt-get update -qq >&2 && DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq python3-venv >&2
        python3 -m venv "$venv" >&2
      else
        echo "$caller: python3 -m venv failed; install python3-venv" >&2
        return 1
      fi
    fi
    "$venv/bin/pip" install -q --disable-pip-version-check -r "$req" >&2
    cp "$req" "$venv/.requirements.txt"
  fi
  echo "$venv/bin/python"
}
