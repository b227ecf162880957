/*-------------------------------------------------------------------------
 *
 * walk.c
 *	  The walk of the wait-for graph from a wait of this session
 *	  (docs/protocol.md section 18): hop by hop, each lock asked on the node
 *	  that serves it, to a cycle back to the waiter or to the end of every
 *	  path; then the cycle checked edge by edge, its victim picked, and
 *	  marked if it is another waiter.
 *
 * From the waiter's lock, waits.lua names its blockers (holders, and
 * writers queued ahead); the wait key of each (read with checkin.lua)
 * says what that one waits for, and waits.lua there checks that it really
 * does: its intent or mark is live, and a session of this server must
 * also wait there by its row in shared memory (waiters.c, with the
 * library preloaded), as a wait cut off in a stall can leave its key and
 * intent behind for their short leases. Every owner is visited once, whatever their number: a lock read
 * by many idle owners does not hide a cycle behind them.
 *
 * A walk reports a gap whenever something could not be said: a call that
 * failed or went unanswered, a quorum's members too few to decide
 * (fanout.c), a key that says an owner waits where the lock shows no live
 * intent or mark (its wait just ended, or it has not run for a while: it
 * renews them at its next try), a marked key, the hop limit, or the walk's
 * time (deadlock.c gives it a deadline within the waiter's intent). The
 * caller does the walk again later; a gap is never "no cycle". The
 * session's leases are renewed between hops when due.
 *
 * A cycle found is checked edge by edge once more, and then every other
 * member that shared memory does not show waiting must show a fresh sign
 * of life (its intent or mark renewed, walk_alive), which a wait cut off
 * in a stall never shows; until then the check is incomplete. Then the
 * cycle's victim is its member with the greatest owner id, the same
 * whoever finds it; if that is another waiter, its key is marked
 * (mark.lua) and it walks again itself before it fails.
 *
 *-------------------------------------------------------------------------
 */
#include "rwlock.h"

#include "lib/stringinfo.h"
#include "utils/memutils.h"

#define WALK_MAX_DEPTH	256		/* the longest cycle looked for; a longer
								 * path leaves a gap (the walk is repeated) */

static RwNode *walk_node;		/* the node of the walk in progress */

/* One hop of a walk: `owner` waits for `key` in `mode`, blocked by next. */
typedef struct WalkHop
{
	char	   *owner;
	char	   *as;				/* the owner that waits in the lock: owner,
								 * or another of the same task (a client's
								 * holder waiting through a new owner id) */
	char	   *value;			/* its wait key's value */
	char		mode;			/* 'r' or 'w' */
	char	   *key;
} WalkHop;


/* <prefix>:wait:{<owner>}, braces in the owner percent-encoded. */
char *
rw_wait_key_of(const char *owner)
{
	StringInfoData buf;

	initStringInfo(&buf);
	appendStringInfo(&buf, "%s:wait:{", rw_key_prefix);
	for (const char *p = owner; *p; p++)
	{
		if (*p == '%')
			appendStringInfoString(&buf, "%25");
		else if (*p == '{')
			appendStringInfoString(&buf, "%7B");
		else if (*p == '}')
			appendStringInfoString(&buf, "%7D");
		else
			appendStringInfoChar(&buf, *p);
	}
	appendStringInfoChar(&buf, '}');
	return buf.data;
}


/*
 * Parse a wait key's value "3 <r|w> <nonce>[@<owner>] <lock key>", 3 being
 * RW_PROTOCOL_VERSION: false if it is of another protocol version (ignored:
 * no edge), marked, or malformed. *as: the owner after '@', which waits in
 * the lock on behalf of the key's owner (a client's task holding with one
 * owner id and waiting with another); else NULL.
 */
static bool
walk_parse_value(const char *value, char *mode, char **key, char **as)
{
	const char *p;
	const char *nonce;
	const char *at;

	if (strncmp(value, RW_PROTOCOL_VERSION " ", strlen(RW_PROTOCOL_VERSION) + 1) != 0)
		return false;
	p = value + strlen(RW_PROTOCOL_VERSION) + 1;
	if ((p[0] != 'r' && p[0] != 'w') || p[1] != ' ')
		return false;
	*mode = p[0];
	nonce = p + 2;
	p = strchr(nonce, ' ');
	if (p == NULL || p[1] == '\0')
		return false;
	at = memchr(nonce, '@', p - nonce);
	*as = at ? pnstrdup(at + 1, p - at - 1) : NULL;
	*key = pstrdup(p + 1);
	return true;
}


