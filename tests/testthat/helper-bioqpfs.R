## Shared fixtures for the bioqpfs tests.

## Skip only when no engine is configured at all; a configured one (option or BIOQPFS_PYTHON, as
## 'bash dev.sh test' sets) must work, so its failures fail the tests.
skipIfNoEngine <- function() {
    configured <- nzchar(Sys.getenv("BIOQPFS_PYTHON")) || !is.null(getOption("bioqpfs.python"))
    if (!configured && is.null(bioqpfsPython(check = FALSE))) {
        testthat::skip("no Python with the bioqpfs module (set BIOQPFS_PYTHON to run these tests)")
    }
}

## 40 genes x 36 samples, three classes; genes 1-4 separate the classes, 5 copies gene 1 (redundant).
toyMatrix <- function() {
    set.seed(20240601)
    m <- matrix(rnorm(40 * 36), 40, 36, dimnames = list(paste0("gene", 1:40), paste0("s", 1:36)))
    cls <- rep(c("A", "B", "C"), each = 12)
    m[1, cls == "A"] <- m[1, cls == "A"] + 4
    m[2, cls == "B"] <- m[2, cls == "B"] + 4
    m[3, cls == "C"] <- m[3, cls == "C"] - 4
    m[4, cls != "A"] <- m[4, cls != "A"] + 3
    m[5, ] <- m[1, ] + rnorm(36, sd = 0.05)
    list(m = m, cls = cls)
}

toySE <- function() {
    t <- toyMatrix()
    SummarizedExperiment::SummarizedExperiment(
        assays = list(logcounts = t$m, counts = round(2^t$m * 10)),
        rowData = S4Vectors::DataFrame(symbol = tolower(rownames(t$m))),
        colData = S4Vectors::DataFrame(type = factor(t$cls), batch = rep(1:2, 18), row.names = colnames(t$m)))
}

toySCE <- function() {
    se <- toySE()
    SingleCellExperiment::SingleCellExperiment(
        assays = list(counts = SummarizedExperiment::assay(se, "counts"),
                      logcounts = SummarizedExperiment::assay(se, "logcounts")),
        colData = SummarizedExperiment::colData(se), rowData = SummarizedExperiment::rowData(se))
}

toyESet <- function() {
    t <- toyMatrix()
    Biobase::ExpressionSet(t$m, phenoData = Biobase::AnnotatedDataFrame(
        data.frame(type = t$cls, row.names = colnames(t$m))))
}

## The Python engine called directly in a separate process on the same matrix sent as text:
## bioqpfs.select(X, y, method=..., n_genes=..., **params), an independent route from selectGenes().
pythonReference <- function(m, labels, method = "qpfs", nGenes = 5, params = list()) {
    dir <- tempfile("bioqpfs-ref")
    dir.create(dir)
    on.exit(unlink(dir, recursive = TRUE))
    X <- formatC(t(m), digits = 17, format = "g")
    utils::write.table(X, file.path(dir, "X.tsv"), sep = "\t", quote = FALSE, row.names = FALSE,
                       col.names = FALSE)
    writeLines(as.character(labels), file.path(dir, "y.txt"))
    script <- c(
        "import json, sys, numpy as np, bioqpfs",
        "d = sys.argv[1]",
        "X = np.loadtxt(d + '/X.tsv', delimiter='\\t', ndmin=2)",
        "y = np.array(open(d + '/y.txt').read().split('\\n')[:-1])",
        "params = json.load(open(d + '/params.json'))",
        "sel = bioqpfs.select(X, y, method=sys.argv[2], n_genes=int(sys.argv[3]), random_state=0, **params)",
        "np.savetxt(d + '/out.tsv', np.column_stack([sel.weights, sel.rank, sel.selected_mask]), fmt='%.17g', delimiter='\\t')")
    writeLines(script, file.path(dir, "ref.py"))
    writeLines(if (length(params)) {
        paste0("{", paste(sprintf("\"%s\": \"%s\"", names(params), unlist(params)), collapse = ", "), "}")
    } else "{}", file.path(dir, "params.json"))
    python <- bioqpfsPython()
    status <- system2(python, c(file.path(dir, "ref.py"), dir, method, nGenes), stdout = TRUE, stderr = TRUE)
    if (!is.null(attr(status, "status"))) stop("reference Python failed: ", paste(status, collapse = "\n"))
    out <- utils::read.delim(file.path(dir, "out.tsv"), header = FALSE, colClasses = "character")
    list(weight = as.double(out[[1]]), rank = as.double(out[[2]]), selected = as.double(out[[3]]) == 1)
}
