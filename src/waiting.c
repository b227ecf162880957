/*-------------------------------------------------------------------------
 *
 * waiting.c
 *	  Waiting for a busy lock: notified wake-ups, timeouts, cancellation.
 *
 * A waiter tries the acquire script; if the lock is busy it listens on a
 * pub/sub channel (a second connection to the node, opened the first time
 * this session waits and kept), tries once more after its subscription is
 * confirmed (so a release published before that cannot be missed), and then
 * sleeps until a message arrives, the holder's remaining lease runs out, or
 * its own deadline passes. A missed message therefore costs latency, never
 * a hang. Waiting readers listen on the lock's channel, a waiting writer on
 * its own (<channel>:<owner id>): a release publishes only to those it lets
 * through (protocol 2), so a hand-off does not wake the whole queue.
 *
 * A waiting writer joins the lock's queue with an intent of its own
 * (RW_INTENT_MS), renewed at each try, which makes new readers queue behind
 * it. A waiting reader leaves a mark of the same lease, which gives waiting
 * readers a turn before the next writer when the current writer leaves. The
 * intent or mark is withdrawn when the wait ends without the lock, also from
 * the (sub)transaction abort callbacks (rw_abandon_wait), so that a reader
 * that gave up is owed no turn; the withdrawal is sent without waiting for
 * the answer. With no connection left (a call cut off in a stall), it is
 * owed (release.c), and since an idle session makes no call that would
 * send it, the keeper withdraws it, and the wait key, on the session's
 * behalf (waiters.c) when the library is preloaded; else they stay to their
 * leases. A walk does not take them for a live wait meanwhile: it asks each
 * member of a cycle for a fresh sign of life, a renewal (walk.c).
 *
 * An upgrade whose read lock Redis no longer has (RW_READ_LOST) marks the
 * hold lost at once, with a WARNING kept for the end of the call, and goes
 * on as an acquisition that holds nothing.
 *
 * In quorum mode (quorum.c) each try goes to every member of the quorum at
 * once, after the releases owed for the name on each member are queued
 * there (a member they cannot be queued on is not asked); what a try that
 * got no majority was granted is released at once (owed, so it goes ahead
 * of the next try on each member). The waiter listens on every member it
 * can reach and wakes on the first message; when the votes split (some
 * members granted it, too few), it tries again after a random pause, so
 * that two waiters that split a quorum do not collide again in step.
 *
 * The sleep goes through the latch: cancel, statement_timeout, termination
 * and postmaster death end it at once. Between tries nothing is in flight;
 * a try cut off in flight owes the release of what it may have granted
 * (release.c) before the error is raised, or before the next try (the
 * releases owed for the name go ahead of each try).
 *
 * The wait's end (lock_timeout, a try form's wait) caps each try as well:
 * a try, its connection and its subscription end by then whatever Redis
 * does, or WAIT_TRY_MIN_MS after the try began if that is later (so that a
 * short lock_timeout still lets a free lock be taken), and a try that ran
 * out of time there ends the wait as the timeout does (55P03, or false);
 * so does any try that failed for want of Redis once the time is up.
 *
 * A session that has found the lock busy is waiting, and has nothing to
 * lose by waiting on: a try that then fails for want of Redis (it could not
 * connect, did not answer within rwlock.command_timeout, dropped the
 * connection, or a cluster did not serve the slot in time: a failover, a
 * slot migration) is tried again after a pause (WAIT_RETRY_MS, doubled
 * after each failure in a row up to WAIT_RETRY_MAX_MS), until the wait's end
 * or a cancel, as a new call (redis_conn.c: the node is connected to
 * again, a cluster's slot map loaded again). A try that fails before the
 * lock was ever found busy is an error at once, as any other call's.
 *
 *-------------------------------------------------------------------------
 */
#include "rwlock.h"

