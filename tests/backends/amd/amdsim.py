"""A small AMDGCN simulator for the instructions the AMD backend emits (test helper).

It runs the final machine code (after register allocation, s_waitcnt and hazard
passes) on numpy buffers, one workgroup at a time, its waves in turn between
barriers. Memory results arrive late: a load's destination registers are *poisoned*
until an ``s_waitcnt`` retires the load (in issue order, per counter), and touching a
poisoned register is an error -- so a missing or too-weak wait fails the test instead
of silently reading the right value. A barrier with LDS traffic outstanding is an
error too. Transcendentals are modelled exactly (the hardware is ~1 ulp), so results
are compared with the interpreter's within a tolerance.
"""
from __future__ import annotations

import struct

import numpy as np

from gluon_trace import dtypes
from gluon_trace.backends.interpreter.interpreter import fma as _fma
from gluon_trace.backends.amd.mir import Fixed, Imm, Inst, Label, Neg, Reg, Sub
from amdsim_fp8 import vector_op as fp8_op
import amdsim_div
import amdsim_dma
from amdsim_mma import step as mma_step

M32 = 0xFFFFFFFF


class SimError(AssertionError):
    pass


def f32(u):
    return np.asarray(u, np.uint32).view(np.float32)


def u32(f):
    return np.asarray(f, np.float32).view(np.uint32)


def f64(u):
    return np.asarray(u, np.uint64).view(np.float64)


def u64(f):
    return np.asarray(f, np.float64).view(np.uint64)


class Memory:
    """Buffers at addresses (k + 1) << 36."""

    def __init__(self):
        self.bufs = []

    def add(self, raw: np.ndarray) -> int:
        self.bufs.append(np.frombuffer(bytearray(raw.tobytes()), np.uint8).copy())
        return (len(self.bufs)) << 36

    def _loc(self, addr, n):
        k = (int(addr) >> 36) - 1
        off = int(addr) & ((1 << 36) - 1)
        if not 0 <= k < len(self.bufs) or off + n > self.bufs[k].size:
            raise SimError(f"access of {n} bytes at {addr:#x} is outside every buffer")
        if off % min(n, 4):
            raise SimError(f"misaligned access of {n} bytes at {addr:#x}")
        return self.bufs[k], off

    def read(self, addr, n) -> int:
        b, o = self._loc(addr, n)
        return int.from_bytes(b[o:o + n].tobytes(), "little")

    def write(self, addr, n, v) -> None:
        b, o = self._loc(addr, n)
        b[o:o + n] = np.frombuffer(int(v & ((1 << (8 * n)) - 1)).to_bytes(n, "little"), np.uint8)


def _sext(v, bits):
    v &= (1 << bits) - 1
    return v - (1 << bits) if v >> (bits - 1) else v


class Wave:
    def __init__(self, sim, wid, wgid, nvgpr):
        self.sim, self.wid, self.W = sim, wid, sim.W
        self.v = np.zeros((max(nvgpr, 1) + 8, self.W), np.uint32)
        self.s = np.zeros(128, np.uint64)
        self.exec = (1 << self.W) - 1
        self.vcc = 0
        self.scc = 0
        self.m0 = 0
        self.pc = 0
        self.done = False
        self.events = []          # (counter, [(file, index, value)]) in issue order
        self.poison = set()
        tid = np.arange(self.W, dtype=np.uint32) + wid * self.W
        self.v[0] = tid
        init_sgprs(self, sim, wgid)  # as the descriptor asks (see "Private segment" below)

    # -- operands ---------------------------------------------------------------------------
    def units(self, x):
        if isinstance(x, Neg):
            x = x.x
        if isinstance(x, Reg):
            return [(x.cls, x.phys + k) for k in range(x.size)]
        if isinstance(x, Sub):
            return [(x.reg.cls, x.reg.phys + x.index)]
        if isinstance(x, Fixed):
            return [("vcc", 0)] if x.name.startswith("vcc") else []
        return []

    def check(self, xs):
        for x in xs:
            for u in self.units(x):
                if u in self.poison:
                    raise SimError(f"{u} read or written while its load is in flight (missing "
                                   f"s_waitcnt) in `{self.sim.text(self.pc - 1)}`")

    def mask_lanes(self, m):
        return np.array([(m >> i) & 1 for i in range(self.W)], bool)

    def lanes_mask(self, b):
        return sum(1 << i for i in range(self.W) if b[i])

    def read(self, x, wide=False):
        """Per-lane values as uint64 (a 2-dword operand when ``wide``)."""
        neg = isinstance(x, Neg)
        if neg:
            x = x.x
        if isinstance(x, Imm):
            return np.full(self.W, x.bits, np.uint64), neg
        if isinstance(x, Fixed):
            if x.name.startswith("vcc"):
                return np.full(self.W, self.vcc, np.uint64), neg
            if x.name.startswith("exec"):
                return np.full(self.W, self.exec, np.uint64), neg
            raise SimError(f"cannot read {x.name}")
        if isinstance(x, Sub):
            base, size, cls = x.reg.phys + x.index, 1, x.reg.cls
        else:
            base, size, cls = x.phys, x.size, x.cls
        if cls == "v":
            val = self.v[base].astype(np.uint64)
            if size == 2:
                val |= self.v[base + 1].astype(np.uint64) << np.uint64(32)
        else:
            val = int(self.s[base])
            if size == 2:
                val |= int(self.s[base + 1]) << 32
            val = np.full(self.W, val, np.uint64)
        return val, neg

    def sval(self, x) -> int:
        if isinstance(x, Imm):
            return x.bits
        if isinstance(x, Fixed):
            if x.name.startswith("vcc"):
                return self.vcc
            if x.name.startswith("exec"):
                return self.exec
            if x.name == "m0":
                return self.m0
        if isinstance(x, Sub):
            return int(self.s[x.reg.phys + x.index])
        if x.size == 1:
            return int(self.s[x.phys])
        return sum(int(self.s[x.phys + k]) << (32 * k) for k in range(x.size))

    def swrite(self, x, val: int):
        if isinstance(x, Fixed):
            if x.name.startswith("vcc"):
                self.vcc = val & ((1 << self.W) - 1)
            elif x.name.startswith("exec"):
                self.exec = val & ((1 << self.W) - 1)
            elif x.name == "m0":
                self.m0 = val & M32
            return
        if isinstance(x, Sub):
            self.s[x.reg.phys + x.index] = val & M32
            return
        for k in range(x.size):
            self.s[x.phys + k] = (val >> (32 * k)) & M32

    def vwrite(self, x, vals, mask=None):
        act = self.mask_lanes(self.exec) if mask is None else mask
        vals = np.asarray(vals).astype(np.uint64) if np.asarray(vals).dtype != np.uint64 else vals
        if isinstance(x, Fixed):  # a lane mask result (v_cmp into vcc)
            raise SimError("vwrite to fixed")
        if isinstance(x, Reg) and x.cls == "s":  # lane mask into an SGPR (v_cmp_e64)
            self.swrite(x, self.lanes_mask(vals.astype(bool) & act))
            return
        if isinstance(x, Sub):
            base, size = x.reg.phys + x.index, 1
        else:
            base, size = x.phys, x.size
        for k in range(size):
            part = ((vals >> np.uint64(32 * k)) & np.uint64(M32)).astype(np.uint32)
            self.v[base + k] = np.where(act, part, self.v[base + k])

    # -- events -------------------------------------------------------------------------------
    def issue(self, counter, writes):
        mx = {"vm": 63, "lgkm": self.sim.t.lgkmcnt_max, "vs": 63}[counter]
        while sum(1 for c, _ in self.events if c == counter) >= mx:
            self.retire_oldest(counter)
        self.events.append((counter, writes))
        for file, idx, _ in writes:
            self.poison.add((file, idx))

    def retire_oldest(self, counter):
        for k, (c, writes) in enumerate(self.events):
            if c == counter:
                del self.events[k]
                for file, idx, val in writes:
                    if file == "v":
                        lanes, data = val
                        self.v[idx] = np.where(lanes, data, self.v[idx])
                    elif file == "lds":  # an LDS DMA's bytes land (amdsim_dma.py)
                        val()
                    else:
                        self.s[idx] = val
                    self.poison.discard((file, idx))
                return

    def wait(self, counter, n):
        while sum(1 for c, _ in self.events if c == counter) > n:
            self.retire_oldest(counter)

    def vdest(self, dst, vals, lanes):
        """Deferred VGPR writes of a memory op: [(file, index, (lanes, dword values))]."""
        out = []
        base, size = (dst.reg.phys + dst.index, 1) if isinstance(dst, Sub) else (dst.phys, dst.size)
        for k in range(size):
            part = ((vals >> np.uint64(32 * k)) & np.uint64(M32)).astype(np.uint32)
            out.append(("v", base + k, (lanes, part)))
        return out


