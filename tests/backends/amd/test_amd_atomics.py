"""Atomics on 8/16-bit integers, int1, float16 and bfloat16 (a compare-and-swap loop on
the dword holding the element; and/or/xor as one dword atomic), emitted for every AMD
target, assembled, linked and run on the simulator (amdsim.py) against the interpreter.

The simulator's ``global_atomic_cmpswap`` runs lane by lane in lane order on the
current memory, so lanes hitting the same word (neighbouring bytes) or the same
element really contend: all but one lose and go round the loop again. Where the order
of contending lanes decides the result (xchg, cas, float add), the returned old values
must still tell a story: each lane's (old -> new) is one step, and the steps must chain
from the initial value to the final one (an Euler trail through the values)."""
from collections import Counter, defaultdict

import numpy as np
import pytest

import gluon_trace as gt
from gluon_trace import dtypes as dt
from gluon_trace import language as gl
from gluon_trace.backends.interpreter import BACKEND as INTERP

import amdsim

TARGETS = ["gfx90a", "gfx942", "gfx1100"]
INT_KINDS = "add,max,min,xchg,and,or,xor,cas"
FLOAT_KINDS = "add,max,min,xchg,cas"
DTYPES = {"int8": (gl.int8, np.int8), "uint8": (gl.uint8, np.uint8), "int16": (gl.int16, np.int16),
          "uint16": (gl.uint16, np.uint16), "float16": (gl.float16, np.float16),
          "bfloat16": (gl.bfloat16, np.uint16), "int1": (gl.int1, np.int8)}
DISTINCT = 64    # elements [0, 64): each hit by at most one lane (neighbours by other lanes)
HOT = 4          # elements [64, 68): hit by many lanes at once
M = DISTINCT + HOT
OUT_OF_RANGE = 1 << 22  # where masked-off lanes point: touching memory fails the simulation


pytestmark = pytest.mark.usefixtures("amd_toolchain")


@gt.jit
def rmw_kernel(old_ptr, buf_ptr, idx_ptr, val_ptr, cmp_ptr, live_ptr, N: gl.constexpr,
               KINDS: gl.constexpr, SPT: gl.constexpr):
    layout = gl.BlockedLayout([SPT], [gl.threads_per_warp()], [2], [0])
    offs = gl.arange(0, N, layout=layout)
    live = gl.load(live_ptr + offs) != 0
    idx = gl.load(idx_ptr + offs)
    for k, kind in enumerate(KINDS.split(",")):
        p = buf_ptr + k * M + idx
        v = gl.load(val_ptr + k * N + offs)
        if kind == "cas":  # no mask: the masked-off lanes contend on the hot elements instead
            old = gl.atomic_cas(buf_ptr + k * M + gl.where(live, idx, DISTINCT + (offs & 3)),
                                gl.load(cmp_ptr + offs), v)
        else:
            fn = {"add": gl.atomic_add, "max": gl.atomic_max, "min": gl.atomic_min,
                  "xchg": gl.atomic_xchg, "and": gl.atomic_and, "or": gl.atomic_or,
                  "xor": gl.atomic_xor}[kind]
            old = fn(p, v, mask=live)
        gl.store(old_ptr + k * N + offs, old)


# -- reference semantics of one step, on memory bit patterns -----------------------------------

def bits(a):
    """Memory bit patterns as unsigned ints."""
    a = np.asarray(a)
    return a.view(np.uint8 if a.itemsize == 1 else np.uint16)


def _decode(name, b):
    """The interpreter's value of memory bits b."""
    if name == "bfloat16":
        return dt.bf16_bits_to_f32(np.uint16(b))
    if name == "int1":
        return np.bool_(b != 0)
    return np.array(b, np.uint8 if DTYPES[name][1]().itemsize == 1 else np.uint16).view(
        DTYPES[name][1])[()]


def _encode(name, v) -> int:
    if name == "bfloat16":
        return int(dt.f32_to_bf16_bits(np.float32(v)))
    if name == "int1":
        return int(bool(v))
    return int(bits(np.array(v, DTYPES[name][1])))


