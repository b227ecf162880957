/*-------------------------------------------------------------------------
 *
 * deadlock.c
 *	  A lock wait made visible, and deadlocks ended: the waiter rows of
 *	  redis_locks, the lock-wait logs of log_lock_waits, and the wait-for
 *	  graph across sessions, servers and clients, walked after
 *	  deadlock_timeout as PostgreSQL's deadlock checker walks its own.
 *
 * waiting.c calls rw_deadlock_tick each time an acquisition's try finds the
 * lock busy (the first such answer starts the wait) and rw_deadlock_wait_end
 * when the wait ends, granted or not. Between tries nothing is in flight, so
 * what is done here (Redis calls, logs, errors) never stands between a
 * Redis answer and the session's record of it.
 *
 * Shared memory (with the library preloaded): one entry per backend, the
 * lock it waits for, shown by redis_locks with granted = false and used by
 * redis_blocking_pids. Written at the start and end of a wait only.
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
 * edge; if every edge still holds, the victim is the member with the
 * greatest owner id, the same whoever found the cycle: the finder fails
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
#include "storage/ipc.h"
#include "storage/lwlock.h"
#include "storage/proc.h"
#include "storage/shmem.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#define DL_KEY_MAX		(RW_PREFIX_MAX + 3 * RW_NAME_MAX + 8)
#define DL_MAX_DEPTH	256		/* the longest cycle looked for; a longer
								 * path leaves a gap (the walk is repeated) */
#define DL_RETRY_MIN_MS	50		/* the first pause before an incomplete
								 * check is repeated; doubled up to
								 * deadlock_timeout */
#define DL_FOREIGN_MAX	64		/* a walk that met foreign owners and
								 * found nothing new is repeated after
								 * up to this many deadlock_timeouts */

/* ---- shared memory: one entry per backend ---- */

typedef struct DlEntry
{
	bool		in_use;
	int			pid;
	Oid			datid;
	uint8		mode;
	uint8		level;
	TimestampTz waitstart;
	char		owner[RW_OWNER_MAX];
	char		key[DL_KEY_MAX];	/* the lock's hash key */
	char		name[RW_NAME_MAX + 1];
} DlEntry;

typedef struct DlShared
{
	LWLock	   *lock;
	int			n;
	DlEntry		entries[FLEXIBLE_ARRAY_MEMBER];
} DlShared;

static DlShared *dl_shared = NULL;
static shmem_request_hook_type prev_shmem_request_hook = NULL;
static shmem_startup_hook_type prev_shmem_startup_hook = NULL;

/* ---- the wait of this session ---- */

