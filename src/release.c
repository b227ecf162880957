/*-------------------------------------------------------------------------
 *
 * release.c
 *	  Releases owed to Redis: the one place that knows which releases were
 *	  sent and not yet answered, and which must be sent again.
 *
 * A release is owed from the moment the session decides to let go of a lock
 * in Redis until Redis has answered it. It is one record, tied to the name
 * (and so to the hold) it belongs to, in one of two states:
 *	  sent	 on the node's command connection, tagged with the record; the
 *			 answer is read by any later exchange on that connection;
 *	  unsent to send again: the connection failed before the answer came
 *			 (the release may or may not have run), or could not be opened.
 *
 * The rule that keeps a lock from ever being held twice: every release owed
 * for a name on a node runs before the name is acquired again there
 * (rw_release_settle_name). The releases go ahead of the acquisition on the
 * same connection, which Redis serves in order, so a release can never be
 * applied to a hold taken after it; if there is no connection to send them
 * on, the acquisition fails and grants nothing. A release whose fate is
 * unknown (its connection failed before the answer) is sent again, ahead of
 * the next acquisition of its name: running a release twice is harmless, as
 * release.lua only removes what the owner holds and never creates a hold.
 *
 * That order holds per connection only. A command cut off in flight (a
 * release, or an acquisition, whose connection we closed at a timeout) may
 * still reach Redis later on the old connection (its bytes delayed in the
 * network, a partition that heals, a proxy), after the release sent again
 * and the next grant on the new one. Protocol 3 makes it harmless there:
 * each request carries the owner's next sequence number (protocol.c), the
 * release sent again a newer one than the command cut off, and Redis runs
 * a request older than the newest of its owner's it ran on that lock as a
 * no-op (RWLOCK_STALE). No connection is killed, and no right to kill one
 * is needed.
 *
 * Releases whose answer nobody waits for (at transaction end, at exit, by
 * redis_unlock_all and DISCARD ALL) are sent as EVAL, with the script's body
 * (scripts.c): a SCRIPT FLUSH, restart or failover that emptied Redis's
 * script cache cannot make them fail, so the lock is free as soon as Redis
 * reads them, whether or not the session ever makes another call.
 *
 * In quorum mode (quorum.c) the rule holds per member: a record belongs to
 * the logical node and to one member (ix), and goes on that member's
 * connection; a release of a hold goes to every member, one record each.
 * A member that answers that the hold was gone there is no loss by itself:
 * a hold is lost when too few members still have it, which rw_release_now
 * and the renewals count.
 *
 * Reports (a hold found lost, a refused release) are noted, never raised
 * here: this file runs from commit and exit callbacks and between Redis's
 * answers and the records of them.
 *
 *-------------------------------------------------------------------------
 */
#include "rwlock.h"

#include "storage/ipc.h"
#include "utils/memutils.h"

typedef struct RwOwed
{
	RwNode	   *node;
	int			ix;				/* a quorum's member, or -1 */
	char	   *name;
	RwKeys		keys;
	RwKeep		keep;
	int			lease_ms;		/* of a kept read lock */
	bool		sent;			/* on conn, answer not read yet */
	RwConn	   *conn;			/* node->cmd, or a cluster's or quorum's
								 * member's */
	bool		warn_if_lost;	/* a hold the session believed held */
	uint64		call;			/* the call that queued it (rw_call_id) */
	bool		awaited;		/* rw_release_await reports it if still owed */
	bool		redirected;		/* a Cluster answered MOVED/ASK/...: not run */
	struct RwOwed *next;
} RwOwed;

static RwOwed *owed_head = NULL;	/* oldest first */
static bool release_unflushed = false;	/* rw_release_later queued output */

/*
 * The releases queued by the current call (rw_call_id) that Redis answered
 * as no longer held: redis_unlock(text[]) reports each of those names as
 * redis_unlock(name) reports its one (rw_release_found_lost). Kept until
 * the next call's first such answer.
 */
typedef struct RwLostName
{
	RwNode	   *node;
	char	   *name;
} RwLostName;

static RwLostName *lost_now = NULL;
static int	n_lost_now = 0;
static int	cap_lost_now = 0;
static uint64 lost_now_call = 0;

static bool release_settle(RwNode *node, int ix, const char *name, RwError *err);

static void
release_drop(RwOwed *rec)
{
	RwOwed	  **link = &owed_head;
	RwNode	   *node = rec->node;

	while (*link != rec)
		link = &(*link)->next;
	*link = rec->next;
	rw_free_keys(&rec->keys);
	pfree(rec->name);
	pfree(rec);
	node->nowed--;
	rw_node_forget_if_unused(node);
}

