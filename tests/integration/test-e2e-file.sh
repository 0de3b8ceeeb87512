#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# test-e2e-file.sh -- test-e2e.sh on the file:// bucket only (see there).
exec bash "$(dirname "$0")/test-e2e.sh" file