#include "miscadmin.h"
#include "pgstat.h"
#include "storage/proc.h"
#include "common/pg_prng.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#define WAIT_SPLIT_MIN_MS	10	/* the random pause after a split vote */
#define WAIT_SPLIT_MAX_MS	100
#define WAIT_RETRY_MS		100 /* after a try that failed, while waiting */
#define WAIT_RETRY_MAX_MS	1000	/* ... after several in a row */
#define WAIT_TRY_MIN_MS		200 /* the least a try is given, whatever the
								 * wait's end */

/* How rw_wait_acquire's loop ended (its one epilogue reports it). */
typedef enum WaitOutcome
{
	WAIT_GRANTED,
	WAIT_UNACKED,				/* granted without the replicas' ack */
	WAIT_FAILED,				/* a try failed: raise its error */
	WAIT_TIMED_OUT,				/* the wait's end came */
	WAIT_CONFLICT,				/* an upgrade conflict */
	WAIT_DEADLOCK				/* this session is a deadlock's victim */
} WaitOutcome;

/* The wait in progress, so an error can clean up after it. */
static struct
{
	bool		active;
	RwNode	   *node;
	char	   *name;			/* copy in wait_cxt */
	RwKeys		keys;			/* copy in wait_cxt */
	RwMode		held_mode;		/* what the session held before */
	bool		intent;			/* an intent or mark may be registered */
	bool		subscribed;		/* on one of subs at least */
	int			nsubs;			/* the node's subscriber, or each member's */
	RwConn	   *subs[RW_QUORUM_MAX];
	bool		listening[RW_QUORUM_MAX];	/* subs[i] confirmed */
} wait_state;

static MemoryContext wait_cxt = NULL;

static void
wait_begin(RwNode *node, const RwKeys *keys, const char *name, RwMode mode,
		   RwMode held_mode, bool intent)
{
	if (wait_cxt == NULL)
		wait_cxt = AllocSetContextCreate(TopMemoryContext, "rwlock wait",
										 ALLOCSET_SMALL_SIZES);
	MemoryContextReset(wait_cxt);
	rw_waiters_take_back();
	rw_copy_keys(keys, &wait_state.keys, wait_cxt);
	if (mode == RW_WRITE)
	{
		/* A waiting writer listens on its own channel, <channel>:<owner id>. */
		MemoryContext old = MemoryContextSwitchTo(wait_cxt);

		wait_state.keys.channel = psprintf("%s:%s", keys->channel, rw_owner_id());
		wait_state.keys.channel_len = strlen(wait_state.keys.channel);
		MemoryContextSwitchTo(old);
	}
	wait_state.name = MemoryContextStrdup(wait_cxt, name);
	wait_state.node = node;
	wait_state.held_mode = held_mode;
	wait_state.intent = intent;
	wait_state.subscribed = false;
	wait_state.nsubs = Max(rw_quorum_size(node), 1);
	for (int i = 0; i < wait_state.nsubs; i++)
	{
		wait_state.subs[i] = rw_quorum_size(node) > 0 ?
			&rw_quorum_member(node, i)->sub : &node->sub;
		wait_state.listening[i] = false;
	}
	wait_state.active = true;
}

/* Stop listening; the confirmation is read (and dropped) by a later wait. */
static void
wait_unsubscribe(void)
{
	const char *argv[2] = {"UNSUBSCRIBE", wait_state.keys.channel};
	size_t		lens[2] = {11, wait_state.keys.channel_len};

	wait_state.subscribed = false;
	for (int i = 0; i < wait_state.nsubs; i++)
	{
		RwConn	   *sub = wait_state.subs[i];
		RwError		err;

		if (!wait_state.listening[i])
			continue;
		wait_state.listening[i] = false;
		if (sub->ctx == NULL)
			continue;
		rw_append(sub, 2, argv, lens, NULL);
		(void) rw_flush(sub, rw_now_ms() + rw_command_timeout_ms, &err);
	}
}

/*
 * End the wait. With withdraw, take back the intent or mark: sent without
 * waiting for the answer (this also runs from abort callbacks, which must
 * not wait on Redis), or, with no connection, left to its short lease.
 */
