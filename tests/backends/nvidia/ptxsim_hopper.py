"""ptxsim_async extended with Hopper's asynchronous proxy: TMA tensor copies and wgmma.

Written from the PTX ISA and the CUDA driver API's description of CUtensorMap, not from our
emitter's layout code, so a test that runs our PTX here checks it independently.

TMA (``cp.async.bulk.tensor.{1..5}d``, tile mode, element strides 1). A ``.param .align 64 .b8
x[128]`` argument is a :class:`TensorMap` (what cuTensorMapEncodeTiled would record: global
address, dims and byte strides innermost first, box, element size, swizzle, OOB fill).
- A load reads the box at the coordinates (signed; elements outside the tensor read as zero,
  or as NaN with the NaN fill), packs it innermost dim first from the destination address
  (128-byte aligned), and XORs the 16-byte chunk bits [4, 4+b) of each byte's shared address
  with bits [7, 7+b) (b = 1, 2, 3 for the 32, 64, 128-byte swizzles, whose span the box's inner
  extent may not exceed). Its bytes stay in flight (a shared read of them raises) until a
  waiter on its mbarrier needs them; they count against the barrier's transaction count
  (``mbarrier.arrive.expect_tx`` / ``expect_tx`` raise it, the landed bytes lower it), and a
  phase completes only when its arrivals and its bytes are both done. A waiter lands the
  barrier's copies one at a time only until the phase completes: a copy the expected bytes do
  not cover stays in flight, so a kernel that expects too few bytes reads unlanded bytes; one
  that expects too many spins on its wait, which is reported as a deadlock once the wait has
  failed 64 times with the barrier unchanged (in lockstep nothing else can run meanwhile).
- A store (``.global.shared::cta.bulk_group``) takes the box from shared memory and writes the
  elements inside the tensor; a row that ends inside a 16-byte piece also gets the rest of that
  piece (as an H100 does, and the interpreter models). Its source must have been written
  through the async proxy or fenced (``fence.proxy.async``) since it was last written by
  ``st.shared``/``stmatrix``, else RuntimeError. It reads shared memory when a
  ``cp.async.bulk.wait_group[.read] N`` retires its group; shared bytes changed between the
  store and that wait raise. A kernel that exits with a store not waited for raises, and so does
  one that exits with a TMA load no wait needed (it may land after the CTA exited).

wgmma (``wgmma.mma_async.sync.aligned.m64nNk{16,8,32}.f32.{f16,bf16,tf32,e4m3,e5m2}`` and
``.s32.{s8,u8}.{s8,u8}``, A from a
shared-memory descriptor or from registers, B from a descriptor; ``wgmma.fence`` /
``commit_group`` / ``wait_group``). A descriptor is decoded as the ISA's matrix-descriptor
format (start address, leading and stride byte offsets, each >> 4, in bits 0-13, 16-29, 32-45;
base offset in 49-51; swizzle in 62-63: 0 none, 1 128B, 2 64B, 3 32B), the operand read through
the ISA's canonical layouts: K-major: rows of 16 bytes (none) or of the swizzle width, 8-row groups
SBO apart, and (none only) the second 8-element K block LBO on; MN-major: 16-byte (none) or
swizzle-width runs of MN, K rows 16 bytes (none) or the swizzle width apart, 8-K-row groups at LBO
(none) / SBO (swizzled), MN runs at SBO (none) / LBO (swizzled); the swizzle XORs address bits
as TMA does. D (the m64nN accumulator) is spread as the ISA's figure: warp w of the warpgroup
holds rows 16w..16w+15, lane l row 16w + l/4 (+8 for the odd pairs of registers) and columns
8j + 2(l%4) (+1) in registers 4j..4j+3. The product is exact (float64) and rounded to f32 once
per instruction. The result is written at issue (lockstep), but its registers stay in flight
until a ``wgmma.wait_group`` retires their group: an instruction reading or writing them
before raises, and so does a wgmma whose accumulator or A registers another instruction wrote
since the last ``wgmma.fence``, or whose shared operands were written by st.shared/stmatrix
with no ``fence.proxy.async`` since, or are still being copied in by TMA. Its shared operands
stay read until the group retires: a TMA load into them, or an st.shared/stmatrix that changes
them, before that raises (a ring slot refilled too early).

Warp-specialized kernels need ptxsim_ws (its scheduler parks waiting threads): their partitions
spin on mbarriers that another partition completes, which a lockstep machine (lowest program
counter first) cannot interleave. Clusters of several CTAs (``mapa``, multicast, remote
arrivals) are ptxsim_cluster's, ``barrier.cluster`` ptxsim_ws's.
"""
from __future__ import annotations

import re

import numpy as np

from ptxsim import Kernel, Mem
from ptxsim_async import AsyncSim

