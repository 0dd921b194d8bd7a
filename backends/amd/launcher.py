"""Launching through hip-python: hipModuleLoadData + hipModuleLaunchKernel.

The kernel-argument buffer is packed from the code object's own metadata (offsets,
sizes and value kinds read back out of the HSACO), never from the emitter's idea of
the layout, and handed over with HIP_LAUNCH_PARAM_BUFFER_POINTER; the runtime appends
the hidden arguments it finds in the same metadata. hip-python is imported on first
use: it imports without ROCm, and its first call raises RuntimeError when
libamdhip64.so is missing -- reported as a LaunchError that says so.

A kernel that calls ``gl.device_print`` takes one more argument the user never passes:
the print buffer (``printing.py``), which the runtime allocates once and reuses. Such a
launch is synchronous: the runtime resets the buffer's header, launches, synchronizes
the stream, copies the records back and prints them, then says if any were lost.
"""
from __future__ import annotations

import ctypes
import hashlib
import struct
import threading

import numpy as np

from gluon_trace import dtypes as dt
from gluon_trace.addressing import cai_contiguous, contiguous_pointer_args, not_contiguous
from gluon_trace.errors import ArgumentError, LaunchError

from . import metadata as md
from . import printing

HIP_LAUNCH_PARAM_BUFFER_POINTER = 0x01
HIP_LAUNCH_PARAM_BUFFER_SIZE = 0x02
HIP_LAUNCH_PARAM_END = 0x03


def kernel_meta(hsaco: bytes, name: str) -> dict:
    meta = md.read_metadata(hsaco)
    for k in meta["amdhsa.kernels"]:
        if k[".name"] == name:
            return k
    raise LaunchError(f"the code object has no kernel named {name}")


def _same(convert, x, want) -> bool:
    try:
        return convert(x) == want
    except TypeError:  # no gluon_trace equivalent
        return False


def device_pointer(x, name: str, loc=None, want: dt.dtype | None = None, kernel: str = "",
                   contiguous: bool = False) -> int:
    """The device address of a pointer argument, after checking what can be checked before a
    launch: where it lives, its element type (``want``), and, where the kernel addresses it as
    a dense array (``contiguous``, see gluon_trace/addressing.py), that it is one."""
    mod = type(x).__module__
    if mod.startswith("torch") and hasattr(x, "data_ptr"):
        if x.device.type != "cuda":
            raise ArgumentError(f"argument `{name}` is a torch tensor on {x.device}; the AMD "
                                "backend needs a ROCm device tensor (device='cuda' on a ROCm build)",
                                loc)
        if want is not None and not _same(dt.from_torch, x.dtype, want):
            raise ArgumentError(f"argument `{name}` has dtype {x.dtype}, but the kernel was traced with a "
                                f"pointer to {want}", loc)
        if contiguous and not x.is_contiguous():
            raise ArgumentError(not_contiguous(name, kernel, f"shape {tuple(x.shape)}, strides "
                                                             f"{tuple(x.stride())}"), loc)
        return int(x.data_ptr())
    cai = getattr(x, "__cuda_array_interface__", None)
    if cai is not None:
        if want is not None:
            got = np.dtype(cai["typestr"])
            # bfloat16, bool and fp8 have no portable typestr: 2- and 1-byte ints stand for them
            size = 1 if want.is_fp8 else {"bfloat16": 2, "int1": 1}.get(want.name)
            raw = size == got.itemsize and got.kind in "uiVb"
            if not raw and not _same(dt.from_numpy, got, want):
                raise ArgumentError(f"argument `{name}` holds {cai['typestr']} elements, but the kernel was "
                                    f"traced with a pointer to {want}", loc)
        if contiguous and not cai_contiguous(cai):
            raise ArgumentError(not_contiguous(name, kernel, f"shape {tuple(cai['shape'])}, byte strides "
                                                             f"{tuple(cai['strides'])}"), loc)
        return int(cai["data"][0])
    if isinstance(x, np.ndarray):
        raise ArgumentError(f"argument `{name}` is a host numpy array; the AMD backend needs device "
                            "memory (a ROCm torch tensor or an object with __cuda_array_interface__)",
                            loc)
    if isinstance(x, (int, np.integer)) and not isinstance(x, bool):
        return int(x)  # a raw device address
    raise ArgumentError(f"argument `{name}` ({type(x).__name__}) is not device memory", loc)


