#' Select a small, non-redundant, class-relevant gene panel
#'
#' Ranks the genes (rows) of `x` by a global selection method of the bioqpfs
#' engine and marks the top `nGenes` as the panel.  By default (`method =
#' NULL`) it runs the package's benchmarked panel recipe, the same on every
#' face (Python `bioqpfs.DEFAULT_PANEL`): class-covering QPFS (`"qpfs_cover"`:
#' one QPFS problem, Rodriguez-Lujan et al., JMLR 2010, eq. 2 and 9, per class
#' on its one-vs-rest relevance, panel taken round-robin over the classes) with
#' `class_weight = "balanced"`, `discretization = "auto"`,
#' `relevance_bins = "per_class"`, `relevance = "auto"` and `self_redundancy = "constant"`,
#' stored under the key `"bioqpfs"`.  Naming a method (e.g. `method = "qpfs"`, exact QPFS) runs
#' it with its published settings.  The computation is done by the Python
#' package `bioqpfs` (`bioqpfs.tl.select_genes`), the same engine as its
#' AnnData interface, so both give identical results on the same data.
#'
#' As in scran, the work is done by one worker registered as the `ANY`
#' method, for any matrix-like object with genes in rows and samples in
#' columns (an ordinary matrix, a sparse `dgCMatrix`, a `DelayedMatrix`, ...);
#' the SummarizedExperiment, SingleCellExperiment and ExpressionSet methods
#' pick the assay and the labels and store the result.
#'
#' The expression matrix is sent to Python without any NumPy array crossing
#' \pkg{reticulate} (so any NumPy version works): an ordinary matrix as raw
#' little-endian doubles (`writeBin()`); a sparse matrix as its compressed
#' columns, so it stays sparse in the engine; a `DelayedMatrix` block by block
#' of samples (DelayedArray's automatic block size,
#' `DelayedArray::setAutoBlockSize()`), so it is never realised whole in R.
#' Results come back as plain lists.
#'
#' @param x A [SummarizedExperiment::SummarizedExperiment],
#'   [SingleCellExperiment::SingleCellExperiment], [Biobase::ExpressionSet],
#'   or a numeric matrix-like object (`matrix`, `dgCMatrix`, `DelayedMatrix`)
#'   with genes in rows and samples (cells) in columns.
#' @param labels The classes the panel must separate: the name of a
#'   `colData(x)` (`pData(x)`) column, or a vector or factor with one label per
#'   sample (the only choice for a matrix).  Missing labels are an error.
#'   A factor keeps its level order (as a pandas Categorical's in Python;
#'   the panel does not depend on it); numbers that look continuous are refused (bin them with
#'   `cut()`); a vector named by the sample names is matched by name.
#'   Hierarchical labels: several column names, coarse to fine (e.g.
#'   `c("lineage", "cell_type")`), or a data frame with one column per level;
#'   the levels must be nested.  The class relevance is then summed over the
#'   levels, `sum_l v_l I(X; C_l)`, with `groupby_weights = c(...)` in `...`
#'   (default equal weights); methods qpfs, eqpfs, maxrel, mrmr_mid, mrmr_miq
#'   only (the others, and the default recipe, refuse it).  Recorded as
#'   `params$groupby`, `params$groupby_levels`, `params$groupby_weights`.
#' @param method `NULL` (default) for the default panel recipe (`"qpfs_cover"`
#'   with `class_weight = "balanced"`, `discretization = "auto"`,
#'   `relevance_bins = "per_class"`, `relevance = "auto"`,
#'   `self_redundancy = "constant"`; parameters in
#'   `...` override the recipe's), or a method name from [bioqpfsMethods()],
#'   e.g. `"qpfs"`, run with its published settings.
#' @param nGenes Panel size: the `nGenes` best-ranked genes get
#'   `<key>_selected = TRUE`.  `"auto"` chooses it as Python's
#'   `tl.select_genes(n_genes = "auto")` does: a cross-validated error curve
#'   of the same method and parameters (selection refit in every training
#'   fold; 5-fold stratified, fewer folds when a class has fewer than 5
#'   samples; linear SVM; seeded by `randomState`) over 5, 10, 15, 20, 30, 40,
#'   50, 75 and 100 genes (capped by the number of genes), then the smallest
#'   size within one standard error of the best (the one-SE rule,
#'   `bioqpfs.evaluate.suggest_n_genes`).  It costs several fixed-size runs.
#'   The choice and the curve are recorded in `metadata()` (see Value).
#' @param assay.type The assay to select from: a name or index of
#'   `assays(x)` (default the first assay; `"logcounts"` for a
#'   SingleCellExperiment), or an `assayData` element of an ExpressionSet
#'   (default `"exprs"`).
#' @param subset.row Genes to select from (scran's name): a logical vector
#'   with one value per row, row indices or row names (a name of several rows
#'   is refused: give indices, or `make.unique()` the names).  Genes outside it get
#'   `NA` weight and rank and `<key>_selected = FALSE`; only the subset is sent
#'   to the engine.
#' @param keyAdded Prefix of the result columns and name of the metadata
#'   entry (one character string); default the method name, `"bioqpfs"` for
#'   the default recipe.
#' @param randomState Integer seed for methods that make random choices.
#' @param ... Named parameters of the method, passed to the engine, e.g.
#'   `similarity = "correlation"`, `alpha = 0.5`, `discretization =
#'   "quantile"` for QPFS (see the Python documentation of the method).
#'   Arguments of the Python function that `selectGenes()` sets itself
#'   (`n_genes`, `random_state`, `key_added`, `batch_key`, `layer`, ...) are
#'   refused, naming the R argument to use.
#'   `preselected` (every method) forces genes into the panel, ranked first
#'   in the given order: gene names, row indices (1-based) or a logical
#'   vector with one value per row. `backend = "gpu"` counts on a GPU (the
#'   Python `gpu` extra: cupy), `"cpu"` never does; the default `"auto"`
#'   uses a GPU only for large data when cupy sees one.
#' @param block The batch (donor, study, plate) of every sample (scran's
#'   name): the name of a `colData(x)` (`pData(x)`) column, or a vector or
#'   factor with one value per sample, like `labels`.  Every information
#'   measure is then estimated within each batch and averaged over the
#'   batches (weights proportional to their sizes; `batch_weights = "equal"`
#'   in `...` for equal weights), with discretisation thresholds per batch
#'   (`batch_discretization = "global"` in `...` for one set) and
#'   correlations within batches: stratified estimation as in mRMRe's
#'   `strata`.  Python's `batch_key`; recorded as `params$batch_key`.  Methods
#'   without a batch-aware form refuse it.  Missing values are an error.
#'
#' @return The same kind of object as `x` with the selection added:
#' * SummarizedExperiment / SingleCellExperiment: `rowData(x)` columns
#'   `<key>_weight` (the method's weight), `<key>_rank` (1-based integer; `NA`
#'   for genes the method did not rank), `<key>_selected` (logical) and any
#'   method-specific `<key>_*` columns; `metadata(x)[[key]]` is a list with
#'   `params` (including `method`, `preset` -- `"default"` for the default
#'   recipe, `"paper"` for a named method --, `groupby`, the colData column of
#'   the labels or `"labels"` for a vector, and `assay`, the assay used),
#'   `diagnostics` and `selected` (the panel's gene names in rank order).
#'   With `nGenes = "auto"` it also holds `n_genes_auto`: `n_genes` (the
#'   chosen size, also in `params$n_genes`), `rule`, `grid` (the sizes
#'   compared) and `curve` (a named list of equal-length columns, one row per
#'   size: `n_genes`, `mean_error`, `sd_error`, `se_error`, ...;
#'   `as.data.frame()` gives the table), as Python's `tl.select_genes` stores
#'   them in `.uns`.  The record's `var_columns` lists the columns written: a
#'   re-run under the same key replaces them (and only them).  A rowData
#'   column or metadata entry that bioqpfs did not write is never
#'   overwritten: the call fails and asks for another `keyAdded`.  Python's
#'   warnings arrive as R warnings, also those given before an error.
#' * ExpressionSet: the same columns in `fData(x)`, the record in
#'   `notes(x)[[key]]`.
#' * matrix (any matrix-like object): an [S4Vectors::DataFrame] with those
#'   columns (one row per gene) and the record in its `metadata()`.
#'
#' @seealso [bioqpfsPython()] for how the Python engine is found.
#'
#' @examples
#' if (!is.null(bioqpfsPython(check = FALSE))) {
#'     set.seed(1)
#'     m <- matrix(rnorm(30 * 20), 30, 20, dimnames = list(paste0("g", 1:30), NULL))
#'     m[1:3, 1:10] <- m[1:3, 1:10] + 3
#'     res <- selectGenes(m, rep(c("a", "b"), each = 10), nGenes = 5)
#'     res[res$bioqpfs_selected, ]                  # the default recipe
#'     metadata(res)$bioqpfs$params$preset           # "default"
#' }
#'
#' @name selectGenes
#' @aliases selectGenes
#' @importFrom methods setGeneric setMethod callNextMethod is as
#' @importFrom S4Vectors metadata metadata<- DataFrame
#' @importFrom SummarizedExperiment rowData rowData<- colData assay assayNames
#' @importFrom Biobase fData fData<- pData notes notes<- assayDataElement assayDataElementNames
#' @importClassesFrom SummarizedExperiment SummarizedExperiment
#' @importClassesFrom SingleCellExperiment SingleCellExperiment
#' @importClassesFrom Biobase ExpressionSet
NULL

