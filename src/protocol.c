/*-------------------------------------------------------------------------
 *
 * protocol.c
 *	  The rwlock protocol as C functions: one per Lua script, each building
 *	  the script's keys and arguments and checking every part of its reply.
 *
 * Keys of the lock named N, with prefix P (docs/protocol.md has the rest):
 *	  P:{E}    hash: protocol version, writer, readers and their lease ends,
 *	           last token, waiting writers' intents, readers' marks and turn
 *	  P:{E}:q  sorted set of waiting writers, first come first served
 *	  P:{E}:c  pub/sub channel: names the waiters that may now proceed
 * where E is N with '%', '{' and '}' percent-encoded, so that the hash tag
 * {E} is the whole name whatever it holds and the keys of one lock share a
 * Redis Cluster slot.
 *
 *-------------------------------------------------------------------------
 */
#include "rwlock.h"

#include "access/xlog.h"
#include "lib/stringinfo.h"
#include "miscadmin.h"
#include "port.h"
#include "port/atomics.h"
#include "storage/ipc.h"
#include "storage/proc.h"
#include "storage/shmem.h"

/*
 * The owner's request sequence (protocol 3, docs/protocol.md 4.1): every
 * acquire and release this session sends takes the next number, and Redis
 * keeps the newest it ran per lock (field s:<owner>), so that a request
 * that arrives after a newer one of ours, on whatever connection and
 * however late, changes nothing (RWLOCK_STALE). It never goes back: the
 * owner id is this backend's, and the counter lives as long as it does.
 * Renewals and fences carry the counter as it is (rw_proto_seq_now): they
 * are checked, never recorded. With the library preloaded the counter is
 * this backend's PGPROC's in shared memory (holdtable.c: rw_proto_seq_share),
 * which the keeper reads to renew on our behalf and advances to release
 * for us after we exited; else it is this process's own.
 */
static uint64 proto_seq = 0;
static pg_atomic_uint64 *proto_seqs = NULL;

/* holdtable.c's counters, one per PGPROC (set in the postmaster). */
void
rw_proto_seq_share(pg_atomic_uint64 *counters)
{
	proto_seqs = counters;
}

/*
 * The next request number of another PGPROC's session (the keeper, sending
 * a request on its behalf): drawn from the same shared counter as the
 * session's own, so each is still used once, in order. 0 without one.
 */
uint64
rw_proto_seq_next_of(int procno)
{
	if (proto_seqs == NULL || procno < 0 || procno >= MaxBackends)
		return 0;
	return pg_atomic_add_fetch_u64(&proto_seqs[procno], 1);
}

static pg_atomic_uint64 *
proto_seq_shared(void)
{
	return proto_seqs != NULL && MyProc != NULL ?
		&proto_seqs[MyProc->pgprocno] : NULL;
}

uint64
rw_proto_seq_next(void)
{
	pg_atomic_uint64 *c = proto_seq_shared();

	return c ? pg_atomic_add_fetch_u64(c, 1) : ++proto_seq;
}

uint64
rw_proto_seq_now(void)
{
	pg_atomic_uint64 *c = proto_seq_shared();

	return c ? pg_atomic_read_u64(c) : proto_seq;
}

/* Whether an error reply is protocol 3's "a newer request of the owner ran". */
bool
rw_proto_is_stale(const char *msg)
{
	return strncmp(msg, "RWLOCK_STALE", 12) == 0;
}

/*
 * Who each PGPROC is now, for naming processes (rw_owner_live_pid): the
 * owner id of the backend there, with the generation it carries. A backend
 * claims a new generation of its PGPROC when it makes its owner id
 * (protocol.c), registers the id, and withdraws it at exit; a later
 * backend at the same PGPROC registers another. Written only by the
 * backend itself, read without a lock as a sequence lock: gen is 0 while
 * the record is written or empty.
 */
typedef struct RwProcOwner
{
	pg_atomic_uint64 gen;		/* the generation registered, or 0 */
	pg_atomic_uint64 claims;	/* generations handed out at this PGPROC */
	int			pid;
	char		owner[RW_OWNER_MAX];
} RwProcOwner;

static RwProcOwner *proc_owners = NULL;
static int	proc_owners_n = 0;

/* Room for the records of nprocs PGPROCs (holdtable.c allocates it). */
Size
rw_proto_owners_size(int nprocs)
{
	return mul_size(sizeof(RwProcOwner), nprocs);
}

