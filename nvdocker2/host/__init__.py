"""The doors to the host: `run` (every program nvdocker2 runs) and `files` (every file and
directory it makes). Nothing else in nvdocker2 starts a process or creates a path; the test
tests/unit/test_doors.py holds that line."""
