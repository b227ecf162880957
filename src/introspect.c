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
 * Text from elsewhere is made text of this database (introspect_text): a
 * lock name published by a session of another database is converted from
 * that database's encoding, and bytes that are not valid here (a
 * SQL_ASCII database's, an owner id a client chose, a character this
 * encoding lacks) are shown escaped as \xNN, so that whatever is selected
 * from the views can be stored, dumped and restored.
 *
 *-------------------------------------------------------------------------
 */
#include "rwlock.h"

#include "access/htup_details.h"
#include "catalog/namespace.h"
#include "catalog/pg_authid.h"
#include "catalog/pg_database.h"
#include "catalog/pg_type.h"
#include "mb/pg_wchar.h"
#include "miscadmin.h"
#include "fmgr.h"
#include "funcapi.h"
#include "utils/acl.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/syscache.h"
#include "utils/timestamp.h"
#include "portability/instr_time.h"

/* The encoding of database datid, or -1 if it is not known (gone, none). */
static int
introspect_db_encoding(Oid datid)
{
	HeapTuple	tup;
	int			enc;

	if (!OidIsValid(datid))
		return -1;
	if (datid == MyDatabaseId)
		return GetDatabaseEncoding();
	tup = SearchSysCache1(DATABASEOID, ObjectIdGetDatum(datid));
	if (!HeapTupleIsValid(tup))
		return -1;
	enc = ((Form_pg_database) GETSTRUCT(tup))->encoding;
	ReleaseSysCache(tup);
	return enc;
}

/*
 * Append len bytes of this database's encoding, keeping each valid
 * character and escaping each byte that starts none as \xNN.
 */
static void
introspect_append_valid(StringInfo buf, const char *p, int len)
{
	int			enc = GetDatabaseEncoding();

	while (len > 0)
	{
		int			l = IS_HIGHBIT_SET(*p) ? pg_encoding_verifymbchar(enc, p, len) : 1;

		if (*p == '\0')
			l = -1;				/* never valid inside text */
		if (l > 0)
			appendBinaryStringInfo(buf, p, l);
		else
		{
			appendStringInfo(buf, "\\x%02x", (unsigned char) *p);
			l = 1;
		}
		p += l;
		len -= l;
	}
}

/*
 * Bytes of encoding src (-1: not known) as text of this database:
 * converted where a conversion exists, and what is not valid here (or
 * cannot be converted) escaped byte by byte as \xNN. Never throws for the
 * bytes' sake.
 */
static text *
introspect_text(const char *str, int src)
{
	int			dst = GetDatabaseEncoding();
	int			len = strlen(str);
	StringInfoData buf;
	Oid			proc = InvalidOid;

	initStringInfo(&buf);
	if (src >= 0 && src != dst && src != PG_SQL_ASCII && dst != PG_SQL_ASCII)
		proc = FindDefaultConversionProc(src, dst);
	if (!OidIsValid(proc))
	{
		introspect_append_valid(&buf, str, len);
		return cstring_to_text_with_len(buf.data, buf.len);
	}
	while (len > 0)
	{
		/* Converts up to the first byte it cannot (noError), then stops. */
		unsigned char *out = palloc((Size) len * MAX_CONVERSION_GROWTH + 1);
		int			done = pg_do_encoding_conversion_buf(proc, src, dst,
														 (unsigned char *) str, len,
														 out, len * MAX_CONVERSION_GROWTH + 1,
														 true);

		introspect_append_valid(&buf, (char *) out, strlen((char *) out));
		pfree(out);
		str += done;
		len -= done;
		if (len > 0)
		{
			appendStringInfo(&buf, "\\x%02x", (unsigned char) *str);
			str++;
			len--;
		}
	}
	return cstring_to_text_with_len(buf.data, buf.len);
}