/*
 * The value of an owner's wait key (held by a majority of a quorum), or
 * NULL: none, or undecided (a gap: *gap set).
 */
static char *
walk_get_wait(const char *owner, bool *gap)
{
	char	   *wkey = rw_wait_key_of(owner);
	const char *k[1] = {wkey};
	size_t		klen[1] = {strlen(wkey)};
	const char *args[3] = {RW_PROTOCOL_VERSION, "", "0"};
	RwFan		f;
	char	   *v = NULL;
	int			best = 0;

	rw_fan_script(&f, walk_node, RW_SCRIPT_CHECKIN, 1, k, klen, 3, args);
	for (int i = 0; i < f.n && v == NULL; i++)
	{
		int			same = 0;

		if (f.r[i] == NULL || f.r[i]->type != REDIS_REPLY_STRING)
			continue;
		for (int j = i; j < f.n; j++)
			same += f.r[j] != NULL && f.r[j]->type == REDIS_REPLY_STRING &&
				f.r[j]->len == f.r[i]->len &&
				memcmp(f.r[j]->str, f.r[i]->str, f.r[i]->len) == 0;
		best = Max(best, same);
		if (same >= f.need)
			v = pnstrdup(f.r[i]->str, f.r[i]->len);
	}
	if (v == NULL && rw_fan_undecided(&f, best))
		*gap = true;
	rw_fan_free(&f);
	return v;
}


/*
 * waits.lua: whether `owner` waits for the lock `key` in `mode` now, and
 * whom it waits for; in quorum mode, what a majority of the members says.
 * With `walker` (a walk's own owner), a writer's blockers leave out the
 * writers queued ahead of it but the walker (waits.lua ARGV[4]): whatever
 * blocks them blocks it, so a walk loses no cycle, and a walk behind a long
 * queue costs one call instead of a wait key read per writer ahead (without
 * the waiters' table in shared memory, nothing else tells it they wait
 * there). -1 when Redis could not say; *gap set when some of it is
 * undecided (a liveness or an edge the members that did not answer could
 * still make).
 */
static int
walk_blockers_of(const char *key, const char *owner, char mode,
				 const char *walker, char ***out, int *nout, bool *gap)
{
	RwKeys		keys;
	RwFan		f;
	char		m[2] = {mode, '\0'};
	const char *args[4] = {RW_PROTOCOL_VERSION, owner, m, walker};
	int			live = 0;
	RwTally		t;

	*nout = 0;
	*out = NULL;
	rw_tally_init(&t);
	rw_fan_keys_of(key, &keys);
	rw_fan_script(&f, walk_node, RW_SCRIPT_WAITS, RW_NKEYS,
				  (const char *const *) keys.key, keys.len,
				  walker != NULL ? 4 : 3, args);
	for (int k = 0; k < f.n; k++)
	{
		redisReply *r = f.r[k];

		if (r == NULL)
			continue;
		if (r->type != REDIS_REPLY_ARRAY || r->elements < 1 ||
			r->element[0]->type != REDIS_REPLY_INTEGER)
		{
			f.missing++;		/* nonsense: as good as no answer */
			continue;
		}
		if (r->element[0]->integer == 1)
		{
			live++;
			for (size_t i = 1; i < r->elements; i++)
				if (r->element[i]->type == REDIS_REPLY_STRING)
					rw_tally_add(&t, r->element[i]->str, r->element[i]->len, 0);
		}
	}
	rw_fan_free(&f);
	if (f.missing == f.size)
	{
		if (!f.version)
			*gap = true;
		return -1;
	}
	if (live < f.need)
	{
		if (rw_fan_undecided(&f, live))
			*gap = true;
		return 0;
	}
	*nout = rw_tally_agreed(&t, f.need, out, NULL);
	for (int i = 0; i < t.n; i++)
		if (rw_fan_undecided(&f, t.items[i].count))
			*gap = true;
	return 1;
}