class LdsRaceCheck:
    """Which wave wrote / read each LDS byte since the last s_barrier: an access of a byte that
    another wave wrote (or, for a write, read or wrote) since then is a race -- waves between
    two barriers run in no fixed order. So a missing barrier fails instead of passing by luck."""

    def __init__(self, size):
        self.epoch = 0
        self.w_epoch = np.full(size, -1, np.int64)
        self.w_wave = np.full(size, -1, np.int64)
        self.r_epoch = np.full(size, -1, np.int64)
        self.r_wave = np.full(size, -1, np.int64)   # -2: read by several waves

    def access(self, w, addrs, n, pc, data=None, lds=None):
        """``data``: the bytes a write stores (lanes x n); rewriting a byte with the value it
        holds is no race (copies of an element written by several waves)."""
        write = data is not None
        if not len(addrs):
            return
        idx = (np.asarray(addrs, np.int64)[:, None] + np.arange(n)).ravel()
        keep = (idx >= 0) & (idx < self.w_epoch.size)
        idx = idx[keep]
        e, me = self.epoch, w.wid
        raw = (self.w_epoch[idx] == e) & (self.w_wave[idx] != me)
        war = write & (self.r_epoch[idx] == e) & (self.r_wave[idx] != me)
        bad = raw | war
        if write:
            bad &= lds[idx] != np.asarray(data, np.uint8).ravel()[keep]
        if bad.any():
            b = int(idx[np.nonzero(bad)[0][0]])
            other = int(self.w_wave[b]) if raw[np.nonzero(bad)[0][0]] else int(self.r_wave[b])
            what = "written" if raw[np.nonzero(bad)[0][0]] else "read"
            raise SimError(f"LDS race at pc {pc}: wave {me} {'writes' if write else 'reads'} byte {b}, "
                           f"{what} by wave {other if other >= 0 else 'several'} since the last s_barrier")
        if write:
            self.w_epoch[idx] = e
            self.w_wave[idx] = me
        else:
            seen = self.r_epoch[idx] == e
            self.r_wave[idx] = np.where(seen & (self.r_wave[idx] != me), -2, me)
            self.r_epoch[idx] = e