static void
wait_end(bool withdraw)
{
	const char *left_key;
	bool		left_intent = false;

	if (!wait_state.active)
		return;
	wait_state.active = false;
	left_key = rw_deadlock_wait_end(!withdraw);
	if (wait_state.subscribed)
		wait_unsubscribe();
	if (withdraw && wait_state.intent)
	{
		rw_release_later(wait_state.node, wait_state.name, &wait_state.keys,
						 RW_KEEP_ALL, 0);
		rw_release_flush();
		left_intent = !rw_release_went_out(wait_state.node, wait_state.name);
	}

	/*
	 * A wait cut off in a stall (its connection closed) leaves its wait key
	 * and its intent or mark in Redis. The session owes their withdrawal
	 * (the intent's is an owed release, sent at its next call), but it may
	 * stay idle: the keeper withdraws them on its behalf (with the library
	 * preloaded; walkers meanwhile wait for a sign of life that a leftover
	 * never shows, walk.c).
	 */
	if (withdraw && (left_key != NULL || left_intent))
		rw_waiters_leave_behind(wait_state.node->ep.url,
								left_key != NULL ? left_key : "", left_intent);
}

/* For the abort callbacks: an error ended the wait. */
void
rw_abandon_wait(void)
{
	if (wait_state.active)
		rw_stat_add(RW_STAT_CANCELS, 1);
	wait_end(true);
}

/* After a grant is recorded: stop listening. */
void
rw_wait_done(void)
{
	wait_end(false);
}

/*
 * Is this push a message on our channel? A release publishes only when it
 * lets waiters proceed, and only on the channel of those it lets through: the
 * lock's own channel for waiting readers, a waiting writer's own channel
 * (wait_begin) for the writer whose turn it is.
 */
static bool
wait_is_wakeup(redisReply *r)
{
	return r->type == REDIS_REPLY_ARRAY && r->elements == 3 &&
		r->element[0]->type == REDIS_REPLY_STRING &&
		strcmp(r->element[0]->str, "message") == 0 &&
		r->element[1]->type == REDIS_REPLY_STRING &&
		r->element[1]->len == wait_state.keys.channel_len &&
		memcmp(r->element[1]->str, wait_state.keys.channel, wait_state.keys.channel_len) == 0;
}

static bool
wait_is_confirmation(redisReply *r)
{
	return r->type == REDIS_REPLY_ARRAY && r->elements == 3 &&
		r->element[0]->type == REDIS_REPLY_STRING &&
		strcmp(r->element[0]->str, "subscribe") == 0 &&
		r->element[1]->type == REDIS_REPLY_STRING &&
		r->element[1]->len == wait_state.keys.channel_len &&
		memcmp(r->element[1]->str, wait_state.keys.channel, wait_state.keys.channel_len) == 0;
}

/*
 * Take the pushes that have arrived on the listening subscribers (or on
 * `only`, if not NULL) until one matches `match`: true then. Stale pushes
 * (other channels, old confirmations) are dropped. A subscriber that
 * failed is closed and stops listening.
 */
static bool
wait_take_pushes(RwConn *only, bool (*match) (redisReply *))
{
	for (int i = 0; i < wait_state.nsubs; i++)
	{
		RwConn	   *sub = wait_state.subs[i];
		redisReply *r;
		RwError		err;

		if (only != NULL ? sub != only : !wait_state.listening[i])
			continue;
		while (sub->ctx != NULL && rw_conn_read_pending(sub, &r, &err) && r != NULL)
		{
			bool		hit = match(r);

			freeReplyObject(r);
			if (hit)
				return true;
		}
		if (sub->ctx == NULL)
			wait_state.listening[i] = false;
	}
	return false;
}

/*
 * Read pushes until one matches `match` or timeout_ms passes, on `only`
 * or on every listening subscriber. Returns false on timeout or if no
 * subscriber is left.
 */
