"""Build, run, compile and check random programs; save a reproducer per failure."""
from __future__ import annotations

import itertools
import linecache
import os
import time
from dataclasses import dataclass, field

import numpy as np

from . import reference as R
from .evaluate import evaluate
from .ops import is_float
from .program import Program
from .render import kernel_source

POISON_INT = 0x5A
_counter = itertools.count()


def default_target(prog: Program) -> str:
    """A target whose warp matches the program's (the interpreter follows its layouts)."""
    return "sm_90" if prog.warp_size == 32 else "gfx942"


def kernel_of(prog: Program, name: str = "fuzz_kernel", fname: str | None = None):
    """The program's ``@gt.jit`` kernel, defined from its source (registered with linecache
    as ``fname``, a new name by default, so errors show the generated line)."""
    src = kernel_source(prog, name)
    fname = fname or f"<gluon_trace.fuzz program {next(_counter)}>"
    linecache.cache[fname] = (len(src), None, src.splitlines(True), fname)
    scope: dict = {"__name__": "gluon_trace_fuzz_program"}
    exec(compile(src, fname, "exec"), scope)
    return scope[name]


# ------------------------------------------------------------------------------ data
def _ints(rng, d: str, n: int) -> np.ndarray:
    info = np.iinfo(R.np_dtype(d))
    small = rng.integers(max(info.min, -8), min(info.max, 8) + 1, n).astype(R.np_dtype(d))
    full = rng.integers(info.min, info.max, n, endpoint=True, dtype=R.np_dtype(d))
    edges = rng.choice(np.array([info.min, info.max, 0, max(info.min, -1), 1], dtype=R.np_dtype(d)), n)
    pick = rng.random(n)
    return np.where(pick < 0.6, small, np.where(pick < 0.9, full, edges)).astype(R.np_dtype(d))


def _floats(rng, d: str, n: int) -> np.ndarray:
    fmax = R.FLOAT_MAX[d]
    edges = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, fmax, -fmax, R._TINY[d], 1.0, -1.0])
    pick = rng.random(n)
    v = np.where(pick < 0.7, rng.normal(0, 4, n),
                 np.where(pick < 0.85, rng.integers(-8, 9, n).astype(float),
                          np.where(pick < 0.95, rng.choice(edges, n), rng.normal(0, 1e4, n))))
    return R.fix(v, d)


def _values(rng, d: str, size: int) -> np.ndarray:
    if d == "int1":
        return rng.random(size) < 0.5
    if is_float(d):
        return _floats(rng, d, size)
    return _ints(rng, d, size)


def make_inputs(prog: Program) -> dict:
    """Input index -> values (the reference's compute dtype), seeded by ``prog.seed``; and
    each atomics buffer's name -> its starting contents (fuzz/atomics.py)."""
    rng = np.random.default_rng(prog.seed)
    out = {}
    for n in prog.inputs:
        out[n.attrs["input"]] = _values(rng, n.dtype, n.numel)
    for k, n in enumerate(n for n in prog.nodes if n.op == "atomic_buf"):
        # a generator of its own: the inputs' data stays what it was before the family existed
        brng = np.random.default_rng((prog.seed, 1 + k))
        v = _values(brng, n.dtype, n.numel)
        if n.attrs.get("pool"):  # a compare-and-swap expects x & 3 (or its negation)
            pool = np.array([False, True]) if n.dtype == "int1" else \
                np.array([0.0, -0.0, 1.0, 2.0, 3.0, np.nan]) if is_float(n.dtype) else np.arange(4)
            v = np.where(brng.random(n.numel) < 0.75, R.fix(brng.choice(pool, n.numel), n.dtype), v)
        out[n.name] = R.fix(v, n.dtype)
    return out


def to_storage(values: np.ndarray, d: str) -> np.ndarray:
    """What the kernel is given: bfloat16 as ml_dtypes arrays, the rest as they are."""
    if d == "bfloat16":
        import ml_dtypes
        return np.asarray(values, np.float32).astype(ml_dtypes.bfloat16)
    return np.ascontiguousarray(values)


def from_storage(a: np.ndarray, d: str) -> np.ndarray:
    return np.asarray(a).astype(np.float32) if d == "bfloat16" else np.asarray(a)


def is_buffer(node) -> bool:
    """An output that is the memory an atomic updated in place (compared whole, never stored)."""
    return node.op == "atomic_buf"


def starting_outputs(prog: Program, inputs: dict) -> list:
    """What each output buffer holds before the kernel runs (storage form): poison, or an
    atomics buffer's random contents."""
    out = []
    for o in prog.outputs:
        n = prog.node(o)
        if is_buffer(n):
            out.append(to_storage(np.array(inputs[o], copy=True), n.dtype))
        else:
            out.append(poisoned(n.dtype, max(n.numel, 1)))
    return out


