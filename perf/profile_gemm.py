"""One launch of the Hopper GEMM at 8192^3 bf16 (128x256x64, 3 stages, 8 warps), for Nsight
Compute: ncu -k regex:matmul_hopper --section SpeedOfLight --section WarpStateStats
--metrics sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active python perf/profile_gemm.py"""
import torch

from gluon_trace import language as gl
from gluon_trace.kernels.matmul_hopper import matmul_hopper
from gluon_trace.nvidia.hopper import TensorDescriptor

m = n = k = 8192
a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
c = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
lay = gl.NVMMASharedLayout.get_default_for
da = TensorDescriptor.from_tensor(a, [128, 64], lay([128, 64], gl.bfloat16))
db = TensorDescriptor.from_tensor(b, [64, 256], lay([64, 256], gl.bfloat16))
dc = TensorDescriptor.from_tensor(c, [128, 256], lay([128, 256], gl.bfloat16))
sms = torch.cuda.get_device_properties(0).multi_processor_count
for _ in range(2):
    matmul_hopper[(sms,)](da, db, dc, m, n, k, STAGES=3, GROUP_M=8, num_warps=8, backend="nvidia")
torch.cuda.synchronize()
print("ok", (c.float()[:64, :64] - (a.float()[:64] @ b.float()[:, :64])).abs().max().item())
