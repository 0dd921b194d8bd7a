"""Launching cubins through ``cuda.bindings.driver``.

A binary is loaded once as a context-independent library (``cuLibraryLoadData``); its
kernel handle launches on whichever device's primary context is current, and the
launcher makes the tensors' device current (restoring the caller's afterwards). Kernel
arguments live in one buffer per compiled kernel, with a fixed array of pointers to
its fields handed to ``cuLaunchKernel``: a launch only stores the new values. The
jit's hot path is one object per specialization that checks the arguments still fit
it (dtype, alignment, contiguity, int range, device), stores them and launches: in C when
claunch.py could build its extension, else a Python function generated here.
"""
from __future__ import annotations

import ctypes
import threading

from gluon_trace.addressing import cai_contiguous, contiguous_pointer_args, not_contiguous
from gluon_trace.errors import LaunchError, LaunchTypeError, LaunchValueError

_STRUCT = {"u8": "B", "s8": "b", "u16": "H", "s16": "h", "u32": "I", "s32": "i", "u64": "Q", "s64": "q",
           "f32": "f", "f64": "d"}

_TORCH_NAMES = {"float16": "float16", "bfloat16": "bfloat16", "float32": "float32", "float64": "float64",
                "int8": "int8", "int16": "int16", "int32": "int32", "int64": "int64", "uint8": "uint8",
                "uint16": "uint16", "uint32": "uint32", "uint64": "uint64", "int1": "bool",
                "float8e4nv": "float8_e4m3fn", "float8e5": "float8_e5m2"}


def _torch():
    import sys
    return sys.modules.get("torch")


class Driver:
    """cuInit, primary contexts and loaded libraries, shared by every kernel."""

    def __init__(self):
        try:
            from cuda.bindings import driver as cu
        except ImportError as e:
            raise LaunchError(f"cuda-python is not installed ({e}); pip install gluon-trace[cuda]") from None
        try:
            (err,) = cu.cuInit(0)
        except Exception as e:  # no libcuda: cuda-python raises a RuntimeError subclass
            raise LaunchError(f"no NVIDIA driver: cuInit failed ({type(e).__name__}: {e})") from None
        if err != cu.CUresult.CUDA_SUCCESS:
            raise LaunchError(f"no usable NVIDIA GPU: cuInit returned {err.name}")
        self.cu = cu
        err, n = cu.cuDeviceGetCount()
        self.ndev = n if err == cu.CUresult.CUDA_SUCCESS else 0
        self.ctxs: dict[int, object] = {}
        self.ctx_handles: dict[int, int] = {}  # the same contexts as ints, for the C path
        self.libs: dict[bytes, tuple] = {}
        self.lock = threading.RLock()

    def check(self, err, what: str, loc=None):
        if err != self.cu.CUresult.CUDA_SUCCESS:
            _, msg = self.cu.cuGetErrorString(err)
            raise LaunchError(f"{what} failed: {err.name} ({msg.decode() if msg else ''})", loc)

    def context(self, dev: int):
        c = self.ctxs.get(dev)
        if c is None:
            with self.lock:  # threads launching at once retain the primary context once
                c = self.ctxs.get(dev)
                if c is None:
                    if not 0 <= dev < self.ndev:
                        raise LaunchValueError(f"there is no CUDA device {dev} ({self.ndev} present)")
                    err, d = self.cu.cuDeviceGet(dev)
                    self.check(err, "cuDeviceGet")
                    err, c = self.cu.cuDevicePrimaryCtxRetain(d)
                    self.check(err, "cuDevicePrimaryCtxRetain")
                    self.ctx_handles[dev] = int(c)
                    self.ctxs[dev] = c
        return c

    def kernel(self, ck):
        """(library, kernel handle) of a compiled kernel, loaded once."""
        key = ck.binary
        hit = self.libs.get(key)
        if hit is None:
            with self.lock:
                hit = self.libs.get(key)
                if hit is None:
                    cu = self.cu
                    err, lib = cu.cuLibraryLoadData(ck.binary, None, None, 0, None, None, 0)
                    self.check(err, f"loading kernel {ck.name} (cuLibraryLoadData)")
                    err, k = cu.cuLibraryGetKernel(lib, ck.name.encode())
                    self.check(err, f"finding kernel {ck.name} in its cubin")
                    hit = self.libs[key] = (lib, k, set())
        return hit