static bool
wait_for_push(RwConn *only, bool (*match) (redisReply *), long timeout_ms)
{
	int64		deadline = rw_now_ms() + timeout_ms;

	for (;;)
	{
		RwConn	   *open[RW_QUORUM_MAX];
		int			nopen = 0;
		int64		now;

		if (wait_take_pushes(only, match))
			return true;
		for (int i = 0; i < wait_state.nsubs; i++)
			if (wait_state.subs[i]->ctx != NULL &&
				(only != NULL ? wait_state.subs[i] == only : wait_state.listening[i]))
				open[nopen++] = wait_state.subs[i];
		now = rw_now_ms();
		if (nopen == 0 || now >= deadline)
			return false;
		if (!(nopen == 1 ? rw_conn_wait_readable(open[0], deadline - now) :
			  rw_conns_wait_readable(open, nopen, deadline - now)))
			return false;
	}
}

/*
 * Whether a try that failed may be tried again by a waiter: Redis could not
 * be reached, did not answer in time or dropped the connection, or a
 * cluster did not serve the slot in time. Not an interrupt, credentials
 * refused, a Redis unfit to serve locks or a permission refused (final at
 * connect), or an error reply.
 */
static bool
wait_may_retry(const RwError *err)
{
	return err->kind == RW_ERR_CONNECT || err->kind == RW_ERR_LOST ||
		err->kind == RW_ERR_TIMEOUT || err->kind == RW_ERR_UNSERVED;
}

/* The member a subscriber belongs to may be asked (not failed lately). */
static bool
wait_may_listen(int i)
{
	return rw_quorum_size(wait_state.node) == 0 ||
		rw_quorum_may_ask(wait_state.node, i);
}

/*
 * Listen on the lock's channel, on every subscriber that can be had (all
 * asked at once); true once Redis confirmed it on one at least. A quorum's
 * subscribers are asked as its rounds are (quorum.c: timing): the open
 * ones first, then those to connect, within one rwlock.connect_timeout,
 * and their confirmations read within one rwlock.command_timeout.
 */
static bool
wait_subscribe(void)
{
	const char *argv[2] = {"SUBSCRIBE", wait_state.keys.channel};
	size_t		lens[2] = {9, wait_state.keys.channel_len};
	bool		asked[RW_QUORUM_MAX];
	int			order[RW_QUORUM_MAX];
	bool		quorum = rw_quorum_size(wait_state.node) > 0;
	int64		until = 0;
	int64		cap = 0;
	RwError		err;

	if (quorum)
		cap = rw_quorum_sending(wait_state.node, true, order, &until);
	else
		order[0] = 0;
	for (int k = 0; k < wait_state.nsubs; k++)
	{
		int			i = order[k];
		RwConn	   *sub = wait_state.subs[i];

		asked[i] = false;
		if (wait_state.listening[i] || !wait_may_listen(i))
			continue;
		if (quorum && sub->ctx == NULL && rw_now_ms() >= until)
			continue;			/* no time left: asked next time */
		if (!rw_conn_ensure(sub, &err))
		{
			/*
			 * Interrupts are served, and so is a lone node's refusal that
			 * no retry would change (a user that may not SUBSCRIBE: 42501).
			 * Else the waiter polls: its tries say whether Redis can be had
			 * (and are tried again if not); a quorum's member that refused
			 * is left alone.
			 */
			if (err.kind == RW_ERR_INTERRUPTED ||
				(wait_state.nsubs == 1 && !wait_may_retry(&err)))
				rw_raise(sub, &err);
			continue;
		}
		rw_append(sub, 2, argv, lens, NULL);
		asked[i] = rw_flush(sub, rw_now_ms() + rw_command_timeout_ms, &err);
	}
	if (quorum)
		rw_conn_restore(cap);
	until = rw_now_ms() + rw_command_timeout_ms;
	for (int i = 0; i < wait_state.nsubs; i++)
	{
		if (!asked[i])
			continue;
		/* One deadline for all: a confirmation already read counts. */
		if (wait_for_push(wait_state.subs[i], wait_is_confirmation,
						  (long) Max(until - rw_now_ms(), 0)))
			wait_state.listening[i] = wait_state.subscribed = true;
		else
			rw_conn_close(wait_state.subs[i]);
	}
	return wait_state.subscribed;
}

