/*-------------------------------------------------------------------------
 *
 * introspect.c
 *	  What a session can ask about locks and connections:
 *	  redis_lock_info(name), the state of one lock as Redis has it now, and
 *	  redis_connection_info(), the Redis servers this session talks to.
 *
 * The session's own holds (redis_held_locks) come from held.c through
 * functions.c; this file asks Redis.
 *
 *-------------------------------------------------------------------------
 */
#include "rwlock.h"

#include "catalog/pg_authid.h"
#include "catalog/pg_type.h"
#include "miscadmin.h"
#include "fmgr.h"
#include "funcapi.h"
#include "utils/acl.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"

/* A text[] of owner ids, or an empty array. */
static Datum
introspect_owners(char **owners, int n)
{
	Datum	   *elems = palloc(sizeof(Datum) * (n + 1));

	for (int i = 0; i < n; i++)
		elems[i] = CStringGetTextDatum(owners[i]);
	return PointerGetDatum(construct_array(elems, n, TEXTOID, -1, false,
										   TYPALIGN_INT));
}

static Datum
introspect_interval(int64 ms)
{
	Interval   *iv = palloc0(sizeof(Interval));

	iv->time = ms * 1000;
	return IntervalPGetDatum(iv);
}

/*
 * redis_lock_info(name): one row. state is free, read or write; token the
 * last write token Redis keeps for the name (0 if none); writer the writing
 * owner or NULL; readers the reading owners; waiting the writers whose
 * intents hold new readers back; lease_left the longest lease among the
 * holders (how long until the lock frees itself if they all vanish).
 */
PG_FUNCTION_INFO_V1(redis_lock_info);
Datum
redis_lock_info(PG_FUNCTION_ARGS)
{
	char		name[RW_NAME_MAX + 1];
	TupleDesc	tupdesc;
	RwKeys		keys;
	RwLockInfo	info;
	Datum		values[6];
	bool		nulls[6] = {0};
	int64		longest;

	rw_name_arg(fcinfo, name);
	if (get_call_result_type(fcinfo, NULL, &tupdesc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "return type must be a row type");

	rw_operation_begin();
	rw_build_keys(rw_key_prefix, name, &keys, CurrentMemoryContext);
	rw_proto_info(&rw_current_node()->cmd, &keys, &info);

	longest = info.writer ? info.writer_ms : 0;
	for (int i = 0; i < info.nreaders; i++)
		longest = Max(longest, info.reader_ms[i]);

	values[0] = CStringGetTextDatum(info.state);
	values[1] = Int64GetDatum(info.token);
	if (info.writer)
		values[2] = CStringGetTextDatum(info.writer);
	else
		nulls[2] = true;
	values[3] = introspect_owners(info.readers, info.nreaders);
	values[4] = introspect_owners(info.waiting, info.nwaiting);
	if (strcmp(info.state, "free") == 0)
		nulls[5] = true;
	else
		values[5] = introspect_interval(longest);
	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(tupdesc, values, nulls)));
}

/*
 * Ask an open connection for PONG; false (and closed) if it fails. Throws
 * only to serve an interrupt.
 */
static bool
introspect_ping(RwConn *conn)
{
	const char *argv[1] = {"PING"};
	redisReply *r;
	RwError		err;
	bool		ok;

	rw_append(conn, 1, argv, NULL, NULL);
	if (!rw_exchange(conn, 1, &r, &err))
	{
		if (err.kind == RW_ERR_INTERRUPTED)
			rw_raise(conn, &err);
		return false;
	}
	ok = r->type == REDIS_REPLY_STATUS;
	freeReplyObject(r);
	return ok;
}

/*
 * redis_connection_info(): a row per Redis server this session knows: the
 * one rwlock.redis_url names (current) and any older one that still has
 * holds. It does not connect; a connection that is open is pinged, so
 * rtt_ms is a fresh round trip. The URL is shown (without its password)
 * only to roles that may read rwlock.redis_url.
 */
PG_FUNCTION_INFO_V1(redis_connection_info);
Datum
redis_connection_info(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	RwNode	   *current;
	bool		may_see_url = has_privs_of_role(GetUserId(),
												ROLE_PG_READ_ALL_SETTINGS);

	rw_held_init();
	rw_operation_begin();
	current = rw_current_node();
	InitMaterializedSRF(fcinfo, 0);
	for (RwNode *n = rw_first_node(); n != NULL; n = n->next)
	{
		Datum		values[7];
		bool		nulls[7] = {0};
		bool		connected = n->cmd.ctx != NULL && introspect_ping(&n->cmd);

		if (may_see_url)
			values[0] = CStringGetTextDatum(n->ep.display);
		else
			nulls[0] = true;
		values[1] = BoolGetDatum(n == current);
		values[2] = BoolGetDatum(connected);
		values[3] = BoolGetDatum(n->sub.ctx != NULL);
		if (connected)
			values[4] = Float8GetDatum(n->cmd.last_rtt_ms);
		else
			nulls[4] = true;
		values[5] = Int32GetDatum(n->nholds);
		values[6] = CStringGetTextDatum(rw_owner_id());
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	return (Datum) 0;
}
