/*-------------------------------------------------------------------------
 *
 * functions.c
 *	  The SQL-callable functions of rwlock, and _PG_init.
 *
 *-------------------------------------------------------------------------
 */
#include "rwlock.h"

#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"

PG_MODULE_MAGIC;

void		_PG_init(void);

static bool initialized = false;

void
_PG_init(void)
{
	rw_keeper_init();			/* first: defines rwlock.max_holds */
	rw_define_gucs();
}

/* Per-backend setup, on the first lock call (not in the postmaster). */
static void
backend_init(void)
{
	if (initialized)
		return;
	rw_held_init();
	initialized = true;
}

static void
name_arg(FunctionCallInfo fcinfo, char *buf)
{
	if (PG_ARGISNULL(0))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("Redis lock name must not be null")));
	rw_check_name(PG_GETARG_TEXT_PP(0), buf);
	backend_init();
}

/* The wait argument of the try functions, in ms. */
static long
wait_arg(FunctionCallInfo fcinfo)
{
	Interval   *iv;
	double		ms;

	if (PG_NARGS() < 2)
		return 0;
	if (PG_ARGISNULL(1))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("wait interval must not be null")));
	iv = PG_GETARG_INTERVAL_P(1);
	ms = (iv->time + (double) iv->day * USECS_PER_DAY +
		  (double) iv->month * DAYS_PER_MONTH * USECS_PER_DAY) / 1000.0;
	if (ms < 0 || ms > (double) INT_MAX)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("wait interval must be between 0 and %d ms", INT_MAX)));
	return (long) ms;
}

static Datum
lock_token(FunctionCallInfo fcinfo, char mode, RwLevel level)
{
	char		name[RW_NAME_MAX + 1];
	int64		token;

	name_arg(fcinfo, name);
	rw_lock(name, mode, level, -1, false, &token);
	PG_RETURN_INT64(token);
}

static Datum
lock_try(FunctionCallInfo fcinfo, char mode, RwLevel level)
{
	char		name[RW_NAME_MAX + 1];
	int64		token;
	long		wait_ms;

	name_arg(fcinfo, name);
	wait_ms = wait_arg(fcinfo);
	PG_RETURN_BOOL(rw_lock(name, mode, level, wait_ms, true, &token));
}

PG_FUNCTION_INFO_V1(redis_wlock);
Datum
redis_wlock(PG_FUNCTION_ARGS)
{
	return lock_token(fcinfo, 'w', RW_SESSION);
}

PG_FUNCTION_INFO_V1(redis_rlock);
Datum
redis_rlock(PG_FUNCTION_ARGS)
{
	return lock_token(fcinfo, 'r', RW_SESSION);
}

PG_FUNCTION_INFO_V1(redis_wlock_xact);
Datum
redis_wlock_xact(PG_FUNCTION_ARGS)
{
	return lock_token(fcinfo, 'w', RW_XACT);
}

PG_FUNCTION_INFO_V1(redis_rlock_xact);
Datum
redis_rlock_xact(PG_FUNCTION_ARGS)
{
	return lock_token(fcinfo, 'r', RW_XACT);
}

PG_FUNCTION_INFO_V1(redis_try_wlock);
Datum
redis_try_wlock(PG_FUNCTION_ARGS)
{
	return lock_try(fcinfo, 'w', RW_SESSION);
}

PG_FUNCTION_INFO_V1(redis_try_rlock);
Datum
redis_try_rlock(PG_FUNCTION_ARGS)
{
	return lock_try(fcinfo, 'r', RW_SESSION);
}

PG_FUNCTION_INFO_V1(redis_try_wlock_xact);
Datum
redis_try_wlock_xact(PG_FUNCTION_ARGS)
{
	return lock_try(fcinfo, 'w', RW_XACT);
}

PG_FUNCTION_INFO_V1(redis_try_rlock_xact);
Datum
redis_try_rlock_xact(PG_FUNCTION_ARGS)
{
	return lock_try(fcinfo, 'r', RW_XACT);
}

PG_FUNCTION_INFO_V1(redis_unlock);
Datum
redis_unlock(PG_FUNCTION_ARGS)
{
	char		name[RW_NAME_MAX + 1];

	name_arg(fcinfo, name);
	PG_RETURN_BOOL(rw_unlock(name));
}

PG_FUNCTION_INFO_V1(redis_unlock_all);
Datum
redis_unlock_all(PG_FUNCTION_ARGS)
{
	backend_init();
	PG_RETURN_INT32(rw_unlock_all());
}

PG_FUNCTION_INFO_V1(redis_held_locks);
Datum
redis_held_locks(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	RwHeldRow  *rows;
	int			n;

	backend_init();
	InitMaterializedSRF(fcinfo, 0);
	n = rw_held_rows(&rows);
	for (int i = 0; i < n; i++)
	{
		Datum		values[7];
		bool		nulls[7] = {0};

		values[0] = CStringGetTextDatum(rows[i].name);
		values[1] = CStringGetTextDatum(rows[i].mode == 'w' ? "write" : "read");
		values[2] = CStringGetTextDatum(rows[i].level == RW_SESSION ? "session" : "xact");
		values[3] = Int32GetDatum(rows[i].depth);
		values[4] = Int64GetDatum(rows[i].token);
		values[5] = TimestampTzGetDatum(rows[i].acquired);
		values[6] = CStringGetTextDatum(rows[i].lost ? "lost" : "held");
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	return (Datum) 0;
}
