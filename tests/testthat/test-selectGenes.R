## selectGenes(): each S4 method, and identical results to the Python engine called directly.

expectPanel <- function(cols, nGenes, genes, key = "qpfs") {
    w <- cols[[paste0(key, "_weight")]]
    r <- cols[[paste0(key, "_rank")]]
    s <- cols[[paste0(key, "_selected")]]
    expect_type(w, "double")
    expect_type(s, "logical")
    expect_equal(sum(w), 1, tolerance = 1e-10)              # QPFS weights lie on the simplex
    expect_true(all(w >= 0))
    expect_setequal(r, seq_along(genes))                    # exact QPFS ranks every gene once
    expect_equal(sum(s), nGenes)
    expect_true(all(r[s] <= nGenes))
}

test_that("matrix method returns a DataFrame with the result columns and the record in metadata()", {
    skipIfNoEngine()
    t <- toyMatrix()
    res <- selectGenes(t$m, t$cls, nGenes = 4)
    expect_s4_class(res, "DataFrame")
    expect_identical(rownames(res), rownames(t$m))
    expect_identical(colnames(res), c("qpfs_weight", "qpfs_rank", "qpfs_selected"))
    expectPanel(res, 4, rownames(t$m))
    rec <- metadata(res)$qpfs
    expect_named(rec, c("params", "diagnostics", "selected"))
    expect_identical(rec$selected, rownames(t$m)[order(res$qpfs_rank)][1:4])
    expect_identical(rec$params$method, "qpfs")
    expect_identical(rec$params$n_genes, 4L)
    expect_equal(rec$params$alpha, rec$diagnostics$alpha_hat)
    ## the planted class-specific genes lead (gene5 is a copy of gene1: one of the two suffices)
    expect_true(all(c("gene2", "gene3") %in% rec$selected))
    expect_true(any(c("gene1", "gene5") %in% rec$selected))
})

test_that("SummarizedExperiment method writes rowData and metadata; labels by column or vector agree", {
    skipIfNoEngine()
    se <- toySE()
    out <- selectGenes(se, "type", nGenes = 5)
    expect_s4_class(out, "SummarizedExperiment")
    rd <- rowData(out)
    expect_identical(rd$symbol, rowData(se)$symbol)        # existing columns are kept
    expectPanel(rd, 5, rownames(se))
    expect_identical(metadata(out)$qpfs$params$groupby, "type")
    byVector <- selectGenes(se, as.character(se$type), nGenes = 5)
    expect_identical(rowData(byVector), rd)
    ## another assay, key and method parameter
    out2 <- selectGenes(se, "type", nGenes = 3, assay.type = "counts", keyAdded = "corr",
                        similarity = "correlation")
    expectPanel(rowData(out2), 3, rownames(se), key = "corr")
    expect_identical(metadata(out2)$corr$params$similarity, "correlation")
    expect_identical(metadata(out2)$corr$params$relevance, "hall")
})

test_that("SingleCellExperiment method defaults to logcounts", {
    skipIfNoEngine()
    sce <- toySCE()
    out <- selectGenes(sce, "type", nGenes = 5)
    expect_s4_class(out, "SingleCellExperiment")
    ref <- selectGenes(toySE(), "type", nGenes = 5, assay.type = "logcounts")
    for (col in c("qpfs_weight", "qpfs_rank", "qpfs_selected")) {
        expect_identical(rowData(out)[[col]], rowData(ref)[[col]])
    }
    counts <- selectGenes(sce, "type", nGenes = 5, assay.type = "counts")
    expect_false(identical(rowData(counts)$qpfs_weight, rowData(out)$qpfs_weight))
})

test_that("ExpressionSet method writes fData and notes", {
    skipIfNoEngine()
    es <- toyESet()
    out <- selectGenes(es, "type", nGenes = 5)
    expect_s4_class(out, "ExpressionSet")
    expectPanel(fData(out), 5, Biobase::featureNames(es))
    expect_identical(notes(out)$qpfs$selected, metadata(selectGenes(toySE(), "type", nGenes = 5))$qpfs$selected)
})

test_that("every method gives the same numbers as bioqpfs.select called directly in Python", {
    skipIfNoEngine()
    t <- toyMatrix()
    for (params in list(list(), list(similarity = "correlation"))) {
        ref <- pythonReference(t$m, t$cls, nGenes = 5, params = params)
        results <- list(
            matrix = do.call(selectGenes, c(list(t$m, t$cls, nGenes = 5), params)),
            SummarizedExperiment = rowData(do.call(selectGenes, c(list(toySE(), "type", nGenes = 5), params))),
            SingleCellExperiment = rowData(do.call(selectGenes, c(list(toySCE(), "type", nGenes = 5), params))),
            ExpressionSet = fData(do.call(selectGenes, c(list(toyESet(), "type", nGenes = 5), params))))
        for (cls in names(results)) {
            r <- results[[cls]]
            expect_equal(r$qpfs_weight, ref$weight, tolerance = 1e-12, label = paste(cls, "weights"))
            expect_identical(r$qpfs_rank, as.integer(ref$rank), label = paste(cls, "ranks"))
            expect_identical(r$qpfs_selected, ref$selected, label = paste(cls, "panel"))
        }
    }
})

test_that("bioqpfsMethods lists the registered methods", {
    skipIfNoEngine()
    m <- bioqpfsMethods()
    expect_true("qpfs" %in% names(m))
    expect_type(m, "character")
})

test_that("every registered method runs through selectGenes and stores a panel of nGenes", {
    skipIfNoEngine()
    t <- toyMatrix()
    for (method in names(bioqpfsMethods())) {
        res <- selectGenes(t$m, t$cls, method = method, nGenes = 4)
        key <- function(col) paste0(method, "_", col)
        expect_true(all(c(key("weight"), key("rank"), key("selected")) %in% colnames(res)), label = method)
        expect_identical(sum(res[[key("selected")]]), 4L, label = method)
        rec <- metadata(res)[[method]]
        expect_identical(rec$params$method, method, label = method)
        expect_setequal(rec$selected, rownames(t$m)[res[[key("selected")]]])
        ranked <- res[[key("rank")]]
        expect_identical(rec$selected, rownames(t$m)[order(ranked)][seq_len(4)], label = method)
    }
})
