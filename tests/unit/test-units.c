/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test-units.c -- the typed value parsers of common/base/units.h: what they
 * accept, what they refuse (with -EINVAL or -ERANGE), and that nothing
 * overflows silently.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>

#include "tap.h"
#include "units.h"

#define KiB (1ULL << 10)
#define MiB (1ULL << 20)
#define GiB (1ULL << 30)
#define TiB (1ULL << 40)

/* The parsed value, or 0xdeadbeef when parsing fails. */
static uint64_t sz(const char *s)
{
	uint64_t v = 0;

	return wsync_parse_size(s, &v) == 0 ? v : UINT64_C(0xdeadbeef);
}

static uint64_t ms(const char *s)
{
	uint64_t v = 0;

	return wsync_parse_duration_ms(s, &v) == 0 ? v : UINT64_C(0xdeadbeef);
}

static int size_rc(const char *s)
{
	uint64_t v;

	return wsync_parse_size(s, &v);
}

static int duration_rc(const char *s)
{
	uint64_t v;

	return wsync_parse_duration_ms(s, &v);
}

/* Plain numbers, binary and decimal units, the optional single space. */
static void test_size_accepts_units(void)
{
	CHECK_EQ_U64(sz("0"), 0);
	CHECK_EQ_U64(sz("4096"), 4096);
	CHECK_EQ_U64(sz("4096B"), 4096);
	CHECK_EQ_U64(sz("64KiB"), 64 * KiB);
	CHECK_EQ_U64(sz("64MiB"), 64 * MiB);
	CHECK_EQ_U64(sz("1GiB"), GiB);
	CHECK_EQ_U64(sz("1 GiB"), GiB);
	CHECK_EQ_U64(sz("2TiB"), 2 * TiB);
	CHECK_EQ_U64(sz("64kB"), 64000);
	CHECK_EQ_U64(sz("64KB"), 64000);
	CHECK_EQ_U64(sz("64MB"), 64000000);
	CHECK_EQ_U64(sz("1GB"), 1000000000);
	CHECK_EQ_U64(sz("2TB"), 2000000000000ULL);
}

/* Signs, fractions, trailing garbage, wrong case and stray spaces. */
static void test_size_rejects_garbage(void)
{
	CHECK(size_rc("-1") == -EINVAL);
	CHECK(size_rc("12abc") == -EINVAL);
	CHECK(size_rc("") == -EINVAL);
	CHECK(size_rc(NULL) == -EINVAL);
	CHECK(size_rc("MiB") == -EINVAL);
	CHECK(size_rc(" 1MiB") == -EINVAL);
	CHECK(size_rc("1  MiB") == -EINVAL);
	CHECK(size_rc("1.5GiB") == -EINVAL);
	CHECK(size_rc("1mib") == -EINVAL);
	CHECK(size_rc("1PiB") == -EINVAL);
	CHECK(size_rc("+1") == -EINVAL);
	CHECK(size_rc("0x10") == -EINVAL);
}

/* The largest value is fine; one more, or a unit that pushes past 2^64,
 * is -ERANGE rather than a wrapped number. */
static void test_size_overflow(void)
{
	CHECK_EQ_U64(sz("18446744073709551615"), UINT64_MAX);
	CHECK(size_rc("18446744073709551616") == -ERANGE);
	CHECK(size_rc("99999999999999999999999") == -ERANGE);
	CHECK_EQ_U64(sz("17179869183GiB"), 17179869183ULL * GiB);
	CHECK(size_rc("17179869184GiB") == -ERANGE);
	CHECK(size_rc("16777216TiB") == -ERANGE);
	CHECK(size_rc("18446744073709551615KiB") == -ERANGE);
}

static void test_uint(void)
{
	uint64_t v = 0;

	CHECK(wsync_parse_uint("0", &v) == 0 && v == 0);
	CHECK(wsync_parse_uint("42", &v) == 0 && v == 42);
	CHECK(wsync_parse_uint("4294967296", &v) == 0 && v == 4294967296ULL);
	CHECK(wsync_parse_uint("1k", &v) == -EINVAL);
	CHECK(wsync_parse_uint("-3", &v) == -EINVAL);
	CHECK(wsync_parse_uint("", &v) == -EINVAL);
	CHECK(wsync_parse_uint("18446744073709551616", &v) == -ERANGE);
}

