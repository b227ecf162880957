/*-------------------------------------------------------------------------
 *
 * held.c
 *	  Taking and letting go of holds: stacking, the transaction,
 *	  subtransaction and exit callbacks, DISCARD ALL.
 *
 * A lock operation goes to Redis only when what Redis has for the session
 * (holds.c) must change. Around each exchange the order is fixed, so that a
 * fault at any point leaves the session's records and Redis in agreement:
 *	- before a name is acquired, every release owed for it completes
 *	  (release.c); if one cannot, the acquisition fails and grants nothing;
 *	- everything the record of a grant needs is allocated before the
 *	  request goes out, and nothing that can throw (no ereport, not even a
 *	  WARNING) stands between Redis's answer and its record: warnings are
 *	  noted and emitted at the end of the operation (rw_notes_flush);
 *	- an exchange cut off by an interrupt or a fault owes what it may have
 *	  done (waiting.c, release.c) before the error is raised.
 *
 * At transaction end, and at exit, releases are sent without waiting for
 * Redis's answer (release.c): the commit is durable already and the release
 * is on its way before the client hears of the commit; COMMIT and exit never
 * wait on a stalled Redis beyond one rwlock.command_timeout (exit: half a
 * second), and never throw. A cancel cuts COMMIT's sending short at once
 * (SPEC 13), whatever the number of holds: the rest goes at the session's
 * next call or at exit (held_cancelled_at_xact_end).
 *
 *-------------------------------------------------------------------------
 */
#include "rwlock.h"

#include "access/xact.h"
#include "miscadmin.h"
#include "nodes/parsenodes.h"
#include "storage/ipc.h"
#include "storage/proc.h"
#include "tcop/utility.h"
#include "utils/memutils.h"

/* An xact-level hold, with the subtransaction level that took it. */
typedef struct RwXactHold
{
	RwHeld	   *held;
	RwMode		mode;
	int			level;
} RwXactHold;

static RwXactHold *xact_holds = NULL;
static int	n_xact = 0;
static int	cap_xact = 0;
static bool held_initialized = false;
static ProcessUtility_hook_type prev_process_utility = NULL;

/*
 * While rw_lock_many runs, the holds its rw_lock calls pushed (held_push
 * counts them), so that a failure part-way undoes exactly those; -1 outside.
 */
static int	held_many_pushed = -1;

/*
 * At the start of every SQL call: send the releases a cancelled commit left
 * queued, read answers that arrived, warn.
 */
void
rw_operation_begin(void)
{
	rw_call_begin();
	rw_release_flush();
	rw_release_read_answers();
	rw_notes_flush();
}

/* At its end: read answers once more (see below), and warn. */
void
rw_operation_end(void)
{
	/*
	 * A release sent at transaction end before a command this operation sent
	 * on the same connection has its answer read by now, so a lost hold is
	 * reported by the operation after the commit.
	 */
	rw_release_read_answers();
	rw_notes_flush();
}

/*
 * Room for one more hold of h at `level`, made before Redis is asked and
 * on every lock call, whether or not it goes to Redis: held_push, after a
 * grant, must not allocate.
 */
static void
held_reserve_xact(int k)
{
	while (n_xact + k > cap_xact)
	{
		int			cap = Max(16, cap_xact * 2);

		/* the capacity grows only once the allocation has succeeded */
		xact_holds = xact_holds ?
			repalloc(xact_holds, cap * sizeof(RwXactHold)) :
			MemoryContextAlloc(TopMemoryContext, cap * sizeof(RwXactHold));
		cap_xact = cap;
	}
}

static void
held_reserve(RwHeld *h, RwLevel level)
{
	if (level == RW_SESSION)
		rw_holds_reserve(h);
	else
		held_reserve_xact(1);
}

/*
 * Count one more hold in the room held_reserve made. The check stays in
 * production builds: a hold pushed past its room would overwrite memory.
 */
static void
held_push(RwHeld *h, RwMode mode, RwLevel level)
{
	if (level == RW_SESSION ? h->stack_len >= h->stack_cap : n_xact >= cap_xact)
		elog(ERROR, "no room was reserved for a hold of Redis lock \"%s\"",
			 h->name);
	h->count[level][mode]++;
	if (held_many_pushed >= 0)
		held_many_pushed++;
	if (level == RW_SESSION)
		h->stack[h->stack_len++] = mode;
	else
	{
		xact_holds[n_xact].held = h;
		xact_holds[n_xact].mode = mode;
		xact_holds[n_xact].level = GetCurrentTransactionNestLevel();
		n_xact++;
	}
}

/* The counter of a granted lock call. */
static RwStat
held_stat_of(RwMode mode, RwLevel level)
{
	if (mode == RW_WRITE)
		return level == RW_SESSION ? RW_STAT_ACQ_WRITE_SESSION : RW_STAT_ACQ_WRITE_XACT;
	return level == RW_SESSION ? RW_STAT_ACQ_READ_SESSION : RW_STAT_ACQ_READ_XACT;
}

