/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuzz-safetensors-index: the input is a model.safetensors.index.json.
 * Parsing must never crash or leak; an accepted index names only shards
 * that stay inside the checkpoint directory.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct wsync_st_index *idx = NULL;
	struct wsync_error err;

	if (wsync_st_index_parse((const char *)data, size, &idx, &err) < 0) {
		if (idx)
			abort();
		return 0;
	}
	for (size_t i = 0; i < idx->n_shards; i++) {
		const char *s = idx->shards[i];

		size_t l = strlen(s);

		if (s[0] == '/' || strcmp(s, "..") == 0 || strncmp(s, "../", 3) == 0 ||
		    strstr(s, "/../") || (l >= 3 && strcmp(s + l - 3, "/..") == 0) ||
		    strchr(s, '\\'))
			abort();
	}
	for (size_t i = 0; i < idx->n; i++)
		if (wsync_st_index_shard(idx, idx->entries[i].tensor) == NULL)
			abort();
	wsync_st_index_free(idx);
	return 0;
}
