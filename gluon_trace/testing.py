"""Property testing for kernels: hypothesis strategies and :func:`assert_kernel_matches`.

Strategies (need ``hypothesis``, imported when first used so the library does not
depend on it): :func:`dtypes`, :func:`shapes` (power-of-two tiles), :func:`blocked_layouts`,
:func:`slice_layouts`, :func:`linear_layouts` and :func:`layouts` (valid for a shape, a
``num_warps`` and a target's warp size), and :func:`arrays` (with edge values: zeros,
negatives, extremes, inf and nan where the dtype has them).

:func:`assert_kernel_matches` runs one kernel on every backend that can run here (the
interpreter on numpy arrays; nvidia / amd on torch GPU tensors when torch and a GPU are
present), poisons the outputs first (NaN, or bytes 0x5A for integers) so an element the
kernel forgot to write cannot pass by luck, and compares with a numpy reference at
tolerances fitting the dtype. A backend that cannot run here is skipped and the reason is
kept in the returned :class:`MatchReport`.
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass, field

import numpy as np

from . import backend as backends
from . import dtypes as dt
from .errors import ArgumentError, user_location
from .testing_mma import (MMAInstr, Tolerance, WgmmaPieces, k_widths, mma_instrs, mma_tolerance, pipeline_depths,  # noqa: F401,E501
                          shared_layouts, smem_limit, wgmma_pieces)

__all__ = ["dtypes", "shapes", "blocked_layouts", "slice_layouts", "linear_layouts", "layouts",
           "arrays", "edge_values", "warp_size", "assert_kernel_matches", "MatchReport",
           "backend_status", "gpu_status", "compile_status", "TOLERANCES", "POISON_BYTE",
           # MMA kernels (gluon_trace/testing_mma.py)
           "MMAInstr", "mma_instrs", "WgmmaPieces", "wgmma_pieces", "k_widths", "shared_layouts", "pipeline_depths", "smem_limit",
           "Tolerance", "mma_tolerance"]

POISON_BYTE = 0x5A
# (rtol, atol) per float dtype: |got - expected| <= atol + rtol * |expected|, as torch.testing
TOLERANCES = {"float16": (1e-3, 1e-5), "bfloat16": (1.6e-2, 1e-5), "float32": (1.3e-6, 1e-5),
              "float64": (1e-7, 1e-7)}


# ------------------------------------------------------------------ what can run here
def _backend_error(name: str) -> str | None:
    try:
        backends.get(name)
        return None
    except Exception as e:  # a half-written backend may fail in any way while importing
        return f"the {name} backend is not available ({type(e).__name__}: {e})"


def gpu_status(vendor: str = "nvidia") -> tuple[bool, str]:
    """(True, device name) when torch sees a GPU of ``vendor``, else (False, why not)."""
    try:
        import torch
    except ImportError:
        return False, "torch is not installed (GPU runs use torch tensors)"
    try:
        if not torch.cuda.is_available():
            return False, "no GPU: torch.cuda.is_available() is False"
        hip = getattr(torch.version, "hip", None)
        if vendor == "nvidia" and hip:
            return False, "this torch is a ROCm build: the GPU is an AMD one"
        if vendor == "amd" and not hip:
            return False, "this torch is a CUDA build: the GPU is an NVIDIA one"
        return True, torch.cuda.get_device_name()
    except Exception as e:
        return False, f"torch could not reach a GPU ({type(e).__name__}: {e})"


def backend_status(name: str) -> tuple[bool, str]:
    """(True, "") if ``name`` can run kernels here, else (False, the reason)."""
    if name == "interpreter":
        err = _backend_error(name)
        return (err is None), err or ""
    if name not in ("nvidia", "amd"):
        return False, f"unknown backend {name!r}"
    err = _backend_error(name)
    if err:
        return False, err
    ok, why = gpu_status(name)
    return ok, ("" if ok else why)


def compile_status(target: str) -> tuple[bool, str]:
    """(True, "") if kernels can be emitted and assembled for ``target`` here."""
    name = "nvidia" if target.startswith("sm_") else "amd" if target.startswith("gfx") else "interpreter"
    err = _backend_error(name)
    return (err is None), err or ""


def warp_size(target: str = "interpreter") -> int:
    """Threads per warp (wave) on ``target``: from its backend when that loads, else the
    hardware's: 32 on NVIDIA and the interpreter, 64 on gfx9 (CDNA), 32 on gfx10+."""
    try:
        return int(backends.for_target(target).threads_per_warp(target))
    except Exception:
        if target.startswith("gfx"):
            return 64 if target.startswith("gfx9") else 32
        return 32


