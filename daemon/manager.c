/* SPDX-License-Identifier: Apache-2.0 */
/*
 * manager.c -- wsyncd's run (manager.h).
 *
 * States: RUNNING -> (TERM/INT) STOPPING -> (role stopped) CLOSING -> the
 * loop runs out of handles and wsync_manager_run() returns.  A second TERM
 * while stopping is logged and otherwise ignored: the role is finishing a
 * step that must not be cut in half (systemd's TimeoutStopSec and SIGKILL
 * remain the hard stop, and everything is crash safe).
 */
#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon.h"
#include "log-messages.h"
#include "instance_lock.h"
#include "durable.h"
#include "io.h"
#include "log.h"
#include "manager.h"
#include "metrics.h"
#include "notify.h"
#include "role_ops.h"
#include "wsync-build.h"

enum mstate {
	M_RUNNING,
	M_STOPPING,	/* asked the role to stop, waiting for stopped() */
	M_CLOSING,	/* role freed; handles closing */
};

struct manager {
	struct wsync_daemon d;
	struct wsync_config *cfg;
	const char *config_path;
	enum mstate state;
	const struct wsync_role_ops *ops;	/* cfg->role's */
	void *role;			/* NULL: not made, or freed */
	uv_signal_t sig_term, sig_int, sig_hup;
	uv_timer_t watchdog;
	uv_timer_t refresh;		/* status and metrics, between changes */
	struct wsync_instance_lock runtime_lock;	/* runtime_dir/lock */
	bool watchdog_on;
	char status[512];
	int exit_code;
};

static void set_status(struct wsync_daemon *d, const char *line)
{
	struct manager *m = d->data;

	snprintf(m->status, sizeof(m->status), "%s", line);
	wsync_notify_status(line);
}

static void close_all(struct manager *m)
{
	m->state = M_CLOSING;
	uv_close((uv_handle_t *)&m->sig_term, NULL);
	uv_close((uv_handle_t *)&m->sig_int, NULL);
	uv_close((uv_handle_t *)&m->sig_hup, NULL);
	if (m->watchdog_on)
		uv_close((uv_handle_t *)&m->watchdog, NULL);
	uv_close((uv_handle_t *)&m->refresh, NULL);
	wsync_jobs_free(m->d.jobs);
	m->d.jobs = NULL;
	wsync_store_free(m->d.store);
	m->d.store = NULL;
}

static void role_stopped(struct wsync_daemon *d)
{
	struct manager *m = d->data;

	m->ops->free(m->role);
	m->role = NULL;
	log_info("stopped");
	close_all(m);
}

static void stop(struct manager *m, const char *why)
{
	if (m->state != M_RUNNING) {
		log_notice("%s: already stopping, finishing the current step first", why);
		return;
	}
	m->state = M_STOPPING;
	wsync_notify_stopping();
	wsync_log(LOG_INFO, WSYNC_FIELDS(.message_id = WSYNC_MID_STOPPING),
		  "%s: stopping", why);
	if (m->role)
		m->ops->stop(m->role);
	else
		role_stopped(&m->d);
}

/* SIGHUP: read the file again; take what can change while running (the
 * log level), say what needs a restart, keep the old settings if the new
 * file is invalid. */
static void reload(struct manager *m)
{
	struct wsync_config nc;
	struct wsync_config_errors errs = { 0 };
	int r;

	wsync_notify_reloading();
	r = wsync_config_init(&nc);
	if (r >= 0)
		r = wsync_config_load(&nc, m->config_path, &errs);
	if (r < 0) {
		const struct wsync_log_fields *invalid =
			WSYNC_FIELDS(.message_id = WSYNC_MID_CONFIG_INVALID, .file = m->config_path);

		for (size_t i = 0; i < errs.n; i++)
			wsync_log(LOG_ERR, invalid, "%s", errs.items[i].text);
		wsync_log(LOG_ERR, invalid, "%s: reload refused, the configuration is invalid; "
			  "running on with the previous one", m->config_path);
	} else {
		bool restart = nc.role != m->cfg->role ||
			       strcmp(nc.store_url, m->cfg->store_url) != 0;
		bool files = m->role && m->ops->reload_filter && !restart &&
			     (strcmp(nc.sub_include, m->cfg->sub_include) != 0 ||
			      strcmp(nc.sub_exclude, m->cfg->sub_exclude) != 0) &&
			     m->ops->reload_filter(m->role, nc.sub_include,
						   nc.sub_exclude) == 0;

		m->cfg->log_level = nc.log_level;
		wsync_log_set_level(nc.log_level);
		wsync_log(LOG_NOTICE, WSYNC_FIELDS(.message_id = WSYNC_MID_CONFIG_RELOADED,
						   .file = m->config_path),
			  "%s: configuration reloaded (log_level %s%s)%s", m->config_path,
			  wsync_log_level_name(nc.log_level),
			  files ? "; [subscriber] include and exclude from the next poll" : "",
			  restart ? "; role and store changes take effect after a restart" :
				    "; other settings take effect after a restart");
	}
	wsync_config_errors_free(&errs);
	wsync_config_free(&nc);
	wsync_notify_ready();
	if (m->status[0])
		wsync_notify_status(m->status);
}

