/*-------------------------------------------------------------------------
 *
 * held.c
 *	  The table of this session's holds: stacking, modes, transaction-level
 *	  holds and savepoints, deferred releases, release at session end.
 *
 * Each name held has one entry with counts per level (session, xact) and
 * mode. What Redis has for the session is the strongest mode held: 'w' if
 * any write hold, else 'r' if any read hold, else nothing. Only a change of
 * that goes to Redis, so a repeat acquisition costs no round trip.
 *
 * With the keeper (keeper.c) each hold in Redis is also published in the
 * shared table: when it is taken (publish), as its modes change, and taken
 * out before it is released in Redis (unpublish). The keeper renews it and
 * flags it lost; refresh() picks that up before each use of the hold.
 *
 *-------------------------------------------------------------------------
 */
#include "rwlock.h"

#include "access/xact.h"
#include "storage/proc.h"
#include "storage/ipc.h"
#include "utils/hsearch.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

typedef struct RwHeld
{
	char		name[RW_NAME_MAX + 1];	/* hash key */
	int			count[2][2];	/* [RwLevel][0 read, 1 write] */
	char	   *stack;			/* modes of session holds, oldest first */
	int			stack_len;
	int			stack_cap;
	char		redis_mode;		/* '\0', 'r' or 'w' */
	int64		token;
	TimestampTz acquired;
	TimestampTz renewed;
	int			lease_ms;
	bool		lost;
	int			slot;			/* in the keeper's table, or -1 */
	RwNode	   *node;
	RwKeys		keys;
	MemoryContext cxt;			/* keys and stack */
} RwHeld;

/* An xact-level hold, with the subtransaction level that took it. */
typedef struct RwXactHold
{
	RwHeld	   *held;
	char		mode;
	int			level;
} RwXactHold;

/* A release that could not be done when due; done before the node's next use. */
typedef struct RwDeferred
{
	RwNode	   *node;
	RwKeys		keys;
	char		keep;
	struct RwDeferred *next;
} RwDeferred;

/*
 * A release sent at transaction end whose answer is read later (see
 * sync_release). It keeps the hold's memory context, with its keys, until
 * the answer is read, or the connection it went on is found lost and it
 * becomes a deferred release.
 */
typedef struct RwSent
{
	RwNode	   *node;
	uint32		epoch;			/* of node->cmd when it was sent */
	char	   *name;
	RwKeys		keys;
	MemoryContext cxt;
	struct RwSent *next;
} RwSent;

static HTAB *held_table = NULL;
static RwSent *sent_head = NULL;	/* oldest first */
static RwSent *sent_tail = NULL;
static RwXactHold *xact_holds = NULL;
static int	n_xact = 0;
static int	cap_xact = 0;
static RwDeferred *deferred = NULL;
static TimestampTz next_renewal = DT_NOEND;	/* earliest renewal due */

static char
level_mode(RwHeld *h, RwLevel level)
{
	return h->count[level][1] > 0 ? 'w' : h->count[level][0] > 0 ? 'r' : '\0';
}

/* ---- the keeper's view of this session's holds (keeper.c) ---- */

/* Publish a hold just taken (again) in Redis; a no-op without the keeper. */
static void
publish(RwHeld *h)
{
	h->slot = rw_keeper_publish(h->slot, h->name, h->node->ep.url,
								h->keys.key[0], rw_owner_id(), h->token,
								h->acquired, h->renewed, h->lease_ms);
}

static void
publish_modes(RwHeld *h)
{
	if (h->slot >= 0)
		rw_keeper_set_modes(h->slot, level_mode(h, RW_SESSION),
							level_mode(h, RW_XACT));
}

/* Before a hold is released in Redis: the keeper must not renew it after. */
static void
unpublish(RwHeld *h)
{
	if (h->slot >= 0)
		rw_keeper_unpublish(h->slot);
	h->slot = -1;
}

/* What the keeper learnt: renewals, and whether the hold was lost. */
static void
refresh(RwHeld *h)
{
	if (h->slot >= 0 && rw_keeper_state(h->slot, &h->renewed))
		h->lost = true;
}

