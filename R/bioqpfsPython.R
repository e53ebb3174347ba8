#' The Python interpreter that runs the bioqpfs engine
#'
#' bioqpfs does its work in Python (the `bioqpfs` module), driven through
#' \pkg{reticulate}.  This function says which interpreter is used, looking in
#' this order:
#' 1. `getOption("bioqpfs.python")`;
#' 2. the environment variable `BIOQPFS_PYTHON`;
#' 3. reticulate's own choices: the environment variable `RETICULATE_PYTHON`,
#'    then an interpreter chosen with `reticulate::use_python()`,
#'    `use_virtualenv()` or `use_condaenv()` before the first call;
#' 4. `.venv/bin/python` in the working directory or one of its parents (the
#'    environment that `bash dev.sh test` creates in the bioqpfs repository);
#' 5. `python3` on the `PATH`, if it can import `bioqpfs`.
#'
#' An interpreter named by 1--3 is used as given (an error says so if it
#' cannot import `bioqpfs`); the others are used only if they can import
#' `bioqpfs`.  Once reticulate has started Python in the session, that
#' interpreter is the one used (Python cannot be changed without restarting R).
#'
#' @param check Logical: if `TRUE`, stop with an error naming
#'   `options(bioqpfs.python = ...)` and `BIOQPFS_PYTHON` when no usable
#'   interpreter is found; if `FALSE`, return `NULL` instead.
#'
#' @return The path of the interpreter (a character string), with attribute
#'   `"source"` saying where it was found; or `NULL` (when `check = FALSE`).
#'
#' @examples
#' bioqpfsPython(check = FALSE)
#'
#' @export
bioqpfsPython <- function(check = TRUE) {
    tried <- character(0)
    explicit <- list(
        "option bioqpfs.python" = getOption("bioqpfs.python", ""),
        "environment variable BIOQPFS_PYTHON" = Sys.getenv("BIOQPFS_PYTHON", ""),
        "environment variable RETICULATE_PYTHON" = Sys.getenv("RETICULATE_PYTHON", ""),
        "reticulate::use_python()" = .reticulateChoice())
    for (src in names(explicit)) {
        path <- explicit[[src]]
        if (!is.null(path) && nzchar(path)) {
            if (dir.exists(path)) path <- file.path(path, "bin", "python")  # a virtual environment's directory
            if (!file.exists(path)) {
                stop("bioqpfs: the Python interpreter set by the ", src, " does not exist: ", path,
                     "\nSet options(bioqpfs.python = \"/path/to/python\") or the environment variable ",
                     "BIOQPFS_PYTHON to a Python that can import bioqpfs.", call. = FALSE)
            }
            return(structure(path, source = src))
        }
    }
    dir <- normalizePath(getwd(), mustWork = FALSE)
    repeat {
        candidate <- file.path(dir, ".venv", "bin", "python")
        if (file.exists(candidate)) {
            tried <- c(tried, candidate)
            if (.canImportBioqpfs(candidate)) return(structure(candidate, source = ".venv"))
        }
        parent <- dirname(dir)
        if (identical(parent, dir)) break
        dir <- parent
    }
    python3 <- Sys.which("python3")
    if (nzchar(python3)) {
        tried <- c(tried, python3)
        if (.canImportBioqpfs(python3)) return(structure(unname(python3), source = "PATH"))
    }
    if (!check) return(NULL)
    stop("bioqpfs: no Python interpreter that can import the 'bioqpfs' module was found",
         if (length(tried)) paste0(" (tried: ", paste(tried, collapse = ", "), ")"), ".\n",
         "Set options(bioqpfs.python = \"/path/to/python\") or the environment variable BIOQPFS_PYTHON, ",
         "e.g. to the .venv/bin/python that 'bash dev.sh test' creates in the bioqpfs repository, ",
         "or install the Python package (pip install bioqpfs).", call. = FALSE)
}

## The interpreter chosen with reticulate::use_python() / use_virtualenv() / use_condaenv() before Python
## started (reticulate keeps it in its internal state: the required choice, else the first hint), or "".
.reticulateChoice <- function() {
    state <- tryCatch(get(".globals", envir = asNamespace("reticulate")), error = function(e) NULL)
    if (!is.environment(state)) return("")
    chosen <- c(state$required_python_version, state$use_python_versions)
    chosen <- chosen[!is.na(chosen) & nzchar(chosen)]
    if (length(chosen)) chosen[[1L]] else ""
}

