# TEST FIXTURE: an Ansible callback that appends every task result and the final per-host
# stats to the JSON-lines file named by NVD2_ANSIBLE_RECORD, so the fleet tests can assert what
# each host reported. Used only by tests/e2e/test_ansible_fleet.py; never shipped.
from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = """
name: record
type: aggregate
short_description: TEST FIXTURE; writes task results as JSON lines
description: Writes task results and stats to the file named by NVD2_ANSIBLE_RECORD.
"""

import json
import os

from ansible.plugins.callback import CallbackBase


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "record"
    CALLBACK_NEEDS_ENABLED = True

    def _write(self, obj):
        with open(os.environ["NVD2_ANSIBLE_RECORD"], "a") as f:
            f.write(json.dumps(obj, default=str) + "\n")

    def _result(self, status, result):
        self._write({
            "host": result._host.get_name(),
            "task": result._task.get_name(),
            "status": status,
            "result": result._result,
        })

    def v2_runner_on_ok(self, result):
        self._result("ok", result)

    def v2_runner_on_failed(self, result, ignore_errors=False):
        self._result("failed", result)

    def v2_runner_on_skipped(self, result):
        self._result("skipped", result)

    def v2_runner_on_unreachable(self, result):
        self._result("unreachable", result)

    def v2_playbook_on_stats(self, stats):
        hosts = sorted(stats.processed.keys())
        self._write({"stats": {h: stats.summarize(h) for h in hosts}})