# ------------------------------------------------------------------------- strategies
def _st():
    try:
        from hypothesis import strategies as st
    except ImportError:  # pragma: no cover - hypothesis is a [dev] dependency
        raise ImportError("gluon_trace.testing strategies need hypothesis: pip install hypothesis") from None
    return st


def _gl_dtype(d) -> dt.dtype:
    return d if isinstance(d, dt.dtype) else dt.from_numpy(d)


def dtypes(kinds=("float", "int", "uint"), bits=None, bfloat16: bool = False, fp8: bool = False):
    """gl dtypes of the given kinds ("float", "int", "uint", "bool") and bit widths.
    ``bfloat16`` is left out unless asked for: numpy has no bfloat16 arrays; the fp8 types
    (storage and MMA operands, no arithmetic) likewise."""
    st = _st()
    out = [t for t in dt.ALL if t.kind in kinds and (bits is None or t.bits in bits)
           and (bfloat16 or t.name != "bfloat16") and (fp8 or not t.is_fp8)]
    if not out:
        raise ValueError(f"no dtype of kinds {kinds} and bits {bits}")
    return st.sampled_from(out)


def shapes(rank=1, min_side: int = 1, max_side: int = 128, max_numel: int = 4096):
    """Power-of-two tile shapes; ``rank`` is an int or a (min, max) range."""
    st = _st()
    lo_r, hi_r = (rank, rank) if isinstance(rank, int) else rank
    lo, hi = max(0, math.ceil(math.log2(min_side))), int(math.log2(max_side))

    @st.composite
    def draw_shape(draw):
        r = draw(st.integers(lo_r, hi_r))
        budget = int(math.log2(max_numel))
        out = []
        for i in range(r):
            left = r - i - 1
            top = min(hi, budget - lo * left)
            if top < lo:
                raise ValueError(f"max_numel={max_numel} is too small for rank {r} with min_side={min_side}")
            k = draw(st.integers(lo, top))
            budget -= k
            out.append(1 << k)
        return tuple(out)

    return draw_shape()


def _split_bits(draw, st, total: int, rank: int) -> list[int]:
    """Spread ``total`` bits (log2 of a thread/warp count) over ``rank`` dims."""
    logs = [0] * rank
    for _ in range(total):
        logs[draw(st.integers(0, rank - 1))] += 1
    return [1 << k for k in logs]


def blocked_layouts(shape, num_warps: int = 4, target: str = "interpreter", max_per_thread: int = 16):
    """BlockedLayouts for ``shape`` on ``target``: threads_per_warp multiply to the
    target's warp size, warps_per_cta to ``num_warps``; each thread's block is at most
    the shape (and ``max_per_thread`` elements); order is any permutation."""
    st = _st()
    from .layouts import BlockedLayout
    shape = tuple(shape)
    rank = len(shape)
    tpw_bits = int(math.log2(warp_size(target)))
    w_bits = int(math.log2(num_warps))

    @st.composite
    def draw_layout(draw):
        spt, room = [], int(math.log2(max_per_thread))
        for s in shape:
            k = draw(st.integers(0, max(0, min(int(math.log2(s)), room))))
            room -= k
            spt.append(1 << k)
        tpw = _split_bits(draw, st, tpw_bits, rank)
        wpc = _split_bits(draw, st, w_bits, rank)
        order = draw(st.permutations(list(range(rank))))
        return BlockedLayout(spt, tpw, wpc, list(order))

    return draw_layout()


