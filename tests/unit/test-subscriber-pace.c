/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test-subscriber-pace: building ahead's decision to wait for the disk
 * and the CPUs (daemon/subscriber/subscriber_pace.h), a pure function of
 * two samples of /proc/pressure/io's and /proc/pressure/cpu's "some"
 * totals, and the parse of those files.
 */
#include <errno.h>
#include <stdint.h>
#include <string.h>

#include "subscriber_pace.h"
#include "tap.h"

/* a window of ms milliseconds with stall_us of it stalled on I/O and
 * cpu_us of it with a task waiting for a CPU */
static uint64_t decide_cpu(uint64_t ms, uint64_t stall_us, uint64_t cpu_us)
{
	struct sub_pace_sample a = { .ms = 5000, .stall_us = 123456789, .cpu_us = 987654321 };
	struct sub_pace_sample b = { .ms = a.ms + ms, .stall_us = a.stall_us + stall_us,
				     .cpu_us = a.cpu_us + cpu_us };

	return sub_pace_decide(&a, &b);
}

static uint64_t decide(uint64_t ms, uint64_t stall_us)
{
	return decide_cpu(ms, stall_us, 0);
}

static void test_quiet_disk_builds(void)
{
	CHECK_EQ_U64(decide(100, 0), 0);
	CHECK_EQ_U64(decide(100, 5000), 0);		/* 5% */
	CHECK_EQ_U64(decide(250, 25000), 0);		/* 10%: at the share, not above */
}

static void test_busy_disk_waits(void)
{
	CHECK_EQ_U64(decide(100, 10001), SUB_PACE_WAIT_MS);	/* just above 10% */
	CHECK_EQ_U64(decide(250, 125000), SUB_PACE_WAIT_MS);	/* 50% */
	CHECK_EQ_U64(decide(100, 100000), SUB_PACE_WAIT_MS);	/* all of it */
	/* a share, not an amount: the same stall in a longer window is less */
	CHECK_EQ_U64(decide(100, 20000), SUB_PACE_WAIT_MS);
	CHECK_EQ_U64(decide(1000, 20000), 0);
}

static void test_busy_cpus_wait(void)
{
	CHECK_EQ_U64(decide_cpu(1000, 0, 100000), 0);		/* 10% */
	CHECK_EQ_U64(decide_cpu(1000, 0, 200000), 0);		/* 20%: at the share */
	CHECK_EQ_U64(decide_cpu(1000, 0, 200001), SUB_PACE_WAIT_MS);
	CHECK_EQ_U64(decide_cpu(500, 0, 450000), SUB_PACE_WAIT_MS);	/* 90% */
	/* either is enough to wait; both quiet, build */
	CHECK_EQ_U64(decide_cpu(1000, 150000, 0), SUB_PACE_WAIT_MS);
	CHECK_EQ_U64(decide_cpu(1000, 50000, 150000), 0);
}

static void test_unjudgeable_windows_build(void)
{
	struct sub_pace_sample a = { .ms = 7000, .stall_us = 1000000 };
	struct sub_pace_sample same = a;
	struct sub_pace_sample earlier = { .ms = 6900, .stall_us = 2000000 };
	struct sub_pace_sample back = { .ms = 7100, .stall_us = 999999 };
	struct sub_pace_sample cpu_back = { .ms = 7100, .stall_us = 2000000, .cpu_us = 0 };

	a.cpu_us = 5;
	same.cpu_us = 5;
	earlier.cpu_us = 5;
	back.cpu_us = 5;
	CHECK_EQ_U64(sub_pace_decide(&a, &same), 0);	/* no time passed */
	CHECK_EQ_U64(sub_pace_decide(&a, &earlier), 0);	/* b before a */
	CHECK_EQ_U64(sub_pace_decide(&a, &back), 0);	/* the counter went back */
	CHECK_EQ_U64(sub_pace_decide(&a, &cpu_back), 0);	/* the CPU one went back */
}

static void test_parse(void)
{
	static const char psi[] = "some avg10=1.94 avg60=3.82 avg300=2.55 total=366659402\n"
				  "full avg10=1.03 avg60=1.56 avg300=0.82 total=213518783\n";
	static const char full_first[] = "full avg10=0.00 avg60=0.00 avg300=0.00 total=7\n"
					 "some avg10=0.00 avg60=0.00 avg300=0.00 total=42";
	uint64_t v = 0;

	CHECK(sub_pace_parse(psi, strlen(psi), &v) == 0);
	CHECK_EQ_U64(v, 366659402);
	CHECK(sub_pace_parse(full_first, strlen(full_first), &v) == 0);	/* no final newline */
	CHECK_EQ_U64(v, 42);
	/* only the bytes given are read: the total cut short is what is there */
	CHECK(sub_pace_parse(psi, strlen("some avg10=1.94 avg60=3.82 avg300=2.55 total=36"), &v) == 0);
	CHECK_EQ_U64(v, 36);
}

static void test_parse_refuses(void)
{
	static const char *const bad[] = {
		"",
		"full avg10=0.00 avg60=0.00 avg300=0.00 total=7\n",	/* no some line */
		"some avg10=0.00 avg60=0.00 avg300=0.00\n",		/* no total */
		"some avg10=0.00 avg60=0.00 avg300=0.00 total=\n",
		"some avg10=0.00 avg60=0.00 avg300=0.00 total=x1\n",
		"some total=99999999999999999999999\n",			/* past 64 bits */
		"somewhere total=5\n",
	};
	uint64_t v = 77;

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		if (sub_pace_parse(bad[i], strlen(bad[i]), &v) != -EINVAL)
			printf("# refused? \"%s\"\n", bad[i]);
		CHECK(sub_pace_parse(bad[i], strlen(bad[i]), &v) == -EINVAL);
	}
	CHECK_EQ_U64(v, 77);	/* untouched */
}

int main(void)
{
	TEST(test_quiet_disk_builds);
	TEST(test_busy_disk_waits);
	TEST(test_busy_cpus_wait);
	TEST(test_unjudgeable_windows_build);
	TEST(test_parse);
	TEST(test_parse_refuses);
	return tap_done();
}
