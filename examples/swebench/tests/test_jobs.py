"""Job building: the batch jobs' fields, and the job script run for real
(bash, git, patch) on a git repository standing in for /testbed."""

import json
import os
import subprocess

import pytest

import harness
import jobs
from grading import APPLY_PATCH_FAIL, APPLY_PATCH_PASS

ROW = {"instance_id": "textkit__textkit-1", "repo": "textkit/textkit", "base_commit": "0" * 40, "image": "sweb.eval.textkit_1776_textkit-1"}


def test_image_job():
    j = jobs.build_job(ROW, "diff", files_dir="/runs/r/files/textkit__textkit-1", mode="image",
                       image_branch="swebench/image/sweb.eval.textkit_1776_textkit-1", timeout=100)
    assert j["id"] == "textkit__textkit-1"
    assert j["from"] == "swebench/image/sweb.eval.textkit_1776_textkit-1"
    assert "root" not in j and "at" not in j
    assert j["cwd"] == "/testbed" and j["timeout"] == 160 and j["env"] == {"HOME": "/root"}
    assert j["cmd"][:2] == ["bash", "-c"]
    script = j["cmd"][2]
    assert "/runs/r/files/textkit__textkit-1/patch.diff" in script and "bash /runs/r/files/textkit__textkit-1/eval.sh" in script
    assert "timeout -k 10 100 bash" in script
    json.dumps(j)  # a batch line


def test_image_job_without_eval_script_runs_the_images():
    j = jobs.build_job(ROW, "", files_dir="/f", mode="image", image_branch="b", has_eval_script=False)
    assert "bash /eval.sh" in j["cmd"][2]
    assert "patch.diff" not in j["cmd"][2]  # an empty patch is not applied


def test_env_job():
    j = jobs.build_job(ROW, "diff", files_dir="/f", mode="env", env_branch="swebench/env/sweb.env.textkit",
                       project_branch="swebench/project/textkit__textkit/000000000000", net="none")
    assert (j["from"], j["root"], j["at"], j["net"]) == ("swebench/project/textkit__textkit/000000000000", "swebench/env/sweb.env.textkit", "/testbed", "none")
    with pytest.raises(ValueError):
        jobs.build_job(ROW, "diff", files_dir="/f", mode="env", env_branch="e", project_branch="p", has_eval_script=False)
    with pytest.raises(ValueError):
        jobs.build_job(ROW, "diff", files_dir="/f", mode="env", env_branch="", project_branch="p")
    with pytest.raises(ValueError):
        jobs.build_job(ROW, "diff", files_dir="/f", mode="image")


def test_branch_name():
    assert jobs.branch_name("swebench/image/", "docker.io/swebench/sweb.eval.x86_64.a_1776_b-1:latest") == \
        "swebench/image/docker.io/swebench/sweb.eval.x86_64.a_1776_b-1-latest"
    assert jobs.branch_name("x/", "a..b//c.") == "x/a.b/c"


def test_image_source():
    row = {"instance_id": "django__django-11099"}
    assert harness.image_source(harness.DEFAULT_IMAGE_SOURCE, row, "ignored") == \
        "docker://docker.io/swebench/sweb.eval.x86_64.django_1776_django-11099:latest"
    assert harness.image_source("oci:/imgs/oci:{image}", row, "sweb.eval.x") == "oci:/imgs/oci:sweb.eval.x"


def test_split_output():
    assert jobs.split_output("apply\n" + jobs.EVAL_MARK + "\ntests\n") == ("apply\n", "tests\n")
    assert jobs.split_output("only apply\n") == ("only apply\n", "")


