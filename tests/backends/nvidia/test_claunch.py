"""The C launch path (backends/nvidia/_claunch.c) without a GPU: a ctypes function stands in
for cuLaunchKernel and records what it was given; a small tensor class stands in for torch's."""
import ctypes
import os
import struct
import sys

import pytest

from gluon_trace.backends.nvidia import claunch

F32, F16 = object(), object()  # dtype objects are compared by identity


class FakeTensor:
    def __init__(self, ptr, dtype=F32, device=0, contiguous=True):
        self.ptr, self.dtype, self.device, self.contiguous = ptr, dtype, device, contiguous

    def is_contiguous(self):
        return self.contiguous

    def data_ptr(self):
        return self.ptr

    def get_device(self):
        return self.device


class SubTensor(FakeTensor):
    pass


class TorchStream:
    def __init__(self, h):
        self.cuda_stream = h


class CupyStream:
    def __init__(self, h):
        self.ptr = h


LAUNCH = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, *[ctypes.c_uint] * 7, ctypes.c_void_p,
                          ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p)
# kernel(out: *f32 aligned, assumed contiguous, x: *f32 aligned, n: i32 not a multiple of 16, scale: f32,
#        big: i64 multiple of 16, flag: bool)
SPECS = ((0, True, 0, F32, True), (0, True, 8, F32, False), (1, False, 16, None, False),
         (3, False, 20, None, False), (2, True, 24, None, False), (5, False, 32, None, False))
SIZES = (8, 8, 4, 4, 8, 1)
FORMATS = ("<Q", "<Q", "<i", "<f", "<q", "<B")


@pytest.fixture(scope="module")
def mod():
    m = claunch.load()
    if m is None:
        if os.environ.get("CI"):
            pytest.fail(f"the C launch path must build in CI: {claunch.status()}")
        pytest.skip(f"C launch path unavailable here: {claunch.status()}")
    return m


class Recorder:
    def __init__(self):
        self.calls, self.result = [], 0
        self.fn = LAUNCH(self._launch)
        self.addr = ctypes.cast(self.fn, ctypes.c_void_p).value

    def _launch(self, func, gx, gy, gz, bx, by, bz, smem, stream, params, extra):
        vals = [struct.unpack(f, ctypes.string_at(params[i], n))[0] for i, (f, n) in enumerate(zip(FORMATS, SIZES))]
        self.calls.append(dict(func=func, grid=(gx, gy, gz), block=(bx, by, bz), smem=smem, stream=stream or 0,
                               args=vals, extra=extra))
        return self.result


def make(mod, rec, configured=frozenset({0}), kwargs=None, current=0, multi=False, failures=None):
    streams = []

    def get_stream(dev):
        streams.append(dev)
        return 0x5000 + dev

    def fail(code):
        (failures if failures is not None else []).append(code)
        raise RuntimeError(f"launch failed: {code}")

    launch = mod.Launch(rec.addr, 0x1234, 128, 4096, 33, SPECS, FakeTensor, dict(kwargs or {}), get_stream,
                        lambda: current, multi, set(configured), fail)
    return launch, streams


def good_args():
    return (FakeTensor(0x10000), FakeTensor(0x20010), 7, 0.5, 1 << 40, True)


def test_launch_packs_every_argument_and_uses_the_current_stream(mod):
    rec = Recorder()
    launch, streams = make(mod, rec)
    assert launch((3, 2), good_args(), {}, None) is True
    (c,) = rec.calls
    assert c["func"] == 0x1234 and c["grid"] == (3, 2, 1) and c["block"] == (128, 1, 1) and c["smem"] == 4096
    assert c["stream"] == 0x5000 and streams == [0] and c["extra"] is None
    assert c["args"] == [0x10000, 0x20010, 7, 0.5, 1 << 40, 1]
    assert launch(5, good_args()[:5] + (False,), {}, 77) is True
    assert rec.calls[-1]["grid"] == (5, 1, 1) and rec.calls[-1]["stream"] == 77 and rec.calls[-1]["args"][5] == 0
    assert launch((1, 2, 3), good_args(), {}, None) and rec.calls[-1]["grid"] == (1, 2, 3)