_SWIZZLE_BITS = {0: 0, 32: 1, 64: 2, 128: 3}
_DESC_SWIZZLE = {0: 0, 1: 128, 2: 64, 3: 32}   # descriptor bits 62-63 -> swizzle width in bytes
_WG_TYPES = {"f16": (2, 16), "bf16": (2, 16), "tf32": (4, 8), "e4m3": (1, 32), "e5m2": (1, 32),  # bytes, K
             "s8": (1, 32), "u8": (1, 32)}
_PARAM_SPACE = 0xFFFF << 40      # fake generic addresses of array parameters (tensor maps)
# what createpolicy.fractional writes: a tag the TMA loads' cache-policy operand must carry
_POLICIES = {"L2::evict_first": 0xCA11 << 48 | 1, "L2::evict_last": 0xCA11 << 48 | 2,
             "L2::evict_normal": 0xCA11 << 48 | 3}


class TensorMap:
    """The fields of a CUtensorMap (tile mode), innermost dimension first."""

    def __init__(self, address, dims, strides, box, elem_bytes, swizzle=0, nan_fill=False):
        self.address, self.elem = int(address), int(elem_bytes)
        self.dims, self.box = tuple(int(d) for d in dims), tuple(int(b) for b in box)
        self.strides = (self.elem,) + tuple(int(s) for s in strides)   # bytes, dim 0 included
        self.swizzle, self.nan_fill = int(swizzle), bool(nan_fill)
        if len(self.strides) != len(self.dims) or len(self.box) != len(self.dims):
            raise ValueError("a tensor map needs one stride per dim past the first and one box extent per dim")
        if any(s % 16 for s in self.strides[1:]) or self.address % 16:
            raise ValueError("tensor map: global address and strides must be multiples of 16 bytes")
        inner = self.box[0] * self.elem
        if inner % 16:
            raise ValueError(f"tensor map: the box's inner extent is {inner} bytes, not a multiple of 16")
        if self.swizzle and inner > self.swizzle:
            raise ValueError(f"tensor map: the box's inner extent ({inner} B) exceeds the {self.swizzle}B swizzle span")
        if self.swizzle and inner != self.swizzle:
            raise NotImplementedError("ptxsim_hopper: a swizzled box narrower than its swizzle span")

    @property
    def box_bytes(self) -> int:
        return int(np.prod(self.box)) * self.elem

    def element_coords(self, coords):
        """(n_elements, rank) global coordinates of the box's elements in shared-memory order
        (innermost dim fastest)."""
        grids = np.meshgrid(*[np.arange(b) for b in reversed(self.box)], indexing="ij")
        rel = np.stack([g.reshape(-1) for g in reversed(grids)], axis=1)
        return rel + np.asarray(coords, np.int64)[None, :]

    def smem_addresses(self, dst: int) -> np.ndarray:
        """(n_elements, elem) shared byte addresses of the box's elements, swizzled."""
        lin = dst + np.arange(self.box_bytes, dtype=np.int64)
        b = _SWIZZLE_BITS[self.swizzle]
        if b:
            lin = lin ^ (((lin >> 7) & ((1 << b) - 1)) << 4)
        return lin.reshape(-1, self.elem)


def _root(arr: np.ndarray):
    """The array owning ``arr``'s memory, and ``arr``'s byte offset in it."""
    root = arr
    while isinstance(root.base, np.ndarray):
        root = root.base
    off = arr.__array_interface__["data"][0] - root.__array_interface__["data"][0]
    return root, off


class HopperMem(Mem):
    """Global memory where views of one array share its buffer (a descriptor over a slice)."""

    def __init__(self):
        super().__init__()
        self.roots: dict[int, int] = {}

    def address(self, arr: np.ndarray) -> int:
        root, off = _root(arr)
        if not root.flags.c_contiguous:
            raise ValueError("ptxsim_hopper: an argument's owning array must be contiguous")
        if id(root) not in self.roots:
            self.roots[id(root)] = self.add(root)
        return self.roots[id(root)] + off

    def buffer(self, addr: int):
        return self.bufs[(addr >> 40) - 1], addr & ((1 << 40) - 1)


def tensor_map(desc, mem: HopperMem) -> TensorMap:
    """The map the driver would encode for one of our TensorDescriptors (its encode arguments),
    addressed in the simulator's memory."""
    from gluon_trace.backends.nvidia import tma
    a = tma.encode_args(desc)
    if any(e != 1 for e in a["element_strides"]):
        raise NotImplementedError("ptxsim_hopper: element strides other than 1")
    return TensorMap(mem.address(desc.base), a["global_dims"], a["global_strides"], a["box_dims"],
                     desc.dtype.bits // 8, {"NONE": 0, "32B": 32, "64B": 64, "128B": 128}[a["swizzle"]],
                     a["oob_fill"] != "NONE")