/* holdtable.c's records, one per PGPROC (set in the postmaster). */
void
rw_proto_owners_share(void *mem, int nprocs, bool init)
{
	proc_owners = (RwProcOwner *) mem;
	proc_owners_n = nprocs;
	if (init)
		for (int i = 0; i < nprocs; i++)
		{
			pg_atomic_init_u64(&proc_owners[i].gen, 0);
			pg_atomic_init_u64(&proc_owners[i].claims, 0);
			proc_owners[i].pid = 0;
			proc_owners[i].owner[0] = '\0';
		}
}


/*
 * A new generation of this backend's PGPROC, for its owner id; 0 without
 * shared memory (then no owner id is ever taken for a process).
 */
static uint64
owner_claim(void)
{
	if (proc_owners == NULL || MyProc == NULL)
		return 0;
	return pg_atomic_add_fetch_u64(&proc_owners[MyProc->pgprocno].claims, 1);
}

static void
owner_withdraw(int code, Datum arg)
{
	RwProcOwner *r = &proc_owners[DatumGetInt32(arg)];

	pg_atomic_write_u64(&r->gen, 0);
}

/*
 * Register this backend's owner id, of generation gen (owner_claim),
 * until it exits. After held.c's exit callback (before_shmem_exit): the
 * releases at exit go as a live owner's, then the keeper sees it gone.
 */
static void
owner_register(const char *owner, uint64 gen)
{
	RwProcOwner *r;

	if (proc_owners == NULL || MyProc == NULL || gen == 0)
		return;
	r = &proc_owners[MyProc->pgprocno];
	pg_atomic_write_u64(&r->gen, 0);
	pg_write_barrier();
	r->pid = MyProcPid;
	strlcpy(r->owner, owner, sizeof(r->owner));
	pg_write_barrier();
	pg_atomic_write_u64(&r->gen, gen);
	on_shmem_exit(owner_withdraw, Int32GetDatum(MyProc->pgprocno));
}

/*
 * The pid of the live backend of this server whose owner id is owner, or
 * 0: owner must be the very id registered at the PGPROC it names (so a
 * client's id that only looks like a session's names nobody, nor does the
 * id of a backend that exited, whatever backend has its pid or PGPROC
 * now), and that PGPROC must still be that process's.
 * The id: pg:<system id>:<pid>:<procno>.<generation>:<random>.
 */
int
rw_owner_live_pid(const char *owner)
{
	const char *p = owner;
	long		procno;
	char	   *end;
	RwProcOwner *r;
	uint64		g1,
				g2;
	int			pid;
	bool		same;

	if (proc_owners == NULL || strncmp(owner, "pg:", 3) != 0)
		return 0;
	for (int field = 0; field < 3; field++)
		if ((p = strchr(p, ':')) == NULL)
			return 0;
		else
			p++;
	if (!isdigit((unsigned char) *p))
		return 0;
	procno = strtol(p, &end, 10);
	if (*end != '.' || procno < 0 || procno >= proc_owners_n)
		return 0;
	r = &proc_owners[procno];
	g1 = pg_atomic_read_u64(&r->gen);
	pg_read_barrier();
	pid = r->pid;
	same = strncmp(r->owner, owner, sizeof(r->owner)) == 0;
	pg_read_barrier();
	g2 = pg_atomic_read_u64(&r->gen);
	if (g1 == 0 || g1 != g2 || !same)
		return 0;
	/* Registered, and not withdrawn: is the PGPROC still that process? */
	if (ProcGlobal->allProcs[procno].pid != pid)
		return 0;
	return pid;
}

/*
 * A string unique to this session, among all servers and over time:
 * pg:<system id>:<pid>:<PGPROC number>.<its generation>:<random>. Only the
 * id registered in shared memory names a process (rw_owner_live_pid).
 */
const char *
rw_owner_id(void)
{
	static char owner[RW_OWNER_MAX];

	if (owner[0] == '\0')
	{
		uint32		rnd;
		uint64		gen = owner_claim();

		if (!pg_strong_random(&rnd, sizeof(rnd)))
			rnd = (uint32) MyStartTimestamp;
		snprintf(owner, sizeof(owner), "pg:%llx:%d:%d.%llx:%08x",
				 (unsigned long long) GetSystemIdentifier(), MyProcPid,
				 MyProc != NULL ? MyProc->pgprocno : 0,
				 (unsigned long long) gen, rnd);
		/* Which process it is, for views and messages. */
		owner_register(owner, gen);
	}
	return owner;
}