static void on_signal(uv_signal_t *h, int signum)
{
	struct manager *m = h->data;

	if (signum == SIGHUP)
		reload(m);
	else
		stop(m, signum == SIGTERM ? "SIGTERM" : "SIGINT");
}

static void on_watchdog(uv_timer_t *t)
{
	(void)t;
	wsync_notify_watchdog();
}

/* The role rewrites its files at each change of state; between changes
 * this keeps the gauges that grow with time (lag, an outage's length)
 * and the metrics' timestamp fresh. */
static void on_refresh(uv_timer_t *t)
{
	struct manager *m = t->data;

	if (m->state != M_RUNNING || !m->role)
		return;
	(void)m->ops->write_status(m->role);
}

/*
 * Setting up the store or the role failed: how wsyncd exits.  78
 * (EX_CONFIG, which the unit does not restart) when an operator must change
 * something: a setting refused (-EINVAL: a store option, a signing_key or
 * verify_key that cannot be used) or, for the store, a credentials file
 * missing or unreadable; logged with CONFIG_INVALID.  1 (restarted) for
 * what may come right by itself: a directory not there yet or not
 * creatable (watch_dir on a mount not up yet, state_dir), a lock held by
 * another process, memory, libcurl missing.  wsyncd(8) EXIT STATUS.
 */
static void setup_failed(struct manager *m, bool config, const struct wsync_error *err, int r,
			 const char *fmt, ...) __attribute__((format(printf, 5, 6)));
static void setup_failed(struct manager *m, bool config, const struct wsync_error *err, int r,
			 const char *fmt, ...)
{
	const char *why = err->code ? wsync_error_str(err) : strerror(-r);
	char what[4096];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(what, sizeof(what), fmt, ap);
	va_end(ap);
	m->exit_code = config ? WSYNC_EX_CONFIG : 1;
	if (config)
		wsync_log(LOG_ERR, WSYNC_FIELDS(.message_id = WSYNC_MID_CONFIG_INVALID,
						.file = m->config_path),
			  "%s: %s: %s", m->config_path, what, why);
	else
		log_error("%s: %s", what, why);
}

/* One daemon per runtime_dir: two would write one status.json.  Taken
 * after the role's own locks (its state), so that two daemons from one
 * file hear of the state they would share first. */
static int lock_runtime(struct manager *m, struct wsync_error *err)
{
	struct wsync_error e = { 0 };
	char *lock = NULL;
	int r;

	/* a reboot empties it anyway: made, never synced */
	r = wsync_mkdir_p_later(m->cfg->runtime_dir, 0755, NULL);
	if (r < 0)
		wsync_error_set(&e, r, "cannot create it: %s", strerror(-r));
	else if (asprintf(&lock, "%s/lock", m->cfg->runtime_dir) < 0)
		r = wsync_error_set(&e, -ENOMEM, "out of memory");
	else
		r = wsync_instance_lock(&m->runtime_lock, lock, "wsyncd", m->config_path, &e);
	free(lock);
	if (r < 0)
		wsync_error_set(err, r, "[daemon] runtime_dir %s: %s%s", m->cfg->runtime_dir,
				wsync_error_str(&e), r != -EBUSY ? "" :
				"; two daemons would write one status.json: give each its "
				"own [daemon] runtime_dir");
	return r;
}

