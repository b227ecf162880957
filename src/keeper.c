/*-------------------------------------------------------------------------
 *
 * keeper.c
 *	  The keeper: background workers that renew the leases of every hold
 *	  of every session, and release the holds of sessions that exited
 *	  before their own releases got through. The holds are those sessions
 *	  publish in the shared table (holdtable.c), which this file reaches
 *	  only through its interface.
 *
 * Only with rwlock in shared_preload_libraries. Without it there is no
 * keeper, and each session renews its own leases lazily (renew.c).
 *
 * Each process copies the holds due (past a third of their lease) out of
 * the table (rw_holdtable_due), renews them with no lock held, pipelined,
 * one batch per Redis URL, on behalf of each hold's owner id, and writes
 * the results back (rw_holdtable_renewals), which the table keeps only for
 * holds that did not change meanwhile. A renewal that finds the hold gone
 * flags it lost; the session reports it at its next operation on that lock
 * (held.c).
 * The keeper also withdraws the wait key and the intent or mark that a wait
 * cut off in a stall left in Redis (waiters.c), on the session's behalf.
 * A hold left to the keeper (its backend exited before its own release got
 * through, or is gone) is released on its owner's behalf. A release that
 * fails (no connection, an error reply such as WRONGTYPE, a MOVED) is
 * logged once, with why, and tried again until it is moot
 * (rw_holdtable_moot: the hold was found lost, or its lease has certainly
 * run out): then the slot is freed without Redis, and that is logged once.
 *
 * Servers are renewed independently: the keeper starts a renewer (a
 * dynamic background worker) per URL that has holds (rw_holdtable_assign),
 * and each renewer renews the holds of its URL, so a server that stalls
 * holds up only its own renewer. The keeper renews the holds whose renewer
 * is not running (starting, or none could be started). Each process keeps
 * a connection per URL it renews, reconnects after any failure at its next
 * attempt, retries failed renewals hold by hold after a pause that grows
 * (so holds that cannot be renewed never fill every batch), and closes
 * connections no hold has used for a minute. The keeper exits with code 1
 * on SIGTERM or error, so the postmaster starts it again after a second; a
 * renewer that exits is started again by the keeper. A session renews a
 * published hold itself when the process that renews it has been silent
 * for a third of the hold's lease (rw_holdtable_renews).
 *
 *-------------------------------------------------------------------------
 */
#include "rwlock.h"

#include "fmgr.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/lwlock.h"
#include "tcop/tcopprot.h"
#include "utils/guc.h"
#include "utils/memutils.h"

#define KEEPER_BATCH	512		/* renewals per pipeline */
#define KEEPER_MAX_SLEEP_MS 1000
#define KEEPER_RETRY_MS 200		/* after a failed renewal; doubles to ... */
#define KEEPER_RETRY_MAX_MS 1000	/* ... at most this (or a sixth of the lease) */
#define NODE_IDLE_MS	60000	/* close a connection no hold used this long */
#define RENEWER_REGISTER_RETRY_MS 10000	/* after no worker could be started */

PGDLLEXPORT void rw_keeper_main(Datum arg);
PGDLLEXPORT void rw_renewer_main(Datum arg);

/* Called first thing in _PG_init. */
void
rw_keeper_init(void)
{
	BackgroundWorker bgw;

	if (!process_shared_preload_libraries_in_progress)
		return;

	rw_holdtable_init();		/* rwlock.max_holds, the shared table */

	memset(&bgw, 0, sizeof(bgw));
	bgw.bgw_flags = BGWORKER_SHMEM_ACCESS | BGWORKER_BACKEND_DATABASE_CONNECTION;
	/* Standbys can hold Redis locks too. */
	bgw.bgw_start_time = BgWorkerStart_ConsistentState;
	bgw.bgw_restart_time = 1;
	strlcpy(bgw.bgw_library_name, "rwlock", BGW_MAXLEN);
	strlcpy(bgw.bgw_function_name, "rw_keeper_main", BGW_MAXLEN);
	strlcpy(bgw.bgw_name, "rwlock keeper", BGW_MAXLEN);
	strlcpy(bgw.bgw_type, "rwlock keeper", BGW_MAXLEN);
	RegisterBackgroundWorker(&bgw);
}


/* ---------------------------------------------------------------------
 * The keeper and its renewers
 *
 * Every process below renews the holds it is responsible for in the same
 * way (keeper_cycle). The keeper starts a renewer per Redis URL that has
 * holds and renews itself only the holds whose renewer is not running (not
 * started yet, or none could be started: max_worker_processes). So a
 * server that stalls (a stopped Redis, a connection attempt that hangs for
 * rwlock.connect_timeout) holds up only its own renewer: every server's
 * leases are renewed independently.
 * --------------------------------------------------------------------- */

