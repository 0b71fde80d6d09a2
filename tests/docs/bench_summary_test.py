#!/usr/bin/python3
"""scripts/bench_summary.py: docs/BENCHMARKS.md's current table matches
docs/benchmarks.json, and `record` adds, replaces and refuses records on temporary
copies of both. Runs with plain unittest (CTest: benchmarks_doc_test) or pytest.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "scripts", "bench_summary.py")
DOC = os.path.join(ROOT, "docs", "BENCHMARKS.md")
JSON = os.path.join(ROOT, "docs", "benchmarks.json")


def run(*args):
    return subprocess.run([sys.executable, SCRIPT, *args], capture_output=True, text=True)


class RealDocTest(unittest.TestCase):
    def test_doc_matches_json(self):
        r = run("--check")
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)


class RecordTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="bench_summary_test.")
        self.doc = os.path.join(self.dir, "BENCHMARKS.md")
        self.json = os.path.join(self.dir, "benchmarks.json")
        shutil.copy(DOC, self.doc)
        shutil.copy(JSON, self.json)
        self.paths = ["--json", self.json, "--doc", self.doc]

    def tearDown(self):
        shutil.rmtree(self.dir)

    def records(self):
        with open(self.json, encoding="utf-8") as f:
            return json.load(f)

    def text(self):
        with open(self.doc, encoding="utf-8") as f:
            return f.read()

    def record(self, *args):
        return run("record", *self.paths, *args)

    def test_replace_keeps_unnamed_fields_and_renders(self):
        before = self.records()
        old = next(r for r in before if r["figure"] == "remote GET, 32 pages per GET")
        r = self.record("--figure", "remote GET, 32 pages per GET", "--measured", "1.11–1.22 GB/s",
                        "--ratio", "0.79", "--date", "2026-12-24")
        self.assertEqual(r.returncode, 0, r.stderr)
        after = self.records()
        self.assertEqual(len(after), len(before))
        new = next(x for x in after if x["figure"] == "remote GET, 32 pages per GET")
        self.assertEqual(new["measured"], "1.11–1.22 GB/s")
        self.assertEqual(new["ratio"], 0.79)
        self.assertIs(new["met"], False)  # judged from ">= 0.8"
        self.assertEqual(new["command"], old["command"])
        self.assertEqual(after.index(new), before.index(old))
        self.assertIn("| 1.11–1.22 GB/s |", self.text())
        self.assertEqual(run("--check", *self.paths).returncode, 0)

    def test_add_new_figure(self):
        n = len(self.records())
        r = self.record("--figure", "remote GET, 16 pages per GET", "--measured", "2.0 GB/s",
                        "--baseline", "raw hiredis, 2.1 GB/s", "--ratio", "0.95", "--target",
                        ">= 0.8", "--command", "scripts/bench_remote.sh get --batches=16",
                        "--date", "2026-12-24", "--machine", "2-vCPU VM",
                        "--section", "Issue 15: the remote tier on Redis Cluster (runs of "
                        "2026-12-02 14:40–15:40, load 1–7)")
        self.assertEqual(r.returncode, 0, r.stderr)
        recs = self.records()
        self.assertEqual(len(recs), n + 1)
        self.assertEqual(recs[-1]["figure"], "remote GET, 16 pages per GET")
        self.assertIs(recs[-1]["met"], True)
        self.assertIn("[remote GET, 16 pages per GET](#issue-15-the-remote-tier-on-redis-cluster-"
                      "runs-of-2026-12-02-14401540-load-17)", self.text())
        self.assertEqual(run("--check", *self.paths).returncode, 0)

    def test_check_names_first_differing_row(self):
        text = self.text().replace("| 0.49–0.73 GB/s |", "| 0.50–0.73 GB/s |", 1)
        with open(self.doc, "w", encoding="utf-8") as f:
            f.write(text)
        r = run("--check", *self.paths)
        self.assertEqual(r.returncode, 1)
        self.assertIn("remote GET, 64 pages per GET", r.stderr)
        self.assertIn("0.50–0.73", r.stderr)

    def assert_refused(self, message, *args):
        doc, recs = self.text(), self.records()
        r = self.record(*args)
        self.assertEqual(r.returncode, 2, r.stdout + r.stderr)
        self.assertIn(message, r.stderr)
        self.assertEqual(self.text(), doc)
        self.assertEqual(self.records(), recs)

    def test_bad_input_is_refused_and_changes_nothing(self):
        fig = ["--figure", "remote GET, 32 pages per GET"]
        self.assert_refused("is not a number", *fig, "--ratio", "0.8x")
        self.assert_refused("is not a finite number", *fig, "--ratio", "nan")
        self.assert_refused("not an ISO date", *fig, "--date", "05/12/2026")
        self.assert_refused("not a real day", *fig, "--date", "2026-02-30")
        self.assert_refused("give yes, no or none", *fig, "--met", "maybe")
        self.assert_refused("not a bare threshold", *fig, "--target", "<= 100 µs")
        self.assert_refused("'command' is required", "--figure", "new", "--measured", "1 s",
                            "--date", "2026-12-24", "--machine", "m", "--section", "Reproduce")
        self.assert_refused("is no heading", "--figure", "new", "--measured", "1 s",
                            "--command", "c", "--date", "2026-12-24", "--machine", "m",
                            "--section", "No such section")
        self.assert_refused("has no target, so 'met' must be null", "--figure", "new",
                            "--measured", "1 s", "--command", "c", "--date", "2026-12-24",
                            "--machine", "m", "--section", "Reproduce", "--met", "yes")

    def test_bad_json_and_missing_markers(self):
        recs = self.records()
        recs[0]["ratio"] = "0.86"
        with open(self.json, "w", encoding="utf-8") as f:
            json.dump(recs, f)
        r = run("--check", *self.paths)
        self.assertEqual(r.returncode, 2)
        self.assertIn("record 1: 'ratio' must be a number", r.stderr)
        shutil.copy(JSON, self.json)
        with open(self.doc, "w", encoding="utf-8") as f:
            f.write(self.text().replace("<!-- current:end -->\n", ""))
        r = run("--check", *self.paths)
        self.assertEqual(r.returncode, 2)
        self.assertIn("needs the lines", r.stderr)


if __name__ == "__main__":
    unittest.main()
