# R helpers of the rpy2 route (bioqpfs.r): evaluated once, on first use, by bioqpfs/r/_session.py (rpy2's
# ro.r(<this file>)); the value of the last expression, a named list of functions, is what Python calls.
# Each takes or returns plain R vectors, lists and matrices so the Python side never converts an S4 object.
local({
r_class <- function(x) {
  if (methods::is(x, "SingleCellExperiment")) "SingleCellExperiment"
  else if (methods::is(x, "SummarizedExperiment")) "SummarizedExperiment"
  else if (methods::is(x, "ExpressionSet")) "ExpressionSet"
  else if (is.matrix(x) || methods::is(x, "Matrix")) "matrix"
  else stop("bioqpfs: cannot convert an object of class '", paste(class(x), collapse = "/"),
            "'; expected a SummarizedExperiment, SingleCellExperiment, ExpressionSet or matrix", call. = FALSE)
}
decompose <- function(x, cls, assay, only_x) {
  red <- list(); meta <- list()
  if (cls == "ExpressionSet") {
    env <- Biobase::assayData(x)
    mats <- if (is.environment(env)) mget(ls(env), envir = env) else as.list(env)
    default <- if ("exprs" %in% names(mats)) "exprs" else names(mats)[1]
    rowdf <- Biobase::fData(x); coldf <- Biobase::pData(x); meta <- Biobase::notes(x)
  } else if (cls == "matrix") {
    mats <- list(X = x); default <- "X"; rowdf <- NULL; coldf <- NULL
  } else {
    mats <- as.list(SummarizedExperiment::assays(x, withDimnames = TRUE))
    if (length(mats) && is.null(names(mats))) names(mats) <- paste0("assay", seq_along(mats))
    default <- names(mats)[1]
    rowdf <- as.data.frame(SummarizedExperiment::rowData(x), optional = TRUE)
    coldf <- as.data.frame(SummarizedExperiment::colData(x), optional = TRUE)
    meta <- S4Vectors::metadata(x)
    if (cls == "SingleCellExperiment") red <- as.list(SingleCellExperiment::reducedDims(x))
  }
  if (!length(mats)) stop("bioqpfs: the object holds no assay", call. = FALSE)
  if (is.null(assay)) assay <- default
  if (!assay %in% names(mats))
    stop("bioqpfs: assay '", assay, "' not found; available: ", paste(names(mats), collapse = ", "), call. = FALSE)
  pack <- function(m) {
    if (methods::is(m, "dgCMatrix")) list(kind = "dgC", i = m@i, p = m@p, x = m@x, dim = dim(m))
    else { m <- as.matrix(m); storage.mode(m) <- if (is.logical(m)) "logical" else if (is.integer(m)) "integer" else "double"
           list(kind = "dense", x = m) }
  }
  others <- if (only_x) list() else lapply(mats[setdiff(names(mats), assay)], pack)
  list(X = pack(mats[[assay]]), assay = assay, layers = others,
       rownames = rownames(x), colnames = colnames(x),
       rowdf = if (only_x) NULL else rowdf, coldf = coldf,
       meta = if (only_x) list() else meta, reduced = if (only_x) list() else red)
}
column_kind <- function(v) {
  if (is.factor(v)) "factor" else if (is.logical(v)) "logical" else if (is.integer(v)) "integer"
  else if (is.double(v)) "double" else if (is.character(v)) "character" else "other"
}
dgc <- function(i, p, x, dim) methods::new("dgCMatrix", i = as.integer(i), p = as.integer(p), x = as.double(x), Dim = as.integer(dim))
frame <- function(cols, rn, s4) {
  df <- if (s4) S4Vectors::make_zero_col_DFrame(length(rn)) else data.frame(row.names = seq_along(rn))
  rownames(df) <- rn
  for (nm in names(cols)) df[[nm]] <- cols[[nm]]
  df
}
build <- function(cls, assays, rn, cn, rowcols, colcols, meta, reduced) {
  assays <- lapply(assays, function(m) { dimnames(m) <- list(rn, cn); m })
  if (cls == "matrix") return(assays[[1]])
  if (cls == "ExpressionSet") {
    ad <- do.call(Biobase::assayDataNew, c(list(storage.mode = "list"), assays))
    pd <- Biobase::AnnotatedDataFrame(frame(colcols, cn, FALSE))
    fd <- Biobase::AnnotatedDataFrame(frame(rowcols, rn, FALSE))
    e <- methods::new("ExpressionSet", assayData = ad, phenoData = pd, featureData = fd)
    if (length(meta)) Biobase::notes(e) <- meta
    return(e)
  }
  args <- list(assays = assays, rowData = frame(rowcols, rn, TRUE), colData = frame(colcols, cn, TRUE),
               metadata = meta)
  if (cls == "SingleCellExperiment") {
    args$reducedDims <- lapply(reduced, function(m) { rownames(m) <- cn; m })
    do.call(SingleCellExperiment::SingleCellExperiment, args)
  } else do.call(SummarizedExperiment::SummarizedExperiment, args)
}
# what the object already holds under `key`: its rowData (fData) column names, and whether metadata (notes) holds
# a bioqpfs result there ("result", with the columns it wrote), something else ("foreign") or nothing ("none")
existing_result <- function(x, cls, key) {
  if (cls == "matrix") return(list(columns = character(), kind = "none", var_columns = character()))
  cols <- if (cls == "ExpressionSet") colnames(Biobase::fData(x)) else colnames(SummarizedExperiment::rowData(x))
  meta <- if (cls == "ExpressionSet") Biobase::notes(x) else S4Vectors::metadata(x)
  old <- if (key %in% names(meta)) meta[[key]] else NULL
  kind <- if (is.null(old)) "none" else if (is.list(old) && all(c("params", "diagnostics", "selected") %in% names(old)))
    "result" else "foreign"
  owned <- if (kind == "result" && !is.null(old$var_columns)) as.character(unlist(old$var_columns)) else character()
  list(columns = as.character(cols), kind = kind, var_columns = owned)
}
write_result <- function(x, cls, cols, key, record, dropped = character()) {
  if (cls == "matrix") {   # no row names: 1, 2, ... as the R package's selectGenes() names them
    out <- frame(cols, if (is.null(rownames(x))) as.character(seq_len(nrow(x))) else rownames(x), TRUE)
    S4Vectors::metadata(out)[[key]] <- record
    return(out)
  }
  if (cls == "ExpressionSet") {
    fd <- Biobase::fData(x)
    fd <- fd[, setdiff(colnames(fd), dropped), drop = FALSE]
    for (nm in names(cols)) fd[[nm]] <- cols[[nm]]
    Biobase::fData(x) <- fd
    n <- Biobase::notes(x); n[[key]] <- record; Biobase::notes(x) <- n
    return(x)
  }
  rd <- SummarizedExperiment::rowData(x)
  rd <- rd[, setdiff(colnames(rd), dropped), drop = FALSE]
  for (nm in names(cols)) rd[[nm]] <- cols[[nm]]
  SummarizedExperiment::rowData(x) <- rd
  S4Vectors::metadata(x)[[key]] <- record
  x
}
list(r_class = r_class, decompose = decompose, column_kind = column_kind, dgc = dgc, frame = frame, build = build,
     existing_result = existing_result, write_result = write_result)
})
