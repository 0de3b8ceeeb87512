/* SPDX-License-Identifier: Apache-2.0 */
#include "dtype.h"

#include <errno.h>
#include <string.h>

static const struct {
	const char *name;
	unsigned bits;
	bool is_float;
} dtypes[WSYNC_DTYPE_COUNT_] = {
	[WSYNC_DTYPE_BOOL] = { "BOOL", 8, false },
	[WSYNC_DTYPE_F4] = { "F4", 4, true },
	[WSYNC_DTYPE_F6_E2M3] = { "F6_E2M3", 6, true },
	[WSYNC_DTYPE_F6_E3M2] = { "F6_E3M2", 6, true },
	[WSYNC_DTYPE_U8] = { "U8", 8, false },
	[WSYNC_DTYPE_I8] = { "I8", 8, false },
	[WSYNC_DTYPE_F8_E5M2] = { "F8_E5M2", 8, true },
	[WSYNC_DTYPE_F8_E4M3] = { "F8_E4M3", 8, true },
	[WSYNC_DTYPE_F8_E8M0] = { "F8_E8M0", 8, true },
	[WSYNC_DTYPE_I16] = { "I16", 16, false },
	[WSYNC_DTYPE_U16] = { "U16", 16, false },
	[WSYNC_DTYPE_F16] = { "F16", 16, true },
	[WSYNC_DTYPE_BF16] = { "BF16", 16, true },
	[WSYNC_DTYPE_I32] = { "I32", 32, false },
	[WSYNC_DTYPE_U32] = { "U32", 32, false },
	[WSYNC_DTYPE_F32] = { "F32", 32, true },
	[WSYNC_DTYPE_C64] = { "C64", 64, false },
	[WSYNC_DTYPE_F64] = { "F64", 64, true },
	[WSYNC_DTYPE_I64] = { "I64", 64, false },
	[WSYNC_DTYPE_U64] = { "U64", 64, false },
};

const char *wsync_dtype_name(enum wsync_dtype t)
{
	if ((unsigned)t >= WSYNC_DTYPE_COUNT_)
		return "?";
	return dtypes[t].name;
}

int wsync_dtype_from_name(const char *name, size_t len, enum wsync_dtype *ret)
{
	for (unsigned i = 0; i < WSYNC_DTYPE_COUNT_; i++) {
		if (strlen(dtypes[i].name) == len &&
		    memcmp(dtypes[i].name, name, len) == 0) {
			*ret = (enum wsync_dtype)i;
			return 0;
		}
	}
	return -EINVAL;
}

unsigned wsync_dtype_bits(enum wsync_dtype t)
{
	if ((unsigned)t >= WSYNC_DTYPE_COUNT_)
		return 0;
	return dtypes[t].bits;
}

bool wsync_dtype_is_float(enum wsync_dtype t)
{
	return (unsigned)t < WSYNC_DTYPE_COUNT_ && dtypes[t].is_float;
}

int wsync_dtype_size(enum wsync_dtype t, uint64_t nelem, uint64_t *ret)
{
	unsigned bits = wsync_dtype_bits(t);
	uint64_t total;

	if (bits == 0)
		return -EINVAL;
	if (bits % 8 == 0) {
		if (nelem > UINT64_MAX / (bits / 8))
			return -EOVERFLOW;
		*ret = nelem * (bits / 8);
		return 0;
	}
	if (nelem > UINT64_MAX / bits)
		return -EOVERFLOW;
	total = nelem * bits;
	if (total % 8)
		return -EINVAL;
	*ret = total / 8;
	return 0;
}
