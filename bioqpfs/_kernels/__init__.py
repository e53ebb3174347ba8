"""Numerical kernels: numpy/scipy/numba only, arrays in -> arrays out, inputs never mutated.

No kernel knows about AnnData, pandas, logging or R (DESIGN.md section 1).
"""
