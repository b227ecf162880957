/*-------------------------------------------------------------------------
 *
 * fanout.c
 *	  One question to every member that may answer it, and what a majority
 *	  of the answers says: the calls of deadlock detection (deadlock.c,
 *	  walk.c) and the tally quorum.c counts a lock's holders with.
 *
 * A fan-out asks the node that serves a key: a plain node, a cluster's
 * member for the key's slot, or each member of a quorum that may be asked
 * now. It never waits for one member after another has failed: each
 * answer, or its absence, is counted. An answer counts when a majority of
 * a quorum's members give it (a holder holds on a majority); a count short
 * of a majority is undecided while the members that did not answer could
 * still make it one, and the caller must then ask again rather than take
 * it for "no".
 *
 * A failure is served here: an interrupt and a permission Redis refused
 * are raised (42501: a feature the user may not use is never silently
 * off), a quorum's member that failed is left alone a while, a cluster's
 * slot map follows a redirection (MOVED, ASK) or is marked stale.
 *
 *-------------------------------------------------------------------------
 */
#include "rwlock.h"

#include "utils/elog.h"

/* Keys for routing: a key and its queue (one slot: the braces). */
void
rw_fan_keys_of(const char *key, RwKeys *keys)
{
	keys->key[0] = (char *) key;
	keys->len[0] = strlen(key);
	keys->key[1] = psprintf("%s:q", key);
	keys->len[1] = keys->len[0] + 2;
	keys->channel = NULL;
	keys->channel_len = 0;
}

/*
 * A failure of a call to conn (member: a quorum's, or -1). An interrupt is
 * served; a permission Redis refused is raised; a quorum's member is left
 * alone a while, a cluster's map follows a redirection.
 */
void
rw_fan_failed(RwNode *node, RwConn *conn, int member, RwError *err)
{
	if (err->kind == RW_ERR_INTERRUPTED ||
		rw_error_sqlstate(err) == ERRCODE_INSUFFICIENT_PRIVILEGE)
		rw_raise(conn, err);
	if (member >= 0 && err->kind != RW_ERR_REPLY)
		rw_quorum_failed(node, member, err);
	else if (member < 0 && node->cluster != NULL)
		(void) rw_cluster_redirected(node, err, rw_now_ms());
}

/*
 * An error reply: a failure (rw_fan_failed), but a lock of another protocol
 * version (RWLOCK_VERSION), which is an answer. Frees r. True when it is a
 * failure.
 */
static bool
fan_error_reply(RwNode *node, RwConn *conn, int member, redisReply *r)
{
	RwError		err;
	bool		version = strncmp(r->str, "RWLOCK_VERSION ", 15) == 0;

	memset(&err, 0, sizeof(err));
	rw_error_set(&err, RW_ERR_REPLY, "%s", r->str);
	freeReplyObject(r);
	if (version)
		return false;
	rw_fan_failed(node, conn, member, &err);
	return true;
}

/*
 * The connections a call for `key` goes to: the one that serves it, or in
 * quorum mode each member that may be asked now (member[k] says which,
 * else -1).
 */
int
rw_fan_conns(RwNode *node, const char *key, RwConn **conns, int *member)
{
	int			n = rw_quorum_size(node);
	int			k = 0;
	RwKeys		keys;

	if (n == 0)
	{
		rw_fan_keys_of(key, &keys);
		conns[0] = rw_cluster_cmd(node, &keys);
		pfree(keys.key[1]);
		member[0] = -1;
		return 1;
	}
	for (int i = 0; i < n; i++)
		if (rw_quorum_may_ask(node, i))
		{
			conns[k] = &rw_quorum_member(node, i)->cmd;
			member[k++] = i;
		}
	return k;
}

/*
 * After a call to a cluster's member failed with *err: whether to send it
 * again now, to where the cluster says keys[0] is served (*conn set to it),
 * as the lock calls do. An ASK holds for the rest of the call only
 * (cluster.c), and a waiter's next try is a new call: a check that left a
 * redirection for its next round would be sent to the old master again,
 * and answered ASK again, for as long as the slot migrates. The retries end
 * rwlock.command_timeout after `started` (rw_cluster_redirected).
 */
static bool
fan_again(RwNode *node, RwConn **conn, int member, const char *key,
		  int64 started, RwError *err)
{
	int			m;

	if (member >= 0 || node->cluster == NULL ||
		!rw_cluster_redirected(node, err, started))
		return false;
	(void) rw_fan_conns(node, key, conn, &m);
	return true;
}

/*
 * One script on each connection for keys[0] (rw_fan_conns). f->r[k] is
 * NULL where it failed or answered an error. A cluster's redirection is
 * followed at once (fan_again).
 */
