library(testthat)
library(bioqpfs)

test_check("bioqpfs")