class Sim:
    # the LDS access check every work-group gets (amdsim_races.RaceSim: the strict one)
    lds_check = LdsRaceCheck

    def __init__(self, code, target, wave, lds_size, kernarg_bytes, mem: Memory, num_warps, nvgpr):
        self.code = [i for i in code]
        self.labels = {x.name: k for k, x in enumerate(self.code) if isinstance(x, Label)}
        self.t = target
        self.W = wave
        self.mem = mem
        self.kernarg = mem.add(np.frombuffer(kernarg_bytes, np.uint8))
        self.lds_size = lds_size
        self.nw = num_warps
        self.nvgpr = nvgpr
        self.steps = 0
        self.abi = Abi()  # simulate() sets it from the kernel descriptor

    def text(self, pc):
        from gluon_trace.backends.amd.mir import render_inst
        i = self.code[pc]
        return render_inst(i) if isinstance(i, Inst) else repr(i)

    def run(self, grid, max_steps=5_000_000):
        for z in range(grid[2]):
            for y in range(grid[1]):
                for x in range(grid[0]):
                    self.run_group((x, y, z), max_steps)

    def run_group(self, wgid, max_steps):
        self.lds = np.zeros(max(self.lds_size, 4), np.uint8)
        self.lds_track = self.lds_check(self.lds.size)
        self.lds_pending = np.zeros(self.lds.size, np.int32)  # bytes LDS DMAs have yet to write
        waves = [Wave(self, w, wgid, self.nvgpr) for w in range(self.nw)]
        while not all(w.done for w in waves):
            self.lds_track.epoch += 1  # every wave has passed the same s_barrier
            for w in waves:
                while not w.done:
                    i = self.code[w.pc]
                    w.pc += 1
                    if isinstance(i, Label):
                        continue
                    self.steps += 1
                    if self.steps > max_steps:
                        raise SimError("simulation ran too long (infinite loop?)")
                    if i.op == "s_barrier":
                        if any(c == "lgkm" for c, _ in w.events):
                            raise SimError(f"s_barrier with LDS operations in flight at pc {w.pc - 1}")
                        break
                    self.execute(w, i)
            alive = [w for w in waves if not w.done]
            if alive and any(w.done for w in waves):
                raise SimError("some waves ended while others wait at a barrier")

    # -- execution --------------------------------------------------------------------------------
    def execute(self, w: Wave, i: Inst):
        if mma_step(self, w, i):  # MFMA/WMMA and their wait states: amdsim_mma.py
            return
        op = i.op
        if op in ("s_nop", "s_waitcnt_depctr", "s_waitcnt_vscnt"):
            return
        if op == "s_waitcnt":
            for part in i.suffix.split():
                name, n = part.rstrip(")").split("(")
                w.wait({"vmcnt": "vm", "lgkmcnt": "lgkm"}[name], int(n))
            return
        if op == "s_endpgm":
            w.done = True
            return
        w.check(i.uses + i.defs + i.imp)
        if op == "s_branch":
            w.pc = self.labels[i.target]
            return
        if op.startswith("s_cbranch"):
            cond = {"s_cbranch_scc0": w.scc == 0, "s_cbranch_scc1": w.scc == 1,
                    "s_cbranch_execnz": w.exec != 0, "s_cbranch_execz": w.exec == 0,
                    "s_cbranch_vccnz": w.vcc != 0}[op]
            if cond:
                w.pc = self.labels[i.target]
            return
        if op.startswith("s_"):
            return self.salu(w, i)
        if op.startswith(("global_", "ds_")):
            return self.mem_op(w, i)
        if amdsim_dma.is_dma(i):
            return amdsim_dma.step(self, w, i)
        if op.startswith(("scratch_", "buffer_")):
            return scratch_op(self, w, i)
        return self.valu(w, i)

    # -- scalar ALU ------------------------------------------------------------------------------
    def salu(self, w: Wave, i: Inst):
        op, d = i.op, i.defs[0] if i.defs else None
        if op in ("s_memrealtime", "s_memtime", "s_sendmsg_rtn_b64"):  # a clock: 100 ticks a read, never back
            self.clock = getattr(self, "clock", 0) + 100
            w.issue("lgkm", [("s", d.phys, self.clock & M32), ("s", d.phys + 1, self.clock >> 32)])
            return
        a = [w.sval(x) for x in i.uses] if not op.startswith("s_load") else None
        if op.startswith("s_load_dword"):
            n = 2 if op.endswith("x2") else 4 if op.endswith("x4") else 1
            base = w.sval(i.uses[0])
            addr = base + i.uses[1].bits
            vals = [self.mem.read(addr + 4 * k, 4) for k in range(n)]
            regs = [(d.phys + k) for k in range(n)] if isinstance(d, Reg) else [d.reg.phys + d.index]
            w.issue("lgkm", [("s", r, v) for r, v in zip(regs, vals)])
            return
        W64 = (1 << 64) - 1
        if op in ("s_mov_b32", "s_mov_b64"):
            return w.swrite(d, a[0])
        if op.startswith("s_and_saveexec"):
            old = w.exec
            w.exec = a[0] & old
            w.swrite(d, old)
            w.scc = int(w.exec != 0)
            return
        if op.startswith("s_andn2"):
            r = a[0] & ~a[1] & W64
            w.swrite(d, r)
            w.scc = int(r != 0)
            return
        if op.startswith("s_cmp_"):
            _, _, pred, ty = op.split("_")
            x, y = a
            if ty == "i32":
                x, y = _sext(x, 32), _sext(y, 32)
            w.scc = int({"eq": x == y, "lg": x != y, "lt": x < y, "le": x <= y, "gt": x > y,
                         "ge": x >= y}[pred])
            return
        if op.startswith("s_cselect"):
            return w.swrite(d, a[0] if w.scc else a[1])
        x = a[0]
        y = a[1] if len(a) > 1 else 0
        if op == "s_add_u32":
            r = x + y
            w.scc = int(r > M32)
        elif op == "s_addc_u32":
            r = x + y + w.scc
            w.scc = int(r > M32)
        elif op == "s_sub_u32":
            r = x - y
            w.scc = int(y > x)
        elif op == "s_subb_u32":
            r = x - y - w.scc
            w.scc = int(y + w.scc > x)
        elif op == "s_mul_i32":
            r = x * y
        elif op == "s_mul_hi_u32":
            r = (x * y) >> 32
        elif op in ("s_and_b32", "s_or_b32", "s_xor_b32", "s_and_b64", "s_or_b64", "s_xor_b64"):
            r = {"and": x & y, "or": x | y, "xor": x ^ y}[op.split("_")[1]]
            w.scc = int(r != 0)
        elif op == "s_lshl_b32":
            r = (x << (y & 31)) & M32
            w.scc = int(r != 0)
        elif op == "s_lshr_b32":
            r = x >> (y & 31)
            w.scc = int(r != 0)
        elif op == "s_ashr_i32":
            r = _sext(x, 32) >> (y & 31)
            w.scc = int(r != 0)
        elif op == "s_lshl_b64":
            r = (x << (y & 63)) & W64
        elif op == "s_lshr_b64":
            r = x >> (y & 63)
        elif op == "s_ashr_i64":
            r = _sext(x, 64) >> (y & 63)
        elif op in ("s_min_i32", "s_max_i32"):
            r = (min if "min" in op else max)(_sext(x, 32), _sext(y, 32))
        elif op in ("s_min_u32", "s_max_u32"):
            r = (min if "min" in op else max)(x, y)
        elif op == "s_abs_i32":
            r = abs(_sext(x, 32))
        elif op == "s_sext_i32_i8":
            r = _sext(x, 8)
        elif op == "s_sext_i32_i16":
            r = _sext(x, 16)
        else:
            raise SimError(f"no simulation for {op}")
        w.swrite(d, r & (W64 if d.size == 2 else M32))

    # -- memory ---------------------------------------------------------------------------------
    def _addrs(self, w, i):
        vaddr, saddr = i.uses[0], i.uses[-1]
        imm = 0
        for part in i.suffix.split():
            if part.startswith("offset:"):
                imm = int(part[len("offset:"):], 0)
        if isinstance(saddr, str):  # off
            a, _ = w.read(vaddr)
            return (a.astype(np.uint64) + np.uint64(imm & (2**64 - 1))) & np.uint64(2**64 - 1)
        base = w.sval(saddr)
        off, _ = w.read(vaddr)
        return ((off & np.uint64(M32)) + np.uint64(base) + np.uint64(imm & (2**64 - 1))) \
            & np.uint64(2**64 - 1)

    def mem_op(self, w: Wave, i: Inst):
        op = i.op
        act = w.mask_lanes(w.exec)
        if op.startswith("ds_"):
            return self.lds_op(w, i, act)
        addrs = self._addrs(w, i)
        if op in ("global_load_dwordx3", "global_load_dwordx4"):
            n = 3 if op.endswith("3") else 4
            d = i.defs[0]
            writes = []
            for k in range(n):
                vals = np.zeros(self.W, np.uint64)
                for l in range(self.W):
                    if act[l]:
                        vals[l] = self.mem.read(int(addrs[l]) + 4 * k, 4)
                writes.append(("v", d.phys + k, (act, vals.astype(np.uint32))))
            w.issue("vm", writes)
            return
        if op in ("global_store_dwordx3", "global_store_dwordx4"):
            n = 3 if op.endswith("3") else 4
            d = i.uses[1]
            for l in range(self.W):
                if act[l]:
                    for k in range(n):
                        self.mem.write(int(addrs[l]) + 4 * k, 4, int(w.v[d.phys + k][l]))
            w.issue("vs" if self.t.stores_use_vscnt else "vm", [])
            return
        if op.startswith("global_load"):
            kind = op[len("global_load_"):]
            n, signed = {"dword": (4, False), "dwordx2": (8, False), "ushort": (2, False),
                         "sshort": (2, True), "ubyte": (1, False), "sbyte": (1, True)}[kind]
            vals = np.zeros(self.W, np.uint64)
            for l in range(self.W):
                if act[l]:
                    v = self.mem.read(int(addrs[l]), n)
                    if signed:
                        v = _sext(v, 8 * n) & M32
                    vals[l] = v
            w.issue("vm", w.vdest(i.defs[0], vals, act))
            return
        if op.startswith("global_store"):
            n = {"dword": 4, "dwordx2": 8, "short": 2, "byte": 1}[op[len("global_store_"):]]
            data, _ = w.read(i.uses[1])
            for l in range(self.W):
                if act[l]:
                    self.mem.write(int(addrs[l]), n, int(data[l]))
            w.issue("vs" if self.t.stores_use_vscnt else "vm", [])
            return
        if op.startswith("global_atomic"):
            return self.atomic(w, i, act, addrs)
        raise SimError(f"no simulation for {op}")

    def atomic(self, w, i, act, addrs):
        kind = i.op[len("global_atomic_"):]
        wide = kind.endswith("_x2") or kind.endswith("f64")
        n = 8 if wide else 4
        base = kind.replace("_x2", "")
        data, _ = w.read(i.uses[1])
        if base == "cmpswap":
            if wide:
                reg = i.uses[1]
                src = (w.v[reg.phys].astype(np.uint64) | (w.v[reg.phys + 1].astype(np.uint64) << np.uint64(32)))
                cmp = (w.v[reg.phys + 2].astype(np.uint64) | (w.v[reg.phys + 3].astype(np.uint64) << np.uint64(32)))
            else:
                src, cmp = data & np.uint64(M32), data >> np.uint64(32)
        old = np.zeros(self.W, np.uint64)
        for l in range(self.W):
            if not act[l]:
                continue
            a = int(addrs[l])
            cur = self.mem.read(a, n)
            old[l] = cur
            x = int(data[l]) & ((1 << (8 * n)) - 1)
            bits = 8 * n
            if base == "cmpswap":
                new = int(src[l]) if cur == int(cmp[l]) else cur
            elif base == "add":
                new = cur + x
            elif base == "swap":
                new = x
            elif base in ("and", "or", "xor"):
                new = {"and": cur & x, "or": cur | x, "xor": cur ^ x}[base]
            elif base in ("smax", "smin"):
                new = (max if base == "smax" else min)(_sext(cur, bits), _sext(x, bits))
            elif base in ("umax", "umin"):
                new = (max if base == "umax" else min)(cur, x)
            elif base in ("add_f32", "max_f32", "min_f32"):
                c, v = f32(np.uint32(cur)), f32(np.uint32(x))
                r = c + v if base == "add_f32" else fminmax(base, c, v)
                new = int(u32(r))
            elif base in ("add_f64", "max_f64", "min_f64"):
                c, v = f64(np.uint64(cur)), f64(np.uint64(x))
                r = c + v if base == "add_f64" else fminmax(base, c, v)
                new = int(u64(r))
            else:
                raise SimError(f"no simulation for atomic {base}")
            self.mem.write(a, n, new & ((1 << bits) - 1))
        w.issue("vm", w.vdest(i.defs[0], old, act))

    def lds_op(self, w, i, act):
        op = i.op
        off = int(i.suffix.split("offset:")[1].split()[0], 0) if "offset:" in i.suffix else 0
        if op == "ds_swizzle_b32":
            data, _ = w.read(i.uses[0])
            and_m, or_m, xor_m = off & 0x1F, (off >> 5) & 0x1F, (off >> 10) & 0x1F
            lanes = np.arange(self.W)
            src = (lanes & ~31) | ((((lanes & 31) & and_m) | or_m) ^ xor_m)
            w.issue("lgkm", w.vdest(i.defs[0], data[src], act))
            return
        if op == "ds_bpermute_b32":
            addr, _ = w.read(i.uses[0])
            data, _ = w.read(i.uses[1])
            src = ((addr >> np.uint64(2)) % np.uint64(self.W)).astype(np.int64)
            w.issue("lgkm", w.vdest(i.defs[0], data[src], act))
            return
        addr, _ = w.read(i.uses[0])
        if op.startswith(("ds_read2", "ds_write2")):
            return self.lds_op2(w, i, act, addr)
        d16_hi = op.endswith("_d16_hi")  # ds_write_b16_d16_hi: the data's high half
        kind = op.removesuffix("_d16_hi").split("_")[-1]
        n = {"b8": 1, "b16": 2, "u8": 1, "i8": 1, "u16": 2, "i16": 2, "b32": 4, "b64": 8,
             "b128": 16}.get(kind)
        if n is None or not op.startswith(("ds_write", "ds_read")):
            raise SimError(f"no simulation for {op}")
        where = (addr & np.uint64(M32)).astype(np.int64) + off
        lanes = np.nonzero(act)[0]
        # without unaligned-access mode, LDS accesses must be naturally aligned (b64/b128 too)
        if (where[lanes] % n).any():
            l = lanes[np.nonzero(where[lanes] % n)[0][0]]
            raise SimError(f"misaligned {op} at LDS byte {where[l]} (lane {l}, pc {w.pc - 1})")
        if op.startswith("ds_write"):
            if n == 16:
                d = i.uses[1]
                words = [w.v[d.phys + k].astype(np.uint64) for k in range(4)]
            else:
                data, _ = w.read(i.uses[1])
                if d16_hi:
                    data = data >> np.uint64(16)
                words = [data & np.uint64(M32), data >> np.uint64(32)]
            new = np.zeros((len(lanes), n), np.uint8)
            for j, l in enumerate(lanes):
                a = int(where[l])
                if a + n > self.lds.size:
                    raise SimError(f"LDS write at {a} beyond the {self.lds.size} bytes allocated")
                raw = b"".join(int(x[l]).to_bytes(4, "little") for x in words)
                new[j] = np.frombuffer(raw[:n], np.uint8)
            amdsim_dma.check_pending(self, w, where[lanes], n)
            self.lds_track.access(w, where[lanes], n, pc=w.pc - 1, data=new, lds=self.lds)
            for j, l in enumerate(lanes):
                a = int(where[l])
                self.lds[a:a + n] = new[j]
            w.issue("lgkm", [])
            return
        inside = lanes[where[lanes] + n <= self.lds.size]  # out-of-range LDS reads return 0
        amdsim_dma.check_pending(self, w, where[inside], n)
        self.lds_track.access(w, where[inside], n, pc=w.pc - 1)
        words = [np.zeros(self.W, np.uint64) for _ in range(max(n // 4, 1))]
        for l in inside:
            a = int(where[l])
            raw = self.lds[a:a + n].tobytes()
            if n < 4:
                v = int.from_bytes(raw, "little")
                if kind[0] == "i":
                    v = _sext(v, 8 * n) & M32
                words[0][l] = v
            else:
                for k in range(n // 4):
                    words[k][l] = int.from_bytes(raw[4 * k:4 * k + 4], "little")
        if n <= 4:
            w.issue("lgkm", w.vdest(i.defs[0], words[0], act))
        elif n == 8:
            w.issue("lgkm", w.vdest(i.defs[0], words[0] | (words[1] << np.uint64(32)), act))
        else:
            d = i.defs[0]
            w.issue("lgkm", [("v", d.phys + k, (act, words[k].astype(np.uint32))) for k in range(n // 4)])

    def lds_op2(self, w, i, act, addr):
        """ds_read2/ds_write2[st64]_b32/b64: two elements at offset0 and offset1 (8-bit fields, in
        elements, or in 64 elements for st64) from one address."""
        op = i.op
        n = 8 if op.endswith("b64") else 4
        unit = n * (64 if "st64" in op else 1)
        offs = [int(i.suffix.split(f"offset{k}:")[1].split()[0], 0) if f"offset{k}:" in i.suffix else 0
                for k in range(2)]
        if not all(0 <= o < 256 for o in offs):
            raise SimError(f"{op}: offsets {offs} do not fit 8 bits")
        lanes = np.nonzero(act)[0]
        base = (addr & np.uint64(M32)).astype(np.int64)
        words = []
        for k, o in enumerate(offs):
            where = base + o * unit
            if (where[lanes] % n).any():
                raise SimError(f"misaligned {op} at pc {w.pc - 1}")
            if op.startswith("ds_write2"):
                data, _ = w.read(i.uses[1 + k])
                new = np.zeros((len(lanes), n), np.uint8)
                for j, l in enumerate(lanes):
                    if where[l] + n > self.lds.size:
                        raise SimError(f"LDS write at {where[l]} beyond the {self.lds.size} bytes allocated")
                    new[j] = np.frombuffer(int(data[l]).to_bytes(8, "little")[:n], np.uint8)
                amdsim_dma.check_pending(self, w, where[lanes], n)
                self.lds_track.access(w, where[lanes], n, pc=w.pc - 1, data=new, lds=self.lds)
                for j, l in enumerate(lanes):
                    self.lds[where[l]:where[l] + n] = new[j]
            else:
                inside = lanes[where[lanes] + n <= self.lds.size]
                amdsim_dma.check_pending(self, w, where[inside], n)
                self.lds_track.access(w, where[inside], n, pc=w.pc - 1)
                vals = np.zeros(self.W, np.uint64)
                for l in inside:
                    vals[l] = int.from_bytes(self.lds[where[l]:where[l] + n].tobytes(), "little")
                words += [vals & np.uint64(M32), vals >> np.uint64(32)][:n // 4]
        if op.startswith("ds_write2"):
            w.issue("lgkm", [])
            return
        d = i.defs[0]
        w.issue("lgkm", [("v", d.phys + k, (act, x.astype(np.uint32))) for k, x in enumerate(words)])

    # -- vector ALU ----------------------------------------------------------------------------
    def valu(self, w: Wave, i: Inst):
        op = i.op
        act = w.mask_lanes(w.exec)
        if op == "v_readfirstlane_b32":
            x, _ = w.read(i.uses[0])
            lanes = np.nonzero(act)[0]
            w.swrite(i.defs[0], int(x[lanes[0]]) & M32 if len(lanes) else 0)
            return
        if op in ("v_readlane_b32", "v_writelane_b32"):
            return lane_op(w, i)
        if op == "v_mov_b32_dpp":
            x, _ = w.read(i.uses[0])
            perm = [int(c) for c in i.suffix.split("quad_perm:[")[1].split("]")[0].split(",")]
            lanes = np.arange(self.W)
            src = (lanes & ~3) | np.array(perm)[lanes & 3]
            return w.vwrite(i.defs[0], x[src])
        srcs = [w.read(x) for x in i.uses]
        if op.startswith("v_cmp_"):
            return self.vcmp(w, i, srcs, act)
        r = vector_op(op, srcs, w, i)
        if isinstance(r, tuple):  # (result, carry-out lanes)
            r, carry = r
            w.vwrite(i.defs[0], r)
            cm = w.lanes_mask(carry & act)
            w.swrite(i.defs[1], cm) if isinstance(i.defs[1], (Reg, Sub)) else setattr(w, "vcc", cm)
            return
        w.vwrite(i.defs[0], r)

    def vcmp(self, w, i, srcs, act):
        _, _, pred, ty = i.op.split("_")
        (a, na), (b, nb) = srcs
        if ty == "class":
            pass
        if pred == "class":
            x = f32(a.astype(np.uint32)) if ty == "f32" else f64(a)
            m = b.astype(np.int64)
            cls = np.select([np.isnan(x), np.isneginf(x), np.isposinf(x), x == 0],
                            [1, 2, 9, np.where(np.signbit(x), 5, 6)],
                            np.where(np.abs(x) < (np.finfo(x.dtype).tiny), np.where(x < 0, 4, 7),
                                     np.where(x < 0, 3, 8)))
            res = ((m >> cls) & 1).astype(bool)
        else:
            if ty == "f32":
                x, y = f32(a.astype(np.uint32)), f32(b.astype(np.uint32))
            elif ty == "f64":
                x, y = f64(a), f64(b)
            elif ty == "i32":
                x, y = a.astype(np.uint32).view(np.int32), b.astype(np.uint32).view(np.int32)
            elif ty == "u32":
                x, y = a.astype(np.uint32), b.astype(np.uint32)
            elif ty == "i64":
                x, y = a.view(np.int64), b.view(np.int64)
            else:
                x, y = a, b
            with np.errstate(invalid="ignore"):
                res = {"lt": x < y, "le": x <= y, "gt": x > y, "ge": x >= y, "eq": x == y,
                       "ne": x != y, "neq": ~(x == y), "lg": (x < y) | (x > y),
                       "u": np.isnan(x) | np.isnan(y) if ty.startswith("f") else x != x}[pred]
        d = i.defs[0]
        m = w.lanes_mask(res & act)
        if isinstance(d, Fixed):
            w.vcc = m
        else:
            w.swrite(d, m)


def _neg(v, neg, bits):
    if not neg:
        return v
    return v ^ np.uint64(1 << (bits - 1))


def _f16_rtz(x):
    """float32 -> float16 bits, rounded toward zero (finite values never become infinities)."""
    x = x.astype(np.float32)
    with np.errstate(over="ignore"):
        h = x.astype(np.float16)
    bits = h.view(np.uint16).astype(np.int64)
    away = np.isfinite(x) & (np.abs(h.astype(np.float64)) > np.abs(x.astype(np.float64)))
    bits = np.where(away, bits - 1, bits)  # one ulp toward zero (sign-magnitude bits)
    return (bits & 0xFFFF).astype(np.uint64)


def fminmax(op: str, a, b):
    """v_min/v_max_f32/f64 (and the f32/f64 min/max atomics): a NaN operand gives the other
    one, and -0 orders below +0, so min(+0, -0) is -0 and max(-0, +0) is +0 in either order
    (the ISA's LT_NEG_ZERO / GT_NEG_ZERO). numpy's fmin/fmax return either zero, differently
    in its vector loop and its tail, so lanes holding copies of one value drifted apart."""
    a, b = np.asarray(a), np.asarray(b)
    mx = "max" in op
    r = np.asarray((np.fmax if mx else np.fmin)(a, b))
    both = (a == 0) & (b == 0)
    if np.any(both):
        sa, sb = np.signbit(a), np.signbit(b)
        neg = (sa & sb) if mx else (sa | sb)
        r = np.where(both, np.where(neg, -np.zeros_like(r), np.zeros_like(r)), r).astype(r.dtype)
    return r


def vector_op(op, srcs, w, i):
    def U(k):
        v, n = srcs[k]
        return _neg(v, n, 32) & np.uint64(M32)

    def F(k):
        v, n = srcs[k]
        return f32(_neg(v, n, 32).astype(np.uint32))

    def D(k):
        v, n = srcs[k]
        return f64(_neg(v, n, 64))

    def I(k):
        return U(k).astype(np.uint32).view(np.int32).astype(np.int64)

    def outf(x):
        return u32(np.asarray(x, np.float32)).astype(np.uint64)

    def outd(x):
        return u64(np.asarray(x, np.float64))

    M = np.uint64(M32)
    if "fp8" in op or "bf8" in op:  # gfx942's fp8 conversions: amdsim_fp8.py
        r = fp8_op(op, U, F, w.read(i.defs[0])[0], i.suffix)
        if r is not None:
            return r
    with np.errstate(all="ignore"):
        if op == "v_mov_b32":
            return U(0)
        if op in ("v_add_u32", "v_add_nc_u32"):
            return (U(0) + U(1)) & M
        if op == "v_sub_u32":
            return (U(0) - U(1)) & M
        if op == "v_subrev_u32":
            return (U(1) - U(0)) & M
        if op == "v_mul_lo_u32":
            return (U(0) * U(1)) & M
        if op == "v_mul_hi_u32":
            return (U(0) * U(1)) >> np.uint64(32)
        if op == "v_mul_u32_u24":
            return ((U(0) & np.uint64(0xFFFFFF)) * (U(1) & np.uint64(0xFFFFFF))) & M
        if op == "v_add3_u32":
            return (U(0) + U(1) + U(2)) & M
        if op in ("v_and_b32", "v_or_b32", "v_xor_b32"):
            return {"v_and_b32": U(0) & U(1), "v_or_b32": U(0) | U(1), "v_xor_b32": U(0) ^ U(1)}[op]
        if op == "v_not_b32":
            return (~U(0)) & M
        if op == "v_lshlrev_b32":
            return (U(1) << (U(0) & np.uint64(31))) & M
        if op == "v_lshrrev_b32":
            return U(1) >> (U(0) & np.uint64(31))
        if op == "v_ashrrev_i32":
            return (I(1) >> (U(0) & np.uint64(31)).astype(np.int64)).astype(np.uint64) & M
        if op in ("v_lshlrev_b64", "v_lshrrev_b64", "v_ashrrev_i64"):
            s = (U(0) & np.uint64(63))
            x = srcs[1][0]
            if op == "v_lshlrev_b64":
                return x << s
            if op == "v_lshrrev_b64":
                return x >> s
            return (x.view(np.int64) >> s.astype(np.int64)).view(np.uint64)
        if op in ("v_min_i32", "v_max_i32"):
            return (np.minimum if "min" in op else np.maximum)(I(0), I(1)).astype(np.uint64) & M
        if op in ("v_min_u32", "v_max_u32"):
            return (np.minimum if "min" in op else np.maximum)(U(0), U(1))
        if op == "v_bfe_u32":
            return (U(0) >> (U(1) & np.uint64(31))) & ((np.uint64(1) << (U(2) & np.uint64(31))) - np.uint64(1))
        if op == "v_bfe_i32":
            wdt = (U(2) & np.uint64(31)).astype(np.int64)
            raw = ((U(0) >> (U(1) & np.uint64(31))) & ((np.uint64(1) << wdt.astype(np.uint64)) - np.uint64(1))).astype(np.int64)
            sign = (raw >> (wdt - 1)) & 1
            return np.where(sign == 1, raw - (np.int64(1) << wdt), raw).astype(np.uint64) & M
        if op == "v_bfi_b32":
            return (U(0) & U(1)) | (~U(0) & M & U(2))
        if op == "v_perm_b32":  # byte k = selector byte k of {src0, src1} (src1 = bytes 0-3)
            pool = (U(0) << np.uint64(32)) | U(1)
            out = np.zeros_like(pool)
            for k in range(4):
                sel = (U(2) >> np.uint64(8 * k)) & np.uint64(0xFF)
                if not np.all((sel <= 7) | (sel == 12)):
                    raise SimError(f"v_perm_b32 selector {sel} not simulated")
                byte = np.where(sel == 12, np.uint64(0),
                                (pool >> (np.minimum(sel, 7) * np.uint64(8))) & np.uint64(0xFF))
                out |= byte << np.uint64(8 * k)
            return out
        if op == "v_cndmask_b32":
            m = srcs[2][0]
            bit = (m[0] >> np.arange(w.W, dtype=np.uint64)) & np.uint64(1)
            return np.where(bit == 1, U(1), U(0))
        if op in ("v_mad_i64_i32", "v_mad_u64_u32"):
            if op == "v_mad_i64_i32":
                p = I(0) * I(1)
            else:
                p = (U(0) * U(1)).astype(np.int64)
            r = (p.astype(np.uint64) + srcs[2][0])
            return r, np.zeros(w.W, bool)
        if op == "v_add_co_u32":
            r = U(0) + U(1)
            return r & M, r > M
        if op in ("v_addc_co_u32", "v_add_co_ci_u32"):
            c = (srcs[2][0][0] >> np.arange(w.W, dtype=np.uint64)) & np.uint64(1)
            r = U(0) + U(1) + c
            return r & M, r > M
        if op in ("v_sub_co_u32", "v_subrev_co_u32"):
            a, b = (U(0), U(1)) if op == "v_sub_co_u32" else (U(1), U(0))
            return (a - b) & M, b > a
        if op in ("v_subb_co_u32", "v_sub_co_ci_u32"):
            c = (srcs[2][0][0] >> np.arange(w.W, dtype=np.uint64)) & np.uint64(1)
            return (U(0) - U(1) - c) & M, (U(1) + c) > U(0)
        # float32
        if op == "v_add_f32":
            return outf(F(0) + F(1))
        if op == "v_sub_f32":
            return outf(F(0) - F(1))
        if op == "v_subrev_f32":
            return outf(F(1) - F(0))
        if op == "v_mul_f32":
            return outf(F(0) * F(1))
        if op in ("v_max_f32", "v_min_f32"):
            return outf(fminmax(op, F(0), F(1)))
        if op == "v_fma_f32":
            return outf(_fma(F(0), F(1), F(2), dtypes.float32))
        if op in ("v_rcp_f32", "v_rcp_iflag_f32"):
            return outf(1.0 / F(0).astype(np.float64))
        if op == "v_rsq_f32":
            return outf(1.0 / np.sqrt(F(0).astype(np.float64)))
        if op == "v_sqrt_f32":
            return outf(np.sqrt(F(0).astype(np.float64)))
        if op == "v_exp_f32":
            return outf(np.exp2(F(0).astype(np.float64)))
        if op == "v_log_f32":
            return outf(np.log2(F(0).astype(np.float64)))
        if op in ("v_sin_f32", "v_cos_f32"):
            return outf((np.sin if "sin" in op else np.cos)(2 * np.pi * F(0).astype(np.float64)))
        if op == "v_fract_f32":
            x = F(0)
            return outf(np.minimum(x - np.floor(x), np.float32(0.99999994)))
        if op in ("v_floor_f32", "v_ceil_f32", "v_trunc_f32", "v_rndne_f32"):
            return outf({"floor": np.floor, "ceil": np.ceil, "trunc": np.trunc,
                         "rndne": np.rint}[op.split("_")[1]](F(0)))
        if op == "v_ldexp_f32":
            return outf(np.ldexp(F(0), np.clip(I(1), -1000, 1000).astype(np.int32)))
        if op.startswith(("v_div_scale_f", "v_div_fmas_f")):  # amdsim_div.py
            bits = 64 if op.endswith("64") else 32
            a, b, c = (_neg(v, n, bits) & np.uint64((1 << bits) - 1) for v, n in srcs[:3])
            if op.startswith("v_div_scale"):
                return amdsim_div.div_scale(a, b, c, bits == 64)
            return amdsim_div.div_fmas(a, b, c, w.mask_lanes(w.vcc), bits == 64)
        if op == "v_div_fixup_f32":
            q, den, num = F(0), F(1), F(2)
            ok = np.isfinite(q) & np.isfinite(den) & np.isfinite(num) & (den != 0)
            # the ISA's last case: |q| with the sign of num ^ den (so -0 / 1.5 is -0)
            q = np.where(np.signbit(num) ^ np.signbit(den), -np.abs(q), np.abs(q))
            return outf(np.where(ok, q, num / den))
        if op == "v_cvt_f32_i32":
            return outf(I(0).astype(np.float32))
        if op == "v_cvt_f32_u32":
            return outf(U(0).astype(np.float32))
        if op in ("v_cvt_i32_f32", "v_cvt_u32_f32", "v_cvt_i32_f64", "v_cvt_u32_f64"):
            x = (F(0) if op.endswith("f32") else D(0)).astype(np.float64)
            lo, hi = (-2.0**31, 2.0**31 - 1) if "_i32" in op else (0.0, 2.0**32 - 1)
            r = np.where(np.isnan(x), 0, np.clip(np.trunc(x), lo, hi)).astype(np.int64)
            return r.astype(np.uint64) & M
        if op == "v_cvt_f16_f32":
            return F(0).astype(np.float16).view(np.uint16).astype(np.uint64)
        if op == "v_cvt_pkrtz_f16_f32":  # two f32 -> f16 rounded toward zero, src0 in the low half
            return _f16_rtz(F(0)) | (_f16_rtz(F(1)) << np.uint64(16))
        if op == "v_cvt_f32_f16":
            return outf((U(0) & np.uint64(0xFFFF)).astype(np.uint16).view(np.float16).astype(np.float32))
        if op == "v_cvt_f64_f32":
            return outd(F(0).astype(np.float64))
        if op == "v_cvt_f32_f64":
            return outf(D(0).astype(np.float32))
        if op == "v_cvt_f64_i32":
            return outd(I(0).astype(np.float64))
        if op == "v_cvt_f64_u32":
            return outd(U(0).astype(np.float64))
        # float64
        if op == "v_add_f64":
            return outd(D(0) + D(1))
        if op == "v_mul_f64":
            return outd(D(0) * D(1))
        if op == "v_fma_f64":  # one rounding (the interpreter's exact fma)
            return outd(_fma(D(0), D(1), D(2), dtypes.float64))
        if op in ("v_max_f64", "v_min_f64"):
            return outd(fminmax(op, D(0), D(1)))
        if op in ("v_floor_f64", "v_ceil_f64", "v_trunc_f64"):
            return outd({"floor": np.floor, "ceil": np.ceil, "trunc": np.trunc}[op.split("_")[1]](D(0)))
        if op == "v_ldexp_f64":
            return outd(np.ldexp(D(0), np.clip(I(1), -3000, 3000).astype(np.int32)))
        if op == "v_rcp_f64":
            return outd(1.0 / D(0))
        if op == "v_rsq_f64":
            return outd(1.0 / np.sqrt(D(0)))
        if op == "v_div_fixup_f64":
            q, den, num = D(0), D(1), D(2)
            ok = np.isfinite(q) & np.isfinite(den) & np.isfinite(num) & (den != 0)
            # the ISA's last case: |q| with the sign of num ^ den (so -0 / 1.5 is -0)
            q = np.where(np.signbit(num) ^ np.signbit(den), -np.abs(q), np.abs(q))
            return outd(np.where(ok, q, num / den))
    raise SimError(f"no simulation for {op}")


# -- running a traced kernel --------------------------------------------------------------------

class DeviceBuffer:
    def __init__(self, addr, arr):
        self.addr, self.arr = addr, arr
        self.__cuda_array_interface__ = {"data": (addr, False), "shape": arr.shape,
                                         "typestr": arr.dtype.str, "version": 3}


def simulate(traced, target: str, grid, args, print_records: int = 4096, sim_class=None):
    """Run ``traced`` (a TracedKernel) on the simulator; numpy array arguments are
    copied in and the results copied back into them. A kernel that prints gets a
    print buffer of ``print_records`` records; its bytes end up in ``sim.print_bytes``.
    ``sim_class``: a Sim subclass to run it on (amdsim_races.RaceSim)."""
    from gluon_trace.backends.amd import launcher
    from gluon_trace.backends.amd.compiler import lower
    from gluon_trace.backends.amd.target import TARGETS
    g = traced.for_target(target).graph
    e = lower(g, target)
    ck = traced.for_target(target).compile(target)
    km = launcher.kernel_meta(ck.binary, g.name)
    mem = Memory()
    dev = []
    for a in args:
        if isinstance(a, np.ndarray):
            dev.append(DeviceBuffer(mem.add(a), a))
        else:
            dev.append(a)
    grid = tuple(grid) + (1,) * (3 - len(grid))
    pbuf = None
    if launcher.print_arg(km) is not None:
        from gluon_trace.backends.amd import printing
        raw = bytearray(printing.buffer_bytes(print_records))
        raw[:printing.HEADER_BYTES] = printing.header(print_records)
        pbuf = mem.add(np.frombuffer(bytes(raw), np.uint8))
    kernarg = bytearray(launcher.pack_args(km, g, dev, print_buffer=pbuf))
    kernarg += bytes(km[".kernarg_segment_size"] - len(kernarg))
    for h in km[".args"]:
        k = h[".value_kind"]
        if k.startswith("hidden_block_count_"):
            struct.pack_into("<I", kernarg, h[".offset"], grid["xyz".index(k[-1])])
    t = TARGETS[target]
    sim = (sim_class or Sim)(e.code, t, t.wave, e.lds, bytes(kernarg), mem, g.num_warps, e.vgprs)
    sim.abi = Abi.from_descriptor(ck.binary, g.name)
    sim.run(grid)
    sim.print_bytes = bytes(mem.bufs[(pbuf >> 36) - 1]) if pbuf else None
    for d in dev:
        if isinstance(d, DeviceBuffer):
            k = (d.addr >> 36) - 1
            d.arr.reshape(-1).view(np.uint8)[:] = mem.bufs[k][:d.arr.nbytes]
    return sim


# -- Private segment: initial SGPRs, scratch memory, spills (test helper section) ---------------
#
# The hardware sets up a wave from the kernel descriptor, so the simulator does too: the user
# SGPRs it enables (private segment buffer s[0:3], kernarg pointer), then the workgroup ids,
# then the wave's scratch offset where the target has no architected flat scratch. Scratch is
# private per lane and per wave, filled with a pattern, and an access outside the size the
# descriptor declares, or through other SGPRs than the dispatch set up, is an error.

RSRC = (0x5C0A0000, 0x00008000, 0xFFFFFFFF, 0x00E40000)  # a stand-in private segment V#
GARBAGE = 0xDEADBEEF


class Abi:
    def __init__(self, private_buffer=False, user_sgprs=2, private_bytes=0, private_enabled=False):
        self.private_buffer, self.user_sgprs = private_buffer, user_sgprs
        self.private_bytes, self.private_enabled = private_bytes, private_enabled

    @staticmethod
    def from_descriptor(hsaco: bytes, name: str) -> "Abi":
        from gluon_trace.backends.amd.metadata import read_descriptor
        d = read_descriptor(hsaco, name)
        return Abi(bool(d["private_segment_buffer"]), d["user_sgpr_count"],
                   d["private_segment_fixed_size"], bool(d["rsrc2"] & 1))


def init_sgprs(w, sim, wgid) -> None:
    abi = sim.abi
    k = 0
    if abi.private_buffer:
        w.s[0:4] = RSRC
        k = 4
    w.s[k], w.s[k + 1] = sim.kernarg & M32, sim.kernarg >> 32
    if k + 2 != abi.user_sgprs:
        raise SimError(f"descriptor declares {abi.user_sgprs} user SGPRs, the enabled ones take {k + 2}")
    k += 2
    w.s[k], w.s[k + 1], w.s[k + 2] = wgid
    w.wave_offset = None
    if abi.private_enabled and abi.private_buffer:
        w.wave_offset = 0x40000 * (w.wid + 1)
        w.s[k + 3] = w.wave_offset
    dwords = -(-abi.private_bytes // 4) if abi.private_enabled else 0
    w.scratch = np.full((dwords, w.W), GARBAGE, np.uint32)


def _scratch_addrs(sim, w, i, vaddr, saddr):
    imm = 0
    for part in i.suffix.split():
        if part.startswith("offset:"):
            imm = int(part[len("offset:"):], 0)
    a = np.full(w.W, imm, np.int64)
    if not isinstance(vaddr, str):
        a += w.read(vaddr)[0].astype(np.int64) & M32
    if saddr is not None and not isinstance(saddr, str):
        a += w.sval(saddr)
    return a


def _check_scratch(sim, w, i, addrs, n, act):
    if not sim.abi.private_enabled:
        raise SimError(f"`{render(i)}`: scratch access, but the descriptor enables no private segment")
    for l in np.nonzero(act)[0]:
        a = int(addrs[l])
        if a % 4 or a < 0 or a + n > sim.abi.private_bytes:
            raise SimError(f"`{render(i)}`: lane {l} accesses private bytes [{a}, {a + n}) but "
                           f"the descriptor declares {sim.abi.private_bytes}")


def render(i):
    from gluon_trace.backends.amd.mir import render_inst
    return render_inst(i)


def scratch_op(sim, w, i):
    op = i.op
    act = w.mask_lanes(w.exec)
    if op.startswith("scratch_"):
        if sim.abi.private_buffer:
            raise SimError(f"`{render(i)}`: flat scratch on a target without architected flat scratch")
        store = op.startswith("scratch_store")
        vaddr, saddr = (i.uses[0], i.uses[2]) if store else (i.uses[0], i.uses[1])
        data = i.uses[1] if store else i.defs[0]
        n = int(op[-1]) if op[-2] == "x" else 1
    else:
        if not sim.abi.private_buffer:
            raise SimError(f"`{render(i)}`: buffer scratch access without a private segment buffer")
        store = op.startswith("buffer_store")
        data = i.uses[0] if store else i.defs[0]
        vaddr, rsrc, soff = i.uses[1:4] if store else i.uses[0:3]
        n = 1
        if tuple(int(w.s[rsrc.phys + k]) for k in range(4)) != RSRC:
            raise SimError(f"`{render(i)}`: the resource is not the private segment buffer")
        if w.sval(soff) != w.wave_offset:
            raise SimError(f"`{render(i)}`: soffset is not the wave's scratch offset")
        if ("offen" in i.suffix) == isinstance(vaddr, str):
            raise SimError(f"`{render(i)}`: offen and the VGPR offset disagree")
        saddr = None
    addrs = _scratch_addrs(sim, w, i, vaddr, saddr)
    _check_scratch(sim, w, i, addrs, 4 * n, act)
    slots = addrs // 4
    lanes = np.nonzero(act)[0]
    base = data.reg.phys + data.index if isinstance(data, Sub) else data.phys
    if store:
        for k in range(n):
            w.scratch[slots[lanes] + k, lanes] = w.v[base + k, lanes]
        w.issue("vs" if sim.t.stores_use_vscnt else "vm", [])
        return
    writes = []
    for k in range(n):
        got = np.zeros(w.W, np.uint32)
        got[lanes] = w.scratch[slots[lanes] + k, lanes]
        writes.append(("v", base + k, (act, got)))
    w.issue("vm", writes)


def lane_op(w, i):
    """v_writelane/v_readlane: one lane, whatever EXEC says (SGPR spills live there)."""
    lane = int(i.uses[1].bits) if isinstance(i.uses[1], Imm) else w.sval(i.uses[1])
    lane %= w.W
    if i.op == "v_readlane_b32":
        x, _ = w.read(i.uses[0])
        w.swrite(i.defs[0], int(x[lane]) & M32)
        return
    d = i.defs[0]
    base = d.reg.phys + d.index if isinstance(d, Sub) else d.phys
    w.v[base, lane] = w.sval(i.uses[0]) & M32

