/*-------------------------------------------------------------------------
 *
 * keeper.c
 *	  The keeper: background workers that renew the leases of every hold
 *	  of every session, and the shared-memory table where sessions publish
 *	  their holds for them (and for the redis_locks view).
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
 *	  PGPROC is released on its owner's behalf, never renewed; a crashed
 *	  backend makes the postmaster reinitialise shared memory, which
 *	  empties the table.
 * A hold left to the keeper (its backend exited before its own release got
 * through, or is gone) is released on its owner's behalf. A release that
 * fails (no connection, an error reply such as WRONGTYPE, a MOVED) is
 * logged once, with why, and tried again until the hold's lease has
 * certainly run out: then, or at once if the hold was found lost, the slot
 * is freed without Redis and that is logged once. Nothing renews such a
 * hold after its backend stopped (the keeper records when its own last
 * renewal of it ended, answered or not), so the table never fills with
 * holds of servers that are gone.
 * A renewal that finds the hold gone sets the slot's lost flag; the session
 * reports it at its next operation on that lock (held.c).
 *
 * Servers are renewed independently: the keeper starts a renewer (a
 * dynamic background worker) per URL that has holds, and each renewer
 * renews the slots of its URL, so a server that stalls holds up only its
 * own renewer. The keeper renews the holds whose renewer is not running
 * (starting, or none could be started). Each process keeps a connection
 * per URL it renews, reconnects after any failure at its next attempt,
 * retries failed renewals hold by hold after a pause that grows (so holds
 * that cannot be renewed never fill every batch), and closes connections
 * no slot has used for a minute. The keeper exits with code 1 on SIGTERM
 * or error, so the postmaster starts it again after a second; a renewer
 * that exits is started again by the keeper. A session renews a published
 * hold itself when the process that renews it has been silent for a third
 * of the hold's lease (rw_keeper_renews).
 *
 *-------------------------------------------------------------------------
 */
#include "rwlock.h"

#include "access/twophase.h"
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
#define KEEPER_RETRY_MS 200		/* after a failed renewal; doubles to ... */
#define KEEPER_RETRY_MAX_MS 1000	/* ... at most this (or a sixth of the lease) */
#define KEEPER_STALE_MS 10000	/* a renewer silent this long (or a third of
								 * the lease) is not relied on */
#define NODE_IDLE_MS	60000	/* close a connection no slot used this long */
#define RENEWERS_MAX	32		/* servers renewed each by a worker of its own */
#define RENEWER_START_MS 10000	/* a worker not up after this is given up */
#define RENEWER_REGISTER_RETRY_MS 10000	/* after no worker could be started */

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
/*
 * Who each PGPROC is now, for naming processes (rw_owner_live_pid): the
 * owner id of the backend there, with the generation it carries. A backend
 * claims a new generation of its PGPROC when it makes its owner id
 * (protocol.c), registers the id, and withdraws it at exit; a later
 * backend at the same PGPROC registers another. Written only by the
 * backend itself, read without a lock as a sequence lock: gen is 0 while
 * the record is written or empty.
 */
typedef struct RwProcOwner
{
	pg_atomic_uint64 gen;		/* the generation registered, or 0 */
	pg_atomic_uint64 claims;	/* generations handed out at this PGPROC */
	int			pid;
	char		owner[RW_OWNER_MAX];
} RwProcOwner;

static RwProcOwner *proc_owners = NULL;
static int	rw_max_holds = 1024;
static shmem_request_hook_type prev_shmem_request_hook = NULL;
static shmem_startup_hook_type prev_shmem_startup_hook = NULL;

PGDLLEXPORT void rw_keeper_main(Datum arg);
PGDLLEXPORT void rw_renewer_main(Datum arg);

/* ---------------------------------------------------------------------
 * Shared memory
 * --------------------------------------------------------------------- */

static Size
keeper_shmem_size(void)
{
	return add_size(offsetof(RwShared, slots),
					mul_size(sizeof(RwSlot), rw_max_holds));
}

/* PGPROCs there can be: proc.c's count (backends, auxiliaries, 2PC). */
static int
keeper_nprocs(void)
{
	return MaxBackends + NUM_AUXILIARY_PROCS + max_prepared_xacts;
}

