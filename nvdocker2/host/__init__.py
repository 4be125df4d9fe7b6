"""The doors to the host: `run` (every program nvdocker2 runs), `files` (every file and
directory it makes) and `load` (all code it loads other than by `import`: libc's own
functions, a module of its own read from its file). Nothing else in nvdocker2 starts a
process, creates a path or loads code; the test tests/unit/host/test_doors.py holds that line."""
