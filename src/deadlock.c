/*-------------------------------------------------------------------------
 *
 * deadlock.c
 *	  A lock wait made visible, and deadlocks ended: the lock-wait logs of
 *	  log_lock_waits, the waiter's row (waiters.c) and its wait key in
 *	  Redis, and the checks after deadlock_timeout, as PostgreSQL's
 *	  deadlock checker runs its own: when to walk the wait-for graph
 *	  (walk.c) and walk again, and the victim's 40P01.
 *
 * waiting.c calls rw_deadlock_tick each time an acquisition's try finds the
 * lock busy (the first such answer starts the wait) and rw_deadlock_wait_end
 * when the wait ends, granted or not. Between tries nothing is in flight, so
 * what is done here (Redis calls, logs, errors) never stands between a
 * Redis answer and the session's record of it.
 *
 * The wait-for graph (docs/protocol.md section 18). Once a wait has lasted
 * deadlock_timeout the waiter says in Redis what it waits for: the key
 * <prefix>:wait:{<owner>} holds "3 <mode> <nonce> <lock key>" (3 is the
 * protocol version, RW_PROTOCOL_VERSION), with a time to live of a few
 * deadlock_timeouts, written again by checkin.lua once per deadlock_timeout
 * while the wait lasts (a script: EVAL is all it takes beyond the key
 * commands every script runs, on any Redis the scripts run on); its answer,
 * the old value, says whether another waiter marked it as the victim of a
 * deadlock meanwhile (mark.lua). Then it walks: waits.lua on the lock it
 * waits for names its blockers (holders, and writers queued ahead); the
 * wait key of each says what that one waits for, and waits.lua there
 * checks that it really does (its intent or mark is live: a key left by a
 * wait that ended or a lapsed lease is no edge; a session of this server
 * must also wait there by its row in shared memory); and so on, hop by
 * hop, each lock asked on the node that serves it, every owner once. A
 * path back to the waiter is a cycle. It is walked once more, edge by
 * edge; if every edge still holds, and every other member that shared
 * memory does not show waiting has shown a fresh sign of life (renewed its
 * intent or mark since the cycle was found, walk.c: a wait cut off in a
 * stall leaves them looking live, and renews nothing; the check is
 * repeated within DL_CONFIRM_MS meanwhile), the victim is the member with
 * the greatest owner id, the same whoever found the cycle: the finder fails
 * itself with 40P01 if it is the victim, else marks the victim's key. A
 * marked victim walks again itself before it fails (the cycle may have
 * broken meanwhile).
 *
 * A cycle closes when its last member starts to wait, and that one's walk
 * finds it, if the walk completes. A check that could not complete (a call
 * that failed, went unanswered or was refused with a redirection; a
 * quorum's members too few to decide; a key and a lock that disagree; the
 * hop limit; the walk's time) is never taken for "no cycle": it is done
 * again after DL_RETRY_MIN_MS, doubled up to deadlock_timeout (dl_check).
 * A permission Redis refuses is 42501, never a detection silently off. A
 * walk that met an owner that does not walk itself (a client of another
 * language, whose owner id does not start with "pg:") is repeated, each
 * that met nothing new after twice the pause, up to DL_FOREIGN_MAX
 * deadlock_timeouts. A check never outlasts half of the writer's intent
 * (RW_INTENT_MS) renewed by the try before it, so detection never costs
 * the waiter its place; the session's leases are renewed between hops.
 *
 * So a wait with no deadlock costs one Redis call per deadlock_timeout (the
 * check-in), plus one walk. In quorum mode each call goes to every member
 * that may be asked, and a wait key's value or an edge counts when a
 * majority of the members give it: a holder holds on a majority, while two
 * waiters that split the members are no edge.
 *
 *-------------------------------------------------------------------------
 */
#include "rwlock.h"

#include "access/xlog.h"
#include "miscadmin.h"
#include "common/pg_prng.h"
#include "lib/stringinfo.h"
#include "storage/proc.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#define DL_RETRY_MIN_MS	50		/* the first pause before an incomplete
								 * check is repeated; doubled up to
								 * deadlock_timeout */
