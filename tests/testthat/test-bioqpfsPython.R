## Finding the Python engine.

test_that("an interpreter set by the option that does not exist is an error naming the settings", {
    old <- options(bioqpfs.python = "/nonexistent/bin/python")
    on.exit(options(old))
    expect_error(bioqpfsPython(), "option bioqpfs.python does not exist: /nonexistent/bin/python")
    expect_error(bioqpfsPython(), "BIOQPFS_PYTHON")
})

test_that("the environment variable is used when the option is unset", {
    old <- options(bioqpfs.python = NULL)
    on.exit(options(old))
    oldEnv <- Sys.getenv("BIOQPFS_PYTHON", NA)
    on.exit(if (is.na(oldEnv)) Sys.unsetenv("BIOQPFS_PYTHON") else Sys.setenv(BIOQPFS_PYTHON = oldEnv), add = TRUE)
    Sys.setenv(BIOQPFS_PYTHON = "/nonexistent/python3")
    expect_error(bioqpfsPython(), "environment variable BIOQPFS_PYTHON does not exist")
})

test_that("the configured interpreter can import bioqpfs", {
    skipIfNoEngine()
    python <- bioqpfsPython()
    expect_true(file.exists(python))
    expect_true(bioqpfs:::.canImportBioqpfs(python))
})
