"""Hopper (sm_90a): wgmma, TMA, mbarriers with transaction counts, async-proxy fences."""
from ....errors import TraceError
from ....tracer import current, user_location
from ...memory import _int
from ...mma import use_acc_operand
from ...tensor import tensor, to_tensor, wrap
from ..ampere import async_copy, mbarrier  # noqa: F401
from . import cluster, tma  # noqa: F401

__all__ = ["async_copy", "cluster", "fence_async_shared", "mbarrier", "tma", "warpgroup_mma", "warpgroup_mma_wait"]


def fence_async_shared(cluster=False) -> None:
    """Make this thread's earlier shared-memory writes visible to later async-proxy reads
    (TMA stores, wgmma operands): fence.proxy.async.shared::cta."""
    current().create("fence_async_shared", [], {"cluster": bool(cluster)})


def warpgroup_mma(a, b, acc, *, use_acc=True, precision=None, max_num_imprecise_acc=0,
                  is_async=False):
    """``acc (+)= a @ b`` on wgmma: acc in NVMMADistributedLayout([3, 0], ...), a a register
    tile in DotOperandLayout(0, acc.layout, ...) or a shared buffer, b a shared buffer in
    NVMMASharedLayout. With ``is_async=True`` the result may be read only after
    ``warpgroup_mma_wait`` (it may still be passed as the next wgmma's acc).

    **Pieces** (a tile N that is no power of two, e.g. 160 = 5 x 32): ``acc`` a list of P
    tiles [M, n] and ``b`` a stacked shared view [P, K, n]; each ``acc[p] (+)= a @ b[p]``,
    returned as a tuple, all in one wgmma group. Where the pieces lie in shared memory as one
    operand of P * n columns would (consecutive slots of one NVMMA buffer), the NVIDIA backend
    issues one m64n(P*n) instruction a K step instead of P narrow ones.

    **K pieces** (a K that is no power of two, or operands held in parts): ``a`` a list of Q
    tiles (or shared views) [M, k] and ``b`` stacked one more time, [Q, ...]: ``acc (+)= sum
    a[q] @ b[q]``, one wgmma group (as one call with K = Q * k would be). With both, b is
    [Q, P, k, n]. E.g. attention's O += P V over a KV tile of 10 pieces: P's ten [64, 16]
    register pieces against V's [10, 16, D] slots."""
    u = use_acc_operand(use_acc)
    attrs = {"is_async": bool(getattr(is_async, "value", is_async)), "precision": precision or "tf32"}
    a_terms = list(a) if isinstance(a, (list, tuple)) else [a]
    if isinstance(a, (list, tuple)):
        if not a_terms:
            raise TraceError("warpgroup_mma: a is an empty list; give one A operand a K piece", user_location())
        attrs["k_pieces"] = len(a_terms)
    a_vals = [to_tensor(x).value for x in a_terms]
    # the further K pieces of A come last: a_0, b, the accumulators and use_acc keep their places
    if isinstance(acc, (list, tuple)):
        accs = [to_tensor(x).value for x in acc]
        attrs["pieces"] = len(accs)
        op = current().create("wgmma", [a_vals[0], b.value, *accs, u.value, *a_vals[1:]], attrs)
        return tuple(wrap(r) for r in op.results)
    ops = [a_vals[0], b.value, to_tensor(acc).value, u.value, *a_vals[1:]]
    return tensor(current().value("wgmma", ops, attrs))


def warpgroup_mma_wait(num_outstanding=0, deps=None):
    """Wait until at most ``num_outstanding`` async wgmma groups are in flight; returns ``deps``
    (the values now safe to read)."""
    deps = list(deps or [])
    op = current().create("wgmma_wait", [to_tensor(d).value for d in deps],
                          {"num_outstanding": _int(num_outstanding, "num_outstanding")})
    out = [wrap(r) for r in op.results]
    return out[0] if len(out) == 1 else tuple(out)