def test_contiguity_is_checked_only_where_the_kernel_assumes_it(mod):
    rec = Recorder()
    launch, _ = make(mod, rec)
    a = good_args()
    assert launch((1,), (a[0], FakeTensor(0x20010, contiguous=False)) + a[2:], {}, None) is True  # x: strided ok
    assert launch((1,), (FakeTensor(0x10000, contiguous=False),) + a[1:], {}, None) is False  # out: assumed


def test_subclasses_of_the_tensor_type_are_accepted(mod):
    rec = Recorder()
    launch, _ = make(mod, rec)
    a = good_args()
    assert launch((1,), (SubTensor(0x30000),) + a[1:], {}, None) is True
    assert rec.calls[-1]["args"][0] == 0x30000


@pytest.mark.parametrize("change", [
    lambda a: (FakeTensor(0x10000, dtype=F16),) + a[1:],          # wrong dtype
    lambda a: (FakeTensor(0x10000, contiguous=False),) + a[1:],   # a view where the kernel assumed contiguity
    lambda a: (FakeTensor(0x10004),) + a[1:],                     # not 16-byte aligned any more
    lambda a: (a[0], FakeTensor(0x20010, device=1)) + a[2:],      # two devices
    lambda a: (FakeTensor(0x10000, device=-1),) + a[1:],          # a CPU tensor
    lambda a: (0x10000,) + a[1:],                                 # an int where a tensor was
    lambda a: a[:2] + (16,) + a[3:],                              # now a multiple of 16
    lambda a: a[:2] + (1 << 31,) + a[3:],                         # no longer fits int32
    lambda a: a[:2] + (7.0,) + a[3:],                             # a float for an int
    lambda a: a[:2] + (True,) + a[3:],                            # a bool for an int
    lambda a: a[:3] + (1,) + a[4:],                               # an int for a float
    lambda a: a[:4] + (32,) + a[5:],                              # an int64 that fits 32 bits
    lambda a: a[:4] + (1 << 64,) + a[5:],                         # does not fit 64 bits
    lambda a: a[:5] + (1,),                                       # an int for a bool
    lambda a: a[:5],                                              # too few arguments
    lambda a: a + (1,),                                           # too many
])
def test_calls_that_do_not_fit_return_false_and_launch_nothing(mod, change):
    rec = Recorder()
    launch, _ = make(mod, rec)
    assert launch((1,), change(good_args()), {}, None) is False
    assert rec.calls == []


@pytest.mark.parametrize("grid", [(0,), (-1,), (1 << 31,), (1, 65536), (1, 1, 65536), (1, 1, 1, 1), (), [1],
                                  (1.0,), 0, "1", (True,)])
def test_bad_grids_are_left_to_the_checked_path(mod, grid):
    rec = Recorder()
    launch, _ = make(mod, rec)
    assert launch(grid, good_args(), {}, None) is False and rec.calls == []


def test_streams_kwargs_and_devices(mod):
    rec = Recorder()
    launch, _ = make(mod, rec, kwargs={"BLOCK": 128})
    assert launch((1,), good_args(), {"BLOCK": 128}, None) is True
    assert launch((1,), good_args(), {"BLOCK": 256}, None) is False
    assert launch((1,), good_args(), {}, None) is False
    assert launch((1,), good_args(), {"BLOCK": 128}, object()) is False  # not a stream
    assert launch((1,), good_args(), {"BLOCK": 128}, TorchStream(41)) is True  # torch's .cuda_stream
    assert launch((1,), good_args(), {"BLOCK": 128}, CupyStream(43)) is True  # CuPy's .ptr
    assert launch((1,), good_args(), {"BLOCK": 128}, TorchStream("x")) is False
    assert [c["stream"] for c in rec.calls[1:]] == [41, 43]
    assert len(rec.calls) == 3
    rec2 = Recorder()
    unconfigured, _ = make(mod, rec2, configured={1})
    assert unconfigured((1,), good_args(), {}, None) is False
    multi, _ = make(mod, rec2, configured={0, 1}, multi=True, current=1)
    assert multi((1,), good_args(), {}, None) is False  # tensors on 0 but device 1 is current
    multi0, _ = make(mod, rec2, configured={0, 1}, multi=True, current=0)
    assert multi0((1,), good_args(), {}, None) is True and len(rec2.calls) == 1


