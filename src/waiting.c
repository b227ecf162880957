/*-------------------------------------------------------------------------
 *
 * waiting.c
 *	  Waiting for a busy lock: notified wake-ups, timeouts, cancellation.
 *
 * A waiter tries the acquire script; if the lock is busy it listens on the
 * lock's pub/sub channel (a second connection to the node, opened the first
 * time this session waits and kept), tries once more after its subscription
 * is confirmed (so a release published before that cannot be missed), and
 * then sleeps until a message arrives, the holder's remaining lease runs out,
 * or its own deadline passes. A missed message therefore costs latency, never
 * a hang. Release scripts publish whenever waiters may proceed.
 *
 * A waiting writer registers an intent with a short lease of its own
 * (RW_INTENT_MS), renewed at each try, which makes new readers queue behind
 * it. A waiting reader leaves a mark of the same lease, which gives waiting
 * readers a turn before the next writer when the current writer leaves. The
 * intent is withdrawn when the wait ends without the lock, and, if the wait
 * is cancelled or times out with an error, by rw_abandon_wait() from the
 * (sub)transaction abort callbacks.
 *
 * The sleep goes through the latch: cancel, statement_timeout, termination
 * and postmaster death end it at once. Between tries nothing is in flight.
 *
 *-------------------------------------------------------------------------
 */
#include "rwlock.h"

#include "miscadmin.h"
#include "pgstat.h"
#include "storage/proc.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

/* The wait in progress, so an error can clean up after it. */
static struct
{
	bool		active;
	RwNode	   *node;
	RwKeys	   *keys;			/* copy in wait_cxt */
	char		held_mode;		/* what the session held before: '\0' or 'r' */
	bool		in_flight;		/* an acquire script was sent, no reply yet */
	bool		intent;			/* a writer's intent may be registered */
	bool		subscribed;
} wait;

static MemoryContext wait_cxt = NULL;

static void
wait_begin(RwNode *node, const RwKeys *keys, char held_mode, bool intent)
{
	if (wait_cxt == NULL)
		wait_cxt = AllocSetContextCreate(TopMemoryContext, "rwlock wait",
										 ALLOCSET_SMALL_SIZES);
	MemoryContextReset(wait_cxt);
	wait.keys = MemoryContextAlloc(wait_cxt, sizeof(RwKeys));
	for (int i = 0; i < 3; i++)
	{
		wait.keys->key[i] = MemoryContextStrdup(wait_cxt, keys->key[i]);
		wait.keys->len[i] = keys->len[i];
	}
	wait.keys->channel = MemoryContextStrdup(wait_cxt, keys->channel);
	wait.keys->channel_len = keys->channel_len;
	wait.node = node;
	wait.held_mode = held_mode;
	wait.intent = intent;
	wait.in_flight = false;
	wait.subscribed = false;
	wait.active = true;
}

/* Stop listening; the confirmation is read (and dropped) by a later wait. */
static void
unsubscribe(void)
{
	RwConn	   *sub = &wait.node->sub;
	RwRequest	req = {sub};
	RwError		err;
	const char *argv[2] = {"UNSUBSCRIBE", wait.keys->channel};
	size_t		lens[2] = {11, wait.keys->channel_len};

	wait.subscribed = false;
	if (sub->ctx == NULL)
		return;
	rw_append(&req, 2, argv, lens);
	rw_conn_flush(sub, &err);
	pfree(req.replies);
}

/*
 * End the wait. With withdraw, take back the writer's intent (never throws:
 * it also runs from abort callbacks). A failure leaves the intent to its
 * short lease, or a possibly granted lock to the session's deferred releases.
 */
static void
wait_end(bool withdraw)
{
	RwError		err;

	if (!wait.active)
		return;
	wait.active = false;
	if (wait.subscribed)
		unsubscribe();
	if (wait.in_flight && wait.node->cmd.ctx == NULL)
	{
		/*
		 * The connection failed with the acquire script in flight: it may
		 * have run. Release what it may have given, once Redis is back.
		 */
		rw_defer_release(wait.node, wait.keys, wait.held_mode ? wait.held_mode : '\0');
	}
	else if (withdraw && wait.intent && wait.node->cmd.ctx != NULL)
	{
		if (rw_proto_release(&wait.node->cmd, wait.keys, 'q', 0, RW_NOTHROW, &err) < 0)
			elog(LOG, "rwlock: could not withdraw a writer's intent: %s", err.msg);
	}
}

/* For the abort callbacks: an error ended the wait. */
void
rw_abandon_wait(void)
{
	wait_end(true);
}

/*
 * Is this push a message on our channel? A release publishes only when it
 * lets waiters proceed, and only on the channel of those it lets through: the
 * lock's own channel for waiting readers, a waiting writer's own channel
 * (rw_wait_acquire) for the writer whose turn it is.
 */
static bool
is_wakeup(redisReply *r)
{
	return r->type == REDIS_REPLY_ARRAY && r->elements == 3 &&
		r->element[0]->type == REDIS_REPLY_STRING &&
		strcmp(r->element[0]->str, "message") == 0 &&
		r->element[1]->type == REDIS_REPLY_STRING &&
		r->element[1]->len == wait.keys->channel_len &&
		memcmp(r->element[1]->str, wait.keys->channel, wait.keys->channel_len) == 0;
}

static bool
is_confirmation(redisReply *r)
{
	return r->type == REDIS_REPLY_ARRAY && r->elements == 3 &&
		r->element[0]->type == REDIS_REPLY_STRING &&
		strcmp(r->element[0]->str, "subscribe") == 0 &&
		r->element[1]->type == REDIS_REPLY_STRING &&
		r->element[1]->len == wait.keys->channel_len &&
		memcmp(r->element[1]->str, wait.keys->channel, wait.keys->channel_len) == 0;
}

