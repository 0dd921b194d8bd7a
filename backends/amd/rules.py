"""One lowering rule per op of ``gluon_trace.ops.OPS``."""
from __future__ import annotations

from gluon_trace import ops as op_table

from . import affine, arith, atomics, control, layout, memory, printing, reduce
from .emitter import elem_key
from .mir import Aff, Imm


def elementwise(fn, aware=False):
    """Apply ``fn(em, op, *elements)`` per register index (once per distinct operands).
    Unless the rule is ``aware`` of ``var + c`` elements, they are materialized first."""
    def rule(em, op):
        ins = [em.vals[v] for v in op.operands]
        if op.results[0].type.is_scalar:
            em.vals[op.result] = fn(em, op, *(ins if aware else [em.real(x) for x in ins]))
            return
        memo, out = {}, []
        for args in zip(*ins):
            key = tuple(elem_key(a) for a in args)
            if key not in memo:
                memo[key] = fn(em, op, *(args if aware else [em.real(x) for x in args]))
            out.append(memo[key])
        em.vals[op.result] = out
    return rule


def _dtype(op, i=0):
    return op.operands[i].type.dtype


def _binary(em, op, a, b):
    d = _dtype(op)
    if op.name in affine.AWARE and affine.tracks(d):
        r = affine.binary(em, op.name, d, a, b)
        if r is not None:
            return r
    a, b = em.real(a), em.real(b)
    if op.name == "div" and op.attrs.get("approx") and d.name == "float32":
        from .fmath import fdiv
        return fdiv(em, d, a, b, approx=True)
    return arith.binary(em, op.name, d, a, b)


def _compare(em, op, a, b):
    d = _dtype(op)
    if op.name in affine.AWARE and affine.tracks(d):
        return affine.compare(em, op.name, d, a, b)
    return arith.compare(em, op.name, d, em.real(a), em.real(b))


def _unary(em, op, a):
    if op.name == "exp2" and op.attrs.get("ftz"):  # gl.exp2(x, ftz=True): v_exp_f32 flushes itself
        return arith.exp2_ftz(em, _dtype(op), a)
    return arith.unary(em, op.name, _dtype(op), a)


def _const(em, op):
    em.vals[op.result] = arith.const_elem(op.attrs["value"], op.attrs["dtype"])


def _program_id(em, op):
    em.vals[op.result] = em.wgid[op.attrs["axis"]]


def _num_programs(em, op):
    em.vals[op.result] = em.hidden_arg("hidden_block_count_" + "xyz"[op.attrs["axis"]])


def _hint(em, op):
    """multiple_of(k) feeds the known-multiple table (max_contiguous needs nothing: the
    constant parts of addresses already show contiguity)."""
    x = em.vals[op.operands[0]]
    k = op.attrs.get("multiple_of")
    if k:
        m = k & -k
        for e in (x if isinstance(x, list) else [x]):
            if isinstance(e, Aff) and e.c % m == 0:
                e = e.var
            if not isinstance(e, (Aff, Imm)) and getattr(e, "id", None) not in em.homes:
                em.set_mult(e, max(m, em.mult(e)))
    em.vals[op.result] = x


RULES: dict = {}
for _n in op_table.BINARY:
    RULES[_n] = elementwise(_binary, aware=True)
for _n in op_table.COMPARE:
    RULES[_n] = elementwise(_compare, aware=True)
for _n in op_table.UNARY:
    RULES[_n] = elementwise(_unary)
RULES.update({
    "fma": elementwise(lambda em, op, a, b, c: arith.fma(em, _dtype(op), a, b, c)),
    "ptr_add": elementwise(lambda em, op, p, o: affine.ptr_add(
        em, _dtype(op).element.itemsize, p, o, _dtype(op, 1)), aware=True),
    "where": elementwise(lambda em, op, c, a, b: arith.where(em, op.result.type.dtype, c, a, b)),
    "cast": elementwise(lambda em, op, x: arith.cast(em, _dtype(op), op.attrs["dtype"], x,
                                                     op.attrs.get("bitcast", False))),
    "hint": _hint,
    "const": _const,
    "program_id": _program_id,
    "num_programs": _num_programs,
    "arange": layout.rule_arange,
    "splat": layout.rule_splat,
    "broadcast": layout.rule_broadcast,
    "expand_dims": layout.rule_expand_dims,
    "convert_layout": layout.rule_convert_layout,
    "reshape": layout.rule_reshape,
    "permute": layout.rule_permute,
    "split": layout.rule_split,
    "join": layout.rule_join,
    "load": memory.rule_load,
    "store": memory.rule_store,
    "atomic_rmw": atomics.rule_atomic_rmw,
    "atomic_cas": atomics.rule_atomic_cas,
    "print": printing.lower_print,  # records in a launcher-owned buffer, not ROCm's hostcall
    "reduce": reduce.rule_reduce,
    "scan": reduce.rule_scan,
    "for": control.rule_for,
    "if": control.rule_if,
    "yield": control.rule_yield,
})

def _read_timer(em, op):
    """gl.globaltimer(): the real-time counter (s_memrealtime on CDNA, the GET_REALTIME message on
    RDNA3, which has no s_mem*time), whose clock is 100 MHz on gfx90a, gfx942 and gfx1100: times
    10 for nanoseconds. gl.clock64(): the shader clock (s_memtime) on CDNA; RDNA3 has no 64-bit
    read of it, so there the real-time count, in its own 10 ns ticks. Both arrive through the
    scalar cache's counter: s_waitcnt lgkmcnt before a use (waitcnt.py)."""
    r = em.s(2)
    realtime = op.attrs["clock"] == "globaltimer"
    if em.t.gfx9:
        em.emit("s_memrealtime" if realtime else "s_memtime", [r], [], kind="smem")
    else:
        em.emit("s_sendmsg_rtn_b64", [r], ["sendmsg(MSG_RTN_GET_REALTIME)"], kind="smem")
    em.vals[op.result] = arith.mul64(em, r, Imm(10, 2)) if realtime else r


RULES["read_timer"] = _read_timer

from .tensorcore import RULES as _TENSORCORE  # noqa: E402

for _n, _r in _TENSORCORE.items():
    RULES.setdefault(_n, _r)

assert set(RULES) == set(op_table.OPS), set(op_table.OPS) ^ set(RULES)