/*
 * The targets of a release on a node: every member of a quorum (their
 * indexes), else the node itself (-1). Returns how many.
 */
static int
release_targets(RwNode *node, int *ix)
{
	int			n = rw_quorum_size(node);

	ix[0] = -1;
	for (int i = 0; i < n; i++)
		ix[i] = i;
	return Max(n, 1);
}

/*
 * The connection that serves a record's name now: a quorum member's, or
 * rw_cluster_cmd's (the node's, or in a cluster the member's that serves
 * the name's slot).
 */
static RwConn *
release_conn(RwNode *node, int ix, const RwKeys *keys)
{
	return ix >= 0 ? &rw_quorum_member(node, ix)->cmd : rw_cluster_cmd(node, keys);
}

static RwOwed *
release_record(RwNode *node, int ix, const char *name, const RwKeys *keys,
			   RwKeep keep, int lease_ms, bool warn_if_lost)
{
	MemoryContext old = MemoryContextSwitchTo(TopMemoryContext);
	RwOwed	   *rec = palloc0(sizeof(RwOwed));
	RwOwed	  **link = &owed_head;

	rec->node = node;
	rec->ix = ix;
	rec->name = pstrdup(name);
	rw_copy_keys(keys, &rec->keys, TopMemoryContext);
	rec->keep = keep;
	rec->lease_ms = lease_ms;
	rec->warn_if_lost = warn_if_lost;
	rec->call = rw_call_id();
	while (*link != NULL)
		link = &(*link)->next;
	*link = rec;
	node->nowed++;
	MemoryContextSwitchTo(old);
	return rec;
}

/* The unsent record of a name on a node (a member: ix), if any. */
static RwOwed *
release_find_unsent(RwNode *node, int ix, const char *name)
{
	for (RwOwed *rec = owed_head; rec != NULL; rec = rec->next)
		if (rec->node == node && rec->ix == ix && !rec->sent &&
			strcmp(rec->name, name) == 0)
			return rec;
	return NULL;
}

static void
release_owe_one(RwNode *node, int ix, const char *name, const RwKeys *keys,
				RwKeep keep, int lease_ms)
{
	RwOwed	   *rec = release_find_unsent(node, ix, name);

	if (rec == NULL)
		rec = release_record(node, ix, name, keys, keep, lease_ms, false);
	else if (keep < rec->keep)
	{
		rec->keep = keep;
		rec->lease_ms = lease_ms;
	}
}

/*
 * Owe a release that must be sent again: it failed, or a command that may
 * have granted the lock was cut off. One unsent record per name (per
 * member): the one that lets go of more wins (nothing kept < a read lock
 * kept < only the intent withdrawn). ix: a quorum's member, or -1 for all
 * of them (or the node that is no quorum). A command cut off that runs
 * late, after the release, is stale by then (protocol 3).
 */
void
rw_release_owe(RwNode *node, int ix, const char *name, const RwKeys *keys,
			   RwKeep keep, int lease_ms)
{
	int			ixs[RW_QUORUM_MAX];
	int			n = ix >= 0 ? 1 : release_targets(node, ixs);

	if (ix >= 0)
		ixs[0] = ix;
	for (int i = 0; i < n; i++)
		release_owe_one(node, ixs[i], name, keys, keep, lease_ms);
}

/* Why a quorum's member was not asked: it failed a moment ago. */
static void
release_not_asked(RwError *err)
{
	err->kind = RW_ERR_CONNECT;
	strlcpy(err->msg, "the Redis node failed a moment ago", sizeof(err->msg));
}

/*
 * Queue a record's release, tagged with it, on an open connection, as this
 * session's newest request (a new seq each time it is sent).
 */
static void
release_append(RwOwed *rec, RwConn *conn)
{
	rw_proto_release_append(conn, &rec->keys, rec->keep, rec->lease_ms, rec);
	rec->sent = true;
	rec->redirected = false;
	rec->conn = conn;
	release_unflushed = true;
}

/*
 * Whether a release may go to quorum member ix now: it did not fail a
 * moment ago, or its connection is open again (a round that needed it made
 * one): sending on an open connection costs no wait. At exit, every member
 * is tried (once, within the exit's budget): a hold left there would wait
 * out its lease.
 */
static bool
release_may_ask_member(RwNode *node, int ix)
{
	return rw_quorum_may_ask(node, ix) || proc_exit_inprogress ||
		rw_quorum_member(node, ix)->cmd.ctx != NULL;
}