/*
 * Bring Redis in line with the holds left after some were let go. With
 * later, the release is only queued (sent by rw_release_flush, answered
 * later); else it is waited for. Returns false if the hold was lost or
 * could not be released (noted). Never throws, except to serve an
 * interrupt that cut the release short, after the records are right.
 */
static bool
held_release(RwHeld *h, bool later)
{
	RwMode		want = rw_wanted_mode(h);
	RwKeep		keep = want == RW_READ ? RW_KEEP_READ : RW_KEEP_NOTHING;
	RwNode	   *node = h->node;
	RwError		err = {RW_OK};
	bool		ok = true;

	rw_holds_refresh(h);
	if (h->lost)
	{
		/* Redis has nothing of ours to release. */
		rw_note_lost(h->name, NULL);
		ok = false;
	}
	else if (want < h->redis_mode)
	{
		if (want == RW_NONE)
			rw_holds_unpublish(h);
		if (later)
			rw_release_later(h->node, h->name, &h->keys, keep, h->lease_ms);
		else
		{
			int			held = rw_release_now(h->node, h->name, &h->keys, keep,
											  h->lease_ms, &err);

			if (held == 0)
			{
				rw_holds_mark_lost(h);
				rw_note_lost(h->name, NULL);
			}
			else if (held < 0 && err.kind != RW_ERR_INTERRUPTED)
				rw_note_release_failed(h->name, &err);
			ok = held == 1;
		}
		h->redis_mode = want;
	}
	if (want == RW_NONE)
		rw_holds_forget(h);
	else
		rw_holds_publish_modes(h);
	if (err.kind == RW_ERR_INTERRUPTED)
		rw_raise(&node->cmd, &err);	/* owed, so the node is still there */
	return ok;
}

/*
 * A grant the keeper's table had no slot for (rwlock.max_holds): nobody
 * would renew it after this call or show it in redis_locks, so it is given
 * back at once (the holds the session had of the name stay) and the call
 * fails. Only a hold that needs a new slot can meet a full table: one the
 * session already holds keeps its slot through stacking and mode changes.
 */
static void
held_refuse_unpublished(RwHeld *h)
{
	char		name[RW_NAME_MAX + 1];

	strlcpy(name, h->name, sizeof(name));	/* h may be forgotten below */
	rw_wait_done();
	(void) held_release(h, false);
	rw_notes_flush();
	ereport(ERROR,
			(errcode(ERRCODE_CONFIGURATION_LIMIT_EXCEEDED),
			 errmsg("the table of Redis lock holds is full"),
			 errdetail("Redis lock \"%s\" was granted and given back: every one of the rwlock.max_holds (%d) slots the keeper renews and redis_locks shows is taken.",
					   name, rw_holdtable_max_holds()),
			 errhint("Increase rwlock.max_holds, or release holds.")));
}

/*
 * Take a hold of `name`. Goes to Redis only if what Redis has for this
 * session does not cover `mode` (or the hold was lost). wait_ms: with
 * is_try, how long to wait before returning false; else ignored, and the
 * wait lasts as lock_timeout allows (55P03 when it runs out).
 */
bool
rw_lock(const char *name, RwMode mode, RwLevel level, long wait_ms,
		bool is_try, int64 *token)
{
	RwHeld	   *h;

	rw_operation_begin();
	rw_renew_due(false, NULL);
	h = rw_holds_find(name);
	if (h != NULL)
	{
		rw_holds_refresh(h);
		if (h->lost)
		{
			rw_note_lost(h->name, NULL);
			rw_notes_flush();
			h->redis_mode = RW_NONE;
		}
	}
	if (h == NULL || h->redis_mode < mode)
	{
		RwNode	   *node = h ? h->node : rw_current_node();
		RwMode		want;
		RwError		err;
		int64		tok;
		int64		started;
		int64		since;
		long		timeout = is_try ? wait_ms : (LockTimeout > 0 ? LockTimeout : -1);
		int64		cap;
		bool		published;

		h = rw_holds_enter(name, node);
		held_reserve(h, level);
		want = Max(mode, rw_wanted_mode(h));
		started = rw_now_ms();
		/* What goes ahead of the wait ends with it too (waiting.c). */
		cap = rw_conn_tighten(rw_wait_cap(timeout, started + timeout));
		while (!rw_release_settle_name(node, name, &err) &&
			   !rw_cluster_redirected(node, &err, started))
		{
			if (err.kind == RW_ERR_INTERRUPTED)
				rw_raise(&node->cmd, &err);
			/* The wait's end came: rw_wait_acquire reports it. */
			if (timeout > 0 && rw_now_ms() >= started + timeout)
				break;
			ereport(ERROR,
					(errcode(ERRCODE_CONNECTION_FAILURE),
					 errmsg("could not complete an earlier release of Redis lock \"%s\"", name),
					 errdetail("%s.", err.msg),
					 errhint("The lock is not taken while a release of it may still be on its way.")));
		}
		rw_release_send_owed(node);
		rw_conn_restore(cap);
		rw_deadlock_set_level(level);
		if (!rw_wait_acquire(node, &h->keys, name, want, h->redis_mode,
							 timeout, started, !is_try, &tok, &since, &h->lost))
		{
			rw_holds_sweep();
			rw_wait_done();
			rw_stat_add(RW_STAT_TRY_FAILED, 1);
			rw_operation_end();
			return false;
		}
		/* Granted: from here to the record, nothing may throw. */
		published = rw_holds_granted(h, want, tok, since);
		rw_renew_scheduled(h->renewed_ms, h->lease_ms);
		/* Recorded: releases of the name that bounced are moot now. */
		rw_release_granted(node, name);
		if (!published)
			held_refuse_unpublished(h);
	}
	else
		held_reserve(h, level);	/* stacked: no Redis call, room all the same */
	held_push(h, mode, level);
	rw_stat_add(held_stat_of(mode, level), 1);
	rw_holds_publish_modes(h);
	*token = h->token;
	rw_wait_done();
	rw_operation_end();
	return true;
}

