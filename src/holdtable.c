/*-------------------------------------------------------------------------
 *
 * holdtable.c
 *	  The shared table of every session's holds: where sessions publish the
 *	  holds they take in Redis, and where the keeper and its renewers
 *	  (keeper.c) find what to renew or release for them. Also the shared
 *	  memory of protocol.c's records per PGPROC (the request sequence, the
 *	  owner id registered there).
 *
 * Only with rwlock in shared_preload_libraries. Without it there is no
 * table, redis_locks is empty, and each session renews its own leases
 * lazily (renew.c: at every rwlock call, and by redis_renew()).
 *
 * This file is the table's only door: both sides go through the narrow
 * interface below and never see a slot.
 *	- Sessions (holds.c, renew.c): publish a hold, change its modes, take
 *	  it out before its release, mark it exiting or orphan at exit, read
 *	  what the keeper found (renewed, lost), renew it themselves when its
 *	  renewer is silent (rw_holdtable_renews). No Redis here, no release.
 *	- The keeper and its renewers (keeper.c): copy the due holds
 *	  (rw_holdtable_due), write back the renewals' results
 *	  (rw_holdtable_renewals), free what they released or what is moot
 *	  (rw_holdtable_free, rw_holdtable_moot), and the renewers' registry.
 *	- Views: rw_holdtable_rows (introspect.c).
 *
 * The table: rwlock.max_holds slots, one per (session, lock name) held in
 * Redis, on a free list, under one LWLock. A session writes its slot when it
 * takes a lock in Redis (publish: one slot write under the lock, no Redis
 * work, no allocation) and clears it before it releases the lock in Redis,
 * and at exit before its releases. A lock call whose new hold finds no free
 * slot fails (held.c). Stacked holds and mode changes of a hold that is
 * already published are written by the session into its own slot without
 * the lock (single-byte stores; the lock guards who owns a slot).
 *
 * Every publish and every clear stamps the slot with a new generation, from
 * one counter for the whole table. The keeper copies the due slots (those
 * past a third of their lease) with their generation under the lock in
 * shared mode, renews them with no lock held, then writes the results back
 * under the lock in exclusive mode only into slots whose generation did not
 * change. So:
 *	- a hold released while its renewal was in flight: renew.lua finds the
 *	  owner not holding and returns 0 (it never re-creates anything), and
 *	  the result is dropped because the slot was cleared first;
 *	- a hold lost and taken again while its renewal was in flight: the new
 *	  publish has a new generation, so the stale "lost" is dropped;
 *	- a dead backend: its slot is cleared at exit; a slot whose owner is no
 *	  live backend (its owner id is not the one registered at its PGPROC:
 *	  rw_owner_live_pid, never a pid that a later backend may have) is
 *	  released on its owner's behalf, never renewed; a crashed backend
 *	  makes the postmaster reinitialise shared memory, which empties the
 *	  table.
 * A release the keeper makes for an exited backend is given up once moot
 * (rw_holdtable_moot): the hold was found lost, or its lease has certainly
 * run out (nothing renewed it after its backend stopped, or after the
 * keeper's last renewal of it ended, by a lease and the clock drift), so
 * the table never fills with holds of servers that are gone.
 *
 *-------------------------------------------------------------------------
 */
#include "rwlock.h"

#include "access/twophase.h"
#include "miscadmin.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/lwlock.h"
#include "storage/proc.h"
#include "storage/shmem.h"
#include "utils/guc.h"
#include "utils/memutils.h"

#define RW_KEY_MAX		(RW_PREFIX_MAX + 3 * RW_NAME_MAX + 8)
#define KEEPER_STALE_MS 10000	/* a renewer silent this long (or a third of
								 * the lease) is not relied on */
#define RENEWERS_MAX	RW_RENEWERS_MAX
#define RENEWER_START_MS 10000	/* a worker not up after this is given up */

typedef struct RwSlot
{
	bool		in_use;
	bool		lost;			/* set by the keeper */
	uint8		exit;			/* SLOT_LIVE, or its backend is exiting */
	int			renewer;		/* the renewer of its URL, or -1: the keeper */
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
	int			procno;		/* the owner's PGPROC number: its request
								 * sequence is seqs[procno] (protocol 3) */
	int64		tried;			/* monotonic ms: the end of the keeper's
								 * latest renewal of it, answered or not (one
								 * not answered may have run until then) */
	int64		stopped;		/* monotonic ms: when its backend stopped
								 * renewing it (exiting, or found gone); 0
								 * while live */
	bool		release_failed; /* the keeper logged that it could not
								 * release it */
	char		owner[RW_OWNER_MAX];
	char		url[RW_SPEC_MAX + 1];	/* the node's spec (url.c) */
	char		key[RW_KEY_MAX];	/* the lock's hash key; :q follows */
	char		name[RW_NAME_MAX + 1];
} RwSlot;

