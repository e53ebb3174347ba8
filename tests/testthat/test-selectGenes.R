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
    res <- selectGenes(t$m, t$cls, method = "qpfs", nGenes = 4)
    expect_s4_class(res, "DataFrame")
    expect_identical(rownames(res), rownames(t$m))
    expect_identical(colnames(res), c("qpfs_weight", "qpfs_rank", "qpfs_selected"))
    expectPanel(res, 4, rownames(t$m))
    rec <- metadata(res)$qpfs
    expect_named(rec, c("params", "diagnostics", "selected", "var_columns"))
    expect_identical(rec$var_columns, colnames(res))
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
    out <- selectGenes(se, "type", method = "qpfs", nGenes = 5)
    expect_s4_class(out, "SummarizedExperiment")
    rd <- rowData(out)
    expect_identical(rd$symbol, rowData(se)$symbol)        # existing columns are kept
    expectPanel(rd, 5, rownames(se))
    expect_identical(metadata(out)$qpfs$params$groupby, "type")
    byVector <- selectGenes(se, as.character(se$type), method = "qpfs", nGenes = 5)
    expect_identical(rowData(byVector), rd)
    ## another assay, key and method parameter
    out2 <- selectGenes(se, "type", method = "qpfs", nGenes = 3, assay.type = "counts", keyAdded = "corr",
                        similarity = "correlation")
    expectPanel(rowData(out2), 3, rownames(se), key = "corr")
    expect_identical(metadata(out2)$corr$params$similarity, "correlation")
    expect_identical(metadata(out2)$corr$params$relevance, "hall")
})

test_that("SingleCellExperiment method defaults to logcounts", {
    skipIfNoEngine()
    sce <- toySCE()
    out <- selectGenes(sce, "type", method = "qpfs", nGenes = 5)
    expect_s4_class(out, "SingleCellExperiment")
    ref <- selectGenes(toySE(), "type", method = "qpfs", nGenes = 5, assay.type = "logcounts")
    for (col in c("qpfs_weight", "qpfs_rank", "qpfs_selected")) {
        expect_identical(rowData(out)[[col]], rowData(ref)[[col]])
    }
    counts <- selectGenes(sce, "type", method = "qpfs", nGenes = 5, assay.type = "counts")
    expect_false(identical(rowData(counts)$qpfs_weight, rowData(out)$qpfs_weight))
})

test_that("ExpressionSet method writes fData and notes", {
    skipIfNoEngine()
    es <- toyESet()
    out <- selectGenes(es, "type", method = "qpfs", nGenes = 5)
    expect_s4_class(out, "ExpressionSet")
    expectPanel(fData(out), 5, Biobase::featureNames(es))
    expect_identical(notes(out)$qpfs$selected, metadata(selectGenes(toySE(), "type", method = "qpfs", nGenes = 5))$qpfs$selected)
})

test_that("every method gives the same numbers as bioqpfs.select called directly in Python", {
    skipIfNoEngine()
    t <- toyMatrix()
    for (params in list(list(), list(similarity = "correlation"))) {
        ref <- pythonReference(t$m, t$cls, nGenes = 5, params = params)
        results <- list(
            matrix = do.call(selectGenes, c(list(t$m, t$cls, method = "qpfs", nGenes = 5), params)),
            SummarizedExperiment = rowData(do.call(selectGenes, c(list(toySE(), "type", method = "qpfs", nGenes = 5), params))),
            SingleCellExperiment = rowData(do.call(selectGenes, c(list(toySCE(), "type", method = "qpfs", nGenes = 5), params))),
            ExpressionSet = fData(do.call(selectGenes, c(list(toyESet(), "type", method = "qpfs", nGenes = 5), params))))
        for (cls in names(results)) {
            r <- results[[cls]]
            expect_equal(r$qpfs_weight, ref$weight, tolerance = 1e-12, label = paste(cls, "weights"))
            expect_identical(r$qpfs_rank, as.integer(ref$rank), label = paste(cls, "ranks"))
            expect_identical(r$qpfs_selected, ref$selected, label = paste(cls, "panel"))
        }
    }
})

