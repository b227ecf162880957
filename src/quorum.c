/*-------------------------------------------------------------------------
 *
 * quorum.c
 *	  Quorum mode (experimental): a lock held on a majority of independent
 *	  Redis masters, for a node whose rwlock.redis_url lists several URLs.
 *
 * Such a node (the logical node: what a hold, its owed releases and the
 * keeper's records belong to) has one plain member node per URL, each with
 * its own command and subscriber connections, authenticated like any
 * other; the logical node's own connections are never opened. What the
 * callers get here:
 *	  acquisition  sent to every member at once (written to all, then each
 *				   answer read with what is left of the time), counted:
 *				   granted when a majority of the members that count
 *				   granted it within the lease less the time spent and
 *				   less the drift margin (rwlock.quorum_drift); a write
 *				   grant's fencing token is then raised on the granting
 *				   members to the largest any returned (fence.lua), and
 *				   counts only once a majority has it. What to undo when
 *				   it is not granted is the caller's (waiting.c, through
 *				   release.c, so releases owed stay ordered per member).
 *	  renewal	   on every member; a hold is renewed when a majority
 *				   renewed it, lost when a majority can no longer have it.
 *	  lock info	   every member asked in one round; the holders and the
 *				   waiting writers are those a majority lists
 *				   (rw_quorum_info).
 *	  members that count: one whose Redis has been up for less than
 *				   rwlock.quorum_max_lease (checked on every new
 *				   connection, INFO's uptime) may have restarted empty
 *				   while it held locks that a majority relied on, so it
 *				   does not count toward a majority until it has been up
 *				   that long, unless it persists every write (CONFIG GET:
 *				   appendonly yes and appendfsync always). The lease of a
 *				   hold is capped at rwlock.quorum_max_lease.
 *	  a member that failed (no connection, no answer in time; not a
 *				   dropped connection, made again at once) is not asked
 *				   again for RW_QUORUM_RETRY_MS: a stopped Redis costs one
 *				   timeout a second, not one per call; unless a round that
 *				   needs a majority cannot have one without it
 *				   (rw_quorum_may_ask_round). Releases go to a member left
 *				   alone only if its connection is open (release.c).
 *	  timing	   a round (an acquisition, a renewal, a release) has two
 *				   phases, each within one timeout shared by all members:
 *				   sending, within rwlock.connect_timeout, to the members
 *				   whose connections are open first (so the masters that
 *				   answer are asked before any wait on one that does not),
 *				   then to those to connect, in turns; then reading every
 *				   answer, within rwlock.command_timeout. However many
 *				   members do not answer, a round costs at most one timeout
 *				   of each kind. A member left to connect when the sending
 *				   time is up is not asked this round (not failed); those
 *				   to connect take turns going first.
 *
 * Never throws (but on out of memory); no ereport.
 *
 *-------------------------------------------------------------------------
 */
#include "rwlock.h"

#include "utils/memutils.h"

#define RW_QUORUM_RETRY_MS	1000	/* a failed member is left alone so long */
#define RW_QUORUM_MARGIN_MS 2	/* added to the drift, as Redlock does */

typedef struct RwQuorum
{
	int			n;
	RwNode	   *members;		/* in URL order, linked by next */
	RwNode	  **member;			/* the same, by index */
	uint64	   *checked_opens;	/* member's cmd.opens when last checked */
	int64	   *counts_from_ms; /* monotonic: counts toward a majority then */
	int64	   *retry_ms;		/* monotonic: not asked before this */
	char	  **run_id;			/* of the Redis last checked, or NULL */
	bool	   *info_refused;	/* INFO refused at the last check (ACL) */
	int			connect_first;	/* the first to connect next round */
} RwQuorum;

/* Make a quorum node's members, one plain node per URL. */
void
rw_quorum_attach(RwNode *node)
{
	MemoryContext old;
	RwQuorum   *q;
	char	   *why;

	if (node->ep.nquorum == 0)
		return;
	old = MemoryContextSwitchTo(TopMemoryContext);
	q = palloc0(sizeof(RwQuorum));
	q->n = node->ep.nquorum;
	q->member = palloc0(sizeof(RwNode *) * q->n);
	q->checked_opens = palloc0(sizeof(uint64) * q->n);
	q->counts_from_ms = palloc0(sizeof(int64) * q->n);
	q->info_refused = palloc0(sizeof(bool) * q->n);
	q->retry_ms = palloc0(sizeof(int64) * q->n);
	q->run_id = palloc0(sizeof(char *) * q->n);
	for (int i = q->n - 1; i >= 0; i--)
	{
		RwNode	   *m = palloc0(sizeof(RwNode));

		/* The logical node's spec was checked whole: its parts parse. */
		if (!rw_parse_url(node->ep.quorum_specs[i], &m->ep, &why))
			elog(ERROR, "rwlock.redis_url became invalid: %s", why);
		m->cmd.node = m;
		m->sub.node = m;
		m->sub.is_subscriber = true;
		m->next = q->members;
		q->members = m;
		q->member[i] = m;
	}
	node->quorum = q;
	MemoryContextSwitchTo(old);
}