/*
 * A slot's exit: its backend is releasing it at exit (not renewed, kept),
 * or left it for the keeper to release (the exit's release did not get
 * through: no connection could be made within the exit's budget).
 */
#define SLOT_LIVE		0
#define SLOT_EXITING	1
#define SLOT_ORPHAN		2

/*
 * A renewer: the worker that renews the holds of one Redis server (URL).
 * The keeper starts one per URL that has holds; the renewer leaves when no
 * hold has used its URL for NODE_IDLE_MS. Slots point to it (renewer).
 */
typedef enum RenewerState
{
	RENEWER_FREE,
	RENEWER_STARTING,			/* registered by the keeper, not up yet */
	RENEWER_RUNNING
} RenewerState;

typedef struct RwRenewer
{
	RenewerState state;
	int			pid;			/* when running */
	int64		since_ms;		/* monotonic: when it was registered */
	Latch	   *latch;
	pg_atomic_uint64 heartbeat; /* monotonic ms */
	int64		wake;			/* monotonic ms: when it looks again */
	char		url[RW_SPEC_MAX + 1];
} RwRenewer;

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
	RwRenewer	renewers[RENEWERS_MAX];
	RwSlot		slots[FLEXIBLE_ARRAY_MEMBER];
} RwShared;

static RwShared *shared = NULL;
/*
 * Every PGPROC's request sequence (protocol 3, protocol.c): a session's
 * requests and the keeper's on its behalf draw from one counter, so a
 * renewal goes as of the owner's newest request and a release on its
 * behalf after its exit is newer than all of them. Never reset: a later
 * backend with the same PGPROC carries the count on.
 */
static pg_atomic_uint64 *seqs = NULL;
static int	rw_max_holds = 1024;
static shmem_request_hook_type prev_shmem_request_hook = NULL;
static shmem_startup_hook_type prev_shmem_startup_hook = NULL;

/* ---------------------------------------------------------------------
 * Shared memory
 * --------------------------------------------------------------------- */

static Size
holdtable_shmem_size(void)
{
	return add_size(offsetof(RwShared, slots),
					mul_size(sizeof(RwSlot), rw_max_holds));
}

/* PGPROCs there can be: proc.c's count (backends, auxiliaries, 2PC). */
static int
holdtable_nprocs(void)
{
	return MaxBackends + NUM_AUXILIARY_PROCS + max_prepared_xacts;
}

static void
holdtable_shmem_request(void)
{
	if (prev_shmem_request_hook)
		prev_shmem_request_hook();
	RequestAddinShmemSpace(holdtable_shmem_size());
	RequestAddinShmemSpace(mul_size(sizeof(pg_atomic_uint64), holdtable_nprocs()));
	RequestAddinShmemSpace(rw_proto_owners_size(holdtable_nprocs()));
	RequestNamedLWLockTranche("rwlock", 1);
}

static void
holdtable_shmem_startup(void)
{
	bool		found;
	void	   *owners;

	if (prev_shmem_startup_hook)
		prev_shmem_startup_hook();
	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	shared = ShmemInitStruct("rwlock holds", holdtable_shmem_size(), &found);
	if (!found)
	{
		/* Also after a crash: the table starts empty, dead holds unrenewed. */
		memset(shared, 0, offsetof(RwShared, slots));
		shared->lock = &(GetNamedLWLockTranche("rwlock"))->lock;
		shared->nslots = rw_max_holds;
		shared->next_gen = 1;
		pg_atomic_init_u64(&shared->heartbeat, 0);
		shared->keeper_wake = PG_INT64_MAX;
		for (int i = 0; i < RENEWERS_MAX; i++)
		{
			shared->renewers[i].state = RENEWER_FREE;
			pg_atomic_init_u64(&shared->renewers[i].heartbeat, 0);
		}
		for (int i = 0; i < rw_max_holds; i++)
		{
			RwSlot	   *s = &shared->slots[i];

			s->in_use = false;
			s->renewer = -1;
			s->next_free = i + 1 < rw_max_holds ? i + 1 : -1;
			pg_atomic_init_u64(&s->renewed, 0);
		}
		shared->free_head = 0;
	}
	seqs = ShmemInitStruct("rwlock request sequences",
						   mul_size(sizeof(pg_atomic_uint64), holdtable_nprocs()),
						   &found);
	if (!found)
		for (int i = 0; i < holdtable_nprocs(); i++)
			pg_atomic_init_u64(&seqs[i], 0);
	rw_proto_seq_share(seqs);
	owners = ShmemInitStruct("rwlock owners",
							 rw_proto_owners_size(holdtable_nprocs()), &found);
	rw_proto_owners_share(owners, holdtable_nprocs(), !found);
	LWLockRelease(AddinShmemInitLock);
}