void
rw_build_keys(const char *prefix, const char *name, RwKeys *keys,
			  MemoryContext cxt)
{
	static const char *const suffix[RW_NKEYS] = {"", ":q"};
	MemoryContext old = MemoryContextSwitchTo(cxt);
	StringInfoData base;

	initStringInfo(&base);
	appendStringInfo(&base, "%s:{", prefix);
	for (const char *p = name; *p; p++)
	{
		if (*p == '%')
			appendStringInfoString(&base, "%25");
		else if (*p == '{')
			appendStringInfoString(&base, "%7B");
		else if (*p == '}')
			appendStringInfoString(&base, "%7D");
		else
			appendStringInfoChar(&base, *p);
	}
	appendStringInfoChar(&base, '}');
	for (int i = 0; i < RW_NKEYS; i++)
	{
		keys->key[i] = psprintf("%s%s", base.data, suffix[i]);
		keys->len[i] = strlen(keys->key[i]);
	}
	keys->channel = psprintf("%s:c", base.data);
	keys->channel_len = strlen(keys->channel);
	pfree(base.data);
	MemoryContextSwitchTo(old);
}

/* Copy keys into cxt. */
void
rw_copy_keys(const RwKeys *from, RwKeys *to, MemoryContext cxt)
{
	for (int i = 0; i < RW_NKEYS; i++)
	{
		to->key[i] = MemoryContextStrdup(cxt, from->key[i]);
		to->len[i] = from->len[i];
	}
	to->channel = MemoryContextStrdup(cxt, from->channel);
	to->channel_len = from->channel_len;
}

/* Free what rw_build_keys or rw_copy_keys allocated. */
void
rw_free_keys(RwKeys *keys)
{
	for (int i = 0; i < RW_NKEYS; i++)
		pfree(keys->key[i]);
	pfree(keys->channel);
}

/* An error or unexpected reply: free it and fill *err. */
static void
proto_bad_reply(redisReply *r, const char *script, RwError *err)
{
	err->kind = RW_ERR_REPLY;
	if (r->type == REDIS_REPLY_ERROR)
		snprintf(err->msg, sizeof(err->msg), "%s", r->str);
	else
		snprintf(err->msg, sizeof(err->msg),
				 "unexpected reply of type %d to the %s script", r->type, script);
	freeReplyObject(r);
}

static bool
proto_is_int(redisReply *r)
{
	return r->type == REDIS_REPLY_INTEGER;
}

static bool
proto_is_str(redisReply *r)
{
	return r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_STATUS;
}

/*
 * acquire.lua's ARGV[3]: what is asked, and whether the session holds the
 * read lock already ("u", an upgrade); "r" and "w" say it holds nothing of
 * the lock (a field of its own that Redis still has is left over from a
 * release Redis lost, and is dropped).
 */
static const char *
proto_mode_arg(RwMode mode, RwMode held_mode)
{
	if (mode != RW_WRITE)
		return "r";
	return held_mode == RW_READ ? "u" : "w";
}

static const char *
proto_keep_arg(RwKeep keep)
{
	return keep == RW_KEEP_READ ? "r" : keep == RW_KEEP_ALL ? "q" : "";
}

/* Prepare a call of a script with the lock's keys: the hash and the queue. */
static void
proto_prepare(RwScriptCall *call, RwScriptId id, const RwKeys *keys,
			  int nargs, const char *const *args)
{
	rw_script_prepare(call, id, RW_NKEYS, (const char *const *) keys->key,
					  keys->len, nargs, args);
}

/*
 * Send one try to take the lock in `mode`, the session holding `held_mode`
 * of it (RW_READ: an upgrade), without reading the answer
 * (rw_proto_acquire_collect reads it). *c keeps the call's arguments until
 * then. False, with *err, if the connection could not be had or failed.
 * Never throws.
 */
bool
rw_proto_acquire_send(RwConn *conn, const RwKeys *keys, RwMode mode,
					  RwMode held_mode, int lease_ms, int intent_ms,
					  RwAcquireCall *c, RwError *err)
{
	/*
	 * What the session holds goes with the mode: a reader field of ours that
	 * Redis has and we do not hold (a release lost in a failover) is then
	 * dropped, not taken for an upgrade. A try that will not wait leaves the
	 * mark out, and every call leaves keep out (the script's default is
	 * RW_KEEP_TOKEN_MS): each argument costs Redis CPU.
	 */
	const char *args[5] = {rw_owner_id(), c->seq,
		proto_mode_arg(mode, held_mode), c->lease, c->intent};

	StaticAssertStmt(RW_KEEP_TOKEN_MS == 600000,
					 "acquire.lua's default keep is 600000 ms");
	snprintf(c->seq, sizeof(c->seq), UINT64_FORMAT, rw_proto_seq_next());
	snprintf(c->lease, sizeof(c->lease), "%d", lease_ms);
	snprintf(c->intent, sizeof(c->intent), "%d", intent_ms);
	proto_prepare(&c->call, RW_SCRIPT_ACQUIRE, keys, intent_ms > 0 ? 5 : 4,
				  args);
	/* WAIT, if asked for, follows the script in the same round trip. */
	return rw_script_send(conn, &c->call, 1, rw_wait_replicas, err);
}