#define DL_CONFIRM_MS	100		/* the longest pause while a cycle found
								 * awaits its members' signs of life: a
								 * live one shows it within RW_INTENT_MS /
								 * 2, at once when woken */
#define DL_FOREIGN_MAX	64		/* a walk that met foreign owners and
								 * found nothing new is repeated after
								 * up to this many deadlock_timeouts */

/* ---- the wait of this session ---- */

static struct
{
	bool		active;
	RwNode	   *node;
	RwMode		mode;
	RwLevel		level;
	int64		start_ms;
	TimestampTz start_ts;		/* for the logs' microseconds */
	bool		checked;		/* deadlock_timeout passed: logged, walked */
	bool		keyed;			/* our wait key was written */
	bool		key_sent;		/* a check-in was sent: it may have been */
	int64		next_ms;		/* next check */
	int64		checkin_ms;		/* next check-in due */
	int64		check_until;	/* the check in progress ends by then */
	bool		checkin_gap;	/* the last check-in was not confirmed */
	bool		walk_gap;		/* the last walk was incomplete */
	bool		marked;			/* another waiter marked us the victim */
	bool		lapsed;			/* our key or intent may have lapsed */
	int64		retry_ms;		/* pause before an incomplete check again */
	bool		foreign;		/* the last walk met foreign owners */
	uint32		seen;			/* ... and what it met */
	int64		foreign_ms;		/* when to walk again for them */
	int64		foreign_gap;	/* ... the pause, doubled while nothing new */
	char	   *name;
	char	   *lock_key;
	char	   *wait_key;
	char	   *value;			/* our wait key's value */
	char	   *victim_detail;	/* set when this session is the victim */
} dl;

static MemoryContext dl_cxt = NULL;
static RwLevel dl_next_level = RW_SESSION;

/* ---------------------------------------------------------------------
 * Owners and keys
 * --------------------------------------------------------------------- */

/*
 * The pid of a live session of this server with that owner id, or 0: the
 * id must be the one that session registered (protocol.c), not one that
 * only looks like it.
 */
int
rw_owner_local_pid(const char *owner)
{
	return rw_owner_live_pid(owner);
}

/* "process P" for a session of this server, else the owner id. */
static void
dl_append_owner(StringInfo buf, const char *owner, bool capital)
{
	int			pid = rw_owner_local_pid(owner);

	if (pid > 0)
		appendStringInfo(buf, "%s %d", capital ? "Process" : "process", pid);
	else
		appendStringInfoString(buf, owner);
}

/* The lock's name from its hash key <prefix>:{<encoded name>}. */
static char *
dl_name_of_key(const char *key)
{
	const char *open = strstr(key, ":{");
	StringInfoData buf;
	size_t		len;

	if (open == NULL)
		return pstrdup(key);
	open += 2;
	len = strlen(open);
	if (len > 0 && open[len - 1] == '}')
		len--;
	initStringInfo(&buf);
	for (size_t i = 0; i < len; i++)
	{
		if (open[i] == '%' && strncmp(open + i, "%25", 3) == 0)
			appendStringInfoChar(&buf, '%'), i += 2;
		else if (open[i] == '%' && strncmp(open + i, "%7B", 3) == 0)
			appendStringInfoChar(&buf, '{'), i += 2;
		else if (open[i] == '%' && strncmp(open + i, "%7D", 3) == 0)
			appendStringInfoChar(&buf, '}'), i += 2;
		else
			appendStringInfoChar(&buf, open[i]);
	}
	return buf.data;
}

/* ---------------------------------------------------------------------
 * Our wait key
 * --------------------------------------------------------------------- */

/*
 * Write our wait key (checkin.lua), on every member of a quorum. Sets
 * dl.marked (with the cycle in dl.victim_detail) when an old value was a
 * mark of our wait, dl.lapsed when our key was gone (it expired while this
 * session did not run: others may have walked past us meanwhile). False
 * when too few members confirmed it: the check is incomplete.
 */
