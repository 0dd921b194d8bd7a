"""What kernel authors call, imported as ``gl`` (names follow Gluon's)."""
from ..dtypes import (bfloat16, dtype, float8e4b8, float8e4nv, float8e5, float8e5b16, float16, float32, float64, int1, int8,
                      int16, int32, int64, pointer, uint8, uint16, uint32, uint64)
from ..layouts import (BlockedLayout, DistributedLayout, DistributedLinearLayout, LinearLayout,
                       SliceLayout)
from .control import else_, fori_loop, if_, range, static_range
from .core import (abs, aggregate, arange, argmax, argmin, associative_scan, atomic_add, atomic_and,
                   atomic_cas, atomic_max, atomic_min, atomic_or, atomic_xchg, atomic_xor,
                   broadcast, cdiv, ceil, clamp, clock64, constexpr, constexpr_function, convert_layout, cos,
                   cumsum, device_print, div_rn, erf, exp, exp2, expand_dims, fdiv, floor, fma, full,
                   full_like, globaltimer, join, load, log, log2, max, max_contiguous, maximum, min, minimum,
                   multiple_of, num_ctas, num_programs, num_warps, permute, program_id, reduce, reshape,
                   rsqrt, sin, split, sqrt, static_assert, static_print, store, sum, threads_per_warp,
                   trans, where, zeros, zeros_like)
from .tensor import broadcast_to, tensor, to_tensor
from ..shared_layouts import (MBarrierLayout, NVMMASharedLayout, PaddedSharedLayout, SharedLinearLayout,  # noqa: E402
                              SharedLayout, SwizzledSharedLayout)
from ..mma_layouts import (AMDMFMALayout, AMDWMMALayout, DotOperandLayout,  # noqa: E402,F401
                           NVMMADistributedLayout)
from .memory import (allocate_shared_memory, shared_memory_descriptor, tensor_descriptor,  # noqa: E402
                     thread_barrier, warp_specialize)
from .mma import dot_fma  # noqa: E402

bool = int1  # noqa: A001  (gl.bool reads better than gl.int1 in masks)
from . import amd, nvidia  # noqa: E402,F401