/* Close the members' connections and free them (the node goes). */
void
rw_quorum_detach(RwNode *node)
{
	RwQuorum   *q = node->quorum;

	if (q == NULL)
		return;
	for (int i = 0; i < q->n; i++)
	{
		rw_conn_close(&q->member[i]->cmd);
		rw_conn_close(&q->member[i]->sub);
		pfree(q->member[i]);
		if (q->run_id[i] != NULL)
			pfree(q->run_id[i]);
	}
	pfree(q->member);
	pfree(q->checked_opens);
	pfree(q->counts_from_ms);
	pfree(q->info_refused);
	pfree(q->retry_ms);
	pfree(q->run_id);
	pfree(q);
	node->quorum = NULL;
}

/* How many members a quorum node has: 0 for another node. */
int
rw_quorum_size(RwNode *node)
{
	return node->quorum ? node->quorum->n : 0;
}

/* Member i of a quorum node. */
RwNode *
rw_quorum_member(RwNode *node, int i)
{
	return node->quorum->member[i];
}

/* The smallest number of members that is a majority. */
int
rw_quorum_majority(RwNode *node)
{
	return node->quorum->n / 2 + 1;
}

/* For walking the member nodes of a cluster or a quorum (else NULL). */
RwNode *
rw_node_members(RwNode *node)
{
	return node->quorum ? node->quorum->members : rw_cluster_members(node);
}

/* The lease of a new hold on the node: capped in quorum mode. */
int
rw_quorum_lease(RwNode *node)
{
	return node->quorum ? Min(rw_lease_ms, rw_quorum_max_lease_ms) : rw_lease_ms;
}

/* Whether member i may be asked now (it did not fail a moment ago). */
bool
rw_quorum_may_ask(RwNode *node, int i)
{
	return rw_now_ms() >= node->quorum->retry_ms[i];
}

/*
 * The same for a round that needs a majority (an acquisition, a renewal,
 * redis_lock_info): a member left alone is asked all the same when the
 * others cannot make a majority without it. Leaving it alone would fail the
 * round for certain; asking costs at most the round's timeouts, and a
 * member that stalled for a moment has often recovered.
 */
bool
rw_quorum_may_ask_round(RwNode *node, int i)
{
	int			others = 0;

	if (rw_quorum_may_ask(node, i))
		return true;
	for (int k = 0; k < node->quorum->n; k++)
		others += rw_quorum_may_ask(node, k);
	return others < rw_quorum_majority(node);
}

/*
 * Member i failed: if it could cost a timeout again (it did not answer in
 * time, or could not be connected to), leave it alone for a while. A
 * connection that was dropped (CLIENT KILL, a restart, a failover) is made
 * again at once: one that cannot be is refused fast, or times out and is
 * left alone then.
 */
void
rw_quorum_failed(RwNode *node, int i, const RwError *err)
{
	if (err->kind == RW_ERR_TIMEOUT || err->kind == RW_ERR_CONNECT ||
		err->kind == RW_ERR_AUTH || err->kind == RW_ERR_UNFIT ||
		err->kind == RW_ERR_NOPERM)
		node->quorum->retry_ms[i] = rw_now_ms() + RW_QUORUM_RETRY_MS;
}

/*
 * The order of a round's sends (see timing above): members whose command
 * (or subscriber) connection is open, then those to connect, starting at
 * connect_first.
 */
static void
quorum_order(RwNode *node, bool subscribers, int *order)
{
	RwQuorum   *q = node->quorum;
	int			n = 0;

	for (int pass = 0; pass < 2; pass++)
		for (int k = 0; k < q->n; k++)
		{
			int			i = pass == 0 ? k : (q->connect_first + k) % q->n;
			RwConn	   *conn = subscribers ? &q->member[i]->sub : &q->member[i]->cmd;

			if ((conn->ctx != NULL) == (pass == 0))
				order[n++] = i;
		}
	/* Each takes its turn first: none is left behind a stopped one. */
	q->connect_first = (q->connect_first + 1) % q->n;
}

/*
 * Begin a round's sending phase: order[] the members to send to in (see
 * timing above) and cap every wait until rw_conn_restore(returned) at one
 * rwlock.connect_timeout from now, *until.
 */
int64
rw_quorum_sending(RwNode *node, bool subscribers, int *order, int64 *until)
{
	quorum_order(node, subscribers, order);
	*until = rw_now_ms() + rw_connect_timeout_ms;
	return rw_conn_tighten(*until);
}

/*
 * Whether member i may be sent to in a sending phase that ends at until:
 * yes if its command connection is open, or if there is time left to make
 * one. If not, *err says why it was not asked.
 */
bool
rw_quorum_may_send(RwNode *node, int i, int64 until, RwError *err)
{
	RwQuorum   *q = node->quorum;

	if (q->member[i]->cmd.ctx != NULL || rw_now_ms() < until)
		return true;
	err->kind = RW_ERR_CONNECT;
	err->maybe_sent = false;
	snprintf(err->msg, sizeof(err->msg),
			 "not asked: rwlock.connect_timeout (%d ms) was spent connecting to other Redis nodes of the quorum",
			 rw_connect_timeout_ms);
	return false;
}