static bool
dl_check_in(void)
{
	char		px[24];
	const char *k[1] = {dl.wait_key};
	size_t		klen[1] = {strlen(dl.wait_key)};
	const char *args[3] = {RW_PROTOCOL_VERSION, dl.value, px};
	RwFan		f;
	size_t		vlen = strlen(dl.value);
	int			confirmed = 0;
	bool		had_key = dl.keyed;

	/*
	 * It outlives the checks that write it again, every deadlock_timeout; in
	 * int64: three times a deadlock_timeout above INT_MAX / 3 ms (8.3 days)
	 * overflows int, and would have the key expire long before the next one.
	 */
	snprintf(px, sizeof(px), INT64_FORMAT,
			 Max((int64) 3 * DeadlockTimeout, (int64) 2 * RW_INTENT_MS));
	dl.key_sent = true;
	rw_fan_script(&f, dl.node, RW_SCRIPT_CHECKIN, 1, k, klen, 3, args);
	for (int i = 0; i < f.n; i++)
	{
		redisReply *r = f.r[i];

		if (r == NULL)
			continue;
		confirmed++;
		dl.keyed = true;
		if (r->type == REDIS_REPLY_NIL && had_key)
			dl.lapsed = true;
		if (!dl.marked && r->type == REDIS_REPLY_STRING && r->len > vlen + 1 &&
			r->str[0] == '!' && memcmp(r->str + 1, dl.value, vlen) == 0 &&
			r->str[vlen + 1] == '\n')
		{
			dl.victim_detail = MemoryContextStrdup(dl_cxt, r->str + vlen + 2);
			dl.marked = true;
		}
	}
	rw_fan_free(&f);
	return confirmed >= f.need;
}

/*
 * Take our wait key away, without waiting for the answers. False when the
 * DEL could not be written out to every connection that serves the key (a
 * connection closed by a cut-off call: the key, or a check-in still on its
 * way, may be left behind). Never throws.
 */
static bool
dl_drop_key(void)
{
	RwConn	   *conns[RW_QUORUM_MAX];
	int			member[RW_QUORUM_MAX];
	int			n;
	const char *argv[2] = {"DEL", dl.wait_key};
	size_t		lens[2] = {3, strlen(dl.wait_key)};
	RwError		err;
	bool		out = true;

	if (!dl.keyed && !dl.key_sent)
		return true;
	dl.keyed = dl.key_sent = false;
	n = rw_fan_conns(dl.node, dl.wait_key, conns, member);
	if (n < rw_quorum_size(dl.node))
		out = false;			/* a member not asked now */
	for (int k = 0; k < n; k++)
	{
		if (conns[k]->ctx == NULL)
		{
			out = false;
			continue;
		}
		rw_append(conns[k], 2, argv, lens, RW_TAG_DISCARD);
		if (!rw_flush(conns[k], rw_now_ms() + rw_command_timeout_ms, &err) ||
			!rw_conn_sent_all(conns[k]))
			out = false;
	}
	return out;
}

/*
 * The keeper, for a session whose wait was cut off (rw_waiters_leftovers):
 * DEL its wait key where it is served, and wait for the answers. True when
 * Redis (a majority of a quorum's members) ran it. Never throws.
 */
bool
rw_deadlock_drop_key_as(RwNode *node, const char *wait_key, RwError *err)
{
	RwConn	   *conns[RW_QUORUM_MAX];
	int			member[RW_QUORUM_MAX];
	int			n = rw_fan_conns(node, wait_key, conns, member);
	int			done = 0;
	const char *argv[2] = {"DEL", wait_key};
	size_t		lens[2] = {3, strlen(wait_key)};

	for (int k = 0; k < n; k++)
	{
		redisReply *r = NULL;

		if (!rw_conn_ensure(conns[k], err))
			continue;
		rw_append(conns[k], 2, argv, lens, NULL);
		if (!rw_exchange(conns[k], 1, &r, err))
			continue;
		if (r->type != REDIS_REPLY_ERROR)
			done++;
		else
		{
			rw_error_set(err, RW_ERR_REPLY, "%s", r->str);
			if (member[k] < 0)
				(void) rw_cluster_redirected(node, err, rw_now_ms());
		}
		freeReplyObject(r);
	}
	return done >= (rw_quorum_size(node) > 0 ? rw_quorum_majority(node) : 1);
}