/*
 * In _PG_init, first (rw_keeper_init): rwlock.max_holds and the shared
 * memory, when the library is preloaded.
 */
void
rw_holdtable_init(void)
{
	/* Before rw_define_gucs reserves the prefix. */
	DefineCustomIntVariable("rwlock.max_holds",
							"Holds the shared table can publish for the keeper and redis_locks.",
							"One per session and lock name held. A lock call that needs a slot when none is free fails.",
							&rw_max_holds,
							1024, 16, 1000000,
							PGC_POSTMASTER,
							0,
							NULL, NULL, NULL);

	prev_shmem_request_hook = shmem_request_hook;
	shmem_request_hook = holdtable_shmem_request;
	prev_shmem_startup_hook = shmem_startup_hook;
	shmem_startup_hook = holdtable_shmem_startup;
}

/* ---------------------------------------------------------------------
 * The session side (holds.c, renew.c)
 * --------------------------------------------------------------------- */

/*
 * How long a renewer may be silent before sessions stop relying on it: a
 * third of the lease (at most KEEPER_STALE_MS), so that a session that
 * makes calls renews its holds itself with a third of the lease to spare
 * when the process that should renew them is stopped or stuck. A renewer
 * wakes at least every sixth of the shortest lease it renews.
 */
static int64
holdtable_stale_ms(int lease_ms)
{
	return Min(KEEPER_STALE_MS, lease_ms / 3);
}

/*
 * Whether the hold published in slot is renewed by a process that is alive
 * and not silent for long: the renewer of its URL, or the keeper itself
 * while that is not running (starting, or none could be started). Then the
 * session leaves the hold to it. Lock-free reads: at worst the session
 * renews a hold the keeper renews too, which is harmless.
 */
bool
rw_holdtable_renews(int slot, int lease_ms)
{
	int			r;
	uint64		beat;

	if (shared == NULL || slot < 0)
		return false;
	r = ((volatile RwSlot *) &shared->slots[slot])->renewer;
	if (r >= 0 && r < RENEWERS_MAX &&
		((volatile RwRenewer *) &shared->renewers[r])->state == RENEWER_RUNNING)
		beat = pg_atomic_read_u64(&shared->renewers[r].heartbeat);
	else if (((volatile RwShared *) shared)->keeper_pid != 0)
		beat = pg_atomic_read_u64(&shared->heartbeat);
	else
		return false;
	return rw_now_ms() - (int64) beat < holdtable_stale_ms(lease_ms);
}

/* The renewer serving url, or -1. Under the lock. */
static int
renewer_of_url(const char *url)
{
	for (int r = 0; r < RENEWERS_MAX; r++)
		if (shared->renewers[r].state != RENEWER_FREE &&
			strcmp(shared->renewers[r].url, url) == 0)
			return r;
	return -1;
}

/*
 * Tell whoever renews slot s that it is due at `due`, if that is before it
 * meant to look again: its renewer if running, else the keeper (which also
 * starts renewers). Under the lock in exclusive mode.
 */
static void
holdtable_wake_for(RwSlot *s, int64 due)
{
	RwRenewer  *r = s->renewer >= 0 ? &shared->renewers[s->renewer] : NULL;

	if (r != NULL && r->state == RENEWER_RUNNING)
	{
		if (due < r->wake)
		{
			r->wake = due;
			if (r->latch != NULL)
				SetLatch(r->latch);
		}
		return;
	}
	/* No renewer running for it: the keeper renews it, or starts one. */
	if (r == NULL)
		due = Min(due, rw_now_ms());
	if (due < shared->keeper_wake)
	{
		shared->keeper_wake = due;
		if (shared->keeper_latch != NULL)
			SetLatch(shared->keeper_latch);
	}
}

