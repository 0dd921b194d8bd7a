"""The code of an LDS access's addresses (part of lds_address.Access): each thread register,
made once at the kernel entry where it can be (``em.hoisted``), or where the view is accessed
where a loop's or branch's run-time start or XOR enters it, and the VGPR + immediate offset of
each register of the tile.
"""
from __future__ import annotations

import numpy as np

from gluon_trace.shared_layouts import bit_fields

from .emitter import elem_key
from .layout import log2, thread_part
from .lds_buffer import pad
from .mir import Imm


class ThreadRegs:
    """lds_address.Access's address code: ``addr(r)`` from the split Access found."""

    def addr(self, r: int):
        """(VGPR address, immediate offset) of register r's element in this thread."""
        em, v = self.em, self.v
        lo, imm = self.where(r)
        reg = self._thread_reg(lo)
        if v.xreg is not None:  # the run-time XOR: once per thread register (lds_join.py)
            if isinstance(reg, Imm):
                reg = _zero_v(em, reg.bits)
            key = ("lds_xor", elem_key(reg), elem_key(v.xreg))
            x = em.cse_get(key)
            if x is None:
                x = em.cse_put(key, em.valu("v_xor_b32", em.v(), [v.xreg, reg]))
            reg = x
        if v.base is not None:
            key = ("lds_addr", elem_key(reg) if not isinstance(reg, Imm) else reg.bits, elem_key(v.base))
            a = em.cse_get(key)
            if a is None:
                a = em.cse_put(key, em.valu("v_add_u32" if em.t.gfx9 else "v_add_nc_u32", em.v(),
                                            [v.base, reg]))
            reg = a
        elif isinstance(reg, Imm):
            reg = _zero_v(em, reg.bits)
        if imm >= 1 << 16 or imm < 0:
            reg = em.valu("v_add_u32" if em.t.gfx9 else "v_add_nc_u32", em.v(), [Imm(imm), reg])
            imm = 0
        return reg, imm


    def _thread_reg(self, lo):
        """es * pad(shift + (tL ^ lo)) + tS, hoisted to the kernel entry (``lo`` = (lo, (lo_d...)) for
        stacked coordinates split by _coord_lead)."""
        em, v = self.em, self.v
        if self.rshift is not None:
            return self._thread_reg_shifted(lo)
        if self.crun is not None:
            return self._thread_reg_coords_run(lo[1])
        if self.cdims is not None:
            return self._thread_reg_coords(lo[1])
        if self.clead is not None:
            return self._thread_reg_c(*lo)
        key = ("lds_thread", self.lpairs, self.spairs, lo, v.es, v.pads, self.shift)
        if key in em.memo:
            return em.memo[key]
        if not self.lpairs and not self.spairs:
            em.memo[key] = Imm(v.es * int(pad(np.int64(self.shift + lo), v.pads)))
            return em.memo[key]
        with em.hoisted():
            x = self._with_spairs(em, self._lin_bytes(lo))
        em.memo[key] = x
        return x


    def _thread_reg_shifted(self, lo):
        """es * pad(S + m + (tL ^ lo)) + tS for a run-time start S (an SGPR): tL ^ lo and tS made at
        the kernel entry, the rest where the view is accessed (S is the loop's or branch's). Stacked
        coordinates split by _coord_lead (``lo`` = (lo, (lo_d...))) add sum_d lead_d * (tc_d ^ lo_d)
        in place of tS, also made at the kernel entry."""
        em, v = self.em, self.v
        sreg, m = self.rshift
        add = "v_add_u32" if em.t.gfx9 else "v_add_nc_u32"
        if self.clead is not None:
            return self._thread_reg_shifted_c(*lo)
        key = ("lds_thread_sh", self.lpairs, self.spairs, lo, v.es, v.pads, elem_key(sreg), m)
        x = em.cse_get(key)
        if x is not None:
            return x
        hkey = ("lds_thread_sh0", self.lpairs, lo)
        if hkey not in em.memo:
            with em.hoisted():
                t = thread_part(em, self.lpairs) if self.lpairs else Imm(0)
                if lo:
                    t = em.valu("v_xor_b32", em.v(), [Imm(lo), em.to_v(t)])
                em.memo[hkey] = t
        t = em.memo[hkey]
        s = em.salu("s_add_u32", em.s(), [sreg, Imm(m)]) if m else sreg
        if isinstance(t, Imm):
            x = em.valu(add, em.v(), [Imm(t.bits), em.to_v(s)]) if t.bits else em.to_v(s)
        else:
            x = em.valu(add, em.v(), [s, t])
        x = self._padded_bytes(x)
        x = self._plus_hoisted_spairs(em, x, add)
        return em.cse_put(key, x)


    def _thread_reg_shifted_c(self, lo: int, los: tuple):
        """_thread_reg_shifted's address with sum_d lead_d * (tc_d ^ lo_d) for the stacked bytes."""
        em, v = self.em, self.v
        sreg, m = self.rshift
        add = "v_add_u32" if em.t.gfx9 else "v_add_nc_u32"
        cpairs = tuple(p for p, _ in self.clead)
        key = ("lds_thread_sh_c", self.lpairs, cpairs, lo, los, v.es, v.pads, v.lead, elem_key(sreg), m)
        x = em.cse_get(key)
        if x is not None:
            return x
        hkey = ("lds_thread_sh_c0", self.lpairs, lo, cpairs, los, v.lead)
        if hkey not in em.memo:
            with em.hoisted():
                t = thread_part(em, self.lpairs) if self.lpairs else Imm(0)
                if lo:
                    t = em.valu("v_xor_b32", em.v(), [Imm(lo), em.to_v(t)])
                em.memo[hkey] = (t, _plus_lead_coords(em, Imm(0), self.clead, v.lead, los))
        t, c = em.memo[hkey]
        s = em.salu("s_add_u32", em.s(), [sreg, Imm(m)]) if m else sreg
        if isinstance(t, Imm):
            x = em.valu(add, em.v(), [Imm(t.bits), em.to_v(s)]) if t.bits else em.to_v(s)
        else:
            x = em.valu(add, em.v(), [s, t])
        x = self._padded_bytes(x)
        if not isinstance(c, Imm):
            x = em.valu(add, em.v(), [x, c])
        elif c.bits:
            x = em.valu(add, em.v(), [Imm(c.bits), x])
        return em.cse_put(key, x)


    def _thread_reg_c(self, lo: int, los: tuple):
        """es * pad(shift + (tL ^ lo)) + sum_d lead_d * (tc_d ^ lo_d)."""
        em, v = self.em, self.v
        key = ("lds_thread_c", self.lpairs, tuple(p for p, _ in self.clead), lo, los, v.es, v.pads, v.lead,
               self.shift)
        if key in em.memo:
            return em.memo[key]
        if not self.lpairs and not any(p for p, _ in self.clead):
            em.memo[key] = Imm(v.es * int(pad(np.int64(self.shift + lo), v.pads))
                               + sum(s * x for s, x in zip(v.lead, los)))
            return em.memo[key]
        with em.hoisted():
            x = _plus_lead_coords(em, self._lin_bytes(lo), self.clead, v.lead, los)
            if isinstance(x, Imm):
                x = em.to_v(x)
        em.memo[key] = x
        return x


    def _lin_bytes(self, lo: int):
        """es * pad(shift + (tL ^ lo)): a VGPR, or an Imm when no thread bit moves it (emitted in place)."""
        em = self.em
        add = "v_add_u32" if em.t.gfx9 else "v_add_nc_u32"
        x = thread_part(em, self.lpairs) if self.lpairs else Imm(0)
        if lo:
            x = em.valu("v_xor_b32", em.v(), [Imm(lo), em.to_v(x)])
        if self.shift:
            x = Imm(x.bits + self.shift) if isinstance(x, Imm) else em.valu(add, em.v(), [Imm(self.shift), x])
        return self._padded_bytes(x)


    def _padded_bytes(self, x):
        """es * pad(x) of a VGPR (emitted in place) or an Imm."""
        em, v = self.em, self.v
        add = "v_add_u32" if em.t.gfx9 else "v_add_nc_u32"
        if v.pads and not isinstance(x, Imm):
            acc = x
            for k, p in v.pads:
                t = em.valu("v_lshrrev_b32", em.v(), [Imm(k), x])
                t = em.valu("v_lshlrev_b32", em.v(), [Imm(p), t])
                acc = em.valu(add, em.v(), [acc, t])
            x = acc
        elif isinstance(x, Imm):
            x = Imm(int(pad(np.int64(x.bits), v.pads)))
        if v.es > 1 and not isinstance(x, Imm):
            x = em.valu("v_lshlrev_b32", em.v(), [Imm(log2(v.es)), x])
        elif isinstance(x, Imm):
            x = Imm(x.bits * v.es)
        return x


    def _plus_hoisted_spairs(self, em, x, add: str):
        """``x`` plus the stacked dims' thread bytes, summed once in the prologue (an address made
        at each access: a carried start's)."""
        if self.spairs:
            skey = ("lds_tid_sum", self.spairs)
            if skey not in em.memo:
                with em.hoisted():
                    em.memo[skey] = _tid_sum(em, self.spairs)
            x = em.valu(add, em.v(), [x, em.memo[skey]])
        return x


    def _with_spairs(self, em, x):
        """``x`` (bytes) plus the stacked dims' thread bytes, as a VGPR."""
        if self.spairs:
            s = _tid_sum(em, self.spairs)
            add = "v_add_u32" if em.t.gfx9 else "v_add_nc_u32"
            x = em.valu(add, em.v(), [x, s]) if not (isinstance(x, Imm) and x.bits == 0) else s
        return em.to_v(x) if isinstance(x, Imm) else x