def slice_layouts(shape, num_warps: int = 4, target: str = "interpreter"):
    """SliceLayouts for ``shape``: a random blocked parent of rank+1 with one dim sliced away."""
    st = _st()
    from .layouts import SliceLayout
    shape = tuple(shape)

    @st.composite
    def draw_layout(draw):
        dim = draw(st.integers(0, len(shape)))
        extent = 1 << draw(st.integers(0, 5))
        parent_shape = shape[:dim] + (extent,) + shape[dim:]
        parent = draw(blocked_layouts(parent_shape, num_warps, target))
        return SliceLayout(dim, parent)

    return draw_layout()


def linear_layouts(shape, num_warps: int = 4, target: str = "interpreter"):
    """DistributedLinearLayouts for ``shape``: each bit of each coordinate goes to a
    random register, lane or warp basis; lanes and warps left over hold copies (zero
    bases), so every element is owned and the counts fit the target."""
    st = _st()
    from .layouts import DistributedLinearLayout
    shape = tuple(shape)
    n_lane = int(math.log2(warp_size(target)))
    n_warp = int(math.log2(num_warps))

    @st.composite
    def draw_layout(draw):
        units = [tuple((1 << k) if e == d else 0 for e in range(len(shape)))
                 for d, s in enumerate(shape) for k in range(int(math.log2(s)))]
        zero = tuple(0 for _ in shape)
        # every slot a lane or warp base can take: a unit basis or a copy (zero)
        slots = draw(st.permutations(units + [zero] * (n_lane + n_warp)))
        lanes = list(slots[:n_lane])
        warps = list(slots[n_lane:n_lane + n_warp])
        regs = [b for b in slots[n_lane + n_warp:] if any(b)]
        return DistributedLinearLayout(regs, lanes, warps, [], shape=list(shape))

    return draw_layout()


def layouts(shape, num_warps: int = 4, target: str = "interpreter", kinds=("blocked", "slice", "linear")):
    """Any distributed layout valid for ``shape`` with ``num_warps`` on ``target``."""
    st = _st()
    make = {"blocked": blocked_layouts, "slice": slice_layouts, "linear": linear_layouts}
    return st.one_of(*[make[k](shape, num_warps, target) for k in kinds])


def edge_values(dtype, finite: bool = False) -> list:
    """The values kernels most often get wrong, for ``dtype``."""
    t = _gl_dtype(dtype)
    if t.is_bool:
        return [False, True]
    if t.is_int:
        info = np.iinfo(t.np)
        vals = [0, 1, 2, info.max, info.max - 1, info.min]
        if info.min < 0:
            vals += [-1, -2, info.min + 1]
        return sorted(set(vals))
    if t.name == "bfloat16":
        big, tiny = 3.3895313892515355e38, 1.1754943508222875e-38
    else:
        info = np.finfo(t.np)
        big, tiny = float(info.max), float(info.tiny)
    vals = [0.0, -0.0, 1.0, -1.0, 0.5, -2.0, big, -big, tiny, -tiny]
    if not finite:
        vals += [math.inf, -math.inf, math.nan]
    return vals