test_that("method = NULL (the default) runs the default recipe of every face, stored under 'bioqpfs'", {
    skipIfNoEngine()
    t <- toyMatrix()
    ## the recipe named explicitly (Python bioqpfs.DEFAULT_PANEL), in a separate Python process
    recipe <- list(class_weight = "balanced", discretization = "auto", relevance_bins = "per_class",
                   relevance = "auto", self_redundancy = "constant")
    ref <- pythonReference(t$m, t$cls, method = "qpfs_cover", nGenes = 5, params = recipe)
    named <- function(x, labels) do.call(selectGenes, c(list(x, labels, method = "qpfs_cover", nGenes = 5,
                                                             keyAdded = "bioqpfs"), recipe))
    runs <- list(
        matrix = list(selectGenes(t$m, t$cls, nGenes = 5), named(t$m, t$cls), identity, metadata),
        SummarizedExperiment = list(selectGenes(toySE(), "type", nGenes = 5), named(toySE(), "type"),
                                    rowData, metadata),
        SingleCellExperiment = list(selectGenes(toySCE(), "type", nGenes = 5), named(toySCE(), "type"),
                                    rowData, metadata),
        ExpressionSet = list(selectGenes(toyESet(), "type", nGenes = 5), named(toyESet(), "type"), fData, notes))
    for (cls in names(runs)) {
        r <- runs[[cls]]
        cols <- r[[3]](r[[1]])
        expect_identical(grep("^bioqpfs_", colnames(cols), value = TRUE),
                         c("bioqpfs_weight", "bioqpfs_rank", "bioqpfs_selected", "bioqpfs_class"), label = cls)
        expect_equal(cols$bioqpfs_weight, ref$weight, tolerance = 1e-12, label = paste(cls, "weights"))
        expect_identical(cols$bioqpfs_rank, as.integer(ref$rank), label = paste(cls, "ranks"))
        expect_identical(cols$bioqpfs_selected, ref$selected, label = paste(cls, "panel"))
        expect_identical(as.data.frame(cols)[grep("^bioqpfs_", colnames(cols))],
                         as.data.frame(r[[3]](r[[2]]))[grep("^bioqpfs_", colnames(cols))], label = cls)
        rec <- r[[4]](r[[1]])$bioqpfs
        explicit <- r[[4]](r[[2]])$bioqpfs
        expect_identical(rec$params[c("method", "preset", "class_weight", "discretization")],
                         list(method = "qpfs_cover", preset = "default", class_weight = "balanced",
                              discretization = "auto"), label = cls)
        expect_identical(explicit$params$preset, "paper", label = cls)     # a named method: its paper settings
        expect_identical(rec$params[setdiff(names(rec$params), "preset")],
                         explicit$params[setdiff(names(explicit$params), "preset")], label = cls)
        expect_identical(rec$selected, explicit$selected, label = cls)
    }
    ## a parameter given with the default overrides the recipe's
    quantile <- selectGenes(t$m, t$cls, nGenes = 5, discretization = "quantile")
    expect_identical(metadata(quantile)$bioqpfs$params[c("preset", "discretization")],
                     list(preset = "default", discretization = "quantile"))
    qref <- pythonReference(t$m, t$cls, method = "qpfs_cover", nGenes = 5,
                            params = list(class_weight = "balanced", discretization = "quantile",
                                          relevance_bins = "per_class", relevance = "auto", self_redundancy = "constant"))
    expect_equal(quantile$bioqpfs_weight, qref$weight, tolerance = 1e-12)
    expect_false(isTRUE(all.equal(quantile$bioqpfs_weight, ref$weight)))
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

test_that("nGenes = \"auto\" picks the one-SE size of the recorded CV curve, on every class", {
    skipIfNoEngine()
    ## 80 samples x 60 genes, two classes; genes 1-12 each shifted by 0.8: the CV error falls for a while
    set.seed(2)
    m <- matrix(rnorm(60 * 80), 60, 80, dimnames = list(paste0("g", 1:60), paste0("s", 1:80)))
    cls <- rep(c("A", "B"), each = 40)
    m[1:12, cls == "B"] <- m[1:12, cls == "B"] + 0.8
    se <- SummarizedExperiment::SummarizedExperiment(assays = list(logcounts = m),
                                                     colData = S4Vectors::DataFrame(type = cls))
    sce <- as(se, "SingleCellExperiment")
    eset <- Biobase::ExpressionSet(m, phenoData = Biobase::AnnotatedDataFrame(
        data.frame(type = cls, row.names = colnames(m))))
    outs <- list(matrix = selectGenes(m, cls, method = "mrmr_mid", nGenes = "auto"),
                 SummarizedExperiment = selectGenes(se, "type", method = "mrmr_mid", nGenes = "auto"),
                 SingleCellExperiment = selectGenes(sce, "type", method = "mrmr_mid", nGenes = "auto"),
                 ExpressionSet = selectGenes(eset, "type", method = "mrmr_mid", nGenes = "auto"))
    records <- list(matrix = metadata(outs$matrix)$mrmr_mid, SummarizedExperiment = metadata(outs[[2]])$mrmr_mid,
                    SingleCellExperiment = metadata(outs[[3]])$mrmr_mid, ExpressionSet = notes(outs[[4]])$mrmr_mid)
    columns <- list(outs$matrix, rowData(outs[[2]]), rowData(outs[[3]]), fData(outs[[4]]))
    auto <- records$matrix$n_genes_auto
    expect_named(auto, c("n_genes", "rule", "grid", "curve"))
    grid <- c(5L, 10L, 15L, 20L, 30L, 40L, 50L, 60L)                 # the default grid, capped at 60 genes
    expect_identical(auto$grid, grid)
    curve <- as.data.frame(auto$curve)
    expect_identical(curve$n_genes, grid)
    ## the one-SE rule written out: best mean error (smallest size among ties), then the smallest size within its SE
    best <- which(curve$mean_error == min(curve$mean_error))[1]
    oneSE <- curve$n_genes[which(curve$mean_error <= curve$mean_error[best] + curve$se_error[best])[1]]
    ## on this data the best mean error is at 30 genes and the one-SE size is 15: the rule, not the argmin
    expect_true(oneSE > 5 && oneSE < 60)
    expect_identical(auto$n_genes, oneSE)
    for (i in seq_along(records)) {
        timeless <- function(a) { a$curve$seconds_select <- NULL; a }   # the selection's run time differs
        expect_identical(timeless(records[[i]]$n_genes_auto), timeless(auto), label = names(records)[i])
        expect_identical(records[[i]]$params$n_genes, oneSE, label = names(records)[i])
        expect_equal(sum(columns[[i]]$mrmr_mid_selected), oneSE, label = names(records)[i])
        expect_identical(columns[[i]]$mrmr_mid_rank, outs$matrix$mrmr_mid_rank, label = names(records)[i])
    }
    ## the panel is the fixed-size run at the chosen size
    fixed <- selectGenes(m, cls, method = "mrmr_mid", nGenes = oneSE)
    expect_identical(as.data.frame(fixed), as.data.frame(outs$matrix))
    expect_null(metadata(fixed)$mrmr_mid$n_genes_auto)
    expect_error(selectGenes(m, cls, nGenes = "Auto"), "'nGenes' must be one positive whole number or \"auto\"")
    expect_error(selectGenes(m, cls, nGenes = c("auto", "auto")), "'nGenes' must be one positive whole number")
})

test_that("preselected forces genes first, given by name, 1-based row index or logical vector", {
    skipIfNoEngine()
    t <- toyMatrix()
    genes <- rownames(t$m)
    byName <- selectGenes(t$m, t$cls, method = "mrmr_mid", nGenes = 4, preselected = genes[c(6, 4)])
    rank <- byName$mrmr_mid_rank
    ## the forced genes come first, in the given order (R row 6 then row 4: not 0-based rows 7 and 5)
    expect_identical(genes[order(rank)][1:2], genes[c(6, 4)])
    expect_identical(metadata(byName)$mrmr_mid$params$preselected, genes[c(6, 4)])
    byIndex <- selectGenes(t$m, t$cls, method = "mrmr_mid", nGenes = 4, preselected = c(6, 4))
    expect_identical(as.data.frame(byIndex), as.data.frame(byName))
    ## a logical vector keeps the row order of the matrix
    byMask <- selectGenes(t$m, t$cls, method = "mrmr_mid", nGenes = 4, preselected = seq_along(genes) %in% c(4, 6))
    expect_identical(genes[order(byMask$mrmr_mid_rank)][1:2], genes[c(4, 6)])
    expect_error(selectGenes(t$m, t$cls, nGenes = 4, preselected = 0), "row indices in 1..")
    expect_error(selectGenes(t$m, t$cls, nGenes = 4, preselected = length(genes) + 1), "row indices in 1..")
    expect_error(selectGenes(t$m, t$cls, nGenes = 4, preselected = "nosuchgene"), "nosuchgene")
})

test_that("block = (scran's name) gives batch-aware statistics: a vector or a colData column", {
    skipIfNoEngine()
    t <- toyMatrix()
    plain <- selectGenes(t$m, t$cls, method = "qpfs", nGenes = 5)
    oneBlock <- selectGenes(t$m, t$cls, method = "qpfs", nGenes = 5, block = rep("only", ncol(t$m)))
    ## a single batch: the batch-aware measures are the plain ones
    expect_identical(oneBlock$qpfs_rank, plain$qpfs_rank)
    expect_identical(oneBlock$qpfs_weight, plain$qpfs_weight)
    donor <- rep(c("d1", "d2"), length.out = ncol(t$m))
    byVector <- selectGenes(t$m, t$cls, method = "qpfs", nGenes = 5, block = donor)
    expect_identical(metadata(byVector)$qpfs$params$batch_key, "block")
    expect_identical(metadata(byVector)$qpfs$params$n_batches, 2L)
    se <- toySE()
    SummarizedExperiment::colData(se)$donor <- donor
    byColumn <- selectGenes(se, "type", method = "qpfs", nGenes = 5, block = "donor")
    expect_identical(SummarizedExperiment::rowData(byColumn)$qpfs_rank, byVector$qpfs_rank)
    expect_identical(metadata(byColumn)$qpfs$params$batch_key, "donor")
    expect_error(selectGenes(t$m, t$cls, method = "qpfs", block = c(NA, donor[-1])), "'block' has 1 missing")
    expect_error(selectGenes(t$m, t$cls, method = "qpfs", block = donor[-1]), "'block' has 35 value")
    expect_error(selectGenes(se, "type", method = "qpfs", block = "site"), "block = \"site\" is not a column")
    expect_error(selectGenes(t$m, t$cls, method = "random", block = donor), "does not take block")
})

test_that("hierarchical labels: several colData columns (coarse to fine) or a data frame of levels", {
    skipIfNoEngine()
    t <- toyMatrix()
    lineage <- ifelse(t$cls == "C", "L2", "L1")   # A and B in one lineage, C in the other
    se <- toySE()
    SummarizedExperiment::colData(se)$lineage <- lineage
    out <- selectGenes(se, c("lineage", "type"), method = "qpfs", nGenes = 5)
    params <- metadata(out)$qpfs$params
    expect_identical(params$groupby, c("lineage", "type"))
    expect_identical(params$groupby_levels, c("lineage", "type"))
    expect_equal(params$groupby_weights, c(0.5, 0.5))
    byFrame <- selectGenes(t$m, data.frame(lineage = lineage, type = t$cls), method = "qpfs", nGenes = 5)
    expect_identical(byFrame$qpfs_weight, SummarizedExperiment::rowData(out)$qpfs_weight)
    expect_identical(metadata(byFrame)$qpfs$params$groupby, c("lineage", "type"))
    ## weight 0 on the lineage: F = 0 I(X; lineage) + 1 I(X; type) is the plain relevance, bit for bit
    plain <- selectGenes(t$m, t$cls, method = "qpfs", nGenes = 5)
    fineOnly <- selectGenes(se, c("lineage", "type"), method = "qpfs", nGenes = 5, groupby_weights = c(0, 1))
    expect_identical(SummarizedExperiment::rowData(fineOnly)$qpfs_weight, plain$qpfs_weight)
    coarseOnly <- selectGenes(se, c("lineage", "type"), method = "qpfs", nGenes = 5, groupby_weights = c(1, 0))
    expect_false(identical(SummarizedExperiment::rowData(coarseOnly)$qpfs_weight, plain$qpfs_weight))
    expect_error(selectGenes(se, c("lineage", "nope"), method = "qpfs"), "labels = \"nope\" is not a column")
    expect_error(selectGenes(se, c("batch", "type"), method = "qpfs"), "not nested: class 'A' of level 'type'")
    expect_error(selectGenes(se, c("lineage", "type")), "does not take hierarchical labels")
    expect_error(selectGenes(se, c("lineage", "type"), method = "qpfs", groupby_weights = c(1, 2, 3)),
                 "groupby_weights has 3 value")
})

test_that("backend in ... reaches the engine: 'cpu' gives the same panel, an unknown one the engine's error", {
    skipIfNoEngine()
    t <- toyMatrix()
    plain <- selectGenes(t$m, t$cls, method = "qpfs", nGenes = 4)
    cpu <- selectGenes(t$m, t$cls, method = "qpfs", nGenes = 4, backend = "cpu")
    expect_identical(metadata(cpu)$qpfs$selected, metadata(plain)$qpfs$selected)
    expect_error(selectGenes(t$m, t$cls, method = "qpfs", nGenes = 4, backend = "tpu"),
                 "backend must be one of 'auto', 'cpu', 'gpu', got 'tpu'", fixed = TRUE)
})

test_that("the panel does not depend on a factor's level order: the classes go in sorted label order", {
    skipIfNoEngine()
    t <- toyMatrix()
    ## the default recipe goes round the classes in the sorted order of their labels, whatever a factor's level
    ## order (it followed the levels, so R factors, Python Categoricals and strings could give different panels)
    byFactor <- selectGenes(t$m, factor(t$cls, levels = c("C", "B", "A")), nGenes = 4)
    abc <- selectGenes(t$m, factor(t$cls), nGenes = 4)
    plain <- selectGenes(t$m, t$cls, nGenes = 4)
    expect_identical(byFactor$bioqpfs_rank, abc$bioqpfs_rank)
    expect_identical(plain$bioqpfs_rank, abc$bioqpfs_rank)
    ## labels whose sorted order is C, B, A: that order decides, so the panel is another one
    renamed <- selectGenes(t$m, c(A = "z_A", B = "y_B", C = "x_C")[t$cls], nGenes = 4)
    expect_false(identical(renamed$bioqpfs_rank, abc$bioqpfs_rank))
})

test_that("labels named by the sample names are matched by name", {
    skipIfNoEngine()
    t <- toyMatrix()
    named <- stats::setNames(t$cls, colnames(t$m))
    set.seed(3)
    shuffled <- named[sample(36)]
    expect_identical(selectGenes(t$m, shuffled, method = "qpfs", nGenes = 5)$qpfs_rank,
                     selectGenes(t$m, t$cls, method = "qpfs", nGenes = 5)$qpfs_rank)
})

test_that("a re-run under a key replaces its own columns; a user's column or metadata entry is never overwritten", {
    skipIfNoEngine()
    first <- selectGenes(toySE(), "type", nGenes = 5, keyAdded = "k")        # the default recipe writes k_class
    expect_true("k_class" %in% colnames(rowData(first)))
    expect_identical(metadata(first)$k$var_columns, grep("^k_", colnames(rowData(first)), value = TRUE))
    again <- selectGenes(first, "type", method = "qpfs", nGenes = 5, keyAdded = "k")
    expect_identical(colnames(rowData(again)), c("symbol", "k_weight", "k_rank", "k_selected"))   # no stale k_class
    expect_identical(metadata(again)$k$params$method, "qpfs")
    se <- toySE()
    rowData(se)$qpfs_selected <- rep(c("validated", "failed"), 20)
    expect_error(selectGenes(se, "type", method = "qpfs", nGenes = 5),
                 "rowData\\(x\\) has column\\(s\\) qpfs_selected that were not written by bioqpfs .* keyAdded")
    se <- toySE()
    metadata(se)$qpfs <- list(note = "curated qPCR panel")
    expect_error(selectGenes(se, "type", method = "qpfs", nGenes = 5),
                 "metadata\\(x\\)\\['qpfs'\\] exists and was not written by bioqpfs; choose another keyAdded")
    es <- toyESet()
    Biobase::fData(es)$maxrel_rank <- 1
    expect_error(selectGenes(es, "type", method = "maxrel", nGenes = 3), "maxrel_rank that were not written")
})

test_that("the engine's warnings are R warnings", {
    skipIfNoEngine()
    t <- toyMatrix()
    t$m[7, ] <- 1                                                            # a constant gene
    expect_warning(selectGenes(t$m, t$cls, method = "qpfs", nGenes = 3), "constant gene\\(s\\) .* gene7")
})

test_that("a labels column named 'block' and a block vector are two columns", {
    skipIfNoEngine()
    se <- toySE()
    se$block <- se$type                                                      # the classes, in a column named block
    batches <- rep(c("b1", "b2"), 18)
    out <- selectGenes(se, "block", method = "mrmr_mid", nGenes = 4, block = batches)
    ref <- selectGenes(se, "type", method = "mrmr_mid", nGenes = 4, block = batches)
    expect_identical(rowData(out)$mrmr_mid_rank, rowData(ref)$mrmr_mid_rank)
})
