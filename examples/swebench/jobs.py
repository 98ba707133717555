"""SWE-bench instances as ``strata batch`` jobs.

One job per instance: a workspace rooted in the instance's image (or the
project at its base commit on the environment's image) where a bash script
applies the prediction's patch in /testbed with SWE-bench's fallbacks —
``git apply --verbose``, then ``git apply --verbose --reject``, then
``patch --batch --fuzz=5 -p1 -i`` — and runs the evaluation script under a
timeout, all output on stdout in order (as ``docker exec`` gives it).

The patch and the evaluation script reach the job as files: the harness
writes them under a run directory that the batch binds read-only into every
job (``strata batch --ro DIR``), so neither their size nor their quoting is
an issue.
"""

import re
import shlex
from typing import Any, Dict, Mapping, Optional

from grading import APPLY_PATCH_FAIL, APPLY_PATCH_PASS

# SWE-bench's harness (swebench.harness.run_evaluation): the commands tried in
# order, the container's working directory, the default timeout.
GIT_APPLY_CMDS = ("git apply --verbose", "git apply --verbose --reject", "patch --batch --fuzz=5 -p1 -i")
TESTBED = "/testbed"
DEFAULT_TIMEOUT = 1800

#: Printed between the patch step and the evaluation script: the harness
#: splits the job's output there into run_instance.log and test_output.txt.
EVAL_MARK = ">>>>> strata: evaluation script"

_UNSAFE = re.compile(r"[^A-Za-z0-9._/-]+")


def branch_name(prefix: str, name: str) -> str:
    """A strata branch name for an image or a project commit: what git's ref
    rules accept ([A-Za-z0-9._/-], no '..', no trailing '.' or '/')."""
    b = _UNSAFE.sub("-", prefix + name).replace("..", ".")
    while "//" in b:
        b = b.replace("//", "/")
    return b.strip("/.-") or "image"


def job_script(files_dir: str, has_patch: bool, eval_path: str, timeout: int, testbed: str = TESTBED) -> str:
    """The job's bash script. files_dir holds patch.diff (when has_patch);
    eval_path is the evaluation script (the instance's file under files_dir,
    or the image's /eval.sh); the patch is applied in testbed."""
    q = shlex.quote
    lines = [
        "exec 2>&1",  # one log, in order
        "cd " + q(testbed),
    ]
    if has_patch:
        patch = q(files_dir + "/patch.diff")
        lines += [
            "applied=",
            "for cmd in %s; do" % " ".join(q(c) for c in GIT_APPLY_CMDS),
            "  if $cmd %s; then applied=$cmd; break; fi" % patch,
            '  echo "Failed to apply patch to container: $cmd"',
            "done",
            'if [ -z "$applied" ]; then echo %s; exit 3; fi' % q(APPLY_PATCH_FAIL),
            'echo "%s ($applied)"' % APPLY_PATCH_PASS,
        ]
    lines += [
        "git -c core.fileMode=false diff",
        "echo " + q(EVAL_MARK),
        # SWE-bench's own bound on the evaluation; the job's timeout (a
        # little longer) is strata's.
        "timeout -k 10 %d bash %s" % (timeout, q(eval_path)),
        "rc=$?",
        'if [ "$rc" = 124 ] || [ "$rc" = 137 ]; then echo; echo "Timeout error: %d seconds exceeded."; exit 124; fi' % timeout,
        "exit $rc",
    ]
    return "\n".join(lines) + "\n"


def build_job(row: Mapping[str, Any], patch: Optional[str], *, files_dir: str, mode: str,
              image_branch: str = "", env_branch: str = "", project_branch: str = "",
              has_eval_script: bool = True, timeout: int = DEFAULT_TIMEOUT, net: str = "") -> Dict[str, Any]:
    """The batch job of one instance.

    mode "image": the workspace is the instance image's root
    (``"from": image_branch``, an imported image, so the job is image-rooted).
    mode "env": the project at the row's base commit (``"from": project_branch``,
    an ``import --git``) at /testbed over the environment image's root
    (``"root": env_branch, "at": "/testbed"``).

    files_dir is this instance's directory of patch.diff and eval.sh as the
    job sees it. has_eval_script: the row brought an eval_script (written to
    files_dir/eval.sh); otherwise the image's /eval.sh runs.
    """
    eval_path = files_dir + "/eval.sh" if has_eval_script else "/eval.sh"
    job: Dict[str, Any] = {
        "id": row["instance_id"],
        "cmd": ["bash", "-c", job_script(files_dir, bool(patch), eval_path, timeout)],
        "cwd": TESTBED,
        "timeout": timeout + 60,
        "env": {"HOME": "/root"},
    }
    if mode == "image":
        if not image_branch:
            raise ValueError("%s: no image" % row["instance_id"])
        job["from"] = image_branch
    elif mode == "env":
        if not (env_branch and project_branch):
            raise ValueError("%s: mode env needs the environment image and the project's branch" % row["instance_id"])
        if not has_eval_script:
            raise ValueError("%s: mode env needs the row's eval_script (an environment image has no /eval.sh)" % row["instance_id"])
        job["from"] = project_branch
        job["root"] = env_branch
        job["at"] = TESTBED
    else:
        raise ValueError("mode %r: want image or env" % mode)
    if net:
        job["net"] = net
    return job


def split_output(stdout: str) -> "tuple[str, str]":
    """(run_instance.log, test_output.txt) of a job's output: before and after
    the evaluation mark (all of it is the run log when there is no mark)."""
    if EVAL_MARK + "\n" not in stdout:
        return stdout, ""
    head, tail = stdout.split(EVAL_MARK + "\n", 1)
    return head, tail