static void
keeper_shmem_request(void)
{
	if (prev_shmem_request_hook)
		prev_shmem_request_hook();
	RequestAddinShmemSpace(keeper_shmem_size());
	RequestAddinShmemSpace(mul_size(sizeof(pg_atomic_uint64), keeper_nprocs()));
	RequestAddinShmemSpace(mul_size(sizeof(RwProcOwner), keeper_nprocs()));
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
						   mul_size(sizeof(pg_atomic_uint64), keeper_nprocs()),
						   &found);
	if (!found)
		for (int i = 0; i < keeper_nprocs(); i++)
			pg_atomic_init_u64(&seqs[i], 0);
	rw_proto_seq_share(seqs);
	proc_owners = ShmemInitStruct("rwlock owners",
								  mul_size(sizeof(RwProcOwner), keeper_nprocs()),
								  &found);
	if (!found)
		for (int i = 0; i < keeper_nprocs(); i++)
		{
			pg_atomic_init_u64(&proc_owners[i].gen, 0);
			pg_atomic_init_u64(&proc_owners[i].claims, 0);
			proc_owners[i].pid = 0;
			proc_owners[i].owner[0] = '\0';
		}
	LWLockRelease(AddinShmemInitLock);
}

/* ---------------------------------------------------------------------
 * Owners: which process an owner id is
 * --------------------------------------------------------------------- */

/*
 * A new generation of this backend's PGPROC, for its owner id; 0 without
 * shared memory (then no owner id is ever taken for a process).
 */
uint64
rw_owner_claim(void)
{
	if (proc_owners == NULL || MyProc == NULL)
		return 0;
	return pg_atomic_add_fetch_u64(&proc_owners[MyProc->pgprocno].claims, 1);
}

static void
owner_withdraw(int code, Datum arg)
{
	RwProcOwner *r = &proc_owners[DatumGetInt32(arg)];

	pg_atomic_write_u64(&r->gen, 0);
}

/*
 * Register this backend's owner id, of generation gen (rw_owner_claim),
 * until it exits. After held.c's exit callback (before_shmem_exit): the
 * releases at exit go as a live owner's, then the keeper sees it gone.
 */
void
rw_owner_register(const char *owner, uint64 gen)
{
	RwProcOwner *r;

	if (proc_owners == NULL || MyProc == NULL || gen == 0)
		return;
	r = &proc_owners[MyProc->pgprocno];
	pg_atomic_write_u64(&r->gen, 0);
	pg_write_barrier();
	r->pid = MyProcPid;
	strlcpy(r->owner, owner, sizeof(r->owner));
	pg_write_barrier();
	pg_atomic_write_u64(&r->gen, gen);
	on_shmem_exit(owner_withdraw, Int32GetDatum(MyProc->pgprocno));
}

/*
 * The pid of the live backend of this server whose owner id is owner, or
 * 0: owner must be the very id registered at the PGPROC it names (so a
 * client's id that only looks like a session's names nobody, nor does the
 * id of a backend that exited, whatever backend has its pid or PGPROC
 * now), and that PGPROC must still be that process's.
 * The id: pg:<system id>:<pid>:<procno>.<generation>:<random>.
 */
