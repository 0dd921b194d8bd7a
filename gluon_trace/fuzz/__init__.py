"""A differential fuzzer: random kernels written with the public API, checked against numpy.

``generate(Chooser.from_seed(s))`` (or the hypothesis strategy :func:`programs`) gives a
:class:`Program`: loads of random shapes, dtypes and layouts (blocked, slice, linear with
swizzled and broadcast bases), element-wise ops and casts, reductions, scans, layout
conversions, expand/broadcast, reshape/permute, ``gl.range`` loops and ``gl.if_`` branches,
masked loads and stores, every result stored; optionally (FuzzConfig.shared, :mod:`.smem`) tiles
through shared buffers in random shared layouts, seen through views a branch may pick; optionally
(FuzzConfig.atomics, :mod:`.atomics`) atomic read-modify-writes of tiles into buffers with random
contents, through layouts holding elements more than once. :func:`check_program` runs it in the
interpreter against :func:`evaluate` (numpy, from the description, see
:mod:`gluon_trace.fuzz.reference` for the semantics and tolerances) and compiles it for
given targets; :func:`save_reproducer` writes a failing one as a standalone file.

Needs numpy; hypothesis for :func:`programs`; ml_dtypes for bfloat16 inputs.
"""
from .evaluate import Val, evaluate
from .program import (Chooser, FuzzConfig, Node, Program, generate, program_from_dict,
                      program_to_dict, random_layout)
from .render import kernel_source
from .runner import (Outcome, check_program, compile_program, default_target, failure_dir,
                     kernel_args, kernel_of, make_inputs, outputs_of, trace_program, mismatches, run_interpreter, run_on_device,
                     save_reproducer)

__all__ = ["Chooser", "FuzzConfig", "Node", "Program", "Outcome", "Val", "generate", "programs",
           "random_program", "evaluate", "kernel_source", "kernel_of", "make_inputs",
           "run_interpreter", "run_on_device", "kernel_args", "outputs_of", "trace_program", "compile_program", "check_program", "mismatches", "save_reproducer",
           "program_to_dict", "program_from_dict", "random_layout", "default_target", "failure_dir"]


def random_program(seed: int, config: FuzzConfig | None = None) -> Program:
    """The program a seed gives (same seed, same program)."""
    return generate(Chooser.from_seed(seed), config)


def programs(config: FuzzConfig | None = None):
    """A hypothesis strategy of programs; failures shrink to shorter, simpler ones."""
    from hypothesis import strategies as st

    @st.composite
    def draw_program(draw):
        return generate(Chooser.from_hypothesis(draw), config)

    return draw_program()