/*
 * Undo the first `pushed` holds of names[] that rw_lock_many took, most
 * recent first: each is popped from its stack (or from the transaction's
 * holds, whose last entries they are) and Redis is brought in line with
 * what is left, the release queued (held_release(later)). Holds of these
 * names that the session had before the call stay, and so does what Redis
 * has for them: a name held before the call is only unstacked; one upgraded
 * by it is downgraded. Nothing here waits on Redis or throws (but out of
 * memory): it also runs on the way out of an error.
 */
static void
held_undo_many(const char *const *names, int pushed, RwMode mode,
			   RwLevel level)
{
	for (int i = pushed - 1; i >= 0; i--)
	{
		RwHeld	   *h = rw_holds_find(names[i]);

		if (h == NULL || h->count[level][mode] <= 0 ||
			(level == RW_SESSION ? h->stack_len == 0 ||
			 h->stack[h->stack_len - 1] != mode :
			 n_xact == 0 || xact_holds[n_xact - 1].held != h))
			elog(ERROR, "the hold of Redis lock \"%s\" to undo is not the last taken",
				 names[i]);
		h->count[level][mode]--;
		if (level == RW_SESSION)
			h->stack_len--;
		else
			n_xact--;
		(void) held_release(h, true);
	}
}

/*
 * The first round's tries (held_first_round): one round trip per
 * connection, that is per server (in a Cluster, per master serving some of
 * the names' slots, one after another; with rwlock.wait_replicas, one WAIT
 * after each pipeline). Every status starts as
 * RW_ACQ_FAILED (not granted: rw_lock takes the name again, and reports
 * what it meets, a redirection included). A connection that fails owes the
 * release of what its tries may have granted, which rw_lock settles before
 * it asks again. An interrupt stops the round: it is put in *ierr, to be
 * served once the grants already answered are recorded. Never throws.
 */
static void
held_round_trips(RwNode *node, const char *const *names, RwKeys **keys,
				 int n, RwMode mode, RwAcquireStatus *status, int64 *result,
				 RwError *ierr)
{
	RwConn	  **conns = palloc(sizeof(RwConn *) * n);
	bool	   *done = palloc0(sizeof(bool) * n);
	RwKeys	  **gkeys = palloc(sizeof(RwKeys *) * n);
	int		   *gix = palloc(sizeof(int) * n);
	RwAcquireStatus *gstatus = palloc(sizeof(RwAcquireStatus) * n);
	int64	   *gresult = palloc(sizeof(int64) * n);

	for (int i = 0; i < n; i++)
	{
		status[i] = RW_ACQ_FAILED;
		conns[i] = rw_cluster_cmd(node, keys[i]);
	}
	for (int i = 0; i < n && ierr->kind != RW_ERR_INTERRUPTED; i++)
	{
		RwError		err;
		int			acks;
		int			k = 0;

		if (done[i])
			continue;
		for (int j = i; j < n; j++)
			if (!done[j] && conns[j] == conns[i])
			{
				done[j] = true;
				gkeys[k] = keys[j];
				gix[k++] = j;
			}
		if (rw_proto_acquire_many(conns[i], gkeys, k, mode, rw_lease_ms,
								  gstatus, gresult, &acks, &err))
		{
			for (int g = 0; g < k; g++)
			{
				/*
				 * Too few replicas acknowledged the WAIT after them all: no
				 * grant of this pipeline may stand. Each is given back (owed:
				 * its release goes ahead of the name's next acquisition) and
				 * taken again by rw_lock, which reports what it meets.
				 */
				if (gstatus[g] == RW_GRANTED && rw_wait_replicas > 0 &&
					acks < rw_wait_replicas)
				{
					rw_release_owe(node, -1, names[gix[g]], keys[gix[g]],
								   RW_KEEP_NOTHING, rw_lease_ms);
					continue;
				}
				status[gix[g]] = gstatus[g];
				result[gix[g]] = gresult[g];
			}
			continue;
		}
		if (err.maybe_sent)
			for (int g = 0; g < k; g++)
				rw_release_owe(node, -1, names[gix[g]], keys[gix[g]],
							   RW_KEEP_NOTHING, rw_lease_ms);
		if (err.kind == RW_ERR_INTERRUPTED)
			*ierr = err;
	}
}

