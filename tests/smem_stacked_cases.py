"""Views of one slot of a stacked shared buffer taken from a stacked start (``buf.slice(s, 1, 0)
.index(0)``, ``buf.slice(s, 2, 0).index(j)``) and sliced from inside the swizzle period, picked
by a branch or carried by a loop, shared by the NVIDIA (PTX simulator) and AMD (amdsim) tests,
with numpy's expected results.

Each arm makes its own view (``MODE="arms"``), or every view is made before the branch and the
arms pick one (``"outside"``), or a branch inside an arm picks among more (``"nested"``), or a
loop carries the view and branches in its body pick the next (``"loop"``), or a branch picks the
view a loop then carries (``"branch_loop"``), or a branch after the loop picks among what it
carried and another (``"loop_branch"``). The NVIDIA backend
refused the first three and the loop ('placed differently') where the views' starts differ
inside the swizzle period: its look-ahead of such an .index() (smem_join._static, used to plan
the join before the arms are emitted) kept no buffer coordinates (coff), so it planned no
run-time start. With views made before the branch (which carried their coff), a then-arm at a
higher slot than the else-arm moved the else-arm's address below its buffer (the simulator's
out-of-range shared access where the buffer starts at 0). And an .index() after the join, of
the stacked dim whose start the join carries at run time (slices of slots 1.. and 2..), was
refused ('it indexes the dim whose start is known only at run time').

A view is a recipe: steps ("slice", start, length, dim), ("index", k) (k "j": the run-time
argument j) and ("permute", order), applied to the buffer in the kernel and to numpy's array
alike. Layouts take the target's wave size (gl.threads_per_warp()). The ``check`` function takes
the backend's ``both(kernel, make, target, ...)`` runner first, as smem_swizzled_cases does."""
from __future__ import annotations

import numpy as np

import gluon_trace as gt
from gluon_trace import language as gl

NVMMA_T = gl.NVMMASharedLayout.get_default_for([32, 2], gl.float32, transposed=True)   # rows inside 16 bytes
SWZ = gl.SwizzledSharedLayout(4, 1, 8, [1, 0])   # 16-byte chunks of f32 swizzled over 8 rows
NVMMA_128 = gl.NVMMASharedLayout(128, 32, 2)     # the 128-byte swizzle of [.., 8, 32] f32
SWZ_COL = gl.SwizzledSharedLayout(2, 2, 2, [0, 1])   # column-major, pairs of columns a phase
SWZ4 = gl.SwizzledSharedLayout(4, 1, 4, [1, 0])   # chunks of 4 swizzled over 4 rows
PAD = gl.PaddedSharedLayout.with_identity_for([[8, 4]], [8, 32], [1, 0])   # 4 elements after every 8

