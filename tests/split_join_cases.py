"""``gl.split`` and ``gl.join`` over arbitrary legal layouts, shared by the interpreter,
NVIDIA and AMD tests: a kernel that splits a tile whose last dimension is 2, stores each half
in the layout split gives it, and joins the halves back in swapped order; layouts come from
reduce_layout_cases' hypothesis strategies (blocked in every order; linear with multi-bit,
zero and repeated bases), so the last dimension may sit in registers (a renaming), lanes or
warps (an exchange between threads)."""
from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

import gluon_trace as gt
from gluon_trace import language as gl

import reduce_layout_cases as R


@gt.jit
def split_join_kernel(o_a, o_b, o_j, x_ptr, LAYOUT: gl.constexpr, SHAPE: gl.constexpr):
    x = gl.load(x_ptr + R.offsets(SHAPE, LAYOUT))
    a, b = x.split()
    half = SHAPE[:-1]
    gl.store(o_a + R.offsets(half, a.layout), a)
    gl.store(o_b + R.offsets(half, b.layout), b * 2)
    j = gl.join(b, a)
    gl.store(o_j + R.offsets(SHAPE, j.layout), j)


@st.composite
def cases(draw, lanes_log, max_bits=8):
    """(layout, shape, num_warps, dtype): shape is 1-2 leading dimensions and a last of 2."""
    lead = draw(R.shapes(max_bits - 1))
    shape = tuple(lead) + (2,) if len(lead) < 3 else tuple(lead[:2]) + (2,)
    warps_log = draw(st.integers(0, 2))
    make = draw(st.sampled_from([R.blocked_layouts, R.linear_layouts]))
    layout = draw(make(shape, lanes_log, warps_log))
    dtype = draw(st.sampled_from([np.int32, np.float32]))
    return layout, shape, 1 << warps_log, dtype


def launch_args(case, seed):
    layout, shape, nw, dtype = case
    x = R.inputs(shape, dtype, seed)
    outs = [np.full(shape[:-1], -99, dtype), np.full(shape[:-1], -99, dtype), np.full(shape, -99, dtype)]
    return outs + [x], dict(LAYOUT=layout, SHAPE=shape)


def expected(x):
    return [x[..., 0], x[..., 1] * 2, np.stack([x[..., 1], x[..., 0]], -1)]


def reference(case, seed, target=None):
    """The interpreter's outputs (traced for ``target``'s warp size), checked against numpy."""
    args, cx = launch_args(case, seed)
    kw = dict(target=target) if target else {}
    split_join_kernel[(1,)](*args, **cx, num_warps=case[2], backend="interpreter", **kw)
    for got, want in zip(args[:3], expected(args[3])):
        np.testing.assert_array_equal(got, want, err_msg=f"interpreter vs numpy: {case}")
    return args[:3]


# -- random programs (gluon_trace.fuzz with FuzzConfig(split_join=True)) ----------------------

def fuzz_programs(n, warp_size=32):
    """The first ``n`` random programs (max 256 elements, 6 ops) that split or join."""
    from gluon_trace import fuzz
    cfg = fuzz.FuzzConfig(warp_size=warp_size, max_numel=256, max_ops=6, split_join=True)
    out, seed = [], 0
    while len(out) < n:
        prog = fuzz.random_program(seed, cfg)
        if any(x.op in ("split", "join") for x in prog.nodes):
            out.append(prog)
        seed += 1
    return out


def check_fuzz(prog, target, run):
    """The interpreter and ``run(prog, args)`` (a simulated backend) against the numpy
    reference, outputs poisoned; None, or the failures with a saved reproducer's path."""
    from gluon_trace import fuzz
    out = fuzz.check_program(prog)
    where = f"{target} (simulated)"
    try:
        inputs = fuzz.make_inputs(prog)
        args, poison = fuzz.kernel_args(prog, inputs)
        with np.errstate(all="ignore"):
            run(prog, args)
        ref = fuzz.evaluate(prog, inputs, "bounded")
        out.failures += [(where, m) for m in fuzz.mismatches(prog, fuzz.outputs_of(prog, args), ref, poison)]
    except Exception as e:  # noqa: BLE001 - a refusal or crash on a legal program is a finding
        out.failures.append((where, f"{type(e).__name__}: {str(e)[:600]}"))
    if not out.ok:
        return f"{fuzz.save_reproducer(prog, out.failures, name=f'split_join_{target}')}: {out.failures}"
    return None