/* Wake the keeper now (a cut-off wait's leftovers to withdraw: waiters.c). */
void
rw_holdtable_wake_keeper(void)
{
	if (shared == NULL)
		return;
	LWLockAcquire(shared->lock, LW_EXCLUSIVE);
	shared->keeper_wake = rw_now_ms();
	if (shared->keeper_latch != NULL)
		SetLatch(shared->keeper_latch);
	LWLockRelease(shared->lock);
}

/*
 * Publish a hold that was just taken (or taken again) in Redis. slot is the
 * hold's slot or -1; returns its slot, or -1 if there is no table (the
 * session renews its holds itself) or it is full (*full is set: the caller
 * gives the hold back and fails the lock call, held.c). One slot write
 * under the lock: no Redis, no allocation, no ereport.
 */
int
rw_holdtable_publish(int slot, const char *name, const char *url,
				  const char *key, const char *owner, int64 token,
				  TimestampTz acquired, int64 renewed_ms, int lease_ms,
				  bool *full)
{
	RwSlot	   *s;
	int64		due = renewed_ms + lease_ms / 3;

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
			*full = true;
			return -1;
		}
		s = &shared->slots[slot];
		shared->free_head = s->next_free;
		s->in_use = true;
		s->pid = MyProcPid;
		s->procno = MyProc->pgprocno;
		s->datid = MyDatabaseId;
		s->modes[0] = s->modes[1] = RW_NONE;
		strlcpy(s->owner, owner, sizeof(s->owner));
		strlcpy(s->url, url, sizeof(s->url));
		strlcpy(s->key, key, sizeof(s->key));
		strlcpy(s->name, name, sizeof(s->name));
		s->acquired = acquired;
		s->renewer = renewer_of_url(url);
	}
	else
		s = &shared->slots[slot];
	s->gen = shared->next_gen++;
	s->lost = false;
	s->exit = SLOT_LIVE;
	s->tried = 0;
	s->stopped = 0;
	s->release_failed = false;
	s->token = token;
	s->lease_ms = lease_ms;
	pg_atomic_write_u64(&s->renewed, (uint64) renewed_ms);
	holdtable_wake_for(s, due);
	LWLockRelease(shared->lock);
	return slot;
}

/* The table's size (rwlock.max_holds), for messages. */
int
rw_holdtable_max_holds(void)
{
	return rw_max_holds;
}

/* Take a hold out of the table, before it is released in Redis. */
void
rw_holdtable_unpublish(int slot)
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

/*
 * A hold's exit, in its own slot (owner only). SLOT_EXITING: before its
 * release is sent at exit, not renewed any more but kept. SLOT_ORPHAN: the
 * release did not get through, so whoever renews the slot is woken to
 * release it on the owner's behalf rather than leave it to its lease. A
 * new generation drops what a renewal in flight finds.
 */
static void
holdtable_set_exit(int slot, uint8 exit)
{
	RwSlot	   *s;

	if (shared == NULL || slot < 0)
		return;
	LWLockAcquire(shared->lock, LW_EXCLUSIVE);
	s = &shared->slots[slot];
	if (s->in_use && s->pid == MyProcPid)
	{
		s->exit = exit;
		/* Every renewal this backend sent has ended by now. */
		if (s->stopped == 0)
			s->stopped = rw_now_ms();
		s->gen = shared->next_gen++;
		if (exit == SLOT_ORPHAN)
			holdtable_wake_for(s, rw_now_ms());
	}
	LWLockRelease(shared->lock);
}

void
rw_holdtable_exiting(int slot)
{
	holdtable_set_exit(slot, SLOT_EXITING);
}

void
rw_holdtable_orphan(int slot)
{
	holdtable_set_exit(slot, SLOT_ORPHAN);
}

/* The strongest mode held at each level, for redis_locks. Owner only. */
void
rw_holdtable_set_modes(int slot, RwMode session_mode, RwMode xact_mode)
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
rw_holdtable_state(int slot, int64 *renewed_ms)
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
rw_holdtable_renewed(int slot, int64 renewed_ms, bool lost)
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
 * The keeper's side (keeper.c)
 * --------------------------------------------------------------------- */

/* Slots of the table; 0 without one. */
int
rw_holdtable_nslots(void)
{
	return shared != NULL ? shared->nslots : 0;
}

/*
 * Whether the backend that published slot s is alive: its owner id is the
 * one registered at its PGPROC, by the same pid (never a later backend
 * that has its pid or PGPROC now).
 */
static bool
slot_owner_live(const RwSlot *s)
{
	return s->pid != 0 && rw_owner_live_pid(s->owner) == s->pid;
}