/*
 * held_round_trips for a quorum: each member is asked once the releases
 * owed there for every name are queued ahead of the tries (as
 * waiting.c's wait_try_quorum does for one name), then every name tried on
 * every member in one round trip per member (quorum.c's
 * rw_quorum_acquire_many). What members granted of a name that did not
 * get a majority is released there (owed and sent, without waiting: it
 * goes ahead of the next try on each member). Never throws.
 */
static void
held_quorum_round(RwNode *node, const char *const *names, RwKeys **keys,
				  int n, RwMode mode, RwAcquireStatus *status, int64 *result,
				  RwError *ierr)
{
	int			members = rw_quorum_size(node);
	bool		ask[RW_QUORUM_MAX];
	int			order[RW_QUORUM_MAX];
	bool	   *owes = palloc(sizeof(bool) * members * n);
	bool		any = false;
	int64		until;
	int64		cap;

	cap = rw_quorum_sending(node, false, order, &until);
	for (int k = 0; k < members; k++)
	{
		int			i = order[k];
		RwError		err = {RW_OK};

		ask[i] = rw_quorum_may_send(node, i, until, &err);
		for (int j = 0; ask[i] && j < n; j++)
			ask[i] = rw_release_settle_member(node, i, names[j], &err);
	}
	rw_conn_restore(cap);
	rw_quorum_acquire_many(node, keys, n, mode, ask, until, status, result,
						   owes, ierr);
	for (int j = 0; j < n; j++)
		for (int i = 0; status[j] != RW_GRANTED && i < members; i++)
			if (owes[i * n + j])
			{
				rw_release_owe(node, i, names[j], keys[j], RW_KEEP_NOTHING,
							   rw_quorum_lease(node));
				any = true;
			}
	if (any)
		rw_release_send_owed(node);
}

/*
 * The first round of rw_lock_many in one round trip per server, where it
 * can be: for names the session holds nothing of or
 * holds in a mode that covers the call's (a stacked hold: no Redis call,
 * as rw_lock stacks it), whose owed releases can be queued ahead. Every
 * other name is tried at once (pipelined plain tries: no intent, no mark;
 * with rwlock.wait_replicas, one WAIT after them; in quorum mode on every
 * member, and a write's fencing round likewise) and every grant recorded
 * before anything can throw. The granted prefix, in the canonical order,
 * is kept and pushed; a name granted after the first that was not is
 * given back at once (its release is queued, and goes out ahead of the
 * next command): the call must never hold, while it waits, a name that
 * comes after the one it waits for. Returns how many names (the prefix)
 * this call now holds; rw_lock takes the rest, from the first that was not
 * granted. 0 when the round does not apply (a name held in a weaker mode,
 * an upgrade, or lost: rw_lock's path reports and takes those) or failed
 * (what it may have granted is owed: rw_lock settles it before it asks
 * again); an interrupt is served, after the records are right. A name
 * whose try failed (a server that failed, a Cluster's redirection, a
 * WAIT that fell short) is one rw_lock takes again.
 */
