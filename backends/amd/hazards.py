"""Wait states the hardware does not interlock, inserted as ``s_nop`` (gfx9) or
``s_waitcnt_depctr`` (gfx11), for the instructions this backend emits. The rules
follow LLVM's GCNHazardRecognizer:

gfx90a, gfx942:
  VMEM reading an SGPR a VALU wrote (v_readfirstlane -> saddr)      5 wait states
  DPP reading a VGPR written by any instruction                      2
  v_div_fmas reading vcc a VALU wrote                                4
gfx942 only:
  VALU reading an SGPR/vcc a VALU wrote                              2
  v_readfirstlane reading a VGPR a VALU wrote                        1
  VALU reading the result of a transcendental (v_exp, v_rcp, ...)    1
gfx1100 (wave32):
  VALU reading a transcendental's result within 5 VALUs              s_waitcnt_depctr 0xfff
  WMMA reading the previous WMMA's D as srcA/srcB                    v_nop

MFMA (gfx90a, gfx942; P = the instruction's passes, mfma.MFMA) per the CDNA3 ISA guide, section
7.6 "Dependency Resolution: Required Independent Instructions" (the hardware does not interlock
the matrix pipe's results), in mfma_waits().

History is not followed across labels: after a label the worst case is assumed.
"""
from __future__ import annotations

from .mir import Fixed, Inst, Label, Neg, Reg, Sub, phys_units_of

TRANS = {"v_exp_f32", "v_log_f32", "v_rcp_f32", "v_rcp_iflag_f32", "v_rsq_f32", "v_sqrt_f32",
         "v_sin_f32", "v_cos_f32", "v_rcp_f64", "v_rsq_f64", "v_sqrt_f64", "v_exp_f16",
         "v_log_f16", "v_rcp_f16", "v_rsq_f16", "v_sqrt_f16", "v_sin_f16", "v_cos_f16"}

UNKNOWN = object()


def units(xs):
    out = []
    for x in xs:
        t = type(x)
        if t is Neg:
            x = x.x
            t = type(x)
        if t is Reg or t is Sub:
            phys_units_of((x,), out)
        elif t is Fixed:
            if x.name.startswith("vcc"):
                out += [("vcc", k) for k in range(x.size)]
            elif x.name.startswith("exec"):
                out += [("exec", k) for k in range(x.size)]
    return out


def is_valu(i) -> bool:
    return isinstance(i, Inst) and i.kind == "valu"


def is_vmem(i) -> bool:
    return isinstance(i, Inst) and i.kind.startswith("vmem")


def _waits(i) -> int:
    if isinstance(i, Inst) and i.op == "s_nop":
        return int(i.uses[0]) + 1
    return 1


class HazardPass:
    def __init__(self, target):
        self.t = target

    def since(self, hist, pred, limit):
        """Wait states since the last instruction matching pred (0 if the history is
        cut by a label), or a large number if none within ``limit``."""
        n = 0
        for h in reversed(hist):
            if h is UNKNOWN:
                return n
            if pred(h):
                return n
            n += _waits(h)
            if n >= limit:
                break
        return 1 << 20

    def nops(self, hist, i: Inst) -> int:
        t = self.t
        if not t.gfx9:
            return 0
        valu, vmem = is_valu(i), is_vmem(i)
        if not (vmem or (valu and t.gfx940) or i.op.endswith("_dpp") or i.op.startswith("v_div_fmas")):
            return 0  # none of the rules below is about this instruction
        need = 0
        uses = units(i.uses) + units(i.imp)
        s_uses = [u for u in uses if u[0] in ("s", "vcc")]
        v_uses = [u for u in uses if u[0] == "v"]

        def writes_valu(us):
            return lambda h: is_valu(h) and any(u in us for u in units(h.defs))

        if vmem and s_uses:
            need = max(need, 5 - self.since(hist, writes_valu(s_uses), 5))
        if i.op.endswith("_dpp") and v_uses:
            need = max(need, 2 - self.since(
                hist, lambda h: isinstance(h, Inst) and any(u in v_uses for u in units(h.defs)), 2))
        if i.op.startswith("v_div_fmas"):
            need = max(need, 4 - self.since(hist, writes_valu([("vcc", 0), ("vcc", 1)]), 4))
        if t.gfx940 and valu:
            if s_uses:
                need = max(need, 2 - self.since(hist, writes_valu(s_uses), 2))
            if i.op.startswith("v_readfirstlane") or i.op.startswith("v_readlane"):
                need = max(need, 1 - self.since(hist, writes_valu(v_uses), 1))
            if i.op not in TRANS and v_uses and hist:
                # (since(..., 1) looks at the last instruction alone: asked of nearly every
                # VALU, so without the closure) a trans result read by the next VALU
                h = hist[-1]
                if h is UNKNOWN or (is_valu(h) and h.op in TRANS and any(
                        u in v_uses for u in units(h.defs))):
                    need = max(need, 1)
        return need

    def trans_use_gfx11(self, hist, i: Inst) -> bool:
        if self.t.gfx9 or not is_valu(i):
            return False
        v_uses = [u for u in units(i.uses) if u[0] == "v"]
        if not v_uses:
            return False
        valus = trans = 0
        for h in reversed(hist):
            if h is UNKNOWN:
                return True
            if not isinstance(h, Inst):
                continue
            if h.kind.startswith(("vmem", "lds")) or h.op == "s_waitcnt_depctr":
                return False
            if is_valu(h):
                if h.op in TRANS and any(u in v_uses for u in units(h.defs)):
                    return True
                valus += 1
                trans += h.op in TRANS
                if valus > 5 or trans > 1:
                    return False
        return False

    def run(self, code: list) -> list:
        out, hist = [], []  # a wave starts with no instruction in flight
        self.mfma = MfmaUnits(code) if self.t.gfx9 else None
        for i in code:
            if isinstance(i, Label):
                out.append(i)
                hist = [UNKNOWN]
                continue
            n = self.nops(hist, i)
            if self.mfma is not None and self.mfma.any:
                n = max(n, mfma_waits(self.t, self.mfma, hist, i))
            while n > 0:  # s_nop 7 is the most wait states one s_nop gives on every gfx9
                k = min(n, 8)
                nop = Inst("s_nop", uses=[str(k - 1)], kind="nop", loc=i.loc)
                out.append(nop)
                hist.append(nop)
                n -= k
            if not self.t.gfx9 and wmma_reads_last_d(hist, i):
                nop = Inst("v_nop", kind="valu", loc=i.loc)
                out.append(nop)
                hist.append(nop)
            if self.trans_use_gfx11(hist, i):
                dep = Inst("s_waitcnt_depctr", uses=["0xfff"], kind="nop", loc=i.loc)
                out.append(dep)
                hist.append(dep)
            out.append(i)
            hist.append(i)
            if len(hist) > 32:  # enough for the 19 wait states of a 16-pass MFMA
                hist = hist[-32:]
        return out


