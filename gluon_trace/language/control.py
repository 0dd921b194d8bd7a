"""Run-time loops and branches, traced once.

``for i in gl.range(lo, hi):`` traces its body once. Values the body rebinds are
carried across iterations. To get Python's exact meaning for every name (also two
names holding the same tile), each tile-valued local of the calling function is
rebound, at loop entry, to a fresh block argument of its own; at exit the names the
body did not rebind are restored, and their block arguments folded back into the
values they started as. ``with gl.if_(c):`` / ``with gl.else_():`` work the same
way, except that a branch needs no block arguments.

Only local variables (and closure cells) of the function that runs the loop are
carried; a tile kept in a list or an attribute and changed in the body is reported
as an escaped value when used after the loop.
"""
from __future__ import annotations

import builtins
import re
import ctypes
import sys
import types

from .. import dtypes as dt
from ..errors import TraceError, user_location
from ..ir import Block, Type
from ..tracer import current
from .tensor import cast, tensor, to_tensor, wrap

_WRITE_THROUGH = sys.version_info >= (3, 13)  # PEP 667: f_locals is a write-through proxy


# A local holding tiles inside a tuple, a list or an object (Gluon's @aggregate classes: a
# scheduler, an MMA state rebuilt by each call) is carried leaf by leaf: each visible tile in it
# is a slot named like ``st.acc`` or ``st[1]`` next to the plain locals, and writing slots back
# puts the tiles in place (a tuple on the way is rebuilt).
_MAX_DEPTH = 3


def _is_record(v) -> bool:
    """A user's object whose attributes may hold tiles (not a library object, class or function)."""
    return (hasattr(v, "__dict__") and not isinstance(v, (type, types.ModuleType, types.FunctionType,
                                                            types.MethodType, tensor))
            and not type(v).__module__.startswith("gluon_trace"))


def _leaves(v, is_leaf=lambda x: isinstance(x, tensor), depth=0):
    """[(path, leaf)] of the values in ``v`` that ``is_leaf`` takes (by default the tiles): ()
    for ``v`` itself; steps are ints (tuple and list items) and attribute names. A tile that is
    not a leaf is not looked into."""
    if is_leaf(v):
        return [((), v)]
    if depth >= _MAX_DEPTH or isinstance(v, tensor):
        return []
    if isinstance(v, (tuple, list)):
        items = enumerate(v)
    elif _is_record(v):
        items = list(vars(v).items())
    else:
        return []
    return [((k,) + p, t) for k, x in items for p, t in _leaves(x, is_leaf, depth + 1)]


def _slot(name: str, path: tuple) -> str:
    return name + "".join(f"[{k}]" if isinstance(k, int) else f".{k}" for k in path)


def _flat(frame, visible_only: bool) -> tuple[dict, dict]:
    """(slot -> tile, slot -> (local name, path)) of the frame's locals; with ``visible_only``
    a temporary an earlier loop or branch body left (``s = i % STAGES`` inside a finished loop)
    is no slot."""
    here = current().block
    slots, where = {}, {}
    for name, v in frame.f_locals.items():
        for path, t in _leaves(v):
            if visible_only and not (t.value.block is None or here.is_within(t.value.block)):
                continue
            k = _slot(name, path)
            slots[k], where[k] = t, (name, path)
    return slots, where


def _proxies(frame) -> dict[str, tensor]:
    """The tile slots still visible here."""
    return _flat(frame, True)[0]


def _assigned(v, path: tuple, leaf):
    """``v`` with the tile at ``path`` replaced: lists and objects in place (so a caller holding
    the same list or object sees what the loop or branch made of it, as Python would), tuples
    rebuilt."""
    if not path:
        return leaf
    k, rest = path[0], path[1:]
    if isinstance(v, list):
        v[k] = _assigned(v[k], rest, leaf)
        return v
    if isinstance(v, tuple):
        items = list(v)
        items[k] = _assigned(items[k], rest, leaf)
        return type(v)._make(items) if hasattr(type(v), "_make") else type(v)(items)
    object.__setattr__(v, k, _assigned(getattr(v, k), rest, leaf))  # (frozen dataclasses too)
    return v