/*
 * Whether process `renewer` renews slot s: a renewer, the slots that point
 * to it; the keeper (-1), those whose renewer is not running. Under the
 * lock.
 */
static bool
holdtable_mine(const RwSlot *s, int renewer)
{
	if (renewer >= 0)
		return s->renewer == renewer;
	return s->renewer < 0 ||
		shared->renewers[s->renewer].state != RENEWER_RUNNING;
}

/* A due slot, before the batch is chosen. */
typedef struct HtDue
{
	int			slot;
	int64		due;
} HtDue;

static int
holdtable_due_cmp(const void *a, const void *b)
{
	int64		x = ((const HtDue *) a)->due,
				y = ((const HtDue *) b)->due;

	return x < y ? -1 : x > y ? 1 : 0;
}

/*
 * The holds process `renewer` (-1: the keeper) is to renew or release now,
 * copied out with their generations: the longest due first, at most max.
 * A hold due within a tenth of its lease goes with the batch (holds taken
 * together are renewed together); a hold that failed lately is not due
 * before its retry (retry_at[slot], valid while retry_gen[slot] is its
 * generation). seen(url) is told each URL that has holds (under the lock:
 * it must not throw). *next: when to look again; sessions that publish a
 * hold due before then wake the process. *had_holds: whether it has any.
 */
int
rw_holdtable_due(int renewer, int64 now, const int64 *retry_at,
				 const uint64 *retry_gen, int max,
				 void (*seen) (const char *url, int64 now),
				 RwDueHold **out, int64 *next, bool *had_holds)
{
	HtDue	   *cand = palloc(sizeof(HtDue) * shared->nslots);
	RwDueHold  *work;
	int			ncand = 0;
	int			n;

	*had_holds = false;
	LWLockAcquire(shared->lock, LW_SHARED);
	for (int i = 0; i < shared->nslots; i++)
	{
		RwSlot	   *s = &shared->slots[i];
		int64		due;
		int64		early;

		if (!s->in_use || !holdtable_mine(s, renewer))
			continue;
		/* Its backend releases it at exit (unless it died meanwhile). */
		if (s->exit == SLOT_EXITING && slot_owner_live(s))
			continue;
		/* A lost hold is not renewed; its backend reports it, if live. */
		if (s->lost && s->exit == SLOT_LIVE && slot_owner_live(s))
			continue;
		*had_holds = true;
		seen(s->url, now);
		/* Wake often enough for sessions to rely on the heartbeat. */
		*next = Min(*next, now + Max(s->lease_ms / 6, 50));
		due = (int64) pg_atomic_read_u64(&s->renewed) + s->lease_ms / 3;
		if (s->exit != SLOT_LIVE)
			due = now;			/* to release now */
		if (retry_gen[i] == s->gen && retry_at[i] > due)
			due = early = retry_at[i];	/* failed lately: not before its retry */
		else
			early = due - s->lease_ms / 10;
		if (early > now)
		{
			*next = Min(*next, due);
			continue;
		}
		cand[ncand].slot = i;
		cand[ncand].due = due;
		ncand++;
	}
	qsort(cand, ncand, sizeof(HtDue), holdtable_due_cmp);
	n = Min(ncand, max);
	if (ncand > n)
		*next = now;			/* more next time round */
	work = palloc(sizeof(RwDueHold) * Max(n, 1));
	for (int j = 0; j < n; j++)
	{
		RwSlot	   *s = &shared->slots[cand[j].slot];
		RwDueHold  *w = &work[j];

		/* Renewed now, it is due again a third of its lease from now. */
		*next = Min(*next, now + s->lease_ms / 3);
		w->slot = cand[j].slot;
		w->gen = s->gen;
		w->pid = s->pid;
		w->lease_ms = s->lease_ms;
		w->release = s->exit != SLOT_LIVE;
		w->live = slot_owner_live(s);
		/*
		 * Renewals go as of the owner's newest request; a release as the
		 * owner is its newest request (each try a new one). The counter
		 * is its PGPROC's, which a later backend there carries on.
		 */
		w->seq = w->release || !w->live ?
			pg_atomic_add_fetch_u64(&seqs[s->procno], 1) :
			pg_atomic_read_u64(&seqs[s->procno]);
		w->owner = pstrdup(s->owner);
		w->url = pstrdup(s->url);
		w->keys.key[0] = pstrdup(s->key);
	}
	if (renewer >= 0)
		shared->renewers[renewer].wake = *next;
	else
		shared->keeper_wake = *next;
	LWLockRelease(shared->lock);
	for (int j = 0; j < n; j++)
	{
		work[j].keys.len[0] = strlen(work[j].keys.key[0]);
		work[j].keys.key[1] = psprintf("%s:q", work[j].keys.key[0]);
		work[j].keys.len[1] = work[j].keys.len[0] + 2;
	}
	pfree(cand);
	*out = work;
	return n;
}

