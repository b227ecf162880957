/*-------------------------------------------------------------------------
 *
 * protocol.c
 *	  The rwlock protocol as C functions: one per Lua script, each building
 *	  the script's keys and arguments and checking every part of its reply.
 *
 * Keys of the lock named N, with prefix P (docs/protocol.md has the rest):
 *	  P:{E}    hash: protocol version, writer, readers and their lease ends,
 *	           last token, waiting writers' intents, readers' marks and turn
 *	  P:{E}:q  sorted set of waiting writers, first come first served
 *	  P:{E}:c  pub/sub channel: names the waiters that may now proceed
 * where E is N with '%', '{' and '}' percent-encoded, so that the hash tag
 * {E} is the whole name whatever it holds and the keys of one lock share a
 * Redis Cluster slot. RwKeys also has P:{E}:r, the readers' key of protocol
 * 1, which protocol 2 does not use: the scripts take the hash and the queue
 * (script_keys).
 *
 *-------------------------------------------------------------------------
 */
#include "rwlock.h"

#include "access/xlog.h"
#include "lib/stringinfo.h"
#include "miscadmin.h"
#include "port.h"

/* A string unique to this session, among all servers and over time. */
const char *
rw_owner_id(void)
{
	static char owner[RW_OWNER_MAX];

	if (owner[0] == '\0')
	{
		uint32		rnd;

		if (!pg_strong_random(&rnd, sizeof(rnd)))
			rnd = (uint32) MyStartTimestamp;
		snprintf(owner, sizeof(owner), "pg:%llx:%d:%08x",
				 (unsigned long long) GetSystemIdentifier(), MyProcPid, rnd);
	}
	return owner;
}

void
rw_build_keys(const char *prefix, const char *name, RwKeys *keys,
			  MemoryContext cxt)
{
	static const char *const suffix[3] = {"", ":r", ":q"};
	MemoryContext old = MemoryContextSwitchTo(cxt);
	StringInfoData base;

	initStringInfo(&base);
	appendStringInfo(&base, "%s:{", prefix);
	for (const char *p = name; *p; p++)
	{
		if (*p == '%')
			appendStringInfoString(&base, "%25");
		else if (*p == '{')
			appendStringInfoString(&base, "%7B");
		else if (*p == '}')
			appendStringInfoString(&base, "%7D");
		else
			appendStringInfoChar(&base, *p);
	}
	appendStringInfoChar(&base, '}');
	for (int i = 0; i < 3; i++)
	{
		keys->key[i] = psprintf("%s%s", base.data, suffix[i]);
		keys->len[i] = strlen(keys->key[i]);
	}
	keys->channel = psprintf("%s:c", base.data);
	keys->channel_len = strlen(keys->channel);
	pfree(base.data);
	MemoryContextSwitchTo(old);
}

/* Free what rw_build_keys allocated. */
void
rw_free_keys(RwKeys *keys)
{
	for (int i = 0; i < 3; i++)
		pfree(keys->key[i]);
	pfree(keys->channel);
}

/* An error or unexpected reply: free it and report, or fill *err. */
static void
bad_reply(RwConn *conn, redisReply *r, const char *script, int flags, RwError *err)
{
	RwError		local;

	if (err == NULL)
		err = &local;
	err->kind = RW_ERR_REPLY;
	if (r->type == REDIS_REPLY_ERROR)
		snprintf(err->msg, sizeof(err->msg), "%s", r->str);
	else
		snprintf(err->msg, sizeof(err->msg),
				 "unexpected reply of type %d to the %s script", r->type, script);
	freeReplyObject(r);
	if (!(flags & RW_NOTHROW))
		rw_raise(conn, err);
}

static bool
is_int(redisReply *r)
{
	return r->type == REDIS_REPLY_INTEGER;
}

static bool
is_str(redisReply *r)
{
	return r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_STATUS;
}

/* The keys the scripts take: the hash and the queue (not key[1]). */
static void
script_keys(const RwKeys *keys, const char *key[2], size_t len[2])
{
	key[0] = keys->key[0];
	len[0] = keys->len[0];
	key[1] = keys->key[2];
	len[1] = keys->len[2];
}