static struct
{
	bool		active;
	RwNode	   *node;
	RwMode		mode;
	RwLevel		level;
	int64		start_ms;
	TimestampTz start_ts;		/* for the logs' microseconds */
	bool		published;		/* in shared memory */
	bool		checked;		/* deadlock_timeout passed: logged, walked */
	bool		keyed;			/* our wait key was written */
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

/* One hop of a walk: `owner` waits for `key` in `mode`, blocked by next. */
typedef struct DlHop
{
	char	   *owner;
	char	   *as;				/* the owner that waits in the lock: owner,
								 * or another of the same task (a client's
								 * holder waiting through a new owner id) */
	char	   *value;			/* its wait key's value (ours: dl.value) */
	char		mode;			/* 'r' or 'w' */
	char	   *key;
} DlHop;

/* ---------------------------------------------------------------------
 * Shared memory
 * --------------------------------------------------------------------- */

static Size
dl_shmem_size(void)
{
	return add_size(offsetof(DlShared, entries),
					mul_size(sizeof(DlEntry), MaxBackends));
}

static void
dl_shmem_request(void)
{
	if (prev_shmem_request_hook)
		prev_shmem_request_hook();
	RequestAddinShmemSpace(dl_shmem_size());
	RequestNamedLWLockTranche("rwlock waits", 1);
}

static void
dl_shmem_startup(void)
{
	bool		found;

	if (prev_shmem_startup_hook)
		prev_shmem_startup_hook();
	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	dl_shared = ShmemInitStruct("rwlock waits", dl_shmem_size(), &found);
	if (!found)
	{
		dl_shared->lock = &(GetNamedLWLockTranche("rwlock waits"))->lock;
		dl_shared->n = MaxBackends;
		for (int i = 0; i < MaxBackends; i++)
			dl_shared->entries[i].in_use = false;
	}
	LWLockRelease(AddinShmemInitLock);
}

/* In _PG_init: room in shared memory, when the library is preloaded. */
void
rw_deadlock_init(void)
{
	if (!process_shared_preload_libraries_in_progress)
		return;
	prev_shmem_request_hook = shmem_request_hook;
	shmem_request_hook = dl_shmem_request;
	prev_shmem_startup_hook = shmem_startup_hook;
	shmem_startup_hook = dl_shmem_startup;
}

static DlEntry *
dl_my_entry(void)
{
	if (dl_shared == NULL || MyProc == NULL || MyProc->pgprocno < 0 ||
		MyProc->pgprocno >= dl_shared->n)
		return NULL;
	return &dl_shared->entries[MyProc->pgprocno];
}

static void
dl_publish(TimestampTz since)
{
	DlEntry    *e = dl_my_entry();

	if (e == NULL)
		return;
	LWLockAcquire(dl_shared->lock, LW_EXCLUSIVE);
	e->pid = MyProcPid;
	e->datid = MyDatabaseId;
	e->mode = dl.mode;
	e->level = dl.level;
	e->waitstart = since;
	strlcpy(e->owner, rw_owner_id(), sizeof(e->owner));
	strlcpy(e->key, dl.lock_key, sizeof(e->key));
	strlcpy(e->name, dl.name, sizeof(e->name));
	e->in_use = true;
	LWLockRelease(dl_shared->lock);
	dl.published = true;
}

static void
dl_unpublish(void)
{
	DlEntry    *e = dl_my_entry();

	if (e == NULL || !dl.published)
		return;
	LWLockAcquire(dl_shared->lock, LW_EXCLUSIVE);
	e->in_use = false;
	LWLockRelease(dl_shared->lock);
	dl.published = false;
}

/* The waiting sessions of this server, for redis_locks. */
int
rw_deadlock_waiters(RwWaiterRow **rows)
{
	int			n = 0;

	*rows = NULL;
	if (dl_shared == NULL)
		return 0;
	*rows = palloc(sizeof(RwWaiterRow) * (dl_shared->n + 1));
	LWLockAcquire(dl_shared->lock, LW_SHARED);
	for (int i = 0; i < dl_shared->n; i++)
	{
		DlEntry    *e = &dl_shared->entries[i];
		RwWaiterRow *r = &(*rows)[n];

		if (!e->in_use)
			continue;
		r->pid = e->pid;
		r->datid = e->datid;
		r->mode = (RwMode) e->mode;
		r->level = (RwLevel) e->level;
		r->waitstart = e->waitstart;
		r->owner = pstrdup(e->owner);
		r->name = pstrdup(e->name);
		n++;
	}
	LWLockRelease(dl_shared->lock);
	return n;
}

/* ---------------------------------------------------------------------
 * Owners and keys
 * --------------------------------------------------------------------- */

/*
 * The pid of a session of this server from its owner id
 * (pg:<system identifier>:<pid>:<random>), or 0.
 */
int
rw_owner_local_pid(const char *owner)
{
	char		prefix[40];
	size_t		len;

	snprintf(prefix, sizeof(prefix), "pg:%llx:",
			 (unsigned long long) GetSystemIdentifier());
	len = strlen(prefix);
	if (strncmp(owner, prefix, len) != 0)
		return 0;
	return atoi(owner + len);
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

/* <prefix>:wait:{<owner>}, braces in the owner percent-encoded. */
static char *
dl_wait_key_of(const char *owner)
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

/* Keys for routing and waits.lua: the hash and its queue. */
static void
dl_keys_of(const char *key, RwKeys *keys)
{
	keys->key[0] = (char *) key;
	keys->len[0] = strlen(key);
	keys->key[1] = psprintf("%s:q", key);
	keys->len[1] = keys->len[0] + 2;
	keys->channel = NULL;
	keys->channel_len = 0;
}

/*
 * Parse a wait key's value "3 <r|w> <nonce>[@<owner>] <lock key>", 3 being
 * RW_PROTOCOL_VERSION: false if it is of another protocol version (ignored:
 * no edge), marked, or malformed. *as: the owner after '@', which waits in
 * the lock on behalf of the key's owner (a client's task holding with one
 * owner id and waiting with another); else NULL.
 */
static bool
dl_parse_value(const char *value, char *mode, char **key, char **as)
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

/* ---------------------------------------------------------------------
 * Redis calls of a check. A call that could not say (a failure, an error
 * reply, a quorum's members too few to decide) leaves a gap: the check is
 * then incomplete, never taken for "no edge", and repeated (the tick).
 * --------------------------------------------------------------------- */

/*
 * A failure of a call to conn (member: a quorum's, or -1). An interrupt is
 * served; a permission Redis refused is raised (42501: never a detection
 * silently off); a quorum's member is left alone a while, a cluster's map
 * follows a redirection. Anything else only leaves a gap.
 */
static void
dl_failed_at(RwConn *conn, int member, RwError *err)
{
	if (err->kind == RW_ERR_INTERRUPTED ||
		rw_error_sqlstate(err) == ERRCODE_INSUFFICIENT_PRIVILEGE)
		rw_raise(conn, err);
	if (member >= 0 && err->kind != RW_ERR_REPLY)
		rw_quorum_failed(dl.node, member, err);
	else if (member < 0 && dl.node->cluster != NULL)
		(void) rw_cluster_redirected(dl.node, err, rw_now_ms());
}

/*
 * An error reply: handled as a failure (dl_failed_at), but a lock of
 * another protocol version, which is no edge (a walker of protocol 3 finds
 * no cycle through it: docs/protocol.md section 18). Frees r. True when it
 * is a gap.
 */
static bool
dl_error_reply(RwConn *conn, int member, redisReply *r)
{
	RwError		err;
	bool		version = strncmp(r->str, "RWLOCK_VERSION ", 15) == 0;

	memset(&err, 0, sizeof(err));
	rw_error_set(&err, RW_ERR_REPLY, "%s", r->str);
	freeReplyObject(r);
	if (version)
		return false;
	dl_failed_at(conn, member, &err);
	return true;
}

/*
 * The connections a call of a check goes to for `key`: the one that serves
 * it, or in quorum mode each member that may be asked now (member[k] says
 * which).
 */
static int
dl_conns(const char *key, RwConn **conns, int *member)
{
	int			n = rw_quorum_size(dl.node);
	int			k = 0;
	RwKeys		keys;

	if (n == 0)
	{
		dl_keys_of(key, &keys);
		conns[0] = rw_cluster_cmd(dl.node, &keys);
		pfree(keys.key[1]);
		member[0] = -1;
		return 1;
	}
	for (int i = 0; i < n; i++)
		if (rw_quorum_may_ask(dl.node, i))
		{
			conns[k] = &rw_quorum_member(dl.node, i)->cmd;
			member[k++] = i;
		}
	return k;
}

/*
 * One script on each connection for keys[0] (dl_conns). f->r[k] is NULL
 * where it failed or answered an error. f->size: the members there are (1
 * but for a quorum), f->need: how many answers must agree (a majority of a
 * quorum's members, else 1), f->missing: the members that did not answer
 * (not asked, failed, refused), which may still make or break a majority.
 */
typedef struct DlFan
{
	int			n;
	int			size;
	int			need;
	int			missing;
	bool		version;		/* some member answered RWLOCK_VERSION */
	redisReply *r[RW_QUORUM_MAX];
} DlFan;

static void
dl_fan(DlFan *f, RwScriptId id, int nkeys, const char *const *keys,
	   const size_t *klens, int nargs, const char *const *args)
{
	RwConn	   *conns[RW_QUORUM_MAX];
	int			member[RW_QUORUM_MAX];

	f->n = dl_conns(keys[0], conns, member);
	f->size = Max(rw_quorum_size(dl.node), 1);
	f->need = rw_quorum_size(dl.node) > 0 ? rw_quorum_majority(dl.node) : 1;
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
			dl_failed_at(conns[k], member[k], &err);
			continue;
		}
		if (f->r[k]->type == REDIS_REPLY_ERROR)
		{
			if (!dl_error_reply(conns[k], member[k], f->r[k]))
				f->version = true;
			f->r[k] = NULL;
			continue;
		}
		f->missing--;
	}
}