static int start_role(struct manager *m)
{
	struct wsync_error err = { 0 };
	int r;

	r = m->ops->new(&m->d, &m->role, &err);
	if (r >= 0)
		r = lock_runtime(m, &err);
	if (r >= 0)
		r = m->ops->start(m->role);
	if (r < 0)
		setup_failed(m, r == -EINVAL, &err, r, "cannot start the %s",
			     wsync_role_name(m->cfg->role));
	return r;
}

int wsync_manager_run(struct wsync_config *cfg, const char *config_path)
{
	struct manager *m = calloc(1, sizeof(*m));
	struct wsync_store_options so;
	struct wsync_error err = { 0 };
	uv_loop_t loop;
	uint64_t wd;
	int r, code;

	if (!m || uv_loop_init(&loop) < 0) {
		log_error("out of memory");
		free(m);
		wsync_config_free(cfg);
		return 1;
	}
	/* this thread is the loop's from here, the role's set-up included:
	 * no fsync on it (durable.h) */
	wsync_durable_forbid_thread();
	m->cfg = cfg;
	m->config_path = config_path;
	m->d.loop = &loop;
	m->d.cfg = cfg;
	m->d.program = "wsyncd";
	m->runtime_lock = (struct wsync_instance_lock)WSYNC_INSTANCE_LOCK_INIT;
	m->d.set_status = set_status;
	m->d.stopped = role_stopped;
	wsync_test_hooks_from_env(&m->d.test);
	m->d.data = m;
	/* a loaded configuration names its role (config.c requires it) */
	m->ops = wsync_role_ops(cfg->role);
	if (!m->ops) {
		log_error("no role to run");
		m->exit_code = WSYNC_EX_CONFIG;
		goto out;
	}

	r = wsync_config_store_options(cfg, &so);
	if (r >= 0)
		r = wsync_store_new(&loop, &so, &m->d.store, &err);
	if (r < 0) {
		setup_failed(m, r != -ENOMEM && r != -ELIBACC, &err, r, "store %s", cfg->store_url);
		goto out_loop;
	}
	r = wsync_jobs_new(&loop, &m->d.jobs);
	if (r < 0) {
		log_error("cannot start the worker thread: %s", strerror(-r));
		m->exit_code = 1;
		goto out_loop;
	}
	uv_signal_init(&loop, &m->sig_term);
	uv_signal_init(&loop, &m->sig_int);
	uv_signal_init(&loop, &m->sig_hup);
	m->sig_term.data = m->sig_int.data = m->sig_hup.data = m;
	uv_signal_start(&m->sig_term, on_signal, SIGTERM);
	uv_signal_start(&m->sig_int, on_signal, SIGINT);
	uv_signal_start(&m->sig_hup, on_signal, SIGHUP);
	signal(SIGPIPE, SIG_IGN);
	wd = wsync_notify_watchdog_ms();
	if (wd) {
		uv_timer_init(&loop, &m->watchdog);
		m->watchdog.data = m;
		uv_timer_start(&m->watchdog, on_watchdog, wd, wd);
		m->watchdog_on = true;
	}

	uv_timer_init(&loop, &m->refresh);
	m->refresh.data = m;
	uv_timer_start(&m->refresh, on_refresh, WSYNC_METRICS_REFRESH_MS, WSYNC_METRICS_REFRESH_MS);
	uv_unref((uv_handle_t *)&m->refresh);

	if (start_role(m) < 0) {
		m->ops->free(m->role);
		m->role = NULL;
		close_all(m);
	} else {
		wsync_log(LOG_INFO, WSYNC_FIELDS(.message_id = WSYNC_MID_STARTED),
			  "wsyncd %s started: role %s, bucket %s", WSYNC_VERSION,
			  wsync_role_name(cfg->role), wsync_store_describe(m->d.store));
		wsync_notify_ready();
	}
	uv_run(&loop, UV_RUN_DEFAULT);
	goto out;

out_loop:
	wsync_jobs_free(m->d.jobs);
	wsync_store_free(m->d.store);
	uv_run(&loop, UV_RUN_DEFAULT);
out:
	code = m->exit_code;
	if (uv_loop_close(&loop) < 0)
		log_warning("the event loop still had open handles at exit");
	wsync_instance_unlock(&m->runtime_lock);
	wsync_config_free(cfg);
	free(m);
	return code;
}
