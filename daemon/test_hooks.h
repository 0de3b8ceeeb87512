/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_hooks.h -- the one seam through which the test suite reaches into
 * the daemon: pauses that widen a window a test needs to act inside (a
 * checkpoint deleted between scan and snapshot, a kill -9 between HEAD
 * and the base swap, a reader looking at the target while a step is
 * applied) and a bucket written as an older release wrote it.
 *
 * The runner (manager.c, tool_oneshot.c) fills struct wsync_daemon's
 * `test` once from the environment; roles read only that struct, never
 * the environment, so production paths hold no getenv() and an
 * in-process test (tests/unit/test-publisher.c) sets the fields directly.
 * Unset, every field is zero and nothing changes.
 */
#ifndef WSYNC_TEST_HOOKS_H
#define WSYNC_TEST_HOOKS_H

#include <stdbool.h>

struct wsync_test_hooks {
	unsigned snapshot_pause_ms;	/* WSYNC_TEST_SNAPSHOT_PAUSE_MS: publisher,
					 * between the scan and the snapshot */
	unsigned chunk_pause_ms;	/* WSYNC_TEST_CHUNK_PAUSE_MS: publisher,
					 * after each chunk the encoder cuts */
	unsigned commit_pause_ms;	/* WSYNC_TEST_COMMIT_PAUSE_MS: publisher,
					 * between HEAD and the base swap */
	unsigned apply_pause_ms;	/* WSYNC_TEST_APPLY_PAUSE_MS: subscriber,
					 * before a step's files are written */
	unsigned segment_kib;		/* WSYNC_TEST_SEGMENT_KIB: publisher, segments
					 * of at most this many KiB of target (a
					 * small checkpoint's file in many records) */
	bool no_index;			/* WSYNC_TEST_NO_INDEX: manifests without
					 * the objects' indexes (an older bucket) */
};

/* Fill t from the environment (each pause capped at one minute). */
void wsync_test_hooks_from_env(struct wsync_test_hooks *t);

#endif
