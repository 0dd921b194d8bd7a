"""Running our gfx1100 code objects on tinygrad's RDNA3 emulator, an executor we did not write.

The emulator is ``test/mockgpu/amd/emu.py`` of a tinygrad source checkout (the PyPI wheel does
not ship its ``test/`` tree): it decodes each instruction with tinygrad's tables generated from
AMD's ISA documents and runs the instruction's pseudocode from those documents, compiled for the
CPU. Point ``GLUON_TRACE_TINYGRAD`` at the checkout; nothing of it is vendored here.

What the dispatch gives a wave is set up as a HIP launch would: the kernarg pointer in the first
user SGPRs, workgroup ids after them (enabled by the descriptor's rsrc2), the workitem id in v0,
the LDS size the code object declares. Buffers live in host memory (the emulator addresses host
memory directly), each between guard bytes that must come back untouched."""
from __future__ import annotations

import contextlib
import ctypes
import os
import shutil
import struct
import sys
import tempfile

import numpy as np

ENV = "GLUON_TRACE_TINYGRAD"
GUARD = 4096          # bytes of guard pattern on each side of every buffer
GUARD_BYTE = 0xA5
LDS_GRANULE = 512     # bytes per unit of rsrc2's LDS size field on gfx11
LDS_SHIFT = 15
INV_2PI_SLOT = 248    # the inline constant 1/(2*pi)
LDS_WINDOW = 1 << 32  # every address a 32-bit LDS address register can hold


class EmulatorMissing(RuntimeError):
    """The emulator cannot be loaded here; the message says why and how to set it up."""


class EmulatorCannot(RuntimeError):
    """The kernel needs something the emulator does not do (checked at tinygrad a9069c1)."""


# Instructions it cannot run, and why. A kernel reaching one raises EmulatorCannot.
UNSUPPORTED = {
    "ds_swizzle_b32": "its pseudocode table (extracted from AMD's ISA PDF) holds only the FFT "
                      "mode of DS_SWIZZLE_B32, cut off, so the instruction does not compile; "
                      "our cross-lane reductions and scans on gfx1100 use it",
}


def _compiler_wrapper() -> str:
    """tinygrad's CPU backend compiles each emulated instruction with ``$CC`` (default clang).
    Without a clang on PATH, the ziglang wheel's clang (already a dev dependency) stands in."""
    d = tempfile.mkdtemp(prefix="gt-emu-cc-")
    path = os.path.join(d, "clang")
    with open(path, "w") as f:
        f.write(f'#!/bin/sh\nexec "{sys.executable}" -m ziglang clang "$@"\n')
    os.chmod(path, 0o755)
    return path


_EMU = None
_CC = None  # the stand-in compiler, set in os.environ only while the emulator runs


@contextlib.contextmanager
def _compiler_env():
    """$CC for tinygrad while the emulator compiles, without changing it for anything else in
    the process (the NVIDIA launcher's C compile reads the environment too)."""
    if _CC is None or "CC" in os.environ:
        yield
        return
    os.environ["CC"] = _CC
    try:
        yield
    finally:
        del os.environ["CC"]


def load():
    """The emulator module, or EmulatorMissing saying what is absent."""
    global _EMU, _CC
    if _EMU is not None:
        return _EMU
    root = os.environ.get(ENV)
    if not root:
        raise EmulatorMissing(f"${ENV} is not set: point it at a tinygrad source checkout (one "
                              "with test/mockgpu/amd/emu.py); see README, AMD backend")
    if not os.path.isfile(os.path.join(root, "test", "mockgpu", "amd", "emu.py")):
        raise EmulatorMissing(f"${ENV}={root} has no test/mockgpu/amd/emu.py (a tinygrad checkout "
                              "from before the pure-Python RDNA3 emulator, or not tinygrad)")
    if not shutil.which(os.environ.get("CC", "clang")):
        try:
            import ziglang  # noqa: F401
        except ImportError:
            raise EmulatorMissing("no C compiler for tinygrad's CPU backend: install clang or "
                                  "the ziglang wheel") from None
        _CC = _CC or _compiler_wrapper()
    loaded = sys.modules.get("test")
    if loaded is not None and not os.path.abspath(getattr(loaded, "__file__", "") or "").startswith(
            os.path.abspath(root)):
        raise EmulatorMissing(f"a `test` package from {loaded.__file__} is already imported, so "
                              "tinygrad's test/ (which holds the emulator) cannot be")
    if root not in sys.path:
        sys.path.insert(0, root)
    try:
        from test.mockgpu.amd import emu  # noqa: PLC0415 (optional, located at run time)
    except Exception as e:  # an incompatible checkout fails in many ways; say which
        raise EmulatorMissing(f"importing the emulator from {root} failed: "
                              f"{type(e).__name__}: {e}") from e
    # The emulator flushes denormals (its default float mode); our descriptors ask for them
    # to be kept (float_denorm_mode 3), so run it in the host's IEEE mode instead.
    emu._get_ftz_lib = lambda: (None, 0)
    # Its wave setup stores HW_ID (for s_getreg) at SGPR slot SGPR_COUNT - 12 = 248, which is
    # also where it keeps the inline constant 1/(2*pi): every v_sin/v_cos argument reduction
    # then multiplies by 0. Our kernels never read HW_ID, so put the constant back.
    init_wave = emu._init_wave

    def _init_wave(*a, **kw):
        st = init_wave(*a, **kw)
        st._write_sgpr(INV_2PI_SLOT, emu.F32_INLINE[INV_2PI_SLOT])
        return st
    emu._init_wave = _init_wave
    _EMU = emu
    return emu


