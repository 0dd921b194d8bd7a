"""Ampere (sm_80+): ``mma_v2`` (mma.sync), async copies (cp.async) and mbarriers."""
from ...tensor import tensor
from ...mma import mma
from . import async_copy, mbarrier  # noqa: F401

__all__ = ["async_copy", "mbarrier", "mma_v2"]


def mma_v2(a, b, acc, input_precision=None) -> tensor:
    """``acc + a @ b`` with mma.sync: acc in NVMMADistributedLayout(version=[2, 0], ...),
    a/b in DotOperandLayout(0/1, parent=acc.layout, k_width=32 // bits). float32 operands
    run as tf32 (rounded to nearest, ties away, as cvt.rna.tf32.f32)."""
    return mma("mma_v2", a, b, acc, input_precision=input_precision or "tf32")
