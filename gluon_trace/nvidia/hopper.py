"""Host-side TMA tensor descriptors (as Gluon's ``gluon.nvidia.hopper.TensorDescriptor``).

A descriptor names a global tensor (base address, shape, strides) and the block (box) one
TMA copy moves, with the block's NVMMA shared layout. It is built on the host from a torch
tensor, a numpy array, or anything exposing ``__cuda_array_interface__`` /
``__array_interface__``, and passed as a kernel argument; the kernel reads
``desc.block_type.shape``, ``.block_type.nbytes``, ``.dtype`` and ``.layout`` at trace time.
The hardware's rules are checked here, when it is built, so a bad descriptor is an error at
the user's line rather than a fault on the GPU.
"""
from __future__ import annotations


import numpy as np

from .. import dtypes as dt
from ..errors import ArgumentTypeError, ArgumentValueError, user_location
from ..ir import BlockType, TensorDescType

__all__ = ["TensorDescriptor"]

_MAX_BOX = 256  # elements per box dimension (cuTensorMapEncodeTiled)


def _describe_array(t, loc):
    """(base address, shape, strides in elements, gl dtype, device kind) of an array-like."""
    mod = type(t).__module__
    if mod.startswith("torch") and hasattr(t, "data_ptr"):
        kind = "cuda" if t.is_cuda else t.device.type
        return t.data_ptr(), tuple(t.shape), tuple(t.stride()), dt.from_torch(t.dtype), kind
    if isinstance(t, np.ndarray):
        if any(s % t.itemsize for s in t.strides):
            raise ArgumentValueError("the array's strides are not whole elements", loc)
        return (t.ctypes.data, t.shape, tuple(s // t.itemsize for s in t.strides),
                dt.from_numpy(t.dtype), "cpu")
    for attr, kind in (("__cuda_array_interface__", "cuda"), ("__array_interface__", "cpu")):
        iface = getattr(t, attr, None)
        if iface is not None:
            npd = np.dtype(iface["typestr"])
            shape = tuple(iface["shape"])
            strides = iface.get("strides")
            if strides is None:  # C-contiguous
                strides, acc = [], 1
                for s in reversed(shape):
                    strides.append(acc)
                    acc *= s
                strides = tuple(reversed(strides))
            else:
                if any(s % npd.itemsize for s in strides):
                    raise ArgumentValueError("the array's strides are not whole elements", loc)
                strides = tuple(s // npd.itemsize for s in strides)
            return iface["data"][0], shape, strides, dt.from_numpy(npd), kind
    raise ArgumentTypeError(f"TensorDescriptor needs a torch tensor, a numpy array or an object with "
                        f"__cuda_array_interface__, got {type(t).__name__}", loc)


def unswizzled_box_problem(block_shape, item: int, layout) -> str | None:
    """Why TMA cannot fill ``layout`` for this block, or None. An unswizzled NVMMA buffer of 2+
    dims is 16-byte column blocks, each holding every row, and a box with no swizzle lands
    densely: each column block is a box of its own, and a box's shared address must be 128-byte
    aligned, so the rows must fill 128-byte multiples."""
    if getattr(layout, "swizzle_byte_width", 0) or len(block_shape) < 2 or block_shape[-1] * item <= 16:
        return None
    rows = 1
    for d in block_shape[:-1]:
        rows *= d
    if rows * 16 % 128 == 0:
        return None
    return (f"TMA cannot fill this block's shared layout: with no swizzle, its {block_shape[-1] * item}-byte "
            f"rows are stored as 16-byte column blocks of {rows} rows ({rows * 16} bytes each), and TMA "
            "places every copy at a 128-byte aligned address")


L2_PROMOTIONS = (0, 64, 128, 256)


class TensorDescriptor:
    """``TensorDescriptor(base, shape, strides, block_shape, layout, padding="zero")``;
    usually ``TensorDescriptor.from_tensor(t, block_shape, layout)``.

    ``l2_promotion`` (keyword, bytes: 0, 64, 128 or 256; default 256) is how much the L2 fetches
    from memory around each piece a copy asks for (the tensor map's L2 promotion). It is fixed
    when the descriptor is made: a launch encodes the tensor map once."""

    def __init__(self, base, shape, strides, block_shape, layout, padding="zero", *, l2_promotion=256,
                 _loc=None):
        loc = _loc or user_location()
        self.base = base
        self._address, full_shape, full_strides, self.dtype, self.device = _describe_array(base, loc)
        shape = [int(s) for s in shape]
        strides = [int(s) for s in strides]
        block_shape = [int(b) for b in block_shape]
        self.shape, self.strides, self.block_shape = shape, strides, block_shape
        self.layout = getattr(layout, "value", layout)
        if padding not in ("zero", "nan"):
            raise ArgumentValueError(f"padding must be 'zero' or 'nan', got {padding!r}", loc)
        if padding == "nan" and not self.dtype.is_floating:
            raise ArgumentValueError("padding='nan' needs a floating-point tensor", loc)
        self.padding = padding
        if l2_promotion not in L2_PROMOTIONS:
            raise ArgumentValueError(f"l2_promotion must be one of {L2_PROMOTIONS} (bytes), got {l2_promotion!r}",
                                     loc)
        self._l2_promotion = l2_promotion
        self._check(loc)

    @classmethod
    def from_tensor(cls, tensor, block_shape, layout, padding="zero", *, l2_promotion=256) -> "TensorDescriptor":
        loc = user_location()
        _, shape, strides, _, _ = _describe_array(tensor, loc)
        return cls(tensor, shape, strides, block_shape, layout, padding, l2_promotion=l2_promotion, _loc=loc)

    @property
    def l2_promotion(self) -> int:
        return self._l2_promotion

    def store_error(self) -> str | None:
        """Why a TMA store through this descriptor would write outside its memory, or None.
        On an H100 a box that ends past a row's end also writes the rest of the 16-byte piece
        holding the row's last element (seen: a 131-float row got its 132nd float written).
        With two or more dims that piece lies in the row's pitch (a multiple of 16 bytes),
        inside the allocation: the interpreter writes it too. A 1-D tensor has no pitch after
        its end, so a store through one whose length is not whole 16-byte pieces is refused."""
        item = max(self.dtype.bits // 8, 1)
        if len(self.shape) > 1 or (self.shape[-1] * item) % 16 == 0:
            return None
        return (f"a TMA store through this descriptor could write past the end of its 1-D tensor: "
                f"{self.shape[-1]} x {self.dtype} is {self.shape[-1] * item} bytes, and TMA stores write "
                f"whole 16-byte pieces; pad the tensor to a multiple of {16 // item} elements")

    @staticmethod
    def type_spec(dtype, block_shape, layout, rank=None) -> TensorDescType:
        """What ``kernel.trace(...)`` takes in place of a descriptor, to trace without data."""
        block_shape = tuple(int(b) for b in block_shape)
        return TensorDescType(dtype, block_shape, getattr(layout, "value", layout),
                              rank=rank or len(block_shape))

    # -- what kernels read at trace time --------------------------------------------------------
    @property
    def block_type(self) -> BlockType:
        return BlockType(self.block_shape, self.dtype)

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def ir_type(self) -> TensorDescType:
        # read on every launch: built once, again only if a field it depends on was reassigned
        key = (self.dtype, tuple(self.block_shape), self.layout, len(self.shape))
        cached = self.__dict__.get("_ir")
        if cached is None or cached[0] != key:
            cached = self._ir = (key, TensorDescType(self.dtype, key[1], self.layout, rank=key[3]))
        return cached[1]

    def current_address(self) -> int:
        """The base tensor's address now (a launch compares it with the one described)."""
        return _describe_array(self.base, None)[0]

    def __repr__(self) -> str:
        return (f"TensorDescriptor(shape={self.shape}, strides={self.strides}, block_shape="
                f"{self.block_shape}, dtype={self.dtype}, layout={self.layout!r})")

    # -- the hardware's rules ---------------------------------------------------------------------
    def _check(self, loc) -> None:
        rank = len(self.shape)
        item = self.dtype.bits // 8
        if self.dtype.is_ptr or self.dtype.is_bool or item == 0:
            raise ArgumentValueError(f"TMA copies numbers; a {self.dtype} tensor cannot be described", loc)
        if not 1 <= rank <= 5:
            raise ArgumentValueError(f"a TMA descriptor has rank 1 to 5; this tensor has rank {rank}", loc)
        if len(self.strides) != rank or len(self.block_shape) != rank:
            raise ArgumentValueError(f"shape {self.shape}, strides {self.strides} and block_shape "
                                f"{self.block_shape} must all have {rank} entries", loc)
        if self.strides[-1] != 1:
            raise ArgumentValueError(f"the last dimension must be contiguous (stride 1), got strides "
                                f"{self.strides}", loc, notes=("pass t.contiguous() or a view whose "
                                                               "last dimension is dense",))
        if self._address % 16:
            raise ArgumentValueError(f"the tensor's address {self._address:#x} is not 16-byte aligned, as "
                                "TMA requires", loc)
        for d, s in enumerate(self.strides[:-1]):
            if (s * item) % 16:
                raise ArgumentValueError(f"stride {s} of dimension {d} is {s * item} bytes; TMA needs every "
                                    "stride but the last to be a multiple of 16 bytes", loc,
                                    notes=("pad the rows (e.g. allocate a wider tensor and slice it)",))
            if s * item >= 1 << 40:
                raise ArgumentValueError(f"stride {s} of dimension {d} is past TMA's 2**40-byte limit", loc)
        for d, n in enumerate(self.shape):
            if not 1 <= n <= 1 << 32:
                raise ArgumentValueError(f"dimension {d} has size {n}; TMA takes 1 to 2**32", loc)
        # the dims the layout swizzles are a shared tile's (powers of two); the leading ones stack
        # such tiles, as a shared buffer's leading dims do, and may be any size
        swizzled = len(self.block_shape) - getattr(self.layout, "rank", 2)
        for d, b in enumerate(self.block_shape):
            if not 1 <= b <= _MAX_BOX:
                raise ArgumentValueError(f"block dimension {d} is {b}; TMA boxes take 1 to {_MAX_BOX} "
                                    "elements per dimension", loc)
            if b & (b - 1) and d >= swizzled:
                raise ArgumentValueError(f"block dimension {d} is {b}; the block's last "
                                         f"{len(self.block_shape) - swizzled} dims (its shared-memory tile) must "
                                         "be powers of two; only the leading, stacked dims may be any size", loc)
        inner = self.block_shape[-1] * item
        if inner % 16:
            raise ArgumentValueError(f"the block's last dimension is {inner} bytes; TMA needs a multiple of "
                                "16 bytes", loc)
        lay = self.layout
        if type(lay).__name__ != "NVMMASharedLayout":
            raise ArgumentTypeError(f"a TMA descriptor's layout must be a gl.NVMMASharedLayout, got {lay!r}",
                                loc, notes=("use gl.NVMMASharedLayout.get_default_for(block_shape, dtype)",))
        try:
            lay.verify(tuple(self.block_shape[-getattr(lay, "rank", 2):]), self.dtype.bits, loc=loc)
        except Exception as e:  # a LayoutError: repeat it as an argument error at this line
            raise ArgumentValueError(f"the layout does not fit the block: {getattr(e, 'message', e)}", loc) from None
        why = unswizzled_box_problem(self.block_shape, self.dtype.bits // 8, lay)
        if why:
            raise ArgumentValueError(why, loc, notes=(
                "give the block 8 rows or more (get_default_for then swizzles 32+ byte rows), or make "
                "its last dimension 16 bytes",))