# (name, buffer shape, layout, recipes[, after]): every recipe's view has one shape; recipe 0 is the
# first (the else-arm, the view entering the loop); ``after``: steps applied to the joined view
CASES = [
    ("rows_of_slots", (4, 32, 2), NVMMA_T,
     [(("slice", s, 1, 0), ("index", 0), ("slice", a, 8, 0)) for s, a in ((1, 14), (2, 3), (3, 5))]),
    ("rows_of_slot_j", (4, 32, 2), NVMMA_T,
     [(("slice", 1, 2, 0), ("index", "j"), ("slice", a, 8, 0)) for a in (14, 3, 6)]),
    ("columns_of_slots", (4, 4, 32), SWZ,
     [(("slice", s, 1, 0), ("index", 0), ("slice", a, 2, 1)) for s, a in ((1, 19), (2, 17), (1, 2))]),
    ("columns_then_slot", (4, 4, 32), SWZ,   # (the slot's table not XOR-linear: the index moves the base)
     [(("slice", s, 2, 0), ("slice", a, 2, 2), ("index", 1)) for s, a in ((1, 17), (2, 19), (1, 3))]),
    ("columns_128", (4, 8, 32), NVMMA_128,
     [(("slice", s, 1, 0), ("index", 0), ("slice", a, 4, 1)) for s, a in ((1, 3), (2, 5), (3, 2))]),
    ("rows_permuted", (4, 32, 2), NVMMA_T,
     [(("slice", s, 1, 0), ("index", 0), ("slice", a, 8, 0), ("permute", (1, 0))) for s, a in ((1, 14), (2, 3))]),
    # lowered before: rows a whole swizzle period apart (one table), and one view in every arm
    ("whole_periods", (4, 32, 2), NVMMA_T,
     [(("slice", s, 1, 0), ("index", 0), ("slice", a, 8, 0)) for s, a in ((1, 0), (2, 8), (1, 16))]),
    ("same_view", (4, 32, 2), NVMMA_T, [(("slice", 1, 1, 0), ("index", 0), ("slice", 14, 8, 0))] * 2),
    # .index() after the join, of the stacked dim whose start the join moves at run time
    ("slots_indexed_after", (4, 4, 32), SWZ,
     [(("slice", s, 2, 0), ("slice", a, 2, 2)) for s, a in ((1, 17), (2, 19), (1, 3))], (("index", "j"),)),
    ("rows_of_slots_indexed_after", (4, 32, 2), NVMMA_T,
     [(("slice", s, 2, 0), ("slice", a, 8, 1)) for s, a in ((1, 14), (2, 3))], (("index", 1),)),
    ("col_major_slots", (4, 4, 32), SWZ_COL,
     [(("slice", s, 1, 0), ("index", 0), ("slice", r, 2, 0), ("slice", a, 16, 1)) for s, r, a in
      ((1, 1, 4), (2, 1, 7), (3, 2, 5))]),
    ("col_major_indexed_after", (4, 4, 32), SWZ_COL,
     [(("slice", s, 2, 0), ("slice", r, 2, 1), ("slice", a, 16, 2)) for s, r, a in ((1, 1, 4), (2, 1, 7), (1, 2, 5))],
     (("index", "j"),)),
    # the first view picked again before another (found by the stacked fuzz preset, seed 300589): the
    # first branch's join is plain (one table, the whole address in its register), but its coff kept
    # the root of a view addressed from the buffer, so the next join, at a run-time start, refused it
    ("slot_view_twice_then_another", (4, 4, 32), SWZ,
     [(("slice", s, 1, 0), ("index", 0), ("slice", a, 2, 1)) for s, a in ((1, 17), (1, 17), (2, 19))]),
    ("rows_twice_then_another", (4, 32, 2), NVMMA_T,
     [(("slice", s, 1, 0), ("index", 0), ("slice", a, 8, 0)) for s, a in ((1, 8), (1, 8), (2, 3))]),
    # a first branch whose views are one table up to an XOR (columns 1.. and 5.., a 16-byte chunk
    # apart: carried with a run-time XOR), then one picking columns 3.. (across two chunks: a run-time
    # start, which that XOR does not give): refused ('placed differently') on both backends (the
    # stacked fuzz preset, seeds 300526, 300562, 504538, 506361 and more); the first join now carries
    # its start too. xor_start_xor: an XOR again after the start; *_128: rows of 128 bytes
    ("xor_then_start", (4, 4, 32), SWZ,
     [(("slice", s, 1, 0), ("index", 0), ("slice", a, 2, 1)) for s, a in ((1, 1), (1, 5), (2, 3))]),
    ("xor_then_start_128", (4, 8, 32), NVMMA_128,
     [(("slice", s, 1, 0), ("index", 0), ("slice", a, 2, 1)) for s, a in ((1, 1), (1, 5), (0, 3))]),
    ("xor_start_xor", (4, 4, 32), SWZ,
     [(("slice", s, 1, 0), ("index", 0), ("slice", a, 2, 1)) for s, a in ((1, 1), (1, 5), (2, 3), (2, 9))]),
    # the same where the first join is one table (slot 0 columns 2.. and slot 1 columns 10.., two
    # chunks apart in rows swizzled by their parity: AMD's XOR form with no XOR bit): refused on AMD
    # (seed 503688)
    ("one_table_then_start", (2, 4, 16), SWZ4,
     [(("slice", s, 1, 0), ("index", 0), ("slice", 0, 2, 0), ("slice", a, 4, 1)) for s, a in ((0, 2), (1, 10), (1, 0))]),
    # padded (a run-time start of its own kind, smem_padded.py): lowered before
    ("padded_slots", (4, 8, 32), PAD,
     [(("slice", s, 1, 0), ("index", 0), ("slice", a, 4, 1)) for s, a in ((1, 3), (2, 1), (1, 6))]),
    ("padded_indexed_after", (4, 8, 32), PAD,
     [(("slice", s, 2, 0), ("slice", a, 8, 2)) for s, a in ((1, 3), (2, 1))], (("index", "j"),)),
]
CASE_IDS = [c[0] for c in CASES]
MODES = ["arms", "outside", "nested", "loop", "branch_loop", "loop_branch"]