#' @rdname selectGenes
#' @export
setGeneric("selectGenes", function(x, labels, ...) {
    if (missing(labels)) {
        stop("bioqpfs: 'labels' is missing: give a colData/pData column name or a vector with one ",
             "class label per sample", call. = FALSE)
    }
    standardGeneric("selectGenes")
})

## The worker, registered as the ANY method: any genes x samples matrix-like object (base matrix,
## sparse Matrix, DelayedMatrix, data.frame) + one label per sample -> result columns and record.
.selectGenesWorker <- function(mat, labels, method, nGenes, keyAdded, randomState, params, what,
                               groupby = "labels", assay = NULL, subset.row = NULL, block = NULL,
                               blockName = "block", existingColumns = NULL, existingMeta = NULL) {
    if (is.data.frame(mat)) mat <- as.matrix(mat)
    if (length(dim(mat)) != 2L) {
        stop("bioqpfs: the ", what, " must be a genes x samples matrix (matrix, dgCMatrix, DelayedMatrix, ",
             "SummarizedExperiment, ...), not an object of class '", paste(class(mat), collapse = "/"), "'",
             call. = FALSE)
    }
    kind <- if (is(mat, "DelayedArray")) DelayedArray::type(mat) else if (is(mat, "Matrix")) {
        if (is(mat, "dMatrix")) "double" else "logical"   # l/n Matrix: logical or pattern
    } else typeof(mat)
    if (!kind %in% c("double", "integer", "logical")) {
        stop("bioqpfs: the ", what, " must be numeric, not ", kind, call. = FALSE)
    }
    if (!is.null(method) && (!is.character(method) || length(method) != 1L || is.na(method))) {
        stop("bioqpfs: 'method' must be NULL (the default recipe) or one method name, e.g. \"qpfs\" ",
             "(see bioqpfsMethods())", call. = FALSE)
    }
    if (!identical(nGenes, "auto") && (!is.numeric(nGenes) || length(nGenes) != 1L || is.na(nGenes) ||
                                        !is.finite(nGenes) || nGenes < 1 || nGenes != round(nGenes) ||
                                        nGenes > .Machine$integer.max)) {
        stop("bioqpfs: 'nGenes' must be one positive whole number or \"auto\", not ", deparse(nGenes),
             call. = FALSE)
    }
    if (!is.null(randomState) && (!is.numeric(randomState) || length(randomState) != 1L || is.na(randomState) ||
                                  !is.finite(randomState) || randomState < 0 || randomState != round(randomState) ||
                                  randomState > .Machine$integer.max)) {
        stop("bioqpfs: 'randomState' must be NULL or one whole number in 0..", .Machine$integer.max, ", not ",
             deparse(randomState), call. = FALSE)
    }
    if (nrow(mat) == 0L || ncol(mat) == 0L) {
        stop("bioqpfs: the ", what, " has ", nrow(mat), " gene(s) and ", ncol(mat), " sample(s); ",
             "it needs genes (rows) and samples (columns)", call. = FALSE)
    }
    if (length(params) && (is.null(names(params)) || any(!nzchar(names(params))))) {
        stop("bioqpfs: extra arguments must be named method parameters, e.g. similarity = \"correlation\"",
             call. = FALSE)
    }
    if (!is.null(keyAdded) && (!is.character(keyAdded) || length(keyAdded) != 1L || is.na(keyAdded))) {
        stop("bioqpfs: 'keyAdded' must be NULL (the method's name) or one character string, not ",
             deparse(keyAdded), call. = FALSE)
    }
    ## arguments of the Python function that selectGenes() sets itself: in `...` Python answered
    ## "got multiple values for keyword argument" (or, for copy, lost the result)
    python <- c(n_genes = "nGenes", random_state = "randomState", key_added = "keyAdded", groupby = "labels",
                batch_key = "block", layer = "assay.type", method = "method", adata = "x", copy = NA,
                use_raw = NA)
    clash <- intersect(names(params), names(python))
    if (length(clash)) {
        r <- python[[clash[[1]]]]
        stop("bioqpfs: '", clash[[1]], "' is an argument of the Python function, not a method parameter; ",
             if (is.na(r)) "selectGenes() has no such option: leave it out" else paste0("use selectGenes()'s '", r,
                                                                                   "' instead"), call. = FALSE)
    }
    for (nm in names(params)) {   # reticulate would turn NA into True (logical) or a large negative integer
        v <- params[[nm]]
        if (is.atomic(v) && length(v) && anyNA(v)) {
            stop("bioqpfs: the method parameter '", nm, "' is NA; give it a value, or leave it out for its default",
                 call. = FALSE)
        }
    }
    if (!is.null(rownames(mat)) && anyNA(rownames(mat))) {
        stop("bioqpfs: the ", what, " has NA row names (gene ", paste(utils::head(which(is.na(rownames(mat))), 5),
             collapse = ", "), "); name every gene, e.g. rownames(x) <- make.unique(...)", call. = FALSE)
    }
    labels <- .checkLabels(labels, colnames(mat), ncol(mat))
    if (!is.null(block)) block <- .checkLabels(block, colnames(mat), ncol(mat), what = "block")
    genes <- rownames(mat)
    if (is.null(genes)) genes <- as.character(seq_len(nrow(mat)))
    if (!is.null(params$preselected)) params$preselected <- .preselectedNames(params$preselected, genes)
    keep <- .subsetRows(subset.row, genes)
    if (!is.null(keep) && !is.null(params$preselected)) {
        outside <- setdiff(unlist(params$preselected), genes[keep])
        outside <- intersect(outside, genes)   # names that are no gene at all get the engine's message
        if (length(outside)) {
            stop("bioqpfs: preselected gene(s) ", paste(utils::head(outside, 5), collapse = ", "),
                 if (length(outside) > 5) ", ...", " are left out by subset.row; add them to subset.row (the panel ",
                 "is chosen among its genes) or drop them from preselected", call. = FALSE)
        }
    }
    if (!is.null(keep)) mat <- mat[keep, , drop = FALSE]
    engine <- .engine()
    res <- tryCatch({
        data <- .sendMatrix(engine, mat)
        engine$`_reticulate_select`(data, ncol(mat), nrow(mat), as.character(genes[if (is.null(keep)) TRUE else keep]),
                                    if (is.list(labels)) unname(lapply(labels, as.list)) else as.vector(labels),
                                    method = method,
                                    n_genes = if (identical(nGenes, "auto")) nGenes else as.integer(nGenes),
                                    key_added = if (is.null(keyAdded)) NULL else as.character(keyAdded),
                                    random_state = if (is.null(randomState)) NULL else as.integer(randomState),
                                    params = params, groupby = groupby, assay = assay,
                                    block = if (is.null(block)) NULL else as.list(as.vector(block)),
                                    block_key = blockName, label_levels = .levelsOf(labels),
                                    numeric_labels = if (is.list(labels)) NULL else attr(labels, "bioqpfsNumeric"),
                                    existing_columns = if (length(existingColumns)) as.list(existingColumns),
                                    existing_results = .existingResults(existingMeta))
    }, error = function(e) {
        ## the engine's warnings given before the error, as R's (they were lost with the Python exception)
        for (w in unlist(engine$`_reticulate_discard`())) warning("bioqpfs: ", w, call. = FALSE)
        ## reticulate's message ends with a newline: R printed an empty line after the error
        stop("bioqpfs: ", sub("[[:space:]]+$", "", sub("^.*?(Error|Exception): ", "", conditionMessage(e))),
             call. = FALSE)
    })
    .bioqpfsState$lastTransfer <- res$transfer
    for (w in unlist(res$warnings)) warning("bioqpfs: ", w, call. = FALSE)   # the engine's warnings, as R's
    columns <- lapply(stats::setNames(nm = names(res$columns)), function(nm) {
        v <- unlist(res$columns[[nm]])
        v <- switch(res$kinds[[nm]], double = as.double(v), integer = as.integer(v), logical = as.logical(v),
                    as.character(v))
        if (is.null(keep)) return(v)
        full <- rep(if (is.logical(v)) FALSE else v[NA_integer_], length(genes))  # genes outside subset.row
        full[keep] <- v
        full
    })
    list(columns = columns, record = .simplifyRecord(res$record), key = res$key, genes = genes,
         dropped = as.character(unlist(res$dropped)))
}