def _nan_bits(elem: int) -> int:
    return {2: 0x7FFF, 4: 0x7FFFFFFF, 8: 0x7FFFFFFFFFFFFFFF}[elem]


class _Load:
    __slots__ = ("cta", "addrs", "data", "nbytes")

    def __init__(self, cta, addrs, data):
        self.cta, self.addrs, self.data, self.nbytes = cta, addrs, data, data.size


class _Store:
    __slots__ = ("cta", "tmap", "coords", "addrs", "seen")

    def __init__(self, cta, tmap, coords, addrs, seen):
        self.cta, self.tmap, self.coords, self.addrs, self.seen = cta, tmap, coords, addrs, seen


class HopperSim(AsyncSim):
    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.fenced = self.smem.copy()        # shared memory as the async proxy may see it
        self.bulk_open: dict[int, list] = {}  # thread -> bulk stores not yet committed
        self.bulk_groups: dict[int, list] = {}
        self.tmaps: dict[int, TensorMap] = {}
        self.spins: dict = {}                     # mbarrier -> (its state, failed waits in a row)
        self.wg_seq: dict[str, np.ndarray] = {}   # register -> group number of its pending write, -1
        self.wg_commits = np.zeros(self.N, np.int64)
        self.wg_reads: list = []                  # (cta, first thread, group, shared bytes) in flight
        self.wg_busy = np.zeros(self.smem.shape, np.int32)   # in-flight wgmma reads over each byte
        self.dirty: dict[str, np.ndarray] = {}    # register -> written since the thread's wgmma.fence
        self._exec_m = np.zeros(self.N, bool)
        self._guard = True
        for i, (t, n) in enumerate(self.k.params):
            if isinstance(self.params.get(n), TensorMap):
                self.tmaps[_PARAM_SPACE + 256 * i] = self.params[n]
                self.params[n] = _PARAM_SPACE + 256 * i

    # -- registers: in-flight wgmma results, writes since wgmma.fence ------------------------------
    def exec(self, parts, args, m, active):
        self._exec_m = m
        return super().exec(parts, args, m, active)

    def get(self, r):
        if self._guard and r in self.wg_seq:
            hit = (self.wg_seq[r] >= 0) & self._exec_m
            if hit.any():
                raise RuntimeError(f"thread {int(np.argmax(hit))} reads {r}, a wgmma result, before the "
                                   "wgmma.wait_group that retires it")
        return super().get(r)

    def set(self, r, value, mask):
        if r in self.wg_seq and ((self.wg_seq[r] >= 0) & mask).any():
            raise RuntimeError(f"{r} is written while a wgmma writing it is in flight (no wgmma.wait_group)")
        self._guard = False
        try:
            super().set(r, value, mask)
        finally:
            self._guard = True
        d = self.dirty.get(r)
        self.dirty[r] = mask.copy() if d is None else d | mask

    # -- the tensor map parameter's generic address ---------------------------------------------
    def op_mov(self, parts, args, m, active):
        if args[1] in self.params and self.ptypes.get(args[1]) == "tmap":
            self.set(args[0], np.full(self.N, self.params[args[1]], np.uint64), m)
            return None
        return super().op_mov(parts, args, m, active)

    def op_cvta(self, parts, args, m, active):
        if parts[1] == "param":
            self.set(args[0], self.val(args[1], "u64"), m)
            return None
        return super().op_cvta(parts, args, m, active)

    def _tmap(self, addr: int) -> TensorMap:
        if addr not in self.tmaps:
            raise RuntimeError(f"a TMA copy names {hex(addr)}, which is no tensor-map parameter's address")
        return self.tmaps[addr]

    def _tensor_operand(self, arg: str):
        """[%rdN, {c0, c1, ...}] -> (map register, coordinate registers innermost first)."""
        m = re.fullmatch(r"\[\s*(%\w+)\s*,\s*\{([^}]*)\}\s*\]", arg)
        if not m:
            raise NotImplementedError(f"ptxsim_hopper: tensor operand {arg}")
        return m.group(1), [c.strip() for c in m.group(2).split(",")]

    # -- global side of a box -------------------------------------------------------------------
    def _global_offsets(self, tm: TensorMap, coords):
        """(element coordinates, inside-the-tensor mask, owning buffer, each element's byte
        offset in it)."""
        g = tm.element_coords(coords)
        inside = ((g >= 0) & (g < np.asarray(tm.dims)[None, :])).all(axis=1)
        buf, base = self.mem.buffer(tm.address)
        off = base + (g * np.asarray(tm.strides)[None, :]).sum(axis=1)
        if (off[inside] + tm.elem > buf.size).any() or (off[inside] < 0).any():
            raise IndexError("a TMA box element inside the tensor map lies outside its buffer")
        return g, inside, buf, off

    def op_createpolicy(self, parts, args, m, active):
        # createpolicy.fractional.L2::<policy>.b64 d, fraction: only the whole-range form
        if parts[1] != "fractional" or parts[2] not in _POLICIES or parts[-1] != "b64" or float(args[1]) != 1.0:
            raise NotImplementedError(f"ptxsim_hopper: {'.'.join(parts)} {', '.join(args)}")
        self.set(args[0], np.full(self.N, _POLICIES[parts[2]], np.uint64), m)
        return None

    def _tma_load(self, parts, args, m):
        if "shared::cluster" not in parts or not any(p.startswith("mbarrier::complete_tx") for p in parts):
            raise NotImplementedError(f"ptxsim_hopper: {'.'.join(parts)}")
        if "L2::cache_hint" in parts:  # the last operand: a policy createpolicy made
            pol = self.val(args[-1], "u64")[m]
            if not np.isin(pol, np.array(list(_POLICIES.values()), np.uint64)).all():
                raise RuntimeError(f"a TMA load's cache-policy operand {args[-1]} holds no createpolicy value")
            self.cache_hints = getattr(self, "cache_hints", 0) + int(m.sum())
            args = args[:-1]
        dst = self._addr(args[0])
        treg, cregs = self._tensor_operand(args[1])
        bar = self._addr(args[2])
        rank = int(parts[4][:-1])
        maps = self.val(treg, "u64")
        cs = [self.val(c, "s32").astype(np.int64) for c in cregs]
        if len(cs) != rank:
            raise RuntimeError(f"cp.async.bulk.tensor.{rank}d with {len(cs)} coordinates")
        for i in np.nonzero(m)[0]:
            tm = self._tmap(int(maps[i]))
            if len(tm.dims) != rank:
                raise RuntimeError(f"a {rank}-d tensor copy through a {len(tm.dims)}-d tensor map")
            _, inside, buf, off = self._global_offsets(tm, [int(c[i]) for c in cs])
            data = buf[np.where(inside, off, 0)[:, None] + np.arange(tm.elem)[None, :]].copy()
            fill = _nan_bits(tm.elem) if tm.nan_fill else 0
            data[~inside] = np.frombuffer(fill.to_bytes(tm.elem, "little"), np.uint8)
            for c, d, at, b in self._tma_destinations(int(i), parts, args, int(dst[i]), int(bar[i])):
                if d % 128:
                    raise IndexError(f"TMA load into shared {d}: not 128-byte aligned")
                addrs = tm.smem_addresses(d)
                if addrs.max() >= self.smem.shape[1]:
                    raise IndexError(f"TMA load into shared {d}..{d + tm.box_bytes}: past the shared memory")
                if self.wg_busy[c, addrs].any():
                    raise RuntimeError(f"a TMA load into shared {d}.. overwrites bytes an in-flight wgmma reads in "
                                       f"CTA {c} (no wgmma.wait_group retired it)")
                self._tma_write(int(i), c, addrs.reshape(-1), at, b)
                ld = _Load(c, addrs.reshape(-1), data.reshape(-1))
                self.busy[c, ld.addrs] += 1
                b[5].append(ld)

    def _tma_destinations(self, i: int, parts, args, dst: int, bar: int) -> list:
        """(CTA, shared offset, mbarrier's offset, mbarrier) of each CTA a TMA load by thread ``i``
        writes into: its own (clusters of several CTAs, multicast: ptxsim_cluster)."""
        if any(p.startswith("multicast") for p in parts):
            raise NotImplementedError(f"ptxsim_hopper: {'.'.join(parts)} (multicast: ptxsim_cluster)")
        c = int(self.cta[i])
        return [(c, dst, bar, self._bar(c, bar))]

    def _tma_write(self, i: int, cta: int, addrs, bar_at: int, bar) -> None:
        """A TMA load by thread ``i`` is issued into ``cta``'s shared bytes ``addrs``, tracked by
        its mbarrier at ``bar_at`` (a hook)."""

    def _land_tma(self, bar, ld: _Load) -> None:
        self.smem[ld.cta, ld.addrs] = ld.data
        self.fenced[ld.cta, ld.addrs] = ld.data   # written by the async proxy itself
        self.busy[ld.cta, ld.addrs] -= 1
        bar[4] -= ld.nbytes
        self._complete(bar)

    def _tma_store(self, parts, args, m):
        treg, cregs = self._tensor_operand(args[0])
        src = self._addr(args[1])
        maps = self.val(treg, "u64")
        cs = [self.val(c, "s32").astype(np.int64) for c in cregs]
        for i in np.nonzero(m)[0]:
            tm = self._tmap(int(maps[i]))
            s, c = int(src[i]), int(self.cta[i])
            if s % 128:
                raise IndexError(f"TMA store from shared {s}: not 128-byte aligned")
            addrs = tm.smem_addresses(s).reshape(-1)
            if self.busy[c, addrs].any():
                raise RuntimeError(f"a TMA store reads shared {s}.. before the copies into it landed")
            if (self.smem[c, addrs] != self.fenced[c, addrs]).any():
                raise RuntimeError(f"a TMA store reads shared {s}.. written by st.shared/stmatrix with no "
                                   "fence.proxy.async since")
            st = _Store(c, tm, [int(x[i]) for x in cs], addrs, self.smem[c, addrs].copy())
            self.bulk_open.setdefault(int(i), []).append(st)

    def _retire_store(self, st: _Store) -> None:
        now = self.smem[st.cta, st.addrs]
        if not np.array_equal(now, st.seen):
            raise RuntimeError("shared bytes under a TMA store changed before cp.async.bulk.wait_group retired it")
        tm = st.tmap
        g, _, buf, off = self._global_offsets(tm, st.coords)
        # a row ending inside a 16-byte piece gets the rest of that piece written too (H100)
        per = 16 // tm.elem if tm.elem < 16 else 1
        wide = -(-tm.dims[0] // per) * per
        rest = np.asarray(tm.dims[1:])[None, :]
        keep = (g[:, 0] >= 0) & (g[:, 0] < wide) & ((g[:, 1:] >= 0) & (g[:, 1:] < rest)).all(axis=1)
        data = now.reshape(-1, tm.elem)
        idx = off[keep][:, None] + np.arange(tm.elem)[None, :]
        if idx.size and (idx.max() >= buf.size or idx.min() < 0):
            raise IndexError("a TMA store writes outside its tensor's buffer")
        buf[idx] = data[keep]

    def op_cp(self, parts, args, m, active):
        if parts[2] != "bulk":
            return super().op_cp(parts, args, m, active)
        idx = [int(i) for i in np.nonzero(m)[0]]
        if parts[3] == "commit_group":
            for i in idx:
                self.bulk_groups.setdefault(i, []).append(self.bulk_open.pop(i, []))
            return None
        if parts[3] == "wait_group":
            keep = int(args[0])
            for i in idx:
                gs = self.bulk_groups.get(i, [])
                while len(gs) > keep:
                    for st in gs.pop(0):
                        self._retire_store(st)
            return None
        if parts[3] != "tensor":
            raise NotImplementedError(f"ptxsim_hopper: {'.'.join(parts)}")
        if parts[5].startswith("shared"):
            self._tma_load(parts, args, m)
        elif parts[5] == "global" and "bulk_group" in parts:
            self._tma_store(parts, args, m)
        else:
            raise NotImplementedError(f"ptxsim_hopper: {'.'.join(parts)}")
        return None

    # -- wgmma --------------------------------------------------------------------------------
    def _operand_addresses(self, desc: int, rows: int, K: int, e: int, mn_major: bool) -> np.ndarray:
        """(rows, K) shared byte addresses of an operand's elements (row = M or N index) read
        through the 64-bit matrix descriptor ``desc`` (first byte of each element)."""
        start = (desc & 0x3FFF) << 4
        lbo = ((desc >> 16) & 0x3FFF) << 4
        sbo = ((desc >> 32) & 0x3FFF) << 4
        if (desc >> 49) & 7:
            raise NotImplementedError("ptxsim_hopper: a wgmma descriptor with a matrix base offset")
        W = _DESC_SWIZZLE[(desc >> 62) & 3]
        T = 16 // e                                   # elements in 16 bytes
        mn = np.arange(rows)[:, None]
        k = np.arange(K)[None, :]
        if not mn_major:
            if W == 0:
                off = (mn % 8) * 16 + (mn // 8) * sbo + (k % T) * e + (k // T) * lbo
            else:
                if K * e > W:
                    raise RuntimeError(f"a K-major wgmma operand of {K * e} bytes per row in a {W}B swizzle")
                off = (mn % 8) * W + (mn // 8) * sbo + k * e
        else:
            if W == 0:
                off = (mn % T) * e + (mn // T) * sbo + (k % 8) * 16 + (k // 8) * lbo
            else:
                run = W // e                              # MN elements in one swizzle-width row
                off = (mn % run) * e + (mn // run) * lbo + (k % 8) * W + (k // 8) * sbo
        a = start + off
        b = _SWIZZLE_BITS[W]
        if b:
            if (start >> 7) & ((1 << b) - 1):
                raise NotImplementedError(f"ptxsim_hopper: a {W}B-swizzled wgmma operand starting at {start}, "
                                          "off its swizzle pattern's row 0")
            a = a ^ (((a >> 7) & ((1 << b) - 1)) << 4)
        return a

    def _read_operand(self, cta: int, addrs: np.ndarray, e: int, ty: str) -> np.ndarray:
        """The elements at ``addrs`` (any shape) of one CTA's shared memory, as float64."""
        full = addrs[..., None] + np.arange(e)
        if full.max() >= self.smem.shape[1] or full.min() < 0:
            raise IndexError("a wgmma operand lies outside the shared memory")
        if self.busy[cta, full].any():
            raise RuntimeError("wgmma reads shared bytes before the copies into them landed")
        if (self.smem[cta, full] != self.fenced[cta, full]).any():
            raise RuntimeError("wgmma reads shared bytes written by st.shared/stmatrix with no "
                               "fence.proxy.async since")
        raw = np.ascontiguousarray(self.smem[cta, full]).view({1: np.uint8, 2: np.uint16, 4: np.uint32}[e])[..., 0]
        return self._decode(raw, ty)

    @staticmethod
    def _decode(raw, ty):
        if ty == "f16":
            return raw.astype(np.uint16).view(np.float16).astype(np.float64)
        if ty == "bf16":
            return (raw.astype(np.uint32) << np.uint32(16)).view(np.float32).astype(np.float64)
        if ty == "tf32":   # the tensor core reads the top 19 bits
            return (raw.astype(np.uint32) & np.uint32(0xFFFFE000)).view(np.float32).astype(np.float64)
        if ty in ("s8", "u8"):
            return raw.astype(np.uint8).view(np.int8 if ty == "s8" else np.uint8).astype(np.float64)
        from gluon_trace import fp8
        return fp8.decode(raw.astype(np.uint8), {"e4m3": "float8e4nv", "e5m2": "float8e5"}[ty]).astype(np.float64)

    def _a_from_registers(self, regs, ty, e, K, sl):
        """A (64, K) of one warpgroup from its 128 threads' fragment registers (ISA figure for
        the m64nNk* A fragment: as mma.sync's m16 A fragment, warp w taking rows 16w..)."""
        lane = np.arange(128) % 32
        w = np.arange(128) // 32
        g, t = lane // 4, lane % 4
        per = 4 // e                                  # elements in a .b32 register
        A = np.zeros((64, K))
        for q, r in enumerate(regs):
            word = self.R.get(r, np.zeros(self.N, np.uint32))[sl].astype(np.uint32)
            row = 16 * w + g + 8 * (q % 2)
            for j in range(per):
                k = per * t + j + (K // 2) * (q // 2)
                bits = (word >> np.uint32(8 * e * j)) & np.uint32((1 << (8 * e)) - 1) if e < 4 else word
                A[row, k] = self._decode(bits, ty)
        return A

    def op_wgmma(self, parts, args, m, active):
        op = parts[1]
        warps = m.reshape(-1, 128)
        if not (warps.all(axis=1) | ~warps.any(axis=1)).all():
            raise RuntimeError(f"wgmma.{op} executed by part of a warpgroup")
        if op == "fence":
            for r in self.dirty:
                self.dirty[r] &= ~m
            return None
        if op == "commit_group":
            self.wg_commits[m] += 1
            return None
        if op == "wait_group":
            limit = self.wg_commits - int(args[0])
            for seq in self.wg_seq.values():
                seq[m & (seq >= 0) & (seq < limit)] = -1
            keep = []
            for rd in self.wg_reads:
                cta, first, group, addrs = rd
                if m[first] and group < limit[first]:
                    self.wg_busy[cta, addrs] -= 1
                else:
                    keep.append(rd)
            self.wg_reads = keep
            return None
        if op != "mma_async":
            raise NotImplementedError(".".join(parts))
        shape = next(p for p in parts if p.startswith("m64n"))
        N, K = (int(x) for x in re.fullmatch(r"m64n(\d+)k(\d+)", shape).groups())
        dty, aty, bty = parts[parts.index(shape) + 1:parts.index(shape) + 4]
        integer = dty == "s32"
        if (dty != "f32" and not (integer and aty in ("s8", "u8") and bty in ("s8", "u8"))) \
                or (not integer and aty != bty) or aty not in _WG_TYPES or _WG_TYPES[aty][1] != K:
            raise NotImplementedError(f"ptxsim_hopper: {'.'.join(parts)}")
        e = _WG_TYPES[aty][0]
        d_regs = [x.strip() for x in args[0][1:-1].split(",")]
        if len(d_regs) != N // 2:
            raise RuntimeError(f"wgmma m64n{N} takes {N // 2} accumulator registers, got {len(d_regs)}")
        a_regs = [x.strip() for x in args[1][1:-1].split(",")] if args[1].startswith("{") else None
        rest = args[3:]
        scale_d = self.val(rest[0], "pred") if rest[0].startswith("%") else np.full(self.N, bool(int(rest[0])))
        if integer:   # (the integer forms take scale-d only: no negation, K-major operands)
            if len(rest) != 1:
                raise RuntimeError(f"integer wgmma takes scale-d only, got {rest}")
            rest = rest + ["1", "1"]
        neg_a, neg_b = int(rest[1]), int(rest[2])
        trans = [int(x) for x in rest[3:]]
        trans_a = 0 if a_regs is not None or not trans else trans[0]
        trans_b = trans[-1] if trans else 0
        if (trans_a or trans_b) and e != 2:
            raise RuntimeError(f"wgmma on {aty} takes K-major operands only")
        for r in d_regs + (a_regs or []):
            dirty = self.dirty.get(r)
            if dirty is not None and (dirty & m).any():
                raise RuntimeError(f"wgmma reads {r}, written by another instruction with no wgmma.fence since")
        b_desc = self.val(args[2], "u64")
        a_desc = self.val(args[1], "u64") if a_regs is None else None
        lane = np.arange(128) % 32
        w = np.arange(128) // 32
        g, t = lane // 4, lane % 4
        for wg in np.nonzero(warps.any(axis=1))[0]:
            sl = slice(128 * wg, 128 * wg + 128)
            cta = int(self.cta[128 * wg])
            bd = np.unique(b_desc[sl])
            if len(bd) != 1 or (a_desc is not None and len(np.unique(a_desc[sl])) != 1):
                raise RuntimeError("wgmma descriptors differ across the warpgroup")
            b_at = self._operand_addresses(int(bd[0]), N, K, e, bool(trans_b))
            B = self._read_operand(cta, b_at, e, bty)
            read = [b_at]
            if a_regs is None:
                a_at = self._operand_addresses(int(a_desc[sl][0]), 64, K, e, bool(trans_a))
                A = self._read_operand(cta, a_at, e, aty)
                read.append(a_at)
            else:
                A = self._a_from_registers(a_regs, aty, e, K, sl)
            P = (neg_a * A) @ (neg_b * B).T                    # (64, N), exact in float64
            scale = scale_d[sl]
            if len(np.unique(scale)) != 1:
                raise RuntimeError("wgmma scale-d differs across the warpgroup")
            for i, r in enumerate(d_regs):
                j, q = divmod(i, 4)
                row = 16 * w + g + 8 * (q // 2)
                col = 8 * j + 2 * t + (q % 2)
                cur = self.R.get(r)
                cur = np.zeros(self.N, np.uint32) if cur is None else cur
                out = cur.copy()
                if integer:   # exact products (|sum| < 2**53), wrapped into the s32 accumulator
                    acc = cur[sl].view(np.int32).astype(np.int64) if scale[0] else 0
                    out[sl] = ((P[row, col].astype(np.int64) + acc) & 0xFFFFFFFF).astype(np.uint32)
                else:
                    acc = cur[sl].view(np.float32).astype(np.float64) if scale[0] else 0.0
                    out[sl] = (P[row, col] + acc).astype(np.float32).view(np.uint32)
                self.R[r] = out
            # the operands are read until the group retires: nothing may overwrite them before
            addrs = np.unique(np.concatenate([(x.reshape(-1, 1) + np.arange(e)).reshape(-1) for x in read]))
            self.wg_busy[cta, addrs] += 1
            self.wg_reads.append((cta, 128 * wg, int(self.wg_commits[128 * wg]), addrs))
        for r in d_regs:
            seq = self.wg_seq.setdefault(r, np.full(self.N, -1, np.int64))
            seq[m] = self.wg_commits[m]
        return None

    def _guard_wgmma_operands(self, fn, *a):
        """Run a generic shared-memory write; raise if it changed bytes an in-flight wgmma reads."""
        if not self.wg_busy.any():
            return fn(*a)
        hot = self.wg_busy > 0
        before = self.smem[hot]
        out = fn(*a)
        if not np.array_equal(before, self.smem[hot]):
            raise RuntimeError("shared bytes an in-flight wgmma reads are overwritten before its wgmma.wait_group")
        return out

    def op_st(self, parts, args, m, active):
        if parts[1] == "shared":
            return self._guard_wgmma_operands(super().op_st, parts, args, m, active)
        return super().op_st(parts, args, m, active)

    def op_stmatrix(self, parts, args, m, active):
        return self._guard_wgmma_operands(super().op_stmatrix, parts, args, m, active)

    # -- fences and barriers --------------------------------------------------------------------
    def op_fence(self, parts, args, m, active):
        if "proxy" in parts and "async" in parts and m.any():
            for c in np.unique(self.cta[m]):
                self.fenced[c] = self.smem[c]
        return None

    def _complete(self, bar) -> None:
        if bar[1] == 0 and bar[4] == 0:
            bar[2] ^= 1
            bar[1] = bar[0]

    def _arrive(self, bar, n: int) -> None:
        bar[1] -= n
        if bar[1] < 0:
            raise RuntimeError("more arrivals on an mbarrier than its phase expects")
        self._complete(bar)

    def op_mbarrier(self, parts, args, m, active):
        op = parts[1]
        idx = np.nonzero(m)[0]
        if op == "init":
            super().op_mbarrier(parts, args, m, active)
            addr = self._addr(args[0])
            for i in idx:
                self._bar(self.cta[i], int(addr[i])).extend([0, []])   # [4] tx bytes, [5] TMA loads
            return None
        if op == "expect_tx" or (op == "arrive" and "expect_tx" in parts):
            arrive = op == "arrive"
            addr = self._addr(args[1] if arrive else args[0])
            tx = self.val(args[2] if arrive else args[1], "u32")
            for i in idx:
                bar = self._bar(self.cta[i], int(addr[i]))
                bar[4] += int(tx[i])
                if arrive:
                    self._arrive(bar, 1)
            return None
        if op in ("try_wait", "test_wait") and "parity" in parts:
            addr, par = self._addr(args[1]), self.val(args[2], "u32")
            for i in idx:
                bar = self._bar(self.cta[i], int(addr[i]))
                want = int(par[i]) & 1
                while bar[5] and bar[2] == want:   # land the tracked loads until the phase is done
                    self._land_tma(bar, bar[5].pop(0))
            super().op_mbarrier(parts, args, m, active)
            self._spin_check(args, idx)
            return None
        return super().op_mbarrier(parts, args, m, active)

    def _spin_check(self, args, idx) -> None:
        """A wait that fails again and again while its barrier stays as it was is a deadlock
        here: the spinning threads have the lowest program counter, so nothing else runs."""
        ok = self.R[args[0]]
        addr = self._addr(args[1])
        for i in idx:
            if ok[i]:
                continue
            key = (int(self.cta[i]), int(addr[i]))
            bar = self.bars[key]
            state = (bar[1], bar[2], bar[4], len(bar[3]), len(bar[5]))
            last = self.spins.get(key)
            n = last[1] + 1 if last is not None and last[0] == state else 0
            self.spins[key] = (state, n)
            if n > 64:
                raise RuntimeError(f"deadlock: the wait on the mbarrier at shared {key[1]} never completes "
                                   f"(phase {bar[2]}, {bar[1]} of {bar[0]} arrivals and {bar[4]} transaction "
                                   "bytes outstanding)")
            return

    def run(self, max_steps: int = 2_000_000):
        super().run(max_steps)
        self._check_exit()

    def _check_exit(self) -> None:
        left = [st for i in self.bulk_groups for g in self.bulk_groups[i] for st in g]
        left += [st for i in self.bulk_open for st in self.bulk_open[i]]
        if left:
            raise RuntimeError(f"the kernel exits with {len(left)} TMA store(s) never waited for "
                               "(cp.async.bulk.wait_group)")
        # loads land here when a wait needs them: one still tracked was never waited for, and on
        # the GPU may land after the CTA exited (the interpreter refuses such a kernel too)
        loads = sum(len(b[5]) for b in self.bars.values() if len(b) > 5)
        if loads:
            raise RuntimeError(f"the kernel exits with {loads} TMA load(s) no mbarrier wait saw complete")


def load_kernel(ptx: str) -> Kernel:
    """The kernel, with its parameters read as declared (array parameters included)."""
    k = Kernel(ptx)
    head = ptx[ptx.index(".entry"):ptx.index("{", ptx.index(".entry"))]
    k.params = [("tmap" if arr else t, n)
                for t, n, arr in re.findall(r"\.param (?:\.align \d+ )?\.(\w+) (\w+)(\[\d+\])?", head)]
    return k


def run(ptx: str, grid, args: list, smem_bytes: int, max_steps: int = 2_000_000, sim_class=None, **sim_kw):
    """Run a kernel on numpy arrays (changed in place), scalars and TensorDescriptors (each one
    the CUtensorMap parameter and the u32 dims after it, as the launcher passes them)."""
    k = load_kernel(ptx)
    mem = HopperMem()
    params = []
    for a in args:
        if isinstance(a, np.ndarray):
            params.append(mem.address(a))
        elif type(a).__name__ == "TensorDescriptor":
            params.append(tensor_map(a, mem))
            params.extend(int(n) for n in a.shape)
        else:
            params.append(a)
    if len(params) != len(k.params):
        raise ValueError(f"the kernel takes {len(k.params)} parameters, got {len(params)}")
    sim = (sim_class or HopperSim)(k, grid, params, mem, smem_bytes, **sim_kw)
    sim.run(max_steps)
    return sim
