## Clear errors for bad input, before any work is done in Python.

test_that("missing labels argument is an error naming what to pass", {
    expect_error(selectGenes(toySE()), "'labels' is missing")
})

test_that("a labels column that does not exist is an error listing the available columns", {
    expect_error(selectGenes(toySE(), "celltype"), "not a column of colData\\(x\\); available: type, batch")
    expect_error(selectGenes(toySCE(), "celltype"), "not a column of colData")
    expect_error(selectGenes(toyESet(), "celltype"), "not a column of pData\\(x\\); available: type")
})

test_that("NA labels are an error naming the samples", {
    t <- toyMatrix()
    lab <- t$cls
    lab[c(2, 7)] <- NA
    expect_error(selectGenes(t$m, lab), "2 missing value\\(s\\) \\(samples s2, s7\\)")
    se <- toySE()
    se$type[3] <- NA
    expect_error(selectGenes(se, "type"), "1 missing value\\(s\\) \\(samples s3\\)")
    expect_error(selectGenes(t$m, t$cls[-1]), "has 35 value\\(s\\) but there are 36 samples")
})

test_that("a wrong assay name is an error listing the assays", {
    expect_error(selectGenes(toySE(), "type", assay.type = "tpm"),
                 "assay.type = \"tpm\" is not an assay of x; available: logcounts, counts")
    expect_error(selectGenes(toySE(), "type", assay.type = 3), "available: logcounts, counts")
    ## a fractional index read the assay it truncates to (1.5: logcounts); NA failed inside if()
    expect_error(selectGenes(toySE(), "type", assay.type = 1.5), "assay.type = 1.5 is not an assay of x")
    expect_error(selectGenes(toySE(), "type", assay.type = NA_real_), "assay.type = NA_real_ is not an assay of x")
    sce <- SingleCellExperiment::SingleCellExperiment(assays = list(counts = toyMatrix()$m),
                                                      colData = S4Vectors::DataFrame(type = toyMatrix()$cls))
    expect_error(selectGenes(sce, "type"), "assay.type = \"logcounts\" is not an assay of x; available: counts")
    expect_error(selectGenes(toyESet(), "type", assay.type = "counts"),
                 "not an assayData element of x; available: exprs")
})

test_that("bad method, nGenes or parameters give the engine's message", {
    skipIfNoEngine()
    t <- toyMatrix()
    expect_error(selectGenes(t$m, t$cls, method = "nosuch"), "unknown method 'nosuch'")
    expect_error(selectGenes(t$m, t$cls, method = c("qpfs", "maxrel")),
                 "'method' must be NULL \\(the default recipe\\) or one method name")
    expect_error(selectGenes(t$m, t$cls, nGenes = 0), "'nGenes' must be one positive whole number or \"auto\"")
    expect_error(selectGenes(t$m, t$cls, bogus = 1), "does not take parameter\\(s\\) bogus")
    ## the engine's messages ended with a newline (an empty line after R's error)
    expect_error(selectGenes(t$m, t$cls, bogus = 1), "bogus; it accepts: [a-z_, ]+$")
    expect_error(selectGenes(t$m, t$cls, method = "qpfs", nGenes = 5, keyAdded = NULL, randomState = 0, 1),
                 "must be named method parameters")
})