## The levels of factor labels, in their order (the class order, as for a pandas Categorical in Python): one
## entry per level of hierarchical labels, NULL for labels that were not a factor.
.levelsOf <- function(labels) {
    one <- function(l) { lev <- attr(l, "bioqpfsLevels"); if (is.null(lev)) NULL else as.list(lev) }
    if (is.list(labels)) unname(lapply(labels, one)) else one(labels)
}

## What metadata(x) (notes) holds, for the engine's checks (bioqpfs.r._select.take_existing): for each named
## entry, "foreign" or the rowData columns a bioqpfs result wrote (var_columns; none for older results).
.existingResults <- function(meta) {
    nms <- names(meta)
    if (!length(meta) || is.null(nms)) return(NULL)
    meta <- meta[nzchar(nms) & !duplicated(nms)]
    if (!length(meta)) return(NULL)
    lapply(meta, function(old) {
        if (is.list(old) && all(c("params", "diagnostics", "selected") %in% names(old))) {
            as.list(as.character(unlist(old$var_columns)))
        } else "foreign"
    })
}

## rowData / fData with the columns of an earlier run under the same key dropped, then the new ones written.
.writeColumns <- function(df, res) {
    df <- df[, setdiff(colnames(df), res$dropped), drop = FALSE]
    for (nm in names(res$columns)) df[[nm]] <- res$columns[[nm]]
    df
}