def step(name, kind, old, v, cmp=None):
    """Bits after applying ``kind`` with operand bits v to bits old (interpreter rules)."""
    a, b = _decode(name, old), _decode(name, v)
    if kind == "cas":  # int1 compares truth values, the others bit patterns
        hit = (a == _decode(name, cmp)) if name == "int1" else old == cmp
        return _encode(name, b if hit else a)
    with np.errstate(all="ignore"):
        if name == "bfloat16":
            r = {"add": a + b, "max": np.fmax(a, b), "min": np.fmin(a, b), "xchg": b}[kind]
        elif name == "int1":
            r = {"add": a | b, "max": a | b, "min": a & b, "xchg": b, "and": a & b,
                 "or": a | b, "xor": a ^ b}[kind]
        else:
            r = {"add": lambda: a + b, "max": lambda: np.fmax(a, b), "min": lambda: np.fmin(a, b),
                 "xchg": lambda: b, "and": lambda: a & b, "or": lambda: a | b,
                 "xor": lambda: a ^ b}[kind]()
    return _encode(name, r)


def assert_chains(name, kind, init, final, lanes, where):
    """lanes: [(element, old, operand, cmp)] as memory bits. Every element's steps
    old -> step(old) must form one trail from its initial to its final value."""
    by_elem = defaultdict(list)
    for e, old, v, c in lanes:
        by_elem[e].append((int(old), step(name, kind, old, v, c)))
    for e, edges in by_elem.items():
        start, end = int(init[e]), int(final[e])
        out, inn, adj = Counter(), Counter(), defaultdict(list)
        for a, b in edges:
            out[a] += 1
            inn[b] += 1
            adj[a].append(b)
        for node in set(out) | set(inn) | {start, end}:
            want = (node == start) - (node == end)
            assert out[node] - inn[node] == want, (
                f"{where}, element {e}: the returned old values do not chain from "
                f"{start:#x} to {end:#x}: {edges}")
        seen, todo = {start}, [start]
        while todo:
            for b in adj[todo.pop()]:
                if b not in seen:
                    seen.add(b)
                    todo.append(b)
        assert all(a in seen for a, _ in edges), f"{where}, element {e}: a step never reached"


# -- inputs -------------------------------------------------------------------------------------

def _values(name, r, n):
    if name in ("float16", "bfloat16"):
        x = (r.standard_normal(n) * 8).astype(np.float32)
        return x.astype(np.float16) if name == "float16" else dt.f32_to_bf16_bits(x)
    if name == "int1":
        return (r.random(n) < 0.5).astype(np.int8)
    info = np.iinfo(DTYPES[name][1])
    return r.integers(info.min, info.max, n, endpoint=True).astype(DTYPES[name][1])


def _specials(name, r, a, where):
    """NaN and infinities at some of the positions ``where`` (float types), a nonzero
    byte other than 1 (int1: still true)."""
    pick = where & (r.random(a.size) < 0.25)
    if name == "int1":
        a[pick] = 2
    elif name in ("float16", "bfloat16"):
        sp = r.choice(np.array([np.nan, np.inf, -np.inf], np.float32), a.size)
        a[pick] = (sp.astype(np.float16) if name == "float16" else dt.f32_to_bf16_bits(sp))[pick]


