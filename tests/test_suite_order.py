"""The suite's own file order (tests/_file_seconds.py): longest measured file first, an unmeasured one before all."""

from __future__ import annotations

import json
from types import SimpleNamespace

import _file_seconds


def test_a_junit_report_is_summed_per_file_and_files_go_longest_first_an_unmeasured_one_first(tmp_path) -> None:
    report = tmp_path / "report.xml"
    report.write_text(
        '<testsuites><testsuite name="pytest">'
        '<testcase classname="tests.test_a" name="x" time="1.5"/><testcase classname="tests.test_a" name="y" time="2"/>'
        '<testcase classname="tests.test_b" name="z" time="7"/>'
        '<testcase classname="tests.sub.test_c" name="w" time="0.25"/>'
        '<testcase classname="" name="collect" time="3"/></testsuite></testsuites>')
    assert _file_seconds.from_junit(str(report)) == {
        "tests/test_a.py": 3.5, "tests/test_b.py": 7.0, "tests/sub/test_c.py": 0.25}
    items = [SimpleNamespace(nodeid=n) for n in (
        "tests/test_a.py::x", "tests/test_a.py::y", "tests/test_new.py::n", "tests/test_b.py::z")]
    items.sort(key=_file_seconds.order_key(_file_seconds.from_junit(str(report))))
    assert [i.nodeid for i in items] == [
        "tests/test_new.py::n", "tests/test_b.py::z", "tests/test_a.py::x", "tests/test_a.py::y"]


def test_the_written_seconds_are_the_mean_of_the_reports_and_a_missing_table_orders_nothing(tmp_path,
                                                                                             monkeypatch) -> None:
    for i, seconds in enumerate((4, 8)):
        (tmp_path / f"r{i}.xml").write_text(
            f'<testsuite><testcase classname="tests.test_a" name="x" time="{seconds}"/></testsuite>')
    out = tmp_path / "seconds.json"
    monkeypatch.setattr(_file_seconds, "SECONDS_PATH", str(out))
    assert _file_seconds.main([str(tmp_path / "r0.xml"), str(tmp_path / "r1.xml")]) == 0
    assert json.loads(out.read_text()) == {"tests/test_a.py": 6.0} == _file_seconds.load(str(out))
    assert _file_seconds.load(str(tmp_path / "none.json")) == {}
    assert _file_seconds.main([]) == 2