def test_a_launch_error_reaches_the_fail_callable(mod):
    rec = Recorder()
    rec.result = 700
    failures = []
    launch, _ = make(mod, rec, failures=failures)
    with pytest.raises(RuntimeError, match="launch failed: 700"):
        launch((1,), good_args(), {}, None)
    assert failures == [700]


def test_no_reference_leaks(mod):
    rec = Recorder()
    launch, _ = make(mod, rec)
    args = good_args()
    bad = (FakeTensor(0x10000, dtype=F16),) + args[1:]
    grid = (4, 1)
    before = [sys.getrefcount(o) for o in (F32, args[0], grid, launch)]
    for _ in range(2000):
        launch(grid, args, {}, None)
        launch(grid, bad, {}, None)
    assert [sys.getrefcount(o) for o in (F32, args[0], grid, launch)] == before
    assert len(rec.calls) == 2000


def test_bad_specs_are_refused(mod):
    rec = Recorder()
    with pytest.raises(ValueError, match="bad argument spec"):
        mod.Launch(rec.addr, 1, 32, 0, 8, ((0, True, 4, F32, False),), FakeTensor, {}, print, print, False, set(),
                   print)
    with pytest.raises(TypeError):
        mod.Launch(rec.addr, 1, 32, 0, 8, ((0, True, 0, F32, False),), "not a type", {}, print, print, False,
                   set(), print)


def test_status_says_why_the_c_path_is_off(monkeypatch, tmp_path):
    monkeypatch.setenv("GLUON_TRACE_CACHE_DIR", str(tmp_path))
    try:
        claunch.reset()
        monkeypatch.setenv("GLUON_TRACE_LAUNCH", "python")
        assert claunch.load() is None and "GLUON_TRACE_LAUNCH=python" in claunch.status()
        claunch.reset()
        monkeypatch.delenv("GLUON_TRACE_LAUNCH")
        monkeypatch.setattr(claunch, "_compilers", lambda: [["false"]])
        assert claunch.load() is None
        assert claunch.status().startswith("off: no C compiler could build it") and "false" in claunch.status()
    finally:
        claunch.reset()


class Fallback:
    def __init__(self):
        self.calls = []

    def __call__(self, *args, **kwargs):
        self.calls.append((args, kwargs))
        return "fallback"


def test_dispatch_launches_from_its_arguments_without_python(mod):
    rec = Recorder()
    launch, _ = make(mod, rec, kwargs={"BLOCK": 128})
    fast, fb = [launch], Fallback()
    d = mod.Dispatch((2, 3), fast, fb)
    assert d(*good_args(), BLOCK=128) is None and fb.calls == []
    assert rec.calls[-1]["grid"] == (2, 3, 1) and rec.calls[-1]["stream"] == 0x5000
    assert d(*good_args(), BLOCK=128, stream=99) is None and rec.calls[-1]["stream"] == 99
    assert d(*good_args(), stream=99, BLOCK=128) is None  # keyword order does not matter
    assert len(rec.calls) == 3


@pytest.mark.parametrize("call", [
    lambda d: d(*good_args(), BLOCK=256),                 # another constexpr: another specialization
    lambda d: d(*good_args()),                            # a missing keyword
    lambda d: d(*good_args(), BLOCK=128, num_warps=8),    # an extra one
    lambda d: d(*good_args()[:5], BLOCK=128),             # too few arguments
    lambda d: d(FakeTensor(1, dtype=F16), *good_args()[1:], BLOCK=128),
    lambda d: d(*good_args(), BLOCK=128, stream="s"),     # not a stream handle
])
def test_dispatch_hands_what_does_not_fit_to_the_fallback_unchanged(mod, call):
    rec = Recorder()
    launch, _ = make(mod, rec, kwargs={"BLOCK": 128})
    fb = Fallback()
    assert call(mod.Dispatch((2,), [launch], fb)) == "fallback"
    assert rec.calls == [] and len(fb.calls) == 1


