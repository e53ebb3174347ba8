#' Selection methods available in the bioqpfs engine
#'
#' Lists the methods registered in the Python engine (`bioqpfs.methods()`),
#' i.e. the values accepted by the `method` argument of [selectGenes()].
#'
#' @return A named character vector: method name -> one-line description.
#'
#' @examples
#' if (!is.null(bioqpfsPython(check = FALSE))) bioqpfsMethods()
#'
#' @export
bioqpfsMethods <- function() {
    engine <- .engine()
    registry <- reticulate::import("bioqpfs", convert = TRUE)
    m <- registry$methods()
    vapply(m, as.character, character(1))
}