/*
 * Read the answer to rw_proto_acquire_send. RW_GRANTED: *result is the
 * fencing token. RW_BUSY: *result is the longest to sleep before trying
 * again, ms. RW_UPGRADE_CONFLICT: *other is the reader that already waits
 * to upgrade. RW_READ_LOST: an upgrade (held_mode RW_READ) whose read lock
 * Redis no longer has (expired, evicted, lost in a restart); nothing
 * changed. RW_GRANTED_UNACKED: granted (*result is the token), but with
 * rwlock.wait_replicas > 0 only *acks replicas acknowledged it (the WAIT
 * pipelined after the script): the caller must undo it. RW_ACQ_FAILED:
 * *err says why; err->maybe_sent whether the script may have run (and
 * granted) all the same. Never throws.
 */
RwAcquireStatus
rw_proto_acquire_collect(RwConn *conn, RwAcquireCall *c, int64 *result,
						 char **other, int *acks, RwError *err)
{
	redisReply *r;
	int64		value;

	*acks = -1;
	if (!rw_script_collect(conn, &c->call, 1, &r, rw_wait_replicas, acks, err))
		return RW_ACQ_FAILED;

	/*
	 * The script answers the token (>= 0) when granted, -ms when busy, the
	 * other upgrading reader, or, to an upgrade whose read lock Redis no
	 * longer has, the empty string. An error reply comes before the
	 * script's writes: nothing granted.
	 */
	err->maybe_sent = false;
	if (r->type == REDIS_REPLY_STRING)
	{
		RwAcquireStatus status = r->len > 0 ? RW_UPGRADE_CONFLICT : RW_READ_LOST;

		if (r->len > 0)
			*other = pnstrdup(r->str, r->len);
		freeReplyObject(r);
		return status;
	}
	if (!proto_is_int(r))
	{
		proto_bad_reply(r, "acquire", err);
		return RW_ACQ_FAILED;
	}
	value = r->integer;
	freeReplyObject(r);
	if (value >= 0 && rw_wait_replicas > 0 && *acks < rw_wait_replicas)
	{
		*result = value;
		return RW_GRANTED_UNACKED;
	}
	*result = value >= 0 ? value : -value;
	return value >= 0 ? RW_GRANTED : RW_BUSY;
}

/* Try once to take the lock: rw_proto_acquire_send, then _collect. */
RwAcquireStatus
rw_proto_acquire(RwConn *conn, const RwKeys *keys, RwMode mode,
				 RwMode held_mode, int lease_ms, int intent_ms, int64 *result,
				 char **other, int *acks, RwError *err)
{
	RwAcquireCall c;

	*acks = -1;
	if (!rw_proto_acquire_send(conn, keys, mode, held_mode, lease_ms,
							   intent_ms, &c, err))
		return RW_ACQ_FAILED;
	return rw_proto_acquire_collect(conn, &c, result, other, acks, err);
}

/* Room for n calls of a pipelined batch, and their arguments. */
static void
proto_batch_alloc(RwTryBatch *b, int n)
{
	b->n = n;
	b->c = palloc(sizeof(RwAcquireCall) * n);
	b->calls = palloc(sizeof(RwScriptCall) * n);
}

/*
 * First tries of n locks on one connection, pipelined (held.c's first
 * round of several names): the session holds none of them, and a busy lock
 * gets no intent or mark (a plain try). With replicas > 0, one WAIT follows
 * them all in the same round trip (it covers every write before it).
 * Written out here, read by rw_proto_acquire_many_collect: a quorum writes
 * to every member before it reads from any. *b keeps the calls until then.
 * False, with *err, if the connection could not be had or failed
 * (err->maybe_sent: any of them may have run). Never throws (but out of
 * memory).
 */
bool
rw_proto_acquire_many_send(RwConn *conn, RwKeys *const *keys, int n,
						   RwMode mode, int lease_ms, int replicas,
						   RwTryBatch *b, RwError *err)
{
	proto_batch_alloc(b, n);
	b->replicas = replicas;
	for (int i = 0; i < n; i++)
	{
		RwAcquireCall *c = &b->c[i];
		const char *args[4] = {rw_owner_id(), c->seq,
			proto_mode_arg(mode, RW_NONE), c->lease};

		snprintf(c->seq, sizeof(c->seq), UINT64_FORMAT, rw_proto_seq_next());
		snprintf(c->lease, sizeof(c->lease), "%d", lease_ms);
		proto_prepare(&b->calls[i], RW_SCRIPT_ACQUIRE, keys[i], 4, args);
	}
	err->maybe_sent = false;
	return rw_script_send(conn, b->calls, n, replicas, err);	/* maybe_sent:
																 * if the write
																 * began */
}