/* Free slot s (under the lock in exclusive mode), with its name. */
static void
holdtable_free_locked(int slot, char *name)
{
	RwSlot	   *s = &shared->slots[slot];

	if (name != NULL)
		strlcpy(name, s->name, RW_NAME_MAX + 1);
	s->in_use = false;
	s->gen = shared->next_gen++;
	s->next_free = shared->free_head;
	shared->free_head = slot;
}

/*
 * Free the slot of a hold the keeper released, unless it changed since it
 * was copied; true if freed, with the lock's name in name.
 */
bool
rw_holdtable_free(const RwDueHold *w, char *name)
{
	RwSlot	   *s = &shared->slots[w->slot];
	bool		freed = false;

	LWLockAcquire(shared->lock, LW_EXCLUSIVE);
	if (s->in_use && s->gen == w->gen)
	{
		holdtable_free_locked(w->slot, name);
		freed = true;
	}
	LWLockRelease(shared->lock);
	return freed;
}

/*
 * Whether the release of w is moot: the hold was found lost
 * (RW_MOOT_LOST), or its lease has certainly run out (RW_MOOT_LAPSED:
 * nothing renewed it after its backend stopped, or after the keeper's last
 * renewal of it ended, whichever is later, by a lease and the clock drift
 * allowed for; *idle_ms says for how long). Then its slot is freed, with
 * its name in name. RW_MOOT_CHANGED: the slot changed since it was copied
 * (not this process's to release now). RW_MOOT_NOT: to release.
 */
RwMoot
rw_holdtable_moot(const RwDueHold *w, int64 now, char *name, int64 *idle_ms)
{
	RwSlot	   *s = &shared->slots[w->slot];
	RwMoot		moot = RW_MOOT_NOT;
	int64		last;

	LWLockAcquire(shared->lock, LW_EXCLUSIVE);
	if (!s->in_use || s->gen != w->gen)
	{
		LWLockRelease(shared->lock);
		return RW_MOOT_CHANGED;
	}
	/* A live slot whose backend is gone stopped being renewed by now. */
	if (s->stopped == 0)
		s->stopped = now;
	last = Max(Max((int64) pg_atomic_read_u64(&s->renewed), s->tried),
			   s->stopped);
	*idle_ms = now - last;
	if (s->lost)
		moot = RW_MOOT_LOST;
	else if (now >= last + s->lease_ms + rw_lease_drift_ms(s->lease_ms))
		moot = RW_MOOT_LAPSED;
	if (moot != RW_MOOT_NOT)
		holdtable_free_locked(w->slot, name);
	LWLockRelease(shared->lock);
	return moot;
}

/*
 * The keeper could not release w: true the first time for this hold (to
 * log it once), with its name in name.
 */
bool
rw_holdtable_release_failed(const RwDueHold *w, char *name)
{
	RwSlot	   *s = &shared->slots[w->slot];
	bool		first = false;

	LWLockAcquire(shared->lock, LW_EXCLUSIVE);
	if (s->in_use && s->gen == w->gen && !s->release_failed)
	{
		s->release_failed = first = true;
		strlcpy(name, s->name, RW_NAME_MAX + 1);
	}
	LWLockRelease(shared->lock);
	return first;
}

/*
 * A renewal of these holds ended at `now`, answered or not: one that was
 * not may have run until then. Recorded in the slot of each hold that is
 * still that hold (its backend and lock; a slot that went exiting or orphan
 * since is one), for rw_holdtable_moot. Under the lock in exclusive mode.
 */
static void
holdtable_tried_locked(const RwDueHold *work, int n, int64 now)
{
	for (int i = 0; i < n; i++)
	{
		RwSlot	   *s = &shared->slots[work[i].slot];

		if (s->in_use && s->pid == work[i].pid &&
			strcmp(s->key, work[i].keys.key[0]) == 0)
			s->tried = Max(s->tried, now);
	}
}

