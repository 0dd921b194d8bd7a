"""One launch of the warp-specialized attention (B4 H32 S4096 D128 bf16, 64-row consumers,
128-key tiles, 2 stages) for Nsight Compute, e.g.

    ncu -k regex:attention --launch-skip 1 --launch-count 1 --section SpeedOfLight \\
        --section WarpStateStats --section InstructionStats python perf/profile_attention.py [causal] [cudnn]
"""
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from gluon_trace import language as gl  # noqa: E402
from gluon_trace.kernels.attention_hopper_ws import attention_fwd_ws  # noqa: E402
from gluon_trace.nvidia.hopper import TensorDescriptor  # noqa: E402

causal = "causal" in sys.argv[1:]
b, h, s, d, bm, bn = 4, 32, 4096, 128, 64, 128
q, k, v = (torch.randn(b * h, s, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
o = torch.empty_like(q)
lay = gl.NVMMASharedLayout.get_default_for
qd, od = (TensorDescriptor.from_tensor(x, [1, bm, d], lay([bm, d], gl.bfloat16)) for x in (q, o))
kd, vd = (TensorDescriptor.from_tensor(x, [1, bn, d], lay([bn, d], gl.bfloat16)) for x in (k, v))
for _ in range(2):
    if "cudnn" in sys.argv[1:]:  # the anchor, same shape, through torch's SDPA
        from torch.nn.attention import SDPBackend, sdpa_kernel
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            torch.nn.functional.scaled_dot_product_attention(q.view(b, h, s, d), k.view(b, h, s, d),
                                                             v.view(b, h, s, d), is_causal=causal)
    else:
        attention_fwd_ws[(s // (2 * bm), b * h)](qd, kd, vd, od, s, d ** -0.5, CAUSAL=causal, STAGES=2,
                                                 num_warps=4, backend="nvidia")
torch.cuda.synchronize()