def _plus_lead_coords(em, x, clead, lead, los):
    """``x`` plus sum_d lead_d * (tc_d ^ lo_d), tc_d the thread part of stacked dim d's coordinate."""
    add = "v_add_u32" if em.t.gfx9 else "v_add_nc_u32"
    for (pairs, _), s, c in zip(clead, lead, los):
        if not pairs:  # (then no register bit goes to the thread: c is 0)
            continue
        t = thread_part(em, pairs)
        if c:
            t = em.valu("v_xor_b32", em.v(), [Imm(c), t])
        if s & (s - 1) == 0:
            if s > 1:
                t = em.valu("v_lshlrev_b32", em.v(), [Imm(log2(s)), t])
        else:
            t = em.valu("v_mul_u32_u24", em.v(), [Imm(s), t])
        x = t if isinstance(x, Imm) and x.bits == 0 else em.valu(add, em.v(), [x, t])
    return x


def _image_terms(em, t, im):
    """VGPRs whose XOR is B(t), t < 2 ** len(im) a VGPR (see bit_fields): a field is t itself where it
    spans t, else a v_bfe_u32; its places, where they do not overlap, are one multiply (their XOR
    is their sum). Each emitted as it is taken."""
    for (j, k), places in bit_fields(im).items():
        u = t if j == 0 and k == len(im) else em.valu("v_bfe_u32", em.v(), [t, Imm(j), Imm(k)], form="vop3")
        groups: list = []
        for p in places:
            g = next((g for g in groups if all(abs(p - q) >= k for q in g)), None)
            g.append(p) if g is not None else groups.append([p])
        for g in groups:
            m = sum(1 << p for p in g)
            if m & (m - 1):
                yield em.valu("v_mul_u32_u24", em.v(), [Imm(m), u])
            else:
                yield em.valu("v_lshlrev_b32", em.v(), [Imm(g[0]), u]) if g[0] else u