int
rw_owner_live_pid(const char *owner)
{
	const char *p = owner;
	long		procno;
	char	   *end;
	RwProcOwner *r;
	uint64		g1,
				g2;
	int			pid;
	bool		same;

	if (proc_owners == NULL || strncmp(owner, "pg:", 3) != 0)
		return 0;
	for (int field = 0; field < 3; field++)
		if ((p = strchr(p, ':')) == NULL)
			return 0;
		else
			p++;
	if (!isdigit((unsigned char) *p))
		return 0;
	procno = strtol(p, &end, 10);
	if (*end != '.' || procno < 0 || procno >= keeper_nprocs())
		return 0;
	r = &proc_owners[procno];
	g1 = pg_atomic_read_u64(&r->gen);
	pg_read_barrier();
	pid = r->pid;
	same = strncmp(r->owner, owner, sizeof(r->owner)) == 0;
	pg_read_barrier();
	g2 = pg_atomic_read_u64(&r->gen);
	if (g1 == 0 || g1 != g2 || !same)
		return 0;
	/* Registered, and not withdrawn: is the PGPROC still that process? */
	if (ProcGlobal->allProcs[procno].pid != pid)
		return 0;
	return pid;
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

/*
 * How long a renewer may be silent before sessions stop relying on it: a
 * third of the lease (at most KEEPER_STALE_MS), so that a session that
 * makes calls renews its holds itself with a third of the lease to spare
 * when the process that should renew them is stopped or stuck. A renewer
 * wakes at least every sixth of the shortest lease it renews.
 */
static int64
keeper_stale_ms(int lease_ms)
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
rw_keeper_renews(int slot, int lease_ms)
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
	return rw_now_ms() - (int64) beat < keeper_stale_ms(lease_ms);
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
keeper_wake_for(RwSlot *s, int64 due)
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

/*
 * Publish a hold that was just taken (or taken again) in Redis. slot is the
 * hold's slot or -1; returns its slot, or -1 if there is no table (the
 * session renews its holds itself) or it is full (*full is set: the caller
 * gives the hold back and fails the lock call, held.c). One slot write
 * under the lock: no Redis, no allocation, no ereport.
 */
int
rw_keeper_publish(int slot, const char *name, const char *url,
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
	keeper_wake_for(s, due);
	LWLockRelease(shared->lock);
	return slot;
}

/* The table's size (rwlock.max_holds), for messages. */
int
rw_keeper_max_holds(void)
{
	return rw_max_holds;
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

/*
 * A hold's exit, in its own slot (owner only). SLOT_EXITING: before its
 * release is sent at exit, not renewed any more but kept. SLOT_ORPHAN: the
 * release did not get through, so whoever renews the slot is woken to
 * release it on the owner's behalf rather than leave it to its lease. A
 * new generation drops what a renewal in flight finds.
 */
static void
keeper_set_exit(int slot, uint8 exit)
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
			keeper_wake_for(s, rw_now_ms());
	}
	LWLockRelease(shared->lock);
}

void
rw_keeper_exiting(int slot)
{
	keeper_set_exit(slot, SLOT_EXITING);
}