def view(v, recipe, j):
    """The view ``recipe`` of ``v`` (a buffer, or a numpy array: the same steps)."""
    for step in recipe:
        if step[0] == "slice":
            if isinstance(v, np.ndarray):
                v = v[(slice(None),) * step[3] + (slice(step[1], step[1] + step[2]),)]
            else:
                v = v.slice(step[1], step[2], step[3])
        elif step[0] == "index":
            v = v[j if step[1] == "j" else step[1]] if isinstance(v, np.ndarray) else v.index(j if step[1] == "j" else
                                                                                              step[1])
        else:
            v = v.transpose(step[1]) if isinstance(v, np.ndarray) else v.permute(list(step[1]))
    return v


def _offsets(shape, L):
    """Row-major offsets of a 2- or 3-dim tile of ``shape`` in layout L."""
    if len(shape) == 2:
        return gl.arange(0, shape[0], gl.SliceLayout(1, L))[:, None] * shape[1] + \
            gl.arange(0, shape[1], gl.SliceLayout(0, L))[None, :]
    return gl.arange(0, shape[0], gl.SliceLayout(1, gl.SliceLayout(2, L)))[:, None, None] * (shape[1] * shape[2]) + \
        gl.arange(0, shape[1], gl.SliceLayout(0, gl.SliceLayout(2, L)))[None, :, None] * shape[2] + \
        gl.arange(0, shape[2], gl.SliceLayout(0, gl.SliceLayout(1, L)))[None, None, :]


def _use(c, at, x):
    """Read the view ``c`` (the steps AFTER applied) into out[at] and write y[at] through it; ``x``:
    (AFTER, j, out_ptr, y_ptr, SIZE, ro, L)."""
    after, j, out_ptr, y_ptr, size, ro, lay = x
    u = view(c, after, j)
    gl.store(out_ptr + at * size + ro, u.load(lay))
    u.store(gl.load(y_ptr + at * size + ro))