def scalar_bytes(d: dt.dtype, x, name: str, loc=None) -> bytes:
    if hasattr(x, "__cuda_array_interface__") or isinstance(x, np.ndarray):
        raise ArgumentError(f"argument `{name}` is {d}, got an array", loc)
    if d.name == "bfloat16":
        return dt.f32_to_bf16_bits(np.float32(x)).tobytes()
    if d.is_bool:
        return bytes([1 if x else 0])
    if d.is_fp8:
        from gluon_trace import fp8
        return fp8.encode(np.float32(x), d.name).tobytes()
    if d.is_floating:
        return np.asarray(x, dtype=d.np).tobytes()
    v = int(x)
    lo, hi = (-(1 << (d.bits - 1)), 1 << (d.bits - 1)) if d.is_signed else (0, 1 << d.bits)
    if not lo <= v < hi:
        raise ArgumentError(f"argument `{name}` = {v} does not fit in {d}", loc)
    return np.asarray(v).astype(d.np).tobytes()


def print_arg(kmeta: dict):
    """The metadata entry of the print buffer argument, or None (the kernel never prints)."""
    for a in kmeta[".args"]:
        if a.get(".name") == md.PRINT_ARG:
            return a
    return None


def pack_args(kmeta: dict, graph, values, loc=None, print_buffer: int | None = None) -> bytes:
    """The explicit-argument block of the kernarg segment, laid out as the metadata says;
    ``print_buffer`` is the address of the print buffer of a kernel that prints."""
    pa = print_arg(kmeta)
    explicit = [a for a in kmeta[".args"] if not a[".value_kind"].startswith("hidden")
                and a is not pa]
    if len(explicit) != len(graph.args) or len(values) != len(graph.args):
        raise LaunchError(f"kernel {graph.name} takes {len(explicit)} arguments, got {len(values)}",
                          loc)
    end = max((a[".offset"] + a[".size"] for a in explicit + ([pa] if pa else [])), default=0)
    buf = bytearray(end)
    if pa is not None:
        if print_buffer is None:
            raise LaunchError(f"kernel {graph.name} calls gl.device_print: its launch needs a "
                              "print buffer", loc)
        if pa[".size"] != 8 or pa[".value_kind"] != "global_buffer":
            raise LaunchError(f"metadata of the print buffer argument ({pa['.value_kind']}, "
                              f"{pa['.size']} bytes) is not an 8-byte global buffer", loc)
        struct.pack_into("<Q", buf, pa[".offset"], int(print_buffer))
    dense = contiguous_pointer_args(graph)
    for i, (a, v, name, x) in enumerate(zip(explicit, graph.args, graph.arg_names, values)):
        d = v.type.dtype
        off, size, kind = a[".offset"], a[".size"], a[".value_kind"]
        if kind == "global_buffer":
            if size != 8 or not d.is_ptr:
                raise LaunchError(f"metadata of `{name}` (global_buffer, {size} bytes) does not "
                                  f"match its type {d}", loc)
            struct.pack_into("<Q", buf, off, device_pointer(x, name, loc, d.element, graph.name, i in dense))
        elif kind == "by_value":
            raw = scalar_bytes(d, x, name, loc)
            if len(raw) != size:
                raise LaunchError(f"metadata gives `{name}` {size} bytes, its type {d} has "
                                  f"{len(raw)}", loc)
            buf[off:off + size] = raw
        else:
            raise LaunchError(f"argument `{name}` has value kind {kind}, which the launcher "
                              "does not pack", loc)
    return bytes(buf)


# -- the runtime ------------------------------------------------------------------------------