## subset.row (scran's name): NULL, or a logical / integer / character selection of rows -> sorted indices.
# `preselected = ` (forced genes, every method) as gene names: R row indices (1-based) and a logical vector
# (one per gene) name their rows, so the engine (0-based indices) never reads an R index as its own.
.preselectedNames <- function(preselected, genes) {
    n <- length(genes)
    if (is.character(preselected)) return(as.list(preselected))
    if (is.logical(preselected) && length(preselected) == n && !anyNA(preselected)) return(as.list(genes[preselected]))
    if (is.numeric(preselected) && !anyNA(preselected) && all(preselected == round(preselected)) &&
        all(preselected >= 1 & preselected <= n)) {
        return(as.list(genes[as.integer(preselected)]))
    }
    stop("bioqpfs: preselected must be gene names, row indices in 1..", n,
         " or a logical vector (one per gene)", call. = FALSE)
}

.subsetRows <- function(subset.row, genes) {
    if (is.null(subset.row)) return(NULL)
    n <- length(genes)
    idx <- if (is.logical(subset.row)) {
        if (length(subset.row) != n || anyNA(subset.row)) {
            stop("bioqpfs: a logical subset.row needs one TRUE/FALSE per gene (", n, "), without NA", call. = FALSE)
        }
        which(subset.row)
    } else if (is.character(subset.row)) {
        bad <- setdiff(subset.row, genes)
        if (length(bad)) {
            stop("bioqpfs: subset.row names ", length(bad), " gene(s) not in the row names (",
                 paste(utils::head(bad, 5), collapse = ", "), if (length(bad) > 5) ", ...", ")", call. = FALSE)
        }
        ## a name of several rows: match() took the first of them, silently (which gene was meant?)
        ambiguous <- unique(subset.row[subset.row %in% genes[duplicated(genes)]])
        if (length(ambiguous)) {
            stop("bioqpfs: subset.row names ", length(ambiguous), " gene(s) that name several rows (",
                 paste(utils::head(ambiguous, 5), collapse = ", "),
                 if (length(ambiguous) > 5) paste0(" and ", length(ambiguous) - 5, " more"),
                 "), so which row is meant is unclear; give row indices or a logical vector, or make the names ",
                 "unique first: rownames(x) <- make.unique(rownames(x))", call. = FALSE)
        }
        match(subset.row, genes)
    } else if (is.numeric(subset.row) && !anyNA(subset.row) && all(subset.row == round(subset.row)) &&
               all(subset.row >= 1 & subset.row <= n)) {
        as.integer(subset.row)
    } else {
        stop("bioqpfs: subset.row must be a logical vector (one per gene), row indices in 1..", n,
             " or row names", call. = FALSE)
    }
    idx <- sort(unique(idx))
    if (!length(idx)) stop("bioqpfs: subset.row selects no gene", call. = FALSE)
    idx
}

