/*-------------------------------------------------------------------------
 *
 * scripts.c
 *	  Running the protocol's Lua scripts: EVALSHA, falling back to EVAL.
 *
 * The scripts themselves live in lua/ and are compiled into lua_scripts.c
 * at build time, with their SHA1s, so no file is read at run time and no
 * SCRIPT LOAD round trip is ever spent. A connection's first call of each
 * script is sent as EVAL, with the body, which caches it in Redis; later
 * ones as EVALSHA. A new connection may be to a Redis that never saw the
 * script (a restart, a failover, another master of a quorum): sending the
 * body up front spares the NOSCRIPT round trip there, which in a quorum
 * would come only after every other master had been asked (and could come
 * after a lease it was to renew had run out). A NOSCRIPT answer on an older
 * connection (a SCRIPT FLUSH) means the script did not run: the same call is
 * sent again as EVAL, and every script is sent as EVAL once more.
 * Calls whose answers are read later (releases at transaction end) are sent
 * as EVAL from the start: nobody may be there to send them again.
 *
 *-------------------------------------------------------------------------
 */
#include "rwlock.h"

/* Build an EVALSHA call; the strings must outlive rw_script_run. */
void
rw_script_prepare(RwScriptCall *call, RwScriptId id, int nkeys,
				  const char *const *keys, const size_t *keylens,
				  int nargs, const char *const *args)
{
	int			n = 0;

	Assert(3 + nkeys + nargs <= RW_SCRIPT_MAXARGS);
	call->id = id;
	snprintf(call->numkeys, sizeof(call->numkeys), "%d", nkeys);
	call->argv[n] = "EVALSHA";
	call->lens[n++] = 7;
	call->argv[n] = rw_scripts[id].sha1;
	call->lens[n++] = 40;
	call->argv[n] = call->numkeys;
	call->lens[n++] = strlen(call->numkeys);
	for (int i = 0; i < nkeys; i++)
	{
		call->argv[n] = keys[i];
		call->lens[n++] = keylens[i];
	}
	for (int i = 0; i < nargs; i++)
	{
		call->argv[n] = args[i];
		call->lens[n++] = strlen(args[i]);
	}
	call->argc = n;
}

static bool
scripts_is_noscript(redisReply *r)
{
	return r->type == REDIS_REPLY_ERROR && strncmp(r->str, "NOSCRIPT", 8) == 0;
}

/* Turn an EVALSHA call into the EVAL of the same script. */
static void
scripts_as_eval(RwScriptCall *call)
{
	call->argv[0] = "EVAL";
	call->lens[0] = 4;
	call->argv[1] = rw_scripts[call->id].body;
	call->lens[1] = strlen(rw_scripts[call->id].body);
}

/*
 * Run ncalls scripts on one connection, pipelined, and put their replies in
 * replies[] (the caller frees them with freeReplyObject). Returns false with
 * *err set if the connection failed; error replies are the caller's to read.
 * Never throws.
 */
bool
rw_script_run(RwConn *conn, RwScriptCall *calls, int ncalls,
			  redisReply **replies, RwError *err)
{
	return rw_script_run_acked(conn, calls, ncalls, replies, 0, NULL, err);
}

/*
 * Queue one call; after an ASKING if cluster.c routed the connection by an
 * ASK redirection (Redis then serves the call in a slot it is importing).
 * The ASKING of a waited call is answered in line (scripts_exchange drops
 * it); that of a tagged call is dropped by redis_conn.c.
 */
static void
scripts_append(RwConn *conn, RwScriptCall *call, void *tag)
{
	if (conn->asking)
	{
		const char *argv[1] = {"ASKING"};

		rw_append(conn, 1, argv, NULL, tag ? RW_TAG_DISCARD : NULL);
	}
	rw_append(conn, call->argc, call->argv, call->lens, tag);
}

/*
 * Exchange ncalls queued calls and extra commands after them, dropping the
 * answers to ASKING (scripts_append). Returns false (nothing kept) on
 * failure.
 */
static bool
scripts_exchange(RwConn *conn, int ncalls, int extra, int extra_ms,
				 redisReply **out, RwError *err)
{
	int			step = conn->asking ? 2 : 1;
	int			n = ncalls * step + extra;
	redisReply **all = palloc(sizeof(redisReply *) * (n + 1));

	if (!rw_exchange_longer(conn, n, all, extra_ms, err))
	{
		pfree(all);
		return false;
	}
	for (int i = 0; i < ncalls; i++)
	{
		if (step == 2)
			freeReplyObject(all[2 * i]);
		out[i] = all[i * step + step - 1];
	}
	for (int i = 0; i < extra; i++)
		out[ncalls + i] = all[ncalls * step + i];
	pfree(all);
	return true;
}

/* Queue WAIT replicas rwlock.wait_replicas_timeout. */
static void
scripts_append_wait(RwConn *conn, int replicas)
{
	char		k[16];
	char		ms[16];
	const char *argv[3] = {"WAIT", k, ms};

	snprintf(k, sizeof(k), "%d", replicas);
	snprintf(ms, sizeof(ms), "%d", rw_wait_replicas_timeout_ms);
	rw_append(conn, 3, argv, NULL, NULL);
}