/*
 * Begin a round's reading phase: every wait until rw_conn_restore(returned)
 * ends within one rwlock.command_timeout from now (and WAIT's own timeout,
 * if a WAIT follows the scripts).
 */
int64
rw_quorum_reading(void)
{
	return rw_conn_tighten(rw_now_ms() + rw_command_timeout_ms +
						   (rw_wait_replicas > 0 ? rw_wait_replicas_timeout_ms : 0));
}

/* The value of "field:" in INFO's text, or NULL. */
static const char *
quorum_info_field(const char *info, const char *field)
{
	const char *p = strstr(info, field);

	return p ? p + strlen(field) : NULL;
}

/* Whether a CONFIG GET answer ([name, value]) has the value `want`. */
static bool
quorum_config_is(redisReply *r, const char *want)
{
	return r->type == REDIS_REPLY_ARRAY && r->elements == 2 &&
		r->element[1]->type == REDIS_REPLY_STRING &&
		pg_strcasecmp(r->element[1]->str, want) == 0;
}

/*
 * Check member i's Redis on a new connection: from when it counts toward a
 * majority (its uptime, or persistence of every write), and its run_id
 * (redis_connection_info). A CONFIG GET that ACLs refuse means no proof of
 * persistence. False, with *err, if the connection failed.
 */
static bool
quorum_check_member(RwNode *node, int i, RwError *err)
{
	RwQuorum   *q = node->quorum;
	RwConn	   *conn = &q->member[i]->cmd;
	const char *info[2] = {"INFO", "server"};
	const char *aof[3] = {"CONFIG", "GET", "appendonly"};
	const char *fsync[3] = {"CONFIG", "GET", "appendfsync"};
	redisReply *r[3];
	const char *up;
	const char *id;
	int64		uptime_ms;
	bool		persists;

	rw_append(conn, 2, info, NULL, NULL);
	rw_append(conn, 3, aof, NULL, NULL);
	rw_append(conn, 3, fsync, NULL, NULL);
	if (!rw_exchange(conn, 3, r, err))
		return false;
	up = r[0]->type == REDIS_REPLY_STRING ?
		quorum_info_field(r[0]->str, "uptime_in_seconds:") : NULL;
	/* Unknown uptime: as if it had just started. */
	uptime_ms = up ? (int64) strtol(up, NULL, 10) * 1000 : 0;
	id = r[0]->type == REDIS_REPLY_STRING ?
		quorum_info_field(r[0]->str, "run_id:") : NULL;
	persists = quorum_config_is(r[1], "yes") && quorum_config_is(r[2], "always");
	q->info_refused[i] = r[0]->type == REDIS_REPLY_ERROR;
	if (q->run_id[i] != NULL)
		pfree(q->run_id[i]);
	q->run_id[i] = NULL;
	if (id != NULL)
	{
		MemoryContext old = MemoryContextSwitchTo(TopMemoryContext);

		q->run_id[i] = pnstrdup(id, strcspn(id, "\r\n"));
		MemoryContextSwitchTo(old);
	}
	/* Uptime is whole seconds: a second more, to be sure. */
	q->counts_from_ms[i] = persists ? 0 :
		rw_now_ms() + Max(rw_quorum_max_lease_ms + 1000 - uptime_ms, 0);
	q->checked_opens[i] = conn->opens;
	for (int k = 0; k < 3; k++)
		freeReplyObject(r[k]);
	return true;
}

/*
 * Open member i's command connection if need be and check its Redis if the
 * connection is new. False, with *err, on failure.
 */
static bool
quorum_ready(RwNode *node, int i, RwError *err)
{
	RwQuorum   *q = node->quorum;
	RwConn	   *conn = &q->member[i]->cmd;

	if (!rw_conn_ensure(conn, err))
		return false;
	if (q->checked_opens[i] != conn->opens)
		return quorum_check_member(node, i, err);
	return true;
}

/*
 * Whether member i counts toward a majority now (and its run_id): its
 * command connection is the one whose Redis was checked, and that Redis
 * has been up long enough (or persists every write).
 */
bool
rw_quorum_counts(RwNode *node, int i, const char **run_id)
{
	RwQuorum   *q = node->quorum;

	if (run_id)
		*run_id = q->run_id[i];
	return q->checked_opens[i] != 0 &&
		q->checked_opens[i] == q->member[i]->cmd.opens &&
		rw_now_ms() >= q->counts_from_ms[i];
}