## The expression matrix to the engine without NumPy crossing reticulate: an ordinary matrix as raw
## little-endian doubles; a sparse matrix as its dgCMatrix slots (it stays sparse: CSR in Python); a
## DelayedMatrix block by block of samples (DelayedArray's automatic block size), so it is never
## realised whole in R.  Returns what _reticulate_select takes as `data`: the bytes, or a token.
.sendMatrix <- function(engine, mat) {
    if (!is(mat, "DelayedArray") && !is(mat, "sparseMatrix")) {
        if (is(mat, "Matrix")) mat <- as.matrix(mat)
        return(writeBin(as.double(mat), raw(), size = 8L, endian = "little"))
    }
    .bioqpfsState$tokens <- (if (is.null(.bioqpfsState$tokens)) 0L else .bioqpfsState$tokens) + 1L
    token <- paste0("R", .bioqpfsState$tokens)
    send <- function(block, start) {
        if (is(block, "sparseMatrix") || is(block, "SparseArraySeed")) {
            block <- if (is(block, "SparseArraySeed")) as(block, "dgCMatrix") else
                as(as(as(block, "dMatrix"), "generalMatrix"), "CsparseMatrix")
            engine$`_reticulate_receive`(token, ncol(mat), nrow(mat), start, ncol(block),
                                         writeBin(as.double(block@x), raw(), size = 8L, endian = "little"),
                                         writeBin(block@i, raw(), size = 4L, endian = "little"),
                                         writeBin(block@p, raw(), size = 4L, endian = "little"))
        } else {
            engine$`_reticulate_receive`(token, ncol(mat), nrow(mat), start, ncol(block),
                                         writeBin(as.double(block), raw(), size = 8L, endian = "little"))
        }
    }
    if (is(mat, "sparseMatrix")) {
        send(mat, 0L)
        return(token)
    }
    sparse <- DelayedArray::is_sparse(mat)
    grid <- DelayedArray::colAutoGrid(mat)
    start <- 0L
    for (b in seq_along(grid)) {
        block <- DelayedArray::read_block(mat, grid[[b]], as.sparse = sparse)
        send(block, start)
        start <- start + ncol(block)
    }
    token
}