static char
wanted_mode(RwHeld *h)
{
	if (h->count[RW_SESSION][1] + h->count[RW_XACT][1] > 0)
		return 'w';
	if (h->count[RW_SESSION][0] + h->count[RW_XACT][0] > 0)
		return 'r';
	return '\0';
}

static bool
covers(char have, char want)
{
	return have == 'w' || (have == 'r' && want == 'r');
}

void
rw_defer_release(RwNode *node, const RwKeys *keys, char keep)
{
	MemoryContext old = MemoryContextSwitchTo(TopMemoryContext);
	RwDeferred *d = palloc0(sizeof(RwDeferred));

	d->node = node;
	for (int i = 0; i < 3; i++)
	{
		d->keys.key[i] = pstrdup(keys->key[i]);
		d->keys.len[i] = keys->len[i];
	}
	d->keys.channel = pstrdup(keys->channel);
	d->keys.channel_len = keys->channel_len;
	d->keep = keep;
	d->next = deferred;
	deferred = d;
	node->nholds++;
	MemoryContextSwitchTo(old);
}

/* Run the deferred releases of a node; those that fail stay for later. */
static void
run_deferred(RwNode *node, int flags)
{
	RwDeferred **link = &deferred;

	while (*link != NULL)
	{
		RwDeferred *d = *link;
		RwError		err;

		if (d->node != node ||
			rw_proto_release(&node->cmd, &d->keys, d->keep, rw_lease_ms,
							 RW_NOTHROW, &err) < 0)
		{
			link = &d->next;
			continue;
		}
		*link = d->next;
		rw_free_keys(&d->keys);
		pfree(d);
		node->nholds--;
	}
}

static void
warn_lost(RwHeld *h)
{
	ereport(WARNING,
			(errcode(ERRCODE_WARNING),
			 errmsg("Redis lock \"%s\" was lost", h->name),
			 errdetail("Its lease ran out or Redis lost its data while this session held it.")));
}

static void
forget(RwHeld *h)
{
	RwNode	   *node = h->node;

	unpublish(h);
	if (h->cxt != NULL)
		MemoryContextDelete(h->cxt);
	hash_search(held_table, h->name, HASH_REMOVE, NULL);
	node->nholds--;
	rw_node_forget_if_unused(node);
}

/*
 * Send the release of a hold without waiting for Redis's answer; the hold's
 * memory goes with the record. False if it could not be sent.
 */
static bool
send_release(RwHeld *h)
{
	RwError		err;
	RwSent	   *s;

	if (!rw_proto_release_send(&h->node->cmd, &h->keys, &err))
		return false;
	s = MemoryContextAlloc(h->cxt, sizeof(RwSent));
	s->node = h->node;
	s->epoch = h->node->cmd.epoch;
	s->name = MemoryContextStrdup(h->cxt, h->name);
	s->keys = h->keys;
	s->cxt = h->cxt;
	s->next = NULL;
	if (sent_tail)
		sent_tail->next = s;
	else
		sent_head = s;
	sent_tail = s;
	h->cxt = NULL;
	h->node->nsent++;
	return true;
}

/* Take a settled record out of the list and free it. */
static void
drop_sent(RwSent **link)
{
	RwSent	   *s = *link;
	RwSent	   *prev = NULL;

	for (RwSent *p = sent_head; p != s; p = p->next)
		prev = p;
	*link = s->next;
	if (sent_tail == s)
		sent_tail = prev;
	s->node->nsent--;
	rw_node_forget_if_unused(s->node);
	MemoryContextDelete(s->cxt);
}