/* Send the acquisition to every member asked; votes[i] of those not. */
static void
quorum_send_all(RwNode *node, const RwKeys *keys, RwMode mode,
				RwMode held_mode, int intent_ms, const bool *ask,
				int64 until, RwAcquireCall *calls, RwVote *votes)
{
	RwQuorum   *q = node->quorum;
	int			order[RW_QUORUM_MAX];
	int64		cap = rw_conn_tighten(until);

	quorum_order(node, false, order);
	for (int k = 0; k < q->n; k++)
	{
		int			i = order[k];
		RwVote	   *v = &votes[i];

		memset(v, 0, sizeof(*v));
		v->status = RW_ACQ_FAILED;
		v->sent = false;
		if (!ask[i])
		{
			v->err.kind = RW_ERR_CONNECT;
			strlcpy(v->err.msg, "not asked (it failed a moment ago, or there was no time left to connect to it)", sizeof(v->err.msg));
			continue;
		}
		if (!rw_quorum_may_send(node, i, until, &v->err))
			continue;
		if (!quorum_ready(node, i, &v->err) ||
			!rw_proto_acquire_send(&q->member[i]->cmd, keys, mode, held_mode,
								   rw_quorum_lease(node), intent_ms,
								   &calls[i], &v->err))
		{
			rw_quorum_failed(node, i, &v->err);
			continue;
		}
		v->sent = true;
		v->counts = rw_quorum_counts(node, i, NULL);
	}
	rw_conn_restore(cap);
}

/* Read every answer, all within one rwlock.command_timeout. */
static void
quorum_collect_all(RwNode *node, RwAcquireCall *calls, RwVote *votes)
{
	RwQuorum   *q = node->quorum;
	int64		cap = rw_quorum_reading();

	for (int i = 0; i < q->n; i++)
	{
		RwVote	   *v = &votes[i];
		int			acks;

		if (!v->sent)
			continue;
		v->status = rw_proto_acquire_collect(&q->member[i]->cmd, &calls[i],
											 &v->result, &v->other, &acks,
											 &v->err);
		if (v->status == RW_GRANTED_UNACKED)
			v->status = RW_GRANTED;		/* wait_replicas has no say here */
		if (v->status == RW_ACQ_FAILED)
			rw_quorum_failed(node, i, &v->err);
	}
	rw_conn_restore(cap);
}

/*
 * The clock drift allowed for over a lease: rwlock.quorum_drift of it, plus
 * a margin, as Redlock does (a grant counts only if it has more than this
 * left: quorum_in_time). The keeper takes a lease for certainly run out
 * only this long after its end (keeper.c).
 */
int64
rw_lease_drift_ms(int lease_ms)
{
	return (int64) (lease_ms * rw_quorum_drift) + 1 + RW_QUORUM_MARGIN_MS;	/* up */
}

/* Whether a grant that started at started_ms still has time left. */
static bool
quorum_in_time(RwNode *node, int64 started_ms)
{
	int			lease = rw_quorum_lease(node);
	double		validity = lease - (rw_now_ms() - started_ms) -
		lease * rw_quorum_drift - RW_QUORUM_MARGIN_MS;

	return validity > 0;
}

/*
 * Raise the token on the granting members below the largest (fence.lua),
 * all at once; those that do not count yet too (it costs nothing, and they
 * will count). Returns how many members that count now have it.
 */
static int
quorum_fence(RwNode *node, const RwKeys *keys, int64 token,
			 RwAcquireCall *calls, RwVote *votes)
{
	RwQuorum   *q = node->quorum;
	bool	   *sent = palloc0(sizeof(bool) * q->n);
	int			have = 0;
	int64		cap;

	for (int i = 0; i < q->n; i++)
	{
		if (votes[i].status != RW_GRANTED)
			continue;
		if (votes[i].result >= token)
			have += votes[i].counts;
		else if (rw_proto_fence_send(&q->member[i]->cmd, keys, token,
									 &calls[i], &votes[i].err))
			sent[i] = true;
	}
	cap = rw_quorum_reading();
	for (int i = 0; i < q->n; i++)
		if (sent[i] && rw_proto_collect_held(&q->member[i]->cmd, &calls[i],
											  &votes[i].err) == 1)
			have += votes[i].counts;
	rw_conn_restore(cap);
	pfree(sent);
	return have;
}

/*
 * Why the first member that answered but does not count toward a majority
 * does not count yet, into buf (empty if every member that answered
 * counts): without it, a quorum of members restarted a minute ago, or of
 * members whose ACL refuses INFO, fails with no word of why.
 */
static void
quorum_not_counting(RwNode *node, const RwVote *votes, char *buf, size_t len)
{
	RwQuorum   *q = node->quorum;
	int			others = 0;
	int			first = -1;
	char		more[32] = "";

	buf[0] = '\0';
	for (int i = 0; i < q->n; i++)
		if (votes[i].status != RW_ACQ_FAILED && votes[i].sent && !votes[i].counts)
		{
			if (first < 0)
				first = i;
			else
				others++;
		}
	if (first < 0)
		return;
	/* no palloc here: the caller must not throw (rw_quorum_acquire) */
	if (others > 0)
		snprintf(more, sizeof(more), " (and %d more)", others);
	snprintf(buf, len,
			 "; %s:%d%s answered but does not count yet: %s (rwlock.quorum_max_lease + 1 s: it may have restarted empty while it held locks); it counts in %lld ms",
			 q->member[first]->ep.host ? q->member[first]->ep.host : "a unix socket",
			 q->member[first]->ep.host ? q->member[first]->ep.port : 0,
			 more,
			 q->info_refused[first] ?
			 "its Redis user may not run INFO, so its uptime is unknown and it counts only once this connection is as old as a restart must be (grant +info: quorum mode needs it)" :
			 "its Redis has not been up as long as a restart must be",
			 (long long) Max(q->counts_from_ms[first] - rw_now_ms(), 0));
}

