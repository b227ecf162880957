/*-------------------------------------------------------------------------
 *
 * functions.c
 *	  Every SQL entry point of rwlock that changes holds, their argument
 *	  checks, and _PG_init. Each function checks its arguments and calls one
 *	  function below; the view redis_held_locks is built on
 *	  redis_held_locks() here. The entry points that only look (redis_locks,
 *	  redis_lock_info, statistics, blockers) are introspect.c's.
 *
 *-------------------------------------------------------------------------
 */
#include "rwlock.h"

#include "catalog/pg_type.h"
#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"

PG_MODULE_MAGIC;

void		_PG_init(void);

void
_PG_init(void)
{
	rw_keeper_init();			/* first: defines rwlock.max_holds */
	rw_stats_init();
	rw_deadlock_init();
	rw_define_gucs();
	rw_held_install_hooks();
}

/* Validate a lock name argument and copy it, NUL-terminated, into buf. */
static void
fn_check_name(text *name, char *buf)
{
	int			len = VARSIZE_ANY_EXHDR(name);

	if (len == 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("Redis lock name must not be empty")));
	if (len > RW_NAME_MAX)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("Redis lock name is too long"),
				 errdetail("It is %d bytes; the limit is %d bytes.", len, RW_NAME_MAX)));
	memcpy(buf, VARDATA_ANY(name), len);
	buf[len] = '\0';
}

/* The name argument (first), checked and copied into buf. */
void
rw_name_arg(FunctionCallInfo fcinfo, char *buf)
{
	if (PG_ARGISNULL(0))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("Redis lock name must not be null")));
	fn_check_name(PG_GETARG_TEXT_PP(0), buf);
	rw_held_init();
}

/* The wait argument of the try functions, in ms. */
static long
fn_wait_arg(FunctionCallInfo fcinfo)
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
fn_lock(FunctionCallInfo fcinfo, RwMode mode, RwLevel level)
{
	char		name[RW_NAME_MAX + 1];
	int64		token;

	rw_name_arg(fcinfo, name);
	rw_lock(name, mode, level, -1, false, &token);
	PG_RETURN_INT64(token);
}

static Datum
fn_try_lock(FunctionCallInfo fcinfo, RwMode mode, RwLevel level)
{
	char		name[RW_NAME_MAX + 1];
	int64		token;
	long		wait_ms;

	rw_name_arg(fcinfo, name);
	wait_ms = fn_wait_arg(fcinfo);
	PG_RETURN_BOOL(rw_lock(name, mode, level, wait_ms, true, &token));
}

/* An element of a names array: its text, and where it stood. */
typedef struct FnName
{
	char	   *name;
	int			pos;
} FnName;

/*
 * The canonical order of names (docs/protocol.md section 19): byte by
 * byte, unsigned, a name before the names it is a prefix of. strcmp
 * compares so (C99 7.21.4) and a text holds no NUL byte. A client in any
 * language computes the same order on the names' UTF-8 bytes.
 */
static int
fn_name_cmp(const void *a, const void *b)
{
	return strcmp(((const FnName *) a)->name, ((const FnName *) b)->name);
}

/*
 * The names argument (first) of a multi-name form: a one-dimensional,
 * non-empty array without NULLs, each name checked as a single name is.
 * Sets *names to the distinct names in the canonical order (*nnames of
 * them) and *map to where each element of the array went among them
 * (*nelems elements), so that a duplicate gets its name's token.
 */
static void
fn_names_arg(FunctionCallInfo fcinfo, char ***names, int *nnames,
			 int **map, int *nelems)
{
	ArrayType  *arr;
	Datum	   *elems;
	bool	   *nulls;
	int			n;
	FnName	   *sorted;
	int			k = 0;

	if (PG_ARGISNULL(0))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("array of Redis lock names must not be null")));
	arr = PG_GETARG_ARRAYTYPE_P(0);
	if (ARR_NDIM(arr) > 1)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("array of Redis lock names must be one-dimensional")));
	deconstruct_array(arr, TEXTOID, -1, false, TYPALIGN_INT,
					  &elems, &nulls, &n);
	if (n == 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("array of Redis lock names must not be empty")));
	sorted = palloc(sizeof(FnName) * n);
	for (int i = 0; i < n; i++)
	{
		text	   *t;

		if (nulls[i])
			ereport(ERROR,
					(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
					 errmsg("Redis lock name must not be null"),
					 errdetail("Element %d of the array of names is null.", i + 1)));
		t = DatumGetTextPP(elems[i]);
		/* (fn_check_name refuses a longer name before it copies) */
		sorted[i].name = palloc(Min(VARSIZE_ANY_EXHDR(t), RW_NAME_MAX) + 1);
		fn_check_name(t, sorted[i].name);
		sorted[i].pos = i;
	}
	qsort(sorted, n, sizeof(FnName), fn_name_cmp);
	*names = palloc(sizeof(char *) * n);
	*map = palloc(sizeof(int) * n);
	for (int i = 0; i < n; i++)
	{
		if (k == 0 || strcmp((*names)[k - 1], sorted[i].name) != 0)
			(*names)[k++] = sorted[i].name;
		(*map)[sorted[i].pos] = k - 1;
	}
	*nnames = k;
	*nelems = n;
	rw_held_init();
}