/* The same, taking the lock: a renewal that got no answer. */
void
rw_holdtable_tried(const RwDueHold *work, int n, int64 now)
{
	LWLockAcquire(shared->lock, LW_EXCLUSIVE);
	holdtable_tried_locked(work, n, now);
	LWLockRelease(shared->lock);
}

/*
 * Write back what a renewal sent at `sent` and answered at `now` found,
 * held[i] as rw_quorum_renew's, into the slots that did not change since
 * they were copied. outcome[i]: RW_RENEWAL_DONE (renewed),
 * RW_RENEWAL_LOST (found lost now: logged once a hold, at `where`, by
 * rw_log_later), RW_RENEWAL_RETRY (an error reply, undecided, or stale: a
 * newer request of the owner's ran, its slot says so soon), or
 * RW_RENEWAL_SKIP (released or taken again meanwhile, or already lost).
 */
void
rw_holdtable_renewals(const RwDueHold *work, int n, const int *held,
					  int64 sent, int64 now, const char *where,
					  RwRenewal *outcome)
{
	LWLockAcquire(shared->lock, LW_EXCLUSIVE);
	holdtable_tried_locked(work, n, now);
	for (int i = 0; i < n; i++)
	{
		RwSlot	   *s = &shared->slots[work[i].slot];

		outcome[i] = RW_RENEWAL_SKIP;
		if (!s->in_use || s->gen != work[i].gen)
			continue;
		if (held[i] == 1)
		{
			pg_atomic_write_u64(&s->renewed, (uint64) sent);
			rw_stat_add(RW_STAT_RENEWALS, 1);
			outcome[i] = RW_RENEWAL_DONE;
		}
		else if (held[i] == 0)
		{
			if (!s->lost)
			{
				/* Logged once a hold, after the lock is let go (never throws). */
				s->lost = true;
				rw_log_later("rwlock keeper found Redis lock \"%s\" of process %d lost at %s: its lease ran out or Redis lost its data",
							 s->name, s->pid, where);
				outcome[i] = RW_RENEWAL_LOST;
			}
		}
		else
			outcome[i] = RW_RENEWAL_RETRY;
	}
	LWLockRelease(shared->lock);
}

/* ---- the renewers' registry ---- */

/* Point the slots of renewers[r] back to the keeper. Under the lock. */
static void
holdtable_orphan_slots(int r)
{
	for (int i = 0; i < shared->nslots; i++)
		if (shared->slots[i].in_use && shared->slots[i].renewer == r)
			shared->slots[i].renewer = -1;
}

/*
 * Give every URL that has holds a renewer: point each slot to the renewer
 * of its URL, and claim a free renewer for a URL that has none (only if
 * may_start: none could be started lately otherwise). Returns how many
 * were claimed, in start[]: the keeper starts their workers, and gives
 * back those it cannot (rw_holdtable_renewer_failed). A renewer claimed
 * RENEWER_START_MS ago that never came up is given up. Until a renewer
 * runs, and for URLs beyond RENEWERS_MAX, the keeper renews the holds.
 */
int
rw_holdtable_assign(int64 now, bool may_start, int *start)
{
	int			nstart = 0;

	LWLockAcquire(shared->lock, LW_EXCLUSIVE);
	for (int r = 0; r < RENEWERS_MAX; r++)
	{
		RwRenewer  *w = &shared->renewers[r];

		if (w->state == RENEWER_STARTING && now - w->since_ms > RENEWER_START_MS)
		{
			w->state = RENEWER_FREE;	/* never came up: start another */
			holdtable_orphan_slots(r);
		}
	}
	for (int i = 0; i < shared->nslots; i++)
	{
		RwSlot	   *s = &shared->slots[i];
		int			r;

		if (!s->in_use || s->lost)
			continue;			/* a lost hold is never renewed */
		if (s->renewer >= 0 &&
			(shared->renewers[s->renewer].state == RENEWER_FREE ||
			 strcmp(shared->renewers[s->renewer].url, s->url) != 0))
			s->renewer = -1;
		if (s->renewer >= 0)
			continue;
		r = renewer_of_url(s->url);
		if (r < 0 && !may_start)
			continue;			/* none could be started lately */
		if (r < 0)
		{
			for (r = 0; r < RENEWERS_MAX; r++)
				if (shared->renewers[r].state == RENEWER_FREE)
					break;
			if (r == RENEWERS_MAX)
				continue;		/* more URLs than renewers: the keeper's */
			shared->renewers[r].state = RENEWER_STARTING;
			shared->renewers[r].pid = 0;
			shared->renewers[r].latch = NULL;
			shared->renewers[r].since_ms = now;
			shared->renewers[r].wake = 0;
			strlcpy(shared->renewers[r].url, s->url, sizeof(shared->renewers[r].url));
			start[nstart++] = r;
		}
		s->renewer = r;
	}
	LWLockRelease(shared->lock);
	return nstart;
}