/*
 * The first failure among the votes, as the error of a quorum that could
 * not be asked: an interrupt wins (it must be served). Members that
 * answered but do not count yet are said so.
 */
static void
quorum_failure(RwNode *node, const RwVote *votes, int answered, RwError *err)
{
	const RwError *first = NULL;
	char		why[384];

	for (int i = 0; i < node->quorum->n; i++)
	{
		if (votes[i].status != RW_ACQ_FAILED)
			continue;
		if (first == NULL || votes[i].err.kind == RW_ERR_INTERRUPTED)
			first = &votes[i].err;
	}
	quorum_not_counting(node, votes, why, sizeof(why));
	err->kind = first ? first->kind : RW_ERR_CONNECT;
	if (err->kind == RW_ERR_REPLY)
		err->kind = RW_ERR_LOST;
	err->maybe_sent = false;
	snprintf(err->msg, sizeof(err->msg),
			 "only %d of the %d Redis nodes of the quorum answered and count toward a majority (%d needed)%s%s%s",
			 answered, node->quorum->n, rw_quorum_majority(node), why,
			 first ? "; first failure: " : "", first ? first->msg : "");
}

/*
 * One try to take the lock on a majority of the quorum's members. ask[i]:
 * whether member i may be asked (the caller queued the releases owed for
 * the name there ahead of it, in the sending phase that ends at send_until:
 * rw_quorum_sending). Returns:
 *	  RW_GRANTED	a majority of the members that count granted it in
 *					time, and (write) has the token: *result, the largest
 *					token any granting member returned;
 *	  RW_UPGRADE_CONFLICT  a member has another reader waiting to upgrade
 *					(*other);
 *	  RW_READ_LOST	an upgrade, and more members than a majority can spare
 *					no longer have the read lock: it was lost;
 *	  RW_BUSY		no majority: *result is how long to sleep at most, ms;
 *					*split if some members granted it (votes split);
 *	  RW_ACQ_FAILED fewer members than a majority answered and count:
 *					*err (class 08, or an interrupt).
 * Unless RW_GRANTED, the caller undoes what votes[] say was granted (or
 * may have been: RW_ACQ_FAILED with err.maybe_sent). Never throws.
 */
RwAcquireStatus
rw_quorum_acquire(RwNode *node, const RwKeys *keys, RwMode mode,
				  RwMode held_mode, int intent_ms, const bool *ask,
				  int64 send_until, RwVote *votes, int64 *result,
				  char **other, bool *split, RwError *err)
{
	RwQuorum   *q = node->quorum;
	RwAcquireCall *calls = palloc(sizeof(RwAcquireCall) * q->n);
	int64		started = rw_now_ms();
	int			granted = 0,
				answered = 0,
				read_lost = 0,
				any_granted = 0;
	int64		token = 0,
				sleep_ms = PG_INT64_MAX;

	quorum_send_all(node, keys, mode, held_mode, intent_ms, ask, send_until,
					calls, votes);
	quorum_collect_all(node, calls, votes);
	*split = false;
	for (int i = 0; i < q->n; i++)
	{
		RwVote	   *v = &votes[i];

		if (v->status == RW_UPGRADE_CONFLICT)
		{
			*other = v->other;
			pfree(calls);
			return RW_UPGRADE_CONFLICT;
		}
		if (v->status == RW_ACQ_FAILED || !v->counts)
			continue;
		answered++;
		if (v->status == RW_GRANTED)
			granted++;
		else if (v->status == RW_READ_LOST)
			read_lost++;
		else
			sleep_ms = Min(sleep_ms, v->result);
	}
	for (int i = 0; i < q->n; i++)
	{
		if (votes[i].status == RW_GRANTED)
		{
			any_granted++;
			token = Max(token, votes[i].result);
		}
	}
	if (granted >= rw_quorum_majority(node) && quorum_in_time(node, started) &&
		(mode == RW_READ ||
		 quorum_fence(node, keys, token, calls, votes) >= rw_quorum_majority(node)) &&
		quorum_in_time(node, started))
	{
		*result = token;
		pfree(calls);
		return RW_GRANTED;
	}
	pfree(calls);

	/*
	 * An upgrade: too many members that count no longer have our read lock
	 * for a majority to have it.
	 */
	if (read_lost > q->n - rw_quorum_majority(node))
		return RW_READ_LOST;
	if (answered < rw_quorum_majority(node))
	{
		quorum_failure(node, votes, answered, err);
		return RW_ACQ_FAILED;
	}
	*split = any_granted > 0;
	*result = sleep_ms == PG_INT64_MAX ? 1 : sleep_ms;
	return RW_BUSY;
}

/* An interrupt met by a round of several names: kept, to be served. */
static void
quorum_note_interrupt(const RwError *err, RwError *ierr)
{
	if (err->kind == RW_ERR_INTERRUPTED && ierr->kind != RW_ERR_INTERRUPTED)
		*ierr = *err;
}