def _set_locals(frame, updates: dict) -> None:
    if not updates:
        return
    plain = {k: v for k, v in updates.items() if k.isidentifier()}
    nested = [k for k in updates if not k.isidentifier()]
    if nested:
        _, where = _flat(frame, False)
        for k in nested:
            if k not in where:
                continue  # the structure changed: reported by _check_structures
            name, path = where[k]
            base = plain.get(name, frame.f_locals[name])
            plain[name] = _assigned(base, path, updates[k])
    if _WRITE_THROUGH:
        for k, v in plain.items():
            frame.f_locals[k] = v
        return
    frame.f_locals.update(plain)
    ctypes.pythonapi.PyFrame_LocalsToFast(ctypes.py_object(frame), ctypes.c_int(0))


def _check_structures(entry: dict, frame, loc, where: str) -> None:
    """A carried tuple, list or object keeps its tiles where they were."""
    now, _ = _flat(frame, False)
    for k in entry:
        if not k.isidentifier() and k not in now:
            name = k.split(".")[0].split("[")[0]
            raise TraceError(f"`{name}` changes structure in {where}: {k} holds a tile before it but not after",
                             loc, notes=("a carried tuple, list or object keeps its shape: rebuild it with a tile "
                                         "in every place that held one",))


def _exit_values(frame) -> dict:
    return _flat(frame, False)[0] | {k: v for k, v in frame.f_locals.items() if not isinstance(v, tensor)}


def _bound(x, what: str) -> tensor:
    t = to_tensor(x, dt.int32)
    if not t.type.is_scalar or not t.dtype.is_int or t.dtype.is_bool:
        raise TraceError(f"gl.range {what} must be an integer scalar, got {t.type}", user_location())
    return t


_NUMBER = (builtins.int, builtins.float, builtins.bool)


def _is_number(v) -> bool:
    return type(v) in _NUMBER


def _numbers(frame) -> dict:
    """The Python numbers in locals (a counter ``i = 0``, a phase, a count kept in an object or
    a tuple) before a body, by slot."""
    return {_slot(name, p): x for name, v in frame.f_locals.items() for p, x in _leaves(v, _is_number)}


_for_targets_cache: dict = {}


def _for_targets(code) -> frozenset | None:
    """Names a ``for`` statement of this function binds (a gl.static_range loop's variable
    ends at another value on purpose), or None when the source is not available."""
    if code in _for_targets_cache:
        return _for_targets_cache[code]
    import ast
    import inspect
    import textwrap
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(code)))
    except (OSError, TypeError, SyntaxError, IndentationError):
        names = None
    else:
        names = frozenset(n.id for f in ast.walk(tree) if isinstance(f, (ast.For, ast.comprehension))
                          for n in ast.walk(f.target) if isinstance(n, ast.Name))
    _for_targets_cache[code] = names
    return names


def _check_numbers(before: dict, frame, loc, where: str) -> None:
    """A Python number the body rebinds changed once, when the body was traced, whatever the
    run-time trip count or condition: Gluon carries it, we cannot, so say how to carry it."""
    now = _numbers(frame)
    changed = [(k, v, now[k]) for k, v in before.items() if k in now and now[k] != v and now[k] == now[k]]
    if not changed:
        return
    skip = _for_targets(frame.f_code)
    if skip is None:
        return
    changed = [c for c in changed if c[0] not in skip]
    if changed:
        name, old, new = changed[0]
        kind = {builtins.float: "gl.float32", builtins.bool: "gl.int1"}.get(type(old), "gl.int32")
        fix = (f"{name} = gl.full([], {old!r}, {kind})" if name.isidentifier() else
               f"hold a run-time value there (gl.full([], {old!r}, {kind}))")
        raise TraceError(
            f"`{name}` is a Python {type(old).__name__} that {where} changes ({old!r} before, {new!r} after): "
            "the body is traced once, so it changed once, at trace time, not at run time",
            loc, notes=(f"make it a run-time value before the {'loop' if 'loop' in where else 'branch'}: "
                        f"{fix}; it is then carried",))