/*
 * Queue a record's release on the connection that serves its name now
 * (release_conn), if that connection is open or can be opened (a quorum's
 * member that failed a moment ago is not tried). False, with *err, if not.
 */
static bool
release_send(RwOwed *rec, RwError *err)
{
	RwConn	   *conn = release_conn(rec->node, rec->ix, &rec->keys);

	if (rec->ix >= 0 && !release_may_ask_member(rec->node, rec->ix))
	{
		release_not_asked(err);
		return false;
	}
	if (!rw_conn_ensure(conn, err))
	{
		if (rec->ix >= 0)
			rw_quorum_failed(rec->node, rec->ix, err);
		return false;
	}
	release_append(rec, conn);
	return true;
}

/*
 * Note that a release failed: refused by Redis (left to the lease), or not
 * done for want of a connection (owed, sent again).
 */
void
rw_note_release_failed(const char *name, const RwError *err)
{
	char		msg[RW_NAME_MAX + 64];
	char		detail[512];
	int			len = strlen(err->msg);

	/* Redis's messages may end with a period; ours add sentences after. */
	if (len > 0 && err->msg[len - 1] == '.')
		len--;
	snprintf(msg, sizeof(msg), "could not release Redis lock \"%s\"", name);
	if (err->kind == RW_ERR_REPLY)
		snprintf(detail, sizeof(detail),
				 "Redis answered: %.*s. The lock is left to its lease.", len, err->msg);
	else
		snprintf(detail, sizeof(detail),
				 "%.*s. The release is sent again before this session takes the lock again; if Redis stays out of reach, the lease frees the lock.",
				 len, err->msg);
	/* A refusal says what it was (42501, 55000, XX000); the rest is 08. */
	rw_note_warning(err->kind == RW_ERR_REPLY || err->kind == RW_ERR_UNFIT ||
					err->kind == RW_ERR_NOPERM ? rw_error_sqlstate(err) :
					ERRCODE_CONNECTION_FAILURE, msg, detail);
}

/*
 * Remember that a release this call queued found its hold gone. Called
 * between Redis's answers and their records: nothing here may throw, so an
 * allocation that fails forgets the name (the WARNING is noted all the
 * same; only the call's return value misses it).
 */
static void
release_remember_lost(RwOwed *rec)
{
	char	   *name;

	if (rec->call != rw_call_id())
		return;
	if (lost_now_call != rw_call_id())
	{
		for (int i = 0; i < n_lost_now; i++)
			pfree(lost_now[i].name);
		n_lost_now = 0;
		lost_now_call = rw_call_id();
	}
	if (n_lost_now == cap_lost_now)
	{
		int			cap = Max(8, cap_lost_now * 2);
		RwLostName *grown = MemoryContextAllocExtended(TopMemoryContext,
													   cap * sizeof(RwLostName),
													   MCXT_ALLOC_NO_OOM);

		if (grown == NULL)
			return;
		if (lost_now != NULL)
		{
			memcpy(grown, lost_now, n_lost_now * sizeof(RwLostName));
			pfree(lost_now);
		}
		lost_now = grown;
		cap_lost_now = cap;
	}
	name = MemoryContextAllocExtended(TopMemoryContext, strlen(rec->name) + 1,
									  MCXT_ALLOC_NO_OOM);
	if (name == NULL)
		return;
	strcpy(name, rec->name);
	lost_now[n_lost_now].node = rec->node;
	lost_now[n_lost_now++].name = name;
}

/*
 * Whether a release of `name` on `node` that the current call queued was
 * answered as no longer held (the hold had been lost).
 */
bool
rw_release_found_lost(RwNode *node, const char *name)
{
	if (lost_now_call != rw_call_id())
		return false;
	for (int i = 0; i < n_lost_now; i++)
		if (lost_now[i].node == node && strcmp(lost_now[i].name, name) == 0)
			return true;
	return false;
}

/*
 * What Redis answered to a sent record (on the connection from); the record
 * is dropped or kept.
 */