/*
 * Read the answers to rw_proto_acquire_many_send, all of them (the
 * connection is left with nothing half read). status[i] is RW_GRANTED,
 * result[i] the token (a write) or the last write token (a read), or
 * RW_BUSY; any other answer (an error reply, a redirection) is
 * RW_ACQ_FAILED for that lock alone: an error reply comes before the
 * script's writes, so nothing was granted there, and the caller takes it
 * by the single path, which reports what it meets. With a WAIT sent,
 * *acks is how many replicas acknowledged (-1 if WAIT failed); else -1.
 * False, with *err, if the connection failed (err->maybe_sent: any of them
 * may have run). Never throws (but out of memory).
 */
bool
rw_proto_acquire_many_collect(RwConn *conn, RwTryBatch *b,
							  RwAcquireStatus *status, int64 *result,
							  int *acks, RwError *err)
{
	redisReply **r = palloc(sizeof(redisReply *) * b->n);

	*acks = -1;
	if (!rw_script_collect(conn, b->calls, b->n, r, b->replicas, acks, err))
	{
		err->maybe_sent = true;
		return false;
	}
	for (int i = 0; i < b->n; i++)
	{
		status[i] = RW_ACQ_FAILED;
		if (proto_is_int(r[i]))
		{
			status[i] = r[i]->integer >= 0 ? RW_GRANTED : RW_BUSY;
			result[i] = r[i]->integer >= 0 ? r[i]->integer : -r[i]->integer;
		}
		freeReplyObject(r[i]);
	}
	pfree(r);
	return true;
}

/*
 * A first try of each of n locks in one round trip on one connection
 * (rw_proto_acquire_many_send, then _collect), with rwlock.wait_replicas's
 * WAIT after them all.
 */
bool
rw_proto_acquire_many(RwConn *conn, RwKeys *const *keys, int n, RwMode mode,
					  int lease_ms, RwAcquireStatus *status, int64 *result,
					  int *acks, RwError *err)
{
	RwTryBatch	b;

	*acks = -1;
	if (!rw_proto_acquire_many_send(conn, keys, n, mode, lease_ms,
									rw_wait_replicas, &b, err))
		return false;
	return rw_proto_acquire_many_collect(conn, &b, status, result, acks, err);
}

/*
 * Raise the last write token of each of n locks this session holds for
 * writing to at least tokens[i] (quorum.c, after a majority granted them in
 * one round), pipelined, without reading the answers
 * (rw_proto_fence_many_collect). As rw_proto_acquire_many_send.
 */
bool
rw_proto_fence_many_send(RwConn *conn, RwKeys *const *keys,
						 const int64 *tokens, int n, RwTryBatch *b,
						 RwError *err)
{
	proto_batch_alloc(b, n);
	b->replicas = 0;
	for (int i = 0; i < n; i++)
	{
		RwAcquireCall *c = &b->c[i];
		const char *args[3] = {rw_owner_id(), c->seq, c->lease};

		snprintf(c->seq, sizeof(c->seq), UINT64_FORMAT, rw_proto_seq_now());
		snprintf(c->lease, sizeof(c->lease), INT64_FORMAT, tokens[i]);
		rw_script_prepare(&b->calls[i], RW_SCRIPT_FENCE, 1,
						  (const char *const *) keys[i]->key, keys[i]->len,
						  3, args);
	}
	err->maybe_sent = false;
	return rw_script_send(conn, b->calls, n, 0, err);
}

/*
 * Read the answers to rw_proto_fence_many_send: held[i] as
 * rw_proto_collect_held's (1: raised; 0: not held there; -1: refused).
 * False, with *err, if the connection failed. Never throws (but out of
 * memory).
 */
bool
rw_proto_fence_many_collect(RwConn *conn, RwTryBatch *b, int *held,
							RwError *err)
{
	redisReply **r = palloc(sizeof(redisReply *) * b->n);

	if (!rw_script_collect(conn, b->calls, b->n, r, 0, NULL, err))
		return false;
	for (int i = 0; i < b->n; i++)
	{
		RwError		e;

		held[i] = rw_proto_release_result(r[i], &e);
	}
	pfree(r);
	return true;
}

/*
 * Raise the last write token of a lock this session holds for writing to
 * at least `token` (quorum.c, after a majority granted it), without
 * reading the answer (rw_proto_fence_collect). *c keeps the arguments.
 */