/* What a WAIT answered (the reply is freed): replicas, or -1. */
static int
scripts_wait_result(redisReply *r)
{
	int			acks = r->type == REDIS_REPLY_INTEGER ? (int) r->integer : -1;

	/* Logged later: this runs between Redis's answer and its record. */
	if (acks < 0)
		rw_log_later("rwlock: WAIT failed: %.200s",
					 r->type == REDIS_REPLY_ERROR ? r->str : "unexpected reply");
	freeReplyObject(r);
	return acks;
}

/*
 * Queue ncalls scripts on one connection (and a WAIT for replicas after
 * them, with replicas > 0) and write them out, without reading the
 * answers: rw_script_collect reads them. A quorum sends to all its nodes
 * first, then collects from each. False, with *err, if the connection
 * could not be had or failed. Never throws.
 */
bool
rw_script_send(RwConn *conn, RwScriptCall *calls, int ncalls, int replicas,
			   RwError *err)
{
	if (!rw_conn_ensure(conn, err))
		return false;
	for (int i = 0; i < ncalls; i++)
	{
		uint32		bit = 1U << calls[i].id;

		if ((conn->scripts_sent & bit) == 0)
			scripts_as_eval(&calls[i]);
		conn->scripts_sent |= bit;
		scripts_append(conn, &calls[i], NULL);
	}
	if (replicas > 0)
		scripts_append_wait(conn, replicas);
	if (rw_flush(conn, rw_now_ms() + rw_command_timeout_ms, err))
		return true;
	err->maybe_sent = true;
	return false;
}

/*
 * Read the answers to what rw_script_send sent, sending again as EVAL the
 * calls Redis answered NOSCRIPT; with replicas > 0, *acks is how many
 * replicas acknowledged them (-1 if WAIT failed). The round trip may take
 * rwlock.wait_replicas_timeout more than rwlock.command_timeout. Never
 * throws.
 */
bool
rw_script_collect(RwConn *conn, RwScriptCall *calls, int ncalls,
				  redisReply **replies, int replicas, int *acks, RwError *err)
{
	redisReply **again;
	int			nretry = 0;
	int			extra = replicas > 0 ? 1 : 0;
	int			extra_ms = replicas > 0 ? rw_wait_replicas_timeout_ms : 0;
	redisReply **all = palloc(sizeof(redisReply *) * (ncalls + 1));

	if (acks)
		*acks = -1;
	if (!scripts_exchange(conn, ncalls, extra, extra_ms, all, err))
	{
		pfree(all);
		return false;
	}
	memcpy(replies, all, sizeof(redisReply *) * ncalls);
	if (extra)
	{
		int			a = scripts_wait_result(all[ncalls]);

		if (acks)
			*acks = a;
	}
	pfree(all);
	for (int i = 0; i < ncalls; i++)
		nretry += scripts_is_noscript(replies[i]) ? 1 : 0;
	if (nretry == 0)
		return true;

	/* Redis lost its script cache, so those did not run: again, by EVAL. */
	conn->scripts_sent = 0;
	for (int i = 0; i < ncalls; i++)
	{
		if (!scripts_is_noscript(replies[i]))
			continue;
		scripts_as_eval(&calls[i]);
		conn->scripts_sent |= 1U << calls[i].id;
		scripts_append(conn, &calls[i], NULL);
	}
	if (extra)
		scripts_append_wait(conn, replicas);
	again = palloc(sizeof(redisReply *) * (nretry + extra));
	if (!scripts_exchange(conn, nretry, extra, extra_ms, again, err))
	{
		for (int i = 0; i < ncalls; i++)
			freeReplyObject(replies[i]);
		pfree(again);
		return false;
	}
	for (int i = 0, j = 0; i < ncalls; i++)
	{
		if (!scripts_is_noscript(replies[i]))
			continue;
		freeReplyObject(replies[i]);
		replies[i] = again[j++];
	}
	if (extra)
	{
		int			a = scripts_wait_result(again[nretry]);

		if (acks)
			*acks = a;
	}
	pfree(again);
	return true;
}

/* rw_script_send and rw_script_collect in one: one connection's round trip. */
bool
rw_script_run_acked(RwConn *conn, RwScriptCall *calls, int ncalls,
					redisReply **replies, int replicas, int *acks,
					RwError *err)
{
	if (acks)
		*acks = -1;
	return rw_script_send(conn, calls, ncalls, replicas, err) &&
		rw_script_collect(conn, calls, ncalls, replies, replicas, acks, err);
}

/*
 * Queue one script call as EVAL, with a tag: its reply is read later. A
 * call whose answer is not waited for must not depend on Redis's script
 * cache (a SCRIPT FLUSH, restart or failover empties it), so it carries the
 * script's body: Redis hashes it (a few microseconds of its CPU for
 * release.lua as embedded, bench/evalcost.py) and runs the cached compiled
 * script. In latency it costs nothing measurable: a transaction in
 * autocommit was no faster with EVALSHA at commit (interleaved pgbench).
 */
void
rw_script_append_eval(RwConn *conn, RwScriptCall *call, void *tag)
{
	scripts_as_eval(call);
	conn->scripts_sent |= 1U << call->id;
	scripts_append(conn, call, tag);
}
