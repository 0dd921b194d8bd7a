"""Named generator bounds (FuzzConfig keyword sets) shared by the fuzz campaign
(perf/fuzz_campaign.py) and the GPU fuzzer (GLUON_TRACE_FUZZ_GPU_PRESET)."""

PRESETS = {
    # the simulator tests' own bounds
    "small": dict(max_numel=256, max_ops=6),
    # longer op chains (more conversions, reductions of reductions)
    "long": dict(max_numel=256, max_ops=12, max_inputs=4),
    # more loop trips and branches over smaller tiles
    "control": dict(max_numel=128, max_ops=8, max_trip=5),
    # ops off by default
    "dot_split": dict(max_numel=256, max_ops=6, dot_fma=True, split_join=True),
    # tiles through shared memory (fuzz/smem.py): random shared layouts, views, branch-picked
    # views, loads in random layouts
    "shared": dict(max_numel=256, max_ops=6, shared=True, shared_weight=5),
    # the shared family with slices from inside swizzle and padding periods (slices of them,
    # .index then .slice, permutes of them) and padded views picked by a branch at different
    # starts inside a padding period
    "views": dict(max_numel=256, max_ops=6, shared=True, shared_weight=5, unaligned_views=True),
    # the views family with slots of stacked buffers (.slice of a stacked dim, .index with a
    # constant or run-time slot, slices from inside the period) made in each arm of a branch or
    # picked in a loop's body at different starts, then viewed further after the join
    "stacked": dict(max_numel=256, max_ops=6, shared=True, shared_weight=5, unaligned_views=True,
                    stacked_views=True),
    # atomic read-modify-writes (fuzz/atomics.py) through layouts holding elements more than
    # once, at repeated addresses, masked, into buffers with random contents
    "atomics": dict(max_numel=256, max_ops=6, atomics=True, atomics_weight=5),
    # larger tiles, values per thread bounded
    "wide": dict(max_numel=1024, max_ops=5, max_values_per_thread=16),
    # the generator's defaults (1024 elements, 8 ops), values per thread bounded
    "default": dict(max_values_per_thread=32),
    # 8- and 16-bit types and bools only (packing, sign extension, half-precision rounding)
    "narrow": dict(max_numel=256, max_ops=8,
                   dtypes=("int8", "uint8", "int16", "uint16", "float16", "bfloat16", "int1")),
    # 64-bit types beside 32-bit ones (register pairs, wide shifts and division)
    "wide64": dict(max_numel=256, max_ops=8,
                   dtypes=("int64", "uint64", "float64", "int32", "uint32", "float32")),
    # the generator's defaults unbounded: many values per thread, so register spilling
    "big": dict(),
    # integers only: division, remainder and shifts by edge values, wrapping, widening
    "ints": dict(max_numel=256, max_ops=10, dtypes=("int8", "int16", "int32", "int64", "uint8",
                                                     "uint16", "uint32", "uint64", "int1")),
    # half-precision floats and their math (f32 compute, rounding on every store)
    "halfmath": dict(max_numel=256, max_ops=10, dtypes=("float16", "bfloat16", "float32")),
    # 16 warps: cross-warp exchanges over more waves than the other presets draw
    "warps16": dict(num_warps=(16,), max_numel=512, max_ops=8, max_values_per_thread=16),
    # long chains with every op kind on
    "stress": dict(max_numel=256, max_ops=20, max_inputs=4, max_trip=4, dot_fma=True,
                   split_join=True),
    # longer still over small tiles: many live values, loops and branches in one kernel
    "marathon": dict(max_numel=64, max_ops=40, max_inputs=4, max_trip=3, dot_fma=True,
                     split_join=True),
}


def preset_config(name: str, warp_size: int = 32):
    """The FuzzConfig of preset ``name`` for warps of ``warp_size`` lanes."""
    from .program import FuzzConfig
    if name not in PRESETS:
        raise ValueError(f"unknown fuzz preset {name!r}; the presets are {', '.join(sorted(PRESETS))}")
    return FuzzConfig(warp_size=warp_size, **PRESETS[name])