class HipRuntime:
    def __init__(self):
        try:
            from hip import hip
        except ImportError as e:
            raise LaunchError("the AMD backend launches through hip-python on a machine with the ROCm "
                              "runtime and an AMD GPU: `pip install gluon-trace[amd]` (or hip-python)") from e
        self.hip = hip
        try:
            self._check(hip.hipInit(0), "hipInit")
            n = self._check(hip.hipGetDeviceCount(), "hipGetDeviceCount")
        except RuntimeError as e:
            raise LaunchError(f"no ROCm runtime: {e}") from None
        if not n:
            raise LaunchError("no AMD GPU visible to the ROCm runtime")
        self.modules: dict = {}
        self.print_buf = (0, 0)  # (device address, bytes), grown on demand, kept for reuse
        self.print_lock = threading.Lock()  # one printing launch at a time shares the buffer

    def _check(self, res, what):
        err, *rest = res if isinstance(res, tuple) else (res,)
        if int(err) != 0:
            msg = self.hip.hipGetErrorString(err)
            msg = msg.decode() if isinstance(msg, bytes) else msg
            raise LaunchError(f"{what} failed: {msg}")
        return rest[0] if len(rest) == 1 else (rest or None)

    def arch(self) -> str:
        props = self.hip.hipDeviceProp_t()
        self._check(self.hip.hipGetDeviceProperties(props, 0), "hipGetDeviceProperties")
        name = props.gcnArchName
        name = name.decode() if isinstance(name, bytes) else str(name)
        return name.split(":")[0]

    def function(self, hsaco: bytes, name: str):
        key = (hashlib.sha256(hsaco).hexdigest(), name)
        if key not in self.modules:
            image = bytes(hsaco)
            module = self._check(self.hip.hipModuleLoadData(image), "hipModuleLoadData")
            fn = self._check(self.hip.hipModuleGetFunction(module, name.encode()),
                             "hipModuleGetFunction")
            self.modules[key] = (image, module, fn)
        return self.modules[key][2]

    def launch(self, ck, graph, grid, args, stream=None, loc=None):
        if 0 in grid:
            return
        sites = ck.extra.get("print_sites")
        if sites:
            with self.print_lock:
                return self._launch_printing(ck, graph, grid, args, stream, loc, sites)
        self._launch(ck, graph, grid, args, stream, loc, None)

    def _print_buffer(self, nbytes: int) -> int:
        addr, size = self.print_buf
        if size < nbytes:
            if addr:
                self._check(self.hip.hipFree(addr), "hipFree")
            ptr = self._check(self.hip.hipMalloc(nbytes), "hipMalloc (print buffer)")
            self.print_buf = addr, size = int(ptr), nbytes
        return addr

    def _launch_printing(self, ck, graph, grid, args, stream, loc, sites):
        nbytes = ck.extra.get("print_buffer_bytes") or printing.buffer_bytes(printing.DEFAULT_RECORDS)
        records = printing.capacity_of(nbytes)
        addr = self._print_buffer(nbytes)
        head = ctypes.create_string_buffer(printing.header(records), printing.HEADER_BYTES)
        self._check(self.hip.hipMemcpyHtoD(addr, ctypes.addressof(head), printing.HEADER_BYTES),
                    "hipMemcpyHtoD (print buffer header)")
        s = self._launch(ck, graph, grid, args, stream, loc, addr)
        self._check(self.hip.hipStreamSynchronize(s or None), "hipStreamSynchronize")
        self._check(self.hip.hipMemcpyDtoH(ctypes.addressof(head), addr, printing.HEADER_BYTES),
                    "hipMemcpyDtoH (print buffer header)")
        cursor = struct.unpack_from("<I", head.raw, 0)[0]
        kept = min(cursor, records) * printing.RECORD_BYTES
        body = ctypes.create_string_buffer(max(kept, 1))
        if kept:
            self._check(self.hip.hipMemcpyDtoH(ctypes.addressof(body),
                                               addr + printing.HEADER_BYTES, kept),
                        "hipMemcpyDtoH (print records)")
        lines, lost = printing.decode(head.raw + body.raw[:kept], sites)
        printing.report(lines, lost, graph.name)

    def _launch(self, ck, graph, grid, args, stream, loc, print_buffer):
        kmeta = kernel_meta(ck.binary, graph.name)
        buf = pack_args(kmeta, graph, args, loc, print_buffer)
        fn = self.function(ck.binary, graph.name)
        cbuf = ctypes.create_string_buffer(buf, max(len(buf), 1))
        size = ctypes.c_size_t(len(buf))
        extra = (ctypes.c_void_p * 5)(HIP_LAUNCH_PARAM_BUFFER_POINTER, ctypes.addressof(cbuf),
                                      HIP_LAUNCH_PARAM_BUFFER_SIZE, ctypes.addressof(size),
                                      HIP_LAUNCH_PARAM_END)
        s = 0 if stream is None else int(getattr(stream, "cuda_stream", stream))
        gx, gy, gz = grid
        self._check(self.hip.hipModuleLaunchKernel(
            fn, gx, gy, gz, graph.num_warps * ck.threads_per_warp, 1, 1, 0, s or None, None,
            ctypes.addressof(extra)), "hipModuleLaunchKernel")
        return s


_runtime = None


def runtime() -> HipRuntime:
    global _runtime
    if _runtime is None:
        _runtime = HipRuntime()
    return _runtime
