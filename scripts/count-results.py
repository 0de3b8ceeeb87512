#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Count test cases from meson's testlog.json files.

Every TAP line ("ok N", "not ok N", "# SKIP") counts as one case, so a unit
test binary with 11 cases counts 11.  A test that failed without printing
any "not ok" (a crash, a timeout, a missing plan) counts as one failure.
Prints "PASSED FAILED SKIPPED" and, on stderr, the name of each failure.
"""
import json
import re
import sys

TAP = re.compile(r'^(not ok|ok)\b(.*)$')
passed = failed = skipped = 0
for path in sys.argv[1:]:
    with open(path) as f:
        for line in f:
            if not line.strip():
                continue
            t = json.loads(line)
            out = t.get('stdout') or t.get('stdo') or ''
            p = fl = s = 0
            for l in out.splitlines():
                m = TAP.match(l)
                if not m:
                    continue
                if m.group(1) == 'not ok':
                    fl += 1
                    print(f"FAILED: {t['name']}: {l}", file=sys.stderr)
                elif '# SKIP' in m.group(2):
                    s += 1
                else:
                    p += 1
            bad = t['result'] not in ('OK', 'SKIP', 'EXPECTEDFAIL')
            if bad and fl == 0:
                fl = 1
                print(f"FAILED: {t['name']}: {t['result']}", file=sys.stderr)
            if p + fl + s == 0:
                if t['result'] == 'SKIP':
                    s = 1
                else:
                    p = 1
            passed, failed, skipped = passed + p, failed + fl, skipped + s
print(passed, failed, skipped)
