"""The stratafs SDK against the real strata binary (run rootless by make test)."""

import os
import subprocess
import sys
import time

import pytest

import stratafs
from stratafs import Job


def procs(marker: str) -> int:
    """Processes whose command line starts with marker (NUL-separated argv)."""
    n = 0
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open("/proc/%s/cmdline" % pid, "rb") as f:
                if f.read().startswith(marker.encode()):
                    n += 1
        except OSError:
            pass
    return n


def wait_no_procs(marker: str) -> None:
    deadline = time.monotonic() + 5
    while procs(marker):
        if time.monotonic() > deadline:
            pytest.fail("processes %r survived" % marker)
        time.sleep(0.02)


def test_version(store):
    v = store.version()
    assert v["schema"] in stratafs.SUPPORTED_SCHEMA
    assert v["protocol"] in stratafs.SUPPORTED_PROTOCOL
    assert v["go"].startswith("go") and v["version"]


def test_incompatible_binary(tmp_path):
    fake = tmp_path / "strata"
    fake.write_text("#!/bin/sh\necho 'strata: unknown command' >&2\nexit 2\n")
    fake.chmod(0o755)
    s = stratafs.Store(tmp_path / "h", binary=str(fake))
    with pytest.raises(stratafs.IncompatibleError):
        s.workspaces()


def test_binary_not_found(tmp_path):
    with pytest.raises(stratafs.BinaryNotFoundError):
        stratafs.Store(tmp_path, binary=str(tmp_path / "nope"))


def test_workspace_lifecycle(store, tmp_path):
    home = store.home
    with store.workspace("w1", from_="main") as ws:
        assert [w["name"] for w in store.workspaces()] == ["w1"]
        r = ws.exec(["cat", "a.txt"])
        assert (r.exit_code, r.stdout, r.stderr) == (0, "one\ntwo\n", "")
        assert r.ok and r.durations["total"] > 0
        r = ws.exec("pwd; echo $FOO; cat; echo err >&2; exit 3", cwd="src", env={"FOO": "bar"}, stdin="in\n")
        assert r.exit_code == 3
        assert r.stdout.endswith("/src\nbar\nin\n")
        assert r.stderr == "err\n"
        r = ws.exec("sed -i 's/return 1/return 2/' src/mod.py && echo new > new.txt")
        assert r.ok, r.stderr
        patch = ws.diff()
        assert "+    return 2" in patch and "b/new.txt" in patch
        assert {c["path"]: c["status"] for c in ws.changes()} == {"src/mod.py": "M", "new.txt": "A"}
        c = ws.commit("msg")
        assert len(c["commit"]) == 64
        assert ws.diff() == ""
        assert store.log(ws.info["branch"])[0]["message"] == "msg"
        ws.exec("echo scratch > scratch.txt")
        ws.reset()
        assert ws.exec(["test", "-e", "scratch.txt"]).exit_code == 1
        assert ws.exec(["cat", "new.txt"]).stdout == "new\n"
        ws.exec("echo uncommitted > u.txt")
    # The context manager removed it, uncommitted changes and all.
    assert store.workspaces() == []
    assert not os.listdir(os.path.join(home, "workspaces"))


def test_context_manager_on_exception(store):
    with pytest.raises(RuntimeError):
        with store.workspace("boom") as ws:
            ws.exec("echo x > x.txt")
            raise RuntimeError("harness failed")
    assert store.workspaces() == []


def test_keep(store):
    with store.workspace("kept", keep=True):
        pass
    assert [w["name"] for w in store.workspaces()] == ["kept"]
    store.workspace_remove("kept")


