/*-------------------------------------------------------------------------
 *
 * keeper.c
 *	  The keeper: a background worker that renews the leases of every hold
 *	  of every session, and the shared-memory table where sessions publish
 *	  their holds for it (and for the redis_locks view).
 *
 * Only with rwlock in shared_preload_libraries. Without it there is no
 * table, the view is empty, and each session renews its own leases lazily
 * (renew.c: at every rwlock call, and by redis_renew()).
 *
 * The table: rwlock.max_holds slots, one per (session, lock name) held in
 * Redis, on a free list, under one LWLock. A session writes its slot when it
 * takes a lock in Redis (publish: one slot write under the lock, no Redis
 * work, no allocation) and clears it before it releases the lock in Redis,
 * and at exit before its releases. Stacked holds and mode changes of a hold
 * that is already published are written by the session into its own slot
 * without the lock (single-byte stores; the lock guards who owns a slot).
 *
 * Every publish and every clear stamps the slot with a new generation, from
 * one counter for the whole table. The keeper copies the due slots (those
 * past a third of their lease) with their generation under the lock in
 * shared mode, renews them with no lock held, pipelined, one batch per
 * Redis URL, on behalf of each slot's owner id, then writes the results
 * back under the lock in exclusive mode only into slots whose generation
 * did not change. So:
 *	- a hold released while its renewal was in flight: renew.lua finds the
 *	  owner not holding and returns 0 (it never re-creates anything), and
 *	  the result is dropped because the slot was cleared first;
 *	- a hold lost and taken again while its renewal was in flight: the new
 *	  publish has a new generation, so the stale "lost" is dropped;
 *	- a dead backend: its slot is cleared at exit; a slot whose pid has no
 *	  PGPROC is dropped, never renewed; a crashed backend makes the
 *	  postmaster reinitialise shared memory, which empties the table.
 * A renewal that finds the hold gone sets the slot's lost flag; the session
 * reports it at its next operation on that lock (held.c).
 *
 * The keeper keeps a connection per distinct URL, reconnects after any
 * failure at its next attempt, retries failed renewals after a short pause,
 * and closes connections no slot has used for a minute. It exits with code
 * 1 on SIGTERM or error, so the postmaster starts it again after a second.
 * While it is not running, sessions renew their own holds lazily.
 *
 *-------------------------------------------------------------------------
 */
#include "rwlock.h"

#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/lwlock.h"
#include "storage/proc.h"
#include "storage/procarray.h"
#include "storage/shmem.h"
#include "tcop/tcopprot.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#define RW_KEY_MAX		(RW_PREFIX_MAX + 3 * RW_NAME_MAX + 8)
#define KEEPER_BATCH	512		/* renewals per pipeline */
#define KEEPER_MAX_SLEEP_MS 1000
#define KEEPER_RETRY_MS 200		/* after a failed renewal */
#define KEEPER_STALE_MS 10000	/* a keeper silent this long is not relied on */
#define NODE_IDLE_MS	60000	/* close a connection no slot used this long */

typedef struct RwSlot
{
	bool		in_use;
	bool		lost;			/* set by the keeper */
	uint8		modes[2];		/* strongest RwMode per RwLevel */
	int			next_free;
	int			pid;
	Oid			datid;
	int			lease_ms;
	uint64		gen;
	int64		token;
	TimestampTz acquired;
	pg_atomic_uint64 renewed;	/* monotonic ms: last renewal sent (or the
								 * acquisition) */
	char		owner[RW_OWNER_MAX];
	char		url[RW_SPEC_MAX + 1];	/* the node's spec (url.c) */
	char		key[RW_KEY_MAX];	/* the lock's hash key; :q follows */
	char		name[RW_NAME_MAX + 1];
} RwSlot;

typedef struct RwShared
{
	LWLock	   *lock;
	int			nslots;
	int			free_head;
	uint64		next_gen;
	int			keeper_pid;		/* 0 when not running */
	Latch	   *keeper_latch;
	pg_atomic_uint64 heartbeat; /* monotonic ms */
	int64		keeper_wake;	/* monotonic ms: when the keeper looks again */
	RwSlot		slots[FLEXIBLE_ARRAY_MEMBER];
} RwShared;

