"""Reports of a check: run results → JSON and JUnit XML for CI systems."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from dataclasses import asdict

from infralens.model.run import RunResult


def results_json(results: list[RunResult]) -> str:
    """Return every result as JSON, one object per run of a starter, in check order."""
    records = []
    for result in results:
        record = asdict(result)
        record["mark"] = str(result.mark)
        record["passed"] = result.passed
        records.append(record)
    counts = {status: sum(r.status == status for r in results) for status in ("passed", "skipped", "compiled")}
    failed = len(results) - sum(counts.values())
    return json.dumps({"results": records, "passed": counts["passed"], "failed": failed, "compiled": counts["compiled"], "skipped": counts["skipped"]}, indent=1)


def results_junit(results: list[RunResult]) -> str:
    """Return the results as a JUnit XML report: one test suite, one test case per run of a starter
    (its path, and its device when not the CPU); a run its machine could not make is skipped, and
    so is one it compiled but could not run (JUnit has no status between), its message saying so."""
    failures = [r for r in results if r.ran and not r.passed]
    suite = ET.Element(
        "testsuite",
        name="infralens check",
        tests=str(len(results)),
        failures=str(len(failures)),
        errors="0",
        skipped=str(sum(not r.ran for r in results)),
        time=f"{sum(r.seconds for r in results):.3f}",
    )
    for result in results:
        case = ET.SubElement(suite, "testcase", classname=result.lab, name=result.name, time=f"{result.seconds:.3f}")
        if result.skipped:
            ET.SubElement(case, "skipped", message=result.reason)
        elif result.compiled:
            ET.SubElement(case, "skipped", message=f"compiled, not run: {result.reason}", type="compiled")
        elif not result.passed:
            failure = ET.SubElement(case, "failure", message="\n".join(f"{mark}: {reason}" for mark, reason in ((result.mark, result.reason), *result.also)), type=result.status)
            failure.text = result.tail()
        ET.SubElement(case, "system-out").text = result.stdout
    ET.indent(suite)
    return ET.tostring(suite, encoding="unicode", xml_declaration=True) + "\n"
