/* SPDX-License-Identifier: Apache-2.0 */
/*
 * jobs.c -- one worker thread for long jobs, results posted back to the
 * loop (jobs.h).
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>

#include "jobs.h"

struct job {
	wsync_job_work work;
	wsync_job_done done;
	void *data;
	struct job *next;
};

struct wsync_jobs {
	uv_loop_t *loop;
	uv_thread_t thread;
	uv_mutex_t lock;
	uv_cond_t wake;
	uv_async_t async;		/* the thread -> loop: something finished */
	struct job *queue, *queue_tail;	/* waiting to run */
	struct job *finished;		/* ran, done() not yet called */
	unsigned pending;		/* queued + running + finished */
	bool stopping;
};

static void thread_main(void *arg)
{
	struct wsync_jobs *j = arg;

	/* top -H, perf and /proc/PID/task/TID/comm tell it from the loop */
	(void)pthread_setname_np(pthread_self(), "wsync-jobs");
	uv_mutex_lock(&j->lock);
	for (;;) {
		while (!j->queue && !j->stopping)
			uv_cond_wait(&j->wake, &j->lock);
		if (!j->queue)
			break;
		struct job *job = j->queue;

		j->queue = job->next;
		if (!j->queue)
			j->queue_tail = NULL;
		uv_mutex_unlock(&j->lock);
		job->work(job->data);
		uv_mutex_lock(&j->lock);
		job->next = j->finished;
		j->finished = job;
		uv_async_send(&j->async);
	}
	uv_mutex_unlock(&j->lock);
}

/* Run done() of every finished job, oldest first. */
static void drain(struct wsync_jobs *j)
{
	struct job *list, *rev = NULL;

	uv_mutex_lock(&j->lock);
	list = j->finished;
	j->finished = NULL;
	uv_mutex_unlock(&j->lock);
	while (list) {
		struct job *n = list->next;

		list->next = rev;
		rev = list;
		list = n;
	}
	while (rev) {
		struct job *n = rev->next;

		j->pending--;
		rev->done(rev->data, false);
		free(rev);
		rev = n;
	}
}

static void on_async(uv_async_t *a)
{
	drain(a->data);
}

static void on_closed(uv_handle_t *h)
{
	free(h->data);
}

int wsync_jobs_new(uv_loop_t *loop, struct wsync_jobs **ret)
{
	struct wsync_jobs *j = calloc(1, sizeof(*j));
	int r;

	if (!j)
		return -ENOMEM;
	j->loop = loop;
	if ((r = uv_mutex_init(&j->lock)) < 0)
		goto fail_mutex;
	if ((r = uv_cond_init(&j->wake)) < 0)
		goto fail_cond;
	if ((r = uv_async_init(loop, &j->async, on_async)) < 0)
		goto fail_async;
	j->async.data = j;
	if ((r = uv_thread_create(&j->thread, thread_main, j)) < 0) {
		uv_close((uv_handle_t *)&j->async, on_closed);
		uv_cond_destroy(&j->wake);
		uv_mutex_destroy(&j->lock);
		*ret = NULL;
		return r;
	}
	*ret = j;
	return 0;
fail_async:
	uv_cond_destroy(&j->wake);
fail_cond:
	uv_mutex_destroy(&j->lock);
fail_mutex:
	free(j);
	return r;
}

int wsync_jobs_submit(struct wsync_jobs *j, wsync_job_work work, wsync_job_done done,
		      void *data)
{
	struct job *job;

	if (j->stopping)
		return -ESHUTDOWN;
	job = calloc(1, sizeof(*job));
	if (!job)
		return -ENOMEM;
	job->work = work;
	job->done = done;
	job->data = data;
	uv_mutex_lock(&j->lock);
	if (j->queue_tail)
		j->queue_tail->next = job;
	else
		j->queue = job;
	j->queue_tail = job;
	j->pending++;
	uv_cond_signal(&j->wake);
	uv_mutex_unlock(&j->lock);
	return 0;
}

unsigned wsync_jobs_pending(const struct wsync_jobs *j)
{
	return j->pending;
}

void wsync_jobs_free(struct wsync_jobs *j)
{
	struct job *dropped;

	if (!j)
		return;
	uv_mutex_lock(&j->lock);
	j->stopping = true;
	dropped = j->queue;
	j->queue = j->queue_tail = NULL;
	uv_cond_signal(&j->wake);
	uv_mutex_unlock(&j->lock);
	while (dropped) {
		struct job *n = dropped->next;

		j->pending--;
		dropped->done(dropped->data, true);
		free(dropped);
		dropped = n;
	}
	uv_thread_join(&j->thread);	/* the running job, if any, ends first */
	drain(j);
	uv_cond_destroy(&j->wake);
	uv_mutex_destroy(&j->lock);
	uv_close((uv_handle_t *)&j->async, on_closed);
}