/*
 * The fencing round of rw_quorum_acquire_many: every name j a majority
 * granted (ok[j]) has its token tok[j] raised on the granting members
 * below it, one pipeline per member, all written before any is read.
 * have[j]: how many members that count have it now. st and res are the
 * acquisition's answers, member i's for name j at [i * n + j].
 */
static void
quorum_fence_many(RwNode *node, RwKeys *const *keys, int n,
				  const bool *sent, const bool *counts,
				  const RwAcquireStatus *st, const int64 *res,
				  const bool *ok, const int64 *tok, int *have)
{
	RwQuorum   *q = node->quorum;
	RwTryBatch	b[RW_QUORUM_MAX];
	int		   *which[RW_QUORUM_MAX];
	int			nf[RW_QUORUM_MAX];
	RwKeys	  **fkeys = palloc(sizeof(RwKeys *) * n);
	int64	   *ftok = palloc(sizeof(int64) * n);
	int		   *held = palloc(sizeof(int) * n);
	int64		cap;

	for (int i = 0; i < q->n; i++)
	{
		RwError		err = {RW_OK};

		nf[i] = 0;
		which[i] = palloc(sizeof(int) * n);
		for (int j = 0; sent[i] && j < n; j++)
		{
			if (!ok[j] || st[i * n + j] != RW_GRANTED)
				continue;
			if (res[i * n + j] >= tok[j])
				have[j] += counts[i];
			else
			{
				which[i][nf[i]] = j;
				fkeys[nf[i]] = keys[j];
				ftok[nf[i]++] = tok[j];
			}
		}
		if (nf[i] > 0 &&
			!rw_proto_fence_many_send(&q->member[i]->cmd, fkeys, ftok, nf[i],
									  &b[i], &err))
		{
			rw_quorum_failed(node, i, &err);
			nf[i] = 0;
		}
	}
	cap = rw_quorum_reading();
	for (int i = 0; i < q->n; i++)
	{
		RwError		err = {RW_OK};

		if (nf[i] == 0)
			continue;
		if (!rw_proto_fence_many_collect(&q->member[i]->cmd, &b[i], held, &err))
		{
			rw_quorum_failed(node, i, &err);
			continue;
		}
		for (int k = 0; k < nf[i]; k++)
			if (held[k] == 1)
				have[which[i][k]] += counts[i];
	}
	rw_conn_restore(cap);
}

/*
 * A first try of each of n locks (none held by the session; plain tries:
 * no intent, no mark) on every member of the quorum, in one round trip per
 * member: every member's pipeline is written before any answer is read,
 * and a write's fencing round likewise (held.c's first round of several
 * names). ask[] and send_until as rw_quorum_acquire's. status[j] is
 * RW_GRANTED when, as rw_quorum_acquire counts it, a majority of the
 * members that count granted name j in time and (a write) has its token,
 * result[j]; else RW_ACQ_FAILED: the caller takes that name by the single
 * path. owes[i * n + j]: member i granted name j, or may have (its
 * connection failed after the write began); for a name not granted, the
 * caller releases it there. An interrupt is kept in *ierr, the round going
 * on (what it costs: each wait left returns at once). Never throws (but
 * out of memory).
 */
void
rw_quorum_acquire_many(RwNode *node, RwKeys *const *keys, int n,
					   RwMode mode, const bool *ask, int64 send_until,
					   RwAcquireStatus *status, int64 *result, bool *owes,
					   RwError *ierr)
{
	RwQuorum   *q = node->quorum;
	int64		started = rw_now_ms();
	int			order[RW_QUORUM_MAX];
	bool		sent[RW_QUORUM_MAX];
	bool		counts[RW_QUORUM_MAX];
	RwTryBatch	b[RW_QUORUM_MAX];
	RwAcquireStatus *st = palloc(sizeof(RwAcquireStatus) * q->n * n);
	int64	   *res = palloc(sizeof(int64) * q->n * n);
	bool	   *ok = palloc(sizeof(bool) * n);
	int		   *have = palloc0(sizeof(int) * n);
	int64		cap;

	memset(owes, 0, sizeof(bool) * q->n * n);
	/* Written to every member (quorum.c: timing)... */
	cap = rw_conn_tighten(send_until);
	quorum_order(node, false, order);
	for (int k = 0; k < q->n; k++)
	{
		int			i = order[k];
		RwError		err = {RW_OK};

		sent[i] = false;
		if (!ask[i] || !rw_quorum_may_send(node, i, send_until, &err))
			continue;
		if (!quorum_ready(node, i, &err) ||
			!rw_proto_acquire_many_send(&q->member[i]->cmd, keys, n, mode,
										rw_quorum_lease(node), 0, &b[i], &err))
		{
			rw_quorum_failed(node, i, &err);
			for (int j = 0; err.maybe_sent && j < n; j++)
				owes[i * n + j] = true;
			quorum_note_interrupt(&err, ierr);
			continue;
		}
		sent[i] = true;
		counts[i] = rw_quorum_counts(node, i, NULL);
	}
	rw_conn_restore(cap);
	/* ... then every answer read, within one rwlock.command_timeout. */
	cap = rw_quorum_reading();
	for (int i = 0; i < q->n; i++)
	{
		RwError		err = {RW_OK};
		int			acks;		/* no WAIT: a majority is the quorum's own */

		if (!sent[i])
			continue;
		if (!rw_proto_acquire_many_collect(&q->member[i]->cmd, &b[i],
										   &st[i * n], &res[i * n], &acks,
										   &err))
		{
			rw_quorum_failed(node, i, &err);
			for (int j = 0; j < n; j++)
				owes[i * n + j] = true;
			quorum_note_interrupt(&err, ierr);
			sent[i] = false;
			continue;
		}
		for (int j = 0; j < n; j++)
			owes[i * n + j] = st[i * n + j] == RW_GRANTED;
	}
	rw_conn_restore(cap);

	/* Counted as rw_quorum_acquire counts one name. */
	for (int j = 0; j < n; j++)
	{
		int			granted = 0;

		result[j] = 0;
		for (int i = 0; i < q->n; i++)
			if (sent[i] && st[i * n + j] == RW_GRANTED)
			{
				result[j] = Max(result[j], res[i * n + j]);
				granted += counts[i];
			}
		ok[j] = granted >= rw_quorum_majority(node) &&
			quorum_in_time(node, started);
	}
	if (mode == RW_WRITE)
		quorum_fence_many(node, keys, n, sent, counts, st, res, ok, result, have);
	for (int j = 0; j < n; j++)
		status[j] = ok[j] &&
			(mode == RW_READ || have[j] >= rw_quorum_majority(node)) &&
			quorum_in_time(node, started) ? RW_GRANTED : RW_ACQ_FAILED;
}

