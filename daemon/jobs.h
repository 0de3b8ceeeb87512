/* SPDX-License-Identifier: Apache-2.0 */
/*
 * jobs.h -- long jobs (encode a checkpoint, apply a delta, hash a folder)
 * off the loop thread.
 *
 * libuv's own pool also runs every uv_fs_* call and the file store's
 * requests: a 30-second encode there would starve them.  So the daemon
 * keeps one thread of its own for these jobs, run one at a time in
 * submission order (each job already uses [daemon] threads workers inside,
 * through wsync_diff_opts/wsync_apply_opts).  The result comes back on
 * the loop thread through a uv_async.
 */
#ifndef WSYNC_JOBS_H
#define WSYNC_JOBS_H

#include <stdbool.h>
#include <uv.h>

struct wsync_jobs;

/* work runs on the jobs thread; done then runs on the loop thread with
 * cancelled = true when the job never ran (wsync_jobs_free() dropped it). */
typedef void (*wsync_job_work)(void *data);
typedef void (*wsync_job_done)(void *data, bool cancelled);

/* Start the thread.  0 or a negative errno. */
int wsync_jobs_new(uv_loop_t *loop, struct wsync_jobs **ret);

/* Queue a job.  0, or -ENOMEM / -ESHUTDOWN (after free began). */
int wsync_jobs_submit(struct wsync_jobs *jobs, wsync_job_work work, wsync_job_done done,
		      void *data);

/* Jobs queued or running. */
unsigned wsync_jobs_pending(const struct wsync_jobs *jobs);

/* Drop queued jobs (done(cancelled) runs for each, now), wait for the
 * running one to finish (its done runs too), stop the thread, and close
 * the async handle (the loop must run once more).  NULL is accepted. */
void wsync_jobs_free(struct wsync_jobs *jobs);

#endif
