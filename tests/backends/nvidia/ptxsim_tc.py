"""ptxsim extended with the Ampere tensor-core path: cp.async (+ commit/wait groups),
mma.sync.aligned (m16n8k16 f16/bf16, m16n8k8 tf32, m16n8k32 s8 and e4m3/e5m2), cvt.rna.tf32.f32, ldmatrix, stmatrix
(x1/x2/x4, .trans), and
alignment checks on vector shared-memory accesses (a misaligned one faults on the GPU).

Copies complete at once (the simulator runs a CTA's threads in lockstep, so a copy's bytes
are there for every later instruction); an MMA multiplies exactly in float64 and rounds
once per instruction, which the tests' tolerances cover. Kept beside ptxsim.py so the
general simulator stays free of the tensor-core fragment tables.
"""
from __future__ import annotations

import numpy as np

from ptxsim import Kernel, Mem, Sim

# shape -> (K, operand elements per .b32 register)
_SHAPES = {"m16n8k16": (16, 2), "m16n8k8": (8, 1), "m16n8k32": (32, 4)}


def _regs(s: str) -> list[str]:
    return [x.strip() for x in s.strip()[1:-1].split(",")]


class TCSim(Sim):
    def op_cp(self, parts, args, m, active):
        if parts[1] != "async":
            raise NotImplementedError(".".join(parts))
        if parts[2] in ("commit_group", "wait_group", "wait_all"):
            return None
        dst, src, size = args[0], args[1], int(args[2])
        if size not in (4, 8, 16) or (parts[2] == "cg" and size != 16):
            raise RuntimeError(f"cp.async.{parts[2]} cannot copy {size} bytes")
        n_src = self.val(args[3], "u32").astype(np.int64) if len(args) > 3 else np.full(self.N, size)
        d, s = self._addr(dst), self._addr(src)
        for i in np.nonzero(m)[0]:
            a, k = int(d[i]), int(n_src[i])
            if a % size or a + size > self.smem.shape[1]:
                raise IndexError(f"cp.async to shared {a} ({size} bytes) is misaligned or out of range")
            if int(s[i]) % size:
                raise IndexError(f"cp.async from global {int(s[i])} is not {size}-byte aligned")
            data = self.mem.read(int(s[i]), k) if k else b""
            self.smem[self.cta[i], a:a + size] = np.frombuffer(data + bytes(size - k), np.uint8)
        return None

    def op_cvt(self, parts, args, m, active):
        if "tf32" not in parts:
            return super().op_cvt(parts, args, m, active)
        if "rna" not in parts:
            raise NotImplementedError(".".join(parts))
        x = self.val(args[1], "f32")
        bits = x.view(np.uint32).astype(np.uint64)
        r = ((bits + 0x1000) & ~np.uint64(0x1FFF)).astype(np.uint32)
        self.set(args[0], np.where(np.isfinite(x), r, x.view(np.uint32)), m)
        return None

    def _check_vec(self, parts, args, addr_arg):
        if parts[1] != "shared" or not parts[2].startswith("v"):
            return
        n = int(parts[2][1:]) * int(parts[-1][1:]) // 8
        a = self._addr(addr_arg)
        bad = a[self._m] % n != 0
        if bad.any():
            raise IndexError(f"{'.'.join(parts)} at shared {int(a[self._m][bad][0])}: not {n}-byte aligned")

    def op_ld(self, parts, args, m, active):
        self._m = m
        self._check_vec(parts, args, args[1])
        return super().op_ld(parts, args, m, active)

    def op_st(self, parts, args, m, active):
        self._m = m
        self._check_vec(parts, args, args[0])
        return super().op_st(parts, args, m, active)

    def op_mma(self, parts, args, m, active):
        shape = parts[3]
        K, kw = _SHAPES[shape]
        dty, aty = parts[6], parts[7]
        if not (active.reshape(-1, 32).all(axis=1) | ~active.reshape(-1, 32).any(axis=1)).all():
            raise RuntimeError("mma.sync with part of a warp")
        d, a, b, c = (_regs(x) for x in args)
        lane = np.arange(32)
        g, t = lane >> 2, lane & 3
        W = self.N // 32
        A = np.zeros((W, 16, K))
        B = np.zeros((W, K, 8))
        for i, r in enumerate(a):
            words = self.val(r, "b32").reshape(W, 32)
            for j in range(kw):
                A[:, g + 8 * (i % 2), t * kw + j + (K // 2) * (i // 2)] = self._elem(words, j, kw, aty)
        for i, r in enumerate(b):
            words = self.val(r, "b32").reshape(W, 32)
            for j in range(kw):
                B[:, t * kw + j + (K // 2) * i, g] = self._elem(words, j, kw, aty)
        C = np.zeros((W, 16, 8))
        if dty == "f16":  # two f16x2 words: (c0, c1) at row g, (c2, c3) at row g + 8
            for i, r in enumerate(c):
                words = self.val(r, "b32").reshape(W, 32)
                for j in range(2):
                    C[:, g + 8 * i, 2 * t + j] = self._elem(words, j, 2, "f16")
        else:
            ct = "f32" if dty == "f32" else "s32"
            for i, r in enumerate(c):
                C[:, g + 8 * (i // 2), 2 * t + i % 2] = self.val(r, ct).reshape(W, 32).astype(np.float64)
        if dty == "s32":
            D = (np.einsum("wmk,wkn->wmn", A.astype(np.int64), B.astype(np.int64)) + C.astype(np.int64))
            D = D.astype(np.int64).astype(np.int32)
        elif dty == "f16":
            D = (np.einsum("wmk,wkn->wmn", A, B) + C).astype(np.float16).view(np.uint16).astype(np.uint32)
            for i, r in enumerate(d):
                lo, hi = D[:, g + 8 * i, 2 * t], D[:, g + 8 * i, 2 * t + 1]
                self.set(r, (lo | (hi << np.uint32(16))).reshape(-1), m)
            return None
        else:
            D = (np.einsum("wmk,wkn->wmn", A, B) + C).astype(np.float32)
        for i, r in enumerate(d):
            self.set(r, D[:, g + 8 * (i // 2), 2 * t + i % 2].reshape(-1), m)
        return None

    def op_ldmatrix(self, parts, args, m, active):
        nmat = int(next(p for p in parts if p.startswith("x"))[1:])
        trans = "trans" in parts
        outs = _regs(args[0])
        addr = self._addr(args[1])
        if not (m.reshape(-1, 32).all(axis=1) | ~m.reshape(-1, 32).any(axis=1)).all():
            raise RuntimeError("ldmatrix with part of a warp")
        for w in np.nonzero(m.reshape(-1, 32).any(axis=1))[0]:
            cta = self.cta[32 * w]
            mats = []
            for i in range(nmat):  # lane 8i + r names row r of matrix i
                rows = []
                for r in range(8):
                    a = int(addr[32 * w + 8 * i + r])
                    if a % 16 or a + 16 > self.smem.shape[1]:
                        raise IndexError(f"ldmatrix row at shared {a}: misaligned or out of range")
                    rows.append(self.smem[cta, a:a + 16].view(np.uint16))
                mats.append(np.stack(rows))
            for i, o in enumerate(outs):
                mat = mats[i].T if trans else mats[i]
                lane = np.arange(32)
                lo = mat[lane // 4, 2 * (lane % 4)].astype(np.uint32)
                hi = mat[lane // 4, 2 * (lane % 4) + 1].astype(np.uint32)
                mask = np.zeros(self.N, bool)
                mask[32 * w:32 * w + 32] = True
                full = np.zeros(self.N, np.uint32)
                full[32 * w:32 * w + 32] = lo | (hi << np.uint32(16))
                self.set(o, full, mask & m)
        return None

    def op_stmatrix(self, parts, args, m, active):
        """stmatrix.sync.aligned.m8n8.x{1,2,4}[.trans].shared.b16 [addr], {regs}: ldmatrix's
        fragments written back (lane 8i + r addresses row r of matrix i)."""
        nmat = int(next(p for p in parts if p.startswith("x"))[1:])
        trans = "trans" in parts
        addr = self._addr(args[0])
        srcs = _regs(args[1])
        if not (m.reshape(-1, 32).all(axis=1) | ~m.reshape(-1, 32).any(axis=1)).all():
            raise RuntimeError("stmatrix with part of a warp")
        lane = np.arange(32)
        for w in np.nonzero(m.reshape(-1, 32).any(axis=1))[0]:
            cta = self.cta[32 * w]
            for i in range(nmat):
                word = self.val(srcs[i], "b32")[32 * w:32 * w + 32].astype(np.uint32)
                mat = np.zeros((8, 8), np.uint16)
                mat[lane // 4, 2 * (lane % 4)] = (word & np.uint32(0xFFFF)).astype(np.uint16)
                mat[lane // 4, 2 * (lane % 4) + 1] = (word >> np.uint32(16)).astype(np.uint16)
                if trans:
                    mat = mat.T
                for r in range(8):
                    a = int(addr[32 * w + 8 * i + r])
                    if a % 16 or a + 16 > self.smem.shape[1]:
                        raise IndexError(f"stmatrix row at shared {a}: misaligned or out of range")
                    self.smem[cta, a:a + 16] = np.ascontiguousarray(mat[r]).view(np.uint8)
        return None

    @staticmethod
    def _elem(words, j, kw, ty):
        w = words.astype(np.uint32)
        if ty == "f16":
            return ((w >> np.uint32(16 * j)) & np.uint32(0xFFFF)).astype(np.uint16).view(np.float16).astype(np.float64)
        if ty == "bf16":
            return (((w >> np.uint32(16 * j)) & np.uint32(0xFFFF)) << np.uint32(16)).view(np.float32).astype(np.float64)
        if ty == "tf32":  # the tensor core reads the top 19 bits
            return (w & np.uint32(0xFFFFE000)).view(np.float32).astype(np.float64)
        if ty == "s8":
            return ((w >> np.uint32(8 * j)) & np.uint32(0xFF)).astype(np.uint8).view(np.int8).astype(np.float64)
        if ty in ("e4m3", "e5m2"):  # sm_89's fp8 mma.sync: the OCP formats, exact in float64
            from gluon_trace import fp8
            b = ((w >> np.uint32(8 * j)) & np.uint32(0xFF)).astype(np.uint8)
            return fp8.decode(b, {"e4m3": "float8e4nv", "e5m2": "float8e5"}[ty]).astype(np.float64)
        raise NotImplementedError(ty)


def run(ptx: str, grid, args: list, smem_bytes: int) -> None:
    """Run a kernel on numpy arrays (changed in place) and scalars."""
    k = Kernel(ptx)
    mem = Mem()
    params = [mem.add(a) if isinstance(a, np.ndarray) else a for a in args]
    TCSim(k, grid, params, mem, smem_bytes).run()