void
rw_keeper_orphan(int slot)
{
	keeper_set_exit(slot, SLOT_ORPHAN);
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

/* A due renewal, copied out of the table. */
typedef struct KWork
{
	int			slot;
	uint64		gen;
	int			pid;
	int			lease_ms;
	bool		release;		/* release it (its backend exited), not renew */
	bool		live;			/* its backend was alive when copied */
	uint64		seq;			/* the owner's request sequence to send */
	char	   *owner;
	char	   *url;
	RwKeys		keys;
} KWork;

/* A due slot, before the batch is chosen. */
typedef struct KDue
{
	int			slot;
	int64		due;
} KDue;

static KNode *knodes = NULL;
static int	my_renewer = -1;	/* this process: a renewer, or -1: the keeper */
static bool cycle_had_holds = false;	/* the last keeper_cycle saw some */

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

static int
keeper_work_cmp(const void *a, const void *b)
{
	return strcmp(((const KWork *) a)->url, ((const KWork *) b)->url);
}

static int
keeper_due_cmp(const void *a, const void *b)
{
	int64		x = ((const KDue *) a)->due,
				y = ((const KDue *) b)->due;

	return x < y ? -1 : x > y ? 1 : 0;
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
 * Whether this process renews slot s: a renewer, the slots that point to
 * it; the keeper, those whose renewer is not running. Under the lock.
 */
static bool
keeper_mine(const RwSlot *s)
{
	if (my_renewer >= 0)
		return s->renewer == my_renewer;
	return s->renewer < 0 ||
		shared->renewers[s->renewer].state != RENEWER_RUNNING;
}

/*
 * Free a slot this process released, unless it changed meanwhile; true if
 * freed, with the lock's name in name.
 */
static bool
keeper_free_slot(KWork *w, char *name)
{
	RwSlot	   *s = &shared->slots[w->slot];
	bool		freed = false;

	LWLockAcquire(shared->lock, LW_EXCLUSIVE);
	if (s->in_use && s->gen == w->gen)
	{
		strlcpy(name, s->name, RW_NAME_MAX + 1);
		freed = true;
		s->in_use = false;
		s->gen = shared->next_gen++;
		s->next_free = shared->free_head;
		shared->free_head = w->slot;
	}
	LWLockRelease(shared->lock);
	return freed;
}

/*
 * A renewal of w failed (no answer, an error reply, a quorum undecided):
 * try it again after a pause that doubles with each failure, up to
 * KEEPER_RETRY_MAX_MS or a sixth of the lease. Returns when.
 */
static int64
keeper_retry_later(const KWork *w, int64 now)
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

/*
 * Whether the release of w is moot: the hold was found lost, or its lease
 * has certainly run out (nothing renewed it after its backend stopped, or
 * after the keeper's last renewal of it ended, whichever is later, by a
 * lease and the clock drift allowed for). Then its slot is freed without
 * Redis, and that is logged once. Also true if the slot changed since it
 * was copied (not this process's to release now).
 */
static bool
keeper_release_moot(KWork *w, KNode *k, int64 now)
{
	RwSlot	   *s = &shared->slots[w->slot];
	char		name[RW_NAME_MAX + 1];
	int64		last;
	bool		lost;
	bool		freed = false;

	LWLockAcquire(shared->lock, LW_EXCLUSIVE);
	if (!s->in_use || s->gen != w->gen)
	{
		LWLockRelease(shared->lock);
		return true;
	}
	/* A live slot whose backend is gone stopped being renewed by now. */
	if (s->stopped == 0)
		s->stopped = now;
	last = Max(Max((int64) pg_atomic_read_u64(&s->renewed), s->tried),
			   s->stopped);
	lost = s->lost;
	if (lost || now >= last + s->lease_ms + rw_lease_drift_ms(s->lease_ms))
	{
		strlcpy(name, s->name, sizeof(name));
		s->in_use = false;
		s->gen = shared->next_gen++;
		s->next_free = shared->free_head;
		shared->free_head = w->slot;
		freed = true;
	}
	LWLockRelease(shared->lock);
	if (!freed)
		return false;
	if (lost)
		ereport(LOG,
				(errmsg("rwlock keeper gave up the release of Redis lock \"%s\" of process %d at %s: it was found lost",
						name, w->pid, k->node.ep.display),
				 errdetail("Its lease ran out or Redis lost its data: there is nothing to release.")));
	else
		ereport(LOG,
				(errmsg("rwlock keeper gave up the release of Redis lock \"%s\" of process %d at %s: its lease has run out",
						name, w->pid, k->node.ep.display),
				 errdetail("Nothing renewed it for %.1f s (its lease is %.1f s): Redis no longer holds it for the owner.",
						   (now - last) / 1000.0, w->lease_ms / 1000.0)));
	return true;
}

/* Log, once a hold, that the keeper could not release it, and why. */
static void
keeper_release_failed(KWork *w, KNode *k, const RwError *err)
{
	RwSlot	   *s = &shared->slots[w->slot];
	char		name[RW_NAME_MAX + 1];
	bool		first = false;

	LWLockAcquire(shared->lock, LW_EXCLUSIVE);
	if (s->in_use && s->gen == w->gen && !s->release_failed)
	{
		s->release_failed = first = true;
		strlcpy(name, s->name, sizeof(name));
	}
	LWLockRelease(shared->lock);
	if (first)
		ereport(LOG,
				(errmsg("rwlock keeper could not release Redis lock \"%s\" of process %d at %s",
						name, w->pid, k->node.ep.display),
				 errdetail("%s", err->msg),
				 errhint("It is tried again until its lease has run out, then given up: the lease frees the lock.")));
}

/*
 * Release a hold whose backend exited before its own release got through
 * (or is gone without a word), on behalf of its owner, unless that is moot
 * (keeper_release_moot). Returns when to try again if it failed
 * (PG_INT64_MAX if not).
 */
static int64
keeper_release(KWork *w, int64 now)
{
	KNode	   *k = knode_get(w->url);
	RwError		err;
	char		name[RW_NAME_MAX + 1];

	if (k == NULL)
		return PG_INT64_MAX;
	k->seen = now;
	if (keeper_release_moot(w, k, now))
		return PG_INT64_MAX;
	if (!rw_release_as(&k->node, &w->keys, w->owner, w->seq, &err))
	{
		keeper_release_failed(w, k, &err);
		return keeper_retry_later(w, now);
	}
	if (keeper_free_slot(w, name))
		elog(LOG, "rwlock keeper released Redis lock \"%s\" of process %d, which exited before its own release got through",
			 name, w->pid);
	return PG_INT64_MAX;
}

/*
 * A renewal of these holds ended at `now`, answered or not: one that was
 * not may have run until then. Recorded in the slot of each hold that is
 * still that hold (its backend and lock; a slot that went exiting or orphan
 * since is one), for keeper_release_moot. Under the lock in exclusive
 * mode.
 */
static void
keeper_tried_locked(KWork *work, int n, int64 now)
{
	for (int i = 0; i < n; i++)
	{
		RwSlot	   *s = &shared->slots[work[i].slot];

		if (s->in_use && s->pid == work[i].pid &&
			strcmp(s->key, work[i].keys.key[0]) == 0)
			s->tried = Max(s->tried, now);
	}
}

/* The same, taking the lock. */
static void
keeper_tried(KWork *work, int n, int64 now)
{
	LWLockAcquire(shared->lock, LW_EXCLUSIVE);
	keeper_tried_locked(work, n, now);
	LWLockRelease(shared->lock);
}

/*
 * Renew one URL's due holds, each judged on its own. Returns when the
 * earliest that failed is to be tried again (PG_INT64_MAX if none did).
 */
static int64
keeper_renew_node(KNode *k, KWork *work, int n)
{
	RwKeys	  **keys = palloc(sizeof(RwKeys *) * n);
	const char **owners = palloc(sizeof(char *) * n);
	uint64	   *seqs = palloc(sizeof(uint64) * n);
	int		   *leases = palloc(sizeof(int) * n);
	int		   *held = palloc(sizeof(int) * n);
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
		keeper_tried(work, n, now);
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

	LWLockAcquire(shared->lock, LW_EXCLUSIVE);
	keeper_tried_locked(work, n, now);
	for (int i = 0; i < n; i++)
	{
		RwSlot	   *s = &shared->slots[work[i].slot];

		/* Released, or taken again, since it was copied: not ours to touch. */
		if (!s->in_use || s->gen != work[i].gen)
			continue;
		if (held[i] == 1)
		{
			pg_atomic_write_u64(&s->renewed, (uint64) sent);
			retry_gen[work[i].slot] = 0;
			rw_stat_add(RW_STAT_RENEWALS, 1);
		}
		else if (held[i] == 0 && !s->lost)
		{
			/* Logged once a hold, after the lock is let go (never throws). */
			s->lost = true;
			rw_log_later("rwlock keeper found Redis lock \"%s\" of process %d lost at %s: its lease ran out or Redis lost its data",
						 s->name, s->pid, k->node.ep.display);
		}
		else					/* an error reply (logged), undecided, or
								 * stale (a newer request of the owner's
								 * ran: its slot says so soon) */
			retry = Min(retry, keeper_retry_later(&work[i], now));
	}
	LWLockRelease(shared->lock);
	return retry;
}

/*
 * One pass: renew what is due among the holds this process renews, the
 * longest due first, at most KEEPER_BATCH at a time. A hold due within a
 * tenth of its lease goes with the batch (holds taken together are renewed
 * together). Returns when to look again (monotonic).
 */
static int64
keeper_cycle(int64 *wake)
{
	int64		now = rw_now_ms();
	int64		next = now + KEEPER_MAX_SLEEP_MS;
	KDue	   *cand = palloc(sizeof(KDue) * shared->nslots);
	KWork	   *work;
	int			ncand = 0;
	int			n;

	cycle_had_holds = false;
	LWLockAcquire(shared->lock, LW_SHARED);
	for (int i = 0; i < shared->nslots; i++)
	{
		RwSlot	   *s = &shared->slots[i];
		int64		due;
		int64		early;
		KNode	   *k;

		if (!s->in_use || !keeper_mine(s))
			continue;
		/* Its backend releases it at exit (unless it died meanwhile). */
		if (s->exit == SLOT_EXITING && slot_owner_live(s))
			continue;
		/* A lost hold is not renewed; its backend reports it, if live. */
		if (s->lost && s->exit == SLOT_LIVE && slot_owner_live(s))
			continue;
		cycle_had_holds = true;
		if ((k = knode_find(s->url)) != NULL)
			k->seen = now;
		/* Wake often enough for sessions to rely on the heartbeat. */
		next = Min(next, now + Max(s->lease_ms / 6, 50));
		due = (int64) pg_atomic_read_u64(&s->renewed) + s->lease_ms / 3;
		if (s->exit != SLOT_LIVE)
			due = now;			/* to release now */
		if (retry_gen[i] == s->gen && retry_at[i] > due)
			due = early = retry_at[i];	/* failed lately: not before its retry */
		else
			early = due - s->lease_ms / 10;
		if (early > now)
		{
			next = Min(next, due);
			continue;
		}
		cand[ncand].slot = i;
		cand[ncand].due = due;
		ncand++;
	}
	qsort(cand, ncand, sizeof(KDue), keeper_due_cmp);
	n = Min(ncand, KEEPER_BATCH);
	if (ncand > n)
		next = now;				/* more next time round */
	work = palloc(sizeof(KWork) * Max(n, 1));
	for (int j = 0; j < n; j++)
	{
		RwSlot	   *s = &shared->slots[cand[j].slot];

		/* Renewed now, it is due again a third of its lease from now. */
		next = Min(next, now + s->lease_ms / 3);
		work[j].slot = cand[j].slot;
		work[j].gen = s->gen;
		work[j].pid = s->pid;
		work[j].lease_ms = s->lease_ms;
		work[j].release = s->exit != SLOT_LIVE;
		work[j].live = slot_owner_live(s);
		/*
		 * Renewals go as of the owner's newest request; a release as the
		 * owner is its newest request (each try a new one). The counter
		 * is its PGPROC's, which a later backend there carries on.
		 */
		work[j].seq = work[j].release || !slot_owner_live(s) ?
			pg_atomic_add_fetch_u64(&seqs[s->procno], 1) :
			pg_atomic_read_u64(&seqs[s->procno]);
		work[j].owner = pstrdup(s->owner);
		work[j].url = pstrdup(s->url);
		work[j].keys.key[0] = pstrdup(s->key);
	}
	/* Sessions that publish a hold due before this wake us up. */
	*wake = next;
	LWLockRelease(shared->lock);

	/* Never renew for a backend that is gone: release its holds instead. */
	for (int i = 0; i < n; i++)
	{
		work[i].keys.len[0] = strlen(work[i].keys.key[0]);
		work[i].keys.key[1] = psprintf("%s:q", work[i].keys.key[0]);
		work[i].keys.len[1] = work[i].keys.len[0] + 2;
		if (work[i].release || !work[i].live)
		{
			next = Min(next, keeper_release(&work[i], now));
			work[i--] = work[--n];
		}
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
		next = Min(next, keeper_renew_node(k, &work[start], end - start));
	}
	knodes_tidy(now);
	return next;
}

/* ---- the keeper: starting renewers ---- */

static int64 register_after = 0;	/* no new renewer before (monotonic) */

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

/* Point the slots of renewers[r] back to the keeper. Under the lock. */
static void
keeper_orphan_slots(int r)
{
	for (int i = 0; i < shared->nslots; i++)
		if (shared->slots[i].in_use && shared->slots[i].renewer == r)
			shared->slots[i].renewer = -1;
}

/*
 * Give every URL that has holds a renewer: point each slot to the renewer
 * of its URL, and start one for a URL that has none. Until it runs, and
 * for URLs no renewer could be started for, the keeper renews the holds.
 */
static void
keeper_supervise(int64 now)
{
	int			start[RENEWERS_MAX];
	int			nstart = 0;

	LWLockAcquire(shared->lock, LW_EXCLUSIVE);
	for (int r = 0; r < RENEWERS_MAX; r++)
	{
		RwRenewer  *w = &shared->renewers[r];

		if (w->state == RENEWER_STARTING && now - w->since_ms > RENEWER_START_MS)
		{
			w->state = RENEWER_FREE;	/* never came up: start another */
			keeper_orphan_slots(r);
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
		if (r < 0 && now < register_after)
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

	for (int j = 0; j < nstart; j++)
	{
		if (keeper_start_renewer(start[j]))
			continue;
		LWLockAcquire(shared->lock, LW_EXCLUSIVE);
		shared->renewers[start[j]].state = RENEWER_FREE;
		keeper_orphan_slots(start[j]);
		LWLockRelease(shared->lock);
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
	if (shared == NULL)
		return;

	/*
	 * An error thrown under the table's lock (an out-of-memory in
	 * keeper_cycle's copies, under LW_SHARED) ends a background worker with
	 * the lock still held: taken again here, it would wait for itself, and
	 * every session's publish behind it. ProcKill releases LWLocks only after
	 * this callback; newer minor releases (15.20's shmem_exit) release them
	 * before any exit callback, older ones do not.
	 */
	LWLockReleaseAll();
	LWLockAcquire(shared->lock, LW_EXCLUSIVE);
	if (my_renewer >= 0)
	{
		RwRenewer  *w = &shared->renewers[my_renewer];

		if (w->state == RENEWER_RUNNING && w->pid == MyProcPid)
		{
			w->state = RENEWER_FREE;
			w->pid = 0;
			w->latch = NULL;
			keeper_orphan_slots(my_renewer);
			/* The keeper takes its holds over, and starts another. */
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

/*
 * A renewer that had no hold to renew for NODE_IDLE_MS leaves, if still no
 * slot with a hold to renew points to it (checked under the lock, so that
 * no session publishes a hold for it meanwhile).
 */
static void
renewer_leave_if_idle(void)
{
	bool		idle = true;
	RwRenewer  *w = &shared->renewers[my_renewer];

	LWLockAcquire(shared->lock, LW_EXCLUSIVE);
	for (int i = 0; i < shared->nslots && idle; i++)
		if (shared->slots[i].in_use && !shared->slots[i].lost &&
			shared->slots[i].renewer == my_renewer)
			idle = false;
	if (idle)
	{
		keeper_orphan_slots(my_renewer);	/* lost holds: nothing to renew */
		w->state = RENEWER_FREE;
		w->pid = 0;
		w->latch = NULL;
	}
	LWLockRelease(shared->lock);
	if (idle)
		proc_exit(0);
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

	if (shared == NULL)
		elog(FATAL, "rwlock keeper started without its shared memory");
	old = MemoryContextSwitchTo(TopMemoryContext);
	retry_at = palloc0(sizeof(int64) * shared->nslots);
	retry_gen = palloc0(sizeof(uint64) * shared->nslots);
	retry_n = palloc0(sizeof(int) * shared->nslots);
	MemoryContextSwitchTo(old);
	return AllocSetContextCreate(TopMemoryContext, "rwlock keeper",
								 ALLOCSET_DEFAULT_SIZES);
}

/*
 * Renew, sleep, renew, until SIGTERM: the heartbeat says when this process
 * last went round; *wake is where sessions say when to look again.
 */
static void
keeper_loop(MemoryContext cxt, pg_atomic_uint64 *heartbeat, int64 *wake)
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
		pg_atomic_write_u64(heartbeat, (uint64) now);

		MemoryContextReset(cxt);
		{
			MemoryContext old = MemoryContextSwitchTo(cxt);

			if (my_renewer < 0)
				keeper_supervise(now);
			next = keeper_cycle(wake);
			MemoryContextSwitchTo(old);
		}
		/* What the renewals' answers gave to log (rw_log_later). */
		rw_logs_flush();
		now = rw_now_ms();
		pg_atomic_write_u64(heartbeat, (uint64) now);

		if (cycle_had_holds)
			idle_since = now;
		else if (my_renewer >= 0 && now - idle_since > NODE_IDLE_MS)
			renewer_leave_if_idle();

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

	LWLockAcquire(shared->lock, LW_EXCLUSIVE);
	shared->keeper_pid = MyProcPid;
	shared->keeper_latch = MyLatch;
	shared->keeper_wake = 0;
	LWLockRelease(shared->lock);
	pg_atomic_write_u64(&shared->heartbeat, (uint64) rw_now_ms());
	on_shmem_exit(keeper_exit, (Datum) 0);
	elog(LOG, "rwlock keeper started: renewing leases of up to %d holds", shared->nslots);
	keeper_loop(cxt, &shared->heartbeat, &shared->keeper_wake);
}

/* A renewer: renews the holds of one Redis URL, renewers[arg]. */
void
rw_renewer_main(Datum arg)
{
	int			r = DatumGetInt32(arg);
	MemoryContext cxt = keeper_begin("rwlock renewer");
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
		my_renewer = r;
	}
	LWLockRelease(shared->lock);
	if (!mine)
		proc_exit(0);			/* given up on, or started twice */
	on_shmem_exit(keeper_exit, (Datum) 0);
	{
		RwEndpoint	ep;
		char	   *why;

		elog(LOG, "rwlock renewer %d started: renewing the leases of holds at %s",
			 r, rw_parse_url(w->url, &ep, &why) ? ep.display : "?");
	}
	keeper_loop(cxt, &w->heartbeat, &w->wake);
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