.checkLabels <- function(labels, samples, n, what = "labels") {
    if (is.data.frame(labels) || is(labels, "DataFrame")) {   # hierarchical labels: one column per level
        if (ncol(labels) < 1L || is.null(colnames(labels))) {
            stop("bioqpfs: '", what, "' as a data frame needs named columns, one per level (coarse to fine)",
                 call. = FALSE)
        }
        return(lapply(stats::setNames(as.list(as.data.frame(labels)), colnames(labels)), .checkLabels,
                      samples = samples, n = n, what = what))
    }
    levs <- if (is.factor(labels)) levels(labels) else NULL
    if (is.factor(labels)) labels <- stats::setNames(as.character(labels), names(labels))
    if (!is.atomic(labels) || is.null(labels)) {
        stop("bioqpfs: '", what, "' must be a column name or an atomic vector/factor with one label per sample",
             call. = FALSE)
    }
    if (length(labels) != n) {
        stop("bioqpfs: '", what, "' has ", length(labels), " value(s) but there are ", n, " samples", call. = FALSE)
    }
    nms <- names(labels)   # named by the sample names in another order: matched by name, as a pandas Series is
    if (!is.null(nms) && !is.null(samples) && !identical(nms, samples) && !anyDuplicated(nms) &&
        !anyDuplicated(samples) && setequal(nms, samples)) {
        labels <- labels[samples]
    }
    bad <- which(is.na(labels))
    if (length(bad)) {
        who <- if (is.null(samples)) bad else samples[bad]
        stop("bioqpfs: '", what, "' has ", length(bad), " missing value(s) (samples ",
             paste(utils::head(who, 5), collapse = ", "), if (length(bad) > 5) ", ...", "); ",
             "remove those samples (e.g. x[, !is.na(", what, ")]) or give them a value", call. = FALSE)
    }
    out <- unname(as.character(labels))
    attr(out, "bioqpfsLevels") <- levs
    if (is.numeric(labels)) attr(out, "bioqpfsNumeric") <- unname(as.double(labels))   # the engine's checks
    out
}