/* Sleep until woken on the channel or timeout_ms passes. */
static void
wait_sleep(long timeout_ms)
{
	if (wait_state.subscribed)
	{
		if (!wait_for_push(NULL, wait_is_wakeup, timeout_ms))
		{
			bool		any = false;

			for (int i = 0; i < wait_state.nsubs; i++)
				any |= wait_state.listening[i] && wait_state.subs[i]->ctx != NULL;
			wait_state.subscribed = any;
		}
		return;
	}
	/* No subscription (it failed): poll, briefly, through the latch. */
	(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
					 Min(timeout_ms, 50), PG_WAIT_EXTENSION);
	ResetLatch(MyLatch);
	CHECK_FOR_INTERRUPTS();
}

static void
wait_report_upgrade_conflict(const char *name, const char *other)
{
	rw_stat_add(RW_STAT_UPGRADE_CONFLICTS, 1);
	ereport(ERROR,
			(errcode(ERRCODE_T_R_DEADLOCK_DETECTED),
			 errmsg("deadlock detected"),
			 errdetail("This session and %s both hold the read lock on Redis lock \"%s\" and wait for its write lock.",
					   other, name),
			 errhint("Retry the transaction. Taking the write lock before reading avoids this.")));
}

static void
wait_report_lock_timeout(const char *name, RwMode mode)
{
	rw_stat_add(RW_STAT_TIMEOUTS, 1);
	ereport(ERROR,
			(errcode(ERRCODE_LOCK_NOT_AVAILABLE),
			 errmsg("canceling statement due to lock timeout"),
			 errdetail("Waited %d ms for the %s lock on Redis lock \"%s\".",
					   LockTimeout, mode == RW_WRITE ? "write" : "read", name)));
}

/*
 * A grant that fewer replicas than rwlock.wait_replicas acknowledged: undo
 * it at once (a release that waits for its answer; owed if it fails, so the
 * name is not taken again before Redis is rid of it), then report it: a
 * class 08 error, or, for the try forms, false (with a WARNING kept for a
 * safe moment).
 */
static void
wait_undo_unacked(RwNode *node, const RwKeys *keys, const char *name,
				  RwMode mode, RwMode held_mode, int acks, bool is_error)
{
	RwError		err;

	(void) rw_release_now(node, name, keys,
						  held_mode == RW_READ ? RW_KEEP_READ : RW_KEEP_NOTHING,
						  rw_lease_ms, &err);
	if (is_error)
		ereport(ERROR,
				(errcode(ERRCODE_CONNECTION_FAILURE),
				 errmsg("Redis lock \"%s\" was granted but not acknowledged by enough replicas",
						name),
				 errdetail("%d of the %d replicas rwlock.wait_replicas asks for acknowledged the %s lock within rwlock.wait_replicas_timeout (%d ms); the grant was undone.",
						   Max(acks, 0), rw_wait_replicas,
						   mode == RW_WRITE ? "write" : "read",
						   rw_wait_replicas_timeout_ms)));
	rw_note_warning(ERRCODE_WARNING,
					psprintf("Redis lock \"%s\" was granted but not acknowledged by enough replicas",
							 name),
					psprintf("%d of the %d replicas rwlock.wait_replicas asks for acknowledged it within rwlock.wait_replicas_timeout (%d ms); the grant was undone.",
							 Max(acks, 0), rw_wait_replicas,
							 rw_wait_replicas_timeout_ms));
}

/*
 * A cluster answered the acquisition with a redirection (cluster.c): true
 * to try again where it says, after the releases owed for the name are
 * queued there ahead of it. False, with *err, when the redirections have
 * lasted rwlock.command_timeout or the releases cannot be queued. (A try
 * that may have run only marks the slot map stale here.)
 */
static bool
wait_redirected(RwNode *node, const char *name, RwError *err, int64 *since)
{
	if (*since == 0)
		*since = rw_now_ms();
	return rw_cluster_redirected(node, err, *since) &&
		rw_release_settle_name(node, name, err);
}

