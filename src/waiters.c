/*-------------------------------------------------------------------------
 *
 * waiters.c
 *	  The waiting sessions of this server, in shared memory: the rows of
 *	  redis_locks with granted = false, whom redis_blocking_pids asks about,
 *	  and what the walk (walk.c) checks a wait key of a session of this
 *	  server against.
 *
 * With the library preloaded: one entry per backend (by pgprocno), the
 * lock it waits for, written by deadlock.c at the start and the end of a
 * wait only. Without it there is no table: no waiter rows, and the walk
 * asks Redis alone, where a member of a cycle must show a fresh sign of
 * life before the cycle is acted on (walk.c).
 *
 * A wait cut off in a stall (its connection closed before its withdrawal
 * could be written) leaves its wait key and its intent or mark in Redis;
 * its entry then keeps them as a leftover, which the keeper withdraws on
 * the session's behalf (keeper.c), owed like a release: an idle session
 * makes no call that would send it. Until then a walk does not take them
 * for a live wait: a cycle is acted on only once each member that no row
 * here shows waiting (rw_waiters_confirms) renewed its intent or mark
 * (walk.c), which a leftover never does.
 *
 *-------------------------------------------------------------------------
 */
#include "rwlock.h"

#include "miscadmin.h"
#include "storage/ipc.h"
#include "storage/lwlock.h"
#include "storage/proc.h"
#include "storage/shmem.h"

#define DL_KEY_MAX		(RW_PREFIX_MAX + 3 * RW_NAME_MAX + 8)
#define DL_WAIT_KEY_MAX	(RW_PREFIX_MAX + 3 * RW_OWNER_MAX + 16)

typedef struct DlEntry
{
	bool		in_use;
	int			pid;
	Oid			datid;
	uint8		mode;
	uint8		level;
	TimestampTz waitstart;
	char		owner[RW_OWNER_MAX];
	char		key[DL_KEY_MAX];	/* the lock's hash key */
	char		name[RW_NAME_MAX + 1];
	/* a wait cut off that left its wait key or intent (in_use is false) */
	bool		leftover;
	bool		leftover_intent;	/* its intent or mark is to go */
	uint64		leftover_gen;
	char		url[RW_SPEC_MAX + 1];
	char		wait_key[DL_WAIT_KEY_MAX];	/* "" if only the intent */
} DlEntry;

typedef struct DlShared
{
	LWLock	   *lock;
	uint64		gen;			/* stamps leftovers */
	int			n;
	DlEntry		entries[FLEXIBLE_ARRAY_MEMBER];
} DlShared;

static DlShared *dl_shared = NULL;
static bool left_behind = false;	/* this session left a leftover */
static bool published = false;	/* this session's entry is in use */
static shmem_request_hook_type prev_shmem_request_hook = NULL;
static shmem_startup_hook_type prev_shmem_startup_hook = NULL;

static Size
dl_shmem_size(void)
{
	return add_size(offsetof(DlShared, entries),
					mul_size(sizeof(DlEntry), MaxBackends));
}

static void
dl_shmem_request(void)
{
	if (prev_shmem_request_hook)
		prev_shmem_request_hook();
	RequestAddinShmemSpace(dl_shmem_size());
	RequestNamedLWLockTranche("rwlock waits", 1);
}

static void
dl_shmem_startup(void)
{
	bool		found;

	if (prev_shmem_startup_hook)
		prev_shmem_startup_hook();
	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	dl_shared = ShmemInitStruct("rwlock waits", dl_shmem_size(), &found);
	if (!found)
	{
		dl_shared->lock = &(GetNamedLWLockTranche("rwlock waits"))->lock;
		dl_shared->n = MaxBackends;
		dl_shared->gen = 0;
		for (int i = 0; i < MaxBackends; i++)
			dl_shared->entries[i].in_use = dl_shared->entries[i].leftover = false;
	}
	LWLockRelease(AddinShmemInitLock);
}

/* In _PG_init: room in shared memory, when the library is preloaded. */
void
rw_deadlock_init(void)
{
	if (!process_shared_preload_libraries_in_progress)
		return;
	prev_shmem_request_hook = shmem_request_hook;
	shmem_request_hook = dl_shmem_request;
	prev_shmem_startup_hook = shmem_startup_hook;
	shmem_startup_hook = dl_shmem_startup;
}

static DlEntry *
dl_my_entry(void)
{
	if (dl_shared == NULL || MyProc == NULL || MyProc->pgprocno < 0 ||
		MyProc->pgprocno >= dl_shared->n)
		return NULL;
	return &dl_shared->entries[MyProc->pgprocno];
}