/*
 * A member's renewal failed: noted, and the first failure (an interrupt
 * first of all) kept in *err.
 */
static void
quorum_renew_failed(RwNode *node, int m, const RwError *merr, RwError *err)
{
	rw_quorum_failed(node, m, merr);
	if (err->kind == RW_OK || merr->kind == RW_ERR_INTERRUPTED)
		*err = *merr;
}

/*
 * Renew n holds on every member of a quorum (on a plain node or a cluster:
 * rw_cluster_renew). Each hold is judged on its own: held[i] is 1 if a
 * majority of members renewed hold i (its lease runs lease_ms[i] from when
 * this was called), 0 if so many members no longer have it that no majority
 * can, -1 if neither (too few members answered for it: the caller tries it
 * again; its lease runs out unless a later renewal finds a majority). One
 * undecided hold never costs the others their result: those renewed are
 * renewed, on the members and in the caller's records alike. Returns false,
 * with *err, only when no hold was decided. Never throws.
 */
bool
rw_quorum_renew(RwNode *node, RwKeys **keys, const char *const *owners,
				const uint64 *seqs, const int *lease_ms, int n, int *held,
				RwError *err)
{
	RwQuorum   *q = node->quorum;
	int		   *yes = palloc0(sizeof(int) * n);
	int		   *no = palloc0(sizeof(int) * n);
	int		   *one = palloc(sizeof(int) * n);
	RwRenewCall rcs[RW_QUORUM_MAX];
	bool		sent[RW_QUORUM_MAX];
	int			order[RW_QUORUM_MAX];
	int64		until;
	int64		cap;
	int			maj;
	bool		decided = false;

	if (q == NULL)
		return rw_cluster_renew(node, keys, owners, seqs, lease_ms, n, held, err);
	maj = rw_quorum_majority(node);
	err->kind = RW_OK;
	/* Sent to all first, then each answer read (see timing above). */
	cap = rw_quorum_sending(node, false, order, &until);
	for (int k = 0; k < q->n; k++)
	{
		int			m = order[k];
		RwError		merr;

		sent[m] = false;
		if (!rw_quorum_may_ask_round(node, m))
			continue;
		if (!rw_quorum_may_send(node, m, until, &merr))
		{
			if (err->kind == RW_OK)
				*err = merr;
			continue;
		}
		sent[m] = rw_proto_renew_send(&q->member[m]->cmd, keys, owners, seqs,
									  lease_ms, n, &rcs[m], &merr);
		if (!sent[m])
			quorum_renew_failed(node, m, &merr, err);
	}
	rw_conn_restore(cap);
	cap = rw_quorum_reading();
	for (int m = 0; m < q->n; m++)
	{
		RwError		merr;

		if (!sent[m])
			continue;
		if (!rw_proto_renew_collect(&q->member[m]->cmd, &rcs[m], one, NULL, &merr))
		{
			quorum_renew_failed(node, m, &merr, err);
			continue;
		}
		for (int i = 0; i < n; i++)
		{
			yes[i] += one[i] == 1;
			no[i] += one[i] == 0;
		}
	}
	rw_conn_restore(cap);
	for (int i = 0; i < n; i++)
	{
		held[i] = yes[i] >= maj ? 1 : (q->n - no[i] < maj ? 0 : -1);
		decided |= held[i] >= 0;
	}
	if (!decided && err->kind != RW_ERR_INTERRUPTED)
	{
		RwError		first = *err;

		err->kind = first.kind == RW_OK ? RW_ERR_LOST : first.kind;
		snprintf(err->msg, sizeof(err->msg),
				 "too few of the %d Redis nodes of the quorum renewed the leases (%d needed)%s%s",
				 q->n, maj, first.kind != RW_OK ? "; first failure: " : "",
				 first.kind != RW_OK ? first.msg : "");
	}
	pfree(yes);
	pfree(no);
	pfree(one);
	return decided;
}

