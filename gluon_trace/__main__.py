"""``python -m gluon_trace``: trace an example kernel, show its IR, run it on the best
backend present (the NVIDIA GPU when there is one, else the numpy interpreter) and
check the result against numpy."""
from __future__ import annotations

import sys

import numpy as np

from gluon_trace.examples import SOFTMAX_SPECS, softmax


def _gpu_reason() -> str | None:
    """None when an NVIDIA GPU can run kernels here, else why not."""
    try:
        import torch
    except ImportError:
        return "torch is not installed (pip install gluon-trace[torch,cuda])"
    if not torch.cuda.is_available():
        return "torch sees no CUDA GPU"
    try:
        from gluon_trace import backend
        backend.get("nvidia")
    except Exception as e:  # noqa: BLE001 - any failure means: fall back to the interpreter
        return f"the NVIDIA backend is unavailable: {e}"
    return None


def main() -> int:
    rows, cols, block = 256, 1000, 1024
    rng = np.random.default_rng(0)
    x = rng.standard_normal((rows, cols), dtype=np.float32)
    ref = np.exp(x - x.max(1, keepdims=True))
    ref /= ref.sum(1, keepdims=True)

    k = softmax.trace(*SOFTMAX_SPECS, BLOCK=block)
    print(k.ir)
    why = _gpu_reason()
    if why is None:
        import torch
        xt = torch.from_numpy(x).cuda()
        out = torch.full_like(xt, float("nan"))
        softmax[(rows,)](out, xt, xt.stride(0), cols, BLOCK=block)
        got, where = out.cpu().numpy(), f"NVIDIA GPU ({torch.cuda.get_device_name()})"
    else:
        out = np.full_like(x, np.nan)
        softmax[(rows,)](out, x, x.shape[1], cols, BLOCK=block)
        got, where = out, f"numpy interpreter ({why})"
    err = float(np.abs(got - ref).max())
    ok = err < 1e-5
    print(f"ran softmax {rows}x{cols} on the {where}: max abs error vs numpy {err:.2e} "
          f"-> {'OK' if ok else 'MISMATCH'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
