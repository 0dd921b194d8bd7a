"""Which integer min/max trees does ptxas miscompile on sm_90? (the GPU fuzzer's seed 330070402)

ptxas folds two dependent integer min/max into one three-input ``VIMNMX3`` on sm_90. On the
H200 one such kernel stored a value the negation before the ``VIMNMX3`` had not reached
(perf/probe_vimnmx3.py). This probe writes random straight-line PTX programs -- per thread,
elementwise producers (add, sub, neg, abs, not, xor, shifts, mul) over loaded int32s, then a
random tree of ``min``/``max`` (s32 or u32) -- and runs each, assembled by every ptxas given
and in every PTX form given, against numpy on fresh inputs. For each ``VIMNMX3`` in the SASS
it records which instruction wrote each source register and how many cycles (the stall counts
in the control bits) before, so the failing programs can be told apart from the passing ones.

    python perf/probe_minmax3.py [programs] [seed]      (GPU; $PIP_PTXAS: a second ptxas)
    python perf/probe_minmax3.py sass SEED,... BAD GOOD OTHER...   (no GPU)

The second form tells, without a GPU, which ptxas versions behave like a known-bad one (BAD) or
a known-good one (GOOD) on the programs the GPU found wrong: each OTHER ptxas's SASS for each
seed is compared with BAD's and GOOD's, instruction for instruction (control bits included).

Forms: ``plain`` (max.s32 / min.u32, what the emitter writes), and the candidate workarounds
``notwrap`` (max(a, b) as ~min(~a, ~b), which ptxas does not fold into ``VIMNMX3``).
"""
from __future__ import annotations

import collections
import concurrent.futures
import os
import random
import re
import subprocess
import sys
import tempfile

import numpy as np

THREADS = 4096
BLOCK = 256
UNARY = ("neg", "not", "abs", "shl", "shrs", "shru")
BINARY = ("add", "sub", "xor", "and", "or", "mul")


def _wrap(x):
    return np.asarray(x, dtype=np.int64).astype(np.uint32).view(np.int32)


def _eval(op, args, k):
    a = args[0]
    b = args[1] if len(args) > 1 else None
    with np.errstate(over="ignore"):
        if op == "neg":
            return _wrap(-a.astype(np.int64))
        if op == "not":
            return ~a
        if op == "abs":
            return _wrap(np.abs(a.astype(np.int64)))
        if op == "shl":
            return _wrap(a.astype(np.int64) << k)
        if op == "shrs":
            return a >> k
        if op == "shru":
            return (a.view(np.uint32) >> k).view(np.int32)
        if op in ("add", "sub", "mul"):
            x, y = a.astype(np.int64), b.astype(np.int64)
            return _wrap({"add": x + y, "sub": x - y, "mul": (x * y) & 0xFFFFFFFF}[op])
        if op in ("xor", "and", "or"):
            return {"xor": a ^ b, "and": a & b, "or": a | b}[op]
        if op in ("max", "min"):
            f = np.maximum if op == "max" else np.minimum
            return f(a, b) if k == "s32" else f(a.view(np.uint32), b.view(np.uint32)).view(np.int32)
    raise ValueError(op)


_PTX = {"neg": "neg.s32 {d}, {0};", "not": "not.b32 {d}, {0};", "abs": "abs.s32 {d}, {0};",
        "shl": "shl.b32 {d}, {0}, {k};", "shrs": "shr.s32 {d}, {0}, {k};", "shru": "shr.u32 {d}, {0}, {k};",
        "add": "add.s32 {d}, {0}, {1};", "sub": "sub.s32 {d}, {0}, {1};", "mul": "mul.lo.s32 {d}, {0}, {1};",
        "xor": "xor.b32 {d}, {0}, {1};", "and": "and.b32 {d}, {0}, {1};", "or": "or.b32 {d}, {0}, {1};"}


def _ptx_op(op, d, args, k):
    return _PTX[op].format(*args, d=d, k=k)


def _minmax_plain(op, d, a, b, k):
    return [f"{op}.{k} {d}, {a}, {b};"]