def test_errors(store, tmp_path):
    with pytest.raises(stratafs.NotFoundError) as ei:
        store.workspace_remove("w2")
    assert ei.value.exit_code == 1 and "w2" in str(ei.value)
    with store.workspace("dup") as ws:
        with pytest.raises(stratafs.ExistsError):
            store.workspace("dup")
        ws.exec("echo x > x.txt")
        with pytest.raises(stratafs.ConflictError) as ei:
            store.workspace_remove("dup")
        assert ei.value.exit_code == 3
    with pytest.raises(stratafs.InvalidNameError) as ei:
        store.workspace("bad/name")
    assert isinstance(ei.value, stratafs.UsageError) and ei.value.exit_code == 2
    with pytest.raises(stratafs.NotFoundError):
        store.workspace("w3", from_="nosuchbranch")
    with pytest.raises(stratafs.NoStoreError):
        stratafs.Store(tmp_path / "empty", binary=store.binary).workspaces()
    ghost = stratafs.Workspace(store, "ghost", {})
    with pytest.raises(stratafs.NotFoundError) as ei:
        ghost.exec(["true"])
    assert ei.value.exit_code == 125
    for cls in (stratafs.NotFoundError, stratafs.ConflictError, stratafs.UsageError, stratafs.IncompatibleError,
                stratafs.NoStoreError, stratafs.BinaryNotFoundError):
        assert issubclass(cls, stratafs.StrataError)


def test_commit_conflict(store):
    with store.workspace("c1") as a:
        # A second workspace on the same branch: one commit wins.
        with store.workspace("c2", branch=a.info["branch"]) as b:
            a.exec("echo a > a.txt")
            b.exec("echo b > a.txt")
            a.commit("a")
            with pytest.raises(stratafs.ConflictError):
                b.commit("b")
            assert "+b" in b.diff()  # its work stays in the workspace


def test_exec_timeout_kills_everything(store):
    with store.workspace("t") as ws:
        r = ws.exec("sleep 97651 & sleep 97652", timeout=0.5)
        assert r.timed_out and r.exit_code == 124
        wait_no_procs("sleep\x0097651")
        wait_no_procs("sleep\x0097652")
        assert ws.exec(["true"]).ok


def test_command_exit_125_is_not_strata_error(store):
    with store.workspace("x") as ws:
        r = ws.exec("echo out; exit 125")
        assert r.exit_code == 125 and r.stdout == "out\n"


def test_promote(store):
    with store.workspace("p") as ws:
        ws.exec("echo promoted > p.txt")
        ws.commit("p")
        res = ws.promote()
        assert res["into"] == "main"
    with store.workspace("q") as ws:
        assert ws.exec(["cat", "p.txt"]).stdout == "promoted\n"


def test_run(store):
    r = store.run(["sh", "-c", "./test_mod.sh && echo passed"])
    assert r.exit_code == 0 and r.stdout == "passed\n"
    assert r.durations["run"] > 0 and r.durations["total"] >= r.durations["run"]
    patch = "--- a/src/mod.py\n+++ b/src/mod.py\n@@ -1,2 +1,2 @@\n def f():\n-    return 1\n+    return 2\n"
    r = store.run("./test_mod.sh", patch=patch)
    assert r.exit_code == 1 and r.diff
    r = store.run("sleep 30", timeout=0.3)
    assert r.timed_out
    assert store.workspaces() == []


def test_batch_of_20(store):
    jobs = [Job(id="j%02d" % i, command=["sh", "-c", "echo job %d" % i]) for i in range(19)]
    jobs.append(Job(id="fail", command="exit 4"))
    seen = {}
    for res in store.batch(jobs, parallel=4):
        assert res.id not in seen
        seen[res.id] = res
    assert len(seen) == 20
    for i in range(19):
        r = seen["j%02d" % i]
        assert r.ok and r.stdout == "job %d\n" % i, r
        assert r.durations["run"] > 0
    assert seen["fail"].exit_code == 4 and not seen["fail"].ok
    assert store.workspaces() == []


def test_batch_dict_jobs(store):
    out = list(store.batch([{"id": "d", "cmd": "cat a.txt"}], parallel=1))
    assert len(out) == 1 and out[0].stdout == "one\ntwo\n"