test_that("numbers R would coerce, NA parameters and empty objects are refused by name (stop 47 hunt)", {
    skipIfNoEngine()
    t <- toyMatrix()
    ## reticulate turned these into -2147483648 ("got -2147483648"), True or a truncated seed
    expect_error(selectGenes(t$m, t$cls, nGenes = Inf), "'nGenes' must be one positive whole number .* not Inf")
    expect_error(selectGenes(t$m, t$cls, nGenes = 1e10), "'nGenes' must be one positive whole number")
    for (bad in list(NA, "a", 3e9, c(1, 2), 1.5, -1)) {
        expect_error(selectGenes(t$m, t$cls, randomState = bad), "'randomState' must be NULL or one whole number",
                     label = deparse(bad))
    }
    expect_error(selectGenes(t$m, t$cls, method = "qpfs", polish = NA), "the method parameter 'polish' is NA")
    expect_error(selectGenes(t$m, t$cls, method = "qpfs", alpha = NA_real_), "the method parameter 'alpha' is NA")
    expect_error(selectGenes(t$m[0, ], t$cls), "has 0 gene\\(s\\) and 36 sample\\(s\\)")
    m <- t$m
    rownames(m)[3] <- NA
    expect_error(selectGenes(m, t$cls), "NA row names \\(gene 3\\)")
    ## continuous numbers as labels: the engine's check (R made them strings, so any number was a class)
    set.seed(1)
    expect_error(selectGenes(t$m, round(runif(36), 1)), "labels look continuous .* R's cut\\(\\)")
    expect_no_error(selectGenes(t$m, rep(1:3, each = 12), method = "maxrel", nGenes = 3))
    expect_error(selectGenes(toySE(), c("tpye", "cell_tpye")),
                 "labels = c\\(\"tpye\", \"cell_tpye\"\\) names no column of colData\\(x\\) \\(available: type, batch\\)")
    ## a preselected gene outside subset.row is a row of x, not an unknown gene
    expect_error(selectGenes(t$m, t$cls, method = "qpfs", nGenes = 3, subset.row = 1:10, preselected = "gene20"),
                 "preselected gene\\(s\\) gene20 are left out by subset.row")
})

test_that("Python-only arguments in ... and a keyAdded that is not one string are refused in R's words", {
    skipIfNoEngine()
    t <- toyMatrix()
    ## Python answered "select_genes() got multiple values for keyword argument 'random_state'"
    expect_error(selectGenes(t$m, t$cls, nGenes = 5, random_state = 3),
                 "'random_state' is an argument of the Python function.*use selectGenes\\(\\)'s 'randomState'")
    expect_error(selectGenes(t$m, t$cls, nGenes = 5, n_genes = 3), "use selectGenes\\(\\)'s 'nGenes'")
    expect_error(selectGenes(t$m, t$cls, nGenes = 5, batch_key = "b"), "use selectGenes\\(\\)'s 'block'")
    ## copy = TRUE lost the result: "no selection stored under key 'bioqpfs'"
    expect_error(selectGenes(t$m, t$cls, nGenes = 5, copy = TRUE), "'copy' .* has no such option: leave it out")
    ## keyAdded = NA stored the result under "NA" (columns NA_weight, ...)
    expect_error(selectGenes(t$m, t$cls, method = "qpfs", nGenes = 5, keyAdded = NA),
                 "'keyAdded' must be NULL .* or one character string, not NA")
    expect_error(selectGenes(toySE(), "type", method = "qpfs", nGenes = 5, keyAdded = c("a", "b")),
                 "'keyAdded' must be NULL")
})

test_that("duplicated row names are reported in R's words, not AnnData's", {
    skipIfNoEngine()
    t <- toyMatrix()
    m <- t$m
    rownames(m)[2] <- "gene1"   # gene1 and gene2 both separate classes: the panel holds a duplicated name
    ## was: "not unique in adata.var_names ... call adata.var_names_make_unique()"
    err <- tryCatch(suppressWarnings(selectGenes(m, t$cls, method = "qpfs", nGenes = 5)),
                    error = conditionMessage)
    expect_match(err, "not unique in rownames\\(x\\) \\(gene1\\)")
    expect_match(err, "rownames(x) <- make.unique(rownames(x))", fixed = TRUE)
    expect_false(grepl("adata\\.|var_names|selection_df", err))
    ## the engine's warning given before that error reached R only with a result: it was lost
    seen <- character()
    withCallingHandlers(tryCatch(selectGenes(m, t$cls, method = "qpfs", nGenes = 5), error = function(e) NULL),
                        warning = function(w) {
                            seen <<- c(seen, conditionMessage(w))
                            invokeRestart("muffleWarning")
                        })
    expect_length(grep("rownames\\(x\\) are not unique", seen), 1L)
    m <- t$m
    rownames(m)[40] <- "gene39"   # noise genes, outside the panel: a warning, in R's words too
    expect_warning(res <- selectGenes(m, t$cls, method = "qpfs", nGenes = 3),
                   "rownames\\(x\\) are not unique .* rownames\\(x\\) <- make.unique\\(rownames\\(x\\)\\)")
    expect_equal(sum(res$qpfs_selected), 3)
})