/* Run one script; throws unless RW_NOTHROW. NULL if it failed. */
static redisReply *
run_one(RwConn *conn, RwScriptId id, int nargs, const char *const *args,
		const RwKeys *keys, int flags, RwError *err)
{
	RwScriptCall call;
	RwError		local;
	redisReply *r;
	const char *key[2];
	size_t		len[2];

	if (err == NULL)
		err = &local;
	script_keys(keys, key, len);
	rw_script_prepare(&call, id, 2, key, len, nargs, args);
	if (!rw_script_run(conn, &call, 1, &r, flags, err))
	{
		if (!(flags & RW_NOTHROW))
			rw_raise(conn, err);
		return NULL;
	}
	return r;
}

/*
 * Try once to take the lock. RW_GRANTED: *result is the fencing token.
 * RW_BUSY: *result is the longest to sleep before trying again, ms.
 * RW_UPGRADE_CONFLICT: *other is the reader that already waits to upgrade.
 *
 * The script answers an integer: the token (>= 0) when granted, -ms when
 * busy; or a string, the other upgrading reader.
 */
RwAcquireStatus
rw_proto_acquire(RwConn *conn, const RwKeys *keys, char mode, int lease_ms,
				 int intent_ms, int64 *result, char **other)
{
	char		modestr[2] = {mode, '\0'};
	char		lease[16],
				intent[16],
				keep[16];
	const char *args[6] = {RW_PROTOCOL_VERSION, rw_owner_id(), modestr,
	lease, intent, keep};
	redisReply *r;
	int64		value;

	snprintf(lease, sizeof(lease), "%d", lease_ms);
	snprintf(intent, sizeof(intent), "%d", intent_ms);
	snprintf(keep, sizeof(keep), "%d", RW_KEEP_TOKEN_MS);
	r = run_one(conn, RW_SCRIPT_ACQUIRE, 6, args, keys, 0, NULL);

	if (r->type == REDIS_REPLY_STRING && r->len > 0)
	{
		*other = pnstrdup(r->str, r->len);
		freeReplyObject(r);
		return RW_UPGRADE_CONFLICT;
	}
	if (!is_int(r))
		bad_reply(conn, r, "acquire", 0, NULL);
	value = r->integer;
	freeReplyObject(r);
	if (value >= 0)
	{
		*result = value;
		return RW_GRANTED;
	}
	*result = -value;
	return RW_BUSY;
}

/*
 * Release what this session holds of the lock in Redis, keeping a read lock
 * if keep is 'r', or only withdraw a waiting writer's intent if keep is 'q'.
 * Returns 1 if the hold was still ours, 0 if it had been lost, -1 if Redis
 * could not be asked (only with RW_NOTHROW; *err says why).
 */
int
rw_proto_release(RwConn *conn, const RwKeys *keys, char keep, int lease_ms,
				 int flags, RwError *err)
{
	char		keepstr[2] = {keep, '\0'};
	char		lease[16],
				keeptoken[16];
	const char *args[5] = {RW_PROTOCOL_VERSION, rw_owner_id(), keepstr,
	lease, keeptoken};
	redisReply *r;

	snprintf(lease, sizeof(lease), "%d", lease_ms);
	snprintf(keeptoken, sizeof(keeptoken), "%d", RW_KEEP_TOKEN_MS);
	r = run_one(conn, RW_SCRIPT_RELEASE, 5, args, keys, flags, err);
	if (r == NULL)
		return -1;
	return rw_proto_release_result(conn, r, flags, err);
}

/* What a release script answered (the reply is freed): 1, 0, or -1. */
int
rw_proto_release_result(RwConn *conn, redisReply *r, int flags, RwError *err)
{
	int			held;

	if (!is_int(r) || (r->integer != 0 && r->integer != 1))
	{
		bad_reply(conn, r, "release", flags, err);
		return -1;
	}
	held = (int) r->integer;
	freeReplyObject(r);
	return held;
}

/*
 * Send the release of everything this session holds of the lock, without
 * waiting for the answer: rw_proto_release_result reads it later (a NOSCRIPT
 * answer means it did not run). False if it could not be sent.
 */
bool
rw_proto_release_send(RwConn *conn, const RwKeys *keys, RwError *err)
{
	char		keeptoken[16];
	const char *args[5] = {RW_PROTOCOL_VERSION, rw_owner_id(), "", "0",
	keeptoken};
	RwScriptCall call;
	const char *key[2];
	size_t		len[2];

	snprintf(keeptoken, sizeof(keeptoken), "%d", RW_KEEP_TOKEN_MS);
	script_keys(keys, key, len);
	rw_script_prepare(&call, RW_SCRIPT_RELEASE, 2, key, len, 5, args);
	err->kind = RW_OK;
	return rw_script_send(conn, &call, RW_NOTHROW, err);
}