static void
release_answered(RwOwed *rec, redisReply *reply)
{
	RwError		err;
	int			held;

	if (reply == NULL)
	{
		/*
		 * The connection closed first: it may or may not have run, or run
		 * later still (stale by then: it is sent again as a newer
		 * request). Sent again, it may find the lock released by its first
		 * run: not a loss.
		 */
		rec->sent = false;
		rec->warn_if_lost = false;
		return;
	}
	if (reply->type == REDIS_REPLY_ERROR && rw_proto_is_redirect(reply->str))
	{
		/* A cluster did not run it there: sent again where it goes now. */
		rw_cluster_note_redirect(rec->node, reply->str);
		freeReplyObject(reply);
		rec->sent = false;
		rec->redirected = true;
		return;
	}
	held = rw_proto_release_result(reply, &err);
	/* One member of a quorum that no longer had it: no loss by itself. */
	if (held == 0 && rec->warn_if_lost && rec->keep != RW_KEEP_ALL &&
		rec->ix < 0)
	{
		RwHeld	   *h = rw_holds_find(rec->name);

		/* A downgrade that found the lock gone: the read hold left is lost. */
		if (rec->keep == RW_KEEP_READ && h != NULL && h->node == rec->node)
			rw_holds_mark_lost(h);
		rw_note_lost(rec->name,
					 "Its release found that its lease had run out or Redis had lost its data.");
		release_remember_lost(rec);
	}
	else if (held < 0 && rec->keep != RW_KEEP_ALL)
		rw_note_release_failed(rec->name, &err);
	release_drop(rec);
}

/* Read, without waiting, the answers that have arrived on one connection. */
static void
release_read_conn(RwConn *conn)
{
	RwLate	   *late;
	int			n = rw_take_late(conn, &late);

	for (int i = 0; i < n; i++)
		release_answered((RwOwed *) late[i].tag, late[i].reply);
	if (late)
		pfree(late);
}

/*
 * Read, without waiting, the answers that have arrived on one node (on
 * each member of a cluster or quorum). The last owed answer read would
 * free a node no longer current (release_drop), members and all, while
 * the walk goes on: the node is pinned until the walk is done.
 */
static void
release_read_node(RwNode *node)
{
	node->pins++;
	release_read_conn(&node->cmd);
	for (RwNode *m = rw_node_members(node); m != NULL; m = m->next)
		release_read_conn(&m->cmd);
	node->pins--;
	rw_node_forget_if_unused(node);
}

/*
 * Read the answers that have arrived to sent releases, on every node,
 * without waiting. Never throws.
 */
void
rw_release_read_answers(void)
{
	for (RwNode *node = rw_first_node(), *next; node != NULL; node = next)
	{
		next = node->next;		/* a node may be freed on the way */
		if (node->nowed > 0)
			release_read_node(node);
	}
}

/* A connection rw_release_await could not drain, and why. */
typedef struct RwDrainFailure
{
	RwConn	   *conn;
	RwError		err;
} RwDrainFailure;

/*
 * Drain one connection for rw_release_await; a failure other than an
 * interrupt is kept in failed[] with why. False only if interrupted.
 */
static bool
release_drain(RwConn *conn, RwDrainFailure *failed, int *nfailed, RwError *err)
{
	if (rw_conn_drain(conn, err))
		return true;
	if (err->kind == RW_ERR_INTERRUPTED)
		return false;
	failed[*nfailed].conn = conn;
	failed[(*nfailed)++].err = *err;
	return true;
}

/*
 * Why a release rw_release_await waited for is still owed: the connection
 * that serves it failed while draining, or could not be opened in this
 * call, or the connection did not answer it.
 */
static void
release_why_owed(RwOwed *rec, RwDrainFailure *failed, int nfailed,
				 RwError *why)
{
	RwConn	   *conn = release_conn(rec->node, rec->ix, &rec->keys);

	for (int i = 0; i < nfailed; i++)
		if (failed[i].conn == conn || failed[i].conn == rec->conn)
		{
			*why = failed[i].err;
			return;
		}
	if (conn->failed_call == rw_call_id())
	{
		*why = conn->failed_err;
		return;
	}
	rw_error_set(why, RW_ERR_TIMEOUT, "no answer within rwlock.command_timeout (%d ms)",
				 rw_command_timeout_ms);
}

/*
 * Wait, within one rwlock.command_timeout in all, for the answers to the
 * releases sent, and read them (redis_unlock_all: it reports the holds its
 * releases found lost itself, as redis_unlock does, instead of leaving them
 * to the next call, where they read as a warning about that call). A
 * server that does not answer in time, or cannot be reached, keeps its
 * releases owed: each release of a hold that this call queued and that is
 * still owed is reported by this call (could not release, as redis_unlock
 * says it), and is no loss to report when it is answered later (it is
 * sent again, and its name is no longer held: a late "was lost" would read
 * as a warning about that later call). A release a Cluster redirected
 * is sent again where its slot is now and waited for in the same time.
 * False, with *err, only if an interrupt cut the wait short. Never throws
 * (but out of memory, before anything is sent or read).
 */
