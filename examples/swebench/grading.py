"""SWE-bench's grading, as swebench.harness.grading does it, standard library only.

A run's log holds the output of the evaluation script; the test output is
what lies between the ``>>>>> Start Test Output`` and ``>>>>> End Test
Output`` markers. The pytest log parser turns it into a status per test
(``PASSED``, ``FAILED``, ``SKIPPED``, ``ERROR``, ``XFAIL``); an instance is
resolved when every FAIL_TO_PASS test passed and every PASS_TO_PASS test
passed or was skipped. A log holding one of the failure markers (patch not
applied, reset failed, tests errored or timed out), or lacking the markers,
grades as "patch not applied": nothing resolved.

Names and report fields are SWE-bench's, so reports compare with its own.
"""

import json
import re
from typing import Any, Dict, Iterable, List, Mapping, Optional, Tuple

# Markers (swebench.harness.constants).
START_TEST_OUTPUT = ">>>>> Start Test Output"
END_TEST_OUTPUT = ">>>>> End Test Output"
APPLY_PATCH_FAIL = ">>>>> Patch Apply Failed"
APPLY_PATCH_PASS = ">>>>> Applied Patch"
INSTALL_FAIL = ">>>>> Init Failed"
RESET_FAILED = ">>>>> Reset Failed"
TESTS_ERROR = ">>>>> Tests Errored"
TESTS_TIMEOUT = ">>>>> Tests Timed Out"
BAD_CODES = (APPLY_PATCH_FAIL, RESET_FAILED, TESTS_ERROR, TESTS_TIMEOUT)

# Test statuses (swebench.harness.constants.TestStatus).
PASSED, FAILED, SKIPPED, ERROR, XFAIL = "PASSED", "FAILED", "SKIPPED", "ERROR", "XFAIL"
STATUSES = (FAILED, PASSED, SKIPPED, ERROR, XFAIL)

FAIL_TO_PASS, PASS_TO_PASS = "FAIL_TO_PASS", "PASS_TO_PASS"
FAIL_TO_FAIL, PASS_TO_FAIL = "FAIL_TO_FAIL", "PASS_TO_FAIL"

KEY_INSTANCE_ID = "instance_id"
KEY_MODEL = "model_name_or_path"
KEY_PREDICTION = "model_patch"

_SKIP_COUNT = re.compile(r"^\[\d+\]$")


def parse_log_pytest(log: str) -> Dict[str, str]:
    """Test statuses from pytest output run with ``-rA``: the short test summary's
    ``STATUS test-id`` lines (``FAILED test-id - message`` too). The last line
    naming a test wins. ``SKIPPED [N] file:line: reason`` counts no test."""
    status_map: Dict[str, str] = {}
    for line in log.split("\n"):
        words = line.split()
        if len(words) < 2 or words[0] not in STATUSES or not line.startswith(words[0]):
            continue
        status, test = words[0], words[1]
        if status == SKIPPED and _SKIP_COUNT.match(test):
            continue
        status_map[test] = status
    return status_map


def test_output(content: str) -> Optional[str]:
    """The part of a log between the test output markers, or None when the
    log lacks one of them or holds a failure marker."""
    if any(code in content for code in BAD_CODES):
        return None
    if START_TEST_OUTPUT not in content or END_TEST_OUTPUT not in content:
        return None
    return content.split(START_TEST_OUTPUT, 1)[1].split(END_TEST_OUTPUT, 1)[0]


def get_logs_eval(content: str) -> Tuple[Dict[str, str], bool]:
    """(status map, found): as swebench.harness.grading.get_logs_eval, for the
    pytest parser. When the markers enclose no result line, the whole log is
    parsed (pytest's summary may follow the end marker on stderr)."""
    part = test_output(content)
    if part is None:
        return {}, False
    status_map = parse_log_pytest(part)
    if not status_map:
        status_map = parse_log_pytest(content)
    return status_map, True


def test_passed(case: str, sm: Mapping[str, str]) -> bool:
    return sm.get(case) in (PASSED, XFAIL)


def test_maintained(case: str, sm: Mapping[str, str]) -> bool:
    return test_passed(case, sm) or sm.get(case) == SKIPPED


def test_failed(case: str, sm: Mapping[str, str]) -> bool:
    return case not in sm or sm[case] in (FAILED, ERROR, SKIPPED)