/*
 * This session waits for the lock `key` (its hash key; `name` for the
 * view) in mode at level, since then.
 */
void
rw_waiters_publish(RwMode mode, RwLevel level, TimestampTz since,
				   const char *key, const char *name)
{
	DlEntry    *e = dl_my_entry();

	if (e == NULL)
		return;
	LWLockAcquire(dl_shared->lock, LW_EXCLUSIVE);
	e->pid = MyProcPid;
	e->datid = MyDatabaseId;
	e->mode = mode;
	e->level = level;
	e->waitstart = since;
	strlcpy(e->owner, rw_owner_id(), sizeof(e->owner));
	strlcpy(e->key, key, sizeof(e->key));
	strlcpy(e->name, name, sizeof(e->name));
	/* a leftover of an earlier wait: the session is back, and owes it */
	e->leftover = false;
	e->in_use = true;
	LWLockRelease(dl_shared->lock);
	published = true;
}

/* The wait ended. Never throws. */
void
rw_waiters_unpublish(void)
{
	DlEntry    *e = dl_my_entry();

	if (e == NULL || !published)
		return;
	LWLockAcquire(dl_shared->lock, LW_EXCLUSIVE);
	e->in_use = false;
	LWLockRelease(dl_shared->lock);
	published = false;
}

/*
 * The wait that just ended (rw_waiters_unpublish) was cut off and may have
 * left its wait key (wait_key, "" if not) and its intent or mark (intent)
 * in Redis at url: the keeper withdraws them on this session's behalf
 * (rw_waiters_leftovers), owed like a release, unless this session waits
 * again first. Never throws.
 */
void
rw_waiters_leave_behind(const char *url, const char *wait_key, bool intent)
{
	DlEntry    *e = dl_my_entry();

	if (e == NULL || e->owner[0] == '\0')
		return;
	LWLockAcquire(dl_shared->lock, LW_EXCLUSIVE);
	strlcpy(e->url, url, sizeof(e->url));
	strlcpy(e->wait_key, wait_key, sizeof(e->wait_key));
	e->leftover_intent = intent;
	e->leftover_gen = ++dl_shared->gen;
	e->leftover = true;
	LWLockRelease(dl_shared->lock);
	left_behind = true;
	rw_holdtable_wake_keeper();
}

/*
 * This session takes a lock again: it owes its leftover itself now (its
 * owed release goes ahead of its tries, release.c), so the keeper's
 * request on its behalf, drawn from the same sequence, cannot race with
 * its own. Cheap when nothing was left (a flag of this process).
 */
void
rw_waiters_take_back(void)
{
	DlEntry    *e = dl_my_entry();

	if (!left_behind || e == NULL)
		return;
	LWLockAcquire(dl_shared->lock, LW_EXCLUSIVE);
	e->leftover = false;
	LWLockRelease(dl_shared->lock);
	left_behind = false;
}

/*
 * For the keeper: a copy of every leftover (rw_waiters_leave_behind), in
 * the current memory context. Returns how many.
 */
int
rw_waiters_leftovers(RwLeftover **out)
{
	int			n = 0;

	*out = NULL;
	if (dl_shared == NULL)
		return 0;
	LWLockAcquire(dl_shared->lock, LW_SHARED);
	for (int i = 0; i < dl_shared->n; i++)
	{
		DlEntry    *e = &dl_shared->entries[i];
		RwLeftover *l;

		if (!e->leftover)
			continue;
		if (*out == NULL)
			*out = palloc(sizeof(RwLeftover) * dl_shared->n);
		l = &(*out)[n++];
		l->procno = i;
		l->gen = e->leftover_gen;
		l->intent = e->leftover_intent;
		l->owner = pstrdup(e->owner);
		l->key = pstrdup(e->key);
		l->url = pstrdup(e->url);
		l->wait_key = pstrdup(e->wait_key);
	}
	LWLockRelease(dl_shared->lock);
	return n;
}

/*
 * For the keeper, about to withdraw a leftover: the owner's next request
 * number, drawn while the leftover is still there (else 0: the session took
 * it back, rw_waiters_take_back). Under the lock, so every request the
 * session sends after taking it back is newer: the keeper's, however late,
 * is then stale, never the session's.
 */
uint64
rw_waiters_leftover_seq(int procno, uint64 gen)
{
	uint64		seq = 0;

	if (dl_shared == NULL || procno < 0 || procno >= dl_shared->n)
		return 0;
	LWLockAcquire(dl_shared->lock, LW_EXCLUSIVE);
	if (dl_shared->entries[procno].leftover &&
		dl_shared->entries[procno].leftover_gen == gen)
		seq = rw_proto_seq_next_of(procno);
	LWLockRelease(dl_shared->lock);
	return seq;
}

