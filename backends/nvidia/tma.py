"""Host-side TMA: a TensorDescriptor as the 128-byte CUtensorMap a kernel parameter carries.

``cuTensorMapEncodeTiled`` takes dims innermost first, strides in bytes for every dim but
the innermost, and a box whose inner extent may not exceed the swizzle span (128/64/32
bytes; 16 bytes' worth of elements per row is the minimum). A block wider than the swizzle
span is copied as several boxes, one per column block of the NVMMA shared layout (which
stores such a tile as column blocks of the swizzle width, see shared_layouts.py), so the box
here is the block cut to one column block. Out-of-bounds elements read as zeros (or NaN
with ``padding="nan"``).
"""
from __future__ import annotations

from dataclasses import dataclass

from gluon_trace.errors import LaunchError
from gluon_trace.nvidia.hopper import unswizzled_box_problem

# gl dtype name -> CUtensorMapDataType name
_DTYPES = {"uint8": "UINT8", "int8": "UINT8", "float8e4nv": "UINT8", "float8e5": "UINT8",
           "uint16": "UINT16", "int16": "UINT16", "float16": "FLOAT16", "bfloat16": "BFLOAT16",
           "uint32": "UINT32", "int32": "INT32", "float32": "FLOAT32", "uint64": "UINT64",
           "int64": "INT64", "float64": "FLOAT64"}
_SWIZZLE = {0: "NONE", 32: "32B", 64: "64B", 128: "128B"}
_PROMOTION = {0: "NONE", 64: "L2_64B", 128: "L2_128B", 256: "L2_256B"}


@dataclass(frozen=True)
class Box:
    """What one TMA copy of the descriptor moves, and how many make a block."""
    dims: tuple[int, ...]       # innermost first, as the driver takes them
    copies: int                 # column blocks per block (inner extent / box inner extent)
    block_bytes: int            # shared-memory bytes of one column block


def box_of(desc) -> Box:
    """The box of a descriptor's block: its inner dim cut to the swizzle span."""
    item = desc.dtype.bits // 8
    lay = desc.layout
    if getattr(lay, "transposed", False) and len(desc.block_shape) >= 2:
        raise LaunchError("a TMA descriptor with a transposed NVMMA layout (the first dim contiguous in "
                          "shared memory) is not supported; describe the transposed tensor instead")
    # with no swizzle an NVMMA buffer of 2+ dims is 16-byte column blocks, each holding every
    # row (wgmma's core matrices); a TMA box with SWIZZLE_NONE lands row after row, densely, so
    # each column block is a box of its own (one box a row would land permuted)
    why = unswizzled_box_problem(desc.block_shape, item, lay)
    if why:  # (a descriptor refuses such a block where it is made; a traced type spec arrives here)
        raise LaunchError(why)
    span = getattr(lay, "swizzle_byte_width", 0) or (16 if len(desc.block_shape) >= 2 else
                                                     max(16, desc.block_shape[-1] * item))
    inner = min(desc.block_shape[-1], span // item)
    rest = list(reversed(desc.block_shape[:-1]))
    copies = desc.block_shape[-1] // inner
    rows = 1
    for d in desc.block_shape[:-1]:
        rows *= d
    return Box((inner, *rest), copies, rows * inner * item)


def encode_args(desc) -> dict:
    """The arguments of cuTensorMapEncodeTiled for ``desc`` (names as in the driver API)."""
    if desc.dtype.name not in _DTYPES:
        raise LaunchError(f"TMA cannot move {desc.dtype} elements")
    item = desc.dtype.bits // 8
    box = box_of(desc)
    rank = len(desc.shape)
    return {
        "dtype": _DTYPES[desc.dtype.name],
        "rank": rank,
        "address": desc._address,
        "global_dims": tuple(int(n) for n in reversed(desc.shape)),
        "global_strides": tuple(int(s) * item for s in reversed(desc.strides[:-1])),
        "box_dims": box.dims,
        "element_strides": (1,) * rank,
        "swizzle": _SWIZZLE[getattr(desc.layout, "swizzle_byte_width", 0)],
        "oob_fill": "NAN_REQUEST_ZERO_FMA" if desc.padding == "nan" else "NONE",
        "l2_promotion": _PROMOTION[getattr(desc, "l2_promotion", 256)],
    }


def encode(desc) -> bytes:
    """The CUtensorMap bytes (128) for ``desc``, through cuda-python's driver bindings."""
    from cuda.bindings import driver as cu
    a = encode_args(desc)
    u64 = getattr(cu, "cuuint64_t", int)  # the bindings want their own integer wrappers
    u32 = getattr(cu, "cuuint32_t", int)
    err, tmap = cu.cuTensorMapEncodeTiled(
        getattr(cu.CUtensorMapDataType, f"CU_TENSOR_MAP_DATA_TYPE_{a['dtype']}"), a["rank"], a["address"],
        [u64(x) for x in a["global_dims"]], [u64(x) for x in a["global_strides"]],
        [u32(x) for x in a["box_dims"]], [u32(x) for x in a["element_strides"]],
        cu.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE,
        getattr(cu.CUtensorMapSwizzle, f"CU_TENSOR_MAP_SWIZZLE_{a['swizzle']}"),
        getattr(cu.CUtensorMapL2promotion, f"CU_TENSOR_MAP_L2_PROMOTION_{a['l2_promotion']}"),
        getattr(cu.CUtensorMapFloatOOBfill, f"CU_TENSOR_MAP_FLOAT_OOB_FILL_{a['oob_fill']}"))
    if int(err) != 0:
        raise LaunchError(f"cuTensorMapEncodeTiled refused {desc!r}: {err}")
    import numpy as np
    raw = np.asarray(tmap.opaque, dtype=np.uint64).tobytes()
    if len(raw) != 128:
        raise LaunchError(f"a CUtensorMap is 128 bytes, the bindings gave {len(raw)}")
    return raw