static int
held_first_round(const char *const *names, int n, RwMode mode,
				 RwLevel level, long timeout, int64 *tokens)
{
	RwNode	   *node;
	RwHeld	  **hs;
	RwKeys	  **keys;
	const char **tnames;		/* the names tried in Redis, and theirs: */
	RwKeys	  **tkeys;
	int		   *tix;			/* where each stands in names[] */
	int			nt = 0;
	bool	   *stacked;
	RwAcquireStatus *status;
	RwAcquireStatus *tstatus;
	int64	   *result;
	int64	   *tresult;
	bool	   *published;
	RwError		err;
	RwError		ierr = {RW_OK};
	int64		started,
				cap;
	int			prefix;
	bool		sent;

	if (n < 2)
		return 0;
	rw_operation_begin();
	rw_renew_due(false, NULL);
	node = rw_current_node();
	stacked = palloc0(sizeof(bool) * n);
	for (int i = 0; i < n; i++)
	{
		RwHeld	   *h = rw_holds_find(names[i]);

		if (h == NULL)
			continue;
		rw_holds_refresh(h);
		if (h->lost || h->redis_mode < mode || h->node != node)
			return 0;
		stacked[i] = true;
	}
	hs = palloc(sizeof(RwHeld *) * n);
	keys = palloc(sizeof(RwKeys *) * n);
	tnames = palloc(sizeof(char *) * n);
	tkeys = palloc(sizeof(RwKeys *) * n);
	tix = palloc(sizeof(int) * n);
	status = palloc(sizeof(RwAcquireStatus) * n);
	tstatus = palloc(sizeof(RwAcquireStatus) * n);
	result = palloc(sizeof(int64) * n);
	tresult = palloc(sizeof(int64) * n);
	published = palloc0(sizeof(bool) * n);
	for (int i = 0; i < n; i++)
	{
		hs[i] = rw_holds_enter(names[i], node);
		if (level == RW_SESSION)
			rw_holds_reserve(hs[i]);
		keys[i] = &hs[i]->keys;
		status[i] = RW_GRANTED;
		published[i] = true;
		if (stacked[i])
			continue;
		tnames[nt] = names[i];
		tkeys[nt] = keys[i];
		tix[nt++] = i;
	}
	if (level == RW_XACT)
		held_reserve_xact(n);	/* one push per name, all after the round */
	started = rw_now_ms();
	cap = rw_conn_tighten(rw_wait_cap(timeout, started + timeout));
	sent = true;
	for (int t = 0; t < nt && sent; t++)
		sent = rw_release_settle_name(node, tnames[t], &err);
	if (!sent)
	{
		rw_conn_restore(cap);
		rw_holds_sweep();
		if (err.kind == RW_ERR_INTERRUPTED)
			rw_raise(&node->cmd, &err);
		return 0;
	}
	if (nt > 0)
	{
		rw_release_send_owed(node);
		if (node->quorum != NULL)
			held_quorum_round(node, tnames, tkeys, nt, mode, tstatus, tresult,
							  &ierr);
		else
			held_round_trips(node, tnames, tkeys, nt, mode, tstatus, tresult,
							 &ierr);
	}
	rw_conn_restore(cap);
	/* Granted: from here to the records, nothing may throw. */
	for (int t = 0; t < nt; t++)
	{
		int			i = tix[t];

		status[i] = tstatus[t];
		result[i] = tresult[t];
		published[i] = false;
		if (status[i] == RW_GRANTED)
		{
			published[i] = rw_holds_granted(hs[i], mode, result[i], started);
			rw_renew_scheduled(hs[i]->renewed_ms, hs[i]->lease_ms);
		}
	}
	for (int t = 0; t < nt; t++)
		if (tstatus[t] == RW_GRANTED)
			rw_release_granted(node, tnames[t]);
	for (prefix = 0; prefix < n && status[prefix] == RW_GRANTED; prefix++)
	{
		held_push(hs[prefix], mode, level);
		rw_stat_add(held_stat_of(mode, level), 1);
		rw_holds_publish_modes(hs[prefix]);
		tokens[prefix] = hs[prefix]->token;
	}
	for (int i = prefix + 1; i < n; i++)
		if (status[i] == RW_GRANTED && !stacked[i])
			(void) held_release(hs[i], true);
	rw_holds_sweep();
	rw_release_flush();
	/* The records are right: serve an interrupt that cut the round short. */
	if (ierr.kind == RW_ERR_INTERRUPTED)
		rw_raise(&node->cmd, &ierr);
	for (int i = 0; i < prefix; i++)
		if (!published[i])
			held_refuse_unpublished(hs[i]); /* rw_lock_many undoes the rest */
	rw_operation_end();
	return prefix;
}

/*
 * Take a hold of each of names[0..n-1], all or none (SPEC 16). The names
 * are distinct and in the canonical order (docs/protocol.md section 19),
 * which the caller sorted them into: every multi-name call of every client
 * takes its names in that order, so two of them never wait for each other
 * in a cycle. Each name goes through rw_lock, exactly as if taken alone
 * (stacking, upgrades, waits with lock_timeout, cancel, log_lock_waits,
 * waiter rows and deadlock detection, tokens); the names already taken are
 * kept while the next is waited for (ordered locking: no starvation, and
 * the order makes that safe among multi-name calls). Where it can, a first
 * round tries every name in one round trip per server (held_first_round);
 * rw_lock goes on from the first name that round did not get.
 *
 * wait_ms (with is_try) is the whole call's: each name gets what is left of
 * it. On any failure the holds this call took are undone (held_undo_many):
 * a try that runs out returns false once their releases are answered; an
 * error (timeout, cancel, 40P01, a Redis failure) queues their releases and
 * goes on, and the abort of the (sub)transaction that the error causes
 * sends them (held_at_xact_end), bounded by rwlock.command_timeout as at
 * any abort. tokens[i] is names[i]'s.
 */
