"""Variants and autotuning: configurations from lists and generators, compiled on a
thread pool (checked with a stand-in GPU backend whose "assembler" sleeps), failures
reported and skipped, timing labelled, the best chosen per key and kept on disk."""
import json
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
import time

import numpy as np
import pytest

import gluon_trace as gt
from gluon_trace import backend as backends
from gluon_trace import language as gl
from gluon_trace import variants as gv
from gluon_trace.compiled import CompiledKernel
from gluon_trace.errors import ArgumentError, CompileError


def _line_of(text: str) -> int:
    with open(__file__) as f:
        for i, line in enumerate(f, 1):
            if text in line and "_line_of" not in line:
                return i
    raise AssertionError(text)


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("GLUON_TRACE_CACHE_DIR", str(tmp_path))
    return tmp_path


@gt.jit
def softmax(out_ptr, in_ptr, stride, n_cols, BLOCK: gl.constexpr, SPT: gl.constexpr):
    layout = gl.BlockedLayout([SPT], [32], [gl.num_warps()], [0])
    row = gl.program_id(0)
    cols = gl.arange(0, BLOCK, layout=layout)
    mask = cols < n_cols
    x = gl.load(in_ptr + row * stride + cols, mask=mask, other=-float("inf"))
    x = x - gl.max(x, axis=0)
    e = gl.exp(x)
    gl.store(out_ptr + row * stride + cols, e / gl.sum(e, axis=0), mask=mask)


SPECS = (gl.pointer(gl.float32), gl.pointer(gl.float32), gl.int32, gl.int32)


def _data(rows=4, cols=100, seed=0):
    x = np.random.default_rng(seed).standard_normal((rows, cols)).astype(np.float32)
    return np.empty_like(x), x


def _softmax_ref(x):
    e = np.exp(x - x.max(1, keepdims=True))
    return e / e.sum(1, keepdims=True)


# ------------------------------------------------------------------------- compiling
def test_configs_come_from_lists_generators_and_functions():
    listed = [{"BLOCK": b, "SPT": 1, "num_warps": 1} for b in (128, 256)]
    s = gv.compile_variants(softmax, listed, *SPECS, progress=False)
    assert [v.config for v in s] == listed and all(v.ok and v.traced is not None for v in s)
    assert s.target == "interpreter" and all(v.traced.graph.constexprs["SPT"] == 1 for v in s)

    gen = (gv.Config(BLOCK=b, SPT=s_, num_warps=w) for b in (128, 256) for s_ in (1, 2) for w in (1, 2))
    assert len(gv.compile_variants(softmax, gen, *SPECS, progress=False)) == 8

    def no_args():
        for w in (1, 2, 4):
            yield {"BLOCK": 128, "SPT": 4, "num_warps": w}

    s = gv.compile_variants(softmax, no_args, *SPECS, progress=False)
    assert [v.traced.graph.num_warps for v in s] == [1, 2, 4]

    def from_args(named):  # sees the kernel's named arguments, e.g. to size BLOCK to n_cols
        return [{"BLOCK": max(32, 1 << (named["n_cols"] - 1).bit_length()), "SPT": 1}]

    _, x = _data(cols=100)
    s = gv.compile_variants(softmax, from_args, np.empty_like(x), x, 100, 100, progress=False)
    assert s[0].config == {"BLOCK": 128, "SPT": 1} and s[0].traced.graph.num_warps == 4


def test_failing_configurations_are_reported_and_skipped(capsys):
    cfgs = [{"BLOCK": 128, "SPT": 4}, {"BLOCK": 100, "SPT": 1}, {"BLOCK": 128, "SPT": 3}]
    s = gv.compile_variants(softmax, cfgs, *SPECS, progress=True)
    assert [v.ok for v in s] == [True, False, False]
    assert s.failed[0].stage == "trace" and "power of two" in s.failed[0].error
    assert "BlockedLayout size_per_thread=[3]" in s.failed[1].error
    # the error names the kernel's line that failed
    assert f"test_variants.py:{_line_of('cols = gl.arange(0, BLOCK, layout=layout)')}" in s.failed[0].error
    err = capsys.readouterr().err
    assert "2 of 3 configurations failed and were skipped:" in err and "[BLOCK=100, SPT=1] at trace" in err
    assert s.failures() in str(s)


