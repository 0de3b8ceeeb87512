/* SPDX-License-Identifier: Apache-2.0 */
/* test_hooks.c -- the test seam read from the environment (test_hooks.h). */
#include <stdlib.h>

#include "test_hooks.h"

static unsigned pause_ms(const char *name)
{
	const char *v = getenv(name);

	return v ? (unsigned)(strtoul(v, NULL, 10) % 60000) : 0;
}

void wsync_test_hooks_from_env(struct wsync_test_hooks *t)
{
	*t = (struct wsync_test_hooks){
		.snapshot_pause_ms = pause_ms("WSYNC_TEST_SNAPSHOT_PAUSE_MS"),
		.chunk_pause_ms = pause_ms("WSYNC_TEST_CHUNK_PAUSE_MS"),
		.commit_pause_ms = pause_ms("WSYNC_TEST_COMMIT_PAUSE_MS"),
		.apply_pause_ms = pause_ms("WSYNC_TEST_APPLY_PAUSE_MS"),
		.segment_kib = pause_ms("WSYNC_TEST_SEGMENT_KIB"),
		.no_index = getenv("WSYNC_TEST_NO_INDEX") != NULL,
	};
}