def _minmax_notwrap(op, d, a, b, k):
    # max(a, b) = ~min(~a, ~b) (and min the other way): ptxas keeps the LOP3s between the
    # min/max, so it cannot fold two of them into one VIMNMX3 (checked in the SASS)
    other = "min" if op == "max" else "max"
    return [f"not.b32 {d}, {a};", f"not.b32 %x0, {b};", f"{other}.{k} {d}, {d}, %x0;", f"not.b32 {d}, {d};"]


FORMS = {"plain": _minmax_plain, "notwrap": _minmax_notwrap}


class Program:
    def __init__(self, seed):
        rng = random.Random(seed)
        self.seed = seed
        self.n = rng.randint(3, 10)
        self.kind = rng.choice(("s32", "u32", "s32", "mixed"))
        self.lines = []          # (op, dst, args, k)
        self.nreg = 0
        vals = []
        for i in range(self.n):
            a, b = ("a", i), ("b", i)
            depth = rng.choice((0, 1, 1, 2))
            x = a
            if depth:
                op = rng.choice(BINARY)
                x = self._emit(op, [a, b], None)
                for _ in range(depth - 1):
                    op = rng.choice(UNARY)
                    x = self._emit(op, [x], rng.randint(0, 31) if op in ("shl", "shrs", "shru") else None)
            if rng.random() < 0.5:
                x = self._emit(rng.choice(("neg", "not", "abs", "neg")), [x], None)
            vals.append(x)
        while len(vals) > 1:
            i, j = sorted(rng.sample(range(len(vals)), 2))
            y, x = vals.pop(j), vals.pop(i)
            k = rng.choice(("s32", "u32")) if self.kind == "mixed" else self.kind
            r = self._emit(rng.choice(("max", "min")), [x, y], k)
            if rng.random() < 0.25:  # a producer between two levels of the tree
                r = self._emit(rng.choice(("neg", "not")), [r], None)
            vals.insert(rng.randint(0, len(vals)), r)
        self.out = vals[0]

    def _emit(self, op, args, k):
        self.nreg += 1
        d = ("r", self.nreg)
        self.lines.append((op, d, args, k))
        return d

    def reference(self, a, b):
        env = {}
        for i in range(self.n):
            env[("a", i)], env[("b", i)] = a[:, i], b[:, i]
        for op, d, args, k in self.lines:
            env[d] = _eval(op, [env[x] for x in args], k)
        return env[self.out]

    def ptx(self, form):
        def reg(x):
            return {"a": f"%a{x[1]}", "b": f"%b{x[1]}", "r": f"%r{x[1]}"}[x[0]]
        body = []
        for op, d, args, k in self.lines:
            if op in ("max", "min"):
                body += FORMS[form](op, reg(d), *map(reg, args), k)
            else:
                body.append(_ptx_op(op, reg(d), [reg(x) for x in args], k))
        loads = []
        for i in range(self.n):
            loads.append(f"ld.global.u32 %a{i}, [%q0+{4 * i}];")
            loads.append(f"ld.global.u32 %b{i}, [%q1+{4 * i}];")
        return "\n".join([
            ".version 8.0", ".target sm_90a", ".address_size 64",
            ".visible .entry probe(.param .u64 pa, .param .u64 pb, .param .u64 po)", f".maxntid {BLOCK}, 1, 1", "{",
            f".reg .b32 %a<{self.n}>;", f".reg .b32 %b<{self.n}>;", f".reg .b32 %r<{self.nreg + 1}>;",
            ".reg .b32 %x<4>;", ".reg .b64 %q<4>;",
            "ld.param.u64 %q0, [pa];", "ld.param.u64 %q1, [pb];", "ld.param.u64 %q2, [po];",
            "mov.u32 %x1, %tid.x;", "mov.u32 %x2, %ctaid.x;", f"mad.lo.u32 %x1, %x2, {BLOCK}, %x1;",
            f"mul.wide.u32 %q3, %x1, {4 * self.n};", "add.s64 %q0, %q0, %q3;", "add.s64 %q1, %q1, %q3;",
            *loads, *body,
            "mul.wide.u32 %q3, %x1, 4;", "add.s64 %q2, %q2, %q3;",
            f"st.global.u32 [%q2], {reg(self.out)};", "ret;", "}", ""])