/*
 * One try on a node (a plain one, or a cluster's: the member that serves
 * the name's slot), after the releases owed for the name there, queued
 * ahead of it (those a try cut off earlier in this wait owes). Statuses as
 * rw_proto_acquire's.
 */
static RwAcquireStatus
wait_try_node(RwNode *node, const RwKeys *keys, const char *name,
			  RwMode mode, RwMode held_mode, int intent, int64 *result,
			  char **other, int *acks, RwError *err)
{
	*acks = -1;
	if (!rw_release_settle_name(node, name, err))
	{
		err->maybe_sent = false;
		return RW_ACQ_FAILED;
	}
	return rw_proto_acquire(rw_cluster_cmd(node, keys), keys, mode, held_mode,
							rw_lease_ms, intent, result, other, acks, err);
}

/*
 * One try on every member of a quorum (quorum.c). Each member is asked only
 * once the releases owed for the name there are queued ahead of the try.
 * Unless the lock was granted, what members granted is released (owed and
 * sent, without waiting: it goes ahead of the next try on each member), and
 * what a member may have granted before its connection failed is owed;
 * after a split vote, the writer's intent is withdrawn everywhere.
 * *split: some members granted it, too few. Statuses as rw_proto_acquire's,
 * but RW_GRANTED_UNACKED.
 */
static RwAcquireStatus
wait_try_quorum(RwNode *node, const RwKeys *keys, const char *name,
				RwMode mode, RwMode held_mode, int intent, int64 *result,
				char **other, bool *split, RwError *err)
{
	int			n = rw_quorum_size(node);
	bool		ask[RW_QUORUM_MAX];
	RwVote		votes[RW_QUORUM_MAX];
	RwKeep		undo = held_mode == RW_READ ? RW_KEEP_READ : RW_KEEP_NOTHING;
	RwAcquireStatus status;
	bool		owes = false;
	int			order[RW_QUORUM_MAX];
	int64		until;
	int64		cap;

	/*
	 * Releases owed for the name go first on each member, in the round's
	 * sending phase (quorum.c: timing): the members with open connections
	 * first, none connected after the time.
	 */
	cap = rw_quorum_sending(node, false, order, &until);
	for (int k = 0; k < n; k++)
		ask[order[k]] = rw_quorum_may_send(node, order[k], until, err) &&
			rw_release_settle_member(node, order[k], name, err);
	rw_conn_restore(cap);
	status = rw_quorum_acquire(node, keys, mode, held_mode, intent, ask, until,
							   votes, result, other, split, err);
	if (status == RW_GRANTED)
		return status;
	if (status == RW_READ_LOST)
		undo = RW_KEEP_NOTHING;	/* no read lock left to keep */
	for (int i = 0; i < n; i++)
	{
		if (votes[i].status == RW_GRANTED ||
			(votes[i].status == RW_ACQ_FAILED && votes[i].err.maybe_sent))
		{
			rw_release_owe(node, i, name, keys, undo, rw_quorum_lease(node));
			owes = true;
		}
		else if (*split && votes[i].status == RW_BUSY && mode == RW_WRITE &&
				 intent > 0)
		{
			/*
			 * Votes split: the writers' places in the members' queues may
			 * disagree in a cycle (A before B on one, B before C on the
			 * next, C before A on the third), which would split every try
			 * again. All places are given up; the random pause decides who
			 * queues first next time.
			 */
			rw_release_owe(node, i, name, keys, RW_KEEP_ALL, 0);
			owes = true;
		}
	}
	if (owes)
		rw_release_send_owed(node);
	return status;
}

/* A pause of random length after a split vote, ms. */
static long
wait_split_pause(void)
{
	return WAIT_SPLIT_MIN_MS +
		(long) pg_prng_uint64_range(&pg_global_prng_state, 0,
									WAIT_SPLIT_MAX_MS - WAIT_SPLIT_MIN_MS);
}

