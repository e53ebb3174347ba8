#!/usr/bin/env bash
# bioqpfs developer entry point: the two commands in README.md.
#
#   bash dev.sh demo   install what is missing, then select a gene panel on bundled SRBCT
#   bash dev.sh test   install what is missing, then run every test suite: ruff (lint) and pytest on
#                      Debian's Python (.venv), the R package check, and pytest again on the newest Python found
#                      with the newest scanpy/anndata/numpy/scipy/scikit-learn (.venv-newest)
#
# Idempotent: the virtual environment in .venv is rebuilt only when pyproject.toml
# changes (stamp file .venv/.bioqpfs-stamp holds its checksum), so re-runs are quick.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"
ROOT=$(pwd)
VENV="$ROOT/.venv"
PY="$VENV/bin/python"
export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1
# A fresh Debian machine (or container) has no locale set: R then runs in the C locale and
# R CMD check warns about the package's UTF-8 sources. C.UTF-8 is always there on Debian 12.
case "$(locale charmap 2>/dev/null || true)" in
  UTF-8) ;;
  *) export LANG=C.UTF-8 LC_ALL=C.UTF-8 ;;
esac

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
  # the stamp lists every extras set installed for this pyproject.toml (demo: dev; test: dev,r,bench)
  if [ -x "$PY" ] && grep -qxF "$want" "$VENV/.bioqpfs-stamp" 2>/dev/null; then return 0; fi
  if [ ! -x "$PY" ]; then
    "$base" -m venv "$VENV" >/dev/null 2>&1 || { apt_install python3-venv; rm -rf "$VENV"; "$base" -m venv "$VENV"; }
  fi
  log "installing bioqpfs and its dependencies into .venv ($1)"
  "$PY" -m pip install -q --upgrade pip >/dev/null
  "$PY" -m pip install -q -e ".[$1]"
  { grep -F "${want%%-*}-" "$VENV/.bioqpfs-stamp" 2>/dev/null || true; echo "$want"; } > "$VENV/.bioqpfs-stamp.new"
  mv "$VENV/.bioqpfs-stamp.new" "$VENV/.bioqpfs-stamp"
}

# R 4.2 and the Bioconductor packages come from Debian (CRAN/Bioconductor are not reachable);
# rpy2 3.5.17 compiles against R and needs the -dev packages of the libraries R links to.
R_DEBS="r-base-core r-cran-quadprog r-cran-reticulate r-cran-testthat r-cran-knitr r-cran-rmarkdown
  r-bioc-biobase r-bioc-summarizedexperiment r-bioc-singlecellexperiment r-bioc-delayedarray r-bioc-biocstyle
  r-bioc-all"
RPY2_BUILD_DEBS="gcc python3-dev libpcre2-dev libblas-dev liblzma-dev libbz2-dev zlib1g-dev libtirpc-dev libicu-dev"

ensure_r() {
  # shellcheck disable=SC2086
  apt_install $R_DEBS $RPY2_BUILD_DEBS
}

r_package_check() {
  # R CMD build + R CMD check --no-manual of the R package at the repository root, in a temporary
  # directory holding only the package files (R CMD build would otherwise copy .venv and data/).
  # The vignette is rendered by R CMD build and its code run again by R CMD check
  # (--no-build-vignettes skips only a third, identical rendering). Fails on any ERROR or WARNING.
  local tmp rc=0 status
  tmp=$(mktemp -d)
  mkdir -p "$tmp/bioqpfs/tests" "$tmp/bioqpfs/vignettes"
  cp -r DESCRIPTION NAMESPACE LICENSE .Rbuildignore R man "$tmp/bioqpfs/"
  cp -r tests/testthat.R tests/testthat "$tmp/bioqpfs/tests/"
  cp vignettes/bioqpfs.Rmd "$tmp/bioqpfs/vignettes/"
  log "R CMD build + R CMD check --no-manual (R package, testthat suite, ALL vignette)"
  if ! (cd "$tmp" && BIOQPFS_PYTHON="$PY" R CMD build bioqpfs >build.log 2>&1); then
    cat "$tmp/build.log" >&2; rm -rf "$tmp"; return 1
  fi
  (cd "$tmp" && BIOQPFS_PYTHON="$PY" R CMD check --no-manual --no-build-vignettes bioqpfs_*.tar.gz >check.log 2>&1) || rc=1
  # the README's install route (R CMD build, then R CMD INSTALL of the tarball) must carry the vignette
  mkdir -p "$tmp/lib"
  if ! (cd "$tmp" && R CMD INSTALL -l lib bioqpfs_*.tar.gz >install.log 2>&1 && R_LIBS="$tmp/lib" Rscript -e \
        'v <- tools::getVignetteInfo("bioqpfs"); stopifnot("bioqpfs.Rmd" %in% v[, "File"]); cat(v[, "Title"], "\n")' \
        >>install.log 2>&1); then
    log "the tarball installed with R CMD INSTALL has no vignette 'bioqpfs':"; cat "$tmp/install.log" >&2; rc=1
  fi
  grep -E '\.\.\. (WARNING|ERROR|NOTE)' "$tmp/check.log" >&2 || true
  status=$(grep -E '^Status:' "$tmp/check.log" || echo "Status: no status (check did not finish)")
  case "$status" in *ERROR*|*WARNING*|*"no status"*) rc=1 ;; esac
  if [ $rc -ne 0 ]; then
    tail -n 60 "$tmp/check.log" >&2
    cat "$tmp"/bioqpfs.Rcheck/tests/testthat.Rout.fail 2>/dev/null | tail -n 80 >&2 || true
  else
    grep -hE '^\[ FAIL|^══ |^\[ OK' "$tmp"/bioqpfs.Rcheck/tests/testthat.Rout 2>/dev/null | tail -n 3 >&2 || true
  fi
  log "R package check: $status"
  rm -rf "$tmp"
  return $rc
}