static void
dl_fan_free(DlFan *f)
{
	for (int k = 0; k < f->n; k++)
		if (f->r[k] != NULL)
			freeReplyObject(f->r[k]);
}

/*
 * Whether a count short of a majority is undecided: the members that did
 * not answer could still make it one. Then the check has a gap.
 */
static bool
dl_undecided(DlFan *f, int count)
{
	return count < f->need && count + f->missing >= f->need;
}

/*
 * The value of an owner's wait key (held by a majority of a quorum), or
 * NULL: none, or undecided (a gap: *gap set).
 */
static char *
dl_get_wait(const char *owner, bool *gap)
{
	char	   *wkey = dl_wait_key_of(owner);
	const char *k[1] = {wkey};
	size_t		klen[1] = {strlen(wkey)};
	const char *args[3] = {RW_PROTOCOL_VERSION, "", "0"};
	DlFan		f;
	char	   *v = NULL;
	int			best = 0;

	dl_fan(&f, RW_SCRIPT_CHECKIN, 1, k, klen, 3, args);
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
	if (v == NULL && dl_undecided(&f, best))
		*gap = true;
	dl_fan_free(&f);
	return v;
}

/* Count an owner among a quorum's answers: the first seen are kept first. */
static void
dl_tally(char ***owners, int **counts, int *n, const char *str, size_t len)
{
	for (int i = 0; i < *n; i++)
		if (strlen((*owners)[i]) == len && memcmp((*owners)[i], str, len) == 0)
		{
			(*counts)[i]++;
			return;
		}
	(*owners)[*n] = pnstrdup(str, len);
	(*counts)[(*n)++] = 1;
}