/* Settle the records of one node, in the order they were sent. */
static void
settle_node(RwNode *node)
{
	RwConn	   *conn = &node->cmd;
	RwLate	   *late;
	int			nlate = rw_conn_take_late(conn, &late);
	int			i = 0;
	RwSent	  **link = &sent_head;

	while (*link != NULL)
	{
		RwSent	   *s = *link;

		if (s->node != node)
		{
			link = &s->next;
			continue;
		}
		if (i < nlate && late[i].epoch == s->epoch)
		{
			RwError		err;
			int			r = rw_proto_release_result(conn, late[i++].reply,
													RW_NOTHROW, &err);

			if (r == 0)
				ereport(WARNING,
						(errcode(ERRCODE_WARNING),
						 errmsg("Redis lock \"%s\" was lost", s->name),
						 errdetail("Its release at the end of a transaction found that its lease had run out or Redis had lost its data.")));
			else if (r < 0)		/* an error reply, NOSCRIPT included */
				rw_defer_release(node, &s->keys, '\0');
		}
		else if (conn->ctx == NULL || conn->epoch != s->epoch)
			rw_defer_release(node, &s->keys, '\0');	/* never answered */
		else
			break;				/* not answered yet, nor the ones after it */
		drop_sent(link);
	}
	/* Replies arrive in the order sent: none can be left over. */
	Assert(i == nlate);
	for (; i < nlate; i++)
		freeReplyObject(late[i].reply);
	if (late)
		pfree(late);
}

/*
 * Read the answers that have arrived to releases sent at transaction end,
 * without waiting: a hold found lost is reported now; a release whose
 * connection failed before it was answered is done again as a deferred
 * release (harmless if it had run). Never throws.
 */
static void
settle_sent(void)
{
	while (sent_head != NULL)
	{
		RwSent	   *first = sent_head;

		settle_node(first->node);
		if (sent_head == first)
			break;				/* the oldest is not answered yet */
	}
}

/*
 * Bring Redis in line with the holds left after a release. Never throws;
 * returns false if the hold was lost or could not be released (warned).
 *
 * At transaction end a full release is sent without waiting for Redis's
 * answer (send_release): the commit is durable already and the release is
 * on its way before the client hears of the commit, so nothing is gained by
 * making COMMIT wait a round trip. The answer is read before the session's
 * next lock operation (settle_sent), which reports a hold found lost then.
 */
static bool
sync_release(RwHeld *h, bool at_xact_end)
{
	char		want = wanted_mode(h);
	bool		ok;
	RwError		err;

	refresh(h);
	ok = !h->lost;
	if (want == '\0')
		unpublish(h);
	if (!h->lost && want != h->redis_mode && at_xact_end && want == '\0' &&
		send_release(h))
	{
		h->redis_mode = want;
		forget(h);
		return true;
	}
	if (!h->lost && want != h->redis_mode)
	{
		int			r = rw_proto_release(&h->node->cmd, &h->keys, want,
										 h->lease_ms, RW_NOTHROW, &err);

		if (r == 0)
		{
			h->lost = true;
			ok = false;
		}
		else if (r < 0)
		{
			rw_defer_release(h->node, &h->keys, want);
			ereport(WARNING,
					(errcode(ERRCODE_CONNECTION_FAILURE),
					 errmsg("could not release Redis lock \"%s\"", h->name),
					 errdetail("%s; it is released when Redis is reachable again, or when its lease runs out.",
							   err.msg)));
			ok = false;
		}
		h->redis_mode = want;
	}
	if (h->lost && !ok)
		warn_lost(h);
	if (want == '\0')
		forget(h);
	else
		publish_modes(h);
	return ok;
}

static void
push_hold(RwHeld *h, char mode, RwLevel level)
{
	h->count[level][mode == 'w' ? 1 : 0]++;
	if (level == RW_SESSION)
	{
		if (h->stack_len == h->stack_cap)
		{
			h->stack_cap = Max(8, h->stack_cap * 2);
			h->stack = h->stack ? repalloc(h->stack, h->stack_cap) :
				MemoryContextAlloc(h->cxt, h->stack_cap);
		}
		h->stack[h->stack_len++] = mode;
	}
	else
	{
		if (n_xact == cap_xact)
		{
			cap_xact = Max(16, cap_xact * 2);
			xact_holds = xact_holds ? repalloc(xact_holds, cap_xact * sizeof(RwXactHold)) :
				MemoryContextAlloc(TopMemoryContext, cap_xact * sizeof(RwXactHold));
		}
		xact_holds[n_xact].held = h;
		xact_holds[n_xact].mode = mode;
		xact_holds[n_xact].level = GetCurrentTransactionNestLevel();
		n_xact++;
	}
}

