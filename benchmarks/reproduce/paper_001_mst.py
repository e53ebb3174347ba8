"""Sousa, Oliveira & Cardoso, *Feature selection with complexity measure in a QP setting* (paper 001).

The paper's datasets (Letter AH, SWD, BCCT) are not among ours and its results are printed only as
figures, so there is no number to put beside ours; this script runs its protocol idea on our datasets:
QPFS with MST relevance (``relevance="mst"`` / ``"mst_cpx"``) against QPFS with MI relevance, 10-fold CV
of a linear SVM.  Run: ``python benchmarks/reproduce/paper_001_mst.py [--quick]``.
"""
from _common import main

SIZES = [5, 10, 20]
METHODS = {"QPFS (MI relevance)": ("qpfs", {}), "QPFS (MST)": ("qpfs", {"relevance": "mst"}),
           "QPFS (MST CPX)": ("qpfs", {"relevance": "mst_cpx"})}

SPEC = dict(
    title="Paper 001 (MST complexity relevance in QPFS)",
    source="Sousa, Oliveira, Cardoso, Feature Selection with Complexity Measure in a Quadratic Programming "
           "Setting (papers/001)",
    protocol="ranking on all samples, 10-fold CV of a linear SVM (C=1) on the top-k genes",
    output="paper_001_mst.md",
    datasets=[
        dict(name="WDBC (569 x 30)", data="wdbc", quick=False, cv=10, sizes=SIZES, methods=METHODS,
             cite="none: the paper reports Letter AH, SWD and BCCT only, as figures", paper={}),
        dict(name="Colon (62 x 2,000)", data="colon", quick=True, cv=10, sizes=SIZES, methods=METHODS,
             cite="none: not in the paper", paper={}),
    ],
    notes="No printed number exists to compare with; the table records how the MST relevance of section 3.1 "
          "orders against MI relevance on our data.",
)

if __name__ == "__main__":
    main(SPEC)
