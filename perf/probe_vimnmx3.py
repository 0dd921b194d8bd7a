"""The GPU fuzzer's seed 330070402 (default preset, session 18): max over -|a + b| of 8 int32s,
each thread holding all 8. Our PTX (abs.s32, neg.s32, a tree of max.s32) is right: the PTX
simulator and the interpreter agree with numpy. On the H200 the cubin of ptxas 13.0.88 at -O1..-O3
stores 2135500405 (|a5 + b5|: the negation not seen) where -O0 stores -5; the optimized SASS
folds the max tree into VIMNMX3. This assembles the PTX at each level, runs it on the fixed
inputs and prints the min/max SASS:

    python perf/probe_vimnmx3.py perf/results/vimnmx3-seed330070402.ptx
"""
import subprocess
import sys

import cupy as cp
import numpy as np

from gluon_trace.backends.nvidia import ptxas
path, version = ptxas.locate()
print("ptxas", path, version, flush=True)
ptx = open(sys.argv[1]).read()
a = np.frombuffer(bytes.fromhex('3b51deac020000004e1c4026fcffffff7fb2ed00f8fffffff9fffffff8ffffff'), np.int32)
b = np.frombuffer(bytes.fromhex('fefffffff0e0891df8fffffffafffffff8ffffff7d26497fffffffff03000000'), np.int32)
print("expected", (-np.abs((a.astype(np.int64) + b).astype(np.int32))).max())
for opt in ("-O3", "-O2", "-O1", "-O0"):
    cubin, _ = ptxas.assemble(ptx, "sm_90a", kernel="k402", options=(opt,))
    open(f"/tmp/k402{opt}.cubin", "wb").write(cubin)
    mod = cp.RawModule(path=f"/tmp/k402{opt}.cubin")
    f = mod.get_function("fuzz_kernel")
    da, db, out = cp.asarray(a), cp.asarray(b), cp.full((1,), 0x5A5A5A5A, cp.int32)
    f((1,), (256,), (da, db, out, np.int32(0), np.int32(0), np.int32(0)))
    cp.cuda.runtime.deviceSynchronize()
    print(opt, "got", int(out.get()[0]), flush=True)
    sass = subprocess.run(["cuobjdump", "-sass", f"/tmp/k402{opt}.cubin"], capture_output=True, text=True).stdout
    print("\n".join(l for l in sass.splitlines() if "/*0" in l and ("MNMX" in l or "IABS" in l or "IADD" in l or "MOV" in l or "STG" in l or "EXIT" in l)))
