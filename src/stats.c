/*-------------------------------------------------------------------------
 *
 * stats.c
 *	  Statistics of Redis locks, per database, in shared memory: what was
 *	  acquired (by mode and level), waited for, timed out, cancelled, lost,
 *	  renewed; Redis errors by class; reconnects and failovers followed.
 *
 * The counters live in shared memory, so they exist only with rwlock in
 * shared_preload_libraries (as pg_stat_statements's do); without it every
 * bump is a no-op and redis_lock_stats is empty. A database's row is made
 * the first time one of its sessions counts something; the keeper, which
 * is connected to no database, counts in the row of database 0. When the
 * table is full, further databases count in that row too.
 *
 * Bumping never throws and takes no lock once a backend has its row (an
 * atomic add): the layers above count where nothing may throw, between a
 * Redis answer and the session's record of it. The row is found (and made,
 * under the table's lock) by rw_stats_attach, at a session's first lock
 * call, before any Redis exchange.
 *
 *-------------------------------------------------------------------------
 */
#include "rwlock.h"

#include "miscadmin.h"
#include "port/atomics.h"
#include "storage/ipc.h"
#include "storage/lwlock.h"
#include "storage/shmem.h"
#include "utils/timestamp.h"

#define STATS_MAX_DATABASES 128

typedef struct RwStatsRow
{
	Oid			dboid;			/* InvalidOid: the keeper's and overflow row */
	bool		in_use;
	pg_atomic_uint64 counts[RW_NSTATS];
	pg_atomic_uint64 reset_at;	/* TimestampTz of the last reset */
} RwStatsRow;

typedef struct RwStatsShared
{
	LWLock	   *lock;			/* making rows; resetting */
	RwStatsRow	rows[STATS_MAX_DATABASES];
} RwStatsShared;

static RwStatsShared *stats = NULL;
static RwStatsRow *stats_mine = NULL;	/* this backend's database's row */
static shmem_request_hook_type prev_shmem_request_hook = NULL;
static shmem_startup_hook_type prev_shmem_startup_hook = NULL;

static void
stats_row_zero(RwStatsRow *row)
{
	for (int i = 0; i < RW_NSTATS; i++)
		pg_atomic_write_u64(&row->counts[i], 0);
	pg_atomic_write_u64(&row->reset_at, (uint64) GetCurrentTimestamp());
}

static void
stats_shmem_request(void)
{
	if (prev_shmem_request_hook)
		prev_shmem_request_hook();
	RequestAddinShmemSpace(sizeof(RwStatsShared));
	RequestNamedLWLockTranche("rwlock stats", 1);
}

static void
stats_shmem_startup(void)
{
	bool		found;

	if (prev_shmem_startup_hook)
		prev_shmem_startup_hook();
	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	stats = ShmemInitStruct("rwlock stats", sizeof(RwStatsShared), &found);
	if (!found)
	{
		/* After a crash too: counts start again, as pg_stat's may. */
		stats->lock = &(GetNamedLWLockTranche("rwlock stats"))->lock;
		for (int i = 0; i < STATS_MAX_DATABASES; i++)
		{
			RwStatsRow *row = &stats->rows[i];

			row->dboid = InvalidOid;
			row->in_use = i == 0;	/* row 0: the keeper's, and overflow */
			for (int j = 0; j < RW_NSTATS; j++)
				pg_atomic_init_u64(&row->counts[j], 0);
			pg_atomic_init_u64(&row->reset_at, (uint64) GetCurrentTimestamp());
		}
	}
	LWLockRelease(AddinShmemInitLock);
}

/* In _PG_init: room in shared memory, when the library is preloaded. */
void
rw_stats_init(void)
{
	if (!process_shared_preload_libraries_in_progress)
		return;
	prev_shmem_request_hook = shmem_request_hook;
	shmem_request_hook = stats_shmem_request;
	prev_shmem_startup_hook = shmem_startup_hook;
	shmem_startup_hook = stats_shmem_startup;
}

