## Bioconductor conventions (issue 16): what library(bioqpfs) attaches, the interpreter lookup,
## what metadata() records, subset.row, and the ANY method for sparse and DelayedMatrix assays.

test_that("library(bioqpfs) alone gives the documented workflow's accessors (rowData, metadata, ...)", {
    rscript <- file.path(R.home("bin"), "Rscript")
    code <- paste("suppressPackageStartupMessages(library(bioqpfs));",
                  "cat(sapply(c('rowData', 'colData', 'assay', 'metadata', 'fData', 'notes'), exists))")
    out <- system2(rscript, c("--vanilla", "-e", shQuote(code)), stdout = TRUE, stderr = TRUE,
                   env = paste0("R_LIBS=", paste(.libPaths(), collapse = .Platform$path.sep)))
    expect_identical(utils::tail(out, 1), "TRUE TRUE TRUE TRUE TRUE TRUE")
})

test_that("RETICULATE_PYTHON is honoured after bioqpfs.python and BIOQPFS_PYTHON", {
    old <- options(bioqpfs.python = NULL)
    on.exit(options(old))
    oldEnv <- Sys.getenv(c("BIOQPFS_PYTHON", "RETICULATE_PYTHON"), NA)
    on.exit(for (v in names(oldEnv)) {
        if (is.na(oldEnv[[v]])) Sys.unsetenv(v) else do.call(Sys.setenv, as.list(oldEnv[v]))
    }, add = TRUE)
    Sys.unsetenv("BIOQPFS_PYTHON")
    Sys.setenv(RETICULATE_PYTHON = "/nonexistent/reticulate/python")
    expect_error(bioqpfsPython(), "environment variable RETICULATE_PYTHON does not exist: /nonexistent/reticulate/python")
    here <- Sys.which("R")   # any existing file: the lookup takes RETICULATE_PYTHON as given
    Sys.setenv(RETICULATE_PYTHON = here)
    found <- bioqpfsPython()
    expect_identical(as.character(found), unname(here))
    expect_identical(attr(found, "source"), "environment variable RETICULATE_PYTHON")
    Sys.setenv(BIOQPFS_PYTHON = "/nonexistent/bioqpfs/python")      # BIOQPFS_PYTHON comes first
    expect_error(bioqpfsPython(), "BIOQPFS_PYTHON does not exist")
})

test_that("an interpreter chosen with reticulate::use_python() is honoured", {
    skipIfNoEngine()
    python <- as.character(bioqpfsPython())
    ## in a fresh R process: nothing else configured, use_python() names the interpreter
    rscript <- file.path(R.home("bin"), "Rscript")
    code <- sprintf(paste("suppressPackageStartupMessages(library(bioqpfs)); reticulate::use_python('%s');",
                          "p <- bioqpfsPython(); cat(p, attr(p, 'source'), sep = '|')"), python)
    env <- c(paste0("R_LIBS=", paste(.libPaths(), collapse = .Platform$path.sep)), "BIOQPFS_PYTHON=",
             "RETICULATE_PYTHON=")
    out <- system2(rscript, c("--vanilla", "-e", shQuote(code)), stdout = TRUE, stderr = TRUE, env = env)
    expect_identical(utils::tail(out, 1), paste0(python, "|reticulate::use_python()"))
})

test_that("metadata() records the labels column and the assay; ranks are integers", {
    skipIfNoEngine()
    out <- selectGenes(toySE(), "type", method = "qpfs", nGenes = 5, assay.type = "counts")
    params <- metadata(out)$qpfs$params
    expect_identical(params$groupby, "type")
    expect_identical(params$assay, "counts")
    ## what was not given is absent (NULL), never the string "None"
    expect_null(params$layer)
    expect_null(params$mask_var)
    expect_false("None" %in% unlist(params))
    expect_identical(metadata(selectGenes(toySCE(), "type", method = "qpfs", nGenes = 5))$qpfs$params$assay, "logcounts")
    expect_identical(notes(selectGenes(toyESet(), "type", method = "qpfs", nGenes = 5))$qpfs$params[c("groupby", "assay")],
                     list(groupby = "type", assay = "exprs"))
    expect_type(rowData(out)$qpfs_rank, "integer")
    expect_setequal(rowData(out)$qpfs_rank, 1:40)
    ## a vector of labels is recorded as such; a matrix has no assay
    t <- toyMatrix()
    res <- selectGenes(t$m, t$cls, method = "qpfs", nGenes = 5)
    expect_identical(metadata(res)$qpfs$params$groupby, "labels")
    expect_null(metadata(res)$qpfs$params$assay)
    ## a method that ranks only its picks: unranked genes are NA, still integer
    mrmr <- selectGenes(t$m, t$cls, method = "mrmr_mid", nGenes = 4)
    expect_type(mrmr$mrmr_mid_rank, "integer")
    expect_identical(sort(mrmr$mrmr_mid_rank), 1:4)
    expect_identical(sum(is.na(mrmr$mrmr_mid_rank)), 36L)
})