/* The lock forms on an array: the tokens, in the array's order. */
static Datum
fn_lock_many(FunctionCallInfo fcinfo, RwMode mode, RwLevel level)
{
	char	  **names;
	int		   *map;
	int			nnames,
				nelems;
	int64	   *tokens;
	Datum	   *out;

	fn_names_arg(fcinfo, &names, &nnames, &map, &nelems);
	tokens = palloc(sizeof(int64) * nnames);
	rw_lock_many((const char *const *) names, nnames, mode, level, -1, false,
				 tokens);
	out = palloc(sizeof(Datum) * nelems);
	for (int i = 0; i < nelems; i++)
		out[i] = Int64GetDatum(tokens[map[i]]);
	PG_RETURN_ARRAYTYPE_P(construct_array(out, nelems, INT8OID, sizeof(int64),
										  FLOAT8PASSBYVAL, TYPALIGN_DOUBLE));
}

/* The try forms on an array: true if every name was taken. */
static Datum
fn_try_lock_many(FunctionCallInfo fcinfo, RwMode mode, RwLevel level)
{
	char	  **names;
	int		   *map;
	int			nnames,
				nelems;
	long		wait_ms;

	fn_names_arg(fcinfo, &names, &nnames, &map, &nelems);
	wait_ms = fn_wait_arg(fcinfo);
	PG_RETURN_BOOL(rw_lock_many((const char *const *) names, nnames, mode,
								level, wait_ms, true,
								palloc(sizeof(int64) * nnames)));
}

PG_FUNCTION_INFO_V1(redis_wlock);
Datum
redis_wlock(PG_FUNCTION_ARGS)
{
	return fn_lock(fcinfo, RW_WRITE, RW_SESSION);
}

PG_FUNCTION_INFO_V1(redis_rlock);
Datum
redis_rlock(PG_FUNCTION_ARGS)
{
	return fn_lock(fcinfo, RW_READ, RW_SESSION);
}

PG_FUNCTION_INFO_V1(redis_wlock_xact);
Datum
redis_wlock_xact(PG_FUNCTION_ARGS)
{
	return fn_lock(fcinfo, RW_WRITE, RW_XACT);
}

PG_FUNCTION_INFO_V1(redis_rlock_xact);
Datum
redis_rlock_xact(PG_FUNCTION_ARGS)
{
	return fn_lock(fcinfo, RW_READ, RW_XACT);
}

PG_FUNCTION_INFO_V1(redis_try_wlock);
Datum
redis_try_wlock(PG_FUNCTION_ARGS)
{
	return fn_try_lock(fcinfo, RW_WRITE, RW_SESSION);
}

PG_FUNCTION_INFO_V1(redis_try_rlock);
Datum
redis_try_rlock(PG_FUNCTION_ARGS)
{
	return fn_try_lock(fcinfo, RW_READ, RW_SESSION);
}

PG_FUNCTION_INFO_V1(redis_try_wlock_xact);
Datum
redis_try_wlock_xact(PG_FUNCTION_ARGS)
{
	return fn_try_lock(fcinfo, RW_WRITE, RW_XACT);
}

PG_FUNCTION_INFO_V1(redis_try_rlock_xact);
Datum
redis_try_rlock_xact(PG_FUNCTION_ARGS)
{
	return fn_try_lock(fcinfo, RW_READ, RW_XACT);
}

PG_FUNCTION_INFO_V1(redis_wlock_many);
Datum
redis_wlock_many(PG_FUNCTION_ARGS)
{
	return fn_lock_many(fcinfo, RW_WRITE, RW_SESSION);
}

PG_FUNCTION_INFO_V1(redis_rlock_many);
Datum
redis_rlock_many(PG_FUNCTION_ARGS)
{
	return fn_lock_many(fcinfo, RW_READ, RW_SESSION);
}

PG_FUNCTION_INFO_V1(redis_wlock_xact_many);
Datum
redis_wlock_xact_many(PG_FUNCTION_ARGS)
{
	return fn_lock_many(fcinfo, RW_WRITE, RW_XACT);
}

PG_FUNCTION_INFO_V1(redis_rlock_xact_many);
Datum
redis_rlock_xact_many(PG_FUNCTION_ARGS)
{
	return fn_lock_many(fcinfo, RW_READ, RW_XACT);
}

PG_FUNCTION_INFO_V1(redis_try_wlock_many);
Datum
redis_try_wlock_many(PG_FUNCTION_ARGS)
{
	return fn_try_lock_many(fcinfo, RW_WRITE, RW_SESSION);
}

PG_FUNCTION_INFO_V1(redis_try_rlock_many);
Datum
redis_try_rlock_many(PG_FUNCTION_ARGS)
{
	return fn_try_lock_many(fcinfo, RW_READ, RW_SESSION);
}

PG_FUNCTION_INFO_V1(redis_try_wlock_xact_many);
Datum
redis_try_wlock_xact_many(PG_FUNCTION_ARGS)
{
	return fn_try_lock_many(fcinfo, RW_WRITE, RW_XACT);
}