## Whether 'labels' names colData/pData columns: one name, or (labels only: several = TRUE) several names,
## coarse to fine (hierarchical labels) of which at least one is a column of 'coldata' -- else a character
## vector of the wrong length is labels (and its length the error).
.areNames <- function(labels, n, several = FALSE, coldata = NULL) {
    is.character(labels) && !anyNA(labels) && length(labels) != n &&
        (length(labels) == 1L || (several && length(labels) > 1L && any(labels %in% colnames(coldata))))
}

## What params$groupby records: the colData/pData column(s) the labels came from, the columns of a data frame
## of levels, else "labels" (a vector).
.groupbyName <- function(labels, n, vector = "labels", several = FALSE, coldata = NULL) {
    if (.areNames(labels, n, several, coldata)) labels
    else if (several && (is.data.frame(labels) || is(labels, "DataFrame"))) colnames(labels)
    else vector
}

## A column name (looked up in 'coldata') or a vector of labels; for 'labels' (several = TRUE) also several
## column names, coarse to fine, returned as a data frame of the levels.
.resolveLabels <- function(labels, coldata, where, n, what = "labels", several = FALSE) {
    if (several && is.character(labels) && length(labels) > 1L && length(labels) != n && !anyNA(labels) &&
        !any(labels %in% colnames(coldata))) {   # misspelled column names, or labels of the wrong length
        stop("bioqpfs: ", what, " = ", deparse(labels), " names no column of ", where, " (available: ",
             if (ncol(coldata)) paste(colnames(coldata), collapse = ", ") else "none", "), and as labels it has ",
             length(labels), " values for ", n, " samples. Pass column names (coarse to fine) or one label per ",
             "sample.", call. = FALSE)
    }
    if (.areNames(labels, n, several, coldata)) {
        missing <- setdiff(labels, colnames(coldata))
        if (length(missing)) {
            stop("bioqpfs: ", what, " = \"", missing[[1]], "\" is not a column of ", where, "; available: ",
                 if (ncol(coldata)) paste(colnames(coldata), collapse = ", ") else "none",
                 ". Pass a column name", if (several) " (or several, coarse to fine)",
                 " or a vector with one value per sample.", call. = FALSE)
        }
        labels <- if (length(labels) == 1L) coldata[[labels]] else as.data.frame(coldata[, labels, drop = FALSE])
    }
    labels
}

## reticulate turns homogeneous Python lists into vectors already; finish nested lists of scalars.
.simplifyRecord <- function(x) {
    if (!is.list(x)) return(x)
    x <- lapply(x, .simplifyRecord)
    if (length(x) && is.null(names(x)) && all(vapply(x, function(v) is.atomic(v) && length(v) == 1L, TRUE))) {
        return(unlist(x))
    }
    x
}