def test_dispatch_with_a_bad_grid_or_python_launchers_falls_back(mod):
    rec = Recorder()
    launch, _ = make(mod, rec)
    for grid in [(0,), (1, 1, 1, 1), (1.5,), "x"]:
        fb = Fallback()
        assert mod.Dispatch(grid, [launch], fb)(*good_args()) == "fallback" and len(fb.calls) == 1
    fb = Fallback()
    assert mod.Dispatch((1,), [lambda *a: True], fb)(*good_args()) == "fallback"  # only Launch objects run here
    assert rec.calls == []


def test_dispatch_sees_launchers_added_later_and_tries_them_in_order(mod):
    rec1, rec2 = Recorder(), Recorder()
    other, _ = make(mod, rec1, kwargs={"BLOCK": 64})
    fast, fb = [other], Fallback()
    d = mod.Dispatch(4, fast, fb)
    assert d(*good_args(), BLOCK=128) == "fallback"
    launch, _ = make(mod, rec2, kwargs={"BLOCK": 128})
    fast.insert(0, launch)  # what the jit does after its checked launch
    assert d(*good_args(), BLOCK=128) is None
    assert rec1.calls == [] and rec2.calls[0]["grid"] == (4, 1, 1) and len(fb.calls) == 1


def test_dispatch_errors_propagate_and_nothing_leaks(mod):
    rec = Recorder()
    launch, _ = make(mod, rec)
    d = mod.Dispatch((1,), [launch], Fallback())
    args = good_args()
    before = [sys.getrefcount(o) for o in (F32, args[0], launch, d)]
    for _ in range(2000):
        d(*args)
        d(*args, stream=5)
    assert [sys.getrefcount(o) for o in (F32, args[0], launch, d)] == before
    rec.result = 1
    with pytest.raises(RuntimeError, match="launch failed: 1"):
        d(*args)


def test_kernel_grid_through_the_dispatcher_still_reaches_other_backends(mod):
    """With the C dispatcher registered, kernel[grid] on numpy arrays falls back to the jit's
    launcher: the interpreter runs it, and a bad call's error still names this line."""
    import numpy as np
    import gluon_trace as gt
    from gluon_trace import backend
    from gluon_trace import language as gl
    from gluon_trace.errors import GluonTraceError

    @gt.jit
    def double(out_ptr, x_ptr, n, BLOCK: gl.constexpr):
        i = gl.arange(0, BLOCK, layout=gl.BlockedLayout([1], [32], [1], [0]))
        gl.store(out_ptr + i, gl.load(x_ptr + i, mask=i < n) * 2, mask=i < n)

    backend.set_dispatch_factory(mod.Dispatch)
    try:
        x = np.arange(32, dtype=np.float32) + 1
        out = np.full_like(x, np.nan)
        k = double[(1,)]
        assert type(k).__name__ == "Dispatch" and double[(1,)] is k
        k(out, x, 32, BLOCK=32, num_warps=1)
        np.testing.assert_array_equal(out, 2 * x)
        with pytest.raises(GluonTraceError) as e:
            double[(1,)](out, "not an array", 32, BLOCK=32, num_warps=1)
        assert e.value.loc.line == sys._getframe().f_lineno - 1
        assert type(double[lambda meta: (1,)]).__name__ == "Launcher"  # callable grids stay in Python
    finally:
        backend.set_dispatch_factory(None)


def test_a_launch_made_while_another_is_checking_its_arguments_does_not_mix_them(mod):
    """Checks call into Python (a tensor subclass's data_ptr here), where another thread --
    or, here, the same one -- can launch the same kernel: each launch sends its own values."""
    rec = Recorder()
    launch, _ = make(mod, rec)
    inner_args = (FakeTensor(0xAA00), FakeTensor(0xBB00), 9, 1.5, 1 << 41, False)

    class Reentrant(FakeTensor):
        def data_ptr(self):
            assert launch((7,), inner_args, {}, None) is True
            return self.ptr

    outer = (FakeTensor(0x10000), Reentrant(0x20010)) + good_args()[2:]
    assert launch((3,), outer, {}, None) is True
    inner, outer_call = rec.calls
    assert inner["grid"] == (7, 1, 1) and inner["args"] == [0xAA00, 0xBB00, 9, 1.5, 1 << 41, 0]
    assert outer_call["grid"] == (3, 1, 1) and outer_call["args"] == [0x10000, 0x20010, 7, 0.5, 1 << 40, 1]


