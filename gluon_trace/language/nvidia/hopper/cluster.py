"""Clusters of CTAs (sm_90): the CTAs of a cluster run at the same time on one GPC, can write
each other's shared memory (TMA multicast) and arrive on each other's mbarriers.

A kernel is traced with ``num_ctas=n`` (a launch option, as in Triton): each n consecutive
programs along the grid's x form a cluster, and ``cta_rank()`` tells them apart. Before a CTA
multicasts into its peers or arrives on their mbarriers, the peers must have initialised those
mbarriers: call ``cluster.barrier()`` after the inits. And a CTA must not exit while a peer may
still write to it: end such a kernel with ``cluster.barrier()`` too. The interpreter runs a
cluster's CTAs together and reports either mistake at its line.
"""
from ....errors import TraceError
from ....tracer import current, user_location
from ...tensor import tensor

__all__ = ["cta_rank", "barrier"]

def cta_rank() -> tensor:
    """This CTA's rank in its cluster: 0 .. num_ctas() - 1 (%cluster_ctarank)."""
    return tensor(current().value("cluster_cta_id", [], {}))


def barrier() -> None:
    """Every thread of every CTA in the cluster meets here (barrier.cluster.arrive/wait): the
    mbarrier inits and shared-memory writes before it are visible to the whole cluster after."""
    b = current()
    if len(b.partition) > 1:
        raise TraceError("cluster.barrier() inside gl.warp_specialize: every thread of every CTA must "
                         "reach it; call it before or after the warp_specialize", user_location())
    b.create("cluster_barrier", [])