def make_inputs(name, kinds, n, seed):
    """Buffers (one region of M elements per kind), lane indices (the first DISTINCT
    lanes a permutation of the distinct elements, the rest on the HOT ones, shuffled),
    operands, cas expectations and the lane mask. Special values (NaN, inf) only where
    one lane meets one element, so contended results stay comparable bit by bit, and
    never for cas (the interpreter compares float values, the hardware bit patterns)."""
    r = np.random.default_rng(seed)
    npt = DTYPES[name][1]
    nk = len(kinds)
    buf = _values(name, r, nk * M)
    _specials(name, r, buf, np.concatenate([(np.arange(M) < DISTINCT) & (kind != "cas")
                                            for kind in kinds]))
    idx = np.empty(n, np.int32)
    idx[:DISTINCT] = r.permutation(DISTINCT)  # neighbouring elements by different lanes
    idx[DISTINCT:] = DISTINCT + r.integers(0, HOT, n - DISTINCT)
    idx = idx[r.permutation(n)]  # spread both kinds of lanes over the registers and waves
    live = (r.random(n) < 0.8).astype(np.int8)
    vals = _values(name, r, nk * n)
    if name != "int1":  # an int1 operand is 0/1 once loaded
        _specials(name, r, vals, np.concatenate([(idx < DISTINCT) & (kind != "cas")
                                                 for kind in kinds]))
    cmp = _values(name, r, n)
    if "cas" in kinds:  # half the lanes expect what the element holds
        k = kinds.index("cas")
        cas_idx = np.where(live != 0, idx, DISTINCT + (np.arange(n) & 3))
        cmp = np.where(r.random(n) < 0.5, buf[k * M + cas_idx], cmp).astype(npt)
    idx_masked = np.where(live != 0, idx, OUT_OF_RANGE).astype(np.int32)
    return [np.zeros(nk * n, npt), buf, idx_masked, vals, cmp, live]


def _as_values(name, a):
    if name == "bfloat16":
        return dt.bf16_bits_to_f32(a)
    if name == "int1":
        return a != 0
    return a


ORDER_FREE = {"add", "max", "min", "and", "or", "xor"}  # the final value does not depend on order


@pytest.mark.parametrize("name", list(DTYPES))
@pytest.mark.parametrize("target", TARGETS)
def test_rmw_and_cas_with_contention_and_masks(name, target):
    kinds = (INT_KINDS if DTYPES[name][0].is_int else FLOAT_KINDS).split(",")
    spt = 2 if name in ("int8", "float16", "int1") else 1
    n = spt * 2 * (64 if target != "gfx1100" else 32)
    seed = int(np.random.SeedSequence().entropy) & 0xFFFFFFFF  # fresh inputs every run
    P, T = gl.pointer, DTYPES[name][0]
    specs = [P(T), P(T), P(gl.int32), P(T), P(T), P(gl.int8)]
    cx = dict(N=n, KINDS=",".join(kinds), SPT=spt, num_warps=2)
    ref = make_inputs(name, kinds, n, seed)
    INTERP.run(rmw_kernel.trace(*specs, **cx, target="interpreter").graph, (1, 1, 1), ref)
    got = make_inputs(name, kinds, n, seed)
    tk = rmw_kernel.trace(*specs, **cx, target=target)
    amdsim.simulate(tk, target, (1,), got)
    old, buf, idx, vals, cmp, live = got
    init = make_inputs(name, kinds, n, seed)[1]
    cas_idx = np.where(live != 0, idx, DISTINCT + (np.arange(n) & 3))
    for k, kind in enumerate(kinds):
        o_got, o_ref = old[k * n:(k + 1) * n], ref[0][k * n:(k + 1) * n]
        b_got, b_ref = buf[k * M:(k + 1) * M], ref[1][k * M:(k + 1) * M]
        where = f"{name} atomic_{kind} on {target}, seed {seed}"
        active = np.ones(n, bool) if kind == "cas" else live != 0
        e = cas_idx if kind == "cas" else idx
        alone = active & (e < DISTINCT)
        # elements hit once: old values and results exactly as the interpreter's
        np.testing.assert_array_equal(_as_values(name, o_got[alone]), _as_values(name, o_ref[alone]),
                                      err_msg=f"old values, {where}")
        np.testing.assert_array_equal(_as_values(name, b_got[:DISTINCT]),
                                      _as_values(name, b_ref[:DISTINCT]), err_msg=f"memory, {where}")
        np.testing.assert_array_equal(o_got[~active], 0, err_msg=f"masked-off lanes read 0, {where}")
        if kind in ORDER_FREE and name not in ("float16", "bfloat16") or kind in ("max", "min"):
            np.testing.assert_array_equal(_as_values(name, b_got), _as_values(name, b_ref),
                                          err_msg=f"contended memory, {where}")
        ob, vb, cb = bits(o_got), bits(vals[k * n:(k + 1) * n]), bits(cmp)
        lanes = [(int(e[i]), ob[i], vb[i], cb[i]) for i in range(n) if active[i]]
        init_k, final_k = bits(init[k * M:(k + 1) * M]), bits(b_got)
        if name == "int1":  # old values come back as 0/1: chain on truth values
            init_k, final_k = (init_k != 0).astype(np.uint8), (final_k != 0).astype(np.uint8)
        assert_chains(name, kind, init_k, final_k, lanes, where)