# ---- the newest-stack leg: the suite again on the newest Python found, with the newest releases
# of scanpy/anndata/numpy/scipy/scikit-learn (scanpy >= 1.12 and anndata >= 0.13 need Python >= 3.12,
# so the Debian 3.11 .venv above keeps the older ones). NEWEST_PYTHON=/path/to/python picks it.
NEWEST_VENV="$ROOT/.venv-newest"
# Both pytest legs run on 2 processes (pytest-xdist, from the dev extra), each taking whole test files (module
# fixtures are built once): 2,700 tests in 6.6 min instead of 14.6 min on 2 cores.  A later -n in the extra args
# wins (bash dev.sh test -n 0: one process).
PYTEST_PARALLEL="-n 2 --dist loadfile"

find_newest_python() {
  # prints "VERSION PATH" of the newest interpreter >= 3.12 (PATH, pyenv, /usr/local, /opt), nothing if none
  local c cands=() best="" best_v="" v
  [ -n "${NEWEST_PYTHON:-}" ] && cands+=("$NEWEST_PYTHON")
  for c in python3.15 python3.14 python3.13 python3.12; do
    command -v "$c" >/dev/null 2>&1 && cands+=("$(command -v "$c")")
  done
  for c in "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.*/bin/python3 /usr/local/bin/python3.* /opt/python*/bin/python3; do
    [ -x "$c" ] && cands+=("$c")
  done
  for c in ${cands[@]+"${cands[@]}"}; do
    v=$("$c" -c 'import sys, venv; v = sys.version_info; print(f"{v[0]}.{v[1]}.{v[2]}" if v >= (3, 12) else "")' \
        2>/dev/null) || continue
    [ -n "$v" ] || continue
    if [ -z "$best_v" ] || [ "$(printf '%s\n%s\n' "$best_v" "$v" | sort -V | tail -n 1)" != "$best_v" ]; then
      best_v=$v; best=$c
    fi
  done
  [ -n "$best" ] && echo "$best_v $best"
  return 0
}

newest_stack_leg() {
  # the test suite (without the R parts) in .venv-newest on the newest interpreter; skipped, with the
  # reason, where the machine has no Python >= 3.12 (or NEWEST_STACK=0)
  local found version python want
  if [ "${NEWEST_STACK:-1}" = 0 ]; then log "newest-stack leg skipped: NEWEST_STACK=0"; return 0; fi
  found=$(find_newest_python)
  if [ -z "$found" ]; then
    log "newest-stack leg SKIPPED: no Python >= 3.12 found (looked for python3.12-3.15 on PATH, in" \
        "${PYENV_ROOT:-$HOME/.pyenv}/versions, /usr/local/bin, /opt); scanpy >= 1.12 / anndata >= 0.13 need one." \
        "Set NEWEST_PYTHON=/path/to/python3.13 to run it."
    return 0
  fi
  version=${found%% *}; python=${found#* }
  want="$(sha256sum < pyproject.toml | cut -d' ' -f1)-$python-$version"
  if ! { [ -x "$NEWEST_VENV/bin/python" ] && grep -qxF "$want" "$NEWEST_VENV/.bioqpfs-stamp" 2>/dev/null; }; then
    log "newest-stack leg: building .venv-newest on Python $version ($python) with the newest releases"
    rm -rf "$NEWEST_VENV"
    "$python" -m venv "$NEWEST_VENV" || { log "newest-stack leg: cannot create a venv with $python"; return 1; }
    "$NEWEST_VENV/bin/python" -m pip install -q --upgrade pip >/dev/null
    "$NEWEST_VENV/bin/python" -m pip install -q --upgrade --upgrade-strategy eager -e ".[dev]" || return 1
    echo "$want" > "$NEWEST_VENV/.bioqpfs-stamp"
  fi
  log "newest-stack leg: Python $version, $("$NEWEST_VENV/bin/python" -c 'from importlib.metadata import version as v
print(", ".join(f"{p} {v(p)}" for p in ("scanpy", "anndata", "numpy", "scipy", "scikit-learn", "pandas")))')"
  # R is covered by the first leg (rpy2 is pinned to the Debian R build there), and so is the full
  # re-render of the committed vignette (a check of the document, not of the stack; ~1 min)
  "$NEWEST_VENV/bin/python" -m pytest -q -p no:cacheprovider $PYTEST_PARALLEL --ignore=tests/test_r.py \
    --deselect tests/test_vignette.py::test_committed_rendering_is_fresh
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
    ensure_r
    ensure_python dev,r,bench
    rc=0
    # the linter first (pyflakes, import order, numpy docstrings; configured in pyproject.toml [tool.ruff])
    log "ruff check (pyflakes, import order, numpy docstring convention)"
    "$PY" -m ruff check . || rc=1
    # the R package check (testthat + vignette) and the newest-stack leg run with the full suite,
    # i.e. without extra args; the R check (mostly one R process) runs beside the two pytest legs and
    # its report is printed at the end, which keeps the whole command under 30 minutes on 2 cores
    r_pid=
    if [ $# -eq 0 ]; then
      r_log=$(mktemp)
      r_package_check >"$r_log" 2>&1 &
      r_pid=$!
    fi
    BIOQPFS_REQUIRE_R=1 "$PY" -m pytest -q $PYTEST_PARALLEL "$@" || rc=$?
    if [ -n "$r_pid" ]; then
      newest_stack_leg || rc=1
      wait "$r_pid" || rc=1
      cat "$r_log" >&2
      rm -f "$r_log"
    fi
    exit $rc
    ;;
  *)
    echo "usage: bash dev.sh demo|test [extra args]" >&2; exit 2 ;;
esac