def allow_dynamic_smem(drv, kern, configured: set, smem: int, dev: int, name: str) -> None:
    """Once per kernel and device: allow its dynamic shared memory past the 48 KB default."""
    if dev in configured:
        return
    if smem > 48 * 1024:
        cu = drv.cu
        err, d = cu.cuDeviceGet(dev)
        drv.check(err, "cuDeviceGet")
        attr = cu.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
        (err,) = cu.cuKernelSetAttribute(attr, smem, kern, d)
        drv.check(err, f"allowing {smem} bytes of dynamic shared memory for {name}")
    configured.add(dev)


def max_active_clusters(ck, num_ctas: int, dev: int = 0) -> int:
    """How many clusters of ``num_ctas`` CTAs of compiled kernel ``ck`` the device runs at once
    (cuOccupancyMaxActiveClusters): the grid of a persistent cluster kernel. Not every SM
    count divides into clusters (the GPCs differ), so this can be less than SMs / num_ctas."""
    drv = driver()
    cu = drv.cu
    _, kern, configured = drv.kernel(ck)
    with _Switch(drv, dev):
        allow_dynamic_smem(drv, kern, configured, ck.shared_bytes, dev, ck.name)
        err, fn = cu.cuKernelGetFunction(kern)
        drv.check(err, f"cuKernelGetFunction({ck.name})")
        cfg = cu.CUlaunchConfig()
        cfg.gridDimX, cfg.gridDimY, cfg.gridDimZ = num_ctas, 1, 1
        cfg.blockDimX, cfg.blockDimY, cfg.blockDimZ = 32 * ck.num_warps, 1, 1
        cfg.sharedMemBytes = ck.shared_bytes
        a = cu.CUlaunchAttribute()
        a.id = cu.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
        a.value.clusterDim.x, a.value.clusterDim.y, a.value.clusterDim.z = num_ctas, 1, 1
        cfg.attrs, cfg.numAttrs = [a], 1
        err, n = cu.cuOccupancyMaxActiveClusters(fn, cfg)
        drv.check(err, f"cuOccupancyMaxActiveClusters({ck.name})")
    return int(n)


_driver: Driver | None = None
_driver_lock = threading.Lock()
_addrs: dict[str, int] = {}


def driver_address(name: str) -> int:
    """Address of a libcuda entry point (cuLaunchKernel, cuCtxGetCurrent, ...) for the C path."""
    a = _addrs.get(name)
    if a is None:
        a = _addrs[name] = ctypes.cast(getattr(ctypes.CDLL("libcuda.so.1"), name), ctypes.c_void_p).value
    return a


def launch_address() -> int:
    return driver_address("cuLaunchKernel")


def driver() -> Driver:
    """The one Driver; the first launches from several threads at once create it once."""
    global _driver
    if _driver is None:
        with _driver_lock:
            if _driver is None:
                _driver = Driver()
    return _driver


class _Switch:
    """Make ``dev``'s primary context current for a launch; restore the caller's after."""

    def __init__(self, drv: Driver, dev: int):
        self.drv, self.dev, self.prev = drv, dev, None

    def __enter__(self):
        cu = self.drv.cu
        ctx = self.drv.context(self.dev)
        err, cur = cu.cuCtxGetCurrent()
        if int(cur) != int(ctx):
            self.prev = cur
            self.drv.check(cu.cuCtxSetCurrent(ctx)[0], "cuCtxSetCurrent")
        return self

    def __exit__(self, *exc):
        if self.prev is not None and int(self.prev):
            self.drv.cu.cuCtxSetCurrent(self.prev)
        return False


