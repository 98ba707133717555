"""Grading as swebench.harness.grading does it: markers, the pytest parser,
FAIL_TO_PASS / PASS_TO_PASS, the reports."""

import json

import grading as g

F2P = ["tests/test_slug.py::test_new"]
P2P = ["tests/test_slug.py::test_a", "tests/test_slug.py::test_b"]
ROW = {"instance_id": "p__p-1", "FAIL_TO_PASS": json.dumps(F2P), "PASS_TO_PASS": P2P}


def log(*summary, before="", after=""):
    """An evaluation log as bash -x and pytest -rA print it."""
    return ("+ git apply -v -\nChecking patch tests/test_slug.py...\n" + before +
            "+ : '>>>>> Start Test Output'\n+ python3 -m pytest -rA tests/test_slug.py\n"
            "============================= test session starts ==============================\n"
            "collected 3 items\n\ntests/test_slug.py ..F                                                   [100%]\n"
            "=========================== short test summary info ============================\n" +
            "".join(line + "\n" for line in summary) +
            "========================= 1 failed, 2 passed in 0.05s ==========================\n"
            "+ : '>>>>> End Test Output'\n+ git checkout abc tests/test_slug.py\n" + after)


def pred(patch="diff --git a/x b/x\n"):
    return {"instance_id": "p__p-1", "model_name_or_path": "m", "model_patch": patch}


def test_parse_log_pytest():
    sm = g.parse_log_pytest("PASSED tests/t.py::test_a\nFAILED tests/t.py::test_b - AssertionError: x - y\n"
                            "SKIPPED [1] tests/t.py:7: no network\nSKIPPED tests/t.py::test_c\n"
                            "ERROR tests/t.py::test_d - ValueError\nXFAIL tests/t.py::test_e - reason\n"
                            "+ PASSED not-a-result\n  PASSED indented\nPASSED\nPASSING tests/t.py::x\n"
                            "PASSED tests/t.py::test_p[a b]\n")
    assert sm == {"tests/t.py::test_a": "PASSED", "tests/t.py::test_b": "FAILED", "tests/t.py::test_c": "SKIPPED",
                  "tests/t.py::test_d": "ERROR", "tests/t.py::test_e": "XFAIL", "tests/t.py::test_p[a": "PASSED"}


def test_parse_last_wins():
    assert g.parse_log_pytest("FAILED t.py::a\nPASSED t.py::a\n") == {"t.py::a": "PASSED"}


def test_between_markers_only():
    content = "PASSED tests/test_slug.py::test_new\n" + log("PASSED tests/test_slug.py::test_a")
    sm, found = g.get_logs_eval(content)
    assert found and sm == {"tests/test_slug.py::test_a": "PASSED"}


def test_fallback_to_whole_log():
    # Nothing between the markers: the whole log is parsed, as SWE-bench does.
    content = log(after="PASSED tests/test_slug.py::test_new\n")
    assert g.get_logs_eval(content) == ({"tests/test_slug.py::test_new": "PASSED"}, True)


def test_bad_codes_and_missing_markers():
    for content in [log("PASSED a::b", before=g.APPLY_PATCH_FAIL + "\n"), log("PASSED a::b", after=g.TESTS_TIMEOUT),
                    log("PASSED a::b", before=g.RESET_FAILED), log("PASSED a::b", before=g.TESTS_ERROR),
                    "PASSED a::b\n+ : '>>>>> Start Test Output'\n", "no markers\nPASSED a::b\n", ""]:
        assert g.get_logs_eval(content) == ({}, False), content


def test_resolved():
    content = log("PASSED tests/test_slug.py::test_a", "PASSED tests/test_slug.py::test_b", "PASSED tests/test_slug.py::test_new")
    rep = g.get_eval_report(ROW, pred(), content)["p__p-1"]
    assert rep["resolved"] and rep["patch_exists"] and rep["patch_successfully_applied"] and not rep["patch_is_None"]
    assert rep["tests_status"]["FAIL_TO_PASS"] == {"success": F2P, "failure": []}
    assert rep["tests_status"]["PASS_TO_PASS"] == {"success": P2P, "failure": []}
    assert set(rep["tests_status"]) == {"FAIL_TO_PASS", "PASS_TO_PASS", "FAIL_TO_FAIL", "PASS_TO_FAIL"}