bool
rw_lock_many(const char *const *names, int n, RwMode mode, RwLevel level,
			 long wait_ms, bool is_try, int64 *tokens)
{
	int64		deadline = rw_now_ms() + (is_try ? wait_ms : 0);
	MemoryContext cxt = CurrentMemoryContext;
	volatile int i;

	held_many_pushed = 0;
	PG_TRY();
	{
		i = held_first_round(names, n, mode, level,
							 is_try ? wait_ms : (LockTimeout > 0 ? LockTimeout : -1),
							 tokens);
		for (; i < n; i++)
		{
			long		left = is_try ? Max(deadline - rw_now_ms(), 0) : -1;

			if (!rw_lock(names[i], mode, level, left, is_try, &tokens[i]))
				break;
		}
	}
	PG_CATCH();
	{
		int			pushed = held_many_pushed;

		MemoryContextSwitchTo(cxt);
		held_many_pushed = -1;
		held_undo_many(names, pushed, mode, level);
		PG_RE_THROW();
	}
	PG_END_TRY();
	held_many_pushed = -1;
	if (i < n)
	{
		RwError		err = {RW_OK};

		/* A try that ran out: give back what it took, and wait for that. */
		rw_operation_begin();
		held_undo_many(names, i, mode, level);
		rw_release_flush();
		(void) rw_release_await(&err);
		rw_operation_end();
		if (err.kind == RW_ERR_INTERRUPTED)
			CHECK_FOR_INTERRUPTS();
		return false;
	}
	return true;
}

/*
 * The index in h's stack of the most recent session-level hold of `mode`
 * (RW_NONE: of either mode), or -1.
 */
static int
held_last_of(RwHeld *h, RwMode mode)
{
	for (int i = h->stack_len - 1; i >= 0; i--)
		if (mode == RW_NONE || h->stack[i] == mode)
			return i;
	return -1;
}

/*
 * Release the most recent session-level hold of `name` in `mode`, or of
 * either mode with RW_NONE (redis_unlock(name)).
 */
bool
rw_unlock(const char *name, RwMode mode)
{
	RwHeld	   *h;
	int			i;
	bool		ok;

	rw_operation_begin();
	h = rw_holds_find(name);
	i = h ? held_last_of(h, mode) : -1;
	if (i < 0)
	{
		ereport(WARNING,
				(errcode(ERRCODE_WARNING),
				 mode == RW_NONE ?
				 errmsg("you don't own a session-level hold of Redis lock \"%s\"", name) :
				 errmsg("you don't own a session-level %s hold of Redis lock \"%s\"",
						mode == RW_WRITE ? "write" : "read", name)));
		return false;
	}
	mode = h->stack[i];
	memmove(&h->stack[i], &h->stack[i + 1], (h->stack_len - i - 1) * sizeof(RwMode));
	h->stack_len--;
	h->count[RW_SESSION][mode]--;
	ok = held_release(h, false);
	rw_operation_end();
	return ok;
}

/*
 * redis_unlock(text[]): release the most recent session-level hold of each
 * of names[0..n-1] in `mode` (RW_NONE: of either mode), as redis_unlock(name)
 * would each; released[i] is what that call would return for names[i]. The
 * names are distinct and in the canonical order; they are let go in the
 * reverse order (the last taken first, as a transaction's end lets go).
 * A name with no such hold gets its WARNING first, before anything changes.
 * The releases go out together, pipelined (one round trip per server,
 * rw_release_await), and each name's answer is its own: false if its hold
 * was found lost, or its release could not be done (then it stays owed, as
 * redis_unlock leaves it). A quorum's names go one by one (rw_release_now
 * counts each name's majority). An interrupt is served once every record
 * is right; a quorum's name not reached by then is still held.
 */
void
rw_unlock_many(const char *const *names, int n, RwMode mode, bool *released)
{
	RwNode	  **queued = palloc0(sizeof(RwNode *) * n);
	bool		any = false;
	RwError		err = {RW_OK};

	rw_operation_begin();
	for (int i = n - 1; i >= 0; i--)
	{
		RwHeld	   *h = rw_holds_find(names[i]);

		released[i] = false;
		if (h == NULL || held_last_of(h, mode) < 0)
			ereport(WARNING,
					(errcode(ERRCODE_WARNING),
					 mode == RW_NONE ?
					 errmsg("you don't own a session-level hold of Redis lock \"%s\"", names[i]) :
					 errmsg("you don't own a session-level %s hold of Redis lock \"%s\"",
							mode == RW_WRITE ? "write" : "read", names[i])));
	}
	for (int i = n - 1; i >= 0; i--)
	{
		RwHeld	   *h = rw_holds_find(names[i]);
		int			j = h ? held_last_of(h, mode) : -1;
		RwMode		m;

		if (j < 0)
			continue;
		m = h->stack[j];
		memmove(&h->stack[j], &h->stack[j + 1],
				(h->stack_len - j - 1) * sizeof(RwMode));
		h->stack_len--;
		h->count[RW_SESSION][m]--;
		if (rw_quorum_size(h->node) > 0)
		{
			released[i] = held_release(h, false);
			continue;
		}
		rw_holds_refresh(h);
		if (!h->lost && rw_wanted_mode(h) < h->redis_mode)
		{
			queued[i] = h->node;
			any = true;
		}
		released[i] = held_release(h, true);	/* h may be forgotten */
	}
	rw_release_flush();
	if (any)
		(void) rw_release_await(&err);
	for (int i = 0; i < n; i++)
		if (queued[i] != NULL &&
			(rw_release_owed_name(queued[i], names[i]) ||
			 rw_release_found_lost(queued[i], names[i])))
			released[i] = false;
	rw_operation_end();
	/* The records are right: serve an interrupt that cut the wait short. */
	if (err.kind == RW_ERR_INTERRUPTED)
		CHECK_FOR_INTERRUPTS();
}