def arrays(dtype, shape, *, edges: bool = True, finite: bool = False, min_value=None,
           max_value=None, allow_subnormal: bool = True, dense: bool = False):
    """numpy arrays of ``dtype`` (gl or numpy) and ``shape`` (a tuple or a strategy).

    With ``edges`` a share of the elements comes from :func:`edge_values` (those in
    [min_value, max_value]); ``finite`` leaves out inf and nan. Hypothesis draws a few
    elements and fills the rest with one background value (which shrinks well);
    ``dense=True`` draws every element on its own."""
    st = _st()
    from hypothesis.extra import numpy as hnp
    t = _gl_dtype(dtype)
    if t.name == "bfloat16":
        raise ArgumentError("numpy has no bfloat16 arrays: draw float32 arrays and round them with "
                            "gluon_trace.dtypes.round_bf16, or pass torch bfloat16 tensors",
                            user_location())
    if t.is_bool:
        elements = st.booleans()
    elif t.is_int:
        info = np.iinfo(t.np)
        lo = info.min if min_value is None else max(int(min_value), info.min)
        hi = info.max if max_value is None else min(int(max_value), info.max)
        elements = st.integers(lo, hi)
    else:
        elements = st.floats(min_value=min_value, max_value=max_value, width=t.bits,
                             allow_nan=not finite and min_value is None and max_value is None,
                             allow_infinity=not finite and (min_value is None or max_value is None),
                             allow_subnormal=allow_subnormal)
    if edges:
        lo = -math.inf if min_value is None else min_value
        hi = math.inf if max_value is None else max_value
        ev = [v for v in edge_values(t, finite)
              if isinstance(v, bool) or math.isnan(v) or lo <= v <= hi]
        if ev:
            elements = st.one_of(st.sampled_from(ev), elements)
    return hnp.arrays(t.np, shape, elements=elements, fill=st.nothing() if dense else None)


# --------------------------------------------------------------- assert_kernel_matches
@dataclass
class MatchReport:
    """What :func:`assert_kernel_matches` checked: backends run, skipped (with why), and
    targets assembled."""
    kernel: str
    ran: list = field(default_factory=list)
    skipped: dict = field(default_factory=dict)
    assembled: list = field(default_factory=list)

    def __str__(self) -> str:
        lines = [f"{self.kernel}: matched the reference on {', '.join(self.ran) or 'no backend'}"]
        lines += [f"  assembled for {t}" for t in self.assembled]
        lines += [f"  skipped {k}: {v}" for k, v in self.skipped.items()]
        return "\n".join(lines)


def _poison_np(a: np.ndarray) -> None:
    if a.dtype.kind in "fc":
        a[...] = np.nan
    else:
        a.reshape(-1).view(np.uint8)[...] = POISON_BYTE


def _poison_value(dtype: np.dtype):
    if dtype.kind in "fc":
        return float("nan")
    return np.full(1, POISON_BYTE, np.uint8).repeat(dtype.itemsize).view(dtype)[0]


def _out_positions(kernel, args, outputs, loc) -> list[int]:
    names = [p.name for p in kernel.params if p.name not in kernel.constexprs]
    pos = []
    for o in outputs:
        if isinstance(o, str):
            if o not in names:
                raise ArgumentError(f"outputs names `{o}`, which is not a run-time argument of "
                                    f"{kernel.__name__} ({', '.join(names)})", loc)
            o = names.index(o)
        if not isinstance(o, (int, np.integer)) or not 0 <= o < len(args):
            raise ArgumentError(f"outputs entry {o!r} is not the index of one of the {len(args)} "
                                "arguments given", loc)
        if not isinstance(args[o], np.ndarray):
            raise ArgumentError(f"output argument {o} is a {type(args[o]).__name__}; outputs must be "
                                "numpy arrays", loc)
        pos.append(int(o))
    return pos


def _arg_name(kernel, i: int) -> str:
    names = [p.name for p in kernel.params if p.name not in kernel.constexprs]
    return names[i] if i < len(names) else f"#{i}"