def test_dry_run(tmp_path, capsys):
    ds = tmp_path / "ds.json"
    ds.write_text(json.dumps([dict(ROW, patch="p1", eval_script="#!/bin/bash\n"), dict(ROW, instance_id="x__x-2", patch="")]))
    assert harness.main(["--dataset", str(ds), "--predictions", "gold", "--run-id", "r", "--dry-run",
                         "--image-source", "oci:/imgs/oci:{image}", "--log-dir", str(tmp_path)]) == 0
    lines = [json.loads(l) for l in capsys.readouterr().out.splitlines()]
    # The empty gold patch is not run, as SWE-bench runs none.
    assert [l["id"] for l in lines] == ["textkit__textkit-1"]
    assert lines[0]["from"] == "swebench/image/sweb.eval.textkit_1776_textkit-1"


# The script, run: a repository in a temporary directory is /testbed.

def git(repo, *args):
    subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", *args], check=True, capture_output=True)


@pytest.fixture
def testbed(tmp_path):
    repo = tmp_path / "testbed"
    repo.mkdir()
    git(repo, "init", "-q")
    (repo / "m.py").write_text("".join("line %d\n" % i for i in range(1, 21)))
    git(repo, "add", "m.py")
    git(repo, "commit", "-q", "-m", "base")
    return repo


def run_job(tmp_path, repo, patch, eval_body="echo '>>>>> Start Test Output'; cat m.py | head -3; echo '>>>>> End Test Output'\n", timeout=60):
    files = tmp_path / "files"
    files.mkdir(exist_ok=True)
    (files / "patch.diff").write_text(patch)
    (files / "eval.sh").write_text(eval_body)
    script = jobs.job_script(str(files), bool(patch), str(files / "eval.sh"), timeout, testbed=str(repo))
    p = subprocess.run(["bash", "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert p.stderr == ""  # exec 2>&1: everything on stdout
    return p.returncode, p.stdout


def diff_of(repo, old, new):
    (repo / "m.py").write_text(new)
    out = subprocess.run(["git", "-C", str(repo), "diff"], capture_output=True, text=True, check=True).stdout
    (repo / "m.py").write_text(old)
    return out


def test_script_git_apply(tmp_path, testbed):
    old = (testbed / "m.py").read_text()
    patch = diff_of(testbed, old, old.replace("line 3\n", "line three\n"))
    rc, out = run_job(tmp_path, testbed, patch)
    assert rc == 0, out
    assert APPLY_PATCH_PASS + " (git apply --verbose)" in out
    head, tests = jobs.split_output(out)
    assert "line three" in tests and "Start Test Output" in tests
    assert "+line three" in head  # git diff of the applied patch


def test_script_patch_fuzz_fallback(tmp_path, testbed):
    # The patch's context drifted: git apply refuses it, patch --fuzz applies it.
    old = (testbed / "m.py").read_text()
    patch = diff_of(testbed, old, old.replace("line 10\n", "line ten\n"))
    (testbed / "m.py").write_text(old.replace("line 8\n", "line eight\n"))
    git(testbed, "commit", "-q", "-am", "drift")
    rc, out = run_job(tmp_path, testbed, patch)
    assert rc == 0, out
    assert "Failed to apply patch to container: git apply --verbose\n" in out
    assert "Failed to apply patch to container: git apply --verbose --reject\n" in out
    assert APPLY_PATCH_PASS + " (patch --batch --fuzz=5 -p1 -i)" in out
    assert "line ten" in (testbed / "m.py").read_text()


def test_script_patch_fails(tmp_path, testbed):
    patch = "diff --git a/nope.py b/nope.py\n--- a/nope.py\n+++ b/nope.py\n@@ -1,1 +1,1 @@\n-a\n+b\n"
    rc, out = run_job(tmp_path, testbed, patch)
    assert rc == 3 and out.rstrip().endswith(APPLY_PATCH_FAIL), out
    assert jobs.EVAL_MARK not in out  # the evaluation did not run


def test_script_no_patch_and_timeout(tmp_path, testbed):
    rc, out = run_job(tmp_path, testbed, "")
    assert rc == 0 and "Applied Patch" not in out and "line 1" in jobs.split_output(out)[1]
    rc, out = run_job(tmp_path, testbed, "", eval_body="sleep 30\n", timeout=1)
    assert rc == 124 and "Timeout error: 1 seconds exceeded." in out