/* The row of a database, made if need be; row 0 when the table is full. */
static RwStatsRow *
stats_row(Oid dboid)
{
	RwStatsRow *free_row = NULL;
	RwStatsRow *row = &stats->rows[0];

	if (!OidIsValid(dboid))
		return row;
	LWLockAcquire(stats->lock, LW_EXCLUSIVE);
	for (int i = 1; i < STATS_MAX_DATABASES; i++)
	{
		if (stats->rows[i].in_use && stats->rows[i].dboid == dboid)
		{
			row = &stats->rows[i];
			free_row = NULL;
			break;
		}
		if (!stats->rows[i].in_use && free_row == NULL)
			free_row = &stats->rows[i];
	}
	if (free_row != NULL)
	{
		row = free_row;
		stats_row_zero(row);
		row->dboid = dboid;
		row->in_use = true;
	}
	LWLockRelease(stats->lock);
	return row;
}

/*
 * Find this backend's row, before anything is counted (at the first lock
 * call, and in the keeper at start): later bumps take no lock.
 */
void
rw_stats_attach(void)
{
	if (stats == NULL || stats_mine != NULL)
		return;
	stats_mine = stats_row(MyDatabaseId);
}

/* Count n more of what. Never throws; a no-op without shared memory. */
void
rw_stat_add(RwStat what, uint64 n)
{
	if (stats_mine == NULL)
		return;
	pg_atomic_fetch_add_u64(&stats_mine->counts[what], n);
}

/* Raise a counter to v if it is lower (the longest wait). Never throws. */
void
rw_stat_max(RwStat what, uint64 v)
{
	uint64		cur;

	if (stats_mine == NULL)
		return;
	cur = pg_atomic_read_u64(&stats_mine->counts[what]);
	while (cur < v &&
		   !pg_atomic_compare_exchange_u64(&stats_mine->counts[what], &cur, v))
		;						/* cur was reloaded: try again */
}

/* The SQLSTATE of an error this file counts, as a counter. */
void
rw_stat_error(int sqlerrcode)
{
	if (ERRCODE_TO_CATEGORY(sqlerrcode) == ERRCODE_CONNECTION_EXCEPTION)
		rw_stat_add(RW_STAT_ERR_CONNECTION, 1);
	else if (sqlerrcode == ERRCODE_INSUFFICIENT_PRIVILEGE)
		rw_stat_add(RW_STAT_ERR_PERMISSION, 1);
	else
		rw_stat_add(RW_STAT_ERR_OTHER, 1);
}

/*
 * For redis_lock_stats: a copy of every row in use. Returns how many; rows
 * (palloc'd) has room for STATS_MAX_DATABASES.
 */
int
rw_stats_read(RwStatsCopy **rows)
{
	int			n = 0;

	*rows = palloc0(sizeof(RwStatsCopy) * STATS_MAX_DATABASES);
	if (stats == NULL)
		return 0;
	LWLockAcquire(stats->lock, LW_SHARED);
	for (int i = 0; i < STATS_MAX_DATABASES; i++)
	{
		RwStatsRow *row = &stats->rows[i];
		RwStatsCopy *c = &(*rows)[n];

		if (!row->in_use)
			continue;
		c->dboid = row->dboid;
		for (int j = 0; j < RW_NSTATS; j++)
			c->counts[j] = pg_atomic_read_u64(&row->counts[j]);
		c->reset_at = (TimestampTz) pg_atomic_read_u64(&row->reset_at);
		n++;
	}
	LWLockRelease(stats->lock);
	return n;
}

/* Zero the current database's counters (pg_stat_reset's model). */
bool
rw_stats_reset(void)
{
	if (stats == NULL)
		return false;
	rw_stats_attach();
	LWLockAcquire(stats->lock, LW_EXCLUSIVE);
	stats_row_zero(stats_mine);
	LWLockRelease(stats->lock);
	return true;
}
