"""A small PTX simulator for the instructions the NVIDIA emitter writes, so the corpus
can be checked against the interpreter on a machine without a GPU.

Every thread of the grid is one lane of numpy arrays: registers hold raw bits (uint32
for .b32/.f32, uint64 for .b64/.f64, uint16 for .b16, bool for .pred). Threads run in
lockstep by lowest program counter (the classic SIMT reconvergence rule), so loops
whose trip count differs per thread (compare-and-swap retries) work. Floating-point
approximations (ex2.approx, sin.approx, ...) use numpy's accurate functions; an f32 fma
rounds once (fma_f32). It is a test tool: anything it does not know raises NotImplementedError.
"""
from __future__ import annotations

import re

import numpy as np


def fma_f32(a, b, c):
    """a*b + c for float32 arrays, rounded once (as fma.rn.f32): the product is exact in
    f64; the f64 sum is rounded to odd (its error found by TwoSum), and rounding to odd
    with 29 spare bits then to f32 rounds as a single rounding would."""
    with np.errstate(all="ignore"):
        p = a.astype(np.float64) * b.astype(np.float64)
        c = c.astype(np.float64)
        s = p + c
        bv = s - p
        e = (p - (s - bv)) + (c - bv)
        even = (s.view(np.int64) & 1) == 0
        fix = (e != 0) & even & np.isfinite(s)
        s = np.where(fix, np.nextafter(s, np.where(e > 0, np.inf, -np.inf)), s)
        return s.astype(np.float32)


U32, U64, U16 = np.uint32, np.uint64, np.uint16
_INT = {"s8": np.int8, "s16": np.int16, "s32": np.int32, "s64": np.int64,
        "u8": np.uint8, "u16": np.uint16, "u32": np.uint32, "u64": np.uint64,
        "b8": np.uint8, "b16": np.uint16, "b32": np.uint32, "b64": np.uint64}
_FLT = {"f16": np.float16, "f32": np.float32, "f64": np.float64}
_BITS = {"8": np.uint8, "16": np.uint16, "32": np.uint32, "64": np.uint64}


def _tbits(t: str) -> int:
    if t == "pred":
        return 1
    return int(re.sub(r"\D", "", t))


def _np(t: str):
    return _FLT.get(t) or _INT[t]


def _magnitude(x):
    """|x| of signed integers as uint64, exact for the most negative value too (np.abs of
    int64's minimum is that minimum, which made div.s64 by it give +-1)."""
    x = np.asarray(x).astype(np.int64)
    with np.errstate(over="ignore"):
        return np.where(x < 0, np.uint64(0) - x.view(np.uint64), x.view(np.uint64))


def _round16(x, t: str):
    """The bits of f32 values rounded to nearest even as bf16 or f16."""
    f = np.asarray(x).astype(np.float32)
    if t == "f16":
        with np.errstate(all="ignore"):
            return f.astype(np.float16).view(np.uint16)
    bits = f.view(np.uint32).astype(np.uint64)
    rb = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)
    return np.where(np.isnan(f), np.uint16(0x7FFF), rb)


class Mem:
    """Global memory: buffers at fake addresses (1 << 40 apart)."""

    def __init__(self):
        self.bufs: list[np.ndarray] = []

    def add(self, arr: np.ndarray) -> int:
        self.bufs.append(arr.reshape(-1).view(np.uint8))
        return len(self.bufs) << 40

    def _loc(self, addr: int, n: int):
        k = (addr >> 40) - 1
        off = addr & ((1 << 40) - 1)
        if not 0 <= k < len(self.bufs) or off + n > self.bufs[k].size:
            raise IndexError(f"global access out of bounds at {hex(addr)} ({n} bytes)")
        if off % n and n <= 16:
            raise IndexError(f"misaligned {n}-byte global access at {hex(addr)}")
        return self.bufs[k], off

    def read(self, addr: int, n: int) -> bytes:
        b, off = self._loc(addr, n)
        return b[off:off + n].tobytes()

    def write(self, addr: int, data: bytes) -> None:
        b, off = self._loc(addr, len(data))
        b[off:off + len(data)] = np.frombuffer(data, np.uint8)