/*
 * waits.lua: whether `owner` waits for the lock `key` in `mode` now, and
 * whom it waits for; in quorum mode, what a majority of the members says.
 * -1 when Redis could not say; *gap set when some of it is undecided (a
 * liveness or an edge the members that did not answer could still make).
 */
static int
dl_blockers_of(const char *key, const char *owner, char mode, char ***out,
			   int *nout, bool *gap)
{
	RwKeys		keys;
	DlFan		f;
	char		m[2] = {mode, '\0'};
	const char *args[3] = {RW_PROTOCOL_VERSION, owner, m};
	int			live = 0,
				ncand = 0,
				cap = 0;
	char	  **cand = NULL;
	int		   *count = NULL;

	*nout = 0;
	*out = NULL;
	dl_keys_of(key, &keys);
	dl_fan(&f, RW_SCRIPT_WAITS, RW_NKEYS, (const char *const *) keys.key,
		   keys.len, 3, args);
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
			cand = cand ? repalloc(cand, sizeof(char *) * (cap + r->elements))
				: palloc(sizeof(char *) * r->elements);
			count = count ? repalloc(count, sizeof(int) * (cap + r->elements))
				: palloc(sizeof(int) * r->elements);
			cap += r->elements;
			for (size_t i = 1; i < r->elements; i++)
				if (r->element[i]->type == REDIS_REPLY_STRING)
					dl_tally(&cand, &count, &ncand, r->element[i]->str,
							 r->element[i]->len);
		}
	}
	dl_fan_free(&f);
	if (f.missing == f.size)
	{
		if (!f.version)
			*gap = true;
		return -1;
	}
	if (live < f.need)
	{
		if (dl_undecided(&f, live))
			*gap = true;
		return 0;
	}
	*out = palloc(sizeof(char *) * Max(ncand, 1));
	for (int i = 0; i < ncand; i++)
	{
		if (count[i] >= f.need)
			(*out)[(*nout)++] = cand[i];
		else if (dl_undecided(&f, count[i]))
			*gap = true;
	}
	return 1;
}

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
	DlFan		f;
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
	dl_fan(&f, RW_SCRIPT_CHECKIN, 1, k, klen, 3, args);
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
	dl_fan_free(&f);
	return confirmed >= f.need;
}

/* Take our wait key away, without waiting for the answers. Never throws. */
static void
dl_drop_key(void)
{
	RwConn	   *conns[RW_QUORUM_MAX];
	int			member[RW_QUORUM_MAX];
	int			n;
	const char *argv[2] = {"DEL", dl.wait_key};
	size_t		lens[2] = {3, strlen(dl.wait_key)};
	RwError		err;

	if (!dl.keyed)
		return;
	dl.keyed = false;
	n = dl_conns(dl.wait_key, conns, member);
	for (int k = 0; k < n; k++)
	{
		if (conns[k]->ctx == NULL)
			continue;			/* its time to live ends it */
		rw_append(conns[k], 2, argv, lens, RW_TAG_DISCARD);
		(void) rw_flush(conns[k], rw_now_ms() + rw_command_timeout_ms, &err);
	}
}

/* ---------------------------------------------------------------------
 * The walk
 * --------------------------------------------------------------------- */

typedef struct DlWalk
{
	DlHop	   *path;			/* DL_MAX_DEPTH hops */
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
} DlWalk;

static bool
dl_visited(DlWalk *w, const char *owner)
{
	for (int i = 0; i < w->nvisited; i++)
		if (strcmp(w->visited[i], owner) == 0)
			return true;
	return false;
}