bool
rw_release_await(RwError *err)
{
	int64		cap = rw_conn_tighten(rw_now_ms() + rw_command_timeout_ms);
	bool		ok = true;
	int			nfailed = 0;
	int			cap_failed = 0;
	RwDrainFailure *failed = NULL;

	err->kind = RW_OK;
	/* One a name: a quorum's members do not report losses either. */
	for (RwOwed *rec = owed_head; rec != NULL; rec = rec->next)
		rec->awaited = rec->call == rw_call_id() && rec->warn_if_lost &&
			rec->keep != RW_KEEP_ALL && rec->ix < 0;

	/*
	 * A release a Cluster redirected (a slot that moved) did not run: it is
	 * sent where the slot is now and waited for again, within the same
	 * rwlock.command_timeout, as redis_unlock(name) follows a redirection.
	 * A few passes at most (a slot that keeps moving stays owed).
	 */
	for (int pass = 0; pass < 3 && ok; pass++)
	{
		int			nconns = 0;
		bool		again = false;

		for (RwNode *node = rw_first_node(); node != NULL; node = node->next)
		{
			nconns++;
			for (RwNode *m = rw_node_members(node); m != NULL; m = m->next)
				nconns++;
		}
		if (failed == NULL)
		{
			/* room for every pass, allocated before anything is read */
			cap_failed = 3 * (nconns + 4);
			failed = palloc(sizeof(RwDrainFailure) * cap_failed);
		}
		if (nfailed + nconns > cap_failed)
			break;				/* more members than room: no more passes */
		for (RwNode *node = rw_first_node(); node != NULL && ok; node = node->next)
		{
			if (node->nowed == 0)
				continue;
			ok = release_drain(&node->cmd, failed, &nfailed, err);
			for (RwNode *m = rw_node_members(node); m != NULL && ok; m = m->next)
				ok = release_drain(&m->cmd, failed, &nfailed, err);
		}
		rw_release_read_answers();
		for (RwOwed *rec = owed_head; rec != NULL && ok && pass < 2; rec = rec->next)
		{
			RwError		serr;

			if (rec->awaited && !rec->sent && rec->redirected &&
				release_send(rec, &serr))
				again = true;
		}
		if (!again)
			break;
		rw_release_flush();
	}
	rw_conn_restore(cap);
	/* Those answered are dropped by now: the rest are still owed. */
	for (RwOwed *rec = owed_head; rec != NULL; rec = rec->next)
	{
		RwError		why;

		if (!rec->awaited)
			continue;
		rec->awaited = false;
		if (!ok)
			continue;			/* the interrupt is what the call reports */
		rec->warn_if_lost = false;
		release_why_owed(rec, failed, nfailed, &why);
		rw_note_release_failed(rec->name, &why);
	}
	if (failed)
		pfree(failed);
	return ok;
}

/*
 * Whether a release of `name` on `node` is still owed (not answered, or to
 * send again): after rw_release_await, one that could not be done.
 */
bool
rw_release_owed_name(RwNode *node, const char *name)
{
	for (RwOwed *rec = owed_head; rec != NULL; rec = rec->next)
		if (rec->node == node && strcmp(rec->name, name) == 0)
			return true;
	return false;
}

/*
 * rw_release_now on every member of a quorum, all at once: the releases
 * owed for the name on each member queued ahead, then the release written
 * to all, then each answer read. held[i] as rw_release_now's for one node;
 * a release that could not be done is owed (but an error reply).
 */
static void
release_now_members(RwNode *node, const char *name, const RwKeys *keys,
					RwKeep keep, int lease_ms, int *held, RwError *errs)
{
	int			n = rw_quorum_size(node);
	RwAcquireCall calls[RW_QUORUM_MAX];
	int			order[RW_QUORUM_MAX];
	int64		until;
	int64		cap = rw_quorum_sending(node, false, order, &until);

	for (int k = 0; k < n; k++)
	{
		int			i = order[k];

		held[i] = -1;
		if (!release_may_ask_member(node, i))
		{
			/* Owed, not failed again: that would keep it left alone. */
			release_not_asked(&errs[i]);
			held[i] = -3;
		}
		else if (!rw_quorum_may_send(node, i, until, &errs[i]))
			held[i] = -3;		/* not asked, no time left: owed */
		else if (release_settle(node, i, name, &errs[i]) &&
				 rw_proto_release_send(&rw_quorum_member(node, i)->cmd, keys,
									   keep, lease_ms, &calls[i], &errs[i]))
			held[i] = -2;		/* sent */
	}
	rw_conn_restore(cap);
	cap = rw_quorum_reading();
	for (int i = 0; i < n; i++)
	{
		if (held[i] == -3)
		{
			held[i] = -1;
			release_owe_one(node, i, name, keys, keep, lease_ms);
			continue;
		}
		if (held[i] == -2)
			held[i] = rw_proto_collect_held(&rw_quorum_member(node, i)->cmd,
											&calls[i], &errs[i]);
		if (held[i] >= 0)
			continue;
		rw_quorum_failed(node, i, &errs[i]);
		if (errs[i].kind != RW_ERR_REPLY)
			release_owe_one(node, i, name, keys, keep, lease_ms);
	}
	rw_conn_restore(cap);
}