static void
ensure_table(void)
{
	HASHCTL		ctl;

	if (held_table != NULL)
		return;
	ctl.keysize = RW_NAME_MAX + 1;
	ctl.entrysize = sizeof(RwHeld);
	ctl.hcxt = TopMemoryContext;
	held_table = hash_create("rwlock held locks", 64, &ctl,
							 HASH_ELEM | HASH_STRINGS | HASH_CONTEXT);
}

/* At the start of each lock operation: the table, and late answers. */
static void
begin_operation(void)
{
	ensure_table();
	if (sent_head != NULL)
		settle_sent();
}

/*
 * At the end of a lock operation: a release sent at transaction end before
 * a command this operation sent on the same connection has its answer read
 * by now, so a lost hold is reported by the operation after the commit.
 */
static void
end_operation(void)
{
	if (sent_head != NULL)
		settle_sent();
}

/* For introspection: read the answers to releases that have arrived. */
void
rw_held_settle(void)
{
	if (sent_head != NULL)
		settle_sent();
}

/*
 * Take a hold of `name`. Goes to Redis only if what Redis has for this
 * session does not cover `mode` (or the hold was lost). wait_ms: -1 waits
 * as lock_timeout allows (55P03 when it runs out); otherwise a try, which
 * returns false when wait_ms runs out.
 */
bool
rw_lock(const char *name, char mode, RwLevel level, long wait_ms,
		bool is_try, int64 *token)
{
	RwHeld	   *h;
	bool		found;

	begin_operation();
	rw_renew_due(false, NULL);
	h = hash_search(held_table, name, HASH_FIND, NULL);
	if (h != NULL)
		refresh(h);
	if (h != NULL && h->lost)
	{
		warn_lost(h);
		h->redis_mode = '\0';
	}
	if (h == NULL || !covers(h->redis_mode, mode))
	{
		RwNode	   *node = h ? h->node : rw_current_node();
		MemoryContext cxt = h ? h->cxt :
			AllocSetContextCreate(TopTransactionContext, "rwlock hold",
								  ALLOCSET_SMALL_SIZES);
		RwKeys		keys;
		char		want = (mode == 'w' || (h && wanted_mode(h) == 'w')) ? 'w' : 'r';
		int64		tok;

		if (h)
			keys = h->keys;
		else
			rw_build_keys(rw_key_prefix, name, &keys, cxt);
		run_deferred(node, 0);
		if (!rw_wait_acquire(node, &keys, name, want, h ? h->redis_mode : '\0',
							 is_try ? wait_ms : (LockTimeout > 0 ? LockTimeout : -1),
							 !is_try, &tok))
		{
			if (!h)
				MemoryContextDelete(cxt);
			end_operation();
			return false;
		}
		if (!h)
		{
			h = hash_search(held_table, name, HASH_ENTER, &found);
			memset(h->count, 0, sizeof(h->count));
			h->stack = NULL;
			h->stack_len = h->stack_cap = 0;
			h->node = node;
			h->keys = keys;
			h->cxt = cxt;
			h->slot = -1;
			MemoryContextSetParent(cxt, TopMemoryContext);
			node->nholds++;
			h->acquired = GetCurrentTimestamp();
		}
		h->redis_mode = want;
		h->token = tok;
		h->renewed = GetCurrentTimestamp();
		h->lease_ms = rw_lease_ms;
		next_renewal = Min(next_renewal,
						   TimestampTzPlusMilliseconds(h->renewed, h->lease_ms / 3));
		h->lost = false;
		publish(h);
	}
	push_hold(h, mode, level);
	publish_modes(h);
	*token = h->token;
	end_operation();
	return true;
}

/* Release the most recent session-level hold of `name`. */
bool
rw_unlock(const char *name)
{
	RwHeld	   *h;
	char		mode;
	bool		ok;

	begin_operation();
	h = hash_search(held_table, name, HASH_FIND, NULL);
	if (h == NULL || h->stack_len == 0)
	{
		ereport(WARNING,
				(errcode(ERRCODE_WARNING),
				 errmsg("you don't own a session-level hold of Redis lock \"%s\"", name)));
		return false;
	}
	run_deferred(h->node, 0);
	mode = h->stack[--h->stack_len];
	h->count[RW_SESSION][mode == 'w' ? 1 : 0]--;
	ok = sync_release(h, false);
	end_operation();
	return ok;
}

