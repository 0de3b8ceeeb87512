/* SPDX-License-Identifier: Apache-2.0 */
/*
 * rng.h -- the unit tests' pseudo-random numbers: Marsaglia's xorshift64,
 * a fixed seed per test, so every run sees the same data.
 */
#ifndef WSYNC_TEST_RNG_H
#define WSYNC_TEST_RNG_H

#include <stdint.h>

/* The next number of the sequence held in *state (never 0). */
static inline uint64_t xorshift64(uint64_t *state)
{
	*state ^= *state << 13;
	*state ^= *state >> 7;
	*state ^= *state << 17;
	return *state;
}

#endif