/* A Redis node this process talks to, by URL. */
typedef struct KNode
{
	RwNode		node;
	int64		seen;			/* monotonic ms: a slot used this URL */
	bool		failing;		/* the last renewal failed: logged once */
	struct KNode *next;
} KNode;

static KNode *knodes = NULL;
static int	my_renewer = -1;	/* this process: a renewer, or -1: the keeper */
static bool cycle_had_holds = false;	/* the last keeper_cycle saw some */
static int64 register_after = 0;	/* no new renewer before (monotonic) */

/*
 * Per slot, this process's retry schedule after a failed renewal: a failed
 * hold is not due again before retry_at (backing off), so holds that cannot
 * be renewed never fill every batch, and the process sleeps between tries.
 * Valid while the slot's generation is retry_gen.
 */
static int64 *retry_at = NULL;
static uint64 *retry_gen = NULL;
static int *retry_n = NULL;

static KNode *
knode_find(const char *url)
{
	for (KNode *k = knodes; k != NULL; k = k->next)
		if (strcmp(k->node.ep.url, url) == 0)
			return k;
	return NULL;
}

static KNode *
knode_get(const char *url)
{
	KNode	   *k = knode_find(url);
	MemoryContext old;
	char	   *why;

	if (k != NULL)
		return k;
	old = MemoryContextSwitchTo(TopMemoryContext);
	k = palloc0(sizeof(KNode));
	if (!rw_parse_url(url, &k->node.ep, &why))
	{
		/* Sessions only publish URLs the setting accepted. */
		elog(LOG, "rwlock keeper: cannot parse a published Redis URL: %s", why);
		pfree(k);
		MemoryContextSwitchTo(old);
		return NULL;
	}
	rw_sentinel_attach(&k->node.ep);
	k->node.cmd.node = &k->node;
	rw_cluster_attach(&k->node);
	rw_quorum_attach(&k->node);
	k->seen = rw_now_ms();
	k->next = knodes;
	knodes = k;
	MemoryContextSwitchTo(old);
	return k;
}

/* Close the connections no slot has used for a while. */
static void
knodes_tidy(int64 now)
{
	KNode	  **link = &knodes;

	while (*link != NULL)
	{
		KNode	   *k = *link;

		if (now - k->seen > NODE_IDLE_MS)
		{
			rw_conn_close(&k->node.cmd);
			rw_cluster_detach(&k->node);
			rw_quorum_detach(&k->node);
			*link = k->next;
			pfree(k);
		}
		else
			link = &k->next;
	}
}

/* The table has holds at url (rw_holdtable_due; under its lock). */
static void
knode_seen(const char *url, int64 now)
{
	KNode	   *k = knode_find(url);

	if (k != NULL)
		k->seen = now;
}

static int
keeper_work_cmp(const void *a, const void *b)
{
	return strcmp(((const RwDueHold *) a)->url, ((const RwDueHold *) b)->url);
}

/*
 * A renewal of w failed (no answer, an error reply, a quorum undecided):
 * try it again after a pause that doubles with each failure, up to
 * KEEPER_RETRY_MAX_MS or a sixth of the lease. Returns when.
 */
static int64
keeper_retry_later(const RwDueHold *w, int64 now)
{
	int			i = w->slot;
	int64		cap = Min(KEEPER_RETRY_MAX_MS, Max(w->lease_ms / 6, 50));

	if (retry_gen[i] != w->gen)
	{
		retry_gen[i] = w->gen;
		retry_n[i] = 0;
	}
	retry_n[i] = Min(retry_n[i] + 1, 8);
	retry_at[i] = now + Min((int64) KEEPER_RETRY_MS << (retry_n[i] - 1), cap);
	return retry_at[i];
}

/* Log, once a hold, that the keeper could not release it, and why. */
static void
keeper_release_failed(const RwDueHold *w, KNode *k, const RwError *err)
{
	char		name[RW_NAME_MAX + 1];

	if (rw_holdtable_release_failed(w, name))
		ereport(LOG,
				(errmsg("rwlock keeper could not release Redis lock \"%s\" of process %d at %s",
						name, w->pid, k->node.ep.display),
				 errdetail("%s", err->msg),
				 errhint("It is tried again until its lease has run out, then given up: the lease frees the lock.")));
}

/*
 * Release a hold whose backend exited before its own release got through
 * (or is gone without a word), on behalf of its owner, unless that is moot
 * (rw_holdtable_moot: then its slot is freed without Redis, logged once).
 * Returns when to try again if it failed (PG_INT64_MAX if not).
 */