@gt.jit
def mixed_kernel(o8_ptr, oh_ptr, of_ptr, c8_ptr, h_ptr, t8_ptr, t16_ptr, f_ptr, d_ptr, x_ptr, j,
                 BLOCK: gl.constexpr):
    tpw = gl.threads_per_warp()
    wide = gl.BlockedLayout([4], [tpw], [2], [0])
    thin = gl.BlockedLayout([1], [tpw], [2], [0])
    pid = gl.program_id(0)
    offs = gl.arange(0, BLOCK, layout=wide)
    small = gl.arange(0, 16, layout=thin)  # 16 elements over 2 * tpw threads: copies
    a = gl.atomic_add(c8_ptr, 1)  # scalars: thread 0 works, the rest get its old value
    b = gl.atomic_xchg(c8_ptr + 1 + j, (pid * 3 - 100).to(gl.int8))  # the byte known at run time
    c = gl.atomic_max(h_ptr + 1, pid.to(gl.float16) * 0.5 - 0.25)
    e = gl.atomic_or(c8_ptr + 6, 0x50)  # one dword atomic, its operand known at compile time
    t = gl.atomic_add(t8_ptr + offs, (offs * 7 + pid).to(gl.int8))  # 4 bytes of one word a thread
    s = gl.atomic_min(t16_ptr + small, (small * (pid + 1)).to(gl.float16) * 0.75 - 3.0)
    z = gl.atomic_min(t8_ptr + offs, 0, mask=offs < j - 100)  # no lane: the loop is skipped
    x = gl.load(x_ptr + offs)
    f = gl.atomic_max(f_ptr + offs, x)  # no mask: a loop on CDNA, EXEC must come back whole
    d = gl.atomic_add(d_ptr + offs, x.to(gl.float64))  # a loop on RDNA3
    gl.store(o8_ptr + pid * BLOCK + offs, t + a + b - e + z)
    gl.store(oh_ptr + pid * 16 + small, s + c)
    gl.store(of_ptr + pid * BLOCK + offs, f + d.to(gl.float32))


@pytest.mark.parametrize("target", TARGETS)
def test_scalar_replicated_aligned_and_unmasked_loops(target):
    """Scalar atomics (one thread, old value broadcast through LDS), a tile smaller than
    its layout (owner lanes), contiguous bytes at an aligned base (shifts known at compile
    time), a byte chosen at run time on a uniform pointer, and unmasked CAS loops for
    32/64-bit floats, over three programs in a row (as the interpreter runs them)."""
    wave = 64 if target != "gfx1100" else 32
    block, grid = 8 * wave, 3
    seed = int(np.random.SeedSequence().entropy) & 0xFFFFFFFF

    def args():
        r = np.random.default_rng(seed)
        return [np.zeros(grid * block, np.int8), np.zeros(grid * 16, np.float16),
                np.zeros(grid * block, np.float32),
                r.integers(-128, 128, 8).astype(np.int8), (r.standard_normal(8) * 2).astype(np.float16),
                r.integers(-128, 128, block).astype(np.int8),
                (r.standard_normal(16) * 4).astype(np.float16),
                r.standard_normal(block).astype(np.float32), r.standard_normal(block),
                r.standard_normal(block).astype(np.float32), int(r.integers(0, 7))]
    P = gl.pointer
    specs = [P(gl.int8), P(gl.float16), P(gl.float32), P(gl.int8), P(gl.float16), P(gl.int8),
             P(gl.float16), P(gl.float32), P(gl.float64), P(gl.float32), gl.int32]
    ref = args()
    INTERP.run(mixed_kernel.trace(*specs, BLOCK=block, num_warps=2, target="interpreter").graph,
               (grid, 1, 1), ref)
    got = args()
    tk = mixed_kernel.trace(*specs, BLOCK=block, num_warps=2, target=target)
    amdsim.simulate(tk, target, (grid,), got)
    for k in range(9):
        np.testing.assert_array_equal(got[k], ref[k], err_msg=f"argument {k} on {target}, seed {seed}")