/* ---------------------------------------------------------------------
 * The lock as the quorum has it (redis_lock_info)
 * --------------------------------------------------------------------- */

/* A role's list in a member's view: 0 writer, 1 readers, 2 waiting. */
static int
quorum_role(RwLockInfo *view, int role, char ***owners, int64 **ms)
{
	if (role == 0)
	{
		*owners = &view->writer;
		*ms = &view->writer_ms;
		return view->writer != NULL ? 1 : 0;
	}
	*owners = role == 1 ? view->readers : view->waiting;
	*ms = role == 1 ? view->reader_ms : view->waiting_ms;
	return role == 1 ? view->nreaders : view->nwaiting;
}

/*
 * The owners that a majority of the views (use[i]) list in a role, in the
 * order the first view listing each has them, each with the time until
 * fewer than a majority would list it: the majority-th longest of the
 * times the views give (fanout.c's tally). Returns how many.
 */
static int
quorum_agreed(RwNode *node, RwLockInfo *views, const bool *use, int role,
			  char ***owners_out, int64 **ms_out)
{
	RwTally		t;

	rw_tally_init(&t);
	for (int i = 0; i < node->quorum->n; i++)
	{
		char	  **owners;
		int64	   *ms;
		int			n = use[i] ? quorum_role(&views[i], role, &owners, &ms) : 0;

		for (int k = 0; k < n; k++)
			rw_tally_add(&t, owners[k], strlen(owners[k]), ms[k]);
	}
	return rw_tally_agreed(&t, rw_quorum_majority(node), owners_out, ms_out);
}

/*
 * The lock as the quorum has it, from every member's view asked in one
 * round (see timing above): the writer, the readers and the waiting
 * writers are those a majority of the members that count list so (a
 * member restarted lately may have forgotten holds; its view is not
 * listened to), each with the time until fewer than a majority would list
 * it; the token is the largest any member has. False, with *err, if fewer
 * than a majority of the members answered and count. Never throws.
 */
bool
rw_quorum_info(RwNode *node, const RwKeys *keys, RwLockInfo *info, RwError *err)
{
	RwQuorum   *q = node->quorum;
	RwScriptCall calls[RW_QUORUM_MAX];
	RwLockInfo	views[RW_QUORUM_MAX];
	RwVote		votes[RW_QUORUM_MAX];
	bool		use[RW_QUORUM_MAX];
	int			order[RW_QUORUM_MAX];
	int			answered = 0;
	char	  **writer;
	int64	   *writer_ms;
	int64		until;
	int64		cap = rw_quorum_sending(node, false, order, &until);

	for (int k = 0; k < q->n; k++)
	{
		int			i = order[k];
		RwVote	   *v = &votes[i];

		memset(v, 0, sizeof(*v));
		v->status = RW_ACQ_FAILED;
		if (!rw_quorum_may_ask_round(node, i))
		{
			v->err.kind = RW_ERR_CONNECT;
			strlcpy(v->err.msg, "not asked (it failed a moment ago)", sizeof(v->err.msg));
			continue;
		}
		if (!rw_quorum_may_send(node, i, until, &v->err))
			continue;
		if (!quorum_ready(node, i, &v->err) ||
			!rw_proto_info_send(&q->member[i]->cmd, keys, &calls[i], &v->err))
		{
			rw_quorum_failed(node, i, &v->err);
			continue;
		}
		v->sent = true;
		v->counts = rw_quorum_counts(node, i, NULL);
	}
	rw_conn_restore(cap);
	cap = rw_quorum_reading();
	memset(info, 0, sizeof(*info));
	for (int i = 0; i < q->n; i++)
	{
		use[i] = false;
		if (!votes[i].sent)
			continue;
		if (!rw_proto_info_collect(&q->member[i]->cmd, &calls[i], &views[i],
								   &votes[i].err))
		{
			rw_quorum_failed(node, i, &votes[i].err);
			continue;
		}
		votes[i].status = RW_GRANTED;	/* here: answered */
		info->token = Max(info->token, views[i].token);
		use[i] = votes[i].counts;
		answered += use[i];
	}
	rw_conn_restore(cap);
	if (answered < rw_quorum_majority(node))
	{
		quorum_failure(node, votes, answered, err);
		return false;
	}
	if (quorum_agreed(node, views, use, 0, &writer, &writer_ms) > 0)
	{
		info->writer = writer[0];
		info->writer_ms = writer_ms[0];
	}
	info->nreaders = quorum_agreed(node, views, use, 1, &info->readers,
								   &info->reader_ms);
	info->nwaiting = quorum_agreed(node, views, use, 2, &info->waiting,
								   &info->waiting_ms);
	strlcpy(info->state, info->writer ? "write" : info->nreaders > 0 ? "read" : "free",
			sizeof(info->state));
	return true;
}