/*
 * The cap on a try's deadlines (rw_conn_tighten) for a wait that ends at
 * `deadline` (timeout_ms: as rw_wait_acquire's): that end, or
 * WAIT_TRY_MIN_MS from now if later; no cap for a wait without an end or a
 * call that does not wait. held.c caps what it sends ahead of the wait so.
 */
int64
rw_wait_cap(long timeout_ms, int64 deadline)
{
	if (timeout_ms <= 0)
		return PG_INT64_MAX;
	return Max(deadline, rw_now_ms() + WAIT_TRY_MIN_MS);
}

/*
 * Take the lock in `mode`, waiting up to timeout_ms (-1: forever, 0: not at
 * all) from `started` (when the call began: what it sent ahead counts).
 * held_mode is what the session already holds in Redis (RW_READ when
 * this is an upgrade). *lost is the hold's record that it was lost: set as
 * soon as Redis answers that the read lock being upgraded is gone (nothing
 * can throw in between), after which the session holds nothing and the
 * upgrade goes on as a new acquisition; an upgrade whose hold was already
 * found lost (a renewal while waiting) goes on so too. On success sets
 * *token and returns true; the caller records the grant (its lease runs
 * from *since, when the try that got it was sent), then calls
 * rw_wait_done. When the time runs out (also in the middle of a try: see
 * the header), returns false, or raises 55P03 if
 * timeout_is_error.
 *
 * An acquisition that fails in flight may have been granted all the same:
 * before the error is raised, or the try made again, the release of what it
 * may have granted is owed (release.c), so the name is never taken again
 * before Redis is rid of it. An acquisition that never reached Redis owes
 * nothing.
 */