@gt.jit
def loop_kernel(buf16_ptr, hot_ptr, acc_ptr, val_ptr, n_iter, BLOCK: gl.constexpr):
    layout = gl.BlockedLayout([1], [gl.threads_per_warp()], [2], [0])
    offs = gl.arange(0, BLOCK, layout=layout)
    acc = gl.zeros([BLOCK], gl.int16, layout=layout)
    for i in gl.range(0, n_iter):
        v = gl.load(val_ptr + i * BLOCK + offs)
        live = ((offs + i) % 3) != 0
        acc = acc + gl.atomic_add(buf16_ptr + offs, v, mask=live) * (i + 1).to(gl.int16)
        gl.atomic_max(hot_ptr + (offs & 3), v.to(gl.float16), mask=offs < (BLOCK - i * 5))
        with gl.if_(i % 2 == 1):
            gl.atomic_xor(buf16_ptr + BLOCK + (offs ^ 1), v)
    gl.store(acc_ptr + offs, acc)


@pytest.mark.parametrize("target", TARGETS)
def test_atomics_in_a_loop_and_a_branch(target):
    """CAS loops nested in a runtime loop (registers stay live across both back edges)
    and in a branch; neighbouring halfwords from neighbouring lanes every iteration."""
    block = 2 * (64 if target != "gfx1100" else 32)
    seed = int(np.random.SeedSequence().entropy) & 0xFFFFFFFF
    n_iter = 5

    def args():
        r = np.random.default_rng(seed)
        return [r.integers(-2**15, 2**15, 2 * block).astype(np.int16),
                (r.standard_normal(4) * 50).astype(np.float16), np.zeros(block, np.int16),
                r.integers(-2**15, 2**15, n_iter * block).astype(np.int16), n_iter]
    P = gl.pointer
    specs = [P(gl.int16), P(gl.float16), P(gl.int16), P(gl.int16), gl.int32]
    ref = args()
    INTERP.run(loop_kernel.trace(*specs, BLOCK=block, num_warps=2, target="interpreter").graph,
               (2, 1, 1), ref)
    got = args()
    amdsim.simulate(loop_kernel.trace(*specs, BLOCK=block, num_warps=2, target=target), target,
                    (2,), got)
    for k in range(3):
        np.testing.assert_array_equal(got[k], ref[k], err_msg=f"argument {k} on {target}, seed {seed}")


def test_gfx942_atomics_are_device_scope():
    """MI300's L2 is per XCD: a returning atomic needs sc0 (return) and sc1 (agent scope)."""
    P = gl.pointer
    specs = [P(gl.int16), P(gl.float16), P(gl.int16), P(gl.int16), gl.int32]
    for target, want in (("gfx942", " sc0 sc1"), ("gfx90a", " glc"), ("gfx1100", " glc")):
        block = 2 * (64 if target != "gfx1100" else 32)
        asm = loop_kernel.trace(*specs, BLOCK=block, num_warps=2, target=target).amdgcn(target)
        atomics = [ln for ln in asm.splitlines() if "_atomic_" in ln]
        assert atomics and all(ln.rstrip().endswith(want) for ln in atomics), atomics
