"""Byte-identical check of the backends' output: hash every PTX / AMDGCN text the tests emit,
keyed by the kernel's IR (without source locations) and target, and compare two such runs (a
backend change's before and after) kernel by kernel.

    # once per tree (a checkout of the base commit, then the change), fresh caches:
    GLUON_TRACE_CACHE_DIR=$(mktemp -d) GLUON_TRACE_EMIT_HASHES=before.json \\
        PYTHONPATH=perf python -m pytest -q -p emit_hashes tests/backends
    python perf/emit_hashes.py before.json after.json

As a pytest plugin (``-p emit_hashes``) it wraps nvidia.emitter.emit and amd.compiler.lower
before the tests import them; a refusal is recorded as such, and a kernel emitted twice with
different text (a test switching an emitter option) as 'nondeterministic' (not compared)."""
import hashlib
import json
import os
import re
import sys


_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__import__("gluon_trace").__file__)))
_LOC = re.compile(r"^\s*(\.loc\b|\.file\b|; loc\b).*\n?", re.M)


def _plain(text: str) -> str:
    """The text without source locations (.file/.loc, AMD's '; loc' lines) or the tree's path: two
    checkouts in two folders, or a test file whose lines moved, emit the same code."""
    return _LOC.sub("", text).replace(_ROOT, "<root>")


def _key(graph, target) -> str:
    from gluon_trace.ir import print_graph
    return hashlib.sha256(_plain(target + "\n" + print_graph(graph, with_locs=False)).encode()).hexdigest()[:20]


def _install(out: str) -> None:
    import atexit
    from gluon_trace.backends.amd import compiler as amd
    from gluon_trace.backends.nvidia import emitter as nv
    seen: dict = {}

    def record(key, value):
        old = seen.get(key)
        seen[key] = value if old is None or old == value else "nondeterministic"

    def wrap(fn, text_of):
        def wrapped(graph, target, *a, **kw):
            k = _key(graph, target)
            try:
                got = fn(graph, target, *a, **kw)
            except Exception as e:  # noqa: BLE001 - a refusal is a result too
                record(k, "refused:" + type(e).__name__)
                raise
            record(k, hashlib.sha256(_plain(text_of(got)).encode()).hexdigest()[:20])
            return got
        return wrapped
    nv.emit = wrap(nv.emit, lambda got: got[0])
    amd.lower = wrap(amd.lower, lambda got: got.text)

    @atexit.register
    def _dump():
        with open(out, "w") as f:
            json.dump(seen, f, indent=0, sort_keys=True)


def compare(before: dict, after: dict) -> dict:
    """Counts over the kernels both runs emitted; 'changed' and 'now_refused' must be empty."""
    def ok(v):
        return not v.startswith("refused") and v != "nondeterministic"
    both = before.keys() & after.keys()
    return {
        "before": len(before), "after": len(after), "in_both": len(both),
        "compiled_before": sum(ok(before[k]) for k in both),
        "identical": sum(ok(before[k]) and before[k] == after[k] for k in both),
        "changed": sorted(k for k in both if ok(before[k]) and ok(after[k]) and before[k] != after[k]),
        "now_refused": sorted(k for k in both if ok(before[k]) and not ok(after[k])),
        "now_compiled": sum(not ok(before[k]) and ok(after[k]) for k in both),
        "refused_both": sum(not ok(before[k]) and not ok(after[k]) for k in both),
        "nondeterministic": sum("nondeterministic" in (before[k], after[k]) for k in both),
    }


if "GLUON_TRACE_EMIT_HASHES" in os.environ and __name__ != "__main__":
    _install(os.environ["GLUON_TRACE_EMIT_HASHES"])

if __name__ == "__main__":
    a, b = (json.load(open(p)) for p in sys.argv[1:3])
    r = compare(a, b)
    for k, v in r.items():
        print(f"{k}: {v if isinstance(v, int) else len(v)}")
    for k in r["changed"] + r["now_refused"]:
        print("DIFF", k, a[k], b[k])
    sys.exit(1 if r["changed"] or r["now_refused"] else 0)