static RwShared *shared = NULL;
static int	rw_max_holds = 1024;
static shmem_request_hook_type prev_shmem_request_hook = NULL;
static shmem_startup_hook_type prev_shmem_startup_hook = NULL;

PGDLLEXPORT void rw_keeper_main(Datum arg);

/* ---------------------------------------------------------------------
 * Shared memory
 * --------------------------------------------------------------------- */

static Size
keeper_shmem_size(void)
{
	return add_size(offsetof(RwShared, slots),
					mul_size(sizeof(RwSlot), rw_max_holds));
}

static void
keeper_shmem_request(void)
{
	if (prev_shmem_request_hook)
		prev_shmem_request_hook();
	RequestAddinShmemSpace(keeper_shmem_size());
	RequestNamedLWLockTranche("rwlock", 1);
}

static void
keeper_shmem_startup(void)
{
	bool		found;

	if (prev_shmem_startup_hook)
		prev_shmem_startup_hook();
	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	shared = ShmemInitStruct("rwlock holds", keeper_shmem_size(), &found);
	if (!found)
	{
		/* Also after a crash: the table starts empty, dead holds unrenewed. */
		memset(shared, 0, offsetof(RwShared, slots));
		shared->lock = &(GetNamedLWLockTranche("rwlock"))->lock;
		shared->nslots = rw_max_holds;
		shared->next_gen = 1;
		pg_atomic_init_u64(&shared->heartbeat, 0);
		shared->keeper_wake = PG_INT64_MAX;
		for (int i = 0; i < rw_max_holds; i++)
		{
			RwSlot	   *s = &shared->slots[i];

			s->in_use = false;
			s->next_free = i + 1 < rw_max_holds ? i + 1 : -1;
			pg_atomic_init_u64(&s->renewed, 0);
		}
		shared->free_head = 0;
	}
	LWLockRelease(AddinShmemInitLock);
}