void
rw_fan_script(RwFan *f, RwNode *node, RwScriptId id, int nkeys,
			  const char *const *keys, const size_t *klens, int nargs,
			  const char *const *args)
{
	RwConn	   *conns[RW_QUORUM_MAX];
	int			member[RW_QUORUM_MAX];
	int64		started = rw_now_ms();

	f->n = rw_fan_conns(node, keys[0], conns, member);
	f->size = Max(rw_quorum_size(node), 1);
	f->need = rw_quorum_size(node) > 0 ? rw_quorum_majority(node) : 1;
	f->missing = f->size;
	f->version = false;
	for (int k = 0; k < f->n; k++)
	{
		RwScriptCall call;
		RwError		err;

		f->r[k] = NULL;
		rw_script_prepare(&call, id, nkeys, keys, klens, nargs, args);
		if (!rw_script_run(conns[k], &call, 1, &f->r[k], &err))
		{
			f->r[k] = NULL;
			if (fan_again(node, &conns[k], member[k], keys[0], started, &err))
			{
				k--;
				continue;
			}
			rw_fan_failed(node, conns[k], member[k], &err);
			continue;
		}
		if (f->r[k]->type == REDIS_REPLY_ERROR)
		{
			memset(&err, 0, sizeof(err));
			rw_error_set(&err, RW_ERR_REPLY, "%s", f->r[k]->str);
			if (fan_again(node, &conns[k], member[k], keys[0], started, &err))
			{
				freeReplyObject(f->r[k]);
				f->r[k] = NULL;
				k--;
				continue;
			}
			if (err.kind == RW_ERR_INTERRUPTED)
			{
				/* cancelled in the pause before a retry */
				freeReplyObject(f->r[k]);
				f->r[k] = NULL;
				rw_fan_failed(node, conns[k], member[k], &err);
			}
			if (!fan_error_reply(node, conns[k], member[k], f->r[k]))
				f->version = true;
			f->r[k] = NULL;
			continue;
		}
		f->missing--;
	}
}

void
rw_fan_free(RwFan *f)
{
	for (int k = 0; k < f->n; k++)
		if (f->r[k] != NULL)
			freeReplyObject(f->r[k]);
}

/*
 * Whether a count short of a majority is undecided: the members that did
 * not answer could still make it one.
 */
bool
rw_fan_undecided(const RwFan *f, int count)
{
	return count < f->need && count + f->missing >= f->need;
}

/* ---------------------------------------------------------------------
 * Tallies: strings counted across members' answers
 * --------------------------------------------------------------------- */

void
rw_tally_init(RwTally *t)
{
	t->n = 0;
	t->room = 8;
	t->items = palloc(sizeof(RwTallyItem) * t->room);
}

/*
 * One member's answer lists str (with a time, ms, or 0). Each member lists
 * a string once; the first seen are kept first.
 */
void
rw_tally_add(RwTally *t, const char *str, size_t len, int64 ms)
{
	RwTallyItem *it;

	for (int i = 0; i < t->n; i++)
	{
		it = &t->items[i];
		if (strlen(it->str) == len && memcmp(it->str, str, len) == 0)
		{
			if (it->count < RW_QUORUM_MAX)
				it->ms[it->count] = ms;
			it->count++;
			return;
		}
	}
	if (t->n == t->room)
	{
		t->room *= 2;
		t->items = repalloc(t->items, sizeof(RwTallyItem) * t->room);
	}
	it = &t->items[t->n++];
	it->str = pnstrdup(str, len);
	it->count = 1;
	it->ms[0] = ms;
}

static int
tally_cmp_desc(const void *a, const void *b)
{
	int64		x = *(const int64 *) a,
				y = *(const int64 *) b;

	return x > y ? -1 : x < y ? 1 : 0;
}

/*
 * The strings at least `need` members listed, in the order first seen,
 * with (ms_out, if not NULL) the need-th longest of their times: how long
 * `need` members still list it. Returns how many.
 */
int
rw_tally_agreed(RwTally *t, int need, char ***out, int64 **ms_out)
{
	int			found = 0;

	*out = palloc(sizeof(char *) * Max(t->n, 1));
	if (ms_out)
		*ms_out = palloc(sizeof(int64) * Max(t->n, 1));
	for (int i = 0; i < t->n; i++)
	{
		RwTallyItem *it = &t->items[i];

		if (it->count < need || need < 1)
			continue;
		if (ms_out)
		{
			int			k = Min(it->count, RW_QUORUM_MAX);

			qsort(it->ms, k, sizeof(int64), tally_cmp_desc);
			(*ms_out)[found] = it->ms[Min(need, k) - 1];
		}
		(*out)[found++] = it->str;
	}
	return found;
}
