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
 * table (STATS_MAX_DATABASES) is full, further databases count in that row
 * too, and redis_lock_stats_reset() there resets nothing.
 *
 * Rows are reclaimed: a row whose database no longer exists is freed when
 * a session attaches or redis_lock_stats is read (stats_tidy). A row also
 * keeps the xmin of its database's pg_database row, and DROP DATABASE
 * flags the row (an object access hook): a flagged row whose database
 * exists again with another xmin is a new database that got the dropped
 * one's OID (CREATE DATABASE ... OID, or OIDs that wrapped around), and
 * starts at zero; one with the same xmin saw a drop that failed.
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

#include "access/htup_details.h"
#include "access/xact.h"
#include "catalog/objectaccess.h"
#include "catalog/pg_database.h"
#include "miscadmin.h"
#include "port/atomics.h"
#include "storage/ipc.h"
#include "storage/lwlock.h"
#include "storage/shmem.h"
#include "utils/syscache.h"
#include "utils/timestamp.h"

#define STATS_MAX_DATABASES 1024	/* about 200 bytes each */

typedef struct RwStatsRow
{
	Oid			dboid;			/* InvalidOid: the keeper's and overflow row */
	bool		in_use;
	bool		dropped;		/* DROP DATABASE of dboid was run */
	TransactionId made;			/* xmin of dboid's pg_database row */
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
static object_access_hook_type prev_object_access_hook = NULL;

static void stats_object_access(ObjectAccessType access, Oid classId,
								Oid objectId, int subId, void *arg);

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
			row->dropped = false;
			row->made = InvalidTransactionId;
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
	prev_object_access_hook = object_access_hook;
	object_access_hook = stats_object_access;
}

/*
 * DROP DATABASE: flag the database's row. Not freed here: the drop may
 * still fail, and the database's sessions may count on (stats_tidy
 * decides once the drop is over).
 */
static void
stats_object_access(ObjectAccessType access, Oid classId, Oid objectId,
					int subId, void *arg)
{
	if (prev_object_access_hook)
		prev_object_access_hook(access, classId, objectId, subId, arg);
	if (access != OAT_DROP || classId != DatabaseRelationId || stats == NULL)
		return;
	LWLockAcquire(stats->lock, LW_EXCLUSIVE);
	for (int i = 1; i < STATS_MAX_DATABASES; i++)
		if (stats->rows[i].in_use && stats->rows[i].dboid == objectId)
			stats->rows[i].dropped = true;
	LWLockRelease(stats->lock);
}

/*
 * Whether database dboid exists, and the xmin of its pg_database row (a
 * new database with a reused OID has another). Only in a transaction.
 */
static bool
stats_db_exists(Oid dboid, TransactionId *made)
{
	HeapTuple	tup = SearchSysCache1(DATABASEOID, ObjectIdGetDatum(dboid));

	if (!HeapTupleIsValid(tup))
		return false;
	*made = HeapTupleHeaderGetRawXmin(tup->t_data);
	ReleaseSysCache(tup);
	return true;
}

/*
 * Free the rows of databases that no longer exist, and zero the row of a
 * dropped database whose OID a new one has now. Catalog lookups, so only
 * in a transaction, and not under the table's lock: the rows are copied,
 * judged, and changed under the lock if they did not change meanwhile.
 */
static void
stats_tidy(void)
{
	Oid		   *oids;
	TransactionId *mades;
	int			n = 0;

	if (stats == NULL || !IsTransactionState())
		return;
	oids = palloc(sizeof(Oid) * STATS_MAX_DATABASES);
	mades = palloc(sizeof(TransactionId) * STATS_MAX_DATABASES);
	LWLockAcquire(stats->lock, LW_SHARED);
	for (int i = 1; i < STATS_MAX_DATABASES; i++)
		if (stats->rows[i].in_use)
		{
			oids[n] = stats->rows[i].dboid;
			n++;
		}
	LWLockRelease(stats->lock);
	for (int j = 0; j < n; j++)
		if (!stats_db_exists(oids[j], &mades[j]))
			mades[j] = InvalidTransactionId;	/* gone */
	LWLockAcquire(stats->lock, LW_EXCLUSIVE);
	for (int j = 0; j < n; j++)
		for (int i = 1; i < STATS_MAX_DATABASES; i++)
		{
			RwStatsRow *row = &stats->rows[i];

			if (!row->in_use || row->dboid != oids[j])
				continue;
			if (!TransactionIdIsValid(mades[j]))
				row->in_use = false;	/* dropped: nobody counts there */
			else if (row->dropped)
			{
				/* A new database with the dropped one's OID starts at zero. */
				if (row->made != mades[j])
					stats_row_zero(row);
				row->dropped = false;
			}
			/* (another xmin, not dropped: ALTER DATABASE; the counts stay) */
			row->made = mades[j];
		}
	LWLockRelease(stats->lock);
	pfree(oids);
	pfree(mades);
}

/* The row of a database, made if need be; row 0 when the table is full. */
static RwStatsRow *
stats_row(Oid dboid)
{
	RwStatsRow *free_row = NULL;
	RwStatsRow *row = &stats->rows[0];
	TransactionId made = InvalidTransactionId;

	if (!OidIsValid(dboid))
		return row;
	stats_tidy();
	if (IsTransactionState())
		(void) stats_db_exists(dboid, &made);
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
		row->dropped = false;
		row->made = made;
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
	stats_tidy();
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

/*
 * Zero the current database's counters (pg_stat_reset's model). A database
 * that counts in the shared row of database 0 (the table was full when
 * this session attached) looks for a row of its own again; if it still has
 * none, nothing is reset and a WARNING says so: that row is everyone's.
 */
bool
rw_stats_reset(void)
{
	if (stats == NULL)
		return false;
	if (stats_mine == &stats->rows[0] && OidIsValid(MyDatabaseId))
		stats_mine = NULL;		/* a row may have been freed since */
	rw_stats_attach();
	if (stats_mine == &stats->rows[0] && OidIsValid(MyDatabaseId))
	{
		ereport(WARNING,
				(errcode(ERRCODE_CONFIGURATION_LIMIT_EXCEEDED),
				 errmsg("this database's Redis lock statistics count in the row of database 0, which was not reset"),
				 errdetail("The table of rwlock statistics has rows for %d databases, all in use.",
						   STATS_MAX_DATABASES - 1)));
		return true;
	}
	LWLockAcquire(stats->lock, LW_EXCLUSIVE);
	stats_row_zero(stats_mine);
	LWLockRelease(stats->lock);
	return true;
}
