#' bioqpfs: global selection of small, non-redundant gene panels
#'
#' Bioconductor interface to the bioqpfs engine (Python).  The one verb is
#' [selectGenes()], with methods for SummarizedExperiment,
#' SingleCellExperiment, ExpressionSet and any matrix-like object (ANY: matrix,
#' dgCMatrix, DelayedMatrix); [bioqpfsMethods()] lists the
#' selection methods and [bioqpfsPython()] says which Python interpreter runs
#' them (set it with `options(bioqpfs.python = ...)` or `BIOQPFS_PYTHON`).
#'
#' @keywords internal
"_PACKAGE"
