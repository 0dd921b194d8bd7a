"""Example tensor-core kernels: GEMMs from FMA to warp-specialized wgmma, and attention.

Each runs in the interpreter on any machine (``backend="interpreter"``, with the target it is
written for) and is the starting point for the GPU backends' lowering of the same ops.
"""