/*
 * The same for redis_blocking_pids (deadlock.c), asked through `node`:
 * whom `owner`, waiting for `key` in `mode`, waits for; false when it does
 * not wait there, or Redis could not say.
 */
bool
rw_walk_blockers(RwNode *node, const char *key, const char *owner, char mode,
				 char ***out, int *nout)
{
	bool		gap = false;

	walk_node = node;
	return walk_blockers_of(key, owner, mode, NULL, out, nout, &gap) > 0;
}


/* ---------------------------------------------------------------------
 * The walk
 * --------------------------------------------------------------------- */

typedef struct Walk
{
	WalkHop	   *path;			/* WALK_MAX_DEPTH hops */
	int			depth;
	char	  **visited;		/* every owner met: no cap */
	int			nvisited;
	int			maxvisited;
	bool		foreign;		/* met an owner that does not walk itself */
	bool		gap;			/* something could not be said */
	int64		until;			/* the walk's time is up then */
	uint32		seen;			/* a hash of the owners and waits met */
	char	  **first_blockers; /* ours, for the log */
	int			nfirst;
} Walk;

static bool
walk_visited(Walk *w, const char *owner)
{
	for (int i = 0; i < w->nvisited; i++)
		if (strcmp(w->visited[i], owner) == 0)
			return true;
	return false;
}

static void
walk_visit(Walk *w, char *owner)
{
	if (w->nvisited == w->maxvisited)
	{
		w->maxvisited *= 2;
		w->visited = repalloc(w->visited, sizeof(char *) * w->maxvisited);
	}
	w->visited[w->nvisited++] = owner;
}

/* FNV-1a over what a walk met, to tell a walk that found nothing new. */
static void
walk_seen(Walk *w, const char *s)
{
	for (; *s; s++)
		w->seen = (w->seen ^ (uint8) *s) * 16777619;
	w->seen = (w->seen ^ 0xff) * 16777619;
}

/*
 * Depth first from path[depth - 1]: true when a blocker is us, the cycle
 * then being path[0 .. depth - 1]. Whatever could not be said (a call
 * that failed, a key that says an owner waits where the lock does not
 * show it, the depth limit, the walk's time) sets w->gap.
 */
static bool
walk_search(Walk *w)
{
	WalkHop	   *hop = &w->path[w->depth - 1];
	char	  **blockers;
	int			n;
	int			live;

	live = walk_blockers_of(hop->key, hop->as, hop->mode, rw_owner_id(),
							&blockers, &n, &w->gap);
	if (live == 0)
	{
		/*
		 * Its wait key says it waits here, but the lock has no live intent
		 * or mark of it: its wait just ended (its key goes next), or it did
		 * not run for a while (a paused backend, a stalled client) and will
		 * renew them at its next try. Not "no edge" yet.
		 */
		w->gap = true;
		return false;
	}
	if (live < 0)
		return false;
	if (w->depth == 1)
	{
		w->first_blockers = blockers;
		w->nfirst = n;
	}
	for (int i = 0; i < n; i++)
	{
		char	   *b = blockers[i];
		char	   *value;
		WalkHop	   *next;

		if (strcmp(b, rw_owner_id()) == 0)
			return true;
		if (walk_visited(w, b))
			continue;
		if (rw_now_ms() >= w->until)
		{
			w->gap = true;
			return false;
		}
		/* A long walk must not cost the session its other holds. */
		rw_renew_due(false, NULL);
		walk_visit(w, b);
		walk_seen(w, b);
		if (strncmp(b, "pg:", 3) != 0)
			w->foreign = true;
		/*
		 * A writer waiting for the lock this hop's writer waits for:
		 * whatever blocks it blocks this hop too (waits.lua: the writer
		 * holding, the readers, the writers ahead of it, the readers in
		 * their turn), so nothing is reached through it that this hop's
		 * other blockers do not reach. Those queued ahead waits.lua leaves
		 * out itself (walk_blockers_of); one that is also a reader (an
		 * upgrade) is skipped here: known from shared memory for a session
		 * of this server (no call at all), else from its wait key (no
		 * waits.lua).
		 */
		if (hop->mode == 'w' && rw_waiters_local_mode(b, hop->key) == 'w')
			continue;
		if (w->depth == WALK_MAX_DEPTH)
		{
			w->gap = true;
			continue;
		}
		if ((value = walk_get_wait(b, &w->gap)) == NULL)
			continue;
		walk_seen(w, value);
		if (value[0] == '!')
		{
			/* Marked: it fails or finds the mark stale at its next check. */
			w->gap = true;
			continue;
		}
		next = &w->path[w->depth];
		if (!walk_parse_value(value, &next->mode, &next->key, &next->as))
			continue;
		if (hop->mode == 'w' && next->mode == 'w' && next->as == NULL &&
			strcmp(next->key, hop->key) == 0)
			continue;			/* as above */
		if (!rw_waiters_waits(b, next->key))
			continue;
		next->owner = b;
		if (next->as == NULL)
			next->as = b;
		else if (strncmp(next->as, "pg:", 3) != 0)
			w->foreign = true;
		next->value = value;
		w->depth++;
		if (walk_search(w))
			return true;
		w->depth--;
	}
	return false;
}

