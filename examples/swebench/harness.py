#!/usr/bin/env python3
"""Run SWE-bench evaluations with strata instead of Docker.

    python3 harness.py --dataset DATASET --predictions PREDS|gold --run-id ID [options]

DATASET: rows in SWE-bench's shape (JSON list or JSON lines): instance_id,
repo, base_commit, patch, test_patch, FAIL_TO_PASS, PASS_TO_PASS, and
image (the instance image's name) and eval_script (its evaluation script)
where the dataset has them. PREDS: SWE-bench predictions (instance_id,
model_name_or_path, model_patch), a JSON list, object or JSON lines; "gold"
takes each row's own patch.

For each instance it imports the image into the strata store (once per
image; shared layers are stored once), writes the patch and evaluation
script, runs all of them as one ``strata batch`` (``--parallel``), and
grades each log as SWE-bench does, writing SWE-bench's files:
LOG_DIR/run_evaluation/RUN_ID/MODEL/INSTANCE/{patch.diff, eval.sh,
run_instance.log, test_output.txt, report.json} and the summary
REPORT_DIR/MODEL.RUN_ID.json. See README.md.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
from typing import Any, Dict, List, Mapping, Optional, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import grading  # noqa: E402
import jobs  # noqa: E402

try:
    import stratafs  # noqa: E402
except ImportError:  # run from a checkout: the SDK beside it
    sys.path.insert(0, os.path.join(HERE, "..", "..", "python", "src"))
    import stratafs  # noqa: E402

#: SWE-bench's published instance images, by instance id (Docker Hub, x86_64).
DEFAULT_IMAGE_SOURCE = "docker://docker.io/swebench/sweb.eval.x86_64.{instance_id_1776}:latest"


def load_rows(path: str) -> List[Dict[str, Any]]:
    """A JSON list (or object of rows) or JSON lines."""
    with open(path) as f:
        text = f.read()
    try:
        data = json.loads(text)
    except ValueError:
        data = [json.loads(line) for line in text.splitlines() if line.strip()]
    if isinstance(data, dict):
        data = list(data.values()) if all(isinstance(v, dict) for v in data.values()) else [data]
    if not isinstance(data, list) or not all(isinstance(r, dict) for r in data):
        raise SystemExit("%s: want a JSON list of objects, or JSON lines" % path)
    return data


def load_predictions(arg: str, dataset: List[Dict[str, Any]]) -> Dict[str, Dict[str, Any]]:
    if arg == "gold":
        return {r["instance_id"]: {grading.KEY_INSTANCE_ID: r["instance_id"], grading.KEY_MODEL: "gold",
                                   grading.KEY_PREDICTION: r.get("patch", "")} for r in dataset}
    out = {}
    for p in load_rows(arg):
        if grading.KEY_INSTANCE_ID not in p or grading.KEY_PREDICTION not in p:
            raise SystemExit("%s: a prediction needs instance_id and model_patch: %r" % (arg, sorted(p)))
        p.setdefault(grading.KEY_MODEL, "model")
        out[p[grading.KEY_INSTANCE_ID]] = p
    return out


def image_source(template: str, row: Mapping[str, Any], image: str) -> str:
    """The import source of an image: template with {image}, {instance_id} and
    {instance_id_1776} (SWE-bench's Docker Hub spelling of '__') filled in."""
    iid = row["instance_id"]
    return template.format(image=image, instance_id=iid, instance_id_1776=iid.replace("__", "_1776_"))


def find_repo(repos: str, name: str) -> str:
    """A local clone of the dataset's repo (owner/name): REPOS/owner__name, else REPOS/name."""
    for cand in (name.replace("/", "__"), name.split("/")[-1]):
        p = os.path.join(repos, cand)
        if os.path.isdir(p):
            return os.path.abspath(p)
    raise SystemExit("no clone of %s under %s (as %s or %s)" % (name, repos, name.replace("/", "__"), name.split("/")[-1]))


class Strata:
    """The strata CLI: the SDK where it has the call, the binary for the rest."""

    def __init__(self, home: Optional[str], binary: Optional[str]) -> None:
        self.sdk = stratafs.Store(home, binary=binary)
        self.sdk.version()

    def base(self) -> List[str]:
        b = [self.sdk.binary]
        if self.sdk.home:
            b += ["--home", self.sdk.home]
        return b

    def import_image(self, src: str, branch: str, tls_verify: bool) -> None:
        try:
            self.sdk.import_image(src, branch=branch, tls_verify=tls_verify)
        except stratafs.StrataError as e:
            raise SystemExit("import --image %s: %s" % (src, e))

    def batch(self, jobs_file: str, out: str, output: str, ro: str, parallel: int) -> int:
        argv = self.base() + ["--quiet", "batch", jobs_file, "--parallel", str(parallel), "--out", out,
                              "--output", output, "--ro", ro]
        return subprocess.run(argv).returncode


def prepare(args: argparse.Namespace, rows: List[Dict[str, Any]], st: Optional[Strata]) -> Dict[str, Dict[str, str]]:
    """Import what the instances need; returns each instance's branches."""
    branches: Dict[str, Dict[str, str]] = {}
    imported: Dict[str, str] = {}
    projects: Dict[Tuple[str, str], str] = {}
    for row in rows:
        iid = row["instance_id"]
        b: Dict[str, str] = {}
        if args.mode == "image":
            image = row.get("image") or iid
            src = image_source(args.image_source, row, image)
            if src not in imported:
                imported[src] = jobs.branch_name("swebench/image/", image)
                if st:
                    st.import_image(src, imported[src], args.tls_verify)
            b["image"] = imported[src]
        else:
            env = args.env_image or row.get("env_image")
            if not env:
                raise SystemExit("%s: mode env needs --env-image or the row's env_image" % iid)
            src = image_source(args.image_source, row, env)
            if src not in imported:
                imported[src] = jobs.branch_name("swebench/env/", env)
                if st:
                    st.import_image(src, imported[src], args.tls_verify)
            b["env"] = imported[src]
            key = (row["repo"], row["base_commit"])
            if key not in projects:
                projects[key] = jobs.branch_name("swebench/project/", row["repo"].replace("/", "__") + "/" + row["base_commit"][:12])
                if st:
                    st.sdk.import_git(find_repo(args.repos, row["repo"]), row["base_commit"], branch=projects[key])
            b["project"] = projects[key]
        branches[iid] = b
    return branches


def write(path: str, text: str) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dataset", required=True, help="dataset rows: JSON list or JSON lines")
    ap.add_argument("--predictions", required=True, help='predictions file, or "gold" for the rows\' own patches')
    ap.add_argument("--run-id", required=True)
    ap.add_argument("--mode", choices=("image", "env"), default="image",
                    help="image: each instance's image is the root; env: the project at its base commit on the environment image")
    ap.add_argument("--image-source", default=DEFAULT_IMAGE_SOURCE,
                    help="import source of an image, with {image}, {instance_id}, {instance_id_1776} (default: %(default)s)")
    ap.add_argument("--tls-verify", default="true", choices=("true", "false"), help="false: a plain-HTTP registry")
    ap.add_argument("--env-image", default="", help="mode env: the environment image (else each row's env_image)")
    ap.add_argument("--repos", default=".", help="mode env: directory of local clones (owner__name or name)")
    ap.add_argument("--instance-ids", nargs="*", default=None, help="only these instances")
    ap.add_argument("--parallel", "-j", type=int, default=1)
    ap.add_argument("--timeout", type=int, default=jobs.DEFAULT_TIMEOUT, help="seconds per evaluation (default %(default)s)")
    ap.add_argument("--net", choices=("", "host", "none"), default="", help="the jobs' network (strata's default: host)")
    ap.add_argument("--home", default=None, help="the strata store (STRATA_HOME)")
    ap.add_argument("--strata", default=None, help="the strata binary (default: $STRATA_BIN or strata on PATH)")
    ap.add_argument("--log-dir", default="logs", help="where run_evaluation/RUN_ID/... goes (default %(default)s)")
    ap.add_argument("--report-dir", default=".", help="where MODEL.RUN_ID.json goes (default %(default)s)")
    ap.add_argument("--run-empty-patches", action="store_true",
                    help="run instances whose patch is empty too (SWE-bench counts them as empty_patch and runs nothing)")
    ap.add_argument("--dry-run", action="store_true", help="print the batch jobs, import and run nothing")
    args = ap.parse_args(argv)
    args.tls_verify = args.tls_verify == "true"

    dataset = load_rows(args.dataset)
    preds = load_predictions(args.predictions, dataset)
    if args.instance_ids:
        want = set(args.instance_ids)
        dataset = [r for r in dataset if r["instance_id"] in want]
        preds = {k: v for k, v in preds.items() if k in want}
    rows = [r for r in dataset if r["instance_id"] in preds]
    if not args.run_empty_patches:
        rows = [r for r in rows if preds[r["instance_id"]].get(grading.KEY_PREDICTION) not in ("", None)]
    models = {p[grading.KEY_MODEL] for p in preds.values()} or {"model"}
    model = sorted(models)[0].replace("/", "__")

    st = None if args.dry_run else Strata(args.home, args.strata)
    branches = prepare(args, rows, st)

    run_dir = os.path.abspath(os.path.join(args.log_dir, "strata", args.run_id))
    if not args.dry_run:
        shutil.rmtree(run_dir, ignore_errors=True)
    files_root = os.path.join(run_dir, "files")
    job_lines = []
    for row in rows:
        iid = row["instance_id"]
        patch = preds[iid].get(grading.KEY_PREDICTION) or ""
        files = os.path.join(files_root, iid)
        has_eval = bool(row.get("eval_script"))
        if not args.dry_run:
            write(os.path.join(files, "patch.diff"), patch)
            if has_eval:
                write(os.path.join(files, "eval.sh"), row["eval_script"])
        b = branches[iid]
        job_lines.append(jobs.build_job(row, patch, files_dir=files, mode=args.mode, image_branch=b.get("image", ""),
                                        env_branch=b.get("env", ""), project_branch=b.get("project", ""),
                                        has_eval_script=has_eval, timeout=args.timeout, net=args.net))
    if args.dry_run:
        for j in job_lines:
            print(json.dumps(j))
        return 0

    jobs_file = os.path.join(run_dir, "jobs.jsonl")
    write(jobs_file, "".join(json.dumps(j) + "\n" for j in job_lines))
    results_file = os.path.join(run_dir, "results.jsonl")
    output_dir = os.path.join(run_dir, "output")
    if job_lines:
        os.makedirs(files_root, exist_ok=True)
        rc = st.batch(jobs_file, results_file, output_dir, files_root, args.parallel)  # type: ignore[union-attr]
        if rc not in (0, 4):  # 4: every job ran, some failed
            print("strata batch exited with %d" % rc, file=sys.stderr)
    results: Dict[str, Dict[str, Any]] = {}
    if os.path.exists(results_file):
        for line in open(results_file):
            if line.strip():
                r = json.loads(line)
                if "id" in r and "index" in r:
                    results[r["id"]] = r

    reports: Dict[str, Optional[Dict[str, Any]]] = {}
    resolved_n = 0
    for row in rows:
        iid = row["instance_id"]
        pred = preds[iid]
        log_dir = os.path.join(args.log_dir, "run_evaluation", args.run_id, pred[grading.KEY_MODEL].replace("/", "__"), iid)
        shutil.rmtree(log_dir, ignore_errors=True)
        write(os.path.join(log_dir, "patch.diff"), pred.get(grading.KEY_PREDICTION) or "")
        if row.get("eval_script"):
            write(os.path.join(log_dir, "eval.sh"), row["eval_script"])
        res = results.get(iid)
        out = ""
        p = os.path.join(output_dir, iid, "stdout")
        if os.path.exists(p):
            with open(p, errors="replace") as f:
                out = f.read()
        run_log, test_out = jobs.split_output(out)
        if res is None or res.get("error"):
            run_log += "\nstrata could not run the job: %s\n" % ((res or {}).get("error") or "no result")
        elif res.get("timed_out"):
            test_out += "\n\nTimeout error: %d seconds exceeded.\n" % args.timeout
        write(os.path.join(log_dir, "run_instance.log"), run_log)
        write(os.path.join(log_dir, "test_output.txt"), test_out)
        # As SWE-bench: a job that did not get to the evaluation (strata
        # error, patch not applied) or timed out has no report: an error.
        if res is None or res.get("error") or res.get("timed_out") or grading.APPLY_PATCH_FAIL in run_log or not test_out:
            reports[iid] = None
            print("%s: error" % iid)
            continue
        rep = grading.get_eval_report(row, pred, test_out)
        write(os.path.join(log_dir, "report.json"), json.dumps(rep, indent=4) + "\n")
        reports[iid] = rep
        resolved_n += rep[iid]["resolved"]
        print("%s: %s" % (iid, "resolved" if rep[iid]["resolved"] else "not resolved"))

    summary = grading.make_run_report(preds, dataset, reports)
    os.makedirs(args.report_dir, exist_ok=True)
    report_file = os.path.join(args.report_dir, "%s.%s.json" % (model, args.run_id))
    write(report_file, json.dumps(summary, indent=4) + "\n")
    print("Instances resolved: %d of %d; report written to %s" % (resolved_n, len(rows), report_file))
    return 0


if __name__ == "__main__":
    sys.exit(main())
