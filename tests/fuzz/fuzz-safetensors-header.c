/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuzz-safetensors-header: the whole input is a safetensors file image.
 * Parsing must never crash, leak, overflow or allocate without bound; when
 * it accepts, every invariant the callers rely on must hold.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct wsync_st_header *h = NULL;
	struct wsync_error err;
	uint64_t need = 0, pos = 0;

	if (wsync_st_parse_header(data, size, size, &h, &need, &err) < 0) {
		if (h)
			abort(); /* failure must not hand out a header */
		return 0;
	}
	/* Accepted: tensors tile the data section in order and are findable. */
	if (h->data_offset + h->data_size != size)
		abort();
	for (size_t i = 0; i < h->n_tensors; i++) {
		const struct wsync_st_tensor *t = &h->tensors[i];

		if (t->begin != pos || t->end < t->begin || t->end > h->data_size ||
		    t->size != t->end - t->begin ||
		    t->offset != h->data_offset + t->begin)
			abort();
		if (wsync_st_find(h, t->name) == NULL)
			abort();
		pos = t->end;
		if (t->size) /* touch the first and last byte of the tensor */
			(void)(volatile uint8_t)(data[t->offset] + data[t->offset + t->size - 1]);
	}
	if (pos != h->data_size)
		abort();
	for (size_t i = 0; i < h->n_meta; i++)
		if (wsync_st_meta_get(h, h->meta[i].key) != h->meta[i].value)
			abort();
	wsync_st_header_free(h);
	return 0;
}