/* Every edge of the cycle once more: still there? */
static bool
walk_recheck(Walk *w)
{
	for (int i = 0; i < w->depth; i++)
	{
		WalkHop	   *hop = &w->path[i];
		const char *next = i + 1 < w->depth ? w->path[i + 1].owner : rw_owner_id();
		char	  **blockers;
		int			n;
		bool		found = false;

		if (i > 0)
		{
			char	   *value = walk_get_wait(hop->owner, &w->gap);

			if (value == NULL || strcmp(value, hop->value) != 0 ||
				!rw_waiters_waits(hop->owner, hop->key))
				return false;
		}
		if (walk_blockers_of(hop->key, hop->as, hop->mode, rw_owner_id(),
							 &blockers, &n, &w->gap) <= 0)
		{
			w->gap = true;		/* as in walk_search: not "no edge" yet */
			return false;
		}
		for (int j = 0; j < n && !found; j++)
			found = strcmp(blockers[j], next) == 0;
		if (!found)
			return false;
	}
	return true;
}

/* ---------------------------------------------------------------------
 * Signs of life
 *
 * A wait cut off in a stall (its call's connection closed) leaves its
 * wait key and its intent or mark in Redis, looking live until their
 * leases end, and the session owes their withdrawal until its next call,
 * which an idle session may never make (the keeper makes it for a session
 * of a server that preloads the library, waiters.c). So before a walker
 * acts on a cycle (fails itself, or marks the victim), every other member
 * that shared memory does not show waiting (rw_waiters_confirms) must show
 * a fresh sign of life: its intent or mark's end must move forward. A
 * live waiter renews it at each try, at least every RW_INTENT_MS / 2
 * (waiting.c; the clients the same), and tries at once when woken on its
 * channel, which the first look does (a PUBLISH, as a release's); a
 * leftover renews nothing, and lapses within RW_INTENT_MS. Until every
 * member has moved, the check is incomplete (a gap: the walk is done again
 * soon, rw_walk_confirming), never "no cycle". What was read is kept
 * while the same cycle is found (the same waits: owners and wait key
 * values) at most WALK_LIFE_STALE_MS apart; in a quorum, a member's end is
 * compared on the same quorum member only.
 * --------------------------------------------------------------------- */

#define WALK_LIFE_STALE_MS	(RW_INTENT_MS / 2)	/* a look older than this
												 * is taken afresh */

static struct
{
	char	   *sig;			/* the cycle's waits, or NULL */
	int			n;				/* its hops */
	int64		at;				/* when they were last looked at */
	int64	  (*ends)[RW_QUORUM_MAX];	/* per hop, per quorum member: the
										 * intent or mark's end; -1 unread */
	bool	   *alive;			/* per hop: a sign of life seen */
} life;

static MemoryContext life_cxt = NULL;
static bool walk_confirming = false;	/* the last walk awaits a sign */

/*
 * The end of hop's intent (a writer) or mark (a reader) in its lock, on
 * each member that serves it (ends[member], else -1; 0 when none), by
 * HGET; with wake, a wake-up is published on the channel the waiter
 * listens on (its own for a writer, the lock's for a reader), so that a
 * live one tries, and renews it, at once. Returns how many members
 * answered. A failure is served as a fan-out's (fanout.c): the check is
 * then incomplete.
 */