/*
 * Release now and wait for the answer: 1 if the hold was still ours, 0 if
 * it had been lost, -1 if Redis could not be asked or refused (*err says
 * which). Every release owed for the name is completed first. A release
 * that could not be done stays owed unless Redis refused it outright (an
 * error reply, which no retry would change). In quorum mode it goes to
 * every member: 1 if a majority still had the hold, 0 if too many no
 * longer had it for a majority to, else -1 (too few answered; owed where
 * it failed). Never throws.
 */
int
rw_release_now(RwNode *node, const char *name, const RwKeys *keys,
			   RwKeep keep, int lease_ms, RwError *err)
{
	int			n = rw_quorum_size(node);
	int			held[RW_QUORUM_MAX];
	RwError		errs[RW_QUORUM_MAX];
	int			yes = 0,
				no = 0;
	const RwError *first = NULL;

	if (n == 0)
	{
		int64		started = rw_now_ms();
		int			one;

		do
		{
			one = -1;
			if (release_settle(node, -1, name, err))
				one = rw_proto_release(rw_cluster_cmd(node, keys), keys, keep,
									   lease_ms, err);
		} while (one < 0 && rw_cluster_redirected(node, err, started));
		if (one < 0 && err->kind != RW_ERR_REPLY)
			release_owe_one(node, -1, name, keys, keep, lease_ms);
		return one;
	}
	release_now_members(node, name, keys, keep, lease_ms, held, errs);
	for (int i = 0; i < n; i++)
	{
		yes += held[i] == 1;
		no += held[i] == 0;
		if (held[i] < 0 && (first == NULL || errs[i].kind == RW_ERR_INTERRUPTED))
			first = &errs[i];
	}
	if (yes >= rw_quorum_majority(node))
		return 1;
	if (n - no < rw_quorum_majority(node))
		return 0;
	*err = *first;
	if (err->kind != RW_ERR_INTERRUPTED)
		snprintf(err->msg, sizeof(err->msg),
				 "only %d of the %d Redis nodes of the quorum confirmed the release; first failure: %s",
				 yes + no, n, first->msg);
	return -1;
}

/*
 * Queue a release whose answer is read later (at transaction end, exit,
 * redis_unlock_all): it goes out with rw_release_flush. With no connection
 * to be had it is owed, to be sent again; a writer's intent (RW_KEEP_ALL)
 * is simply left to its short lease. In quorum mode, one to each member.
 * Never throws.
 */
void
rw_release_later(RwNode *node, const char *name, const RwKeys *keys,
				 RwKeep keep, int lease_ms)
{
	int			ixs[RW_QUORUM_MAX];
	int			n = release_targets(node, ixs);

	for (int i = 0; i < n; i++)
	{
		RwOwed	   *rec;
		RwError		err;

		if (keep == RW_KEEP_ALL && release_conn(node, ixs[i], keys)->ctx == NULL)
			continue;
		if (keep != RW_KEEP_ALL &&
			(rec = release_find_unsent(node, ixs[i], name)) != NULL)
		{
			rec->keep = Min(rec->keep, keep);
			rec->warn_if_lost = false;	/* it may have run before */
		}
		else
			rec = release_record(node, ixs[i], name, keys, keep, lease_ms, true);
		(void) release_send(rec, &err);
	}
}

/*
 * Send what was queued on one connection. A cancel that cut it short at
 * transaction end (rw_conn_cancellable) leaves the rest queued, for the
 * next flush.
 */
static void
release_flush_conn(RwConn *conn)
{
	RwError		err;

	if (conn->ctx != NULL &&
		!rw_flush_tagged(conn, rw_now_ms() + rw_command_timeout_ms, &err) &&
		conn->ctx != NULL)
		release_unflushed = true;
}

/*
 * Send what rw_release_later queued. A connection that fails here is
 * closed, and its records become unsent: they are sent again before their
 * names are taken again, or at exit. What a cancel left queued at
 * transaction end goes out with the next flush: at the start of the
 * session's next call (held.c), or at exit. Never throws.
 */