.canImportBioqpfs <- function(python) {
    ## -P: do not put the working directory on sys.path, where a directory named 'bioqpfs' (such as
    ## this installed R package) would be imported as an empty namespace package instead.
    status <- suppressWarnings(system2(python, c("-P", "-c", shQuote("import bioqpfs.r")), stdout = FALSE,
                                       stderr = FALSE))
    identical(as.integer(status), 0L)
}

## site-packages directories of `python` as it reports them when run as its own process.
.siteDirectories <- function(python) {
    out <- tryCatch(suppressWarnings(system2(python, c("-P", "-c", shQuote(
        "import site; print(chr(10).join(site.getsitepackages()))")), stdout = TRUE, stderr = FALSE)),
        error = function(e) character())
    out[nzchar(out) & dir.exists(out)]
}

.bioqpfsState <- new.env(parent = emptyenv())

## The Python module bioqpfs.r, imported once per session.
.engine <- function() {
    if (!is.null(.bioqpfsState$module)) return(.bioqpfsState$module)
    python <- bioqpfsPython(check = TRUE)
    if (reticulate::py_available(initialize = FALSE)) {
        current <- reticulate::py_config()$python
        if (!identical(normalizePath(current, mustWork = FALSE), normalizePath(python, mustWork = FALSE))) {
            message("bioqpfs: reticulate already runs ", current, " in this session; using it instead of ",
                    python, " (found via ", attr(python, "source"), ")")
        }
        python <- structure(current, source = "reticulate session")
    } else {
        ## RETICULATE_PYTHON outranks reticulate's project discovery (which warns about Poetry when a
        ## pyproject.toml is in a parent directory); it is restored once Python is initialised.
        old <- Sys.getenv("RETICULATE_PYTHON", NA)
        Sys.setenv(RETICULATE_PYTHON = python)
        on.exit(if (is.na(old)) Sys.unsetenv("RETICULATE_PYTHON") else Sys.setenv(RETICULATE_PYTHON = old))
        reticulate::use_python(python, required = TRUE)
    }
    ## Import with the working directory off sys.path (see .canImportBioqpfs), then restore it.
    reticulate::py_run_string(paste(
        "import sys as _bioqpfs_sys, os as _bioqpfs_os",
        "_bioqpfs_path = list(_bioqpfs_sys.path)",
        "_bioqpfs_sys.path[:] = [p for p in _bioqpfs_path if _bioqpfs_os.path.abspath(p or '.') != _bioqpfs_os.getcwd()]",
        sep = "\n"))
    ## Restore: the working-directory entries come back; entries added meanwhile (.pth files) stay.
    restore <- paste(
        "_bioqpfs_sys.path[:] = _bioqpfs_path + [p for p in _bioqpfs_sys.path if p not in _bioqpfs_path]",
        "del _bioqpfs_sys, _bioqpfs_os, _bioqpfs_path", sep = "\n")
    importEngine <- function() reticulate::import("bioqpfs.r", convert = TRUE)
    module <- tryCatch(importEngine(), error = function(e) {
        ## Embedded Python may put a virtual environment's site-packages on sys.path without running
        ## its .pth files (seen with reticulate and Debian's Python 3.11: the venv is not recognised).
        ## An editable install (pip install -e) is found only through such a .pth file, so process
        ## the interpreter's own site directories, as it reports them when run directly, and retry.
        dirs <- .siteDirectories(python)
        if (length(dirs)) {
            site <- reticulate::import("site")
            for (d in dirs) site$addsitedir(d)
        }
        tryCatch(importEngine(), error = function(e2) {
            reticulate::py_run_string(restore)
            stop("bioqpfs: the Python interpreter ", python, " (found via ", attr(python, "source"),
                 ") cannot import the 'bioqpfs' module: ", conditionMessage(e2),
                 "\nSet options(bioqpfs.python = \"/path/to/python\") or the environment variable BIOQPFS_PYTHON ",
                 "to a Python where bioqpfs is installed (before the first call in this R session).",
                 call. = FALSE)
        })
    })
    reticulate::py_run_string(restore)
    .bioqpfsState$module <- module
    module
}