def test_not_resolved():
    cases = {
        "fail to pass fails": ["PASSED tests/test_slug.py::test_a", "PASSED tests/test_slug.py::test_b",
                               "FAILED tests/test_slug.py::test_new - AssertionError"],
        "fail to pass missing": ["PASSED tests/test_slug.py::test_a", "PASSED tests/test_slug.py::test_b"],
        "fail to pass skipped": ["PASSED tests/test_slug.py::test_a", "PASSED tests/test_slug.py::test_b",
                                 "SKIPPED tests/test_slug.py::test_new"],
        "pass to pass broken": ["FAILED tests/test_slug.py::test_a", "PASSED tests/test_slug.py::test_b",
                                "PASSED tests/test_slug.py::test_new"],
        "pass to pass errors": ["ERROR tests/test_slug.py::test_a", "PASSED tests/test_slug.py::test_b",
                                "PASSED tests/test_slug.py::test_new"],
        "collection error": ["ERROR tests/test_slug.py - SyntaxError: '(' was never closed"],
    }
    for name, summary in cases.items():
        rep = g.get_eval_report(ROW, pred(), log(*summary))["p__p-1"]
        assert rep["patch_successfully_applied"] and not rep["resolved"], name


def test_maintained_and_xfail():
    # PASS_TO_PASS may be skipped; FAIL_TO_PASS may xfail.
    content = log("SKIPPED tests/test_slug.py::test_a", "PASSED tests/test_slug.py::test_b", "XFAIL tests/test_slug.py::test_new")
    assert g.get_eval_report(ROW, pred(), content)["p__p-1"]["resolved"]


def test_resolution_status():
    def rep(f2p_ok, f2p_bad, p2p_ok, p2p_bad):
        return {"FAIL_TO_PASS": {"success": ["x"] * f2p_ok, "failure": ["y"] * f2p_bad},
                "PASS_TO_PASS": {"success": ["x"] * p2p_ok, "failure": ["y"] * p2p_bad}}
    assert g.get_resolution_status(rep(2, 0, 1, 0)) == "RESOLVED_FULL"
    assert g.get_resolution_status(rep(0, 0, 0, 0)) == "RESOLVED_FULL"
    assert g.get_resolution_status(rep(1, 1, 3, 0)) == "RESOLVED_PARTIAL"
    assert g.get_resolution_status(rep(1, 1, 3, 1)) == "RESOLVED_NO"
    assert g.get_resolution_status(rep(0, 2, 3, 0)) == "RESOLVED_NO"


def test_patch_none_and_not_applied():
    rep = g.get_eval_report(ROW, {"instance_id": "p__p-1", "model_patch": None}, log("PASSED x::y"))["p__p-1"]
    assert rep == {"patch_is_None": True, "patch_exists": False, "patch_successfully_applied": False, "resolved": False}
    rep = g.get_eval_report(ROW, pred(), "no markers")["p__p-1"]
    assert rep == {"patch_is_None": False, "patch_exists": True, "patch_successfully_applied": False, "resolved": False}


def test_test_list():
    assert g.test_list('["a", "b"]') == ["a", "b"]
    assert g.test_list(["a"]) == ["a"]
    assert g.test_list("") == [] and g.test_list(None) == []
    for bad in ['{"a": 1}', "[1]"]:
        try:
            g.test_list(bad)
        except ValueError:
            continue
        raise AssertionError("accepted %r" % bad)


def test_run_report():
    dataset = [{"instance_id": i} for i in ("a", "b", "c", "d", "e", "f")]
    preds = {i: {"instance_id": i, "model_name_or_path": "m", "model_patch": "p"} for i in ("a", "b", "c", "d", "e")}
    preds["c"]["model_patch"] = ""
    preds["e"]["model_patch"] = ""
    reports = {"a": {"a": {"resolved": True}}, "b": {"b": {"resolved": False}}, "d": None,
               "e": {"e": {"resolved": False}}}  # e: an empty patch run anyway
    r = g.make_run_report(preds, dataset, reports)
    assert r == {
        "total_instances": 6, "submitted_instances": 5, "completed_instances": 3, "resolved_instances": 1,
        "unresolved_instances": 2, "empty_patch_instances": 1, "error_instances": 1,
        "completed_ids": ["a", "b", "e"], "incomplete_ids": ["f"], "empty_patch_ids": ["c"],
        "submitted_ids": ["a", "b", "c", "d", "e"], "resolved_ids": ["a"], "unresolved_ids": ["b", "e"],
        "error_ids": ["d"], "schema_version": 2,
    }