void
rw_release_flush(void)
{
	if (!release_unflushed)
		return;
	release_unflushed = false;
	for (RwNode *node = rw_first_node(); node != NULL; node = node->next)
	{
		release_flush_conn(&node->cmd);
		for (RwNode *m = rw_node_members(node); m != NULL; m = m->next)
			release_flush_conn(&m->cmd);
	}
}

/*
 * Send, without waiting for their answers, the releases a node is owed that
 * are not on their way; with members_too, also to a quorum's members whose
 * connections are closed. Tries to connect at most once per call. Never
 * throws.
 */
static void
release_send_owed(RwNode *node, bool members_too)
{
	RwError		err;

	for (RwOwed *rec = owed_head; rec != NULL; rec = rec->next)
		if (rec->node == node && !rec->sent &&
			(members_too || rec->ix < 0 ||
			 release_conn(node, rec->ix, &rec->keys)->ctx != NULL))
			(void) release_send(rec, &err);
	rw_release_flush();
}

/*
 * The same at the start of an operation on the node (and after a quorum's
 * try). A quorum's member whose connection is closed is not connected for
 * them here: a stopped master would cost every call a connection timeout
 * on top of its round's (quorum.c: timing). They go once a round has
 * connected it again, before their name is taken again there (settled by
 * the acquisition), or at exit.
 */
void
rw_release_send_owed(RwNode *node)
{
	release_send_owed(node, false);
}

/* The first record owed for a name on a node (a member: ix), if any. */
static RwOwed *
release_find_name(RwNode *node, int ix, const char *name)
{
	for (RwOwed *rec = owed_head; rec != NULL; rec = rec->next)
		if (rec->node == node && rec->ix == ix && strcmp(rec->name, name) == 0)
			return rec;
	return NULL;
}

/*
 * In a cluster, the connection that serves a name may have changed since
 * releases of it were sent (a MOVED, a failover): a release sent on the
 * old one could run after what is sent on the new one. So its answers are
 * waited for first (rw_conn_drain, within rwlock.command_timeout; a release
 * that failed there, or that the old node redirected, is unsent again).
 * Returns the connection that serves the name now. Never throws.
 */
static RwConn *
release_settle_elsewhere(RwNode *node, int ix, const char *name,
						 const RwKeys *keys)
{
	for (int tries = 0;; tries++)
	{
		RwConn	   *conn = release_conn(node, ix, keys);
		RwOwed	   *away = NULL;
		RwError		err;

		for (RwOwed *rec = owed_head; rec != NULL && away == NULL; rec = rec->next)
			if (rec->node == node && rec->ix == ix && rec->sent &&
				rec->conn != conn && strcmp(rec->name, name) == 0)
				away = rec;
		if (away == NULL || tries == 8)
			return conn;
		if (!rw_conn_drain(away->conn, &err))
			rw_conn_close(away->conn);
		release_read_node(node);
	}
}

/* rw_release_settle_name on one target (a quorum's member, or -1). */
static bool
release_settle(RwNode *node, int ix, const char *name, RwError *err)
{
	RwOwed	   *first;
	RwConn	   *conn;

	err->kind = RW_OK;
	if (node->nowed == 0)
		return true;
	/* Answers that arrived; a closed connection's records become unsent. */
	release_read_node(node);
	if ((first = release_find_name(node, ix, name)) == NULL)
		return true;
	conn = release_settle_elsewhere(node, ix, name, &first->keys);
	if (!rw_conn_ensure(conn, err))
		return false;
	/* Had the connection been replaced, its records would be unsent now. */
	release_read_node(node);

	/*
	 * Queued on the open connection as they are: nothing may leave one
	 * behind (were one not sent, the name would be taken over the hold it
	 * is to let go of, and later let go of the new one).
	 */
	for (RwOwed *rec = owed_head; rec != NULL; rec = rec->next)
		if (rec->node == node && rec->ix == ix && !rec->sent &&
			release_conn(node, ix, &rec->keys) == conn)
			release_append(rec, conn);
	return true;
}

/*
 * Make every release owed for `name` on `node` run before whatever this
 * session sends next on the node's command connection: those sent are on
 * that connection already, and those to send again are queued on it now,
 * ahead of the caller's command (an acquisition, or a release). Redis runs
 * one connection's commands in order, so it applies the releases first,
 * without the caller waiting for their answers. Should the connection fail
 * before the caller's command is answered, that command fails with it (and
 * owes what it may have done), and the releases are owed again. False, with
 * *err, if there is no connection to queue them on: then the name must not
 * be taken on this node. A quorum's members are settled one by one by its
 * acquisitions (rw_release_settle_member): true here. Never throws, never
 * waits for an answer.
 */