/* ---------------------------------------------------------------------
 * Messages
 * --------------------------------------------------------------------- */

/* The DETAIL of 40P01, as the server words its own, from an encoded cycle. */
static char *
dl_describe_cycle(const char *encoded)
{
	StringInfoData buf;
	char	   *copy = pstrdup(encoded);
	char	   *line = copy;

	initStringInfo(&buf);
	while (line != NULL && *line != '\0')
	{
		char	   *end = strchr(line, '\n');
		char	   *owner,
				   *mode,
				   *blocker,
				   *key;

		if (end)
			*end = '\0';
		owner = line;
		mode = strchr(owner, ' ');
		blocker = mode ? strchr(mode + 1, ' ') : NULL;
		key = blocker ? strchr(blocker + 1, ' ') : NULL;
		if (key == NULL)
			break;
		*mode++ = '\0';
		*blocker++ = '\0';
		*key++ = '\0';
		if (buf.len > 0)
			appendStringInfoChar(&buf, '\n');
		dl_append_owner(&buf, owner, true);
		appendStringInfo(&buf, " waits for %s lock \"%s\"; blocked by ",
						 mode[0] == 'w' ? "write" : "read", dl_name_of_key(key));
		dl_append_owner(&buf, blocker, false);
		appendStringInfoChar(&buf, '.');
		line = end ? end + 1 : NULL;
	}
	return buf.data;
}

/* Holders and queued writers ahead, as the still-waiting log lists them. */
static char *
dl_describe_blockers(char **owners, int n)
{
	StringInfoData buf;

	initStringInfo(&buf);
	for (int i = 0; i < n; i++)
	{
		if (i > 0)
			appendStringInfoString(&buf, ", ");
		dl_append_owner(&buf, owners[i], false);
	}
	return buf.data;
}

static void
dl_log(const char *what, char **owners, int n)
{
	double		ms = (double) (GetCurrentTimestamp() - dl.start_ts) / 1000.0;

	if (owners != NULL)
		ereport(LOG,
				(errmsg("process %d %s Redis %s lock \"%s\" after %.3f ms",
						MyProcPid, what, dl.mode == RW_WRITE ? "write" : "read",
						dl.name, ms),
				 n > 0 ? errdetail_log("Blocked by: %s.",
									   dl_describe_blockers(owners, n)) : 0));
	else
		ereport(LOG,
				(errmsg("process %d %s Redis %s lock \"%s\" after %.3f ms",
						MyProcPid, what, dl.mode == RW_WRITE ? "write" : "read",
						dl.name, ms)));
}

/* ---------------------------------------------------------------------
 * The wait, from waiting.c
 * --------------------------------------------------------------------- */

/* held.c says the level of the acquisition that may wait next. */
void
rw_deadlock_set_level(RwLevel level)
{
	dl_next_level = level;
}

static void
dl_begin(RwNode *node, const RwKeys *keys, const char *name, RwMode mode)
{
	uint32		nonce = (uint32) pg_prng_uint64(&pg_global_prng_state);

	if (dl_cxt == NULL)
		dl_cxt = AllocSetContextCreate(TopMemoryContext, "rwlock deadlock",
									   ALLOCSET_SMALL_SIZES);
	MemoryContextReset(dl_cxt);
	dl.node = node;
	dl.mode = mode;
	dl.level = dl_next_level;
	dl.start_ms = rw_now_ms();
	dl.start_ts = GetCurrentTimestamp();
	dl.checked = dl.keyed = dl.key_sent = false;
	dl.checkin_gap = dl.walk_gap = dl.marked = dl.lapsed = dl.foreign = false;
	dl.retry_ms = 0;
	dl.seen = 0;
	dl.foreign_gap = 0;
	dl.victim_detail = NULL;
	dl.next_ms = dl.checkin_ms = dl.start_ms + DeadlockTimeout;
	dl.name = MemoryContextStrdup(dl_cxt, name);
	dl.lock_key = MemoryContextStrdup(dl_cxt, keys->key[0]);
	{
		MemoryContext old = MemoryContextSwitchTo(dl_cxt);

		dl.wait_key = rw_wait_key_of(rw_owner_id());
		dl.value = psprintf("%s %c %08x %s", RW_PROTOCOL_VERSION,
							mode == RW_WRITE ? 'w' : 'r', nonce, keys->key[0]);
		MemoryContextSwitchTo(old);
	}
	dl.active = true;
	rw_stat_add(RW_STAT_WAITS, 1);
	rw_waiters_publish(dl.mode, dl.level, dl.start_ts, dl.lock_key, dl.name);
}

