"""Every package in the source tree is in pyproject.toml's list, so a plain (non-editable)
install ships it: gluon_trace.fuzz was missing, and only editable installs had the fuzzer."""
import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _packages_on_disk():
    found = set()
    for top, name in (("gluon_trace", "gluon_trace"), ("backends", "gluon_trace.backends")):
        for d, _, files in os.walk(os.path.join(ROOT, top)):
            if "__init__.py" in files:
                rel = os.path.relpath(d, os.path.join(ROOT, top))
                found.add(name if rel == "." else name + "." + rel.replace(os.sep, "."))
    return found


@pytest.mark.skipif(sys.version_info < (3, 11), reason="tomllib is new in Python 3.11")
def test_every_package_is_listed():
    import tomllib
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        listed = set(tomllib.load(f)["tool"]["setuptools"]["packages"])
    missing = _packages_on_disk() - listed
    assert not missing, f"packages not in pyproject.toml's [tool.setuptools] packages: {sorted(missing)}"