static int64
keeper_release(RwDueHold *w, int64 now)
{
	KNode	   *k = knode_get(w->url);
	RwError		err;
	char		name[RW_NAME_MAX + 1];
	int64		idle_ms;

	if (k == NULL)
		return PG_INT64_MAX;
	k->seen = now;
	switch (rw_holdtable_moot(w, now, name, &idle_ms))
	{
		case RW_MOOT_NOT:
			break;
		case RW_MOOT_CHANGED:
			return PG_INT64_MAX;
		case RW_MOOT_LOST:
			ereport(LOG,
					(errmsg("rwlock keeper gave up the release of Redis lock \"%s\" of process %d at %s: it was found lost",
							name, w->pid, k->node.ep.display),
					 errdetail("Its lease ran out or Redis lost its data: there is nothing to release.")));
			return PG_INT64_MAX;
		case RW_MOOT_LAPSED:
			ereport(LOG,
					(errmsg("rwlock keeper gave up the release of Redis lock \"%s\" of process %d at %s: its lease has run out",
							name, w->pid, k->node.ep.display),
					 errdetail("Nothing renewed it for %.1f s (its lease is %.1f s): Redis no longer holds it for the owner.",
							   idle_ms / 1000.0, w->lease_ms / 1000.0)));
			return PG_INT64_MAX;
	}
	if (!rw_release_as(&k->node, &w->keys, w->owner, w->seq, RW_KEEP_NOTHING, &err))
	{
		keeper_release_failed(w, k, &err);
		return keeper_retry_later(w, now);
	}
	if (rw_holdtable_free(w, name))
		elog(LOG, "rwlock keeper released Redis lock \"%s\" of process %d, which exited before its own release got through",
			 name, w->pid);
	return PG_INT64_MAX;
}

/*
 * Renew one URL's due holds, each judged on its own. Returns when the
 * earliest that failed is to be tried again (PG_INT64_MAX if none did).
 */
static int64
keeper_renew_node(KNode *k, RwDueHold *work, int n)
{
	RwKeys	  **keys = palloc(sizeof(RwKeys *) * n);
	const char **owners = palloc(sizeof(char *) * n);
	uint64	   *seqs = palloc(sizeof(uint64) * n);
	int		   *leases = palloc(sizeof(int) * n);
	int		   *held = palloc(sizeof(int) * n);
	RwRenewal  *outcome = palloc(sizeof(RwRenewal) * n);
	int64		sent = rw_now_ms();
	int64		retry = PG_INT64_MAX;
	int64		now;
	RwError		err;
	bool		ok;

	for (int i = 0; i < n; i++)
	{
		keys[i] = &work[i].keys;
		owners[i] = work[i].owner;
		seqs[i] = work[i].seq;
		leases[i] = work[i].lease_ms;
	}
	ok = rw_quorum_renew(&k->node, keys, owners, seqs, leases, n, held, &err);
	now = rw_now_ms();
	if (!ok)
	{
		rw_holdtable_tried(work, n, now);
		if (!k->failing)
			ereport(LOG,
					(errcode(ERRCODE_CONNECTION_FAILURE),
					 errmsg("rwlock keeper could not renew leases at %s", k->node.ep.display),
					 errdetail("%s", err.msg)));
		k->failing = true;
		for (int i = 0; i < n; i++)
			retry = Min(retry, keeper_retry_later(&work[i], now));
		return retry;
	}
	if (k->failing)
		ereport(LOG,
				(errmsg("rwlock keeper renews leases at %s again", k->node.ep.display)));
	k->failing = false;

	rw_holdtable_renewals(work, n, held, sent, now, k->node.ep.display, outcome);
	for (int i = 0; i < n; i++)
	{
		if (outcome[i] == RW_RENEWAL_DONE)
			retry_gen[work[i].slot] = 0;
		else if (outcome[i] == RW_RENEWAL_RETRY)
			retry = Min(retry, keeper_retry_later(&work[i], now));
	}
	return retry;
}

/*
 * The keeper: withdraw what waits cut off in a stall left in Redis
 * (rw_waiters_leftovers): each one's intent or mark (release.lua keeping
 * every hold, as its owner's next request, drawn from the session's own
 * counter while the leftover is still there: a request the session sends
 * after taking it back is newer) and its wait key. A session that leaves one wakes the keeper; what fails is tried
 * again after KEEPER_RETRY_MS; a session that takes a lock again first
 * takes its leftover back. True if some are left.
 */