def inputs(rng: np.random.Generator, n):
    full = rng.integers(-2**31, 2**31, size=(THREADS, n), dtype=np.int64)
    small = rng.integers(-8, 9, size=(THREADS, n))
    edge = rng.choice(np.array([-2**31, -2**31 + 1, 2**31 - 1, 2**31 - 2, -1, 0, 1]), size=(THREADS, n))
    pick = rng.random((THREADS, n))
    x = np.where(pick < 0.5, small, np.where(pick < 0.85, full, edge))
    return _wrap(x)


_CTRL = re.compile(r"/\*([0-9a-f]{4})\*/\s+(.*?)\s*;\s*/\* (0x[0-9a-f]+) \*/")


def sass_lines(cubin_path, nvdisasm):
    """[(opcode text, stall cycles)] in program order, from the control bits of each instruction."""
    text = subprocess.run([nvdisasm, "-hex", "-c", cubin_path], capture_output=True, text=True).stdout.splitlines()
    out = []
    for i, line in enumerate(text):
        m = _CTRL.search(line)
        if m and i + 1 < len(text):
            hi = int(re.search(r"0x[0-9a-f]+", text[i + 1]).group(0), 16)
            out.append((m.group(2), (hi >> 41) & 0xF))
    return out


def _regs(s):
    """registers an operand list names (R4.64 names R4 and R5)."""
    regs = []
    for m in re.finditer(r"\bR(\d+)(\.64)?\b", s):
        r = int(m.group(1))
        regs += [r, r + 1] if m.group(2) else [r]
    return regs


def vimnmx3_sources(lines):
    """For each VIMNMX3: [(source operand's producer opcode, cycles from its issue)]."""
    found = []
    for j, (ins, _) in enumerate(lines):
        if "VIMNMX3" not in ins:
            continue
        ops = ins.split(None, 1)[1].split(",")
        srcs = [r for o in ops[1:] for r in _regs(o)]
        row = []
        for r in srcs:
            cycles = 0
            for p in range(j - 1, -1, -1):
                cycles += lines[p][1]
                pins = lines[p][0].lstrip("@!P0123456789T ")
                parts = pins.split(None, 1)
                if len(parts) < 2 or parts[0].startswith(("ST", "RED", "BRA", "EXIT", "BAR")):
                    continue
                if r in _regs(parts[1].split(",")[0]):
                    row.append((parts[0], cycles))
                    break
            else:
                row.append(("entry", cycles))
        found.append(row)
    return found


def compile_one(args):
    prog_seed, form, ptxas_path, nvdisasm, workdir = args
    prog = Program(prog_seed)
    tag = f"{prog_seed}-{form}-{abs(hash(ptxas_path)) % 1000}"
    ptx_path, cubin = os.path.join(workdir, tag + ".ptx"), os.path.join(workdir, tag + ".cubin")
    with open(ptx_path, "w") as f:
        f.write(prog.ptx(form))
    r = subprocess.run([ptxas_path, "-arch=sm_90a", "-O3", ptx_path, "-o", cubin], capture_output=True, text=True)
    if r.returncode:
        return tag, None, r.stderr[:300], []
    lines = sass_lines(cubin, nvdisasm)
    return tag, cubin, "", vimnmx3_sources(lines)