static void
dl_visit(DlWalk *w, char *owner)
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
dl_seen(DlWalk *w, const char *s)
{
	for (; *s; s++)
		w->seen = (w->seen ^ (uint8) *s) * 16777619;
	w->seen = (w->seen ^ 0xff) * 16777619;
}

/*
 * Whether a session of this server still waits for `key` (its row in
 * shared memory): a wait cut off in a stall can leave its wait key and its
 * intent in Redis for a while (to their short leases), which must not make
 * an edge. True for an owner of elsewhere, which Redis alone tells about.
 */
static bool
dl_local_waits(const char *owner, const char *key)
{
	bool		found = false;

	if (dl_shared == NULL || rw_owner_local_pid(owner) <= 0)
		return true;
	LWLockAcquire(dl_shared->lock, LW_SHARED);
	for (int i = 0; i < dl_shared->n && !found; i++)
	{
		DlEntry    *e = &dl_shared->entries[i];

		found = e->in_use && strcmp(e->owner, owner) == 0 &&
			strcmp(e->key, key) == 0;
	}
	LWLockRelease(dl_shared->lock);
	return found;
}

/*
 * Depth first from path[depth - 1]: true when a blocker is us, the cycle
 * then being path[0 .. depth - 1]. Whatever could not be said (a call
 * that failed, a key that says an owner waits where the lock does not
 * show it, the depth limit, the walk's time) sets w->gap.
 */
static bool
dl_search(DlWalk *w)
{
	DlHop	   *hop = &w->path[w->depth - 1];
	char	  **blockers;
	int			n;
	int			live;

	live = dl_blockers_of(hop->key, hop->as, hop->mode, &blockers, &n, &w->gap);
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
		DlHop	   *next;

		if (strcmp(b, rw_owner_id()) == 0)
			return true;
		if (dl_visited(w, b))
			continue;
		if (rw_now_ms() >= w->until)
		{
			w->gap = true;
			return false;
		}
		/* A long walk must not cost the session its other holds. */
		rw_renew_due(false, NULL);
		dl_visit(w, b);
		dl_seen(w, b);
		if (strncmp(b, "pg:", 3) != 0)
			w->foreign = true;
		if (w->depth == DL_MAX_DEPTH)
		{
			w->gap = true;
			continue;
		}
		if ((value = dl_get_wait(b, &w->gap)) == NULL)
			continue;
		dl_seen(w, value);
		if (value[0] == '!')
		{
			/* Marked: it fails or finds the mark stale at its next check. */
			w->gap = true;
			continue;
		}
		next = &w->path[w->depth];
		if (!dl_parse_value(value, &next->mode, &next->key, &next->as))
			continue;
		if (!dl_local_waits(b, next->key))
			continue;
		next->owner = b;
		if (next->as == NULL)
			next->as = b;
		else if (strncmp(next->as, "pg:", 3) != 0)
			w->foreign = true;
		next->value = value;
		w->depth++;
		if (dl_search(w))
			return true;
		w->depth--;
	}
	return false;
}

/* Every edge of the cycle once more: still there? */
static bool
dl_recheck(DlWalk *w)
{
	for (int i = 0; i < w->depth; i++)
	{
		DlHop	   *hop = &w->path[i];
		const char *next = i + 1 < w->depth ? w->path[i + 1].owner : rw_owner_id();
		char	  **blockers;
		int			n;
		bool		found = false;

		if (i > 0)
		{
			char	   *value = dl_get_wait(hop->owner, &w->gap);

			if (value == NULL || strcmp(value, hop->value) != 0 ||
				!dl_local_waits(hop->owner, hop->key))
				return false;
		}
		if (dl_blockers_of(hop->key, hop->as, hop->mode, &blockers, &n,
						   &w->gap) <= 0)
		{
			w->gap = true;		/* as in dl_search: not "no edge" yet */
			return false;
		}
		for (int j = 0; j < n && !found; j++)
			found = strcmp(blockers[j], next) == 0;
		if (!found)
			return false;
	}
	return true;
}

/*
 * The cycle as the mark carries it: one line per hop,
 * "<owner> <mode> <blocker> <lock key>", the key last (it may hold spaces).
 */
static char *
dl_encode_cycle(DlWalk *w)
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