def _carry_type_check(name, before: tensor, after, loc, where: str):
    if not isinstance(after, tensor):
        raise TraceError(f"`{name}` holds a tile before {where} but a {type(after).__name__} after it",
                         loc)
    if after.type != before.type:
        raise TraceError(
            f"`{name}` changes type in {where}: {before.type} before, {after.type} after",
            loc, notes=("a carried value keeps one type; convert with .to(dtype) or "
                        "gl.convert_layout before rebinding it",))


class range:
    """A run-time loop ``for i in gl.range(lo, hi, step)``; the body is traced once."""

    def __init__(self, arg1, arg2=None, step=None, num_stages=None, loop_unroll_factor=None):
        if arg2 is None:
            arg1, arg2 = 0, arg1
        self.lo, self.hi, self.step = arg1, arg2, 1 if step is None else step

    def __iter__(self):
        frame = sys._getframe(1)
        b = current()
        loc = user_location()
        lo, hi, step = (_bound(x, n) for x, n in ((self.lo, "start"), (self.hi, "end"), (self.step, "step")))
        ity = dt.promote(dt.promote(lo.dtype, hi.dtype), step.dtype)
        lo, hi, step = cast(lo, ity), cast(hi, ity), cast(step, ity)

        entry = _proxies(frame)
        numbers = _numbers(frame)
        body = Block(b.block)
        iv = body.add_arg(Type(ity), "i")
        fresh = {name: wrap(body.add_arg(p.type, re.sub(r"\W", "_", name))) for name, p in entry.items()}
        _set_locals(frame, fresh)
        with b.region(body, "the loop", loc):
            yield tensor(iv)
            _check_numbers(numbers, frame, loc, f"the gl.range loop at line {loc.line}")
            _check_structures(entry, frame, loc, f"the loop at line {loc.line}")
            exit_ = _exit_values(frame)
            carried, restore, fold = [], {}, {}
            for name, p in entry.items():
                now = exit_.get(name)
                if now is fresh[name]:
                    restore[name] = p
                    fold[fresh[name].value] = p.value
                else:
                    _carry_type_check(name, p, now, loc, f"the loop at line {loc.line}")
                    carried.append((name, p, now))
            body.replace_uses(fold)
            body.args = [iv] + [fresh[n].value for n, _, _ in carried]
            b.create("yield", [now.value for _, _, now in carried], loc=loc)
        op = b.create("for", [lo.value, hi.value, step.value] + [p.value for _, p, _ in carried],
                      {}, [body], loc=loc)
        restore.update({name: wrap(r) for (name, _, _), r in zip(carried, op.results)})
        _set_locals(frame, restore)


def static_range(*args):
    """A loop unrolled at trace time (a plain Python range)."""
    return builtins.range(*args)


class _Branch:
    """State shared by ``gl.if_`` and the ``gl.else_`` that may follow it."""

    def __init__(self, cond, loc):
        self.cond, self.loc = cond, loc
        self.entry: dict[str, tensor] = {}
        self.then_block = self.else_block = None
        self.then_vals: dict[str, tensor] = {}
        self.op = None
        self.names: list[str] = []


def _finish_branch(br: _Branch, frame, else_vals: dict | None) -> None:
    """(Re)build the `if` op from the branch bodies and rebind the changed names."""
    b = current()
    then_vals = br.then_vals
    else_vals = else_vals or {}
    names = [n for n in br.entry if n in then_vals or n in else_vals]
    for n in names:
        for vals, where in ((then_vals, "gl.if_"), (else_vals, "gl.else_")):
            if n in vals:
                _carry_type_check(n, br.entry[n], vals[n], br.loc, f"the {where} at line {br.loc.line}")
    for block, vals in ((br.then_block, then_vals), (br.else_block, else_vals)):
        if block.ops and block.ops[-1].name == "yield":
            block.ops.pop()
        with b.region(block, "a branch", br.loc):
            b.create("yield", [vals.get(n, br.entry[n]).value for n in names], loc=br.loc)
    if br.op is not None:
        b.block.ops.remove(br.op)
    br.op = b.create("if", [br.cond.value], {}, [br.then_block, br.else_block], loc=br.loc)
    br.names = names
    out = {n: wrap(r) for n, r in zip(names, br.op.results)}
    # names the then-body rebound but that no branch carries any more are left as they were
    _set_locals(frame, {**{n: br.entry[n] for n in br.entry}, **out})