/* The keeper withdrew a leftover: forget it, unless it changed since. */
void
rw_waiters_leftover_done(int procno, uint64 gen)
{
	if (dl_shared == NULL || procno < 0 || procno >= dl_shared->n)
		return;
	LWLockAcquire(dl_shared->lock, LW_EXCLUSIVE);
	if (dl_shared->entries[procno].leftover_gen == gen)
		dl_shared->entries[procno].leftover = false;
	LWLockRelease(dl_shared->lock);
}

/* The waiting sessions of this server, for redis_locks. */
int
rw_deadlock_waiters(RwWaiterRow **rows)
{
	int			n = 0;

	*rows = NULL;
	if (dl_shared == NULL)
		return 0;
	*rows = palloc(sizeof(RwWaiterRow) * (dl_shared->n + 1));
	LWLockAcquire(dl_shared->lock, LW_SHARED);
	for (int i = 0; i < dl_shared->n; i++)
	{
		DlEntry    *e = &dl_shared->entries[i];
		RwWaiterRow *r = &(*rows)[n];

		if (!e->in_use)
			continue;
		r->pid = e->pid;
		r->datid = e->datid;
		r->mode = (RwMode) e->mode;
		r->level = (RwLevel) e->level;
		r->waitstart = e->waitstart;
		r->owner = pstrdup(e->owner);
		r->name = pstrdup(e->name);
		n++;
	}
	LWLockRelease(dl_shared->lock);
	return n;
}

/*
 * Whether a session of this server still waits for `key` (its row in
 * shared memory): a wait cut off in a stall can leave its wait key and its
 * intent in Redis for a while (to their short leases), which must not make
 * an edge. True for an owner of elsewhere, which Redis alone tells about.
 */
bool
rw_waiters_waits(const char *owner, const char *key)
{
	bool		found = false;

	if (dl_shared == NULL || rw_owner_local_pid(owner) <= 0)
		return true;
	LWLockAcquire(dl_shared->lock, LW_SHARED);
	for (int i = 0; i < dl_shared->n && !found; i++)
	{
		DlEntry    *e = &dl_shared->entries[i];

		found = e->in_use && strcmp(e->owner, owner) == 0 &&
			strcmp(e->key, key) == 0;
	}
	LWLockRelease(dl_shared->lock);
	return found;
}

/*
 * Whether shared memory shows that a session of this server waits for
 * `key` now (its row is in use): a sign of life, which Redis alone cannot
 * give for a wait (a wait cut off in a stall leaves its key and intent
 * looking live). False for an owner of elsewhere, or with no table (the
 * library not preloaded): the walk then asks for a fresh sign of life in
 * Redis (walk.c).
 */
bool
rw_waiters_confirms(const char *owner, const char *key)
{
	return dl_shared != NULL && rw_owner_local_pid(owner) > 0 &&
		rw_waiters_waits(owner, key);
}

/*
 * The lock the session with this pid waits for (its hash key, its owner
 * id, 'r' or 'w'), for redis_blocking_pids: false if it does not wait.
 */
bool
rw_waiters_find(int pid, char **key, char **owner, char *mode)
{
	*mode = 0;
	if (dl_shared == NULL)
		return false;
	LWLockAcquire(dl_shared->lock, LW_SHARED);
	for (int i = 0; i < dl_shared->n && *mode == 0; i++)
	{
		DlEntry    *e = &dl_shared->entries[i];

		if (e->in_use && e->pid == pid)
		{
			*mode = e->mode == RW_WRITE ? 'w' : 'r';
			*key = pstrdup(e->key);
			*owner = pstrdup(e->owner);
		}
	}
	LWLockRelease(dl_shared->lock);
	return *mode != 0;
}

/*
 * The mode ('r' or 'w') in which a session of this server with this owner
 * id waits for the lock `key`, or 0 (it does not, or it is not of this
 * server, or there is no table). No call to Redis: the walk skips, with
 * it, a writer queued on the lock its hop's writer waits for.
 */
char
rw_waiters_local_mode(const char *owner, const char *key)
{
	char		mode = 0;

	if (dl_shared == NULL || rw_owner_local_pid(owner) <= 0)
		return 0;
	LWLockAcquire(dl_shared->lock, LW_SHARED);
	for (int i = 0; i < dl_shared->n && mode == 0; i++)
	{
		DlEntry    *e = &dl_shared->entries[i];

		if (e->in_use && strcmp(e->owner, owner) == 0 &&
			strcmp(e->key, key) == 0)
			mode = e->mode == RW_WRITE ? 'w' : 'r';
	}
	LWLockRelease(dl_shared->lock);
	return mode;
}
