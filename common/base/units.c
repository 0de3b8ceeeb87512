/* SPDX-License-Identifier: Apache-2.0 */
#include "units.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

struct unit {
	const char *suffix;
	uint64_t factor;
};

/* Parse the leading decimal digits of s into *ret; *end points past them. */
static int parse_digits(const char *s, uint64_t *ret, const char **end)
{
	uint64_t v = 0;
	const char *p = s;

	if (*p < '0' || *p > '9')
		return -EINVAL;
	for (; *p >= '0' && *p <= '9'; p++) {
		unsigned d = (unsigned)(*p - '0');
		if (v > (UINT64_MAX - d) / 10)
			return -ERANGE;
		v = v * 10 + d;
	}
	*ret = v;
	*end = p;
	return 0;
}

/* A number followed by one of the units in table (an empty suffix entry
 * gives the factor for a bare number). */
static int parse_with_units(const char *s, const struct unit *table,
			    size_t n, uint64_t *ret)
{
	const char *end;
	uint64_t v;
	int r;

	if (!s)
		return -EINVAL;
	r = parse_digits(s, &v, &end);
	if (r < 0)
		return r;
	if (*end == ' ')
		end++;
	for (size_t i = 0; i < n; i++) {
		if (strcmp(end, table[i].suffix) != 0)
			continue;
		if (table[i].factor && v > UINT64_MAX / table[i].factor)
			return -ERANGE;
		*ret = v * table[i].factor;
		return 0;
	}
	return -EINVAL;
}

int wsync_parse_uint(const char *s, uint64_t *ret)
{
	static const struct unit none[] = { { "", 1 } };

	return parse_with_units(s, none, 1, ret);
}

int wsync_parse_size(const char *s, uint64_t *ret)
{
	static const struct unit sizes[] = {
		{ "", 1 },		{ "B", 1 },
		{ "KiB", 1ULL << 10 },	{ "MiB", 1ULL << 20 },
		{ "GiB", 1ULL << 30 },	{ "TiB", 1ULL << 40 },
		{ "kB", 1000ULL },	{ "KB", 1000ULL },
		{ "MB", 1000000ULL },	{ "GB", 1000000000ULL },
		{ "TB", 1000000000000ULL },
	};

	return parse_with_units(s, sizes, sizeof(sizes) / sizeof(sizes[0]), ret);
}

int wsync_parse_duration_ms(const char *s, uint64_t *ret)
{
	static const struct unit durations[] = {
		{ "", 1000 },	{ "ms", 1 },	   { "s", 1000 },
		{ "min", 60000 }, { "h", 3600000 }, { "d", 86400000 },
	};

	return parse_with_units(s, durations,
				sizeof(durations) / sizeof(durations[0]), ret);
}

int wsync_parse_bool(const char *s, bool *ret)
{
	static const char *const yes[] = { "yes", "true", "on", "1" };
	static const char *const no[] = { "no", "false", "off", "0" };

	if (!s)
		return -EINVAL;
	for (size_t i = 0; i < 4; i++) {
		if (strcasecmp(s, yes[i]) == 0) {
			*ret = true;
			return 0;
		}
		if (strcasecmp(s, no[i]) == 0) {
			*ret = false;
			return 0;
		}
	}
	return -EINVAL;
}

const char *wsync_format_bytes(char *buf, size_t len, uint64_t bytes)
{
	static const char *const names[] = { "B", "KiB", "MiB", "GiB", "TiB", "PiB" };
	double v = (double)bytes;
	size_t i = 0;

	while (v >= 1024.0 && i + 1 < sizeof(names) / sizeof(names[0])) {
		v /= 1024.0;
		i++;
	}
	if (i == 0)
		snprintf(buf, len, "%llu B", (unsigned long long)bytes);
	else
		snprintf(buf, len, "%.1f %s", v, names[i]);
	return buf;
}

/* The proleptic Gregorian date of day z since 1970-01-01 (H. Hinnant's
 * civil_from_days: arithmetic only, any 64-bit day). */
static void civil_from_days(int64_t z, int64_t *y, int *m, int *d)
{
	int64_t era, doe, yoe, doy, mp;

	z += 719468;
	era = (z >= 0 ? z : z - 146096) / 146097;
	doe = z - era * 146097;
	yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
	doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
	mp = (5 * doy + 2) / 153;
	*d = (int)(doy - (153 * mp + 2) / 5 + 1);
	*m = (int)(mp < 10 ? mp + 3 : mp - 9);
	*y = yoe + era * 400 + (*m <= 2);
}

bool wsync_format_time(char *buf, size_t len, int64_t t)
{
	int64_t y;
	int m, d, n = -1;

	if (t >= 0 && t <= WSYNC_TIME_MAX) {
		civil_from_days(t / 86400, &y, &m, &d);
		n = snprintf(buf, len, "%04" PRId64 "-%02d-%02dT%02d:%02d:%02dZ", y, m, d,
			     (int)(t % 86400 / 3600), (int)(t % 3600 / 60), (int)(t % 60));
	}
	if (n < 0 || (size_t)n >= len) {
		if (len)
			(void)snprintf(buf, len, "?");
		return false;
	}
	return true;
}