def test_parameter_buffers_larger_than_the_staging_area_take_the_python_path(mod):
    rec = Recorder()
    big = mod.Launch(rec.addr, 1, 32, 0, 4096, ((0, True, 4000, F32, False),), FakeTensor, {}, lambda d: 0,
                     lambda: 0, False, {0}, print)
    assert big((1,), (FakeTensor(0x10000),), {}, None) is False and rec.calls == []


# -- the current context: a thread that never touched CUDA has none ---------------------------------

CTX_GET = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ctypes.c_void_p))
CTX_SET = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p)


class FakeContexts:
    """cuCtxGetCurrent / cuCtxSetCurrent with a per-thread current context, as the driver's."""

    def __init__(self):
        import threading
        self.tls = threading.local()
        self.sets = []
        self.get_fn = CTX_GET(self._get)
        self.set_fn = CTX_SET(self._set)
        self.get_addr = ctypes.cast(self.get_fn, ctypes.c_void_p).value
        self.set_addr = ctypes.cast(self.set_fn, ctypes.c_void_p).value

    def current(self):
        return getattr(self.tls, "ctx", None) or 0

    def _get(self, out):
        out[0] = self.current() or None
        return 0

    def _set(self, ctx):
        self.sets.append(ctx or 0)
        self.tls.ctx = ctx or 0
        return 0


def make_ctx(mod, rec, fake, contexts):
    seen = []
    inner = rec._launch

    def launch_fn(*a):
        seen.append(fake.current())
        return inner(*a)
    rec.fn = LAUNCH(launch_fn)
    rec.addr = ctypes.cast(rec.fn, ctypes.c_void_p).value
    launch = mod.Launch(rec.addr, 0x1234, 128, 4096, 33, SPECS, FakeTensor, {}, lambda d: 0, lambda: 0,
                        False, {0, 1}, print, contexts, fake.get_addr, fake.set_addr)
    return launch, seen


def test_a_thread_without_a_context_gets_the_devices_primary_context(mod):
    import threading
    rec, fake = Recorder(), FakeContexts()
    launch, seen = make_ctx(mod, rec, fake, {0: 0xC0, 1: 0xC1})
    after = []

    def fresh():
        after.append(launch((1,), good_args(), {}, None))
        after.append(fake.current())
    t = threading.Thread(target=fresh)
    t.start()
    t.join()
    assert after == [True, 0xC0] and seen == [0xC0] and fake.sets == [0xC0]


def test_another_current_context_is_restored_and_the_right_one_is_not_touched(mod):
    rec, fake = Recorder(), FakeContexts()
    launch, seen = make_ctx(mod, rec, fake, {0: 0xC0})
    fake.tls.ctx = 0x77
    assert launch((1,), good_args(), {}, None) is True
    assert seen == [0xC0] and fake.current() == 0x77 and fake.sets == [0xC0, 0x77]
    fake.sets.clear()
    fake.tls.ctx = 0xC0
    assert launch((1,), good_args(), {}, None) is True
    assert seen == [0xC0, 0xC0] and fake.sets == []


def test_a_device_without_a_known_context_takes_the_checked_path(mod):
    rec, fake = Recorder(), FakeContexts()
    launch, seen = make_ctx(mod, rec, fake, {1: 0xC1})
    assert launch((1,), good_args(), {}, None) is False and rec.calls == [] and fake.sets == []
    with pytest.raises(ValueError):
        mod.Launch(rec.addr, 1, 32, 0, 8, (), FakeTensor, {}, print, print, False, set(), print, {}, 0, 0)