/* Every unit, and a bare number meaning seconds as in systemd. */
static void test_duration_units(void)
{
	CHECK_EQ_U64(ms("500ms"), 500);
	CHECK_EQ_U64(ms("2s"), 2000);
	CHECK_EQ_U64(ms("2"), 2000);
	CHECK_EQ_U64(ms("0"), 0);
	CHECK_EQ_U64(ms("5min"), 300000);
	CHECK_EQ_U64(ms("1h"), 3600000);
	CHECK_EQ_U64(ms("1d"), 86400000);
	CHECK_EQ_U64(ms("1 s"), 1000);
	CHECK_EQ_U64(ms("100ms"), 100);
}

static void test_duration_rejects(void)
{
	CHECK(duration_rc("-1s") == -EINVAL);
	CHECK(duration_rc("2x") == -EINVAL);
	CHECK(duration_rc("1m") == -EINVAL);	/* minutes or months? refused */
	CHECK(duration_rc("1.5s") == -EINVAL);
	CHECK(duration_rc("s") == -EINVAL);
	CHECK(duration_rc("") == -EINVAL);
	CHECK(duration_rc("1S") == -EINVAL);
	CHECK(duration_rc("18446744073709551615d") == -ERANGE);
	CHECK(duration_rc("18446744073709551615") == -ERANGE);	/* seconds */
	CHECK_EQ_U64(ms("18446744073709551615ms"), UINT64_MAX);
}

static void test_bool(void)
{
	static const char *const yes[] = { "yes", "YES", "true", "True", "on", "1" };
	static const char *const no[] = { "no", "No", "false", "FALSE", "off", "0" };
	static const char *const bad[] = { "", "maybe", "yess", "2", "y", "n", " yes" };
	bool b;

	for (size_t i = 0; i < sizeof(yes) / sizeof(yes[0]); i++) {
		b = false;
		CHECK(wsync_parse_bool(yes[i], &b) == 0 && b);
	}
	for (size_t i = 0; i < sizeof(no) / sizeof(no[0]); i++) {
		b = true;
		CHECK(wsync_parse_bool(no[i], &b) == 0 && !b);
	}
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		CHECK(wsync_parse_bool(bad[i], &b) == -EINVAL);
	CHECK(wsync_parse_bool(NULL, &b) == -EINVAL);
}

static void test_format_bytes(void)
{
	char buf[32];

	CHECK_STR(wsync_format_bytes(buf, sizeof(buf), 0), "0 B");
	CHECK_STR(wsync_format_bytes(buf, sizeof(buf), 1023), "1023 B");
	CHECK_STR(wsync_format_bytes(buf, sizeof(buf), 1536), "1.5 KiB");
	CHECK_STR(wsync_format_bytes(buf, sizeof(buf), 64 * MiB), "64.0 MiB");
	CHECK_STR(wsync_format_bytes(buf, sizeof(buf), 3 * GiB / 2), "1.5 GiB");
}

/* RFC 3339 UTC, the one formatter of status.json's and the manifests'
 * times: leap days, the ends of the range, "?" outside it or when the
 * buffer is short. */
static void test_format_time(void)
{
	char buf[32], small[20];

	CHECK(wsync_format_time(buf, sizeof(buf), 0));
	CHECK_STR(buf, "1970-01-01T00:00:00Z");
	CHECK(wsync_format_time(buf, sizeof(buf), 1796416908));
	CHECK_STR(buf, "2026-12-04T20:41:48Z");
	CHECK(wsync_format_time(buf, sizeof(buf), 951825599));
	CHECK_STR(buf, "2000-02-29T11:59:59Z");
	CHECK(wsync_format_time(buf, sizeof(buf), WSYNC_TIME_MAX));
	CHECK_STR(buf, "9999-12-31T23:59:59Z");
	CHECK(!wsync_format_time(buf, sizeof(buf), WSYNC_TIME_MAX + 1));
	CHECK_STR(buf, "?");
	CHECK(!wsync_format_time(buf, sizeof(buf), -1));
	CHECK_STR(buf, "?");
	CHECK(!wsync_format_time(small, sizeof(small), 0));
	CHECK_STR(small, "?");
}

int main(void)
{
	TEST(test_size_accepts_units);
	TEST(test_size_rejects_garbage);
	TEST(test_size_overflow);
	TEST(test_uint);
	TEST(test_duration_units);
	TEST(test_duration_rejects);
	TEST(test_bool);
	TEST(test_format_bytes);
	TEST(test_format_time);
	return tap_done();
}