bool
rw_proto_fence_send(RwConn *conn, const RwKeys *keys, int64 token,
					RwAcquireCall *c, RwError *err)
{
	const char *args[3] = {rw_owner_id(), c->seq, c->lease};

	snprintf(c->seq, sizeof(c->seq), UINT64_FORMAT, rw_proto_seq_now());
	snprintf(c->lease, sizeof(c->lease), INT64_FORMAT, token);
	rw_script_prepare(&c->call, RW_SCRIPT_FENCE, 1,
					  (const char *const *) keys->key, keys->len, 3, args);
	return rw_script_send(conn, &c->call, 1, 0, err);
}

/*
 * Read the answer to rw_proto_fence_send or rw_proto_release_send: 1 if the
 * owner still held the lock there (a fence: its token is raised), 0 if not,
 * -1 if Redis could not be asked or refused (*err). Never throws.
 */
int
rw_proto_collect_held(RwConn *conn, RwAcquireCall *c, RwError *err)
{
	redisReply *r;

	if (!rw_script_collect(conn, &c->call, 1, &r, 0, NULL, err))
		return -1;
	return rw_proto_release_result(r, err);
}

/*
 * The arguments of release.lua after its keys, as request seqno, and how
 * many: a plain release sends only the owner and seq, a withdrawal ("q")
 * what it keeps, a downgrade ("r") the kept read lock's lease too (keep is
 * the script's default, RW_KEEP_TOKEN_MS). bufs must outlive args.
 */
static int
proto_release_args(RwKeep keep, int lease_ms, uint64 seqno, const char **args,
				   char *seq, char *lease)
{
	snprintf(seq, 24, UINT64_FORMAT, seqno);
	snprintf(lease, 16, "%d", lease_ms);
	args[0] = rw_owner_id();
	args[1] = seq;
	args[2] = proto_keep_arg(keep);
	args[3] = lease;
	return keep == RW_KEEP_READ ? 4 : keep == RW_KEEP_ALL ? 3 : 2;
}

/*
 * Release what this session holds of the lock in Redis, keeping a read lock
 * (RW_KEEP_READ, with a lease of lease_ms) or only withdrawing a waiting
 * writer's intent (RW_KEEP_ALL), and wait for the answer: 1 if the hold was
 * still ours, 0 if it had been lost, -1 if Redis could not be asked or
 * answered with an error (*err says which). Never throws.
 */
int
rw_proto_release(RwConn *conn, const RwKeys *keys, RwKeep keep, int lease_ms,
				 RwError *err)
{
	RwAcquireCall c;

	if (!rw_proto_release_send(conn, keys, keep, lease_ms, &c, err))
		return -1;
	return rw_proto_collect_held(conn, &c, err);
}

/*
 * Release what another owner holds of the lock, keeping `keep` (the
 * keeper: everything, for a session that exited before its own release got
 * through; only the intent or mark of a wait cut off in a stall, for a live
 * one) as that owner's request seq, and wait for the answer: as
 * rw_proto_release. owner must outlive the call.
 */
int
rw_proto_release_as(RwConn *conn, const RwKeys *keys, const char *owner,
					uint64 seq, RwKeep keep, RwError *err)
{
	RwAcquireCall c;
	const char *args[4];
	int			held,
				nargs;

	nargs = proto_release_args(keep, 0, seq, args, c.seq, c.lease);
	args[0] = owner;
	proto_prepare(&c.call, RW_SCRIPT_RELEASE, keys, nargs, args);
	if (!rw_script_send(conn, &c.call, 1, 0, err))
		return -1;
	held = rw_proto_collect_held(conn, &c, err);
	/* A newer request of the owner's ran there: nothing older is left. */
	if (held < 0 && err->kind == RW_ERR_REPLY && rw_proto_is_stale(err->msg))
		return 0;
	return held;
}

/*
 * The same release, sent without reading the answer (a quorum sends it to
 * all its members first): rw_proto_collect_held reads it. *c keeps the
 * arguments until then.
 */
bool
rw_proto_release_send(RwConn *conn, const RwKeys *keys, RwKeep keep,
					  int lease_ms, RwAcquireCall *c, RwError *err)
{
	const char *args[4];
	int			nargs;

	nargs = proto_release_args(keep, lease_ms, rw_proto_seq_next(), args,
							   c->seq, c->lease);
	proto_prepare(&c->call, RW_SCRIPT_RELEASE, keys, nargs, args);
	return rw_script_send(conn, &c->call, 1, 0, err);
}

/*
 * Queue the same release, as EVAL, with a tag: the caller sends it and
 * reads its answer later (rw_proto_release_result). The connection must be
 * open.
 */