class Kernel:
    def __init__(self, text: str):
        self.text = text
        body = text[text.index("{", text.index(".entry")) + 1:text.rindex("}")]
        head = text[text.index(".entry"):text.index("{", text.index(".entry"))]
        self.params = re.findall(r"\.param \.(\w+) (\w+)", head)
        self.nthreads = int(re.search(r"\.maxntid (\d+)", text).group(1))
        self.regs: dict[str, str] = {}
        self.labels: dict[str, int] = {}
        self.local: dict[str, int] = {}  # .local array -> its offset in a thread's local bytes
        self.local_bytes = 0
        self.ins: list = []
        for raw in body.split("\n"):
            line = raw.strip()
            if not line or line.startswith("//") or line.startswith(".loc "):
                continue
            m = re.match(r"\.reg \.(\w+) (%\w+)<(\d+)>;", line)
            if m:
                for i in range(int(m.group(3))):
                    self.regs[f"{m.group(2)}{i}"] = m.group(1)
                continue
            if line.startswith(".local"):  # per-thread arrays, one after another
                m = re.match(r"\.local \.align (\d+) \.b8 (\w+)\[(\d+)\];", line)
                if m:
                    at = -(-self.local_bytes // int(m.group(1))) * int(m.group(1))
                    self.local[m.group(2)] = at
                    self.local_bytes = at + int(m.group(3))
                continue
            if line.endswith(":"):
                self.labels[line[:-1]] = len(self.ins)
                continue
            if line in ("{", "}") or line.startswith(".param") or line.startswith("st.param") \
                    or line.startswith("call"):
                self.ins.append(("nop",))
                continue
            self.ins.append(self._parse(line))

    def _parse(self, line: str):
        line = line.rstrip(";")
        pred = None
        if line.startswith("@"):
            p, line = line.split(" ", 1)
            pred = (p[1:].lstrip("!"), p.startswith("@!"))
        op, _, rest = line.partition(" ")
        args = [a.strip() for a in re.findall(r"\s*(\{[^}]*\}|\[[^\]]*\]|[^,]+)", rest)]
        return ("op", pred, op.split("."), args)


_FP8 = {"e4m3x2": "float8e4nv", "e5m2x2": "float8e5"}

class Sim:
    def __init__(self, kernel: Kernel, grid, params: list, mem: Mem, smem_bytes: int = 0):
        self.k = kernel
        g = tuple(grid) + (1,) * (3 - len(grid))
        self.grid = g
        nt = kernel.nthreads
        self.nctas = g[0] * g[1] * g[2]
        self.N = self.nctas * nt
        idx = np.arange(self.N)
        self.tid = (idx % nt).astype(np.uint32)
        cta = idx // nt
        self.cta = cta
        self.ctaid = [(cta % g[0]).astype(np.uint32), ((cta // g[0]) % g[1]).astype(np.uint32),
                      (cta // (g[0] * g[1])).astype(np.uint32)]
        self.mem = mem
        self.smem = np.zeros((self.nctas, max(smem_bytes, 16) + 64), np.uint8)
        self.local = np.zeros((self.N, kernel.local_bytes), np.uint8)  # thread-private memory
        self.R: dict[str, np.ndarray] = {}
        self.params = dict(zip([n for _, n in kernel.params], params))
        self.ptypes = {n: t for t, n in kernel.params}

    # -- registers -------------------------------------------------------------------------
    def zeros(self, cls):
        if cls == "pred":
            return np.zeros(self.N, bool)
        return np.zeros(self.N, {"b16": U16, "b32": U32, "f32": U32, "b64": U64, "f64": U64}[cls])

    def get(self, r):
        v = self.R.get(r)
        if v is None:
            v = self.R[r] = self.zeros(self.k.regs[r])
        return v

    def val(self, a: str, t: str):
        """Operand a read as type t (numpy array of that type)."""
        if a.startswith("%"):
            if a in self.k.regs:
                raw = self.get(a)
                if t == "pred":
                    return raw
                return self._view(raw, t)
            return self._special(a, t)
        if a.startswith("0f"):
            return np.full(self.N, np.uint32(int(a[2:], 16))).view(np.float32).astype(_np(t)) if t.startswith("f") else np.full(self.N, int(a[2:], 16), np.uint32)
        if a.startswith("0d"):
            return np.full(self.N, np.uint64(int(a[2:], 16))).view(np.float64).astype(_np(t)) if t.startswith("f") else np.full(self.N, int(a[2:], 16), np.uint64)
        if a == "gt_smem":
            return np.zeros(self.N, _np(t))
        if a in self.k.local:  # a .local array's address: its offset in a thread's local bytes
            return np.full(self.N, self.k.local[a], _np(t))
        v = int(a, 0)
        if t == "pred":
            return np.full(self.N, bool(v))
        if t.startswith("f"):
            return np.full(self.N, v, _np(t))
        bits = _tbits(t)
        return np.full(self.N, v & ((1 << bits) - 1), _BITS[str(bits)]).view(_np(t))

    def _view(self, raw, t):
        bits = _tbits(t)
        rb = raw.dtype.itemsize * 8
        if bits < rb:
            raw = raw.astype(_BITS[str(bits)])  # truncate: narrow views of wide registers
        elif bits > rb:
            raw = raw.astype(_BITS[str(bits)])
        return raw.view(_np(t))

    def _special(self, a, t):
        if a == "%tid.x":
            v = self.tid
        elif a.startswith("%ctaid."):
            v = self.ctaid["xyz".index(a[-1])]
        elif a.startswith("%nctaid."):
            v = np.full(self.N, self.grid["xyz".index(a[-1])], np.uint32)
        elif a == "%laneid":
            v = self.tid % 32
        elif a in ("%tid.y", "%tid.z"):  # blocks are one-dimensional (.maxntid N, 1, 1)
            v = np.zeros(self.N, np.uint32)
        elif a in ("%globaltimer", "%clock64"):  # the simulator's own clock: 1000 a read, never back
            self.timer_reads = getattr(self, "timer_reads", 0) + 1
            v = np.full(self.N, 1000 * self.timer_reads, np.uint64)
        else:
            raise NotImplementedError(a)
        return v.astype(_np(t))

    def set(self, r: str, value, mask):
        cls = self.k.regs[r]
        cur = self.get(r)
        v = np.asarray(value)
        if cls == "pred":
            new = v.astype(bool)
        elif v.dtype.kind == "f":
            ft = {2: np.float16, 4: np.float32, 8: np.float64}[cur.dtype.itemsize]
            new = v.astype(ft).view(cur.dtype)
        elif v.dtype.kind == "b":
            new = v.astype(cur.dtype)
        else:  # integers: value-preserving widening, then wrap to the register
            new = v.astype(np.int64 if v.dtype.kind == "i" else np.uint64).astype(cur.dtype)
        self.R[r] = np.where(mask, new, cur)

    # -- running -----------------------------------------------------------------------------
    def run(self, max_steps: int = 2_000_000):
        pcs = np.zeros(self.N, np.int64)
        live = np.ones(self.N, bool)
        n = len(self.k.ins)
        steps = 0
        while live.any():
            pc = pcs[live].min()
            active = live & (pcs == pc)
            if pc >= n:
                live &= ~active
                continue
            ins = self.k.ins[pc]
            steps += 1
            if steps > max_steps:
                raise RuntimeError("simulation did not finish (an endless loop?)")
            nxt = np.where(active, pc + 1, pcs)
            if ins[0] == "op":
                _, pred, parts, args = ins
                m = active
                if pred is not None:
                    p = self.get(pred[0])
                    m = active & (~p if pred[1] else p)
                target = self.exec(parts, args, m, active)
                if target is not None:
                    nxt = np.where(m, self.k.labels[target], nxt)
                elif parts[0] == "ret":
                    live &= ~m
            pcs = nxt

    def exec(self, parts, args, m, active):
        op = parts[0]
        fn = getattr(self, "op_" + op, None)
        if fn is None:
            raise NotImplementedError(f"ptxsim: {'.'.join(parts)}")
        return fn(parts, args, m, active)

    def op_nop(self, parts, args, m, active):
        return None

    def op_ret(self, parts, args, m, active):
        return None

    def op_bra(self, parts, args, m, active):
        return args[0]

    def op_bar(self, parts, args, m, active):
        return None  # lockstep by lowest pc: every thread of the CTA arrives together

    # -- moves -----------------------------------------------------------------------------
    def op_mov(self, parts, args, m, active):
        t = parts[1]
        d, s = args
        if d.startswith("{"):  # unpack
            outs = [x.strip() for x in d[1:-1].split(",")]
            raw = self.get(s) if s in self.k.regs else self.val(s, t)
            raw = raw.view(_BITS[str(raw.dtype.itemsize * 8)])
            w = raw.dtype.itemsize * 8 // len(outs)
            for i, o in enumerate(outs):
                self.set(o, (raw >> raw.dtype.type(i * w)) & raw.dtype.type((1 << w) - 1), m)
            return None
        if s.startswith("{"):  # pack
            ins = [x.strip() for x in s[1:-1].split(",")]
            w = _tbits(t) // len(ins)
            acc = np.zeros(self.N, _BITS[str(_tbits(t))])
            for i, x in enumerate(ins):
                v = self.val(x, f"b{w}").astype(acc.dtype)
                acc |= v << acc.dtype.type(i * w)
            self.set(d, acc, m)
            return None
        if t == "pred":
            self.set(d, self.val(s, "pred"), m)
        else:
            self.set(d, self.val(s, t if t[0] != "u" and t[0] != "s" else t), m)
        return None

    def op_selp(self, parts, args, m, active):
        t = parts[1]
        d, a, b, c = args
        self.set(d, np.where(self.val(c, "pred"), self.val(a, t), self.val(b, t)), m)

    # -- integer and float arithmetic ---------------------------------------------------------
    def _bin(self, parts, args, m, fn):
        t = parts[-1]
        d, a, b = args
        with np.errstate(all="ignore"):
            r = fn(self.val(a, t), self.val(b, t), t)
        self.set(d, r, m)

    def op_add(self, parts, args, m, active):
        self._bin(parts, args, m, lambda a, b, t: a + b)

    def op_sub(self, parts, args, m, active):
        self._bin(parts, args, m, lambda a, b, t: a - b)

    def op_mul(self, parts, args, m, active):
        if parts[1] == "wide":
            t = parts[2]
            w = {"s32": np.int64, "u32": np.uint64}[t]
            d, a, b = args
            self.set(d, self.val(a, t).astype(w) * self.val(b, t).astype(w), m)
            return
        if parts[1] == "hi" and parts[2] in ("s32", "u32"):  # the high half of the 64-bit product
            t = parts[2]
            w = {"s32": np.int64, "u32": np.uint64}[t]
            d, a, b = args
            with np.errstate(all="ignore"):
                p = self.val(a, t).astype(w) * self.val(b, t).astype(w)
            self.set(d, (p >> w(32)).astype(np.int32 if t == "s32" else np.uint32), m)
            return
        if parts[1] == "hi":
            raise NotImplementedError("mul.hi")
        self._bin(parts, args, m, lambda a, b, t: a * b)

    def op_mad(self, parts, args, m, active):
        t = parts[-1]
        d, a, b, c = args
        with np.errstate(all="ignore"):
            self.set(d, self.val(a, t) * self.val(b, t) + self.val(c, t), m)

    def op_div(self, parts, args, m, active):
        t = parts[-1]
        if t.startswith("f"):
            self._bin(parts, args, m, lambda a, b, t: a / b)
        else:
            def idiv(a, b, t):
                bb = np.where(b == 0, 1, b)
                if t[0] != "s":
                    return np.where(b == 0, -1, a // bb).astype(_np(t))
                q = _magnitude(a) // _magnitude(bb)
                q = np.where((a < 0) != (bb < 0), -q, q)   # wraps: INT_MIN / -1 is INT_MIN
                return np.where(b == 0, -1, q.view(np.int64)).astype(_np(t))
            self._bin(parts, args, m, idiv)

    def op_rem(self, parts, args, m, active):
        def irem(a, b, t):
            bb = np.where(b == 0, 1, b)
            if t[0] != "s":
                return a % bb
            r = _magnitude(a) % _magnitude(bb)                # the dividend's sign (truncating)
            return np.where(a < 0, -r, r).view(np.int64).astype(_np(t))
        self._bin(parts, args, m, irem)

    def op_min(self, parts, args, m, active):
        self._bin(parts, args, m, lambda a, b, t: np.fmin(a, b) if t[0] == "f" else np.minimum(a, b))

    def op_max(self, parts, args, m, active):
        self._bin(parts, args, m, lambda a, b, t: np.fmax(a, b) if t[0] == "f" else np.maximum(a, b))

    def op_and(self, parts, args, m, active):
        self._bin(parts, args, m, lambda a, b, t: a & b)

    def op_or(self, parts, args, m, active):
        self._bin(parts, args, m, lambda a, b, t: a | b)

    def op_xor(self, parts, args, m, active):
        self._bin(parts, args, m, lambda a, b, t: a ^ b)

    def op_not(self, parts, args, m, active):
        t = parts[1]
        d, a = args
        self.set(d, ~self.val(a, t), m)

    def op_neg(self, parts, args, m, active):
        t = parts[1]
        d, a = args
        with np.errstate(all="ignore"):
            self.set(d, -self.val(a, t), m)

    def op_abs(self, parts, args, m, active):
        t = parts[1]
        d, a = args
        with np.errstate(all="ignore"):
            self.set(d, np.abs(self.val(a, t)), m)

    def op_copysign(self, parts, args, m, active):
        t = parts[1]
        d, a, b = args
        self.set(d, np.copysign(self.val(b, t), self.val(a, t)), m)

    def _shift(self, parts, args, m, left):
        t = parts[1]
        d, a, b = args
        bits = _tbits(t)
        x = self.val(a, t)
        s = self.val(b, "u32").astype(np.uint64)
        if left:
            r = np.where(s >= bits, 0, x.view(_BITS[str(bits)]) << np.minimum(s, bits - 1).astype(_BITS[str(bits)]))
        elif t[0] == "s":
            r = x >> np.minimum(s, bits - 1).astype(x.dtype)
        else:
            r = np.where(s >= bits, 0, x >> np.minimum(s, bits - 1).astype(x.dtype))
        self.set(d, np.asarray(r).astype(_BITS[str(bits)]) if left else r, m)

    def op_shl(self, parts, args, m, active):
        self._shift(parts, args, m, True)

    def op_shr(self, parts, args, m, active):
        self._shift(parts, args, m, False)

    def op_bfe(self, parts, args, m, active):
        t = parts[1]
        d, a, b, c = args
        x = self.val(a, t).view(np.uint32).astype(np.int64)
        pos = self.val(b, "u32").astype(np.int64) & 255
        ln = self.val(c, "u32").astype(np.int64) & 255
        f = (x >> np.minimum(pos, 63)) & ((1 << np.minimum(ln, 32)) - 1)
        f = np.where(pos >= 32, 0, f)
        if t[0] == "s":
            sign = (f >> np.maximum(ln - 1, 0)) & 1
            f = np.where((ln > 0) & (sign == 1), f - (1 << ln), f)
        f = np.where(ln == 0, 0, f)
        self.set(d, f.astype(np.int64).astype(np.uint32), m)

    def op_bfi(self, parts, args, m, active):
        d, a, b, c, e = args
        x = self.val(a, "u32").astype(np.int64)
        y = self.val(b, "u32").astype(np.int64)
        pos = self.val(c, "u32").astype(np.int64)
        ln = self.val(e, "u32").astype(np.int64)
        mask = ((1 << ln) - 1) << pos
        r = (y & ~mask) | ((x << pos) & mask)
        self.set(d, (r & 0xFFFFFFFF).astype(np.uint32), m)

    # -- floats -----------------------------------------------------------------------------
    def _un(self, parts, args, m, fn):
        t = parts[-1]
        d, a = args
        with np.errstate(all="ignore"):
            self.set(d, fn(self.val(a, t)).astype(_np(t)), m)

    def op_sqrt(self, parts, args, m, active):
        self._un(parts, args, m, np.sqrt)

    def op_rsqrt(self, parts, args, m, active):
        self._un(parts, args, m, lambda x: 1 / np.sqrt(x))

    def op_rcp(self, parts, args, m, active):
        self._un(parts, args, m, lambda x: 1 / x)

    def op_ex2(self, parts, args, m, active):
        ftz = "ftz" in parts
        self._un(parts, args, m, lambda x: _ftz(np.exp2(x.astype(np.float64)).astype(x.dtype)) if ftz
                 else np.exp2(x.astype(np.float64)))

    def op_lg2(self, parts, args, m, active):
        self._un(parts, args, m, lambda x: np.log2(x.astype(np.float64)))

    def op_sin(self, parts, args, m, active):
        self._un(parts, args, m, lambda x: np.sin(x.astype(np.float64)))

    def op_cos(self, parts, args, m, active):
        self._un(parts, args, m, lambda x: np.cos(x.astype(np.float64)))

    def op_fma(self, parts, args, m, active):
        t = parts[-1]
        d, a, b, c = args
        if t in ("f16x2", "bf16x2"):  # each half as the 16-bit fma, on the halves' registers
            words = [self.val(x, "b32").astype(U32) for x in (a, b, c)]
            out = np.zeros(self.N, U32)
            for sh in (0, 16):
                hs = [(w >> U32(sh)) & U32(0xFFFF) for w in words]
                x = [self._fma16(h.astype(U16), t[:-2]) for h in hs]
                out |= self._fma16_done(x, t[:-2]).astype(U32) << U32(sh)
            self.set(d, out, m)
            return
        with np.errstate(all="ignore"):
            if t == "f32":
                r = fma_f32(self.val(a, t), self.val(b, t), self.val(c, t))
            elif t == "bf16":  # one rounding of the bf16 patterns, as fma.rn.bf16 (sm_80+)
                from gluon_trace import dtypes
                from gluon_trace.backends.interpreter.interpreter import fma
                x = [(self.val(v, "b16").astype(U32) << U32(16)).view(np.float32) for v in (a, b, c)]
                r = (np.asarray(fma(*x, dtypes.bfloat16), np.float32).view(U32) >> U32(16)).astype(U16)
            else:  # one rounding, as fma.rn.f64 / fma.rn.f16 (the interpreter's exact emulation)
                from gluon_trace import dtypes
                from gluon_trace.backends.interpreter.interpreter import fma
                ty = dtypes.float16 if t == "f16" else dtypes.float64
                r = fma(self.val(a, t), self.val(b, t), self.val(c, t), ty)
        self.set(d, r, m)

    @staticmethod
    def _fma16(h, t):
        """The 16-bit pattern ``h`` of type ``t`` ("f16" or "bf16") as float32."""
        if t == "f16":
            return h.view(np.float16).astype(np.float32)
        return (h.astype(U32) << U32(16)).view(np.float32)

    @staticmethod
    def _fma16_done(x, t):
        """fma of three 16-bit values (as float32) rounded once to ``t``; the result's bits."""
        from gluon_trace import dtypes
        from gluon_trace.backends.interpreter.interpreter import fma
        with np.errstate(all="ignore"):
            if t == "f16":
                return np.asarray(fma(*x, dtypes.float16), np.float16).view(U16)
            return (np.asarray(fma(*x, dtypes.bfloat16), np.float32).view(U32) >> U32(16)).astype(U16)

    def op_testp(self, parts, args, m, active):
        d, a = args
        x = self.val(a, parts[-1])
        if parts[1] == "infinite":
            self.set(d, np.isinf(x), m)
        else:
            raise NotImplementedError(parts)

    def op_setp(self, parts, args, m, active):
        cmp, t = parts[1], parts[-1]
        bool_op = parts[2] if len(parts) == 4 else None  # setp.CmpOp.BoolOp.type d, a, b, c
        d, a, b = args[:3]
        x, y = self.val(a, t), self.val(b, t)
        with np.errstate(all="ignore"):
            r = {"lt": x < y, "le": x <= y, "gt": x > y, "ge": x >= y, "eq": x == y, "ne": x != y,
                 "neu": ~(x == y), "nan": np.isnan(x) | np.isnan(y) if t[0] == "f" else x != x}[cmp]
        if bool_op is not None:
            c = self.val(args[3], "pred").astype(bool)
            r = {"and": r & c, "or": r | c, "xor": r ^ c}[bool_op]
        self.set(d, r, m)

    def op_cvt(self, parts, args, m, active):
        if any(p in _FP8 for p in parts[1:]):
            return self._cvt_fp8(parts, args, m)
        mods = [p for p in parts[1:] if p in ("rn", "rzi", "rmi", "rpi", "rni", "rz", "ftz", "sat")]
        types = [p for p in parts[1:] if p not in mods]
        dt_, st_ = types
        if dt_ in ("bf16x2", "f16x2"):  # d = {lo: round(b), hi: round(a)}
            d, a, b = args
            lo, hi = (_round16(self.val(x, st_), dt_[:-2]).astype(np.uint32) for x in (b, a))
            self.set(d, lo | (hi << np.uint32(16)), m)
            return
        d, a = args
        if st_ == "bf16" and dt_ == "f32" and not mods:  # exact: the bits become the high half
            self.set(d, self._fma16(self.val(a, "b16").astype(np.uint16), "bf16"), m)
            return
        x = self.val(a, st_)
        with np.errstate(all="ignore"):
            if dt_ == "bf16":
                self.set(d, _round16(x, "bf16"), m)
                return
            if st_ == "bf16":
                raise NotImplementedError("cvt from bf16")
            if dt_[0] == "f":
                if st_[0] == "f" and dt_ == st_:
                    r = {"rmi": np.floor, "rpi": np.ceil, "rzi": np.trunc, "rni": np.rint}[mods[0]](x)
                elif st_ in ("s64", "u64") and dt_ == "f16":
                    r = x.astype(np.float64).astype(np.float16)
                else:
                    r = x.astype(_np(dt_))
                    if "rz" in mods and st_[0] == "f":  # toward zero: step back where RN went out
                        out = np.abs(r.astype(np.float64)) > np.abs(x.astype(np.float64))
                        r = np.where(out & np.isfinite(x), np.nextafter(r, _np(dt_)(0)), r)
                    elif "rz" in mods:  # from an integer: compare exactly in Python ints
                        out = np.array([abs(int(v)) > abs(int(w)) for v, w in zip(r.tolist(), x.tolist())],
                                       bool).reshape(r.shape)
                        r = np.where(out, np.nextafter(r, _np(dt_)(0)), r)
                self.set(d, r, m)
                return
            # to an integer type
            if st_[0] == "f":
                xi = np.trunc(x.astype(np.float64))
                lo, hi = int(np.iinfo(_np(dt_)).min), int(np.iinfo(_np(dt_)).max)
                # saturate in Python ints: float(hi) of a 64-bit type rounds past the range. NaN
                # gives the sign bit alone (0x80000000 / 0x8000000000000000), as an H100 does
                nan_bits = 1 << (np.dtype(_np(dt_)).itemsize * 8 - 1)
                nan = lo if dt_[0] == "s" else nan_bits
                r = np.array([nan if v != v else min(max(int(v), lo), hi) if abs(v) != np.inf
                              else (hi if v > 0 else lo) for v in xi.tolist()], dtype=_np(dt_))
            else:
                r = x.astype(_np(dt_))
            # narrow destinations live sign/zero extended in their register
            w = self.k.regs[d]
            wide = {"b32": np.int64, "b64": np.int64, "b16": np.int64}[w]
            self.set(d, r.astype(wide if dt_[0] == "s" else np.uint64), m)

    def _cvt_fp8(self, parts, args, m):
        """cvt.rn.f16x2.{e4m3x2,e5m2x2} d, a (two bytes -> two halves, exact) and
        cvt.rn.satfinite.{e4m3x2,e5m2x2}.f32 d, a, b (a -> the high byte, b -> the low one),
        by the PTX ISA's definitions (fp8 rounding from gluon_trace.fp8, checked there against
        ml_dtypes)."""
        from gluon_trace import fp8
        if parts[2] == "f16x2":
            name = _FP8[parts[3]]
            h = self.val(args[1], "b16").astype(np.uint32)
            lo = fp8.decode((h & 0xFF).astype(np.uint8), name).astype(np.float16).view(np.uint16)
            hi = fp8.decode((h >> 8).astype(np.uint8), name).astype(np.float16).view(np.uint16)
            self.set(args[0], lo.astype(np.uint32) | (hi.astype(np.uint32) << 16), m)
            return None
        if "satfinite" not in parts or parts[-1] != "f32":
            raise NotImplementedError(".".join(parts))
        name = _FP8[parts[3]]
        a = fp8.encode(self.val(args[1], "f32"), name).astype(np.uint16)
        b = fp8.encode(self.val(args[2], "f32"), name).astype(np.uint16)
        self.set(args[0], (a << 8) | b, m)
        return None

    def op_cvta(self, parts, args, m, active):
        d, a = args
        self.set(d, np.zeros(self.N, np.uint64), m)

    # -- memory -----------------------------------------------------------------------------
    def _addr(self, a: str):
        inner = a[1:-1]
        base, _, off = inner.partition("+")
        off = int(off) if off else 0
        if base == "gt_smem":
            return np.full(self.N, off, np.int64)
        if base in self.k.regs:
            return self.get(base).astype(np.int64) + off
        if base in self.params:
            return base
        raise NotImplementedError(a)

    def _local_addr(self, a: str, n: int):
        """Each thread's offset of ``[array+imm]`` or ``[reg+imm]`` in its local bytes."""
        base, _, off = a[1:-1].partition("+")
        if base in self.k.local:
            ad = np.full(self.N, self.k.local[base], np.int64)
        elif base in self.k.regs:
            ad = self.get(base).astype(np.int64)
        else:
            raise NotImplementedError(f"ptxsim: local address {a}")
        ad = ad + (int(off) if off else 0)
        if (ad % (n if n <= 8 else 8)).any() or (ad < 0).any() or (ad + n > self.local.shape[1]).any():
            raise IndexError(f"local access at {a} ({n} bytes)")
        return ad

    def _local_bytes(self, ad, n: int):
        """(rows, columns) indexing ``n`` bytes at each thread's local offset ``ad``."""
        return np.arange(self.N)[:, None], ad[:, None] + np.arange(n)

    def op_ld(self, parts, args, m, active):
        space = parts[1]
        t = parts[-1]
        d, a = args
        outs = [x.strip() for x in d[1:-1].split(",")] if d.startswith("{") else [d]
        if space == "param":
            v = self.params[a[1:-1]]
            pt = self.ptypes[a[1:-1]]
            arr = np.full(self.N, v, dtype=_np(pt) if pt[0] != "f" else _np(pt))
            if pt[0] in "su" and self.k.regs[outs[0]] != "pred":
                arr = arr.astype(np.int64 if pt[0] == "s" else np.uint64)
            self.set(outs[0], arr, m)
            return None
        nb = _tbits(t) // 8
        if space == "local":
            ad = self._local_addr(a, nb * len(outs))
            vals = [np.ascontiguousarray(self.local[self._local_bytes(ad + j * nb, nb)])
                    .view(_BITS[str(nb * 8)])[:, 0].astype(np.uint64) for j in range(len(outs))]
            idx = ()
        else:
            addrs = self._addr(a)
            idx = np.nonzero(m)[0]
            vals = [np.zeros(self.N, np.uint64) for _ in outs]
        for i in idx:
            for j in range(len(outs)):
                ad = int(addrs[i]) + j * nb
                if space == "shared":
                    c = self.cta[i]
                    if ad % nb or ad + nb > self.smem.shape[1]:
                        raise IndexError(f"shared access at {ad}")
                    raw = self.smem[c, ad:ad + nb].tobytes()
                elif space == "global" or space == "relaxed":
                    raw = self.mem.read(ad, nb)
                else:
                    raise NotImplementedError(space)
                vals[j][i] = int.from_bytes(raw, "little")
        for o, v in zip(outs, vals):
            bits = nb * 8
            x = v.astype(_BITS[str(bits)])
            if t[0] == "s":
                x = x.view(_np(t)).astype(np.int64)
            elif t[0] == "f":
                x = x.view(_np(t))
            self.set(o, x, m)

    def op_st(self, parts, args, m, active):
        space = parts[1]
        t = parts[-1]
        a, s = args
        ins = [x.strip() for x in s[1:-1].split(",")] if s.startswith("{") else [s]
        nb = _tbits(t) // 8
        bits = nb * 8
        vals = [self.val(x, f"b{bits}") for x in ins]
        if space == "local":
            ad = self._local_addr(a, nb * len(ins))
            for j, v in enumerate(vals):
                at = self._local_bytes(ad + j * nb, nb)
                cur = np.ascontiguousarray(self.local[at]).view(_BITS[str(bits)])[:, 0]
                new = np.where(m, np.asarray(v).view(_BITS[str(bits)]), cur)
                self.local[at] = new.reshape(-1, 1).view(np.uint8)
            return None
        addrs = self._addr(a)
        for i in np.nonzero(m)[0]:
            for j, v in enumerate(vals):
                ad = int(addrs[i]) + j * nb
                data = int(v[i]).to_bytes(nb, "little")
                if space == "shared":
                    if ad % nb or ad + nb > self.smem.shape[1]:
                        raise IndexError(f"shared access at {ad}")
                    self.smem[self.cta[i], ad:ad + nb] = np.frombuffer(data, np.uint8)
                elif space == "global":
                    self.mem.write(ad, data)
                elif space == "local":
                    pass
                else:
                    raise NotImplementedError(space)

    def op_atom(self, parts, args, m, active):
        kind = [p for p in parts if p in ("add", "max", "min", "exch", "and", "or", "xor", "cas")][0]
        t = parts[-1]
        nb = _tbits(t) // 8
        d, a = args[0], args[1]
        addrs = self._addr(a)
        ops = [self.val(x, t if t not in ("f16", "bf16") else "b16") for x in args[2:]]
        out = np.zeros(self.N, np.uint64)
        for i in np.nonzero(m)[0]:
            ad = int(addrs[i])
            raw = self.mem.read(ad, nb)
            old_bits = int.from_bytes(raw, "little")
            nt = _np(t) if t not in ("f16", "bf16") else np.uint16
            old = np.frombuffer(raw, nt)[0]
            if kind == "cas":
                new = ops[1][i] if old_bits == int(np.asarray(ops[0][i]).view(_BITS[str(nb * 8)])) else old
            elif kind == "exch":
                new = ops[0][i]
            elif kind == "add":
                if t in ("f16", "bf16"):  # via f32: as rounding once (f32 has over twice the bits)
                    a, b = (self._fma16(np.array([x], np.uint16), t) for x in (old, ops[0][i]))
                    new = _round16(a + b, t)[0]
                else:
                    with np.errstate(all="ignore"):
                        new = old + ops[0][i]
            elif kind == "max":
                new = max(old, ops[0][i])
            elif kind == "min":
                new = min(old, ops[0][i])
            else:
                new = {"and": lambda x, y: x & y, "or": lambda x, y: x | y, "xor": lambda x, y: x ^ y}[kind](old, ops[0][i])
            self.mem.write(ad, np.asarray(new, dtype=nt).tobytes())
            out[i] = old_bits
        self.set(d, out.astype(_BITS[str(nb * 8)]), m)

    def op_shfl(self, parts, args, m, active):
        mode = parts[2]
        d, a, b, c, mask = args[:5]
        dst = d.split("|")[0]
        x = self.get(a) if a in self.k.regs else self.val(a, "b32")
        bval = self.val(b, "u32").astype(np.int64) & 31
        cval = self.val(c, "u32").astype(np.int64)
        lane = (self.tid % 32).astype(np.int64)
        segmask = (cval >> 8) & 31
        maxl = (lane & segmask) | ((cval & 31) & ~segmask)
        minl = lane & segmask
        if mode == "up":
            j = lane - bval
            ok = j >= maxl
        elif mode == "down":
            j = lane + bval
            ok = j <= maxl
        elif mode == "bfly":
            j = lane ^ bval
            ok = j <= maxl
        else:
            j = minl | (bval & ~segmask)
            ok = j <= maxl
        j = np.where(ok, j, lane)
        src = np.arange(self.N) - lane + j
        if not active[src[m]].all():
            raise RuntimeError("shfl.sync reads a lane that is not executing it")
        self.set(dst, x[src], m)


def _ftz(x):
    tiny = np.finfo(x.dtype).tiny
    return np.where(np.abs(x) < tiny, np.zeros_like(x), x)


def run(ptx: str, grid, args: list, smem_bytes: int) -> None:
    """Run a kernel on numpy arrays (changed in place) and scalars."""
    k = Kernel(ptx)
    mem = Mem()
    params = []
    for a in args:
        if isinstance(a, np.ndarray):
            params.append(mem.add(a))
        else:
            params.append(a)
    Sim(k, grid, params, mem, smem_bytes).run()