bool
rw_release_settle_name(RwNode *node, const char *name, RwError *err)
{
	err->kind = RW_OK;
	if (rw_quorum_size(node) > 0)
		return true;
	return release_settle(node, -1, name, err);
}

/*
 * The same for member ix of a quorum: false, with *err, if the name must
 * not be taken on that member now (no connection to queue the releases
 * on, or it failed a moment ago and the others can make a majority).
 */
bool
rw_release_settle_member(RwNode *node, int ix, const char *name, RwError *err)
{
	if (!rw_quorum_may_ask_round(node, ix))
	{
		release_not_asked(err);
		return false;
	}
	if (release_settle(node, ix, name, err))
		return true;
	rw_quorum_failed(node, ix, err);
	return false;
}

/*
 * `name` was just granted on `node`, and the grant recorded (held.c: nothing
 * that can throw stands between Redis's answer and the record, and this
 * reads answers). Every release owed for it went ahead of
 * the acquisition on the same connection (rw_release_settle_name), so each
 * is answered by now; one that a Redis Cluster answered with a redirection
 * (MOVED, ASK, TRYAGAIN, CLUSTERDOWN: it did not run, and is unsent again)
 * must not be sent later: it would let go of the new grant, which is the
 * same owner's and stands for whatever that release was to let go of. So
 * such records are dropped. (With one server a release cannot bounce while
 * the command after it runs: this finds nothing.) Never throws.
 */
void
rw_release_granted(RwNode *node, const char *name)
{
	RwOwed	   *next;

	if (node->nowed == 0)
		return;
	release_read_node(node);
	for (RwOwed *rec = owed_head; rec != NULL; rec = next)
	{
		next = rec->next;
		if (rec->node == node && !rec->sent && strcmp(rec->name, name) == 0)
			release_drop(rec);
	}
}

/*
 * At backend exit: send every release still owed that is not on its way,
 * without waiting for answers. The caller bounds the time (rw_conn_limit).
 */
void
rw_release_at_exit(void)
{
	for (RwNode *node = rw_first_node(); node != NULL; node = node->next)
		if (node->nowed > 0)
			release_send_owed(node, true);
	rw_release_flush();
}

/*
 * After rw_release_at_exit, or a cut-off wait's withdrawal (waiting.c):
 * whether the releases owed for the name on the node were written whole to
 * open connections, so that Redis will run them: every one, or in quorum
 * mode those to a majority of the members (a minority's hold frees nothing
 * and ends with its lease). Otherwise the keeper is asked to release the
 * hold (held.c), or to withdraw the wait's intent (waiters.c).
 */
bool
rw_release_went_out(RwNode *node, const char *name)
{
	int			n = rw_quorum_size(node);
	int			out = 0,
				owed = 0;

	for (RwOwed *rec = owed_head; rec != NULL; rec = rec->next)
		if (rec->node == node && strcmp(rec->name, name) == 0)
		{
			owed++;
			out += rec->sent && rw_conn_sent_all(rec->conn);
		}
	return n > 0 ? owed == 0 || out >= rw_quorum_majority(node) : out == owed;
}

/*
 * Release what `owner` holds of a lock but `keep`, on the connection that
 * serves it, or on every member of a quorum that may be asked, and wait for
 * the answers: the keeper, for a session that exited before its own release
 * got through (RW_KEEP_NOTHING), or whose wait was cut off in a stall
 * (RW_KEEP_ALL: its intent or mark only). True when Redis (a majority of a
 * quorum's members) ran it, whatever it found. Never throws.
 */
bool
rw_release_as(RwNode *node, const RwKeys *keys, const char *owner,
			  uint64 seq, RwKeep keep, RwError *err)
{
	int			n = rw_quorum_size(node);
	int			done = 0;

	if (n == 0)
	{
		RwConn	   *conn = rw_cluster_cmd(node, keys);

		return rw_conn_ensure(conn, err) &&
			rw_proto_release_as(conn, keys, owner, seq, keep, err) >= 0;
	}
	for (int i = 0; i < n; i++)
	{
		RwConn	   *conn = &rw_quorum_member(node, i)->cmd;
		RwError		merr;

		if (!rw_quorum_may_ask(node, i))
			continue;
		if (rw_conn_ensure(conn, &merr) &&
			rw_proto_release_as(conn, keys, owner, seq, keep, &merr) >= 0)
			done++;
		else
		{
			rw_quorum_failed(node, i, &merr);
			*err = merr;
		}
	}
	return done >= rw_quorum_majority(node);
}