/*
 * Renew n holds on one connection, pipelined: held[i] becomes 1 if hold i is
 * still ours (its lease now runs lease_ms[i] from now), 0 if it was lost, -1
 * if Redis answered with an error. Returns false if the connection failed.
 */
bool
rw_proto_renew_batch(RwConn *conn, RwKeys **keys, const int *lease_ms, int n,
					 int *held, int flags, RwError *err)
{
	return rw_proto_renew_owners(conn, keys, NULL, lease_ms, n, held, flags, err);
}

/*
 * The same on behalf of other sessions: owners[i] is the owner id hold i was
 * taken with (NULL owners: this session's). The keeper renews this way.
 * renew.lua only extends what the owner still holds, so a renewal that
 * crosses a release never brings the lock back.
 */
bool
rw_proto_renew_owners(RwConn *conn, RwKeys **keys, const char *const *owners,
					  const int *lease_ms, int n, int *held, int flags,
					  RwError *err)
{
	RwScriptCall *calls = palloc(sizeof(RwScriptCall) * n);
	redisReply **replies = palloc(sizeof(redisReply *) * n);
	char	   *leases = palloc(16 * n);
	char		keeptoken[16];
	bool		ok;

	snprintf(keeptoken, sizeof(keeptoken), "%d", RW_KEEP_TOKEN_MS);
	for (int i = 0; i < n; i++)
	{
		const char *args[4] = {RW_PROTOCOL_VERSION,
			owners ? owners[i] : rw_owner_id(),
		leases + 16 * i, keeptoken};
		const char *key[2];
		size_t		len[2];

		snprintf(leases + 16 * i, 16, "%d", lease_ms[i]);
		script_keys(keys[i], key, len);
		rw_script_prepare(&calls[i], RW_SCRIPT_RENEW, 2, key, len, 4, args);
	}
	ok = rw_script_run(conn, calls, n, replies, flags, err);
	for (int i = 0; ok && i < n; i++)
	{
		redisReply *r = replies[i];

		held[i] = (is_int(r) && (r->integer == 0 || r->integer == 1)) ?
			(int) r->integer : -1;
		if (held[i] < 0)
			elog(WARNING, "rwlock: renewing a lease failed: %s",
				 r->type == REDIS_REPLY_ERROR ? r->str : "unexpected reply");
		freeReplyObject(r);
	}
	pfree(calls);
	pfree(replies);
	pfree(leases);
	return ok;
}

/* Owners and their ms left, from a flat [owner, ms, owner, ms...] list. */
static bool
take_pairs(redisReply *list, int *n, char ***owners, int64 **ms)
{
	if (list->type != REDIS_REPLY_ARRAY || list->elements % 2 != 0)
		return false;
	*n = list->elements / 2;
	*owners = palloc(sizeof(char *) * (*n + 1));
	*ms = palloc(sizeof(int64) * (*n + 1));
	for (int i = 0; i < *n; i++)
	{
		redisReply *o = list->element[2 * i];
		redisReply *t = list->element[2 * i + 1];

		if (!is_str(o) || !is_int(t))
			return false;
		(*owners)[i] = pnstrdup(o->str, o->len);
		(*ms)[i] = t->integer;
	}
	return true;
}

/* The state of a lock as Redis has it now. Throws on any failure. */
void
rw_proto_info(RwConn *conn, const RwKeys *keys, RwLockInfo *info)
{
	const char *args[1] = {RW_PROTOCOL_VERSION};
	redisReply *r = run_one(conn, RW_SCRIPT_INFO, 1, args, keys, 0, NULL);
	redisReply **e = r->element;

	if (r->type != REDIS_REPLY_ARRAY || r->elements != 6 || !is_str(e[0]) ||
		!is_int(e[1]) || !is_str(e[2]) || !is_int(e[3]) ||
		!take_pairs(e[4], &info->nreaders, &info->readers, &info->reader_ms) ||
		!take_pairs(e[5], &info->nwaiting, &info->waiting, &info->waiting_ms))
		bad_reply(conn, r, "info", 0, NULL);
	strlcpy(info->state, e[0]->str, sizeof(info->state));
	info->token = e[1]->integer;
	info->writer = e[2]->len > 0 ? pnstrdup(e[2]->str, e[2]->len) : NULL;
	info->writer_ms = e[3]->integer;
	freeReplyObject(r);
}