/* Release every session-level hold; returns how many holds there were. */
int
rw_unlock_all(void)
{
	HASH_SEQ_STATUS seq;
	RwHeld	   *h;
	RwHeld	  **list;
	int			n = 0,
				holds = 0;

	begin_operation();
	list = palloc(sizeof(RwHeld *) * (hash_get_num_entries(held_table) + 1));
	hash_seq_init(&seq, held_table);
	while ((h = hash_seq_search(&seq)) != NULL)
		if (h->stack_len > 0)
			list[n++] = h;
	for (int i = 0; i < n; i++)
	{
		holds += list[i]->stack_len;
		list[i]->stack_len = 0;
		list[i]->count[RW_SESSION][0] = list[i]->count[RW_SESSION][1] = 0;
		sync_release(list[i], false);
	}
	pfree(list);
	return holds;
}

/* Release the xact-level holds taken at nest level `level` or deeper. */
static void
release_xact_holds(int level)
{
	while (n_xact > 0 && xact_holds[n_xact - 1].level >= level)
	{
		RwXactHold *x = &xact_holds[--n_xact];

		x->held->count[RW_XACT][x->mode == 'w' ? 1 : 0]--;
		/* Sync once per entry, when its last record at this depth goes. */
		if (n_xact == 0 || xact_holds[n_xact - 1].held != x->held ||
			xact_holds[n_xact - 1].level < level)
			sync_release(x->held, true);
	}
}

static void
xact_callback(XactEvent event, void *arg)
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
			rw_abandon_wait();
			/* FALLTHROUGH */
		case XACT_EVENT_COMMIT:
		case XACT_EVENT_PARALLEL_COMMIT:
			/* After the commit is durable and visible; never throws. */
			release_xact_holds(0);
			break;
		default:
			break;
	}
}

static void
subxact_callback(SubXactEvent event, SubTransactionId mySubid,
				 SubTransactionId parentSubid, void *arg)
{
	int			level = GetCurrentTransactionNestLevel();

	if (event == SUBXACT_EVENT_ABORT_SUB)
	{
		rw_abandon_wait();
		release_xact_holds(level);
	}
	else if (event == SUBXACT_EVENT_COMMIT_SUB)
	{
		for (int i = n_xact - 1; i >= 0 && xact_holds[i].level >= level; i--)
			xact_holds[i].level = level - 1;
	}
}

/* Session end: every hold goes, at once. */
static void
at_exit(int code, Datum arg)
{
	HASH_SEQ_STATUS seq;
	RwHeld	   *h;

	rw_abandon_wait();
	n_xact = 0;
	if (held_table == NULL)
		return;
	settle_sent();
	hash_seq_init(&seq, held_table);
	while ((h = hash_seq_search(&seq)) != NULL)
	{
		memset(h->count, 0, sizeof(h->count));
		h->stack_len = 0;
		unpublish(h);
		if (!h->lost && h->redis_mode != '\0')
		{
			RwError		err;

			(void) rw_proto_release(&h->node->cmd, &h->keys, '\0', 0,
									RW_NOTHROW, &err);
		}
	}
	for (RwNode *n = rw_first_node(); n != NULL; n = n->next)
		run_deferred(n, RW_NOTHROW);
}

void
rw_held_init(void)
{
	RegisterXactCallback(xact_callback, NULL);
	RegisterSubXactCallback(subxact_callback, NULL);
	before_shmem_exit(at_exit, (Datum) 0);
}

/*
 * Renew the leases of holds past a third of their lease (all of them with
 * all), one pipelined batch per node. Without the keeper this, run at every
 * rwlock call, is what keeps leases alive; with the keeper running it only
 * renews the holds the keeper's table had no room for, and redis_renew()
 * (all) renews everything. Returns the holds renewed; *nlost (if not NULL)
 * gets those found lost. With all, each lost hold gives a WARNING.
 */