/* The member of the cycle every finder picks: the greatest owner id. */
static int
dl_victim(DlWalk *w)
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
dl_mark(DlHop *victim, const char *cycle)
{
	char	   *wkey = dl_wait_key_of(victim->owner);
	const char *k[1] = {wkey};
	size_t		klen[1] = {strlen(wkey)};
	const char *args[3] = {RW_PROTOCOL_VERSION, victim->value, cycle};
	DlFan		f;

	dl_fan(&f, RW_SCRIPT_MARK, 1, k, klen, 3, args);
	dl_fan_free(&f);
	return f.size - f.missing >= f.need;
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

typedef enum DlResult
{
	DL_NO_CYCLE,				/* complete, no cycle through us (or one
								 * found and its victim marked) */
	DL_INCOMPLETE,				/* something could not be said: again */
	DL_VICTIM					/* we are a cycle's victim */
} DlResult;

/*
 * Walk from our wait. *seen: a hash of what it met; *foreign: whether it
 * met an owner that does not walk itself.
 */
static DlResult
dl_walk(bool log, uint32 *seen, bool *foreign)
{
	DlWalk		w;
	bool		cycle;
	int			v;

	memset(&w, 0, sizeof(w));
	w.path = palloc0(sizeof(DlHop) * DL_MAX_DEPTH);
	w.maxvisited = 16;
	w.visited = palloc(sizeof(char *) * w.maxvisited);
	w.until = dl.check_until;
	w.seen = 2166136261u;
	w.path[0].owner = w.path[0].as = (char *) rw_owner_id();
	w.path[0].value = dl.value;
	w.path[0].mode = dl.mode == RW_WRITE ? 'w' : 'r';
	w.path[0].key = dl.lock_key;
	w.depth = 1;
	cycle = dl_search(&w);
	if (log)
		dl_log("still waiting for", w.first_blockers, w.nfirst);
	*seen = w.seen;
	*foreign = w.foreign;
	if (!cycle || !dl_recheck(&w))
		return w.gap ? DL_INCOMPLETE : DL_NO_CYCLE;
	v = dl_victim(&w);
	if (v == 0)
	{
		dl.victim_detail = MemoryContextStrdup(dl_cxt, dl_encode_cycle(&w));
		return DL_VICTIM;
	}
	return dl_mark(&w.path[v], dl_encode_cycle(&w)) ? DL_NO_CYCLE : DL_INCOMPLETE;
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
	dl.checked = dl.keyed = false;
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

		dl.wait_key = dl_wait_key_of(rw_owner_id());
		dl.value = psprintf("%s %c %08x %s", RW_PROTOCOL_VERSION,
							mode == RW_WRITE ? 'w' : 'r', nonce, keys->key[0]);
		MemoryContextSwitchTo(old);
	}
	dl.active = true;
	rw_stat_add(RW_STAT_WAITS, 1);
	dl_publish(dl.start_ts);
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
		uint32		seen;
		bool		foreign;
		DlResult	r = dl_walk(log_lock_waits && !dl.checked, &seen, &foreign);

		dl.walk_gap = r == DL_INCOMPLETE;
		gap |= dl.walk_gap;
		if (r == DL_VICTIM)
			victim = true;
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
 * is logged unless granted, which happens only in the normal flow).
 */
void
rw_deadlock_wait_end(bool granted)
{
	int64		waited;

	if (!dl.active)
		return;
	dl.active = false;
	waited = rw_now_ms() - dl.start_ms;
	rw_stat_add(RW_STAT_WAIT_MS, (uint64) Max(waited, 0));
	rw_stat_max(RW_STAT_WAIT_MAX_MS, (uint64) Max(waited, 0));
	dl_unpublish();
	dl_drop_key();
	if (granted && dl.checked && log_lock_waits)
		dl_log("acquired", NULL, 0);
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
	char		key[DL_KEY_MAX];
	char		owner[RW_OWNER_MAX];
	char		mode = 0;
	RwNode	   *saved = dl.node;
	int			live;

	*owners = NULL;
	*nowners = 0;
	if (dl_shared == NULL)
		return false;
	LWLockAcquire(dl_shared->lock, LW_SHARED);
	for (int i = 0; i < dl_shared->n && mode == 0; i++)
	{
		DlEntry    *e = &dl_shared->entries[i];

		if (e->in_use && e->pid == pid)
		{
			mode = e->mode == RW_WRITE ? 'w' : 'r';
			strlcpy(key, e->key, sizeof(key));
			strlcpy(owner, e->owner, sizeof(owner));
		}
	}
	LWLockRelease(dl_shared->lock);
	if (mode == 0)
		return false;
	dl.node = rw_current_node();
	{
		bool		gap = false;

		live = dl_blockers_of(key, owner, mode, owners, nowners, &gap);
	}
	dl.node = saved;
	return live > 0;
}
