/*-------------------------------------------------------------------------
 *
 * scripts.c
 *	  Running the protocol's Lua scripts: EVALSHA, falling back to EVAL.
 *
 * The scripts themselves live in lua/ and are compiled into lua_scripts.c
 * at build time, with their SHA1s, so no file is read at run time and no
 * SCRIPT LOAD round trip is spent on a healthy connection. A NOSCRIPT answer
 * (a restarted or flushed Redis) means the script did not run, so the same
 * call is sent again as EVAL, which also caches the script for next time.
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
is_noscript(redisReply *r)
{
	return r->type == REDIS_REPLY_ERROR && strncmp(r->str, "NOSCRIPT", 8) == 0;
}

/*
 * Run ncalls scripts on one connection, pipelined, and put their replies in
 * replies[] (the caller frees them with freeReplyObject). Returns false with
 * *err set if the connection failed; error replies are the caller's to read.
 */
bool
rw_script_run(RwConn *conn, RwScriptCall *calls, int ncalls,
			  redisReply **replies, int flags, RwError *err)
{
	RwRequest	req = {conn};
	int			nretry = 0;

	if (!rw_conn_ensure(conn, (flags & RW_NOTHROW) ? flags : flags | RW_INTERRUPTIBLE, err))
		return false;
	for (int i = 0; i < ncalls; i++)
		rw_append(&req, calls[i].argc, calls[i].argv, calls[i].lens);
	if (!rw_exchange(&req, 1, flags))
	{
		*err = req.err;
		rw_request_free(&req);
		return false;
	}
	for (int i = 0; i < ncalls; i++)
	{
		replies[i] = req.replies[i];
		nretry += is_noscript(replies[i]) ? 1 : 0;
	}
	pfree(req.replies);
	if (nretry == 0)
		return true;

	/* Redis lost its script cache: the same calls again, by EVAL. */
	req.replies = NULL;
	req.nexpected = req.nreceived = 0;
	for (int i = 0; i < ncalls; i++)
	{
		if (!is_noscript(replies[i]))
			continue;
		calls[i].argv[0] = "EVAL";
		calls[i].lens[0] = 4;
		calls[i].argv[1] = rw_scripts[calls[i].id].body;
		calls[i].lens[1] = strlen(rw_scripts[calls[i].id].body);
		rw_append(&req, calls[i].argc, calls[i].argv, calls[i].lens);
	}
	if (!rw_exchange(&req, 1, flags))
	{
		*err = req.err;
		rw_request_free(&req);
		for (int i = 0; i < ncalls; i++)
			freeReplyObject(replies[i]);
		return false;
	}
	for (int i = 0, j = 0; i < ncalls; i++)
	{
		if (!is_noscript(replies[i]))
			continue;
		freeReplyObject(replies[i]);
		replies[i] = req.replies[j++];
	}
	pfree(req.replies);
	return true;
}

/*
 * Send one script call by EVALSHA without waiting for its reply (rw_send).
 * The caller reads the reply later and must treat NOSCRIPT as "did not run".
 */
bool
rw_script_send(RwConn *conn, RwScriptCall *call, int flags, RwError *err)
{
	RwRequest	req = {conn};
	bool		ok;

	if (!rw_conn_ensure(conn, flags, err))
		return false;
	rw_append(&req, call->argc, call->argv, call->lens);
	ok = rw_send(&req, flags);
	if (!ok)
		*err = req.err;
	rw_request_free(&req);
	return ok;
}