static bool
keeper_withdraw_leftovers(int64 now)
{
	bool		left = false;

	RwLeftover *l;
	int			n = rw_waiters_leftovers(&l);

	for (int i = 0; i < n; i++)
	{
		KNode	   *k = knode_get(l[i].url);
		RwError		err;
		bool		ok = true;

		if (k == NULL)
		{
			rw_waiters_leftover_done(l[i].procno, l[i].gen);
			continue;
		}
		k->seen = now;
		memset(&err, 0, sizeof(err));
		if (l[i].intent)
		{
			RwKeys		keys;
			uint64		seq = rw_waiters_leftover_seq(l[i].procno, l[i].gen);

			if (seq == 0)
				continue;		/* taken back meanwhile */
			rw_fan_keys_of(l[i].key, &keys);
			ok = rw_release_as(&k->node, &keys, l[i].owner, seq, RW_KEEP_ALL, &err);
		}
		if (ok && l[i].wait_key[0] != '\0')
			ok = rw_deadlock_drop_key_as(&k->node, l[i].wait_key, &err);
		if (ok)
			rw_waiters_leftover_done(l[i].procno, l[i].gen);
		else
			left = true;
	}
	return left;
}

/*
 * One pass: renew what is due among the holds this process renews, the
 * longest due first, at most KEEPER_BATCH at a time (rw_holdtable_due), and
 * release those whose backend exited. Returns when to look again
 * (monotonic).
 */
static int64
keeper_cycle(void)
{
	int64		now = rw_now_ms();
	int64		next = now + KEEPER_MAX_SLEEP_MS;
	RwDueHold  *work;
	int			n;

	if (my_renewer < 0 && keeper_withdraw_leftovers(now))
		next = Min(next, now + KEEPER_RETRY_MS);	/* not all withdrawn */

	n = rw_holdtable_due(my_renewer, now, retry_at, retry_gen, KEEPER_BATCH,
						 knode_seen, &work, &next, &cycle_had_holds);

	/* Never renew for a backend that is gone: release its holds instead. */
	for (int i = 0; i < n; i++)
	{
		if (work[i].release || !work[i].live)
		{
			next = Min(next, keeper_release(&work[i], now));
			work[i--] = work[--n];
		}
	}

	qsort(work, n, sizeof(RwDueHold), keeper_work_cmp);
	for (int start = 0, end; start < n; start = end)
	{
		KNode	   *k;

		for (end = start + 1; end < n && strcmp(work[end].url, work[start].url) == 0; end++)
			;
		k = knode_get(work[start].url);
		if (k == NULL)
			continue;
		k->seen = now;
		next = Min(next, keeper_renew_node(k, &work[start], end - start));
	}
	knodes_tidy(now);
	return next;
}

/* ---- the keeper: starting renewers ---- */

/* Register the worker for renewers[r]; false if none could be. */
static bool
keeper_start_renewer(int r)
{
	BackgroundWorker bgw;

	memset(&bgw, 0, sizeof(bgw));
	bgw.bgw_flags = BGWORKER_SHMEM_ACCESS | BGWORKER_BACKEND_DATABASE_CONNECTION;
	bgw.bgw_start_time = BgWorkerStart_ConsistentState;
	bgw.bgw_restart_time = BGW_NEVER_RESTART;	/* the keeper starts another */
	strlcpy(bgw.bgw_library_name, "rwlock", BGW_MAXLEN);
	strlcpy(bgw.bgw_function_name, "rw_renewer_main", BGW_MAXLEN);
	snprintf(bgw.bgw_name, BGW_MAXLEN, "rwlock renewer %d", r);
	strlcpy(bgw.bgw_type, "rwlock renewer", BGW_MAXLEN);
	bgw.bgw_main_arg = Int32GetDatum(r);
	return RegisterDynamicBackgroundWorker(&bgw, NULL);
}

/*
 * Give every URL that has holds a renewer (rw_holdtable_assign), and start
 * the workers of those it claimed. Until one runs, and for URLs no renewer
 * could be started for, the keeper renews the holds.
 */
static void
keeper_supervise(int64 now)
{
	int			start[RW_RENEWERS_MAX];
	int			nstart = rw_holdtable_assign(now, now >= register_after, start);

	for (int j = 0; j < nstart; j++)
	{
		if (keeper_start_renewer(start[j]))
			continue;
		rw_holdtable_renewer_failed(start[j]);
		if (now >= register_after)
			ereport(LOG,
					(errmsg("rwlock keeper could not start a worker to renew the leases of one Redis server; it renews them itself"),
					 errdetail("A server that stalls then delays the renewals of the other servers the keeper renews."),
					 errhint("Raise max_worker_processes.")));
		register_after = now + RENEWER_REGISTER_RETRY_MS;
	}
}