static int
walk_ends_of(const WalkHop *hop, bool wake, int64 *ends)
{
	RwConn	   *conns[RW_QUORUM_MAX];
	int			member[RW_QUORUM_MAX];
	char	   *field = psprintf("%c:%s", hop->mode == 'w' ? 'i' : 'm', hop->as);
	char	   *channel = hop->mode == 'w' ?
		psprintf("%s:c:%s", hop->key, hop->as) : psprintf("%s:c", hop->key);
	int			n = rw_fan_conns(walk_node, hop->key, conns, member);
	int			answered = 0;

	for (int q = 0; q < RW_QUORUM_MAX; q++)
		ends[q] = -1;
	for (int k = 0; k < n; k++)
	{
		RwConn	   *conn = conns[k];
		const char *ask[1] = {"ASKING"};
		const char *get[3] = {"HGET", hop->key, field};
		const char *pub[3] = {"PUBLISH", channel, hop->mode == 'w' ? "w" : "r"};
		redisReply *r[3];
		int			nr;
		int			at;
		RwError		err;

		memset(&err, 0, sizeof(err));
		if (!rw_conn_ensure(conn, &err))
		{
			rw_fan_failed(walk_node, conn, member[k], &err);
			continue;
		}
		if (conn->asking)
			rw_append(conn, 1, ask, NULL, NULL);
		at = conn->asking ? 1 : 0;
		rw_append(conn, 3, get, NULL, NULL);
		nr = at + 1;
		if (wake)
		{
			rw_append(conn, 3, pub, NULL, NULL);
			nr++;
		}
		if (!rw_exchange(conn, nr, r, &err))
		{
			rw_fan_failed(walk_node, conn, member[k], &err);
			continue;
		}
		if (r[at]->type == REDIS_REPLY_ERROR)
		{
			rw_error_set(&err, RW_ERR_REPLY, "%s", r[at]->str);
			for (int i = 0; i < nr; i++)
				freeReplyObject(r[i]);
			rw_fan_failed(walk_node, conn, member[k], &err);
			continue;
		}
		ends[Max(member[k], 0)] = r[at]->type == REDIS_REPLY_STRING ?
			strtoi64(r[at]->str, NULL, 10) : 0;
		answered++;
		for (int i = 0; i < nr; i++)
			freeReplyObject(r[i]);
	}
	return answered;
}

/*
 * Whether every other member of the cycle found has shown a sign of life
 * (above); else a gap, and the walk is owed again soon.
 */
static bool
walk_alive(Walk *w)
{
	StringInfoData sig;
	int64		now = rw_now_ms();
	bool		same;
	bool		all = true;

	initStringInfo(&sig);
	for (int i = 0; i < w->depth; i++)
		appendStringInfo(&sig, "%s\t%s\t%s\n", w->path[i].owner,
						 w->path[i].as, w->path[i].value);
	same = life.sig != NULL && strcmp(life.sig, sig.data) == 0 &&
		now - life.at <= WALK_LIFE_STALE_MS;
	if (!same)
	{
		MemoryContext old;

		if (life_cxt == NULL)
			life_cxt = AllocSetContextCreate(TopMemoryContext, "rwlock walk",
											 ALLOCSET_SMALL_SIZES);
		MemoryContextReset(life_cxt);
		old = MemoryContextSwitchTo(life_cxt);
		life.sig = pstrdup(sig.data);
		life.n = w->depth;
		life.ends = palloc(sizeof(*life.ends) * w->depth);
		life.alive = palloc0(sizeof(bool) * w->depth);
		for (int i = 0; i < w->depth; i++)
			for (int q = 0; q < RW_QUORUM_MAX; q++)
				life.ends[i][q] = -1;
		MemoryContextSwitchTo(old);
	}
	for (int i = 1; i < w->depth; i++)
	{
		WalkHop    *hop = &w->path[i];
		int64		ends[RW_QUORUM_MAX];

		if (life.alive[i])
			continue;
		if (rw_waiters_confirms(hop->as, hop->key))
		{
			life.alive[i] = true;
			continue;
		}
		if (walk_ends_of(hop, !same, ends) > 0)
		{
			for (int q = 0; q < RW_QUORUM_MAX; q++)
			{
				if (ends[q] < 0)
					continue;
				if (life.ends[i][q] >= 0 && ends[q] > life.ends[i][q])
					life.alive[i] = true;
				life.ends[i][q] = ends[q];
			}
		}
		all &= life.alive[i];
	}
	life.at = now;
	if (!all)
	{
		w->gap = true;
		walk_confirming = true;
	}
	return all;
}