void
rw_proto_release_append(RwConn *conn, const RwKeys *keys, RwKeep keep,
						int lease_ms, void *tag)
{
	char		seq[24],
				lease[16];
	const char *args[4];
	RwScriptCall call;
	int			nargs;

	nargs = proto_release_args(keep, lease_ms, rw_proto_seq_next(), args, seq,
							   lease);
	proto_prepare(&call, RW_SCRIPT_RELEASE, keys, nargs, args);
	rw_script_append_eval(conn, &call, tag);
}

/* What a release script answered (the reply is freed): 1, 0, or -1. */
int
rw_proto_release_result(redisReply *r, RwError *err)
{
	int			held;

	if (!proto_is_int(r) || (r->integer != 0 && r->integer != 1))
	{
		proto_bad_reply(r, "release", err);
		return -1;
	}
	held = (int) r->integer;
	freeReplyObject(r);
	return held;
}

/*
 * An answer by which a Redis Cluster says it did not run the command here,
 * now (cluster.c follows it): MOVED, ASK, TRYAGAIN, CLUSTERDOWN.
 */
bool
rw_proto_is_redirect(const char *msg)
{
	return strncmp(msg, "MOVED ", 6) == 0 || strncmp(msg, "ASK ", 4) == 0 ||
		strncmp(msg, "TRYAGAIN", 8) == 0 || strncmp(msg, "CLUSTERDOWN", 11) == 0;
}

/*
 * Send the renewals of n holds on one connection, pipelined, on behalf of
 * owners[i] as of their requests seqs[i] (NULL owners: this session's, as
 * of its newest request; the keeper renews for others),
 * without reading the answers (rw_proto_renew_collect reads them; a quorum
 * sends to all its members first). *rc keeps the calls until then. False,
 * with *err (and *rc freed), if the connection could not be had or failed.
 * Never throws.
 */
bool
rw_proto_renew_send(RwConn *conn, RwKeys **keys, const char *const *owners,
					const uint64 *seqs, const int *lease_ms, int n,
					RwRenewCall *rc, RwError *err)
{
	rc->n = n;
	rc->calls = palloc(sizeof(RwScriptCall) * n);
	rc->leases = palloc(16 * n);
	rc->seqs = palloc(24 * n);
	for (int i = 0; i < n; i++)
	{
		const char *args[3] = {owners ? owners[i] : rw_owner_id(),
			rc->seqs + 24 * i, rc->leases + 16 * i};

		snprintf(rc->seqs + 24 * i, 24, UINT64_FORMAT,
				 owners ? seqs[i] : rw_proto_seq_now());
		snprintf(rc->leases + 16 * i, 16, "%d", lease_ms[i]);
		proto_prepare(&rc->calls[i], RW_SCRIPT_RENEW, keys[i], 3, args);
	}
	if (rw_script_send(conn, rc->calls, n, rw_wait_replicas, err))
		return true;
	pfree(rc->calls);
	pfree(rc->leases);
	pfree(rc->seqs);
	return false;
}

/*
 * A renewal too few replicas acknowledged: logged at most every 10 s, at a
 * safe moment (rw_log_later: the renewals' answers are not recorded yet).
 */
static void
proto_log_unacked(int n, int acks)
{
	static int64 logged_ms = 0;

	/*
	 * Not a loss: the master has the renewal. Counted as renewed, and the
	 * next renewal asks for acknowledgements again.
	 */
	if (logged_ms == 0 || rw_now_ms() - logged_ms > 10000)
	{
		rw_log_later("rwlock: a renewal of %d lease(s) was acknowledged by %d of the %d replicas rwlock.wait_replicas asks for within rwlock.wait_replicas_timeout (%d ms); it counts as renewed on the master and the next renewal asks again",
					 n, Max(acks, 0), rw_wait_replicas, rw_wait_replicas_timeout_ms);
		logged_ms = rw_now_ms();
	}
}

/*
 * Read the answers to rw_proto_renew_send (and free *rc). held[i] becomes 1
 * if hold i is still its owner's (its lease now runs lease_ms[i] from
 * when it was sent), 0 if it was lost, -3 if it was stale (a newer request
 * of the owner's on that lock ran since it was sent: no loss, the renewer
 * asks again as of that request), -1 if Redis answered with an error
 * (logged later, rw_log_later: nothing here may throw); with why, -2 and the answer in why[i] if a cluster redirected
 * it (cluster.c sends it again). renew.lua only extends what the owner
 * still holds, so a renewal that crosses a release never brings the lock
 * back. Returns false, with *err, if the connection failed. Never throws.
 */