def _expected(reference, args, outs, loc) -> list[np.ndarray]:
    ref_args = [a.copy() if isinstance(a, np.ndarray) else a for a in args]
    for i in outs:
        _poison_np(ref_args[i])
    with np.errstate(all="ignore"):
        got = reference(*ref_args)
    if got is None:  # the reference wrote its outputs in place
        return [ref_args[i] for i in outs]
    got = list(got) if isinstance(got, (tuple, list)) else [got]
    if len(got) != len(outs):
        raise ArgumentError(f"the reference returned {len(got)} arrays for {len(outs)} outputs; return "
                            "one per output (in the order of `outputs`), or None after writing them", loc)
    res = []
    for e, i in zip(got, outs):
        e = np.asarray(e)
        if e.size != args[i].size:
            raise ArgumentError(f"the reference's array for output {i} has shape {e.shape}, the output "
                                f"has {args[i].shape}", loc)
        res.append(e.reshape(args[i].shape))
    return res


def _fmt(v) -> str:
    if isinstance(v, (float, np.floating)):
        return f"{float(v):.8g}"
    return str(v)


def _diff(got: np.ndarray, exp: np.ndarray, rtol, atol, max_report: int):
    """(number of mismatches, lines describing the first ones) or (0, [])."""
    if got.dtype.kind in "fc":
        with np.errstate(all="ignore"):
            g, e = got.astype(np.float64), exp.astype(np.float64)
            bad = ~np.isclose(g, e, rtol=rtol, atol=atol, equal_nan=True)
    else:
        g, e = got, exp
        bad = got != exp.astype(got.dtype) if exp.dtype != got.dtype else got != exp
    n = int(np.count_nonzero(bad))
    if not n:
        return 0, []
    poison = _poison_value(got.dtype)
    rows = [("index", "got", "expected", "abs err")]
    for idx in np.argwhere(bad)[:max_report]:
        ix = tuple(int(i) for i in idx)
        gv, ev = got[ix], exp[ix]
        err = ""
        if got.dtype.kind in "fc":
            with np.errstate(all="ignore"):
                err = _fmt(abs(float(gv) - float(ev)))
        gs = _fmt(gv)
        if got.dtype.kind not in "fc" and gv == poison:
            gs += f" (poison 0x{POISON_BYTE:X}..: not written)"
        elif got.dtype.kind in "fc" and np.isnan(gv) and not np.isnan(ev):
            gs += " (computed, or never written)"
        rows.append((str(ix if len(ix) > 1 else ix[0]), gs, _fmt(ev), err))
    widths = [max(len(r[c]) for r in rows) for c in range(4)]
    lines = ["    " + "  ".join(x.ljust(w) for x, w in zip(r, widths)).rstrip() for r in rows]
    if n > max_report:
        lines.append(f"    ... and {n - max_report} more")
    return n, lines


def _to_device(a, device):
    import torch
    return torch.from_numpy(np.ascontiguousarray(a)).to(device) if isinstance(a, np.ndarray) else a


def _run(kernel, name, grid, args, outs, launch):
    """Run on one backend; return the outputs as numpy arrays and the inputs after the run."""
    if name == "interpreter":
        run_args = [a.copy() if isinstance(a, np.ndarray) else a for a in args]
        for i in outs:
            _poison_np(run_args[i])
        with np.errstate(all="ignore"):
            kernel[grid](*run_args, backend="interpreter", **launch)
        return run_args
    import torch
    run_args = [_to_device(a, "cuda") for a in args]
    for i in outs:
        t = run_args[i]
        if t.is_floating_point():
            t.fill_(float("nan"))
        else:
            t.view(torch.uint8).fill_(POISON_BYTE)
    kernel[grid](*run_args, backend=name, **launch)
    torch.cuda.synchronize()
    return [a.cpu().numpy() if isinstance(a, torch.Tensor) else a for a in run_args]


