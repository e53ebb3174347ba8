#!/usr/bin/env bash
# bioqpfs developer entry point: the two commands in README.md.
#
#   bash dev.sh demo   install what is missing, then select a gene panel on bundled SRBCT
#   bash dev.sh test   install what is missing, then run every test suite
#
# Idempotent: the virtual environment in .venv is rebuilt only when pyproject.toml
# changes (stamp file .venv/.bioqpfs-stamp holds its checksum), so re-runs are quick.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"
ROOT=$(pwd)
VENV="$ROOT/.venv"
PY="$VENV/bin/python"
export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1

log() { printf '[dev.sh] %s\n' "$*" >&2; }

as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

apt_install() {
  # apt_install PKG... : install the Debian packages that are not installed yet.
  local missing=()
  for p in "$@"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
  [ ${#missing[@]} -eq 0 ] && return 0
  log "installing Debian packages: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  as_root apt-get update -qq
  as_root apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

ensure_python() {
  local base=${PYTHON:-python3}
  command -v "$base" >/dev/null || apt_install python3
  "$base" -c 'import sys; sys.exit(sys.version_info < (3, 11))' || {
    log "bioqpfs needs Python >= 3.11 (found $("$base" --version 2>&1)); set PYTHON=/path/to/python3.11"; exit 1; }
  local want; want=$(cat pyproject.toml | sha256sum | cut -d' ' -f1)-$1
  if [ -x "$PY" ] && [ "$(cat "$VENV/.bioqpfs-stamp" 2>/dev/null)" = "$want" ]; then return 0; fi
  if [ ! -x "$PY" ]; then
    "$base" -m venv "$VENV" 2>/dev/null || { apt_install python3-venv; rm -rf "$VENV"; "$base" -m venv "$VENV"; }
  fi
  log "installing bioqpfs and its dependencies into .venv ($1)"
  "$PY" -m pip install -q --upgrade pip >/dev/null
  "$PY" -m pip install -q -e ".[$1]"
  echo "$want" > "$VENV/.bioqpfs-stamp"
}

cmd=${1:-}
shift || true
case "$cmd" in
  demo)
    ensure_python dev
    mkdir -p results
    "$VENV/bin/bioqpfs" select --dataset srbct --groupby class --method qpfs --n-genes 20 \
      -o results/srbct_qpfs.h5ad --tsv results/srbct_qpfs.tsv "$@"
    log "wrote results/srbct_qpfs.h5ad and results/srbct_qpfs.tsv"
    ;;
  test)
    ensure_python dev
    "$PY" -m pytest -q "$@"
    ;;
  *)
    echo "usage: bash dev.sh demo|test [extra args]" >&2; exit 2 ;;
esac
