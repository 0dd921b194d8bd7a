"""The NVIDIA shared-memory view tests' runner for the shared case modules (tests/smem_view_cases.py,
tests/smem_swizzled_cases.py), whose ``check_*`` functions take it as their first argument; the
GPU module test_smem_views_gpu.py puts the device in the simulator's place."""
import ptxsim_races

from gluon_trace.backend import get
from gluon_trace.backends.nvidia.emitter import emit


def both(kernel, make, target, num_warps=4, **kw):
    """(interpreter's args, simulator's args, PTX): traced on one set of args, run on two fresh
    ones, the simulator checking for races."""
    g = kernel.trace(*make(), target=target, num_warps=num_warps, **kw).graph
    text, _, smem = emit(g, target)
    ref, sim = make(), make()
    get("interpreter").run(g, (1, 1, 1), ref)
    ptxsim_races.run(text, (1, 1, 1), sim, smem)
    return ref, sim, text