def fix_hazards(code: list, target) -> list:
    return HazardPass(target).run(code)


# -- matrix instructions --------------------------------------------------------------------------

def _v(xs) -> set:
    """The VGPRs and AGPRs (MFMA accumulators) named."""
    return {u for u in units(xs) if u[0] in ("v", "a")}


def _is_mfma(i) -> bool:
    return isinstance(i, Inst) and i.op.startswith("v_mfma")


class MfmaUnits:
    """The VGPRs any MFMA of the kernel writes (D) or reads as srcC: after a label, where the
    history is unknown, only instructions touching those are held back."""

    def __init__(self, code):
        from .mfma import passes
        self.d, self.c = set(), set()
        self.p = 0
        for i in code:
            if _is_mfma(i):
                self.d |= _v(i.defs)
                self.c |= _v(i.uses[2:3])
                self.p = max(self.p, passes(i.op))
        self.any = bool(self.d)


def mfma_waits(t, mu: MfmaUnits, hist, i: Inst) -> int:
    """Wait states ``i`` needs after the MFMAs (and VALU writes) in ``hist``:
      MFMA (P passes) writes D -> any other instruction reads or writes D        P + 3
      MFMA writes D -> an MFMA reads it as srcA/srcB                             P + 3
      MFMA writes D -> an MFMA reads it as srcC: the same registers              0
                                                overlapping others      P (gfx90a), P + 1 (gfx942)
      MFMA reads srcC -> another instruction writes those registers (WAR)        P - 1
      VALU writes a VGPR -> an MFMA reads it                                     2
    (CDNA3 ISA 7.6 "Dependency Resolution: Required Independent Instructions"; the 2-pass and
    f64 special cases there concern MFMAs this backend does not emit.)"""
    from .mfma import passes
    if not isinstance(i, Inst) or i.kind in ("nop", "branch", "cbranch", "end"):
        return 0
    mf = _is_mfma(i)
    uses, defs = _v(i.uses), _v(i.defs)
    src_ab = _v(i.uses[:2]) if mf else set()
    src_c = _v(i.uses[2:3]) if mf else set()
    need, n = 0, 0
    for h in reversed(hist):
        if h is UNKNOWN:  # after a label: the worst any MFMA of the kernel could ask
            if mf:
                need = max(need, 2 - n)
                if src_ab & mu.d:
                    need = max(need, mu.p + 3 - n)
                if src_c & mu.d:  # srcC after D: the same registers 0, overlapping ones at most this
                    need = max(need, mu.p + (1 if t.gfx940 else 0) - n)
            else:
                if (uses | defs) & mu.d:
                    need = max(need, mu.p + 3 - n)
                if defs & mu.c:
                    need = max(need, mu.p - 1 - n)
            break
        if _is_mfma(h):
            p, hd = passes(h.op), _v(h.defs)
            if mf:
                if src_ab & hd:
                    need = max(need, p + 3 - n)
                if src_c & hd and src_c != hd:
                    need = max(need, p + (1 if t.gfx940 else 0) - n)
            else:
                if (uses | defs) & hd:
                    need = max(need, p + 3 - n)
                if defs & _v(h.uses[2:3]):
                    need = max(need, p - 1 - n)
        elif mf and is_valu(h) and (src_ab | src_c) & _v(h.defs):
            need = max(need, 2 - n)
        n += _waits(h)
        if n >= mu.p + 3:
            break
    return max(need, 0)


def wmma_reads_last_d(hist, i) -> bool:
    """RDNA3: a WMMA reading the D of the WMMA just before it as srcA/srcB needs one VALU between
    (LLVM's GCNHazardRecognizer::fixWMMAHazards; C may be read back to back)."""
    if not (isinstance(i, Inst) and i.op.startswith("v_wmma")):
        return False
    prev = next((h for h in reversed(hist) if h is UNKNOWN or is_valu(h)), None)
    if not isinstance(prev, Inst) or not prev.op.startswith("v_wmma"):
        return False
    return bool(_v(prev.defs) & _v(i.uses[:2]))