def get_eval_tests_report(sm: Mapping[str, str], gold: Mapping[str, Iterable[str]]) -> Dict[str, Dict[str, List[str]]]:
    """Each FAIL_TO_PASS / PASS_TO_PASS test of gold as success or failure:
    FAIL_TO_PASS must pass (or xfail); PASS_TO_PASS must pass, xfail or skip.
    A test missing from the log fails."""
    report: Dict[str, Dict[str, List[str]]] = {}
    for key, ok in ((FAIL_TO_PASS, test_passed), (PASS_TO_PASS, test_maintained)):
        success: List[str] = []
        failure: List[str] = []
        for case in gold.get(key, ()):
            if ok(case, sm):
                success.append(case)
            elif test_failed(case, sm):
                failure.append(case)
        report[key] = {"success": success, "failure": failure}
    report[FAIL_TO_FAIL] = {"success": [], "failure": []}
    report[PASS_TO_FAIL] = {"success": [], "failure": []}
    return report


def _ratio(part: Mapping[str, List[str]]) -> float:
    total = len(part["success"]) + len(part["failure"])
    return 1.0 if total == 0 else len(part["success"]) / total


def get_resolution_status(report: Mapping[str, Mapping[str, List[str]]]) -> str:
    """RESOLVED_FULL when every FAIL_TO_PASS and PASS_TO_PASS test succeeded,
    RESOLVED_PARTIAL when some FAIL_TO_PASS did and every PASS_TO_PASS did,
    RESOLVED_NO otherwise."""
    f2p, p2p = _ratio(report[FAIL_TO_PASS]), _ratio(report[PASS_TO_PASS])
    if f2p == 1 and p2p == 1:
        return "RESOLVED_FULL"
    if 0 < f2p < 1 and p2p == 1:
        return "RESOLVED_PARTIAL"
    return "RESOLVED_NO"


def test_list(value: Any) -> List[str]:
    """FAIL_TO_PASS / PASS_TO_PASS of a dataset row: a list, or a JSON string of one
    (as the Hugging Face datasets store them)."""
    if value is None or value == "":
        return []
    if isinstance(value, str):
        value = json.loads(value)
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ValueError("want a list of test names, got %r" % (value,))
    return list(value)


def get_eval_report(row: Mapping[str, Any], prediction: Mapping[str, Any], log: str,
                    include_tests_status: bool = True) -> Dict[str, Dict[str, Any]]:
    """SWE-bench's per-instance report (report.json) for the row's tests, the
    prediction and the evaluation log."""
    iid = prediction[KEY_INSTANCE_ID]
    rep: Dict[str, Any] = {"patch_is_None": False, "patch_exists": False,
                           "patch_successfully_applied": False, "resolved": False}
    out = {iid: rep}
    if prediction.get(KEY_PREDICTION) is None:
        rep["patch_is_None"] = True
        return out
    rep["patch_exists"] = True
    sm, found = get_logs_eval(log)
    if not found:
        return out
    rep["patch_successfully_applied"] = True
    gold = {FAIL_TO_PASS: test_list(row.get(FAIL_TO_PASS)), PASS_TO_PASS: test_list(row.get(PASS_TO_PASS))}
    tests = get_eval_tests_report(sm, gold)
    rep["resolved"] = get_resolution_status(tests) == "RESOLVED_FULL"
    if include_tests_status:
        rep["tests_status"] = tests
    return out


def make_run_report(predictions: Mapping[str, Mapping[str, Any]], dataset: Iterable[Mapping[str, Any]],
                    reports: Mapping[str, Optional[Mapping[str, Any]]]) -> Dict[str, Any]:
    """SWE-bench's run summary (schema 2). reports maps an instance id to its
    report.json (None: it ran into an error, no report); instances absent from
    it were not run."""
    completed, resolved, unresolved, errors, incomplete, empty = set(), set(), set(), set(), set(), set()
    rows = list(dataset)
    for row in rows:
        iid = row[KEY_INSTANCE_ID]
        if iid not in predictions:
            incomplete.add(iid)
            continue
        if predictions[iid].get(KEY_PREDICTION) in ("", None) and iid not in reports:
            # Not run (SWE-bench runs no empty patch; the harness's
            # --run-empty-patches does, and those are graded).
            empty.add(iid)
            continue
        if iid not in reports:
            errors.add(iid)
            continue
        rep = reports[iid]
        if not rep or iid not in rep:
            errors.add(iid)
            continue
        completed.add(iid)
        (resolved if rep[iid].get("resolved") else unresolved).add(iid)
    ids = {r[KEY_INSTANCE_ID] for r in rows}
    return {
        "total_instances": len(rows),
        "submitted_instances": len(set(predictions) & ids),
        "completed_instances": len(completed),
        "resolved_instances": len(resolved),
        "unresolved_instances": len(unresolved),
        "empty_patch_instances": len(empty),
        "error_instances": len(errors),
        "completed_ids": sorted(completed),
        "incomplete_ids": sorted(incomplete),
        "empty_patch_ids": sorted(empty),
        "submitted_ids": sorted(predictions),
        "resolved_ids": sorted(resolved),
        "unresolved_ids": sorted(unresolved),
        "error_ids": sorted(errors),
        "schema_version": 2,
    }
