/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cpu.c -- see cpu.h.
 */
#include "cpu.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) && defined(__GNUC__)
enum wsync_cpu_level wsync_cpu_level(void)
{
	/* every thread computes the same; atomic, so that two doing it at
	 * once (the diff's workers starting together) is no data race */
	static _Atomic int cached = -1;
	int c = cached;

	if (c < 0) {
		const char *cap = getenv("WSYNC_CODEC_ISA");
		int level = WSYNC_CPU_PLAIN;

		if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("popcnt") &&
		    __builtin_cpu_supports("bmi") && __builtin_cpu_supports("bmi2"))
			level = WSYNC_CPU_AVX2;
		if (level == WSYNC_CPU_AVX2 && __builtin_cpu_supports("gfni") &&
		    __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
		    __builtin_cpu_supports("avx512bw") &&
		    __builtin_cpu_supports("avx512bitalg") &&
		    __builtin_cpu_supports("avx512vbmi"))
			level = WSYNC_CPU_AVX512;
		if (cap && strcmp(cap, "plain") == 0)
			level = WSYNC_CPU_PLAIN;
		else if (cap && strcmp(cap, "avx2") == 0 && level > WSYNC_CPU_AVX2)
			level = WSYNC_CPU_AVX2;
		cached = c = level;
	}
	return (enum wsync_cpu_level)c;
}
#else
enum wsync_cpu_level wsync_cpu_level(void)
{
	return WSYNC_CPU_PLAIN;
}
#endif