class _BranchBody:
    """A ``with`` block that traces one branch body into ``self.block``."""

    br: _Branch

    def _open(self, block: Block, kind: str):
        self.numbers = _numbers(sys._getframe(2))
        self._ctx = current().region(block, kind, self.br.loc)
        self._ctx.__enter__()
        return self

    def __exit__(self, exc_type, exc, tb):
        self._ctx.__exit__(exc_type, exc, tb)
        if exc_type is not None:
            return False
        frame = sys._getframe(1)
        _check_numbers(self.numbers, frame, self.br.loc, f"the branch at line {self.br.loc.line}")
        _check_structures(self.br.entry, frame, self.br.loc, f"the branch at line {self.br.loc.line}")
        now = _exit_values(frame)
        rebound = {n: now[n] for n, p in self.br.entry.items() if now.get(n) is not p}
        self._close(frame, rebound)
        return False


class if_(_BranchBody):
    """``with gl.if_(cond):`` a run-time branch on a scalar condition."""

    def __init__(self, cond):
        self.br = _Branch(None, user_location())
        c = to_tensor(cond, dt.int1)
        if not c.type.is_scalar:
            raise TraceError("gl.if_ needs a scalar condition; for tiles use gl.where", self.br.loc)
        if not c.dtype.is_bool:
            c = c != 0
        self.br.cond = c

    def __enter__(self):
        b = current()
        self.br.entry = _proxies(sys._getframe(1))
        self.br.then_block = Block(b.block)
        self.br.else_block = Block(b.block)
        return self._open(self.br.then_block, "a gl.if_ branch")

    def _close(self, frame, rebound):
        self.br.then_vals = rebound
        _finish_branch(self.br, frame, None)
        current().last_branch = self.br


class else_(_BranchBody):
    """``with gl.else_():`` directly after a ``with gl.if_(...)`` block."""

    def __enter__(self):
        b = current()
        br, b.last_branch = b.last_branch, None
        if br is None or not b.block.ops or b.block.ops[-1] is not br.op:
            raise TraceError("gl.else_() must directly follow a `with gl.if_(...)` block",
                             user_location())
        self.br = br
        br.else_block.ops.clear()  # drop the yield the lone if_ gave it
        _set_locals(sys._getframe(1), dict(br.entry))  # the else body sees the values from before the if
        return self._open(br.else_block, "a gl.else_ branch")

    def _close(self, frame, rebound):
        _finish_branch(self.br, frame, rebound)


def fori_loop(lower, upper, body_fn, init, step=1):
    """Functional loop: ``carry = body_fn(i, carry)`` for i in [lower, upper); returns the carry.

    ``init`` is a tile or a tuple/list of tiles; ``body_fn`` returns the same structure.
    """
    b = current()
    loc = user_location()
    single = not isinstance(init, (tuple, list))
    inits = [to_tensor(x) for x in ([init] if single else init)]
    lo, hi, st = (_bound(x, n) for x, n in ((lower, "start"), (upper, "end"), (step, "step")))
    ity = dt.promote(dt.promote(lo.dtype, hi.dtype), st.dtype)
    lo, hi, st = cast(lo, ity), cast(hi, ity), cast(st, ity)
    body = Block(b.block)
    iv = tensor(body.add_arg(Type(ity), "i"))
    args = [wrap(body.add_arg(t.type)) for t in inits]
    with b.region(body, "the fori_loop body", loc):
        out = body_fn(iv, args[0] if single else type(init)(args))
        outs = [to_tensor(o) for o in ([out] if single else out)]
        if len(outs) != len(inits):
            raise TraceError(f"fori_loop body returned {len(outs)} values for {len(inits)} carried",
                             loc)
        for i, (o, t) in enumerate(zip(outs, inits)):
            _carry_type_check(f"carry[{i}]", t, o, loc, "the fori_loop body")
        b.create("yield", [o.value for o in outs], loc=loc)
    op = b.create("for", [lo.value, hi.value, st.value] + [t.value for t in inits], {}, [body], loc=loc)
    res = [wrap(r) for r in op.results]
    return res[0] if single else type(init)(res)