def test_backend_copy(store):
    """The copy backend (any filesystem): a workspace that is a directory of its
    own, where a directory of the base renames; a run and a batch on it."""
    with store.workspace("c", backend="copy") as ws:
        assert ws.info["backend"] == "copy"
        assert ws.path().endswith("/workspaces/c/upper")
        r = ws.exec(["sh", "-c", "mv src lib && echo three >> a.txt"])
        assert r.ok, r
        assert "lib/mod.py" in ws.diff()
        ws.commit("renamed")
        assert ws.diff() == ""
    r = store.run(["sh", "-c", "mv src lib && ls lib"], backend="copy")
    assert r.ok and r.stdout == "mod.py\n" and r.raw["backend"] == "copy"
    out = list(store.batch([Job(id="b", command="test -d src"), {"id": "o", "cmd": "true", "backend": "overlay"}],
                           parallel=2, backend="copy"))
    got = {res.id: res for res in out}
    assert got["b"].ok and got["o"].ok
    assert got["b"].raw["backend"] == "copy" and got["o"].raw["backend"] == "overlay"


def test_import_git(store, tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    env = dict(os.environ, GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@t", GIT_COMMITTER_NAME="t", GIT_COMMITTER_EMAIL="t@t")
    (repo / "f.txt").write_text("git file\n")
    subprocess.run(["git", "init", "-q", str(repo)], check=True, env=env)
    subprocess.run(["git", "-C", str(repo), "add", "."], check=True, env=env)
    subprocess.run(["git", "-C", str(repo), "commit", "-qm", "init"], check=True, env=env)
    res = store.import_git(repo, branch="g")
    assert res["branch"] == "g"
    with store.workspace("gw", from_="g") as ws:
        assert ws.exec(["cat", "f.txt"]).stdout == "git file\n"


def test_image_root(store, tmp_path):
    """A workspace, run and batch job in a container image (the instance test
    image of `make images`), and a project at /testbed over it."""
    images = os.environ.get("STRATA_IMAGES", "")
    if not images or not os.path.exists(os.path.join(images, ".key")):
        if os.environ.get("STRATA_TEST_NO_SKIP") == "1":
            pytest.fail("the test images are missing (STRATA_IMAGES): make images")
        pytest.skip("the test images are missing (STRATA_IMAGES): make images")
    res = store.import_image("oci:%s/oci:instance" % images, branch="img")
    assert res["config"]["working_dir"] == "/testbed"
    with store.workspace("iw", from_="img", env={"EXTRA": "1"}) as ws:
        r = ws.exec(["sh", "-c", "pwd; id -u; echo $EXTRA $TESTBED; echo x > x.txt; echo y > /opt/y"])
        assert r.stdout == "/testbed\n0\n1 1\n", r
        assert [c["path"] for c in ws.changes()] == ["testbed/x.txt"]
    r = store.run(["sh", "-c", "echo z > z.txt"], from_="img", scope="all")
    assert r.ok and r.diff["paths"] == ["testbed/z.txt"], r
    with store.workspace("pw", from_="main", root="img", at="/testbed") as ws:
        assert ws.exec(["sh", "-c", "pwd; cat a.txt; test -e /opt/env/secret && echo env"]).stdout == "/testbed\none\ntwo\nenv\n"
    out = list(store.batch([Job(id="p", from_="main", root="img", at="/testbed", command="cat a.txt; pwd")], parallel=1))
    assert out[0].ok and out[0].stdout == "one\ntwo\n/testbed\n", out[0]


def test_pip_install_offline(tmp_path):
    """`pip install ./python` works with no index: the in-tree backend needs nothing."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    venv = tmp_path / "venv"
    r = subprocess.run([sys.executable, "-m", "venv", str(venv)], capture_output=True, text=True)
    if r.returncode != 0:
        pytest.fail("python3 -m venv failed (Debian: python3-venv, installed by make deps): " + r.stderr)
    py = str(venv / "bin" / "python")
    env = dict(os.environ, PIP_NO_INDEX="1", PIP_DISABLE_PIP_VERSION_CHECK="1")
    r = subprocess.run([py, "-m", "pip", "install", "-q", "--no-index", root], capture_output=True, text=True, env=env,
                       cwd=str(tmp_path))
    assert r.returncode == 0, r.stderr
    r = subprocess.run([py, "-c", "import stratafs, os; print(stratafs.__file__); "
                        "print(os.path.exists(os.path.join(os.path.dirname(stratafs.__file__), 'py.typed')))"],
                       capture_output=True, text=True, cwd=str(tmp_path))
    assert r.returncode == 0, r.stderr
    path, typed = r.stdout.split()
    assert str(venv) in path and typed == "True"