/*
 * One check: our wait key written (when due, or not confirmed last time),
 * and a walk when one is owed: the first check's; one that was incomplete;
 * one asked for by a mark (a victim re-checks its cycle before it fails);
 * one after our key lapsed or this session did not run for a while (others
 * may have walked past us meanwhile); and, with foreign owners met, one
 * now and then (each that finds nothing new doubles the pause, up to
 * DL_FOREIGN_MAX deadlock_timeouts). Whatever is incomplete is done again
 * after a pause (DL_RETRY_MIN_MS, doubled up to deadlock_timeout). True
 * when this session is a cycle's victim.
 */
static bool
dl_check(int64 now)
{
	bool		gap = false;
	bool		victim = false;
	int64		cap;

	if (dl.checked && now - dl.next_ms > RW_INTENT_MS / 2)
		dl.lapsed = true;

	/*
	 * The try just before renewed our intent or mark: neither this check's
	 * calls nor its walk may outlast half of it (the walk stops there, with
	 * a gap). A node that failed before is tried again: a new call.
	 */
	dl.check_until = now + RW_INTENT_MS / 2;
	cap = rw_conn_tighten(dl.check_until);
	rw_call_again();
	if (now >= dl.checkin_ms || dl.checkin_gap)
	{
		dl.checkin_gap = !dl_check_in();
		if (!dl.checkin_gap)
			dl.checkin_ms = now + DeadlockTimeout;
		gap |= dl.checkin_gap;
	}
	if (!dl.checked || dl.walk_gap || dl.marked || dl.lapsed ||
		(dl.foreign && now >= dl.foreign_ms))
	{
		RwWalkFrom	from = {dl.node, dl.value, dl.mode == RW_WRITE ? 'w' : 'r',
		dl.lock_key, dl.check_until};
		uint32		seen;
		bool		foreign;
		char	   *cycle = NULL;
		char	  **first = NULL;
		int			nfirst = 0;
		RwWalkResult r = rw_walk(&from, &seen, &foreign, &cycle, &first, &nfirst);

		if (log_lock_waits && !dl.checked)
			dl_log("still waiting for", first, nfirst);
		dl.walk_gap = r == RW_WALK_INCOMPLETE;
		gap |= dl.walk_gap;
		if (r == RW_WALK_VICTIM)
		{
			dl.victim_detail = MemoryContextStrdup(dl_cxt, cycle);
			victim = true;
		}
		else if (!dl.walk_gap)
		{
			dl.marked = dl.lapsed = false;
			if (foreign && dl.foreign && seen == dl.seen)
				dl.foreign_gap = Min(dl.foreign_gap * 2,
									 (int64) DL_FOREIGN_MAX * DeadlockTimeout);
			else
				dl.foreign_gap = DeadlockTimeout;
			dl.foreign = foreign;
			dl.seen = seen;
			dl.foreign_ms = rw_now_ms() + dl.foreign_gap;
		}
	}
	else if (!dl.checked && log_lock_waits)
		dl_log("still waiting for", NULL, 0);
	dl.checked = true;
	rw_conn_restore(cap);

	now = rw_now_ms();
	dl.next_ms = dl.checkin_ms;
	if (dl.foreign)
		dl.next_ms = Min(dl.next_ms, dl.foreign_ms);
	if (gap)
	{
		dl.retry_ms = dl.retry_ms == 0 ? DL_RETRY_MIN_MS : dl.retry_ms * 2;
		dl.retry_ms = Min(dl.retry_ms, DeadlockTimeout);
		/* A cycle found awaits its members' signs of life (walk.c): soon. */
		if (dl.walk_gap && rw_walk_confirming())
			dl.retry_ms = Min(dl.retry_ms, DL_CONFIRM_MS);
		dl.next_ms = Min(dl.next_ms, now + dl.retry_ms);
	}
	else
		dl.retry_ms = 0;
	return victim;
}