def poisoned(d: str, size: int) -> np.ndarray:
    if is_float(d):
        return to_storage(np.full(size, np.nan, np.float32 if d == "bfloat16" else R.np_dtype(d)), d)
    if d == "int1":
        return np.zeros(size, np.bool_)
    a = np.full(size * R.np_dtype(d).itemsize, POISON_INT, np.uint8)
    return a.view(R.np_dtype(d))


# ------------------------------------------------------------------------------ checking
def mismatches(prog: Program, got: list, ref: dict, poison: list, limit: int = 5) -> list[str]:
    """Where outputs differ from the reference (values with an unknown bound skipped)."""
    msgs = []
    for i, (name, g) in enumerate(zip(prog.outputs, got)):
        node = prog.node(name)
        val = ref[name]
        exp, err = np.asarray(val.v).reshape(-1), np.asarray(val.e).reshape(-1)
        g = np.asarray(g).reshape(-1)
        stored = np.ones(g.size, bool) if (i % 2 == 0 or not node.shape or is_buffer(node)) else \
            np.arange(g.size) < prog.n_valid
        if node.dtype == "int1" or not is_float(node.dtype):
            ok = (g == exp) | np.isinf(err)
        else:
            g64, e64 = g.astype(np.float64), exp.astype(np.float64)
            # a difference past float64's range is inf, which no finite bound admits: right as it is
            with np.errstate(invalid="ignore", over="ignore"):
                same = (g64 == e64) | (np.isnan(g64) & np.isnan(e64))
                near = np.abs(g64 - e64) <= err
            ok = same | np.isinf(err) | ((err > 0) & near)
        ok = np.where(stored, ok, _is_poison(g, poison[i], node.dtype))
        bad = np.flatnonzero(~ok)
        if bad.size:
            show = ", ".join(f"[{j}] got {g[j]!r} expected {exp[j]!r}"
                             + (f" (+-{err[j]:.3g})" if err[j] else "")
                             + ("" if stored[j] else " (masked off: must stay unwritten)")
                             for j in bad[:limit])
            msgs.append(f"out{i} = {name} ({node.dtype}{list(node.shape)}): {bad.size} of {g.size} "
                        f"differ: {show}")
    return msgs


def _is_poison(g, p, d: str) -> np.ndarray:
    if is_float(d):
        return np.isnan(np.asarray(g, np.float64))
    return np.asarray(g) == np.asarray(p)


def kernel_args(prog: Program, inputs: dict) -> tuple[list, list]:
    """The kernel's arguments as numpy arrays (inputs, then outputs poisoned or, for atomics
    buffers, holding their starting contents, then the run-time ints) and what the outputs
    started as, for any runner that takes numpy arrays (the interpreter,
    the simulators)."""
    ins = [to_storage(inputs[n.attrs["input"]], n.dtype) for n in prog.inputs]
    outs = starting_outputs(prog, inputs)
    poison = [from_storage(np.array(o, copy=True), prog.node(n).dtype) for o, n in zip(outs, prog.outputs)]
    return ins + outs + [prog.n_valid, prog.n_iter, prog.flag], poison


def outputs_of(prog: Program, args: list) -> list:
    """The output arrays of ``kernel_args``' list, in the reference's compute dtypes."""
    first = len(prog.inputs)
    return [from_storage(a, prog.node(n).dtype) for a, n in zip(args[first:], prog.outputs)]


def run_interpreter(prog: Program, inputs: dict | None = None, kernel=None) -> tuple[list, list]:
    """Outputs (compute dtype) of the program in the interpreter, and the poison they started as."""
    inputs = make_inputs(prog) if inputs is None else inputs
    kernel = kernel or kernel_of(prog)
    args, poison = kernel_args(prog, inputs)
    kernel[(1,)](*args, num_warps=prog.num_warps, backend="interpreter", target=default_target(prog))
    return outputs_of(prog, args), poison


def trace_program(prog: Program, target: str, kernel=None):
    """The TracedKernel of the program for ``target`` (types from its inputs and outputs)."""
    from .. import dtypes as dt
    from .. import language as gl
    kernel = kernel or kernel_of(prog)
    ptrs = [gl.pointer(dt.BY_NAME[n.dtype]) for n in prog.inputs] + \
        [gl.pointer(dt.BY_NAME[prog.node(o).dtype]) for o in prog.outputs]
    return kernel.trace(*ptrs, gl.int32, gl.int32, gl.int32, num_warps=prog.num_warps, target=target)