/* A text[] of owner ids, or an empty array. */
static Datum
introspect_owners(char **owners, int n)
{
	Datum	   *elems = palloc(sizeof(Datum) * (n + 1));

	for (int i = 0; i < n; i++)
		elems[i] = PointerGetDatum(introspect_text(owners[i], -1));
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
		values[2] = PointerGetDatum(introspect_text(info.writer, -1));
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

/* A row of redis_connection_info, gathered before its connection is pinged. */
typedef struct IntrospectRow
{
	RwNode	   *shown;			/* a node, or a member of a cluster or quorum */
	bool		current;
	bool		subscribed;
	int			nholds;
	bool		pinged;			/* PING sent, its answer not read yet */
	bool		connected;		/* answered PONG */
	instr_time	sent;
} IntrospectRow;

/* Read a row's PING answer (waiting at most until the cap), and time it. */
static void
introspect_pong(IntrospectRow *row)
{
	RwConn	   *conn = &row->shown->cmd;
	redisReply *r;
	RwError		err;
	instr_time	now;
	bool		ok = rw_exchange(conn, 1, &r, &err);

	row->pinged = false;
	if (!ok)
	{
		if (err.kind == RW_ERR_INTERRUPTED)
			rw_raise(conn, &err);
		return;
	}
	INSTR_TIME_SET_CURRENT(now);
	INSTR_TIME_SUBTRACT(now, row->sent);
	conn->last_rtt_ms = INSTR_TIME_GET_MILLISEC(now);
	row->connected = r->type == REDIS_REPLY_STATUS;
	freeReplyObject(r);
}

/*
 * Read the answers of the pinged rows as they come, until the cap (the
 * waits serve interrupts: they may throw).
 */
static void
introspect_read_pongs(IntrospectRow *rows, int n)
{
	int		   *pending = palloc(sizeof(int) * (n + 1));
	RwConn	  **conns = palloc(sizeof(RwConn *) * (n + 1));
	int			npending = 0;

	for (int i = 0; i < n; i++)
		if (rows[i].pinged)
			pending[npending++] = i;
	while (npending > 0)
	{
		int			left = 0;

		for (int k = 0; k < npending; k++)
			conns[k] = &rows[pending[k]].shown->cmd;
		if (!rw_conns_wait_readable(conns, npending, -1))
			break;
		for (int k = 0; k < npending; k++)
		{
			RwConn	   *conn = conns[k];

			if ((conn->tls != NULL && rw_tls_pending(conn->tls)) ||
				rw_conn_wait_readable(conn, 0))
				introspect_pong(&rows[pending[k]]);
			else
				pending[left++] = pending[k];
		}
		npending = left;
	}
	/* Out of time: each gives up (and is closed) without waiting more. */
	for (int k = 0; k < npending; k++)
		introspect_pong(&rows[pending[k]]);
	pfree(pending);
	pfree(conns);
}

/*
 * PING every row's open connection at once, then read the answers as they
 * come, all within one rwlock.command_timeout (as a quorum's rounds: k
 * servers that do not answer cost one timeout, not k). A connection that
 * does not answer in time, or fails, is closed: its row is not connected.
 * So is every connection whose answer is still due when an interrupt cuts
 * the wait short: its PONG must not be read as the next command's answer.
 */
static void
introspect_ping_all(IntrospectRow *rows, int n)
{
	const char *argv[1] = {"PING"};
	int64		cap = rw_conn_tighten(rw_now_ms() + rw_command_timeout_ms);

	for (int i = 0; i < n; i++)
		rows[i].pinged = rows[i].connected = false;
	PG_TRY();
	{
		for (int i = 0; i < n; i++)
		{
			RwConn	   *conn = &rows[i].shown->cmd;
			RwError		err;

			if (conn->ctx == NULL)
				continue;
			rw_append(conn, 1, argv, NULL, NULL);
			INSTR_TIME_SET_CURRENT(rows[i].sent);
			rows[i].pinged = rw_flush(conn, rw_now_ms() + rw_command_timeout_ms, &err);
			if (!rows[i].pinged && err.kind == RW_ERR_INTERRUPTED)
				rw_raise(conn, &err);
		}
		introspect_read_pongs(rows, n);
	}
	PG_CATCH();
	{
		for (int i = 0; i < n; i++)
			if (rows[i].pinged)
				rw_conn_close(&rows[i].shown->cmd);
		rw_conn_restore(cap);
		PG_RE_THROW();
	}
	PG_END_TRY();
	rw_conn_restore(cap);
}

/* Add a row (rows has room for every row a node can have). */
static void
introspect_add(IntrospectRow *rows, int *n, RwNode *shown, bool current,
			   bool subscribed, int nholds)
{
	IntrospectRow *row = &rows[(*n)++];

	row->shown = shown;
	row->current = current;
	row->subscribed = subscribed;
	row->nholds = nholds;
}

/* The rows of a cluster: one per member, with the holds its slots have. */
static void
introspect_cluster_rows(IntrospectRow *rows, int *n, RwNode *node, bool current)
{
	int			nlist;
	RwHeld	  **list = rw_holds_list(&nlist);

	for (RwNode *m = rw_cluster_members(node); m != NULL; m = m->next)
	{
		int			nholds = 0;
		bool		subscribed = node->sub.ctx != NULL && node->ep.host != NULL &&
			node->ep.port == m->ep.port && strcmp(node->ep.host, m->ep.host) == 0;

		for (int i = 0; i < nlist; i++)
			if (list[i]->node == node && list[i]->redis_mode != RW_NONE &&
				rw_cluster_node_of(node, &list[i]->keys) == m)
				nholds++;
		introspect_add(rows, n, m, current, subscribed, nholds);
	}
	pfree(list);
}

/* Emit one row. */
static void
introspect_emit(ReturnSetInfo *rsinfo, IntrospectRow *row, bool may_see_url)
{
	Datum		values[7];
	bool		nulls[7] = {0};

	if (may_see_url)
		values[0] = CStringGetTextDatum(row->shown->ep.display);
	else
		nulls[0] = true;
	values[1] = BoolGetDatum(row->current);
	values[2] = BoolGetDatum(row->connected);
	values[3] = BoolGetDatum(row->subscribed);
	if (row->connected)
		values[4] = Float8GetDatum(row->shown->cmd.last_rtt_ms);
	else
		nulls[4] = true;
	values[5] = Int32GetDatum(row->nholds);
	values[6] = CStringGetTextDatum(rw_owner_id());
	tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
}

/*
 * redis_connection_info(): a row per Redis server this session knows: the
 * one rwlock.redis_url names (current) and any older one that still has
 * holds; for a Redis Cluster, a row per node of it that its slot map
 * names (holds: those in its slots; subscriber: the node the waiters'
 * connection is on); for a quorum, a row per member (holds: all the
 * quorum's, each held on a majority of them). It does not connect; the
 * connections that are open are pinged, all at once, so rtt_ms is a fresh
 * round trip, and servers that do not answer cost one
 * rwlock.command_timeout in all. The URL is shown (without its
 * password) only to roles that may read rwlock.redis_url.
 */
PG_FUNCTION_INFO_V1(redis_connection_info);
Datum
redis_connection_info(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	RwNode	   *current;
	IntrospectRow *rows;
	int			nrows = 0;
	int			room = 0;
	bool		may_see_url = has_privs_of_role(GetUserId(),
												ROLE_PG_READ_ALL_SETTINGS);

	rw_held_init();
	rw_operation_begin();
	current = rw_current_node();
	InitMaterializedSRF(fcinfo, 0);
	for (RwNode *n = rw_first_node(); n != NULL; n = n->next)
		room += 1 + Max(rw_quorum_size(n), 0);
	for (RwNode *n = rw_first_node(); n != NULL; n = n->next)
		for (RwNode *m = rw_cluster_members(n); m != NULL; m = m->next)
			room++;
	rows = palloc(sizeof(IntrospectRow) * room);
	for (RwNode *n = rw_first_node(); n != NULL; n = n->next)
	{
		if (rw_cluster_members(n) != NULL)
			introspect_cluster_rows(rows, &nrows, n, n == current);
		else if (rw_quorum_size(n) > 0)
		{
			/* Every hold of a quorum lives on each of its members. */
			for (RwNode *m = rw_node_members(n); m != NULL; m = m->next)
				introspect_add(rows, &nrows, m, n == current, m->sub.ctx != NULL,
							   n->nholds);
		}
		else
			introspect_add(rows, &nrows, n, n == current, n->sub.ctx != NULL,
						   n->nholds);
	}
	introspect_ping_all(rows, nrows);
	for (int i = 0; i < nrows; i++)
		introspect_emit(rsinfo, &rows[i], may_see_url);
	return (Datum) 0;
}

/*
 * redis_lock_stats_fn(): a row per database that counted something since
 * the server started (stats.c), and the row of database 0 (the keeper's,
 * and databases beyond the table's room). Times are in milliseconds, as
 * pg_stat_database's. Empty without rwlock in shared_preload_libraries.
 */
PG_FUNCTION_INFO_V1(redis_lock_stats_fn);
Datum
redis_lock_stats_fn(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	RwStatsCopy *rows;
	int			n = rw_stats_read(&rows);

	InitMaterializedSRF(fcinfo, 0);
	for (int i = 0; i < n; i++)
	{
		Datum		values[RW_NSTATS + 2];
		bool		nulls[RW_NSTATS + 2] = {0};

		values[0] = ObjectIdGetDatum(rows[i].dboid);
		for (int j = 0; j < RW_NSTATS; j++)
		{
			if (j == RW_STAT_WAIT_MS || j == RW_STAT_WAIT_MAX_MS)
				values[1 + j] = Float8GetDatum((double) rows[i].counts[j]);
			else
				values[1 + j] = Int64GetDatum((int64) rows[i].counts[j]);
		}
		values[1 + RW_NSTATS] = TimestampTzGetDatum(rows[i].reset_at);
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	return (Datum) 0;
}

/* redis_lock_stats_reset(): zero the current database's counters. */
PG_FUNCTION_INFO_V1(redis_lock_stats_reset);
Datum
redis_lock_stats_reset(PG_FUNCTION_ARGS)
{
	if (!rw_stats_reset())
		ereport(WARNING,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("rwlock statistics are not collected"),
				 errhint("Add rwlock to shared_preload_libraries and restart the server.")));
	PG_RETURN_VOID();
}

/*
 * The rows of every hold published by every session of this server, one
 * per session, name and level (holdtable.c's table): the nine columns of
 * version 1.1's redis_locks, and with ncols 12 granted, waitstart and datid
 * as well.
 */
static void
introspect_hold_rows(ReturnSetInfo *rsinfo, int ncols)
{
	RwKeeperRow *holds;
	int			nholds = rw_holdtable_rows(&holds);
	int64		now = rw_now_ms();

	for (int i = 0; i < nholds; i++)
	{
		RwKeeperRow *h = &holds[i];

		for (int level = 0; level < 2; level++)
		{
			Datum		values[12];
			bool		nulls[12] = {0};
			RwMode		m = (RwMode) h->modes[level];
			int			enc = introspect_db_encoding(h->datid);

			if (m == RW_NONE)
				continue;
			/* An exited backend's pid may be another process's by now. */
			values[0] = Int32GetDatum(h->pid);
			nulls[0] = !h->live;
			values[1] = PointerGetDatum(introspect_text(h->name, enc));
			values[2] = CStringGetTextDatum(m == RW_WRITE ? "write" : "read");
			values[3] = CStringGetTextDatum(level == RW_SESSION ? "session" : "xact");
			values[4] = Int64GetDatum(h->token);
			values[5] = TimestampTzGetDatum(h->acquired);
			values[6] = TimestampTzGetDatum(rw_mono_to_timestamp(h->lease_end_ms));
			values[7] = CStringGetTextDatum(h->releasing ? "releasing" :
											h->lost ? "lost" :
											h->lease_end_ms < now ? "expired" : "held");
			values[8] = CStringGetTextDatum(h->owner);
			if (ncols == 12)
			{
				values[9] = BoolGetDatum(true);
				nulls[10] = true;
				values[11] = ObjectIdGetDatum(h->datid);
			}
			tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
		}
	}
}

/*
 * redis_locks as versions 1.0 and 1.1 declare it (an installation not yet
 * updated with ALTER EXTENSION rwlock UPDATE): the holds only.
 */
PG_FUNCTION_INFO_V1(redis_locks);
Datum
redis_locks(PG_FUNCTION_ARGS)
{
	InitMaterializedSRF(fcinfo, 0);
	introspect_hold_rows((ReturnSetInfo *) fcinfo->resultinfo, 9);
	return (Datum) 0;
}

/*
 * redis_locks (version 1.2): every hold published by every session of this
 * server, one row per session, name and level (holdtable.c's table), then a
 * row per waiting session (deadlock.c's), granted = false, as pg_locks
 * shows waiters. Empty unless rwlock is preloaded.
 */
PG_FUNCTION_INFO_V1(redis_locks_all);
Datum
redis_locks_all(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	RwWaiterRow *waits;
	int			nwaits;

	InitMaterializedSRF(fcinfo, 0);
	introspect_hold_rows(rsinfo, 12);
	nwaits = rw_deadlock_waiters(&waits);
	for (int i = 0; i < nwaits; i++)
	{
		RwWaiterRow *w = &waits[i];
		Datum		values[12];
		bool		nulls[12] = {0};

		values[0] = Int32GetDatum(w->pid);
		values[1] = PointerGetDatum(introspect_text(w->name, introspect_db_encoding(w->datid)));
		values[2] = CStringGetTextDatum(w->mode == RW_WRITE ? "write" : "read");
		values[3] = CStringGetTextDatum(w->level == RW_SESSION ? "session" : "xact");
		nulls[4] = nulls[5] = nulls[6] = true;
		values[7] = CStringGetTextDatum("waiting");
		values[8] = CStringGetTextDatum(w->owner);
		values[9] = BoolGetDatum(false);
		values[10] = TimestampTzGetDatum(w->waitstart);
		values[11] = ObjectIdGetDatum(w->datid);
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	return (Datum) 0;
}

/*
 * redis_blocking_pids(pid): the sessions of this server that pid waits for
 * in its Redis lock wait (holders, and writers queued ahead of it), as
 * pg_blocking_pids; empty when it does not wait.
 */
PG_FUNCTION_INFO_V1(redis_blocking_pids);
Datum
redis_blocking_pids(PG_FUNCTION_ARGS)
{
	char	  **owners;
	int			n;
	Datum	   *elems;
	int			nelems = 0;

	rw_operation_begin();
	(void) rw_deadlock_blockers(PG_GETARG_INT32(0), &owners, &n);
	rw_operation_end();
	elems = palloc(sizeof(Datum) * (n + 1));
	for (int i = 0; i < n; i++)
	{
		int			pid = rw_owner_local_pid(owners[i]);

		if (pid > 0)
			elems[nelems++] = Int32GetDatum(pid);
	}
	PG_RETURN_POINTER(construct_array(elems, nelems, INT4OID, 4, true,
									  TYPALIGN_INT));
}

/*
 * redis_blocking_owners(pid): the owner ids of all that pid waits for,
 * wherever they are (sessions of other servers, clients); empty when it
 * does not wait.
 */
PG_FUNCTION_INFO_V1(redis_blocking_owners);
Datum
redis_blocking_owners(PG_FUNCTION_ARGS)
{
	char	  **owners;
	int			n;

	rw_operation_begin();
	(void) rw_deadlock_blockers(PG_GETARG_INT32(0), &owners, &n);
	rw_operation_end();
	return introspect_owners(owners, n);
}