@gt.jit
def slot_views_joined(x_ptr, y_ptr, out_ptr, sel, j, n, SHAPE: gl.constexpr, LAY: gl.constexpr,
                      RECIPES: gl.constexpr, AFTER: gl.constexpr, VSHAPE: gl.constexpr, MODE: gl.constexpr):
    """An f32 buffer of SHAPE in LAY holding x. MODE "loop": a loop carries view RECIPES[0], each
    step i reading it into out[i], writing y[i] through it and picking RECIPES[(i + 1) % len] by
    branches; "branch_loop" and "loop_branch": a branch before or after such a loop (comments
    below); else the view picked is RECIPES[sel] (made in the arms, before the branch, or by a
    branch nested in an arm), read into out[0] and y[0] written through it. Then the buffer into
    out[n] (out[1] without the loop). The steps AFTER view the joined view before each use."""
    W: gl.constexpr = gl.threads_per_warp()
    F: gl.constexpr = gl.BlockedLayout([1, 1, SHAPE[2]], [1, W, 1], [1, 1, 1], [2, 1, 0])
    C: gl.constexpr = min(VSHAPE[1], W)
    L: gl.constexpr = gl.BlockedLayout([1, 1], [W // C, C], [1, 1], [1, 0])
    SIZE: gl.constexpr = VSHAPE[0] * VSHAPE[1]
    rf = _offsets(SHAPE, F)
    ro = _offsets(VSHAPE, L)
    buf = gl.allocate_shared_memory(gl.float32, list(SHAPE), LAY, gl.load(x_ptr + rf))
    use = (AFTER, j, out_ptr, y_ptr, SIZE, ro, L)
    if MODE == "branch_loop":
        # a branch picks RECIPES[0] or [1]; a loop carries what it picked, its body picking
        # RECIPES[2] (RECIPES[0] where there are two) on odd steps and [0] on even ones
        c = view(buf, RECIPES[0], j)
        with gl.if_(sel == 1):
            c = view(buf, RECIPES[1], j)
        for i in gl.range(0, n):
            _use(c, i, use)
            w = view(buf, RECIPES[0], j)
            with gl.if_(i % 2 == 0):
                w = view(buf, RECIPES[2 % len(RECIPES)], j)
            c = w
        gl.store(out_ptr + n * SIZE + rf, buf.load(F))
    elif MODE == "loop_branch":
        # a loop carries RECIPES[0], its body picking [1] on even steps and [0] on odd ones; after
        # the loop a branch keeps what it carried or (sel == 1) picks RECIPES[2] (or [0])
        c = view(buf, RECIPES[0], j)
        for i in gl.range(0, n):
            _use(c, i, use)
            w = view(buf, RECIPES[0], j)
            with gl.if_(i % 2 == 0):
                w = view(buf, RECIPES[1], j)
            c = w
        with gl.if_(sel == 1):
            c = view(buf, RECIPES[2 % len(RECIPES)], j)
        _use(c, n, use)
        gl.store(out_ptr + (n + 1) * SIZE + rf, buf.load(F))
    elif MODE == "loop":
        c = view(buf, RECIPES[0], j)
        for i in gl.range(0, n):
            _use(c, i, use)
            w = view(buf, RECIPES[0], j)
            for k in range(1, len(RECIPES)):
                with gl.if_((i + 1) % len(RECIPES) == k):
                    w = view(buf, RECIPES[k], j)
            c = w
        gl.store(out_ptr + n * SIZE + rf, buf.load(F))
    else:
        made = [view(buf, r, j) for r in RECIPES] if MODE == "outside" else None
        w = made[0] if made else view(buf, RECIPES[0], j)
        if MODE == "nested":
            with gl.if_(sel >= 1):
                w = view(buf, RECIPES[1], j)
                for k in range(2, len(RECIPES)):
                    with gl.if_(sel == k):
                        w = view(buf, RECIPES[k], j)
        else:
            for k in range(1, len(RECIPES)):
                with gl.if_(sel == k):
                    w = made[k] if made else view(buf, RECIPES[k], j)
        _use(w, 0, use)
        gl.store(out_ptr + SIZE + rf, buf.load(F))



@gt.jit
def xor_then_start_with_stores(x_ptr, out_ptr, flag_ptr, sel, j):
    """xor_then_start's branches, made in the arms (slot 1 columns 1.. or 5..: a run-time XOR;
    then slot 2 columns 3..: a start), the first branch's arm also storing sel and 3 * sel into
    flag[0:2]: schedule.hoist_stores moves the first store above 3 * sel, so the backends emit
    copies of that arm and branch, which the look-ahead from the XOR join once searched for in the
    original block (a ValueError on both backends). out = the picked view."""
    W: gl.constexpr = gl.threads_per_warp()
    F: gl.constexpr = gl.BlockedLayout([1, 1, 32], [1, W, 1], [1, 1, 1], [2, 1, 0])
    L: gl.constexpr = gl.BlockedLayout([1, 1], [W // 2, 2], [1, 1], [1, 0])
    buf = gl.allocate_shared_memory(gl.float32, [4, 4, 32], SWZ, gl.load(x_ptr + _offsets((4, 4, 32), F)))
    w = view(buf, XOR_STORES[0], j)
    with gl.if_(sel == 1):
        t = sel * 3
        gl.store(flag_ptr, sel)
        w = view(buf, XOR_STORES[1], j)
        gl.store(flag_ptr + 1, t)
    with gl.if_(sel == 2):
        w = view(buf, XOR_STORES[2], j)
    gl.store(out_ptr + _offsets((4, 2), L), w.load(L))


XOR_STORES = [(("slice", 1, 1, 0), ("index", 0), ("slice", a, 2, 1)) for a in (1, 5)] + \
    [(("slice", 2, 1, 0), ("index", 0), ("slice", 3, 2, 1))]


def check_xor_then_start_with_stores(both, target):
    """xor_then_start_with_stores for every pick, against numpy."""
    rng = np.random.default_rng()
    for sel in range(3):
        x = rng.standard_normal(512).astype(np.float32)
        exp = view(x.reshape(4, 4, 32), XOR_STORES[sel], 1).reshape(-1)
        ref, sim, _ = both(xor_then_start_with_stores, lambda: [x.copy(), np.full(8, np.nan, np.float32),
                                                                 np.zeros(2, np.int32), sel, 1], target, num_warps=1)
        for got in (ref, sim):
            assert np.array_equal(got[1], exp), sel
            assert list(got[2]) == ([1, 3] if sel == 1 else [0, 0]), sel

def expected(x, y, shape, recipes, after, picks, j):
    """out after reading and writing the views ``picks`` (recipe indices, then ``after``) in turn,
    then the buffer."""
    buf = x.reshape(shape).copy()
    got = []
    for i, k in enumerate(picks):
        v = view(buf, tuple(recipes[k]) + tuple(after), j)
        got.append(v.reshape(-1).copy())
        v[...] = y[v.size * i:v.size * (i + 1)].reshape(v.shape)
    return np.concatenate(got + [buf.reshape(-1)])


def check(both, target, case: int, mode: str, j: int = 1, n: int = 5) -> str:
    """CASES[case] in ``mode`` on fresh inputs against numpy (every pick of the branch, or n
    loop steps), NaN-poisoned outputs; the last kernel's text."""
    _, shape, lay, recipes, *after = CASES[case]
    after = after[0] if after else ()
    vshape = view(np.zeros(shape), tuple(recipes[0]) + tuple(after), j).shape
    rng = np.random.default_rng()
    text = ""
    sels = {"loop": [0], "branch_loop": [0, 1], "loop_branch": [0, 1]}.get(mode, range(len(recipes)))
    for sel in sels:
        if mode == "loop":
            picks = [i % len(recipes) for i in range(n)]
        elif mode == "branch_loop":
            picks = [sel] + [2 % len(recipes) if i % 2 == 0 else 0 for i in range(n - 1)]
        elif mode == "loop_branch":
            loop = [0] + [1 if i % 2 == 0 else 0 for i in range(n - 1)]
            picks = loop + [2 % len(recipes) if sel == 1 else (1 if (n - 1) % 2 == 0 else 0)]
        else:
            picks = [sel]
        x = rng.standard_normal(int(np.prod(shape))).astype(np.float32)
        y = rng.standard_normal((len(picks) + 1) * int(np.prod(vshape))).astype(np.float32)
        exp = expected(x, y, shape, recipes, after, picks, j)
        ref, sim, text = both(slot_views_joined, lambda: [x.copy(), y.copy(), np.full(exp.size, np.nan, np.float32),
                                                          sel, j, n],
                              target, num_warps=1, SHAPE=shape, LAY=lay, RECIPES=[tuple(r) for r in recipes],
                              AFTER=tuple(after), VSHAPE=tuple(vshape), MODE=mode)
        assert np.array_equal(ref[2], exp), (CASES[case][0], mode, sel)
        assert np.array_equal(sim[2], exp), (CASES[case][0], mode, sel)
    return text