int
rw_renew_due(bool all, int *nlost)
{
	HASH_SEQ_STATUS seq;
	RwHeld	   *h;
	TimestampTz now = GetCurrentTimestamp();
	bool		keeper;
	int			nrenewed = 0;

	if (nlost)
		*nlost = 0;
	if (held_table == NULL || (!all && now < next_renewal))
		return 0;
	keeper = !all && rw_keeper_running();
	next_renewal = DT_NOEND;
	for (RwNode *node = rw_first_node(); node != NULL; node = node->next)
	{
		RwHeld	  **due = palloc(sizeof(RwHeld *) * (hash_get_num_entries(held_table) + 1));
		RwKeys	  **keys = palloc(sizeof(RwKeys *) * (hash_get_num_entries(held_table) + 1));
		int		   *lease = palloc(sizeof(int) * (hash_get_num_entries(held_table) + 1));
		int		   *held;
		int			n = 0;
		RwError		err;

		hash_seq_init(&seq, held_table);
		while ((h = hash_seq_search(&seq)) != NULL)
		{
			if (h->node != node || h->redis_mode == '\0')
				continue;
			refresh(h);
			if (h->lost)
			{
				if (all)
				{
					warn_lost(h);
					if (nlost)
						(*nlost)++;
				}
				continue;
			}
			if (!all && ((keeper && h->slot >= 0) ||
						 now < TimestampTzPlusMilliseconds(h->renewed, h->lease_ms / 3)))
			{
				/* Should the keeper stop, this session takes over from here. */
				next_renewal = Min(next_renewal,
								   TimestampTzPlusMilliseconds(h->renewed, h->lease_ms / 3));
				continue;
			}
			due[n] = h;
			keys[n] = &h->keys;
			lease[n++] = h->lease_ms;
		}
		if (n > 0)
		{
			held = palloc(sizeof(int) * n);
			if (!rw_proto_renew_batch(&node->cmd, keys, lease, n, held, 0, &err))
			{
				next_renewal = 0;	/* try again at the next call */
				rw_raise(&node->cmd, &err);
			}
			for (int i = 0; i < n; i++)
			{
				if (held[i] == 1)
				{
					due[i]->renewed = now;
					rw_keeper_renewed(due[i]->slot, now, false);
					next_renewal = Min(next_renewal,
									   TimestampTzPlusMilliseconds(now, due[i]->lease_ms / 3));
					nrenewed++;
				}
				else if (held[i] == 0)
				{
					due[i]->lost = true;
					rw_keeper_renewed(due[i]->slot, now, true);
					if (all)
						warn_lost(due[i]);
					if (nlost)
						(*nlost)++;
				}
			}
			pfree(held);
		}
		pfree(due);
		pfree(keys);
		pfree(lease);
	}
	return nrenewed;
}

/* Rows of redis_held_locks: one per (name, level, mode) with holds. */
int
rw_held_rows(RwHeldRow **rows)
{
	HASH_SEQ_STATUS seq;
	RwHeld	   *h;
	int			n = 0;

	ensure_table();
	*rows = palloc(sizeof(RwHeldRow) * 4 * (hash_get_num_entries(held_table) + 1));
	hash_seq_init(&seq, held_table);
	while ((h = hash_seq_search(&seq)) != NULL)
	{
		refresh(h);
		for (int level = 0; level < 2; level++)
			for (int m = 1; m >= 0; m--)
			{
				RwHeldRow  *r;

				if (h->count[level][m] == 0)
					continue;
				r = &(*rows)[n++];
				r->name = pstrdup(h->name);
				r->mode = m ? 'w' : 'r';
				r->level = (RwLevel) level;
				r->depth = h->count[level][m];
				r->token = h->token;
				r->acquired = h->acquired;
				r->lost = h->lost;
				r->lease_until = TimestampTzPlusMilliseconds(h->renewed, h->lease_ms);
			}
	}
	return n;
}

/* Validate a lock name argument and copy it, NUL-terminated, into buf. */
void
rw_check_name(text *name, char *buf)
{
	int			len = VARSIZE_ANY_EXHDR(name);

	if (len == 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("Redis lock name must not be empty")));
	if (len > RW_NAME_MAX)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("Redis lock name is too long"),
				 errdetail("It is %d bytes; the limit is %d bytes.", len, RW_NAME_MAX)));
	memcpy(buf, VARDATA_ANY(name), len);
	buf[len] = '\0';
}