/* ---- the loop both run ---- */

static void
keeper_exit(int code, Datum arg)
{
	if (rw_holdtable_nslots() == 0)
		return;

	/*
	 * An error thrown under the table's lock (an out-of-memory in
	 * rw_holdtable_due's copies, under LW_SHARED) ends a background worker
	 * with the lock still held: taken again here, it would wait for itself,
	 * and every session's publish behind it. ProcKill releases LWLocks only
	 * after this callback; newer minor releases (15.20's shmem_exit) release
	 * them before any exit callback, older ones do not.
	 */
	LWLockReleaseAll();
	rw_holdtable_detach(my_renewer);
}

/* Common start of the keeper and a renewer: signals, memory, retries. */
static MemoryContext
keeper_begin(const char *appname)
{
	MemoryContext old;

	pqsignal(SIGTERM, die);
	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	BackgroundWorkerUnblockSignals();
	/* No database: only to show in pg_stat_activity, with wait events. */
	BackgroundWorkerInitializeConnection(NULL, NULL, 0);
	pgstat_report_appname(appname);
	rw_stats_attach();			/* no database: the row of database 0 */

	if (rw_holdtable_nslots() == 0)
		elog(FATAL, "rwlock keeper started without its shared memory");
	old = MemoryContextSwitchTo(TopMemoryContext);
	retry_at = palloc0(sizeof(int64) * rw_holdtable_nslots());
	retry_gen = palloc0(sizeof(uint64) * rw_holdtable_nslots());
	retry_n = palloc0(sizeof(int) * rw_holdtable_nslots());
	MemoryContextSwitchTo(old);
	return AllocSetContextCreate(TopMemoryContext, "rwlock keeper",
								 ALLOCSET_DEFAULT_SIZES);
}

/*
 * Renew, sleep, renew, until SIGTERM: the heartbeat says when this process
 * last went round (sessions rely on it: rw_holdtable_renews).
 */
static void
keeper_loop(MemoryContext cxt)
{
	int64		idle_since = rw_now_ms();

	for (;;)
	{
		int64		next;
		int64		now;
		long		ms;

		CHECK_FOR_INTERRUPTS();
		rw_call_begin();
		if (ConfigReloadPending)
		{
			ConfigReloadPending = false;
			ProcessConfigFile(PGC_SIGHUP);
		}
		now = rw_now_ms();
		rw_holdtable_beat(my_renewer, now);

		MemoryContextReset(cxt);
		{
			MemoryContext old = MemoryContextSwitchTo(cxt);

			if (my_renewer < 0)
				keeper_supervise(now);
			next = keeper_cycle();
			MemoryContextSwitchTo(old);
		}
		/* What the renewals' answers gave to log (rw_log_later). */
		rw_logs_flush();
		now = rw_now_ms();
		rw_holdtable_beat(my_renewer, now);

		if (cycle_had_holds)
			idle_since = now;
		else if (my_renewer >= 0 && now - idle_since > NODE_IDLE_MS &&
				 rw_holdtable_renewer_leave(my_renewer))
			proc_exit(0);		/* no hold to renew lately */

		ms = (long) Min(next - now, KEEPER_MAX_SLEEP_MS);
		if (ms > 0)
		{
			(void) WaitLatch(MyLatch,
							 WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
							 ms, PG_WAIT_EXTENSION);
			ResetLatch(MyLatch);
		}
	}
}

void
rw_keeper_main(Datum arg)
{
	MemoryContext cxt = keeper_begin("rwlock keeper");

	rw_holdtable_keeper_attach();
	on_shmem_exit(keeper_exit, (Datum) 0);
	elog(LOG, "rwlock keeper started: renewing leases of up to %d holds", rw_holdtable_nslots());
	keeper_loop(cxt);
}

/* A renewer: renews the holds of one Redis URL, renewers[arg]. */
void
rw_renewer_main(Datum arg)
{
	int			r = DatumGetInt32(arg);
	MemoryContext cxt = keeper_begin("rwlock renewer");
	char		url[RW_SPEC_MAX + 1];
	RwEndpoint	ep;
	char	   *why;

	if (!rw_holdtable_renewer_attach(r, url))
		proc_exit(0);			/* given up on, or started twice */
	my_renewer = r;
	on_shmem_exit(keeper_exit, (Datum) 0);
	elog(LOG, "rwlock renewer %d started: renewing the leases of holds at %s",
		 r, rw_parse_url(url, &ep, &why) ? ep.display : "?");
	keeper_loop(cxt);
}