def _stream_handle(stream, dev: int, torch_used: bool) -> int:
    if stream is None:
        t = _torch()
        if torch_used and t is not None:
            return t._C._cuda_getCurrentRawStream(dev)
        return 0
    if isinstance(stream, int):
        return stream
    for attr in ("cuda_stream", "ptr", "handle"):
        v = getattr(stream, attr, None)
        if v is not None:
            return int(v)
    try:
        return int(stream)
    except (TypeError, ValueError):
        raise LaunchTypeError(f"stream={stream!r} is not a CUDA stream (pass torch.cuda.Stream, a CuPy stream "
                          "or an int handle)") from None


class KernelLauncher:
    """Everything to launch one compiled kernel: argument storage, handles, checks."""

    def __init__(self, graph, ck):
        self.graph = graph
        self.ck = ck
        self.drv = driver()
        self.lib, self.kern, self.configured = self.drv.kernel(ck)
        self.types = [v.type.dtype for v in graph.args]
        self.names = list(graph.arg_names)
        self.contiguous = contiguous_pointer_args(graph)
        import struct
        from .ptx import param_type
        # every argument at its natural alignment in one buffer; one struct.pack_into a launch
        # (a TMA descriptor is several PTX parameters: the 128-byte CUtensorMap, 64-aligned, then
        # one u32 per dim of the global shape; offs has one entry per PTX parameter)
        from gluon_trace.ir import TensorDescType
        self.descs = [isinstance(v.type, TensorDescType) for v in graph.args]
        stored = {op.operands[0] for op in graph.body.walk() if op.name == "tma_store"}
        self.stored = {i for i, v in enumerate(graph.args) if v in stored}  # TMA-store descriptors
        fmt, off, offs = "<", 0, []
        for t, v in zip(self.types, graph.args):
            pts = ["map"] + ["u32"] * v.type.rank if isinstance(v.type, TensorDescType) else [param_type(t)]
            for pt in pts:
                size = 128 if pt == "map" else int(pt[1:]) // 8
                pad = (-off) % min(size, 64)
                fmt += "x" * pad + ("128s" if pt == "map" else _STRUCT[pt])
                off += pad
                offs.append(off)
                off += size
        self.packer = struct.Struct(fmt)
        self.offsets, self.buf_size = offs, max(off, 8)
        self.buf = (ctypes.c_char * max(off, 8))()
        base = ctypes.addressof(self.buf)
        self.ptrs = (ctypes.c_void_p * max(len(offs), 1))(*[base + o for o in offs])
        self.params = ctypes.addressof(self.ptrs)
        self.nthreads = 32 * ck.num_warps  # warp-specialized kernels: every partition's warps
        self.smem = ck.shared_bytes
        self.fn = self.drv.cu.CUfunction(int(self.kern))
        self.lock = threading.Lock()

    def configure(self, dev: int) -> None:
        allow_dynamic_smem(self.drv, self.kern, self.configured, self.smem, dev, self.ck.name)

    # -- the checked path ----------------------------------------------------------------------
    def _pointer(self, i, a, loc) -> tuple[int, int | None, bool]:
        """(address, device or None if unknown, is a torch tensor) of a pointer argument."""
        name, t = self.names[i], self.types[i]
        want = t.element
        mod = type(a).__module__
        if mod.startswith("torch") and hasattr(a, "data_ptr"):
            if a.device.type != "cuda":
                raise LaunchValueError(f"argument `{name}` is a tensor on {a.device}; the NVIDIA backend needs "
                                  "CUDA tensors (move it with .cuda())", loc)
            got = str(a.dtype).replace("torch.", "")
            if got != _TORCH_NAMES.get(want.name, want.name):
                raise LaunchTypeError(f"argument `{name}` has dtype {a.dtype}, but the kernel was traced with "
                                  f"{t} (a pointer to {want})", loc)
            if i in self.contiguous and not a.is_contiguous():
                self._not_contiguous(name, f"shape {tuple(a.shape)}, strides {tuple(a.stride())}", loc)
            return a.data_ptr(), a.get_device(), True
        cai = getattr(a, "__cuda_array_interface__", None)
        if cai is not None:
            import numpy as np
            from gluon_trace import dtypes as dt
            try:
                got = dt.from_numpy(np.dtype(cai["typestr"]))
            except TypeError:
                got = None
            if want.name == "bfloat16" and np.dtype(cai["typestr"]).itemsize == 2 and np.dtype(cai["typestr"]).kind in "uiV":
                got = want
            if got != want:
                raise LaunchTypeError(f"argument `{name}` holds {cai['typestr']} elements, but the kernel was "
                                  f"traced with {t}", loc)
            if i in self.contiguous and not cai_contiguous(cai):
                self._not_contiguous(name, f"shape {tuple(cai['shape'])}, byte strides {tuple(cai['strides'])}", loc)
            dev = getattr(getattr(a, "device", None), "id", None)
            return int(cai["data"][0]), dev, False
        if isinstance(a, int) and not isinstance(a, bool):
            return a, None, False
        raise LaunchTypeError(f"argument `{name}` is a {type(a).__name__}; a pointer parameter takes a CUDA "
                          "tensor, an object with __cuda_array_interface__ (CuPy) or an int address", loc)

    def _tensordesc(self, i, a, loc) -> tuple[int | None, bytes]:
        """(device, CUtensorMap bytes) of a TensorDescriptor argument, checked against the
        type the kernel was traced with."""
        from . import tma
        name, want = self.names[i], self.graph.args[i].type
        if type(a).__name__ != "TensorDescriptor" or not hasattr(a, "ir_type"):
            raise LaunchTypeError(f"argument `{name}` is a {type(a).__name__}; the kernel was traced with a "
                                  "TMA descriptor (pass a TensorDescriptor)", loc)
        if a.ir_type != want:
            raise LaunchTypeError(f"argument `{name}` describes {a.ir_type}, but the kernel was traced with "
                                  f"{want}; trace again for this descriptor", loc)
        if not str(a.device).startswith("cuda"):
            raise LaunchValueError(f"argument `{name}`: this TensorDescriptor describes a {a.device} tensor; "
                                   "the NVIDIA backend needs CUDA tensors", loc)
        if a.current_address() != a._address:
            raise LaunchValueError(f"argument `{name}`: the tensor this TensorDescriptor was built from has "
                                   "moved (its storage was reallocated); build the descriptor again", loc)
        cached = getattr(a, "_tmap", None)  # encoding costs a driver call: once per descriptor
        if cached is None or cached[0] != a._address:
            cached = (a._address, tma.encode(a))
            a._tmap = cached
        dev = getattr(a.base, "device", None)
        return getattr(dev, "index", None), cached[1]

    def _one_device(self, dev, first, d, i, loc):
        """(device, the argument that set it): every tensor of a launch on one device."""
        if dev is None:
            return d, self.names[i]
        if d != dev:
            raise LaunchValueError(f"argument `{self.names[i]}` is on cuda:{d} but `{first}` is on "
                                   f"cuda:{dev}; all tensors of a launch must be on one device", loc)
        return dev, first

    def _not_contiguous(self, name, what, loc):
        raise LaunchValueError(not_contiguous(name, self.graph.name, what), loc)

    def _scalar(self, i, a, loc):
        name, t = self.names[i], self.types[i]
        if t.is_floating:
            if not isinstance(a, (int, float)) and not hasattr(a, "__float__"):
                raise LaunchTypeError(f"argument `{name}` must be a number for {t}, got {type(a).__name__}", loc)
            return float(a)
        if hasattr(a, "device") and hasattr(a, "data_ptr"):
            raise LaunchTypeError(f"argument `{name}` is a tensor but the kernel was traced with a {t} scalar", loc)
        try:
            v = int(a)
        except (TypeError, ValueError):
            raise LaunchTypeError(f"argument `{name}` must be an integer for {t}, got {type(a).__name__}", loc) from None
        if t.is_bool:
            return 1 if v else 0
        lo, hi = ((-(1 << (t.bits - 1)), 1 << (t.bits - 1)) if t.is_signed else (0, 1 << t.bits))
        if not lo <= v < hi:
            raise LaunchValueError(f"argument `{name}` = {v} does not fit the kernel's {t} parameter", loc)
        return v

    def launch(self, grid, args, stream=None, loc=None) -> None:
        if len(args) != len(self.types):
            raise LaunchTypeError(f"kernel {self.graph.name} takes {len(self.types)} run-time arguments, got {len(args)}", loc)
        for i in self.stored:  # before anything is encoded or cached for these descriptors
            why = args[i].store_error() if hasattr(args[i], "store_error") else None
            if why:
                raise LaunchValueError(f"argument `{self.names[i]}`: {why}", loc)
        values, dev, first, used_torch = [], None, None, False
        for i, (a, t) in enumerate(zip(args, self.types)):
            if self.descs[i]:
                d, tmap = self._tensordesc(i, a, loc)
                if d is not None:
                    dev, first = self._one_device(dev, first, d, i, loc)
                values.append(tmap)
                values.extend(int(n) for n in a.shape)
                used_torch |= type(a.base).__module__.startswith("torch")  # launch on torch's stream
            elif t.is_ptr:
                p, d, is_t = self._pointer(i, a, loc)
                used_torch |= is_t
                if d is not None:
                    dev, first = self._one_device(dev, first, d, i, loc)
                values.append(p)
            else:
                values.append(self._scalar(i, a, loc))
        if dev is None:
            t = _torch()
            dev = t.cuda.current_device() if (t is not None and t.cuda.is_initialized()) else 0
        if any(g <= 0 for g in grid):
            return
        if any(g >= 1 << 31 for g in grid) or grid[1] >= 65536 or grid[2] >= 65536:
            raise LaunchValueError(f"grid {tuple(grid)} exceeds the device limits (x < 2**31, y and z < 65536)", loc)
        s = _stream_handle(stream, dev, used_torch)
        cu = self.drv.cu
        with _Switch(self.drv, dev):
            self.configure(dev)
            with self.lock:  # the argument buffer is shared: pack and launch as one step
                self.packer.pack_into(self.buf, 0, *values)
                (err,) = cu.cuLaunchKernel(self.fn, grid[0], grid[1], grid[2], self.nthreads, 1, 1,
                                           self.smem, cu.CUstream(s), self.params, 0)
        self.drv.check(err, f"launching {self.graph.name}", loc)

    # -- the generated fast path ---------------------------------------------------------------
    def fast(self, specs, expected_kwargs: dict):
        """A function (grid, args, kwargs, stream) -> True when it launched, False when the
        arguments do not fit this specialization (the caller then takes the checked path).
        Only for torch tensors, Python ints/floats/bools and tuple/int grids."""
        torch = _torch()
        if torch is None:
            return None
        c = self._c_fast(torch, specs, expected_kwargs)  # where it is built and takes every argument
        if c is not None:
            return c
        ctas = self.graph.num_ctas
        from gluon_trace.nvidia.hopper import TensorDescriptor
        g = {"Tensor": torch.Tensor, "EXP": dict(expected_kwargs), "S": self.buf, "pack": self.packer.pack_into,
             "launch": self.drv.cu.cuLaunchKernel, "F": self.fn, "P": self.params, "NT": self.nthreads,
             "SMEM": self.smem, "getstream": torch._C._cuda_getCurrentRawStream,
             "getdev": torch._C._cuda_getDevice, "NDEV": self.drv.ndev, "CFG": self.configured,
             "CUstream": self.drv.cu.CUstream, "STREAMS": {}, "ok": self.drv.cu.CUresult.CUDA_SUCCESS,
             "fail": self._fail, "LOCK": self.lock, "CTX": self.drv.ctxs, "ctxget": self.drv.cu.cuCtxGetCurrent,
             "ctxset": self.drv.cu.cuCtxSetCurrent}
        n = len(specs)
        body = ["def fast(grid, args, kwargs, stream):",
                f"    if len(args) != {n} or kwargs != EXP: return False"]
        if n:
            body.append(f"    {', '.join(f'a{i}' for i in range(n))}{',' if n == 1 else ''} = args")
        dev = None
        for i, spec in enumerate(specs):
            t = spec.dtype
            if self.descs[i]:
                # the checked path encodes the CUtensorMap once per descriptor (a._tmap) and
                # refuses a moved tensor; here the same facts are only re-checked
                g["TDC"], g[f"TY{i}"] = TensorDescriptor, self.graph.args[i].type
                rank = self.graph.args[i].type.rank
                body += [f"    if a{i}.__class__ is not TDC or a{i}.ir_type != TY{i}: return False"]
                if i in self.stored:  # the checked path says why
                    body.append(f"    if a{i}.store_error(): return False")
                body += [
                         f"    b{i} = a{i}.base",
                         f"    if b{i}.__class__ is not Tensor and not isinstance(b{i}, Tensor): return False",
                         f"    m{i} = a{i}.__dict__.get('_tmap')",
                         f"    if m{i} is None or m{i}[0] != a{i}._address or b{i}.data_ptr() != m{i}[0]: return False",
                         f"    s{i} = a{i}.shape",
                         f"    if len(s{i}) != {rank}: return False"]
                body.append(f"    p{i} = m{i}[1], " + ", ".join(f"s{i}[{d}]" for d in range(rank)))
                if dev is None:
                    dev = f"d{i}"
                    body.append(f"    d{i} = b{i}.get_device()")
                    body.append(f"    if d{i} < 0: return False")
                else:
                    body.append(f"    if b{i}.get_device() != {dev}: return False")
                continue
            if t.is_ptr:
                td = getattr(torch, _TORCH_NAMES.get(t.element.name, t.element.name), None)
                if td is None:
                    return None
                g[f"TD{i}"] = td
                body.append(f"    if (a{i}.__class__ is not Tensor and not isinstance(a{i}, Tensor)) "
                            f"or a{i}.dtype is not TD{i}: return False")
                if i in self.contiguous:
                    body.append(f"    if not a{i}.is_contiguous(): return False")
                body.append(f"    p{i} = a{i}.data_ptr()")
                body.append(f"    if (p{i} & 15 == 0) is not {bool(spec.divisible_by_16)}: return False")
                if dev is None:
                    dev = f"d{i}"
                    body.append(f"    d{i} = a{i}.get_device()")
                    body.append(f"    if d{i} < 0: return False")
                else:
                    body.append(f"    if a{i}.get_device() != {dev}: return False")
            elif t.is_bool:
                body.append(f"    if a{i}.__class__ is not bool: return False")
                body.append(f"    p{i} = a{i}")
            elif t.is_floating:
                body.append(f"    if a{i}.__class__ is not float: return False")
                body.append(f"    p{i} = a{i}")
            else:
                lo, hi = (-(1 << 31), (1 << 31) - 1) if t.bits == 32 else (-(1 << 63), (1 << 63) - 1)
                body.append(f"    if a{i}.__class__ is not int or not {lo} <= a{i} <= {hi}: return False")
                if t.bits == 64:  # ints that fit 32 bits specialize as int32
                    body.append(f"    if -2147483648 <= a{i} <= 2147483647: return False")
                body.append(f"    if (a{i} & 15 == 0) is not {bool(spec.divisible_by_16)}: return False")
                body.append(f"    p{i} = a{i}")
        if dev is None:
            return None
        body += [
            "    c = grid.__class__",
            "    if c is tuple:",
            "        k = len(grid)",
            "        if k == 1: gx = grid[0]; gy = gz = 1",
            "        elif k == 2: gx, gy = grid; gz = 1",
            "        elif k == 3: gx, gy, gz = grid",
            "        else: return False",
            "    elif c is int: gx = grid; gy = gz = 1",
            "    else: return False",
            "    if gx.__class__ is not int or gy.__class__ is not int or gz.__class__ is not int: return False",
            "    if gx <= 0 or gy <= 0 or gz <= 0 or gx >= 2147483648 or gy >= 65536 or gz >= 65536: return False",
            # a cluster kernel's grid is whole clusters along x: else the checked path says so
            *([f"    if gx % {ctas}: return False"] if ctas > 1 else []),
            f"    if {dev} not in CFG or (NDEV > 1 and {dev} != getdev()): return False",
            f"    if stream is None: stream = getstream({dev})",
        ]
        vals = [f"*p{i}" if self.descs[i] else f"p{i}" for i in range(n)]
        pack = [f"        pack(S, 0, {', '.join(vals)})"] if n else []
        body += ["    cs = STREAMS.get(stream)",
                 "    if cs is None:",
                 "        if stream.__class__ is not int or len(STREAMS) > 64: return False",
                 "        cs = STREAMS[stream] = CUstream(stream)",
                 # a thread that never touched CUDA has no current context (see _claunch.c)
                 f"    ctx = CTX.get({dev})",
                 "    if ctx is None: return False",
                 "    err, prev = ctxget()",
                 "    if err != ok: fail(err)",
                 "    same = int(prev) == int(ctx)",
                 "    if not same:",
                 "        err, = ctxset(ctx)",
                 "        if err != ok: fail(err)",
                 "    with LOCK:"] + pack + [
                 "        err, = launch(F, gx, gy, gz, NT, 1, 1, SMEM, cs, P, 0)",
                 "    if not same and int(prev): ctxset(prev)",
                 "    if err != ok: fail(err)",
                 "    return True"]
        exec(compile("\n".join(body), f"<gluon_trace fast launcher {self.graph.name}>", "exec"), g)
        return g["fast"]

    def _c_fast(self, torch, specs, expected_kwargs):
        """The same fast path as the generated Python function, in C (claunch.py), or None."""
        from . import claunch
        mod = claunch.load()
        if mod is None:
            return None
        descs = []
        first = 0  # each argument's first PTX parameter: a descriptor has 1 + rank of them
        for i, spec in enumerate(specs):
            t = spec.dtype
            off = self.offsets[first]
            if self.descs[i]:
                rank = self.graph.args[i].type.rank
                dims = tuple(self.offsets[first + 1:first + 1 + rank])
                descs.append((claunch.KINDS["desc"], i in self.stored, off, self.graph.args[i].type, False, dims))
                first += 1 + rank
                continue
            first += 1
            if t.is_ptr:
                td = getattr(torch, _TORCH_NAMES.get(t.element.name, t.element.name), None)
                if td is None:
                    return None
                descs.append((claunch.KINDS["ptr"], spec.divisible_by_16, off, td, i in self.contiguous))
            elif t.is_bool:
                descs.append((claunch.KINDS["bool"], False, off, None, False))
            elif t.is_floating:
                descs.append((claunch.KINDS["f64" if t.bits == 64 else "f32"], False, off, None, False))
            elif t.bits in (32, 64) and t.is_signed:
                descs.append((claunch.KINDS[f"i{t.bits}"], spec.divisible_by_16, off, None, False))
            else:
                return None
        if not any(t.is_ptr for t in self.types) and not any(self.descs):
            return None  # the device comes from a tensor argument (a descriptor's base)
        if self.buf_size > claunch.STAGING:
            return None
        try:
            addr = launch_address()
            ctx_get, ctx_set = driver_address("cuCtxGetCurrent"), driver_address("cuCtxSetCurrent")
        except (OSError, AttributeError):
            return None
        from gluon_trace import backend
        from gluon_trace.nvidia.hopper import TensorDescriptor
        backend.set_dispatch_factory(mod.Dispatch)
        return mod.Launch(addr, int(self.fn), self.nthreads, self.smem, self.buf_size, tuple(descs),
                          torch.Tensor, dict(expected_kwargs), torch._C._cuda_getCurrentRawStream,
                          torch._C._cuda_getDevice, self.drv.ndev > 1, self.configured, self._fail_code,
                          self.drv.ctx_handles, ctx_get, ctx_set, TensorDescriptor if any(self.descs) else None,
                          self.graph.num_ctas)

    def _fail_code(self, code: int):
        self._fail(self.drv.cu.CUresult(code))

    def _fail(self, err):
        self.drv.check(err, f"launching {self.graph.name}")
