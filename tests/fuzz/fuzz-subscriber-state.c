/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuzz-subscriber-state: the input is a subscriber's target/.wsync/
 * state.json (sub_local_parse, daemon/subscriber/subscriber_local.h).
 * Whoever can write the target could have put anything there, so: parsing
 * never crashes or leaks; a refused input leaves nothing in out; an accepted
 * one has a version in range and only paths that stay inside the target;
 * and an error message is one of the parser's own sentences -- it never
 * quotes the input (the file may be anything a link pointed at).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "path.h"
#include "subscriber_local.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* What may follow "state.json: " in a refusal (subscriber_state.c). */
static const char *const said[] = {
	"not valid JSON (line ", "not a wsync subscriber state (version 1)",
	"bad version, step or manifest_xxh128", "no files list", "files[",
};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct sub_local s;
	struct wsync_error err = { 0 };
	int r = sub_local_parse((const char *)data, size, "state.json", &s, &err);

	if (r < 0) {
		const char *m = err.msg;
		size_t i;

		if (s.version || s.files || s.n_files)
			abort();
		if (r == -ENOMEM)
			return 0;
		if (r != -EINVAL || strncmp(m, "state.json: ", 12) != 0)
			abort();
		for (i = 0; i < sizeof(said) / sizeof(said[0]); i++)
			if (strncmp(m + 12, said[i], strlen(said[i])) == 0)
				break;
		if (i == sizeof(said) / sizeof(said[0]))
			abort();
		return 0;
	}
	if (s.version == 0 || s.version > WSYNC_MANIFEST_VERSION_MAX)
		abort();
	for (size_t i = 0; i < s.n_files; i++) {
		struct wsync_error perr = { 0 };

		if (!s.files[i].path ||
		    wsync_path_check(s.files[i].path, strlen(s.files[i].path), &perr) < 0)
			abort();
	}
	sub_local_free(&s);
	return 0;
}
