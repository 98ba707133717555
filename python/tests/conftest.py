"""Fixtures: the real strata binary (STRATA_BIN, else ../bin/strata) and a
store per test holding a small imported project."""

import os
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "src"))

import stratafs  # noqa: E402


def strata_bin() -> str:
    b = os.environ.get("STRATA_BIN") or os.path.join(os.path.dirname(os.path.dirname(HERE)), "bin", "strata")
    if not os.access(b, os.X_OK):
        pytest.fail("no strata binary at %s: run `make build` or set STRATA_BIN" % b)
    return b


@pytest.fixture
def binary() -> str:
    return strata_bin()


@pytest.fixture
def project(tmp_path):
    src = tmp_path / "proj"
    (src / "src").mkdir(parents=True)
    (src / "a.txt").write_text("one\ntwo\n")
    (src / "src" / "mod.py").write_text("def f():\n    return 1\n")
    (src / "test_mod.sh").write_text("#!/bin/sh\ngrep -q 'return 1' src/mod.py\n")
    os.chmod(src / "test_mod.sh", 0o755)
    return src


@pytest.fixture
def store(tmp_path, project, binary):
    s = stratafs.Store(tmp_path / "home", binary=binary)
    s.import_dir(project)
    return s
