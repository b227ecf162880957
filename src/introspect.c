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
/*
 * Ask the node that serves the lock, following a cluster's redirections;
 * in quorum mode, every member (rw_quorum_info: the lock as a majority of
 * them has it).
 */
static void
introspect_ask(RwNode *node, const RwKeys *keys, RwLockInfo *info)
{
	int64		started = rw_now_ms();
	RwError		err;

	if (rw_quorum_size(node) > 0)
	{
		if (!rw_quorum_info(node, keys, info, &err))
			rw_raise(&node->cmd, &err);
		return;
	}
	while (!rw_proto_info(rw_cluster_cmd(node, keys), keys, info, &err))
	{
		if (!rw_cluster_redirected(node, &err, started))
			rw_raise(&node->cmd, &err);
	}
}

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
	introspect_ask(rw_current_node(), &keys, &info);

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

/* One row of redis_connection_info: a node, or a member of a cluster. */
static void
introspect_row(ReturnSetInfo *rsinfo, RwNode *shown, bool current,
			   bool subscribed, int nholds, bool may_see_url)
{
	Datum		values[7];
	bool		nulls[7] = {0};
	bool		connected = shown->cmd.ctx != NULL && introspect_ping(&shown->cmd);

	if (may_see_url)
		values[0] = CStringGetTextDatum(shown->ep.display);
	else
		nulls[0] = true;
	values[1] = BoolGetDatum(current);
	values[2] = BoolGetDatum(connected);
	values[3] = BoolGetDatum(subscribed);
	if (connected)
		values[4] = Float8GetDatum(shown->cmd.last_rtt_ms);
	else
		nulls[4] = true;
	values[5] = Int32GetDatum(nholds);
	values[6] = CStringGetTextDatum(rw_owner_id());
	tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
}

/* The rows of a cluster: one per member, with the holds its slots have. */
static void
introspect_cluster_rows(ReturnSetInfo *rsinfo, RwNode *n, bool current,
						bool may_see_url)
{
	int			nlist;
	RwHeld	  **list = rw_holds_list(&nlist);

	for (RwNode *m = rw_cluster_members(n); m != NULL; m = m->next)
	{
		int			nholds = 0;
		bool		subscribed = n->sub.ctx != NULL && n->ep.host != NULL &&
			n->ep.port == m->ep.port && strcmp(n->ep.host, m->ep.host) == 0;

		for (int i = 0; i < nlist; i++)
			if (list[i]->node == n && list[i]->redis_mode != RW_NONE &&
				rw_cluster_node_of(n, &list[i]->keys) == m)
				nholds++;
		introspect_row(rsinfo, m, current, subscribed, nholds, may_see_url);
	}
	pfree(list);
}

/*
 * redis_connection_info(): a row per Redis server this session knows: the
 * one rwlock.redis_url names (current) and any older one that still has
 * holds; for a Redis Cluster, a row per node of it that its slot map
 * names (holds: those in its slots; subscriber: the node the waiters'
 * connection is on); for a quorum, a row per member (holds: all the
 * quorum's, each held on a majority of them). It does not connect; a connection that is open is
 * pinged, so rtt_ms is a fresh round trip. The URL is shown (without its
 * password) only to roles that may read rwlock.redis_url.
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
		if (rw_cluster_members(n) != NULL)
			introspect_cluster_rows(rsinfo, n, n == current, may_see_url);
		else if (rw_quorum_size(n) > 0)
		{
			/* Every hold of a quorum lives on each of its members. */
			for (RwNode *m = rw_node_members(n); m != NULL; m = m->next)
				introspect_row(rsinfo, m, n == current, m->sub.ctx != NULL,
							   n->nholds, may_see_url);
		}
		else
			introspect_row(rsinfo, n, n == current, n->sub.ctx != NULL,
						   n->nholds, may_see_url);
	}
	return (Datum) 0;
}
