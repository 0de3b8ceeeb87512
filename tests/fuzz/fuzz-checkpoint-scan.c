/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuzz-checkpoint-scan: what the publisher's scan reads from a folder a
 * trainer (or anyone who can write it) fills.  The first byte picks:
 *
 *   'T'   the rest is a trainer_state.json (ckscan_parse_global_step)
 *   else  the next 8 bytes are a file's size (little-endian), the rest
 *         the first bytes of that safetensors file: the completeness
 *         judgement of ckcomplete_judge_header, whole / short / malformed
 *
 * Never a crash, a leak or a read past the input; the judgement's answer
 * is one of its four, and "whole" means the header describes exactly
 * that size.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint_complete.h"
#include "checkpoint_scan.h"
#include "safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct wsync_st_header *h = NULL;
	struct wsync_error err = { 0 };
	uint64_t file_size = 0;
	int64_t step = 0;
	uint8_t *copy;
	int r;

	if (size < 1)
		return 0;
	if (data[0] == 'T') {
		r = ckscan_parse_global_step((const char *)data + 1, size - 1, &step);
		if (r != 0 && r != -EINVAL && r != -EFBIG)
			abort();
		return 0;
	}
	if (size < 9)
		return 0;
	for (int i = 0; i < 8; i++)
		file_size |= (uint64_t)data[1 + i] << (8 * i);
	/* a copy of exactly the bytes given: ASan sees any read past them */
	copy = malloc(size - 9 ? size - 9 : 1);
	if (!copy)
		return 0;
	memcpy(copy, data + 9, size - 9);
	r = ckcomplete_judge_header(copy, size - 9, file_size, "m.safetensors", &h, &err);
	if (r == 1) {
		if (!h || h->data_offset + h->data_size != file_size)
			abort();
		wsync_st_header_free(h);
	} else if ((r != 0 && r != -EINVAL && r != -ENOMEM) || h) {
		abort();
	}
	free(copy);
	return 0;
}