test_that("subset.row restricts the candidates (logical, indices or names) like mask_var", {
    skipIfNoEngine()
    t <- toyMatrix()
    keep <- c(2:4, 10:30)
    ref <- pythonReference(t$m[keep, ], t$cls, nGenes = 5)        # the subset alone, selected in Python
    for (subset in list(keep, seq_len(40) %in% keep, rownames(t$m)[rev(keep)])) {
        res <- selectGenes(t$m, t$cls, method = "qpfs", nGenes = 5, subset.row = subset)
        expect_equal(res$qpfs_weight[keep], ref$weight, tolerance = 1e-12)
        expect_identical(res$qpfs_rank[keep], as.integer(ref$rank))
        expect_true(all(is.na(res$qpfs_weight[-keep])) && all(is.na(res$qpfs_rank[-keep])))
        expect_false(any(res$qpfs_selected[-keep]))
        expect_identical(sum(res$qpfs_selected), 5L)
    }
    se <- selectGenes(toySE(), "type", method = "qpfs", nGenes = 5, subset.row = keep)
    expect_identical(rowData(se)$qpfs_rank, res$qpfs_rank)
    expect_error(selectGenes(t$m, t$cls, subset.row = c("gene1", "nosuch")), "1 gene\\(s\\) not in the row names \\(nosuch\\)")
    expect_error(selectGenes(t$m, t$cls, subset.row = c(TRUE, FALSE)), "one TRUE/FALSE per gene \\(40\\)")
    expect_error(selectGenes(t$m, t$cls, subset.row = 0:3), "row indices in 1..40")
    ## a name of several rows took the first of them, silently: refused, naming it (indices still pick one)
    m <- t$m
    rownames(m)[c(7, 9)] <- "gene3"
    expect_error(selectGenes(m, t$cls, method = "qpfs", nGenes = 3, subset.row = c("gene2", "gene3", "gene20")),
                 "subset.row names 1 gene\\(s\\) that name several rows \\(gene3\\).*make.unique\\(rownames\\(x\\)\\)")
    res <- selectGenes(m, t$cls, method = "qpfs", nGenes = 3, subset.row = c(2, 9, 20))
    expect_identical(which(!is.na(res$qpfs_rank)), c(2L, 9L, 20L))
})

test_that("a dgCMatrix goes through the ANY method and stays sparse across the bridge", {
    skipIfNoEngine()
    t <- toyMatrix()
    m <- pmax(t$m, 0)                                             # ~half zeros
    sparse <- Matrix::Matrix(m, sparse = TRUE)
    expect_s4_class(sparse, "dgCMatrix")
    ref <- pythonReference(m, t$cls, nGenes = 5)
    res <- selectGenes(sparse, t$cls, method = "qpfs", nGenes = 5)
    expect_identical(bioqpfs:::.bioqpfsState$lastTransfer, list(format = "csr", blocks = 1L))
    expect_equal(res$qpfs_weight, ref$weight, tolerance = 1e-12)
    expect_identical(res$qpfs_rank, as.integer(ref$rank))
    se <- SummarizedExperiment::SummarizedExperiment(list(counts = sparse), colData = S4Vectors::DataFrame(type = t$cls))
    expect_identical(rowData(selectGenes(se, "type", method = "qpfs", nGenes = 5))$qpfs_rank, res$qpfs_rank)
    expect_identical(bioqpfs:::.bioqpfsState$lastTransfer$format, "csr")
})

test_that("a DelayedMatrix is sent block by block, sparse when its seed is sparse", {
    skipIfNoEngine()
    t <- toyMatrix()
    m <- pmax(t$m, 0)
    ref <- pythonReference(m, t$cls, nGenes = 5)
    old <- DelayedArray::getAutoBlockSize()
    on.exit(suppressMessages(DelayedArray::setAutoBlockSize(old)))
    suppressMessages(DelayedArray::setAutoBlockSize(40 * 8 * 8))                  # 8 samples of doubles per block: 5 blocks
    for (seed in list(m, Matrix::Matrix(m, sparse = TRUE))) {
        delayed <- DelayedArray::DelayedArray(seed)
        res <- selectGenes(delayed, t$cls, method = "qpfs", nGenes = 5)
        transfer <- bioqpfs:::.bioqpfsState$lastTransfer
        expect_identical(transfer$blocks, 5L)
        expect_identical(transfer$format, if (is.matrix(seed)) "dense" else "csr")
        expect_equal(res$qpfs_weight, ref$weight, tolerance = 1e-12)
        expect_identical(res$qpfs_rank, as.integer(ref$rank))
    }
    ## a delayed operation on top (log1p) is realised block by block too
    res <- selectGenes(log1p(DelayedArray::DelayedArray(m)), t$cls, method = "qpfs", nGenes = 5)
    expect_identical(bioqpfs:::.bioqpfsState$lastTransfer$blocks, 5L)
    expect_equal(res$qpfs_weight, pythonReference(log1p(m), t$cls, nGenes = 5)$weight, tolerance = 1e-12)
})

test_that("objects that are not matrix-like are refused by the ANY method with their class", {
    expect_error(selectGenes(list(1, 2), c("a", "b")), "not an object of class 'list'")
    expect_error(selectGenes(matrix(letters[1:4], 2), c("a", "b")), "must be numeric, not character")
})

test_that("DESCRIPTION has biocViews; the installed package carries its BiocStyle vignette, titled consistently", {
    desc <- utils::packageDescription("bioqpfs")
    expect_false(is.null(desc$biocViews))
    expect_match(desc$biocViews, "Software")
    expect_match(desc$Suggests, "BiocStyle")
    info <- tools::getVignetteInfo("bioqpfs")
    skip_if(nrow(info) == 0L, "installed from the source directory: R CMD build . first (see README)")
    expect_true("bioqpfs" %in% tools::file_path_sans_ext(info[, "File"]))
    src <- readLines(file.path(info[1L, "Dir"], "doc", info[1L, "File"]))
    yamlTitle <- sub('^title: *"(.*)"$', "\\1", grep("^title:", src, value = TRUE)[1L])
    expect_identical(unname(info[1L, "Title"]), yamlTitle)    # rmarkdown warns when they differ
    expect_true(any(grepl("BiocStyle::html_document", src, fixed = TRUE)))
})
