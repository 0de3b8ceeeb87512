#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# test-parts-s3: test-parts.sh's scenarios -- publisher parts, one
# version -- on a real S3 server (s3rver) instead of a file:// bucket
# (the tampered record aside: that one edits the bucket's files).
WSYNC_PARTS_BACKEND=s3 exec bash "$(dirname "$0")/test-parts.sh"
