"""Launching one kernel from many fresh threads at once (GPU). Each run is a new process
with an empty cache, so the threads race through tracing, compiling, driver
initialisation, kernel loading and the first launch; the threads call no torch function
(a thread that never touched CUDA has no current context). Run with ``pytest -m gpu``."""
import os
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.gpu

SCRIPT = textwrap.dedent("""
    import threading
    import torch
    import gluon_trace as gt
    from gluon_trace import language as gl

    @gt.jit
    def axpy(out_ptr, x_ptr, a, n, BLOCK: gl.constexpr):
        offs = gl.program_id(0) * BLOCK + gl.arange(0, BLOCK, layout=gl.BlockedLayout([4], [32], [4], [0]))
        m = offs < n
        gl.store(out_ptr + offs, gl.load(x_ptr + offs, mask=m) * a + 1.0, mask=m)

    THREADS, LAUNCHES, N = 8, 50, 3000
    x = torch.arange(N, device="cuda", dtype=torch.float32)
    outs = [[torch.zeros(N, device="cuda") for _ in range(LAUNCHES)] for _ in range(THREADS)]
    errors, start = [], threading.Barrier(THREADS)

    def worker(k):
        try:
            start.wait()
            for i in range(LAUNCHES):
                axpy[(gl.cdiv(N, 512),)](outs[k][i], x, float(k * LAUNCHES + i), N, BLOCK=512)
        except BaseException as e:  # reported by the main thread
            errors.append(f"thread {k}: {type(e).__name__}: {e}")

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    torch.cuda.synchronize()
    assert not errors, errors
    for k in range(THREADS):
        for i in range(LAUNCHES):
            want = x * float(k * LAUNCHES + i) + 1.0
            assert torch.equal(outs[k][i], want), (k, i)
    print("ok", THREADS * LAUNCHES)
""")


@pytest.mark.parametrize("path", ["c", "python"])
@pytest.mark.parametrize("run", range(4))
def test_launches_from_fresh_threads_on_a_fresh_cache(tmp_path, path, run):
    pytest.importorskip("torch")
    env = dict(os.environ, GLUON_TRACE_CACHE_DIR=str(tmp_path / "cache"), GLUON_TRACE_LAUNCH=path)
    r = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and r.stdout.strip() == "ok 400", r.stdout + r.stderr