def assert_kernel_matches(kernel, reference, *args, grid, outputs, backends=("interpreter", "nvidia", "amd"),
                          rtol=None, atol=None, assemble=(), check_inputs: bool = True,
                          max_report: int = 10, tolerance=None, **launch) -> MatchReport:
    """Run ``kernel[grid](*args, **launch)`` on each of ``backends`` that can run here and
    check the ``outputs`` (argument indices or names) against ``reference(*args)``.

    ``reference`` gets copies of the numpy arguments (outputs poisoned) and either
    returns the expected output arrays (one, or a tuple in the order of ``outputs``) or
    writes them in place and returns None. ``launch`` holds constexprs and launch
    options (``num_warps=``). Float outputs compare with ``rtol``/``atol`` (default from
    :data:`TOLERANCES` by dtype) and NaN matching NaN; integers compare exactly.
    ``tolerance`` (a :class:`Tolerance`, e.g. ``mma_tolerance(a, b)`` for a GEMM's
    accumulation) replaces rtol/atol with a per-element bound, named in the failure.
    ``assemble`` names targets (``"sm_90"``, ``"gfx942"``) to also emit and assemble
    the kernel for, where their backend loads. With ``check_inputs`` an input array the
    kernel changed is a failure too.
    """
    loc = user_location()
    if "backend" in launch:
        raise ArgumentError("assert_kernel_matches picks backends itself: pass backends=(...), not backend=", loc)
    if not args and not launch:
        raise ArgumentError("assert_kernel_matches needs the kernel's arguments", loc)
    outs = _out_positions(kernel, args, outputs, loc)
    expected = _expected(reference, args, outs, loc)
    report = MatchReport(kernel.__name__)
    where = f"checked at {os.path.basename(loc.file)}:{loc.line}" if loc else ""
    launched = ", ".join(f"{k}={v!r}" for k, v in launch.items())
    for name in backends:
        ok, why = backend_status(name)
        if not ok:
            report.skipped[name] = why
            continue
        after = _run(kernel, name, grid, args, outs, launch)
        problems = []
        for i, exp in zip(outs, expected):
            got = after[i]
            r, a = TOLERANCES.get(dt.from_numpy(got.dtype).name, (0, 0)) if got.dtype.kind in "fc" else (0, 0)
            r, a = (rtol if rtol is not None else r), (atol if atol is not None else a)
            if tolerance is not None:
                r, a = tolerance.rtol, tolerance.atol
            n, lines = _diff(got, exp, r, a, max_report)
            if n:
                tol = "" if got.dtype.kind not in "fc" else (f"; bound: {tolerance}" if tolerance is not None
                                                             else f", rtol={r:g}, atol={a:g}")
                problems.append(f"  output `{_arg_name(kernel, i)}` (argument {i}, {got.dtype}{tol}) differs "
                                f"from the reference at {n} of {got.size} elements:")
                problems += lines
        if check_inputs:
            for i, a in enumerate(args):
                if i not in outs and isinstance(a, np.ndarray) and not np.array_equal(
                        a, after[i], equal_nan=a.dtype.kind in "fc"):
                    problems.append(f"  input `{_arg_name(kernel, i)}` (argument {i}) was changed by the "
                                    "kernel; list it in `outputs` if it is written on purpose")
        if problems:
            head = (f"kernel `{kernel.__name__}` on the {name} backend does not match the reference "
                    f"(grid={grid}{', ' + launched if launched else ''}) {where}")
            raise AssertionError("\n".join([head] + problems))
        report.ran.append(name)
    for target in assemble:
        ok, why = compile_status(target)
        if not ok:
            report.skipped[target] = why
            continue
        try:
            kernel.trace(*args, target=target, **launch).compile(target)
        except NotImplementedError as e:
            report.skipped[target] = f"not implemented in the backend yet: {e}"
            continue
        except Exception as e:
            raise AssertionError(f"kernel `{kernel.__name__}` failed to assemble for {target} {where}:\n"
                                 f"  {type(e).__name__}: {e}") from e
        report.assembled.append(target)
    if not report.ran:
        raise AssertionError(f"kernel `{kernel.__name__}` ran on no backend {where}: "
                             + "; ".join(f"{k}: {v}" for k, v in report.skipped.items()))
    return report