/* Called first thing in _PG_init. */
void
rw_keeper_init(void)
{
	BackgroundWorker bgw;

	if (!process_shared_preload_libraries_in_progress)
		return;

	/* Before rw_define_gucs reserves the prefix. */
	DefineCustomIntVariable("rwlock.max_holds",
							"Holds the shared table can publish for the keeper and redis_locks.",
							"One per session and lock name held. Holds beyond it are renewed by their own session.",
							&rw_max_holds,
							1024, 16, 1000000,
							PGC_POSTMASTER,
							0,
							NULL, NULL, NULL);

	prev_shmem_request_hook = shmem_request_hook;
	shmem_request_hook = keeper_shmem_request;
	prev_shmem_startup_hook = shmem_startup_hook;
	shmem_startup_hook = keeper_shmem_startup;

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
 * The session side (called from held.c)
 * --------------------------------------------------------------------- */

/* Whether a keeper is alive and renewing: then sessions leave it the work. */
bool
rw_keeper_running(void)
{
	uint64		beat;

	if (shared == NULL || shared->keeper_pid == 0)
		return false;
	beat = pg_atomic_read_u64(&shared->heartbeat);
	return rw_now_ms() - (int64) beat < KEEPER_STALE_MS;
}

/*
 * Publish a hold that was just taken (or taken again) in Redis. slot is the
 * hold's slot or -1; returns its slot, or -1 if there is no table or it is
 * full (then the session renews the hold itself; *full is set the first
 * time, for the caller to warn once its records are right). One slot write
 * under the lock: no Redis, no allocation, no ereport.
 */
int
rw_keeper_publish(int slot, const char *name, const char *url,
				  const char *key, const char *owner, int64 token,
				  TimestampTz acquired, int64 renewed_ms, int lease_ms,
				  bool *full)
{
	static bool warned = false;
	RwSlot	   *s;
	int64		due = renewed_ms + lease_ms / 3;
	bool		wake;

	*full = false;
	if (shared == NULL)
		return -1;
	LWLockAcquire(shared->lock, LW_EXCLUSIVE);
	if (slot >= 0 && !(shared->slots[slot].in_use &&
					   shared->slots[slot].pid == MyProcPid))
		slot = -1;				/* not ours any more (cannot happen): take a new one */
	if (slot < 0)
	{
		slot = shared->free_head;
		if (slot < 0)
		{
			LWLockRelease(shared->lock);
			*full = !warned;
			warned = true;
			return -1;
		}
		s = &shared->slots[slot];
		shared->free_head = s->next_free;
		s->in_use = true;
		s->pid = MyProcPid;
		s->datid = MyDatabaseId;
		s->modes[0] = s->modes[1] = RW_NONE;
		strlcpy(s->owner, owner, sizeof(s->owner));
		strlcpy(s->url, url, sizeof(s->url));
		strlcpy(s->key, key, sizeof(s->key));
		strlcpy(s->name, name, sizeof(s->name));
		s->acquired = acquired;
	}
	else
		s = &shared->slots[slot];
	s->gen = shared->next_gen++;
	s->lost = false;
	s->token = token;
	s->lease_ms = lease_ms;
	pg_atomic_write_u64(&s->renewed, (uint64) renewed_ms);
	wake = due < shared->keeper_wake;
	if (wake)
		shared->keeper_wake = due;
	if (wake && shared->keeper_latch != NULL)
		SetLatch(shared->keeper_latch);
	LWLockRelease(shared->lock);
	return slot;
}

/* Take a hold out of the table, before it is released in Redis. */
void
rw_keeper_unpublish(int slot)
{
	RwSlot	   *s;

	if (shared == NULL || slot < 0)
		return;
	LWLockAcquire(shared->lock, LW_EXCLUSIVE);
	s = &shared->slots[slot];
	if (s->in_use && s->pid == MyProcPid)
	{
		s->in_use = false;
		s->gen = shared->next_gen++;
		s->next_free = shared->free_head;
		shared->free_head = slot;
	}
	LWLockRelease(shared->lock);
}

/* The strongest mode held at each level, for redis_locks. Owner only. */
void
rw_keeper_set_modes(int slot, RwMode session_mode, RwMode xact_mode)
{
	if (shared == NULL || slot < 0)
		return;
	shared->slots[slot].modes[RW_SESSION] = session_mode;
	shared->slots[slot].modes[RW_XACT] = xact_mode;
}

/*
 * What the keeper found out about a published hold: whether it was lost,
 * and when its lease was last renewed. Owner only; lock-free reads of
 * fields the keeper writes under the lock.
 */
bool
rw_keeper_state(int slot, int64 *renewed_ms)
{
	RwSlot	   *s;

	if (shared == NULL || slot < 0)
		return false;
	s = &shared->slots[slot];
	*renewed_ms = Max(*renewed_ms, (int64) pg_atomic_read_u64(&s->renewed));
	pg_read_barrier();
	return s->lost;
}

/* The session renewed (or found lost) a published hold itself. */
void
rw_keeper_renewed(int slot, int64 renewed_ms, bool lost)
{
	RwSlot	   *s;

	if (shared == NULL || slot < 0)
		return;
	LWLockAcquire(shared->lock, LW_EXCLUSIVE);
	s = &shared->slots[slot];
	if (s->in_use && s->pid == MyProcPid)
	{
		if (lost)
			s->lost = true;
		else if ((int64) pg_atomic_read_u64(&s->renewed) < renewed_ms)
			pg_atomic_write_u64(&s->renewed, (uint64) renewed_ms);
	}
	LWLockRelease(shared->lock);
}

/* ---------------------------------------------------------------------
 * The keeper
 * --------------------------------------------------------------------- */

/* A Redis node the keeper talks to, by URL. */
typedef struct KNode
{
	RwNode		node;
	int64		seen;			/* monotonic ms: a slot used this URL */
	bool		failing;		/* the last renewal failed: logged once */
	struct KNode *next;
} KNode;

/* A due renewal, copied out of the table. */
typedef struct KWork
{
	int			slot;
	uint64		gen;
	int			pid;
	int			lease_ms;
	char	   *owner;
	char	   *url;
	RwKeys		keys;
} KWork;

static KNode *knodes = NULL;

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

static int
keeper_work_cmp(const void *a, const void *b)
{
	return strcmp(((const KWork *) a)->url, ((const KWork *) b)->url);
}

/* Drop a slot whose backend is gone without clearing it. */
static void
keeper_drop_dead(KWork *w)
{
	RwSlot	   *s = &shared->slots[w->slot];

	LWLockAcquire(shared->lock, LW_EXCLUSIVE);
	if (s->in_use && s->gen == w->gen)
	{
		elog(LOG, "rwlock keeper: dropping a hold of \"%s\" published by process %d, which is gone",
			 s->name, s->pid);
		s->in_use = false;
		s->gen = shared->next_gen++;
		s->next_free = shared->free_head;
		shared->free_head = w->slot;
	}
	LWLockRelease(shared->lock);
}

/* Renew one URL's due holds; returns false if Redis could not be asked. */
static bool
keeper_renew_node(KNode *k, KWork *work, int n)
{
	RwKeys	  **keys = palloc(sizeof(RwKeys *) * n);
	const char **owners = palloc(sizeof(char *) * n);
	int		   *leases = palloc(sizeof(int) * n);
	int		   *held = palloc(sizeof(int) * n);
	int64		sent = rw_now_ms();
	RwError		err;

	for (int i = 0; i < n; i++)
	{
		keys[i] = &work[i].keys;
		owners[i] = work[i].owner;
		leases[i] = work[i].lease_ms;
	}
	if (!rw_quorum_renew(&k->node, keys, owners, leases, n, held, &err))
	{
		if (!k->failing)
			ereport(LOG,
					(errcode(ERRCODE_CONNECTION_FAILURE),
					 errmsg("rwlock keeper could not renew leases at %s", k->node.ep.display),
					 errdetail("%s", err.msg)));
		k->failing = true;
		return false;
	}
	if (k->failing)
		ereport(LOG,
				(errmsg("rwlock keeper renews leases at %s again", k->node.ep.display)));
	k->failing = false;

	LWLockAcquire(shared->lock, LW_EXCLUSIVE);
	for (int i = 0; i < n; i++)
	{
		RwSlot	   *s = &shared->slots[work[i].slot];

		/* Released, or taken again, since it was copied: not ours to touch. */
		if (!s->in_use || s->gen != work[i].gen)
			continue;
		if (held[i] == 1)
			pg_atomic_write_u64(&s->renewed, (uint64) sent);
		else if (held[i] == 0)
			s->lost = true;
	}
	LWLockRelease(shared->lock);
	/* An error reply (logged) is retried at the keeper's normal pace. */
	return true;
}

/* One pass: renew what is due. Returns when to look again (monotonic). */
static int64
keeper_cycle(void)
{
	int64		now = rw_now_ms();
	int64		next = now + KEEPER_MAX_SLEEP_MS;
	KWork	   *work = palloc(sizeof(KWork) * KEEPER_BATCH);
	int			n = 0;

	LWLockAcquire(shared->lock, LW_SHARED);
	for (int i = 0; i < shared->nslots; i++)
	{
		RwSlot	   *s = &shared->slots[i];
		int64		due;
		KNode	   *k;

		if (!s->in_use || s->lost)
			continue;
		if ((k = knode_find(s->url)) != NULL)
			k->seen = now;
		due = (int64) pg_atomic_read_u64(&s->renewed) + s->lease_ms / 3;
		if (due > now)
		{
			next = Min(next, due);
			continue;
		}
		/* Renewed now, it is due again a third of its lease from now. */
		next = Min(next, now + s->lease_ms / 3);
		if (n == KEEPER_BATCH)
		{
			next = now;			/* more next time round */
			continue;
		}
		work[n].slot = i;
		work[n].gen = s->gen;
		work[n].pid = s->pid;
		work[n].lease_ms = s->lease_ms;
		work[n].owner = pstrdup(s->owner);
		work[n].url = pstrdup(s->url);
		work[n].keys.key[0] = pstrdup(s->key);
		n++;
	}
	/* Sessions that publish a hold due before this wake us up. */
	shared->keeper_wake = next;
	LWLockRelease(shared->lock);

	/* Never renew for a backend that is gone. */
	for (int i = 0; i < n; i++)
	{
		if (BackendPidGetProc(work[i].pid) == NULL)
		{
			keeper_drop_dead(&work[i]);
			work[i--] = work[--n];
			continue;
		}
		work[i].keys.len[0] = strlen(work[i].keys.key[0]);
		work[i].keys.key[1] = psprintf("%s:q", work[i].keys.key[0]);
		work[i].keys.len[1] = work[i].keys.len[0] + 2;
	}

	qsort(work, n, sizeof(KWork), keeper_work_cmp);
	for (int start = 0, end; start < n; start = end)
	{
		KNode	   *k;

		for (end = start + 1; end < n && strcmp(work[end].url, work[start].url) == 0; end++)
			;
		k = knode_get(work[start].url);
		if (k == NULL)
			continue;
		k->seen = now;
		if (!keeper_renew_node(k, &work[start], end - start))
			next = Min(next, rw_now_ms() + KEEPER_RETRY_MS);
	}
	knodes_tidy(now);
	return next;
}

static void
keeper_exit(int code, Datum arg)
{
	if (shared == NULL)
		return;
	LWLockAcquire(shared->lock, LW_EXCLUSIVE);
	if (shared->keeper_pid == MyProcPid)
	{
		shared->keeper_pid = 0;
		shared->keeper_latch = NULL;
	}
	LWLockRelease(shared->lock);
}

void
rw_keeper_main(Datum arg)
{
	MemoryContext cxt;

	pqsignal(SIGTERM, die);
	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	BackgroundWorkerUnblockSignals();
	/* No database: only to show in pg_stat_activity, with wait events. */
	BackgroundWorkerInitializeConnection(NULL, NULL, 0);
	pgstat_report_appname("rwlock keeper");

	if (shared == NULL)
		elog(FATAL, "rwlock keeper started without its shared memory");
	cxt = AllocSetContextCreate(TopMemoryContext, "rwlock keeper",
								ALLOCSET_DEFAULT_SIZES);

	LWLockAcquire(shared->lock, LW_EXCLUSIVE);
	shared->keeper_pid = MyProcPid;
	shared->keeper_latch = MyLatch;
	shared->keeper_wake = 0;
	LWLockRelease(shared->lock);
	pg_atomic_write_u64(&shared->heartbeat, (uint64) rw_now_ms());
	on_shmem_exit(keeper_exit, (Datum) 0);
	elog(LOG, "rwlock keeper started: renewing leases of up to %d holds", shared->nslots);

	for (;;)
	{
		int64		next;
		long		ms;

		CHECK_FOR_INTERRUPTS();
		rw_call_begin();
		if (ConfigReloadPending)
		{
			ConfigReloadPending = false;
			ProcessConfigFile(PGC_SIGHUP);
		}
		pg_atomic_write_u64(&shared->heartbeat, (uint64) rw_now_ms());

		MemoryContextReset(cxt);
		{
			MemoryContext old = MemoryContextSwitchTo(cxt);

			next = keeper_cycle();
			MemoryContextSwitchTo(old);
		}
		pg_atomic_write_u64(&shared->heartbeat, (uint64) rw_now_ms());

		ms = (long) Min(next - rw_now_ms(), KEEPER_MAX_SLEEP_MS);
		if (ms > 0)
		{
			(void) WaitLatch(MyLatch,
							 WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
							 ms, PG_WAIT_EXTENSION);
			ResetLatch(MyLatch);
		}
	}
}

/* ---------------------------------------------------------------------
 * SQL: redis_locks
 * --------------------------------------------------------------------- */

/*
 * Every published hold, copied under the lock (redis_locks of version 1.2,
 * introspect.c).
 */
int
rw_keeper_rows(RwKeeperRow **rows)
{
	int			n = 0;

	*rows = NULL;
	if (shared == NULL)
		return 0;
	*rows = palloc(sizeof(RwKeeperRow) * (shared->nslots + 1));
	LWLockAcquire(shared->lock, LW_SHARED);
	for (int i = 0; i < shared->nslots; i++)
	{
		RwSlot	   *s = &shared->slots[i];
		RwKeeperRow *r = &(*rows)[n];

		if (!s->in_use)
			continue;
		r->pid = s->pid;
		r->datid = s->datid;
		r->modes[0] = s->modes[0];
		r->modes[1] = s->modes[1];
		r->lost = s->lost;
		r->token = s->token;
		r->acquired = s->acquired;
		r->lease_end_ms = (int64) pg_atomic_read_u64(&s->renewed) + s->lease_ms;
		r->owner = pstrdup(s->owner);
		r->name = pstrdup(s->name);
		n++;
	}
	LWLockRelease(shared->lock);
	return n;
}

/* A copy of one slot, taken under the lock, for the view. */
typedef struct SlotRow
{
	int			pid;
	uint8		modes[2];
	bool		lost;
	int64		token;
	TimestampTz acquired;
	int64		lease_end_ms;	/* monotonic */
	char	   *owner;
	char	   *name;
} SlotRow;

/*
 * redis_locks: every hold published by every session of this server, one
 * row per session, name and level. Empty unless rwlock is preloaded.
 */
PG_FUNCTION_INFO_V1(redis_locks);
Datum
redis_locks(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	SlotRow    *rows;
	int			n = 0;
	int64		now = rw_now_ms();

	InitMaterializedSRF(fcinfo, 0);
	if (shared == NULL)
		return (Datum) 0;

	rows = palloc(sizeof(SlotRow) * shared->nslots);
	LWLockAcquire(shared->lock, LW_SHARED);
	for (int i = 0; i < shared->nslots; i++)
	{
		RwSlot	   *s = &shared->slots[i];

		if (!s->in_use)
			continue;
		rows[n].pid = s->pid;
		rows[n].modes[0] = s->modes[0];
		rows[n].modes[1] = s->modes[1];
		rows[n].lost = s->lost;
		rows[n].token = s->token;
		rows[n].acquired = s->acquired;
		rows[n].lease_end_ms = (int64) pg_atomic_read_u64(&s->renewed) + s->lease_ms;
		rows[n].owner = pstrdup(s->owner);
		rows[n].name = pstrdup(s->name);
		n++;
	}
	LWLockRelease(shared->lock);

	for (int i = 0; i < n; i++)
	{
		for (int level = 0; level < 2; level++)
		{
			Datum		values[9];
			bool		nulls[9] = {0};
			RwMode		m = (RwMode) rows[i].modes[level];

			if (m == RW_NONE)
				continue;
			values[0] = Int32GetDatum(rows[i].pid);
			values[1] = CStringGetTextDatum(rows[i].name);
			values[2] = CStringGetTextDatum(m == RW_WRITE ? "write" : "read");
			values[3] = CStringGetTextDatum(level == RW_SESSION ? "session" : "xact");
			values[4] = Int64GetDatum(rows[i].token);
			values[5] = TimestampTzGetDatum(rows[i].acquired);
			values[6] = TimestampTzGetDatum(rw_mono_to_timestamp(rows[i].lease_end_ms));
			values[7] = CStringGetTextDatum(rows[i].lost ? "lost" :
											rows[i].lease_end_ms < now ? "expired" : "held");
			values[8] = CStringGetTextDatum(rows[i].owner);
			tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
		}
	}
	return (Datum) 0;
}
