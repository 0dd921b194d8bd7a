"""The AMD LDS tests' runner for the shared case modules (tests/smem_view_cases.py,
tests/smem_swizzled_cases.py), whose ``check_*`` functions take it as their first argument."""
import amdsim


def both(kernel, make, target, num_warps=4, **kw):
    """(interpreter's args, simulator's args, AMDGCN): traced on one set of args, run on two fresh ones."""
    from gluon_trace.backends.amd.compiler import lower
    tk = kernel.trace(*make(), target=target, num_warps=num_warps, **kw)
    ref, sim = make(), make()
    kernel[(1,)](*ref, backend="interpreter", num_warps=num_warps, **kw)
    amdsim.simulate(tk, target, (1,), sim)
    return ref, sim, lower(tk.for_target(target).graph, target).text