/*
 * Release every session-level hold; returns how many holds there were.
 * The releases go out together, pipelined. With await (redis_unlock_all),
 * their answers are waited for, within one rwlock.command_timeout, so that
 * a hold found lost is reported by this call, as redis_unlock reports its
 * own; without (DISCARD ALL, which a pooler runs between clients), later
 * operations read them.
 */
int
rw_unlock_all(bool await)
{
	RwHeld	  **list;
	int			n,
				holds = 0;
	RwError		err = {RW_OK};

	rw_operation_begin();
	list = rw_holds_list(&n);
	for (int i = 0; i < n; i++)
	{
		RwHeld	   *h = list[i];

		if (h->stack_len == 0)
			continue;
		holds += h->stack_len;
		h->stack_len = 0;
		h->count[RW_SESSION][RW_READ] = h->count[RW_SESSION][RW_WRITE] = 0;
		held_release(h, true);
	}
	pfree(list);
	rw_release_flush();
	if (await)
		(void) rw_release_await(&err);
	rw_operation_end();
	/* The records are right: serve an interrupt that cut the wait short. */
	if (err.kind == RW_ERR_INTERRUPTED)
		CHECK_FOR_INTERRUPTS();
	return holds;
}

/*
 * Release the xact-level holds taken at nest level `level` or deeper: every
 * count first, then each record once (most recent first), however its holds
 * interleave with other names' (one release, one warning if it was lost).
 * The records to release are gathered in the array's popped slots.
 */
static void
held_release_xact(int level)
{
	static uint64 end_gen = 0;
	int			first = n_xact;
	int			k;

	while (first > 0 && xact_holds[first - 1].level >= level)
		first--;
	end_gen++;
	k = first;
	for (int i = first; i < n_xact; i++)
	{
		RwHeld	   *h = xact_holds[i].held;

		h->count[RW_XACT][xact_holds[i].mode]--;
		if (h->end_gen != end_gen)
		{
			h->end_gen = end_gen;
			xact_holds[k++].held = h;	/* k <= i: a slot already read */
		}
	}
	n_xact = first;
	for (int i = k - 1; i >= first; i--)
		held_release(xact_holds[i].held, true);
	rw_release_flush();
}

/*
 * A cancel or statement_timeout cut the sending of the releases short at
 * transaction end (the transaction holds interrupts, so it would otherwise
 * wait for a stalled Redis up to rwlock.command_timeout), with a WARNING.
 * What was sent stands; the rest goes at the session's next rwlock call, or
 * when it ends, else the leases free it. At the end of a transaction, as
 * PostgreSQL does with a cancelled wait for synchronous replication, the
 * cancel is taken as served. At a subtransaction's abort the statement may
 * go on (a PL/pgSQL EXCEPTION block), and a statement_timeout fires only
 * once: the cancel stays pending, to end the statement at its next
 * CHECK_FOR_INTERRUPTS once interrupts are resumed (after ROLLBACK TO
 * SAVEPOINT, which ends its statement, PostgreSQL drops it at the next
 * command read). The abort that follows does not wait on the connection
 * the cancel cut again (redis_conn.c).
 */
static void
held_cancelled_at_xact_end(int level, bool abort)
{
	if (level == 0)
		QueryCancelPending = false;
	ereport(WARNING,
			(errcode(ERRCODE_QUERY_CANCELED),
			 errmsg("canceling the release of Redis locks at transaction end due to user request"),
			 errdetail("The %s. The releases not yet sent to Redis are sent at this session's next rwlock call, or when the session ends; until then each of those locks is left to its lease.",
					   !abort ? "transaction has committed" :
					   level > 0 ? "subtransaction has been rolled back" :
					   "transaction has been rolled back")));
}

/*
 * At transaction or subtransaction end: release the xact holds of `level`
 * and deeper, bounded by one rwlock.command_timeout and cut short by a
 * cancel, never throwing (a failure becomes a WARNING; the lease is the
 * backstop).
 */
