#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# test-writers-s3: test-writers.sh (one writer per bucket) on s3rver, a
# server that ignores conditional writes: the lease alone fences it.
WSYNC_WRITERS_BACKEND=s3 exec bash "$(dirname "$0")/test-writers.sh"