PG_FUNCTION_INFO_V1(redis_try_rlock_xact_many);
Datum
redis_try_rlock_xact_many(PG_FUNCTION_ARGS)
{
	return fn_try_lock_many(fcinfo, RW_READ, RW_XACT);
}

PG_FUNCTION_INFO_V1(redis_unlock);
Datum
redis_unlock(PG_FUNCTION_ARGS)
{
	char		name[RW_NAME_MAX + 1];

	rw_name_arg(fcinfo, name);
	PG_RETURN_BOOL(rw_unlock(name, RW_NONE));
}

/* A mode argument ('read' or 'write') of the unlock forms. */
static RwMode
fn_mode_arg(FunctionCallInfo fcinfo, int argno)
{
	char	   *mode;

	if (PG_ARGISNULL(argno))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("Redis lock mode must not be null")));
	mode = text_to_cstring(PG_GETARG_TEXT_PP(argno));
	if (strcmp(mode, "read") != 0 && strcmp(mode, "write") != 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("invalid Redis lock mode \"%s\"", mode),
				 errhint("The mode is 'read' or 'write'.")));
	return mode[0] == 'w' ? RW_WRITE : RW_READ;
}

/*
 * redis_unlock(name, mode): the most recent session-level hold of that mode,
 * as pg_advisory_unlock and pg_advisory_unlock_shared each name theirs.
 */
PG_FUNCTION_INFO_V1(redis_unlock_mode);
Datum
redis_unlock_mode(PG_FUNCTION_ARGS)
{
	char		name[RW_NAME_MAX + 1];
	RwMode		mode;

	rw_name_arg(fcinfo, name);
	mode = fn_mode_arg(fcinfo, 1);
	PG_RETURN_BOOL(rw_unlock(name, mode));
}

/*
 * The unlock forms on an array: each name let go once, as redis_unlock(name)
 * (or redis_unlock(name, mode)) would; its answer at each of its places in
 * the array.
 */
static Datum
fn_unlock_many(FunctionCallInfo fcinfo, bool with_mode)
{
	RwMode		mode = RW_NONE;
	char	  **names;
	int		   *map;
	int			nnames,
				nelems;
	bool	   *released;
	Datum	   *out;

	fn_names_arg(fcinfo, &names, &nnames, &map, &nelems);
	if (with_mode)
		mode = fn_mode_arg(fcinfo, 1);
	released = palloc(sizeof(bool) * nnames);
	rw_unlock_many((const char *const *) names, nnames, mode, released);
	out = palloc(sizeof(Datum) * nelems);
	for (int i = 0; i < nelems; i++)
		out[i] = BoolGetDatum(released[map[i]]);
	PG_RETURN_ARRAYTYPE_P(construct_array(out, nelems, BOOLOID, 1, true,
										  TYPALIGN_CHAR));
}

PG_FUNCTION_INFO_V1(redis_unlock_many);
Datum
redis_unlock_many(PG_FUNCTION_ARGS)
{
	return fn_unlock_many(fcinfo, false);
}

PG_FUNCTION_INFO_V1(redis_unlock_mode_many);
Datum
redis_unlock_mode_many(PG_FUNCTION_ARGS)
{
	return fn_unlock_many(fcinfo, true);
}

PG_FUNCTION_INFO_V1(redis_unlock_all);
Datum
redis_unlock_all(PG_FUNCTION_ARGS)
{
	rw_held_init();
	PG_RETURN_INT32(rw_unlock_all(true));
}

PG_FUNCTION_INFO_V1(redis_held_locks);
Datum
redis_held_locks(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	RwHeldRow  *rows;
	int			n;

	rw_held_init();
	rw_operation_begin();
	InitMaterializedSRF(fcinfo, 0);
	n = rw_held_rows(&rows);
	for (int i = 0; i < n; i++)
	{
		Datum		values[7];
		bool		nulls[7] = {0};

		values[0] = CStringGetTextDatum(rows[i].name);
		values[1] = CStringGetTextDatum(rows[i].mode == RW_WRITE ? "write" : "read");
		values[2] = CStringGetTextDatum(rows[i].level == RW_SESSION ? "session" : "xact");
		values[3] = Int32GetDatum(rows[i].depth);
		values[4] = Int64GetDatum(rows[i].token);
		values[5] = TimestampTzGetDatum(rows[i].acquired);
		values[6] = CStringGetTextDatum(rows[i].lost ? "lost" : "held");
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	return (Datum) 0;
}

/*
 * redis_renew(): renew every lease this session holds, now, whether or not
 * the keeper runs. Returns how many holds were renewed; each hold found
 * lost, and each server that could not be reached, gives a WARNING.
 */
PG_FUNCTION_INFO_V1(redis_renew);
Datum
redis_renew(PG_FUNCTION_ARGS)
{
	int			n;

	rw_held_init();
	rw_operation_begin();
	n = rw_renew_due(true, NULL);
	rw_operation_end();
	PG_RETURN_INT32(n);
}