def main():
    import cupy as cp
    count = int(sys.argv[1]) if len(sys.argv) > 1 else 1000
    base = int(sys.argv[2]) if len(sys.argv) > 2 else 1
    from gluon_trace.backends.nvidia import ptxas
    dev, version = ptxas.locate()
    assemblers = {"dev": dev}
    if os.environ.get("PIP_PTXAS"):
        assemblers["pip"] = os.environ["PIP_PTXAS"]
    nvdisasm = os.environ.get("NVDISASM") or os.path.join(os.path.dirname(dev), "nvdisasm")
    for name, p in assemblers.items():
        v = subprocess.run([p, "--version"], capture_output=True, text=True).stdout.strip().splitlines()[-1]
        print(f"ptxas {name}: {p} ({v})", flush=True)
    print(f"{count} programs from seed {base}, {THREADS} threads each, forms {list(FORMS)}", flush=True)
    work = tempfile.mkdtemp(prefix="minmax3-")
    jobs = [(base + i, form, p, nvdisasm, work) for i in range(count) for form in FORMS for p in assemblers.values()]
    names = {p: n for n, p in assemblers.items()}
    with concurrent.futures.ThreadPoolExecutor(os.cpu_count() or 4) as pool:
        results = list(pool.map(compile_one, jobs))
    stats = collections.Counter()
    producers = {True: collections.Counter(), False: collections.Counter()}
    fails = []
    for job, (tag, cubin, err, v3) in zip(jobs, results):
        seed, form, p = job[0], job[1], job[2]
        key = (names[p], form)
        if cubin is None:
            stats[key + ("refused",)] += 1
            print("refused", tag, err, flush=True)
            continue
        prog = Program(seed)
        rng = np.random.default_rng(seed * 7 + 1)
        a, b = inputs(rng, prog.n), inputs(rng, prog.n)
        want = prog.reference(a, b)
        mod = cp.RawModule(path=cubin)
        out = cp.full((THREADS,), 0x5A5A5A5A, cp.int32)
        mod.get_function("probe")((THREADS // BLOCK,), (BLOCK,), (cp.asarray(a.ravel()), cp.asarray(b.ravel()), out))
        got = out.get()
        bad = int((got != want).sum())
        has3 = bool(v3)
        stats[key + ("vimnmx3" if has3 else "no-vimnmx3", "wrong" if bad else "right")] += 1
        for row in v3:
            for prod, cyc in row:
                producers[bool(bad)][(prod.split(".")[0], min(cyc, 9))] += 1
        if bad:
            fails.append((key, seed, bad, v3))
    print("\n(ptxas, form, SASS, result): programs", flush=True)
    for k in sorted(stats):
        print(" ", k, stats[k])
    print("\nwrong programs (at most 40):")
    for key, seed, bad, v3 in fails[:40]:
        print(f"  {key} seed {seed}: {bad}/{THREADS} threads wrong; VIMNMX3 sources (producer, cycles): {v3}")
    print("\nVIMNMX3 source producers (opcode, cycles; 9 = 9 or more): in wrong programs / in right ones")
    keys = sorted(set(producers[True]) | set(producers[False]))
    for k in keys:
        print(f"  {k}: {producers[True][k]} / {producers[False][k]}")
    if fails:
        seed = fails[0][1]
        print(f"\nPTX of the first wrong program (seed {seed}):\n" + Program(seed).ptx("plain"))


def _sass_text(ptxas_path, ptx_path, nvdisasm):
    cubin = ptx_path + "." + str(abs(hash(ptxas_path))) + ".cubin"
    subprocess.run([ptxas_path, "-arch=sm_90a", "-O3", ptx_path, "-o", cubin], check=True)
    return sass_lines(cubin, nvdisasm)


def compare_sass(seeds, bad, good, others, nvidia_disasm):
    work = tempfile.mkdtemp(prefix="minmax3-sass-")
    ptx_paths = {}
    for seed in seeds:
        ptx_paths[seed] = os.path.join(work, f"{seed}.ptx")
        with open(ptx_paths[seed], "w") as f:
            f.write(Program(seed).ptx("plain"))
    known = {seed: (_sass_text(bad, p, nvidia_disasm), _sass_text(good, p, nvidia_disasm))
             for seed, p in ptx_paths.items()}
    for path in others:
        row = []
        for seed in seeds:
            mine = _sass_text(path, ptx_paths[seed], nvidia_disasm)
            row.append("B" if mine == known[seed][0] else "G" if mine == known[seed][1] else "?")
        print(f"{path}: {''.join(row)}  like the bad one {row.count('B')}, like the good one {row.count('G')}, "
              f"neither {row.count('?')}", flush=True)


if __name__ == "__main__":
    if sys.argv[1:2] == ["sass"]:
        compare_sass([int(x) for x in sys.argv[2].split(",")], sys.argv[3], sys.argv[4], sys.argv[5:],
                     os.environ.get("NVDISASM", "nvdisasm"))
    else:
        main()