/* Whether the last walk found a cycle and awaits its members' signs. */
bool
rw_walk_confirming(void)
{
	return walk_confirming;
}

/*
 * The cycle as the mark carries it: one line per hop,
 * "<owner> <mode> <blocker> <lock key>", the key last (it may hold spaces).
 */
static char *
walk_encode_cycle(Walk *w)
{
	StringInfoData buf;

	initStringInfo(&buf);
	for (int i = 0; i < w->depth; i++)
	{
		const char *next = i + 1 < w->depth ? w->path[i + 1].owner : w->path[0].owner;

		appendStringInfo(&buf, "%s%s %c %s %s", i > 0 ? "\n" : "",
						 w->path[i].owner, w->path[i].mode, next, w->path[i].key);
	}
	return buf.data;
}


/* The member of the cycle every finder picks: the greatest owner id. */
static int
walk_victim(Walk *w)
{
	int			v = 0;

	for (int i = 1; i < w->depth; i++)
		if (strcmp(w->path[i].owner, w->path[v].owner) > 0)
			v = i;
	return v;
}

/*
 * Mark another member as the victim (mark.lua), on every member of a
 * quorum whose key still holds the value read; it re-checks the cycle at
 * its next check-in and fails. False when too few members answered (the
 * check is repeated, and the mark with it).
 */
static bool
walk_mark(WalkHop *victim, const char *cycle)
{
	char	   *wkey = rw_wait_key_of(victim->owner);
	const char *k[1] = {wkey};
	size_t		klen[1] = {strlen(wkey)};
	const char *args[3] = {RW_PROTOCOL_VERSION, victim->value, cycle};
	RwFan		f;

	rw_fan_script(&f, walk_node, RW_SCRIPT_MARK, 1, k, klen, 3, args);
	rw_fan_free(&f);
	return f.size - f.missing >= f.need;
}



/*
 * Walk from a wait of this session (`from`: its node, wait key's value,
 * mode and lock, and when the walk's time is up). *seen: a hash of what it
 * met; *foreign: whether it met an owner that does not walk itself;
 * *first, *nfirst: the waiter's own blockers, if the first hop answered
 * (for the log). With RW_WALK_VICTIM, *cycle is the cycle, encoded as a
 * mark carries it.
 */
RwWalkResult
rw_walk(const RwWalkFrom *from, uint32 *seen, bool *foreign, char **cycle,
		char ***first, int *nfirst)
{
	Walk		w;
	bool		found;
	int			v;

	memset(&w, 0, sizeof(w));
	w.path = palloc0(sizeof(WalkHop) * WALK_MAX_DEPTH);
	w.maxvisited = 16;
	w.visited = palloc(sizeof(char *) * w.maxvisited);
	walk_node = from->node;
	walk_confirming = false;
	w.until = from->until;
	w.seen = 2166136261u;
	w.path[0].owner = w.path[0].as = (char *) rw_owner_id();
	w.path[0].value = (char *) from->value;
	w.path[0].mode = from->mode;
	w.path[0].key = (char *) from->lock_key;
	w.depth = 1;
	found = walk_search(&w);
	*first = w.first_blockers;
	*nfirst = w.nfirst;
	*seen = w.seen;
	*foreign = w.foreign;
	if (!found || !walk_recheck(&w))
		return w.gap ? RW_WALK_INCOMPLETE : RW_WALK_NO_CYCLE;
	if (!walk_alive(&w))
		return RW_WALK_INCOMPLETE;
	v = walk_victim(&w);
	if (v == 0)
	{
		*cycle = walk_encode_cycle(&w);
		return RW_WALK_VICTIM;
	}
	return walk_mark(&w.path[v], walk_encode_cycle(&w)) ? RW_WALK_NO_CYCLE : RW_WALK_INCOMPLETE;
}