bool
rw_wait_acquire(RwNode *node, const RwKeys *keys, const char *name,
				RwMode mode, RwMode held_mode, long timeout_ms, int64 started,
				bool timeout_is_error, int64 *token, int64 *since, bool *lost)
{
	int64		deadline = timeout_ms < 0 ? PG_INT64_MAX : started + timeout_ms;
	int			intent = timeout_ms != 0 ? RW_INTENT_MS : 0;
	int64		redirected_since = 0;	/* first of the redirections in a row */
	bool		waiting = false;	/* the lock was found busy */
	long		retry_ms = WAIT_RETRY_MS;	/* the pause after a failed try */
	WaitOutcome outcome;
	int64		result;
	char	   *other = NULL;
	RwError		err;
	int			acks = -1;
	int64		cap;

	wait_begin(node, keys, name, mode, held_mode, intent > 0);
	for (;;)
	{
		RwAcquireStatus status;
		long		left;
		bool		split = false;
		bool		time_up;

		cap = rw_conn_tighten(rw_wait_cap(timeout_ms, deadline));
		other = NULL;

		if (held_mode == RW_READ && *lost)
			held_mode = wait_state.held_mode = RW_NONE;
		*since = rw_now_ms();
		if (rw_quorum_size(node) > 0)
			status = wait_try_quorum(node, keys, name, mode, held_mode, intent,
									 &result, &other, &split, &err);
		else
			status = wait_try_node(node, keys, name, mode, held_mode, intent,
								   &result, &other, &acks, &err);
		if (status == RW_ACQ_FAILED &&
			wait_redirected(node, name, &err, &redirected_since))
		{
			rw_conn_restore(cap);
			continue;
		}
		redirected_since = 0;
		if (status == RW_GRANTED)
		{
			outcome = WAIT_GRANTED;
			break;
		}
		if (status == RW_GRANTED_UNACKED)
		{
			outcome = WAIT_UNACKED;
			break;
		}
		if (status == RW_ACQ_FAILED)
		{
			/*
			 * An upgrade keeps its read lock (unless found lost), with a
			 * quorum's lease cap.
			 */
			if (err.maybe_sent)
				rw_release_owe(node, -1, name, keys,
							   held_mode == RW_READ ? RW_KEEP_READ : RW_KEEP_NOTHING,
							   rw_quorum_lease(node));
			/*
			 * An error, unless a waiter may try again, or the wait's end has
			 * come (which cut the try short, or will end the wait anyway).
			 */
			time_up = timeout_ms > 0 && rw_now_ms() >= deadline;
			if (!wait_may_retry(&err) || (!waiting && !time_up))
			{
				outcome = WAIT_FAILED;
				break;
			}
			if (time_up)
			{
				outcome = WAIT_TIMED_OUT;
				break;
			}
			rw_conn_restore(cap);
			rw_renew_due(false, NULL);
			left = deadline == PG_INT64_MAX ? -1 : Max(deadline - rw_now_ms(), 0);
			wait_sleep(left < 0 ? retry_ms : Min(retry_ms, left));
			retry_ms = Min(retry_ms * 2, WAIT_RETRY_MAX_MS);
			CHECK_FOR_INTERRUPTS();
			rw_call_again();
			continue;
		}
		if (status == RW_READ_LOST)
		{
			/* Recorded first; the WARNING waits for the end of the call. */
			if (!*lost)
				rw_stat_add(RW_STAT_HOLDS_LOST, 1);
			*lost = true;
			held_mode = wait_state.held_mode = RW_NONE;
			rw_note_lost(name,
						 "Redis no longer had this session's read lock when it asked to upgrade it to the write lock: its lease ran out or Redis lost its data.");
			rw_conn_restore(cap);
			continue;
		}
		if (status == RW_UPGRADE_CONFLICT)
		{
			/* A try cannot have it while the other waits: no, not an error. */
			outcome = WAIT_CONFLICT;
			break;
		}
		waiting = true;
		retry_ms = WAIT_RETRY_MS;

		left = deadline == PG_INT64_MAX ? -1 : Max(deadline - rw_now_ms(), 0);
		if (left == 0)
		{
			outcome = WAIT_TIMED_OUT;
			break;
		}
		/*
		 * A wait, from its first busy answer; past deadlock_timeout, its logs
		 * and the wait-for graph (deadlock.c).
		 */
		if (rw_deadlock_tick(node, keys, name, mode, &result))
		{
			outcome = WAIT_DEADLOCK;
			break;
		}
		if (!wait_state.subscribed)
		{
			/* Try again once listening, before any sleep. */
			if (wait_subscribe())
			{
				rw_conn_restore(cap);
				continue;
			}
		}
		rw_conn_restore(cap);

		/*
		 * The session's other holds (and, in an upgrade, its read lock) must
		 * not lapse while it waits: renew those due, and wake in time for the
		 * next renewal.
		 */
		rw_renew_due(false, NULL);
		result = Min(result, Max(rw_lease_ms / 3, 1));
		/* Never sleep past the blocker's lease, or let our mark lapse. */
		if (intent > 0)
			result = Min(result, intent / 2);
		if (split)
			result = Min(result, wait_split_pause());
		wait_sleep(left < 0 ? result : Min(result, left));
		CHECK_FOR_INTERRUPTS();
	}

	/*
	 * The one way out: a grant is the caller's to record (it ends the wait
	 * with rw_wait_done); any other end withdraws the intent or mark, ends
	 * the wait under the try's cap, puts the cap back, and then reports.
	 */
	if (outcome == WAIT_GRANTED)
	{
		rw_conn_restore(cap);
		*token = result;
		return true;
	}
	wait_end(true);
	rw_conn_restore(cap);
	switch (outcome)
	{
		case WAIT_UNACKED:
			wait_undo_unacked(node, keys, name, mode, held_mode, acks,
							  timeout_is_error);
			break;
		case WAIT_FAILED:
			rw_raise(&node->cmd, &err);
			break;
		case WAIT_TIMED_OUT:
			if (timeout_is_error)
				wait_report_lock_timeout(name, mode);
			break;
		case WAIT_CONFLICT:
			if (timeout_is_error)
				wait_report_upgrade_conflict(name, other);
			break;
		case WAIT_DEADLOCK:
			rw_deadlock_report();
			break;
		case WAIT_GRANTED:
			break;
	}
	return false;
}