class _HostBuffer:
    """A numpy array's bytes in host memory between guard bytes, passed as device memory."""

    def __init__(self, arr: np.ndarray):
        self.arr = arr
        self.raw = np.full(arr.nbytes + 2 * GUARD, GUARD_BYTE, np.uint8)
        self.raw[GUARD:GUARD + arr.nbytes] = arr.reshape(-1).view(np.uint8)
        addr = self.raw.ctypes.data + GUARD
        self.__cuda_array_interface__ = {"data": (addr, False), "shape": arr.shape,
                                         "typestr": arr.dtype.str, "version": 3}

    def copy_back(self, name: str) -> None:
        lo, hi = self.raw[:GUARD], self.raw[GUARD + self.arr.nbytes:]
        if (lo != GUARD_BYTE).any() or (hi != GUARD_BYTE).any():
            bad = np.flatnonzero(np.concatenate([lo, hi]) != GUARD_BYTE)
            raise AssertionError(f"kernel wrote outside argument {name} ({len(bad)} guard bytes "
                                 "changed)")
        self.arr.reshape(-1).view(np.uint8)[:] = self.raw[GUARD:GUARD + self.arr.nbytes]


@contextlib.contextmanager
def _lds_window(emu):
    """The emulator indexes LDS with the raw 32-bit address and no range check, so a DS read
    outside the allocation (which the hardware answers with 0, and which our scans do for
    lanes whose value is then discarded) reads host memory past its LDS buffer. Give it a
    4 GiB window instead: lazily mapped zero pages, so such reads return 0 as on hardware.
    Its LDS buffer is the first uint32 buffer without options that run_asm allocates."""
    real = emu.Buffer
    state = {"done": False}

    def buffer(device, size, dtype, *a, **kw):
        if not state["done"] and dtype == emu.dtypes.uint32 and not a and not kw:
            state["done"] = True
            size = LDS_WINDOW // 4
        return real(device, size, dtype, *a, **kw)
    emu.Buffer = buffer
    try:
        yield
    finally:
        emu.Buffer = real
    if not state["done"]:
        raise RuntimeError("the emulator allocated no LDS buffer as expected: this checkout's "
                           "run_asm differs from the one emulator.py was written against")


def _code(hsaco: bytes, kernel: str) -> tuple[bytes, int]:
    """The bytes of the section holding ``kernel``'s code, and the entry's offset in them."""
    from gluon_trace.backends.amd.metadata import _sections, read_symbols
    value, _size, shndx = read_symbols(hsaco)[kernel]
    sec = _sections(hsaco)[shndx]
    return hsaco[sec["offset"]:sec["offset"] + sec["size"]], value - sec["addr"]


def run(traced, grid, args, target: str = "gfx1100"):
    """Run ``traced`` (a TracedKernel) on the emulator with ``args`` (numpy arrays are copied
    in and the results copied back into them, scalars passed by value)."""
    from gluon_trace.backends.amd import launcher
    from gluon_trace.backends.amd.metadata import read_descriptor
    emu = load()
    tk = traced.for_target(target)
    g = tk.graph
    ck = tk.compile(target)
    km = launcher.kernel_meta(ck.binary, g.name)
    if launcher.print_arg(km) is not None:
        raise NotImplementedError("kernels that print are not run on the emulator")
    desc = read_descriptor(ck.binary, g.name)
    wave, arch = (32, "rdna3") if desc["wavefront_size32"] else (64, "cdna")  # cdna: gfx942 (MFMA tests)
    if desc["private_segment_fixed_size"] and g.num_warps > 1:
        # it addresses scratch as lane * size + offset in one buffer for the whole workgroup
        raise EmulatorCannot("the emulator gives all waves of a workgroup one scratch area, so "
                             "a kernel that spills cannot run there with more than one warp")
    dev = [_HostBuffer(a) if isinstance(a, np.ndarray) else a for a in args]
    grid = tuple(grid) + (1,) * (3 - len(grid))
    kernarg = bytearray(launcher.pack_args(km, g, dev))
    kernarg += bytes(km[".kernarg_segment_size"] - len(kernarg))
    block = g.num_warps * wave
    hidden = {"hidden_block_count_x": grid[0], "hidden_block_count_y": grid[1],
              "hidden_block_count_z": grid[2], "hidden_group_size_x": block,
              "hidden_group_size_y": 1, "hidden_group_size_z": 1, "hidden_grid_dims": 1}
    for h in km[".args"]:
        k = h[".value_kind"]
        if k in hidden:
            struct.pack_into("<I" if h[".size"] == 4 else "<H", kernarg, h[".offset"], hidden[k])
    kbuf = (ctypes.c_uint8 * len(kernarg)).from_buffer(kernarg)
    text, entry = _code(ck.binary, g.name)
    code = ctypes.create_string_buffer(text + bytes(64), len(text) + 64)  # decoder reads ahead
    lds = desc["group_segment_fixed_size"]
    rsrc2 = desc["rsrc2"] | (-(-lds // LDS_GRANULE) << LDS_SHIFT)
    try:
        with _lds_window(emu), _compiler_env():
            err = emu.run_asm(ctypes.addressof(code) + entry, len(text) - entry, *grid, block, 1,
                              1, ctypes.addressof(kbuf), rsrc2, desc["private_segment_fixed_size"],
                              arch)
    except RuntimeError as e:
        for op, why in UNSUPPORTED.items():
            if f"Failed to compile {op}" in str(e):
                raise EmulatorCannot(f"the emulator cannot run {op}: {why}") from e
        raise
    if err:
        raise RuntimeError(f"the emulator returned {err}")
    for d, name in zip(dev, g.arg_names):
        if isinstance(d, _HostBuffer):
            d.copy_back(name)
    return ck
