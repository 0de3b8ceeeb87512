#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# test-e2e-s3.sh -- test-e2e.sh on the s3rver bucket only (see there).
exec bash "$(dirname "$0")/test-e2e.sh" s3
