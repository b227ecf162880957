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
 * trusts Redis alone.
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
} DlEntry;

typedef struct DlShared
{
	LWLock	   *lock;
	int			n;
	DlEntry		entries[FLEXIBLE_ARRAY_MEMBER];
} DlShared;

static DlShared *dl_shared = NULL;
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
		for (int i = 0; i < MaxBackends; i++)
			dl_shared->entries[i].in_use = false;
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