def run_on_device(prog: Program, inputs: dict | None = None, kernel=None, device: str = "cuda") -> tuple[list, list]:
    """Like :func:`run_interpreter`, on a GPU through torch tensors (the backend is the one
    the tensors' device picks)."""
    import torch
    inputs = make_inputs(prog) if inputs is None else inputs
    kernel = kernel or kernel_of(prog)

    def dev(a: np.ndarray, d: str):
        if d == "bfloat16":
            return torch.from_numpy(np.asarray(a, np.float32)).to(torch.bfloat16).to(device)
        return torch.from_numpy(np.ascontiguousarray(a)).to(device)

    ins = [dev(inputs[n.attrs["input"]], n.dtype) for n in prog.inputs]
    before = [from_storage(b, prog.node(o).dtype) for b, o in zip(starting_outputs(prog, inputs), prog.outputs)]
    outs = [dev(b, prog.node(o).dtype) for b, o in zip(before, prog.outputs)]
    kernel[(1,)](*ins, *outs, prog.n_valid, prog.n_iter, prog.flag, num_warps=prog.num_warps)
    torch.cuda.synchronize()
    got = [o.float().cpu().numpy() if o.dtype == torch.bfloat16 else o.cpu().numpy() for o in outs]
    return got, before


def compile_program(prog: Program, target: str, kernel=None):
    """The backend's compiled kernel for ``target``."""
    return trace_program(prog, target, kernel).compile(target)


@dataclass
class Outcome:
    """What happened to one program: ``failures`` are (where, message) pairs."""
    program: Program
    failures: list = field(default_factory=list)
    compile_seconds: dict = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.failures


def check_program(prog: Program, targets=(), interpreter: bool = True) -> Outcome:
    """Interpreter against the reference (exact mode), then compile for each target. An
    exception from the library for this legal program is a failure too."""
    out = Outcome(prog)
    try:
        kernel = kernel_of(prog)
    except Exception as e:  # noqa: BLE001 - the rendered source must always define a kernel
        out.failures.append(("render", f"{type(e).__name__}: {e}"))
        return out
    if interpreter:
        try:
            inputs = make_inputs(prog)
            got, poison = run_interpreter(prog, inputs, kernel)
            msgs = mismatches(prog, got, evaluate(prog, inputs, "exact"), poison)
            out.failures += [("interpreter", m) for m in msgs]
        except Exception as e:  # noqa: BLE001 - a refusal/crash of a legal program is a finding
            out.failures.append(("interpreter", f"{type(e).__name__}: {e}"))
    for target in targets:
        t0 = time.perf_counter()
        try:
            compile_program(prog, target, kernel)
        except Exception as e:  # noqa: BLE001
            out.failures.append((target, f"{type(e).__name__}: {_first_line(e)}"))
        out.compile_seconds[target] = time.perf_counter() - t0
    return out


def _first_line(e: Exception) -> str:
    s = str(e)
    return s if len(s) < 600 else s[:600] + " ..."


# ------------------------------------------------------------------------------ reproducers
def failure_dir() -> str:
    return os.environ.get("GLUON_TRACE_FUZZ_DIR", ".fuzz_failures")


def save_reproducer(prog: Program, failures: list, directory: str | None = None,
                    name: str | None = None) -> str:
    """A standalone file: the failure as a comment, the kernel, and a main that runs it in the
    interpreter on the same data and compiles it for the failing targets. A fixed ``name``
    is overwritten by each later failure (hypothesis ends on the shrunk example)."""
    directory = directory or failure_dir()
    os.makedirs(directory, exist_ok=True)
    inputs = make_inputs(prog)
    targets = sorted({w for w, _ in failures if w not in ("interpreter", "render")})
    src = kernel_source(prog)
    data = "\n".join(f"IN{n.attrs['input']} = np.frombuffer(bytes.fromhex({_hex(inputs[n.attrs['input']])!r}), "
                     f"np.dtype({str(np.asarray(inputs[n.attrs['input']]).dtype)!r}))  # {n.dtype}{list(n.shape)}"
                     for n in prog.inputs)
    notes = "\n".join(f"# {w}: {m}".replace("\n", "\n#   ") for w, m in failures)
    main = f'''

{data}
PROGRAM = {_program_repr(prog)}

if __name__ == "__main__":
    from gluon_trace import fuzz
    prog = fuzz.program_from_dict(PROGRAM)
    outcome = fuzz.check_program(prog, targets={targets!r})
    for where, msg in outcome.failures:
        print(where, ":", msg)
    print("ok" if outcome.ok else f"{{len(outcome.failures)}} failure(s)")
'''
    name = name or f"fuzz_{abs(hash(src)) % 10 ** 10:010d}"
    name = name if name.endswith(".py") else name + ".py"
    path = os.path.abspath(os.path.join(directory, name))
    with open(path, "w") as f:
        f.write(f'"""Reproducer saved by gluon_trace.fuzz."""\n{notes}\n{src}{main}')
    return path


def _hex(a) -> str:
    return np.ascontiguousarray(a).tobytes().hex()


def _program_repr(prog: Program) -> str:
    from .program import program_to_dict
    return repr(program_to_dict(prog))