static void
held_at_xact_end(int level, bool abort)
{
	MemoryContext cxt = CurrentMemoryContext;

	/*
	 * An abort belongs to the call that failed: a server that just timed out
	 * or was interrupted is not tried again (the releases stay owed).
	 */
	if (!abort)
		rw_call_begin();
	rw_conn_limit(rw_now_ms() + rw_command_timeout_ms);
	rw_conn_cancellable(true);
	PG_TRY();
	{
		if (abort)
		{
			rw_abandon_wait();
			rw_holds_sweep();
		}
		held_release_xact(level);
		rw_conn_cancellable(false);
		if (rw_conn_cancel_cut())
			held_cancelled_at_xact_end(level, abort);
		rw_notes_flush();
	}
	PG_CATCH();
	{
		ErrorData  *edata;

		MemoryContextSwitchTo(cxt);
		edata = CopyErrorData();
		FlushErrorState();
		rw_conn_limit(0);
		rw_conn_cancellable(false);
		ereport(WARNING,
				(errcode(edata->sqlerrcode),
				 errmsg("could not release Redis locks at transaction end: %s",
						edata->message)));
		FreeErrorData(edata);
	}
	PG_END_TRY();
	rw_conn_limit(0);
}

static void
held_xact_callback(XactEvent event, void *arg)
{
	switch (event)
	{
		case XACT_EVENT_PRE_PREPARE:
			if (n_xact > 0)
				ereport(ERROR,
						(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
						 errmsg("cannot PREPARE a transaction that holds Redis transaction-level locks"),
						 errhint("Release them by ending the transaction, or use session-level locks.")));
			break;
		case XACT_EVENT_ABORT:
		case XACT_EVENT_PARALLEL_ABORT:
			held_at_xact_end(0, true);
			break;
		case XACT_EVENT_COMMIT:
		case XACT_EVENT_PARALLEL_COMMIT:
			/* After the commit is durable and visible. */
			held_at_xact_end(0, false);
			break;
		default:
			break;
	}
}

static void
held_subxact_callback(SubXactEvent event, SubTransactionId mySubid,
					  SubTransactionId parentSubid, void *arg)
{
	int			level = GetCurrentTransactionNestLevel();

	if (event == SUBXACT_EVENT_ABORT_SUB)
		held_at_xact_end(level, true);
	else if (event == SUBXACT_EVENT_COMMIT_SUB)
	{
		for (int i = n_xact - 1; i >= 0 && xact_holds[i].level >= level; i--)
			xact_holds[i].level = level - 1;
	}
}

/*
 * Session end: every hold goes at once, and every release still owed is
 * sent, without waiting for answers and within RW_EXIT_BUDGET_MS whatever
 * Redis does. A hold whose release did not get through (no connection
 * could be made in time) is left to the keeper, which releases it as soon
 * as it can (with the library preloaded); else its lease frees it.
 */
static void
held_at_exit(int code, Datum arg)
{
	RwHeld	  **list;
	int			n;

	rw_call_begin();
	rw_conn_limit(rw_now_ms() + RW_EXIT_BUDGET_MS);
	rw_abandon_wait();
	n_xact = 0;
	list = rw_holds_list(&n);
	for (int i = 0; i < n; i++)
	{
		RwHeld	   *h = list[i];

		memset(h->count, 0, sizeof(h->count));
		h->stack_len = 0;
		if (!h->lost && h->redis_mode != RW_NONE)
		{
			rw_holds_exiting(h);
			rw_release_later(h->node, h->name, &h->keys, RW_KEEP_NOTHING, 0);
		}
		else
			rw_holds_unpublish(h);
		h->redis_mode = RW_NONE;
	}
	rw_release_at_exit();
	for (int i = 0; i < n; i++)
		rw_holds_exited(list[i]);
	rw_conn_limit(0);
}

/*
 * DISCARD ALL releases session-level holds, as it releases advisory locks,
 * so that behind a connection pooler the next client inherits none.
 */
static void
held_process_utility(PlannedStmt *pstmt, const char *queryString,
					 bool readOnlyTree, ProcessUtilityContext context,
					 ParamListInfo params, QueryEnvironment *queryEnv,
					 DestReceiver *dest, QueryCompletion *qc)
{
	Node	   *stmt = pstmt->utilityStmt;

	if (prev_process_utility)
		prev_process_utility(pstmt, queryString, readOnlyTree, context,
							 params, queryEnv, dest, qc);
	else
		standard_ProcessUtility(pstmt, queryString, readOnlyTree, context,
								params, queryEnv, dest, qc);
	if (held_initialized && IsA(stmt, DiscardStmt) &&
		((DiscardStmt *) stmt)->target == DISCARD_ALL)
		(void) rw_unlock_all(false);
}

/* In _PG_init: hooks that must be in place before any lock is taken. */
void
rw_held_install_hooks(void)
{
	prev_process_utility = ProcessUtility_hook;
	ProcessUtility_hook = held_process_utility;
}

/* Per backend, at the first lock call. */
void
rw_held_init(void)
{
	if (held_initialized)
		return;
	rw_stats_attach();
	RegisterXactCallback(held_xact_callback, NULL);
	RegisterSubXactCallback(held_subxact_callback, NULL);
	before_shmem_exit(held_at_exit, (Datum) 0);
	held_initialized = true;
}