def test_bad_configurations_argument_names_the_calling_line():
    with pytest.raises(ArgumentError) as e:
        gv.compile_variants(softmax, [("BLOCK", 128)], *SPECS, progress=False)  # tuple-config
    assert "must be a dict" in str(e.value) and f":{_line_of('# tuple-config')}" in str(e.value)
    with pytest.raises(ArgumentError) as e:
        gv.compile_variants(softmax, [], *SPECS, progress=False)  # empty-config
    assert "no configurations" in str(e.value) and f":{_line_of('# empty-config')}" in str(e.value)


class SlowAssembler:
    """A stand-in NVIDIA backend whose compile sleeps like a ptxas subprocess (outside
    the GIL) and refuses big tiles the way ptxas refuses too much shared memory."""
    name = "nvidia"
    targets = ("sm_90",)
    RULES = {}

    def __init__(self, delay=0.15):
        self.delay = delay
        self.active = 0
        self.peak = 0
        self.lock = threading.Lock()

    def threads_per_warp(self, target):
        return 32

    def default_target(self, args):
        return "sm_90"

    def compile(self, graph, target):
        with self.lock:
            self.active += 1
            self.peak = max(self.peak, self.active)
        time.sleep(self.delay)
        with self.lock:
            self.active -= 1
        if graph.constexprs["BLOCK"] >= 4096:
            raise CompileError("ptxas error: Entry function uses too much shared data (0x12000 bytes, 0xc000 max)")
        return CompiledKernel(graph.name, target, "// ptx", b"cubin", registers=graph.constexprs["SPT"] * 8,
                              shared_bytes=graph.num_warps * 4, num_warps=graph.num_warps)


def test_gpu_variants_compile_in_parallel_and_assembler_failures_are_skipped(monkeypatch):
    fake = SlowAssembler(delay=0.5)
    monkeypatch.setitem(backends._loaded, "nvidia", fake)
    cfgs = [{"BLOCK": b, "SPT": s, "num_warps": 4} for b in (1024, 2048, 4096, 8192) for s in (1, 2)]
    # threads, so that the stand-in backend (patched into this process) does the compiling
    with ThreadPoolExecutor(8) as threads:
        s = gv.compile_variants(softmax, cfgs, *SPECS, target="sm_90", executor=threads, progress=False)
    # overlapped, not one after another: at least 4 assemblers were running at one moment (counted
    # by the stand-in, not timed: a wall-clock bound failed on a loaded CI machine, where tracing
    # the variants took longer than the assemblers' sleeps)
    assert fake.peak >= 4
    assert [v.ok for v in s] == [True] * 4 + [False] * 4
    assert all(v.stage == "compile" and "too much shared data" in v.error for v in s.failed)
    assert [v.compiled.registers for v in s.succeeded] == [8, 16, 8, 16]
    table = s.table()
    assert "regs" in table and "failed at compile" in table and "too much shared data" in table
    assert s.best is None and s.timer is None  # nothing timed without running


# --------------------------------------------------------------------------- timing
def test_sweep_on_the_interpreter_times_with_a_labelled_wall_clock_and_picks_the_fastest():
    out, x = _data()
    cfgs = [{"BLOCK": 128, "SPT": s, "num_warps": w} for s in (1, 4) for w in (1, 4)]
    s = gv.sweep(softmax, cfgs, out, x, 100, 100, grid=lambda meta: (meta["in_ptr"].shape[0],), reps=2,
                 progress=False)
    assert s.timer.startswith("interpreter wall-clock on the CPU") and "not GPU time" in s.timer
    assert all(len(v.times_ms) == 2 and v.time_ms > 0 for v in s)
    assert s.best is min(s, key=lambda v: v.time_ms)
    np.testing.assert_allclose(out, _softmax_ref(x), rtol=1e-5, atol=1e-6)  # it really ran
    text = str(s)
    assert "* best: " + s.best.config.label in text and "\n* " in text
    assert "interpreter wall-clock" in s._repr_html_() and "<table" in s._repr_html_()