/*
 * Read pushes until one matches `match` or timeout_ms passes. Stale pushes
 * (other channels, old confirmations) are dropped. Returns false on timeout
 * or if the subscriber connection failed (then it is closed).
 */
static bool
await_push(bool (*match) (redisReply *), long timeout_ms)
{
	RwConn	   *sub = &wait.node->sub;
	TimestampTz deadline = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), timeout_ms);
	RwError		err;

	for (;;)
	{
		redisReply *r;
		TimestampTz now;

		while (sub->ctx != NULL && rw_conn_read_pending(sub, &r, &err) && r != NULL)
		{
			bool		hit = match(r);

			freeReplyObject(r);
			if (hit)
				return true;
		}
		if (sub->ctx == NULL)
			return false;
		now = GetCurrentTimestamp();
		if (now >= deadline ||
			!rw_conn_wait_readable(sub, TimestampDifferenceMilliseconds(now, deadline)))
			return false;
	}
}

/* Listen on the lock's channel; true once Redis confirmed it. */
static bool
subscribe(void)
{
	RwConn	   *sub = &wait.node->sub;
	RwRequest	req = {sub};
	RwError		err;
	const char *argv[2] = {"SUBSCRIBE", wait.keys->channel};
	size_t		lens[2] = {9, wait.keys->channel_len};

	if (!rw_conn_ensure(sub, RW_INTERRUPTIBLE, &err))
		rw_raise(sub, &err);
	rw_append(&req, 2, argv, lens);
	pfree(req.replies);
	if (rw_conn_flush(sub, &err) &&
		await_push(is_confirmation, rw_command_timeout_ms))
	{
		wait.subscribed = true;
		return true;
	}
	rw_conn_close(sub);
	return false;
}

/* Sleep until woken on the channel or timeout_ms passes. */
static void
sleep_until_woken(long timeout_ms)
{
	if (wait.subscribed)
	{
		if (!await_push(is_wakeup, timeout_ms) && wait.node->sub.ctx == NULL)
			wait.subscribed = false;
		return;
	}
	/* No subscription (it failed): poll, briefly, through the latch. */
	(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
					 Min(timeout_ms, 50), PG_WAIT_EXTENSION);
	ResetLatch(MyLatch);
	CHECK_FOR_INTERRUPTS();
}

static void
report_upgrade_conflict(const char *name, const char *other)
{
	ereport(ERROR,
			(errcode(ERRCODE_T_R_DEADLOCK_DETECTED),
			 errmsg("deadlock detected"),
			 errdetail("This session and %s both hold the read lock on Redis lock \"%s\" and wait for its write lock.",
					   other, name),
			 errhint("Retry the transaction. Taking the write lock before reading avoids this.")));
}

static void
report_lock_timeout(const char *name, char mode)
{
	ereport(ERROR,
			(errcode(ERRCODE_LOCK_NOT_AVAILABLE),
			 errmsg("canceling statement due to lock timeout"),
			 errdetail("Waited %d ms for the %s lock on Redis lock \"%s\".",
					   LockTimeout, mode == 'w' ? "write" : "read", name)));
}

/*
 * Take the lock in `mode`, waiting up to timeout_ms (-1: forever, 0: not at
 * all). held_mode is what the session already holds in Redis ('r' when this
 * is an upgrade). On success sets *token and returns true. When the time runs
 * out, returns false, or raises 55P03 if timeout_is_error.
 */
bool
rw_wait_acquire(RwNode *node, const RwKeys *keys, const char *name,
				char mode, char held_mode, long timeout_ms,
				bool timeout_is_error, int64 *token)
{
	TimestampTz deadline = timeout_ms < 0 ? DT_NOEND :
		TimestampTzPlusMilliseconds(GetCurrentTimestamp(), timeout_ms);
	int			intent = timeout_ms != 0 ? RW_INTENT_MS : 0;

	wait_begin(node, keys, held_mode, intent > 0 && mode == 'w');
	if (mode == 'w')
	{
		/* A waiting writer listens on its own channel, <channel>:<owner id>. */
		wait.keys->channel = MemoryContextAlloc(wait_cxt, keys->channel_len + RW_OWNER_MAX + 2);
		snprintf(wait.keys->channel, keys->channel_len + RW_OWNER_MAX + 2, "%s:%s",
				 keys->channel, rw_owner_id());
		wait.keys->channel_len = strlen(wait.keys->channel);
	}
	for (;;)
	{
		RwAcquireStatus status;
		int64		result;
		char	   *other = NULL;
		long		left;

		wait.in_flight = true;
		status = rw_proto_acquire(&node->cmd, keys, mode, rw_lease_ms, intent,
								  &result, &other);
		wait.in_flight = false;

		if (status == RW_GRANTED)
		{
			wait_end(false);
			*token = result;
			return true;
		}
		if (status == RW_UPGRADE_CONFLICT)
		{
			/* A try cannot have it while the other waits: no, not an error. */
			wait_end(true);
			if (!timeout_is_error)
				return false;
			report_upgrade_conflict(name, other);
		}

		left = deadline == DT_NOEND ? -1 :
			(GetCurrentTimestamp() >= deadline ? 0 :
			 TimestampDifferenceMilliseconds(GetCurrentTimestamp(), deadline));
		if (left == 0)
		{
			wait_end(true);
			if (timeout_is_error)
				report_lock_timeout(name, mode);
			return false;
		}
		if (!wait.subscribed)
		{
			/* Try again once listening, before any sleep. */
			if (subscribe())
				continue;
		}
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
		sleep_until_woken(left < 0 ? result : Min(result, left));
		CHECK_FOR_INTERRUPTS();
	}
}