def _bit_terms(em, t, im):
    """VGPRs whose XOR is B(t), one a bit of t, each emitted as it is taken."""
    for j, b in enumerate(im):
        if not b:
            continue
        u = em.valu("v_bfe_u32", em.v(), [t, Imm(j), Imm(1)], form="vop3")
        if b & (b - 1):
            u = em.valu("v_mul_u32_u24", em.v(), [Imm(b), u])
        elif b > 1:
            u = em.valu("v_lshlrev_b32", em.v(), [Imm(log2(b)), u])
        yield u


def _tid_sum(em, pairs):
    """VGPR: the sum of the values of the set work-item id bits (stacked-dim byte strides)."""
    add = "v_add_u32" if em.t.gfx9 else "v_add_nc_u32"
    acc = None
    for bit, val in pairs:
        t = em.valu("v_bfe_u32", em.v(), [em.tid, Imm(bit), Imm(1)], form="vop3")
        t = em.valu("v_mul_u32_u24", em.v(), [Imm(val), t])
        acc = t if acc is None else em.valu(add, em.v(), [acc, t])
    return acc


def _zero_v(em, value: int):
    key = ("lds_const_v", value)
    if key not in em.memo:
        with em.hoisted():
            em.memo[key] = em.to_v(Imm(value))
    return em.memo[key]

