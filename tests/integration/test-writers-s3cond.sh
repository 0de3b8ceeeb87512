#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# test-writers-s3cond: test-writers.sh (one writer per bucket) on an S3
# server that honours conditional writes (hostile-s3.py, no lies).
WSYNC_WRITERS_BACKEND=s3cond exec bash "$(dirname "$0")/test-writers.sh"