/* No worker could be started for renewers[r]: the keeper keeps its holds. */
void
rw_holdtable_renewer_failed(int r)
{
	LWLockAcquire(shared->lock, LW_EXCLUSIVE);
	shared->renewers[r].state = RENEWER_FREE;
	holdtable_orphan_slots(r);
	LWLockRelease(shared->lock);
}

/* The keeper is up: sessions rely on it, and wake it. */
void
rw_holdtable_keeper_attach(void)
{
	LWLockAcquire(shared->lock, LW_EXCLUSIVE);
	shared->keeper_pid = MyProcPid;
	shared->keeper_latch = MyLatch;
	shared->keeper_wake = 0;
	LWLockRelease(shared->lock);
	pg_atomic_write_u64(&shared->heartbeat, (uint64) rw_now_ms());
}

/*
 * A renewer's worker is up for renewers[r]: true if it was claimed and not
 * given up on (else the worker leaves), with its URL in url.
 */
bool
rw_holdtable_renewer_attach(int r, char *url)
{
	RwRenewer  *w = &shared->renewers[r];
	bool		mine;

	LWLockAcquire(shared->lock, LW_EXCLUSIVE);
	mine = w->state == RENEWER_STARTING;
	if (mine)
	{
		w->state = RENEWER_RUNNING;
		w->pid = MyProcPid;
		w->latch = MyLatch;
		w->wake = 0;
		pg_atomic_write_u64(&w->heartbeat, (uint64) rw_now_ms());
		strlcpy(url, w->url, RW_SPEC_MAX + 1);
	}
	LWLockRelease(shared->lock);
	return mine;
}

/* The process (renewer r, or -1: the keeper) went round at now. */
void
rw_holdtable_beat(int renewer, int64 now)
{
	pg_atomic_write_u64(renewer >= 0 ? &shared->renewers[renewer].heartbeat :
						&shared->heartbeat, (uint64) now);
}

/*
 * Renewer r had no hold to renew for a while: it leaves (true) if still no
 * slot with a hold to renew points to it (checked under the lock, so that
 * no session publishes a hold for it meanwhile).
 */
bool
rw_holdtable_renewer_leave(int r)
{
	bool		idle = true;
	RwRenewer  *w = &shared->renewers[r];

	LWLockAcquire(shared->lock, LW_EXCLUSIVE);
	for (int i = 0; i < shared->nslots && idle; i++)
		if (shared->slots[i].in_use && !shared->slots[i].lost &&
			shared->slots[i].renewer == r)
			idle = false;
	if (idle)
	{
		holdtable_orphan_slots(r);	/* lost holds: nothing to renew */
		w->state = RENEWER_FREE;
		w->pid = 0;
		w->latch = NULL;
	}
	LWLockRelease(shared->lock);
	return idle;
}

/*
 * The keeper (-1) or renewer r exits: a renewer's holds go back to the
 * keeper, which is woken to take them over and start another. The caller
 * holds no LWLock (keeper.c's exit callback releases them all first).
 */
void
rw_holdtable_detach(int renewer)
{
	LWLockAcquire(shared->lock, LW_EXCLUSIVE);
	if (renewer >= 0)
	{
		RwRenewer  *w = &shared->renewers[renewer];

		if (w->state == RENEWER_RUNNING && w->pid == MyProcPid)
		{
			w->state = RENEWER_FREE;
			w->pid = 0;
			w->latch = NULL;
			holdtable_orphan_slots(renewer);
			shared->keeper_wake = 0;
			if (shared->keeper_latch != NULL)
				SetLatch(shared->keeper_latch);
		}
	}
	else if (shared->keeper_pid == MyProcPid)
	{
		shared->keeper_pid = 0;
		shared->keeper_latch = NULL;
	}
	LWLockRelease(shared->lock);
}

/* ---------------------------------------------------------------------
 * For redis_locks (introspect.c)
 * --------------------------------------------------------------------- */

/*
 * Every published hold, copied under the lock (redis_locks of version 1.2,
 * introspect.c).
 */
int
rw_holdtable_rows(RwKeeperRow **rows)
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
		r->live = slot_owner_live(s);
		r->releasing = !r->live || s->exit != SLOT_LIVE;
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
