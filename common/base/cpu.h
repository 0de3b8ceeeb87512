/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cpu.h -- the instruction-set level wsync's vector loops run at.
 *
 * One answer for every module with such loops (the float and dense
 * coders, the hasher), asked at run time: a program built for baseline
 * x86-64 takes the AVX2 or AVX-512 loops on a machine that has them, and
 * WSYNC_CODEC_ISA caps all of them alike, so the tests can run the other
 * loops on a machine that has the best.
 */
#ifndef WSYNC_CPU_H
#define WSYNC_CPU_H

enum wsync_cpu_level {
	WSYNC_CPU_PLAIN = 0,	/* portable C (on x86-64: its baseline, SSE2) */
	WSYNC_CPU_AVX2 = 1,	/* x86-64 with AVX2, POPCNT, BMI1 and BMI2 */
	WSYNC_CPU_AVX512 = 2,	/* and GFNI, AVX-512 F, VL, BW, BITALG, VBMI */
};

/*
 * The best level this CPU runs, capped by the environment variable
 * WSYNC_CODEC_ISA ("plain" or "avx2"; other values are ignored).  Worked
 * out on the first call and cached: cheap, thread-safe, and the same for
 * the whole life of the process.  Always WSYNC_CPU_PLAIN off x86-64.
 */
enum wsync_cpu_level wsync_cpu_level(void);

#endif