def test_launches_from_many_fresh_threads_each_see_their_context_and_arguments(mod):
    import threading
    rec, fake = Recorder(), FakeContexts()
    launch, seen = make_ctx(mod, rec, fake, {0: 0xC0})
    bad = []

    def worker(k):
        for i in range(50):
            n = k * 1000 + i
            args = (FakeTensor(0x10000 + 16 * n), FakeTensor(0x20010), 7 + 16 * n, 0.5, 1 << 40, True)
            if launch((k + 1,), args, {}, None) is not True:
                bad.append((k, i))
    for _ in range(3):
        rec.calls.clear()
        seen.clear()
        threads = [threading.Thread(target=worker, args=(k,)) for k in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert bad == [] and len(rec.calls) == 400 and set(seen) == {0xC0}
        for c in rec.calls:  # each launch carried its own thread's arguments, not a mix
            n = (c["args"][0] - 0x10000) // 16
            assert c["args"][2] == 7 + 16 * n and c["grid"] == (n // 1000 + 1, 1, 1)


def test_checked_path_argument_errors_are_python_builtins():
    """The NVIDIA checked path's argument errors, without a GPU: the launcher's argument
    checks need no driver."""
    from types import SimpleNamespace

    from gluon_trace import dtypes as dt
    from gluon_trace.backends.nvidia.launcher import KernelLauncher
    from gluon_trace.errors import LaunchError
    kl = object.__new__(KernelLauncher)
    kl.names, kl.types, kl.contiguous = ["x", "n", "s"], [dt.pointer(dt.float32), dt.int32, dt.float32], set()
    kl.graph = SimpleNamespace(name="k")
    for call, builtin in ((lambda: kl._pointer(0, "not memory", None), TypeError),
                          (lambda: kl._scalar(1, "seven", None), TypeError),
                          (lambda: kl._scalar(2, object(), None), TypeError),
                          (lambda: kl._scalar(1, 1 << 40, None), ValueError)):
        with pytest.raises(builtin) as e:
            call()
        assert isinstance(e.value, LaunchError)
    assert kl._pointer(0, 0x1000, None) == (0x1000, None, False) and kl._scalar(1, 7, None) == 7


# -- TMA descriptors and clusters --------------------------------------------------------------

class FakeDesc:
    """What the launch reads of a TensorDescriptor: the traced type, the CUtensorMap the checked
    path cached for an address, that address, the base tensor and the global shape."""

    def __init__(self, ptr, shape, ir_type="T", tmap=b"\x11" * 128, store_error=None):
        self.ir_type, self._address, self.base, self.shape = ir_type, ptr, FakeTensor(ptr), list(shape)
        self._tmap, self._why = (ptr, tmap), store_error

    def store_error(self):
        return self._why


class OtherDesc(FakeDesc):
    pass


# kernel(a: desc rank 2, c: desc rank 2 that TMA stores through, n: i32): the PTX parameters are
# a's map (64-aligned), its two dims, c's map, its two dims, n
DESC_SPECS = ((6, False, 0, "T", False, (128, 132)), (6, True, 192, "T", False, (320, 324)), (1, False, 328, None, False))
DESC_PARAMS = (("128s", 128), ("<I", 4), ("<I", 4), ("128s", 128), ("<I", 4), ("<I", 4), ("<i", 4))


class DescRecorder(Recorder):
    def _launch(self, func, gx, gy, gz, bx, by, bz, smem, stream, params, extra):
        vals = [struct.unpack(f, ctypes.string_at(params[i], n))[0] for i, (f, n) in enumerate(DESC_PARAMS)]
        self.calls.append(dict(grid=(gx, gy, gz), args=vals))
        return self.result


def make_desc(mod, rec, cluster_x=1, desc_type=FakeDesc):
    launch = mod.Launch(rec.addr, 0x1234, 128, 4096, 332, DESC_SPECS, FakeTensor, {}, lambda dev: 0x5000,
                        lambda: 0, False, {0}, lambda code: None, None, 0, 0, desc_type, cluster_x)
    return launch


def desc_args():
    return (FakeDesc(0x10000, [64, 100], tmap=b"\x22" * 128), FakeDesc(0x20000, [64, 48], tmap=b"\x33" * 128), 5)


def test_descriptors_pack_their_map_and_dims(mod):
    rec = DescRecorder()
    launch = make_desc(mod, rec)
    assert launch((2,), desc_args(), {}, None) is True
    (c,) = rec.calls
    assert c["args"] == [b"\x22" * 128, 64, 100, b"\x33" * 128, 64, 48, 5]


def _moved(a):
    a[0].base = FakeTensor(0x90000)
    return a


def _reencoded_elsewhere(a):
    a[0]._tmap = (0x90000, a[0]._tmap[1])
    return a


def _no_map(a):
    del a[0]._tmap
    return a


@pytest.mark.parametrize("change", [
    lambda a: [OtherDesc(0x10000, [64, 100])] + a[1:],                 # not the descriptor class itself
    lambda a: [FakeDesc(0x10000, [64, 100], ir_type="U")] + a[1:],     # traced for another block or layout
    lambda a: a[:1] + [FakeDesc(0x20000, [64, 48], store_error="1-D")] + a[2:],  # a store that would overrun
    _moved, _reencoded_elsewhere, _no_map,                             # the tensor moved; no map cached
    lambda a: [FakeDesc(0x10000, [64, 100, 2])] + a[1:],               # another rank
    lambda a: [FakeDesc(0x10000, [64, 1 << 32])] + a[1:],              # a dim past u32
    lambda a: [FakeDesc(0x10000, [64, 100], tmap=b"\x22" * 64)] + a[1:],  # not a 128-byte map
    lambda a: [FakeTensor(0x10000)] + a[1:],                           # a tensor where a descriptor was
])
def test_descriptors_that_do_not_fit_return_false_and_launch_nothing(mod, change):
    rec = DescRecorder()
    launch = make_desc(mod, rec)
    assert launch((1,), tuple(change(list(desc_args()))), {}, None) is False
    assert rec.calls == []
    assert launch((1,), desc_args(), {}, None) is True  # and the same launcher still takes a good call


def test_a_descriptor_on_another_device_is_refused(mod):
    rec = DescRecorder()
    launch = make_desc(mod, rec)
    a = desc_args()
    a[1].base = FakeTensor(0x20000, device=1)
    assert launch((1,), a, {}, None) is False and rec.calls == []


def test_a_cluster_kernel_takes_whole_clusters_only(mod):
    rec = DescRecorder()
    launch = make_desc(mod, rec, cluster_x=2)
    assert launch((4,), desc_args(), {}, None) is True
    assert launch((3,), desc_args(), {}, None) is False  # the checked path explains the grid rule
    assert [c["grid"] for c in rec.calls] == [(4, 1, 1)]


def test_descriptor_launches_leak_no_references(mod):
    rec = DescRecorder()
    launch = make_desc(mod, rec)
    args = desc_args()
    bad = (FakeDesc(0x10000, [64, 100], ir_type="U"),) + args[1:]
    before = [sys.getrefcount(o) for o in (args[0], args[0].base, args[0]._tmap, args[0].shape, launch)]
    for _ in range(2000):
        launch((1,), args, {}, None)
        launch((1,), bad, {}, None)
    assert [sys.getrefcount(o) for o in (args[0], args[0].base, args[0]._tmap, args[0].shape, launch)] == before
    assert len(rec.calls) == 2000


def test_descriptor_specs_are_validated(mod):
    rec = DescRecorder()
    with pytest.raises(ValueError, match="bad argument spec"):  # a descriptor spec without dims
        mod.Launch(rec.addr, 0, 128, 0, 332, ((6, False, 0, "T", False),), FakeTensor, {}, lambda d: 0,
                   lambda: 0, False, {0}, lambda c: None, None, 0, 0, FakeDesc, 1)
    with pytest.raises(ValueError, match="bad argument spec"):  # descriptors but no descriptor class
        mod.Launch(rec.addr, 0, 128, 0, 332, DESC_SPECS, FakeTensor, {}, lambda d: 0,
                   lambda: 0, False, {0}, lambda c: None, None, 0, 0, None, 1)
    with pytest.raises(ValueError, match="bad argument spec"):  # a dim past the buffer
        mod.Launch(rec.addr, 0, 128, 0, 332, ((6, False, 0, "T", False, (330,)),), FakeTensor, {}, lambda d: 0,
                   lambda: 0, False, {0}, lambda c: None, None, 0, 0, FakeDesc, 1)