def test_a_configuration_that_fails_at_run_time_is_skipped():
    _, x = _data(cols=100)
    small = np.empty((2, 10), np.float32)  # too small an output: every store runs out of bounds
    cfgs = [{"BLOCK": 128, "SPT": 1}, {"BLOCK": 64, "SPT": 1}]
    s = gv.sweep(softmax, cfgs, small, x, 100, 100, grid=(4,), reps=1, progress=False)
    assert len(s.failed) == 2 and s.best is None
    assert all(v.stage == "run" and "out of bounds" in v.error for v in s.failed)
    assert f"test_variants.py:{_line_of('gl.store(out_ptr + row * stride + cols')}" in s.failed[0].error


@gt.jit
def accumulate(acc_ptr, x_ptr, n, BLOCK: gl.constexpr):
    L = gl.BlockedLayout([1], [32], [gl.num_warps()], [0])
    offs = gl.program_id(0) * BLOCK + gl.arange(0, BLOCK, layout=L)
    m = offs < n
    gl.atomic_add(acc_ptr + offs * 0, gl.load(x_ptr + offs, mask=m, other=0.0), mask=m)


def test_restore_value_keeps_in_place_updates_from_piling_up_while_tuning():
    x = np.arange(1, 65, dtype=np.float32)
    acc = np.zeros(1, np.float32)
    tuned = gv.autotune([{"BLOCK": 32}, {"BLOCK": 64}], key=["n"], restore_value=["acc_ptr"], reps=2,
                        progress=False)(accumulate)
    tuned[lambda m: (64 // m["BLOCK"],)](acc, x, 64)
    assert acc[0] == x.sum()  # the benchmark runs left no trace; only the real launch added


# ------------------------------------------------------------------------ autotuning
def _tuned(**kw):
    @gt.autotune(configs=[gv.Config(BLOCK=128, SPT=s, num_warps=w) for s in (1, 2) for w in (1, 2)],
                 key=["n_cols"], reps=1, progress=False, **kw)
    @gt.jit
    def tsoftmax(out_ptr, in_ptr, stride, n_cols, BLOCK: gl.constexpr, SPT: gl.constexpr):
        layout = gl.BlockedLayout([SPT], [32], [gl.num_warps()], [0])
        cols = gl.arange(0, BLOCK, layout=layout)
        mask = cols < n_cols
        p = in_ptr + gl.program_id(0) * stride + cols
        x = gl.load(p, mask=mask, other=-float("inf"))
        e = gl.exp(x - gl.max(x, axis=0))
        gl.store(out_ptr + gl.program_id(0) * stride + cols, e / gl.sum(e, axis=0), mask=mask)
    return tsoftmax


def test_autotune_tunes_once_per_key_and_remembers_on_disk(cache):
    k = _tuned()
    out, x = _data(cols=100)
    k[(4,)](out, x, 100, 100)
    np.testing.assert_allclose(out, _softmax_ref(x), rtol=1e-5, atol=1e-6)
    assert k.tuned == 1 and len(k.last_sweep) == 4 and k.last_sweep.best.config in k.choices.values()
    k[(4,)](out, x, 100, 100)
    assert k.tuned == 1  # same key: no second tuning
    out2, x2 = _data(cols=60)
    k[(4,)](out2, x2, 60, 60)
    assert k.tuned == 2 and len(k.choices) == 2
    np.testing.assert_allclose(out2, _softmax_ref(x2), rtol=1e-5, atol=1e-6)

    path = k.cache_file
    assert path.parent == cache / "autotune" and path.name.startswith("tsoftmax-")
    saved = json.loads(path.read_text())
    assert len(saved["choices"]) == 2
    entry = next(iter(saved["choices"].values()))
    assert set(entry) >= {"config", "time_ms", "timer"} and "interpreter wall-clock" in entry["timer"]

    fresh = _tuned()  # another process would build this same object
    assert fresh.cache_file == path
    fresh[(4,)](out, x, 100, 100)
    assert fresh.tuned == 0 and fresh.best_config(out, x, 100, 100) == k.best_config(out, x, 100, 100)
    assert fresh.trace(out, x, 100, 100).graph.constexprs["BLOCK"] == 128

    nodisk = _tuned(cache=False)
    nodisk[(4,)](out, x, 100, 100)
    assert nodisk.tuned == 1


def test_autotune_key_may_be_a_function_and_dtypes_are_part_of_it():
    k = _tuned()
    k.key = lambda named: named["n_cols"] // 64  # 100 and 120 share a bucket
    out, x = _data(cols=120)
    k[(4,)](out, x, 120, 120)
    k[(4,)](out, x, 100, 100)
    assert k.tuned == 1
    k[(4,)](out.astype(np.float64), x.astype(np.float64), 100, 100)
    assert k.tuned == 2  # float64 arrays: another key


def test_autotune_errors_name_the_calling_line():
    k = _tuned()
    out, x = _data()
    with pytest.raises(ArgumentError) as e:
        k[(4,)](out, x, 100, 100, num_warps=2)  # clash
    assert "num_warps is chosen by the autotuner" in str(e.value) and f":{_line_of('# clash')}" in str(e.value)
    with pytest.raises(ArgumentError) as e:
        k.trace(out, x, 100, 100)  # untuned
    assert "no tuned configuration" in str(e.value) and f":{_line_of('# untuned')}" in str(e.value)
    bad = gv.autotune([{"BLOCK": 100, "SPT": 1}, {"BLOCK": 128, "SPT": 3}], key=["n_cols"],
                      progress=False)(softmax)
    with pytest.raises(CompileError) as e:
        bad[(4,)](out, x, 100, 100)  # all-fail
    msg = str(e.value)
    assert "every configuration of softmax failed" in msg and f":{_line_of('# all-fail')}" in msg
    assert "2 of 2 configurations failed" in msg
    with pytest.raises(ArgumentError) as e:
        gt.autotune([{"BLOCK": 1}], key=[])(lambda x: x)  # not-jit
    assert "wraps a @gt.jit kernel" in str(e.value) and f":{_line_of('# not-jit')}" in str(e.value)


# ------------------------------------------------------------------- showing results
def _timed_sweep():
    out, x = _data(rows=2)
    return gv.sweep(softmax, [{"BLOCK": b, "SPT": 1, "num_warps": w} for b in (128, 256) for w in (1, 2)],
                    out, x, 100, 100, grid=(2,), reps=1, progress=False)


def test_plot_draws_time_against_a_parameter_with_matplotlib():
    pytest.importorskip("matplotlib")
    import matplotlib
    matplotlib.use("Agg")
    s = _timed_sweep()
    ax = s.plot("BLOCK")
    labels = [line.get_label() for line in ax.get_lines()]
    assert "SPT=1, num_warps=1" in labels and "best" in labels and ax.get_xlabel() == "BLOCK"
    assert "interpreter wall-clock" in ax.get_title()
    ax2 = s.plot()
    assert len(ax2.patches) == 4


def test_plot_without_matplotlib_prints_the_table(monkeypatch, capsys):
    s = _timed_sweep()
    monkeypatch.setitem(sys.modules, "matplotlib.pyplot", None)
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    assert s.plot("BLOCK") is None
    out = capsys.readouterr().out
    assert "* best:" in out and "pip install matplotlib" in out


def test_progress_falls_back_to_a_text_bar_without_tqdm(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "tqdm", None)
    monkeypatch.setitem(sys.modules, "tqdm.std", None)
    monkeypatch.setitem(sys.modules, "tqdm.auto", None)
    gv.compile_variants(softmax, [{"BLOCK": 128, "SPT": 1}] * 3, *SPECS)
    err = capsys.readouterr().err
    assert "compiling 3 variants for interpreter [" in err and "] 3/3" in err and "#" * 30 in err


@pytest.mark.gpu
def test_gpu_timing_uses_cuda_events_and_flushes_l2():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no GPU: torch.cuda.is_available() is False")
    timer = gv._GpuTimer(reps=10)
    a = torch.randn(1 << 22, device="cuda")
    times = timer.measure(lambda: a.mul_(1.0))
    assert len(times) == 10 and all(t > 0 for t in times)
    assert timer.buf.numel() == gv.L2_FLUSH_BYTES


def test_timing_gpu_arguments_without_torch_says_so(monkeypatch):
    class CudaArray:  # a GPU array that is no torch tensor (as CuPy's are)
        __cuda_array_interface__ = {"shape": (4,), "typestr": "<f4", "data": (0, False), "version": 3}

    monkeypatch.setitem(backends._loaded, "nvidia", SlowAssembler(delay=0))
    monkeypatch.setitem(sys.modules, "torch", None)
    s = gv.compile_variants(softmax, [{"BLOCK": 128, "SPT": 1}], *SPECS, target="sm_90", progress=False)
    with pytest.raises(gt.LaunchError) as e:
        gv.benchmark(s, CudaArray(), CudaArray(), 4, 4, grid=(1,), progress=False)  # no-torch
    assert "uses torch's CUDA events" in str(e.value) and f":{_line_of('# no-torch')}" in str(e.value)


# ------------------------------------------------------------ executors and devices
def _forkserver_pool(n=2):
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor
    method = "forkserver" if "forkserver" in mp.get_all_start_methods() else "spawn"
    return ProcessPoolExecutor(n, mp_context=mp.get_context(method))


def _softmax_rows_ref(x):
    e = np.exp(x - x.max(1, keepdims=True))
    return e / e.sum(1, keepdims=True)


def test_a_process_pool_compiles_and_times_with_plain_data_crossing_the_boundary():
    """What a Ray or Dask executor gets: kernel by module path, type specs, plain results."""
    import os
    from gluon_trace.examples import softmax_sweep
    x = np.random.default_rng(3).standard_normal((4, 100)).astype(np.float32)
    out = np.full_like(x, np.nan)
    cfgs = [{"BLOCK": 128, "SPT": s, "num_warps": w} for s in (1, 4) for w in (1, 2)] + \
        [{"BLOCK": 96, "SPT": 1, "num_warps": 1}]                 # no power of two: fails at trace
    with _forkserver_pool() as pool:
        s = gv.sweep(softmax_sweep, cfgs, out, x, 100, 100, grid=(4,), reps=2, executor=pool, progress=False)
    assert s.compiled_on == "the executor given"
    assert [v.ok for v in s] == [True] * 4 + [False]
    assert s.failed[0].stage == "trace" and "power of two" in s.failed[0].error
    assert all(v.worker not in (None, os.getpid()) for v in s)        # compiled in the pool
    assert all(v.timed_in not in (None, os.getpid()) for v in s.succeeded)  # and timed there
    assert [v.traced.graph.constexprs["SPT"] for v in s.succeeded] == [1, 1, 4, 4]
    assert all(len(v.times_ms) == 2 for v in s.succeeded) and s.best in s.succeeded
    assert np.isnan(out).all()  # timing ran on copies in the workers
    # the graph that came back runs here and is right
    softmax_sweep[(4,)](out, x, 100, 100, **s.best.config)
    np.testing.assert_allclose(out, _softmax_rows_ref(x), rtol=1e-6, atol=1e-7)


def test_timing_spreads_over_a_fake_device_list_one_process_per_device():
    from gluon_trace import sweep_workers as sw
    from gluon_trace.examples import softmax_sweep
    assert sw.split_over_devices(7, ["a", "b", "c"], per_device_tasks=2) == [
        ("a", [0, 3]), ("a", [6]), ("b", [1]), ("b", [4]), ("c", [2]), ("c", [5])]
    x = np.random.default_rng(4).standard_normal((2, 60)).astype(np.float32)
    cfgs = [{"BLOCK": 64, "SPT": s, "num_warps": w} for s in (1, 2) for w in (1, 2, 4)]
    s = gv.compile_variants(softmax_sweep, cfgs, np.empty_like(x), x, 60, 60, progress=False)
    gv.benchmark(s, np.empty_like(x), x, 60, 60, grid=(2,), reps=1, devices=["gpu-a", "gpu-b", "gpu-c"],
                 progress=False)
    assert all(v.ok and v.times_ms for v in s)
    where = [v.device.split("#")[1] for v in s]
    assert where == ["gpu-a", "gpu-b", "gpu-c"] * 2                     # round robin
    pids = {d: {v.timed_in for v in s if v.device.endswith(d)} for d in ("gpu-a", "gpu-b", "gpu-c")}
    assert all(len(p) == 1 for p in pids.values())                      # one process per device
    assert len(set.union(*pids.values())) == 3                          # and a different one each


def test_a_kernel_no_worker_can_import_is_reported_not_raised():
    @gt.jit
    def local_kernel(out_ptr, BLOCK: gl.constexpr):
        offs = gl.arange(0, BLOCK, layout=gl.BlockedLayout([1], [32], [gl.num_warps()], [0]))
        gl.store(out_ptr + offs, offs.to(gl.float32))
    with _forkserver_pool(1) as pool:
        s = gv.compile_variants(local_kernel, [{"BLOCK": 64}, {"BLOCK": 128}], gl.pointer(gl.float32),
                                executor=pool, progress=False)
    assert not s.succeeded and all(v.stage == "compile" and "the executor failed" in v.error for v in s)
    assert "local_kernel" in s.failures()
    # without an executor the same kernel is traced on threads here, and the sweep says why
    from gluon_trace.testing import compile_status
    target = "sm_90" if compile_status("sm_90")[0] else "interpreter"
    s = gv.compile_variants(local_kernel, [{"BLOCK": 64}, {"BLOCK": 128}], gl.pointer(gl.float32),
                            target=target, progress=False)
    assert all(v.ok for v in s) and s.compiled_on.startswith("threads")
    if target == "sm_90":
        assert "local_kernel is not importable by name" in s.compiled_on


def test_descriptors_and_strided_arrays_survive_shipping():
    from gluon_trace import sweep_workers as sw
    from gluon_trace.nvidia.hopper import TensorDescriptor
    buf = np.random.default_rng(5).standard_normal((16, 40)).astype(np.float32)
    view = buf[:, :36]                       # padded rows: strides kept, not compacted
    back = sw.land(pickle_round_trip(sw.ship(view)), None)
    assert back.strides == view.strides and np.array_equal(back, view)
    d = TensorDescriptor.from_tensor(view, [8, 32], gl.NVMMASharedLayout.get_default_for([8, 32], gl.float32))
    d2 = sw.land(pickle_round_trip(sw.ship(d)), None)
    assert d2.block_shape == d.block_shape and d2.strides == d.strides and np.array_equal(d2.base, view)
    assert sw.spec_of(d) == d.ir_type


def pickle_round_trip(x):
    import pickle
    return pickle.loads(pickle.dumps(x))


@pytest.mark.gpu
def test_a_sweep_uses_every_visible_gpu():
    torch = pytest.importorskip("torch")
    from gluon_trace.examples import softmax_sweep
    n = torch.cuda.device_count()
    x = torch.randn(512, 250, device="cuda")
    out = torch.empty_like(x)
    cfgs = [{"BLOCK": b, "SPT": s, "num_warps": w} for b in (256, 512) for s in (1, 2, 4) for w in (1, 2, 4)]
    s = gv.sweep(softmax_sweep, cfgs, out, x, 250, 250, grid=(512,), progress=False)
    assert all(v.ok for v in s), s.failures()
    assert len(s.devices) >= 1 and len({v.device for v in s}) == n
    assert len({v.timed_in for v in s}) == (n if n > 1 else 1)
    softmax_sweep[(512,)](out, x, 250, 250, **s.best.config)
    ref = torch.softmax(x, dim=1)
    assert torch.allclose(out, ref, atol=1e-6)


def test_a_tma_gemm_sweeps_block_shapes_through_per_configuration_descriptors():
    """Descriptors whose block shape follows each configuration, across a process pool; a
    configuration that hangs (STAGES=1 waits for a load never issued) is reported."""
    import ml_dtypes
    from gluon_trace.kernels.matmul_hopper import matmul_hopper
    rng = np.random.default_rng(8)
    a = rng.standard_normal((128, 192)).astype(ml_dtypes.bfloat16)
    b = rng.standard_normal((192, 128)).astype(ml_dtypes.bfloat16)
    c = np.full((128, 128), np.nan, np.float32)
    args = (gv.descriptor(a, ["BM", "BK"]), gv.descriptor(b, ["BK", "BN"]), gv.descriptor(c, ["BM", "BN"]),
            128, 128, 192)
    cfgs = [{"BM": 64, "BN": bn, "BK": bk, "STAGES": st_, "GROUP_M": 2} for bn in (64, 128) for bk in (32, 64)
            for st_ in (2, 3)] + [{"BM": 64, "BN": 64, "BK": 64, "STAGES": 1, "GROUP_M": 1}]
    with _forkserver_pool() as pool:
        s = gv.sweep(matmul_hopper, cfgs, *args, grid=lambda meta: (128 // meta["BM"],), target="sm_90a",
                     reps=1, executor=pool, progress=False)
    assert [v.ok for v in s] == [True] * 8 + [False]
    assert s.failed[0].stage == "run" and "deadlock" in s.failed[0].error
    assert {(v.traced.graph.constexprs["STAGES"]) for v in s.succeeded} == {2, 3}
    assert np.isnan(c).all()
    best = s.best.config
    from gluon_trace.sweep_workers import per_config
    run_args, cfg = per_config(matmul_hopper, args, best)
    assert set(cfg) == {"STAGES", "GROUP_M"} and run_args[0].block_shape == [64, best["BK"]]
    matmul_hopper[(2,)](*run_args, **cfg, backend="interpreter", target="sm_90a")
    ref = a.astype(np.float64) @ b.astype(np.float64)
    np.testing.assert_allclose(c, ref, rtol=1e-5, atol=1e-5 * np.abs(ref).max())


def test_an_attention_sweep_with_3d_per_configuration_descriptors_runs_in_the_interpreter():
    import ml_dtypes
    from gluon_trace.kernels.attention_hopper import attention_fwd_pipelined
    rng = np.random.default_rng(9)
    q, k, v = (rng.standard_normal((1, 96, 64)).astype(np.float32).astype(ml_dtypes.bfloat16) for _ in range(3))
    o = np.full_like(q, np.nan)
    args = (gv.descriptor(q, [1, "BM", 64]), gv.descriptor(k, [1, "BN", 64]), gv.descriptor(v, [1, "BN", 64]),
            gv.descriptor(o, [1, "BM", 64]), 96, 0.125)
    cfgs = [{"BM": 64, "BN": bn, "STAGES": 3} for bn in (32, 64)] + [{"BM": 64, "BN": 64, "STAGES": 2}]
    s = gv.sweep(attention_fwd_pipelined, cfgs, *args, grid=lambda meta: (-(-96 // meta["BM"]), 1),
                 target="sm_90a", reps=1, progress=False, CAUSAL=True)
    assert [v_.ok for v_ in s] == [True, True, False]
    assert s.failed[0].stage == "trace" and "STAGES >= 3" in s.failed[0].error
    from gluon_trace.sweep_workers import per_config
    run_args, cfg = per_config(attention_fwd_pipelined, args, s.best.config)
    attention_fwd_pipelined[(2, 1)](*run_args, **cfg, CAUSAL=True, backend="interpreter", target="sm_90a")
    x = np.einsum("bqd,bkd->bqk", q.astype(np.float64), k.astype(np.float64)) * 0.125
    x = np.where(np.tril(np.ones((96, 96), bool)), x, -np.inf)
    p = np.exp(x - x.max(-1, keepdims=True))
    ref = np.einsum("bqk,bkd->bqd", p / p.sum(-1, keepdims=True), v.astype(np.float64))
    np.testing.assert_allclose(o.astype(np.float32), ref, atol=2e-2, rtol=2e-2)


def test_a_descriptor_naming_a_key_the_configuration_lacks_is_reported():
    import ml_dtypes
    from gluon_trace.kernels.matmul_hopper import matmul_hopper
    a = np.zeros((64, 64), ml_dtypes.bfloat16)
    c = np.zeros((64, 64), np.float32)
    args = (gv.descriptor(a, ["BM", "BK"]), gv.descriptor(a, ["BK", "BN"]), gv.descriptor(c, ["BM", "BN"]), 64, 64, 64)
    s = gv.compile_variants(matmul_hopper, [{"BM": 64, "BN": 64, "STAGES": 2, "GROUP_M": 1}], *args,
                            target="interpreter", progress=False)
    assert s.failed and "names BK, which this configuration does not set" in s.failed[0].error


def test_gpu_targets_compile_in_worker_processes_by_default_and_fall_back_to_threads(tmp_path):
    import os
    import subprocess
    from gluon_trace.examples import SOFTMAX_SPECS, softmax_sweep
    from gluon_trace.testing import compile_status
    ok, why = compile_status("sm_90")
    if not ok:
        pytest.skip(f"no NVIDIA backend: {why}")
    cfgs = [{"BLOCK": b, "SPT": 2, "num_warps": 4} for b in (256, 512, 1024)]
    s = gv.compile_variants(softmax_sweep, cfgs, *SOFTMAX_SPECS, target="sm_90", workers=2, progress=False)
    assert s.compiled_on == "worker processes" and all(v.ok and v.compiled.registers > 0 for v in s)
    assert all(v.worker not in (None, os.getpid()) for v in s)
    assert [v.traced.graph.constexprs["BLOCK"] for v in s] == [256, 512, 1024]
    # a script without `if __name__ == "__main__":` re-runs itself in every worker: threads take over
    script = tmp_path / "unguarded.py"
    script.write_text("from gluon_trace import variants as gv\n"
                      "from gluon_trace.examples import SOFTMAX_SPECS, softmax_sweep\n"
                      "s = gv.compile_variants(softmax_sweep, [{'BLOCK': 256, 'SPT': 1}, {'BLOCK': 512, 'SPT': 1}],\n"
                      "                        *SOFTMAX_SPECS, target='sm_90', workers=1, progress=False)\n"
                      "print('RESULT', len(s.succeeded), s.compiled_on)\n")
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "GLUON_TRACE_CACHE_DIR": str(tmp_path / "cache")})
    line = [x for x in out.stdout.splitlines() if x.startswith("RESULT")][-1]
    assert line.startswith("RESULT 2 threads (worker processes could not start") and "__main__" in line


def test_autotune_choices_are_kept_per_device_model(cache, monkeypatch):
    """The same shape on another model of GPU tunes again (a tile best on one is not on another)."""
    k = _tuned()
    out, x = _data(cols=100)
    k[(4,)](out, x, 100, 100)
    assert k.tuned == 1 and all(key[-1] == "cpu" for key in k.choices)
    saved = json.loads(k.cache_file.read_text())["choices"]
    assert all(key.endswith("'interpreter', 'cpu')") for key in saved)
    monkeypatch.setattr(gv, "_device_of", lambda values, backend: "NVIDIA H200")  # a different device
    k[(4,)](out, x, 100, 100)
    assert k.tuned == 2 and {key[-1] for key in k.choices} == {"cpu", "NVIDIA H200"}