bool
rw_proto_renew_collect(RwConn *conn, RwRenewCall *rc, int *held, char **why,
					   RwError *err)
{
	redisReply **replies = palloc(sizeof(redisReply *) * rc->n);
	int			acks;
	bool		ok = rw_script_collect(conn, rc->calls, rc->n, replies,
									   rw_wait_replicas, &acks, err);

	if (ok && rw_wait_replicas > 0 && acks < rw_wait_replicas)
		proto_log_unacked(rc->n, acks);
	for (int i = 0; ok && i < rc->n; i++)
	{
		redisReply *r = replies[i];

		held[i] = (proto_is_int(r) && (r->integer == 0 || r->integer == 1)) ?
			(int) r->integer : -1;
		if (why != NULL && r->type == REDIS_REPLY_ERROR &&
			rw_proto_is_redirect(r->str))
		{
			held[i] = -2;
			why[i] = pstrdup(r->str);
		}
		else if (r->type == REDIS_REPLY_ERROR && rw_proto_is_stale(r->str))
			held[i] = -3;
		else if (held[i] < 0)
			rw_log_later("rwlock: renewing a lease failed: %.200s",
						 r->type == REDIS_REPLY_ERROR ? r->str : "unexpected reply");
		freeReplyObject(r);
	}
	pfree(rc->calls);
	pfree(rc->leases);
	pfree(rc->seqs);
	pfree(replies);
	return ok;
}

/* Renew n holds on one connection: rw_proto_renew_send, then _collect. */
bool
rw_proto_renew(RwConn *conn, RwKeys **keys, const char *const *owners,
			   const uint64 *seqs, const int *lease_ms, int n, int *held,
			   char **why, RwError *err)
{
	RwRenewCall rc;

	return rw_proto_renew_send(conn, keys, owners, seqs, lease_ms, n, &rc, err) &&
		rw_proto_renew_collect(conn, &rc, held, why, err);
}

/* Owners and their ms left, from a flat [owner, ms, owner, ms...] list. */
static bool
proto_take_pairs(redisReply *list, int *n, char ***owners, int64 **ms)
{
	if (list->type != REDIS_REPLY_ARRAY || list->elements % 2 != 0)
		return false;
	*n = list->elements / 2;
	*owners = palloc(sizeof(char *) * (*n + 1));
	*ms = palloc(sizeof(int64) * (*n + 1));
	for (int i = 0; i < *n; i++)
	{
		redisReply *o = list->element[2 * i];
		redisReply *t = list->element[2 * i + 1];

		if (!proto_is_str(o) || !proto_is_int(t))
			return false;
		(*owners)[i] = pnstrdup(o->str, o->len);
		(*ms)[i] = t->integer;
	}
	return true;
}

/*
 * Send the question of rw_proto_info without reading the answer
 * (rw_proto_info_collect reads it; a quorum asks all its members first).
 * Never throws.
 */
bool
rw_proto_info_send(RwConn *conn, const RwKeys *keys, RwScriptCall *call,
				   RwError *err)
{
	const char *args[1] = {RW_PROTOCOL_VERSION};

	proto_prepare(call, RW_SCRIPT_INFO, keys, 1, args);
	return rw_script_send(conn, call, 1, 0, err);
}

/* Read the answer to rw_proto_info_send into *info. Never throws. */
bool
rw_proto_info_collect(RwConn *conn, RwScriptCall *call, RwLockInfo *info,
					  RwError *err)
{
	redisReply *r;
	redisReply **e;

	if (!rw_script_collect(conn, call, 1, &r, 0, NULL, err))
		return false;
	e = r->element;
	if (r->type != REDIS_REPLY_ARRAY || r->elements != 6 || !proto_is_str(e[0]) ||
		!proto_is_int(e[1]) || !proto_is_str(e[2]) || !proto_is_int(e[3]) ||
		!proto_take_pairs(e[4], &info->nreaders, &info->readers, &info->reader_ms) ||
		!proto_take_pairs(e[5], &info->nwaiting, &info->waiting, &info->waiting_ms))
	{
		proto_bad_reply(r, "info", err);
		return false;
	}
	strlcpy(info->state, e[0]->str, sizeof(info->state));
	info->token = e[1]->integer;
	info->writer = e[2]->len > 0 ? pnstrdup(e[2]->str, e[2]->len) : NULL;
	info->writer_ms = e[3]->integer;
	freeReplyObject(r);
	return true;
}

/*
 * The state of a lock as Redis has it now; false, with *err, if Redis could
 * not be asked or answered with an error. Never throws.
 */
bool
rw_proto_info(RwConn *conn, const RwKeys *keys, RwLockInfo *info, RwError *err)
{
	RwScriptCall call;

	return rw_proto_info_send(conn, keys, &call, err) &&
		rw_proto_info_collect(conn, &call, info, err);
}
