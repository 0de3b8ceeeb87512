/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tap.h -- a tiny TAP producer for the unit tests (meson runs them with
 * protocol: 'tap', so every test case below counts on its own).
 *
 *   static void test_parse_size(void) { CHECK(x == 3); CHECK_EQ_U64(a, b); }
 *   int main(void) { TEST(test_parse_size); return tap_done(); }
 *
 * A case fails if any CHECK in it fails; the failing expression, file and
 * line are printed as TAP diagnostics.  Header-only on purpose: each test
 * binary includes it once.
 */
#ifndef WSYNC_TAP_H
#define WSYNC_TAP_H

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

static int tap_n, tap_failed_cases, tap_case_failed;
static const char *tap_skip_reason;

/* Inside a case: mark it skipped (with a reason TAP shows) and return. */
#define SKIP(reason)                                                         \
	do {                                                                 \
		tap_skip_reason = (reason);                                  \
		return;                                                      \
	} while (0)

#define CHECK(expr)                                                          \
	do {                                                                 \
		if (!(expr)) {                                               \
			tap_case_failed = 1;                                 \
			printf("# %s:%d: CHECK(%s) failed\n", __FILE__,      \
			       __LINE__, #expr);                             \
		}                                                            \
	} while (0)

#define CHECK_EQ_U64(a, b)                                                   \
	do {                                                                 \
		uint64_t tap_a_ = (uint64_t)(a), tap_b_ = (uint64_t)(b);     \
		if (tap_a_ != tap_b_) {                                      \
			tap_case_failed = 1;                                 \
			printf("# %s:%d: %s == %" PRIu64 ", expected %s == %" \
			       PRIu64 "\n", __FILE__, __LINE__, #a, tap_a_,  \
			       #b, tap_b_);                                  \
		}                                                            \
	} while (0)

#define CHECK_STR(a, b)                                                      \
	do {                                                                 \
		const char *tap_a_ = (a), *tap_b_ = (b);                     \
		if (!tap_a_ || !tap_b_ || strcmp(tap_a_, tap_b_) != 0) {     \
			tap_case_failed = 1;                                 \
			printf("# %s:%d: %s is \"%s\", expected \"%s\"\n",  \
			       __FILE__, __LINE__, #a,                       \
			       tap_a_ ? tap_a_ : "(null)",                   \
			       tap_b_ ? tap_b_ : "(null)");                  \
		}                                                            \
	} while (0)

/* Does haystack contain needle? */
#define CHECK_CONTAINS(haystack, needle)                                     \
	do {                                                                 \
		const char *tap_h_ = (haystack), *tap_n_ = (needle);         \
		if (!tap_h_ || !strstr(tap_h_, tap_n_)) {                    \
			tap_case_failed = 1;                                 \
			printf("# %s:%d: \"%s\" does not contain \"%s\"\n", \
			       __FILE__, __LINE__,                           \
			       tap_h_ ? tap_h_ : "(null)", tap_n_);          \
		}                                                            \
	} while (0)

#define TEST(fn)                                                             \
	do {                                                                 \
		tap_case_failed = 0;                                         \
		tap_skip_reason = NULL;                                      \
		fn();                                                        \
		tap_n++;                                                     \
		printf("%s %d - %s%s%s\n", tap_case_failed ? "not ok" : "ok",\
		       tap_n, #fn, tap_skip_reason ? " # SKIP " : "",        \
		       tap_skip_reason ? tap_skip_reason : "");              \
		fflush(stdout);                                              \
		tap_failed_cases += tap_case_failed;                         \
	} while (0)

static inline int tap_done(void)
{
	printf("1..%d\n", tap_n);
	return tap_failed_cases ? 1 : 0;
}

#endif