.checkAssay <- function(assay.type, available, what) {
    ok <- if (is.character(assay.type)) {
        length(assay.type) == 1L && assay.type %in% available
    } else {
        is.numeric(assay.type) && length(assay.type) == 1L && !is.na(assay.type) && assay.type == round(assay.type) &&
            assay.type >= 1 && assay.type <= length(available)   # 1.5 read assay 1
    }
    if (!ok) {
        stop("bioqpfs: assay.type = ", deparse(assay.type), " is not ", what, "; available: ",
             if (length(available)) paste(available, collapse = ", ") else "none", call. = FALSE)
    }
    if (is.character(assay.type)) assay.type else available[[assay.type]]
}

#' @rdname selectGenes
#' @export
setMethod("selectGenes", "ANY", function(x, labels, method = NULL, nGenes = 50, keyAdded = NULL,
                                         randomState = 0, ..., subset.row = NULL, block = NULL) {
    res <- .selectGenesWorker(x, labels, method, nGenes, keyAdded, randomState, list(...), "matrix",
                              groupby = .groupbyName(labels, ncol(x), several = TRUE), subset.row = subset.row,
                              block = block)
    out <- DataFrame(res$columns, row.names = res$genes, check.names = FALSE)
    metadata(out)[[res$key]] <- res$record
    out
})

#' @rdname selectGenes
#' @export
setMethod("selectGenes", "SummarizedExperiment", function(x, labels, method = NULL, nGenes = 50,
                                                          assay.type = 1L, keyAdded = NULL, randomState = 0,
                                                          ..., subset.row = NULL, block = NULL) {
    available <- assayNames(x)
    if (is.null(available)) available <- as.character(seq_along(SummarizedExperiment::assays(x)))
    name <- .checkAssay(assay.type, available, "an assay of x")
    groupby <- .groupbyName(labels, ncol(x), several = TRUE, coldata = colData(x))
    labels <- .resolveLabels(labels, colData(x), "colData(x)", ncol(x), several = TRUE)
    blockName <- if (is.null(block)) "block" else .groupbyName(block, ncol(x), "block")
    block <- .resolveLabels(block, colData(x), "colData(x)", ncol(x), "block")
    res <- .selectGenesWorker(assay(x, assay.type, withDimnames = TRUE), labels, method, nGenes, keyAdded,
                              randomState, list(...), paste0("assay '", name, "'"), groupby = groupby,
                              assay = name, subset.row = subset.row, block = block, blockName = blockName,
                              existingColumns = colnames(rowData(x)), existingMeta = metadata(x))
    rowData(x) <- .writeColumns(rowData(x), res)
    metadata(x)[[res$key]] <- res$record
    x
})

#' @rdname selectGenes
#' @export
setMethod("selectGenes", "SingleCellExperiment", function(x, labels, method = NULL, nGenes = 50,
                                                          assay.type = "logcounts", keyAdded = NULL,
                                                          randomState = 0, ..., subset.row = NULL, block = NULL) {
    callNextMethod(x, labels, method = method, nGenes = nGenes, assay.type = assay.type, subset.row = subset.row,
                   keyAdded = keyAdded, randomState = randomState, block = block, ...)
})

#' @rdname selectGenes
#' @export
setMethod("selectGenes", "ExpressionSet", function(x, labels, method = NULL, nGenes = 50,
                                                   assay.type = "exprs", keyAdded = NULL, randomState = 0,
                                                   ..., subset.row = NULL, block = NULL) {
    name <- .checkAssay(assay.type, assayDataElementNames(x), "an assayData element of x")
    groupby <- .groupbyName(labels, ncol(x), several = TRUE, coldata = pData(x))
    labels <- .resolveLabels(labels, pData(x), "pData(x)", ncol(x), several = TRUE)
    blockName <- if (is.null(block)) "block" else .groupbyName(block, ncol(x), "block")
    block <- .resolveLabels(block, pData(x), "pData(x)", ncol(x), "block")
    res <- .selectGenesWorker(assayDataElement(x, name), labels, method, nGenes, keyAdded, randomState,
                              list(...), paste0("assayData element '", name, "'"), groupby = groupby,
                              assay = name, subset.row = subset.row, block = block, blockName = blockName,
                              existingColumns = colnames(fData(x)), existingMeta = notes(x))
    fData(x) <- .writeColumns(fData(x), res)
    n <- notes(x)
    n[[res$key]] <- res$record
    notes(x) <- n
    x
})