/*
 * The lock was busy at a try: start the wait (the first time), and after
 * deadlock_timeout log it (log_lock_waits), say in Redis what we wait for,
 * and walk (dl_check). *sleep_ms is lowered to wake for the next check.
 * True when this session is the victim of a deadlock: the caller ends the
 * wait (withdrawing its intent or mark) and calls rw_deadlock_report.
 */
bool
rw_deadlock_tick(RwNode *node, const RwKeys *keys, const char *name,
				 RwMode mode, int64 *sleep_ms)
{
	bool		victim = false;

	if (!dl.active)
		dl_begin(node, keys, name, mode);
	if (DeadlockTimeout > 0 && rw_now_ms() >= dl.next_ms)
	{
		/* What a check allocates goes with it: a wait may last for hours. */
		MemoryContext check_cxt = AllocSetContextCreate(dl_cxt, "rwlock deadlock check",
														ALLOCSET_SMALL_SIZES);
		MemoryContext old = MemoryContextSwitchTo(check_cxt);

		victim = dl_check(rw_now_ms());
		MemoryContextSwitchTo(old);
		MemoryContextDelete(check_cxt);
	}
	if (victim)
		return true;
	if (DeadlockTimeout > 0)
		*sleep_ms = Min(*sleep_ms, Max(dl.next_ms - rw_now_ms(), 1));
	return false;
}

/*
 * The wait ended (also from abort callbacks: never throws then, as nothing
 * is logged unless granted, which happens only in the normal flow). Returns
 * our wait key if its DEL could not be written out (it may be left behind:
 * waiting.c leaves it to the keeper), else NULL.
 */
const char *
rw_deadlock_wait_end(bool granted)
{
	int64		waited;
	bool		dropped;

	if (!dl.active)
		return NULL;
	dl.active = false;
	waited = rw_now_ms() - dl.start_ms;
	rw_stat_add(RW_STAT_WAIT_MS, (uint64) Max(waited, 0));
	rw_stat_max(RW_STAT_WAIT_MAX_MS, (uint64) Max(waited, 0));
	rw_waiters_unpublish();
	dropped = dl_drop_key();
	if (granted && dl.checked && log_lock_waits)
		dl_log("acquired", NULL, 0);
	return dropped ? NULL : dl.wait_key;
}

/* Fail this session, the victim of a deadlock: 40P01 naming the cycle. */
void
rw_deadlock_report(void)
{
	char	   *detail = dl_describe_cycle(dl.victim_detail ? dl.victim_detail : "");

	rw_stat_add(RW_STAT_DEADLOCKS, 1);
	if (log_lock_waits)
		ereport(LOG,
				(errmsg("process %d detected deadlock while waiting for Redis %s lock \"%s\" after %.3f ms",
						MyProcPid, dl.mode == RW_WRITE ? "write" : "read", dl.name,
						(double) (GetCurrentTimestamp() - dl.start_ts) / 1000.0)));
	ereport(ERROR,
			(errcode(ERRCODE_T_R_DEADLOCK_DETECTED),
			 errmsg("deadlock detected"),
			 errdetail_internal("%s", detail),
			 errhint("See server log for query details.")));
}

/*
 * The owners that the session with this pid waits for (redis_blocking_pids):
 * false if it does not wait for a Redis lock. Asks Redis through this
 * session's own rwlock.redis_url.
 */
bool
rw_deadlock_blockers(int pid, char ***owners, int *nowners)
{
	char	   *key;
	char	   *owner;
	char		mode;

	*owners = NULL;
	*nowners = 0;
	if (!rw_waiters_find(pid, &key, &owner, &mode))
		return false;
	return rw_walk_blockers(rw_current_node(), key, owner, mode, owners,
							nowners);
}
