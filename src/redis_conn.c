/*-------------------------------------------------------------------------
 *
 * redis_conn.c
 *	  One connection from this backend to a Redis node: the socket, plain
 *	  or TLS, hiredis as the protocol codec, and every wait on the socket.
 *
 * The layers: the socket is ours, connected here, non-blocking. Every read
 * and write on it goes through conn_fill and conn_write, which call
 * read(2)/write(2) on a plain connection and SSL_read/SSL_write (tls.c) on
 * a rediss:// one; everything above them is one code path. hiredis is the
 * codec only: a redisContext made by redisConnectFd holds the output buffer
 * that redisAppendCommandArgv formats commands into and the reader that the
 * bytes read are fed to and replies taken from; hiredis never touches the
 * socket. Every wait (the TCP connection, each step of the TLS handshake, a
 * write, a reply) goes through a WaitEventSet that also watches the process
 * latch and postmaster death, and has a deadline on the monotonic clock.
 *
 * Rules kept here:
 *	- interrupts win: a cancel or terminate that arrives while a command is
 *	  in flight closes the connection and fails the exchange with
 *	  RW_ERR_INTERRUPTED at once; the caller records what the command may
 *	  have done (err->maybe_sent) and then serves the interrupt. Lock waits,
 *	  which have nothing in flight, serve interrupts directly;
 *	- a connection whose exchange failed (lost, timed out, interrupted,
 *	  garbled) is closed at once: nothing ever reads a stale reply off a
 *	  kept connection;
 *	- at most one connection attempt per node per call (rw_call_begin marks
 *	  a call; a waiter's next try after a failed one counts as a new call,
 *	  rw_call_again): after a failed attempt the rest of the call fails
 *	  fast;
 *	- commands may be sent with a tag, without waiting for their replies
 *	  (releases at transaction end): their replies are read first by any
 *	  later exchange and kept, with their tags, until rw_take_late; if the
 *	  connection closes first, each such tag is handed back with no reply;
 *	- a caller that must not wait long (a commit, backend exit) caps every
 *	  deadline with rw_conn_limit(); a lock wait caps its tries at its end
 *	  (rw_conn_tighten);
 *	- at transaction end, which holds interrupts, a cancel still cuts waits
 *	  short (rw_conn_cancellable): a flush of tagged commands then leaves
 *	  the rest queued on the open connection (rw_flush_tagged), and is not
 *	  waited for again in the same call (the abort that follows the
 *	  cancel of a statement whose subtransaction's releases it cut);
 *	- log lines between a Redis answer and its record wait for a safe
 *	  moment (rw_log_later);
 *	- a password sent (AUTH) leaves no copy in memory: formatted and wiped
 *	  here, and the output buffer wiped once written (conn_append_secret).
 *
 *-------------------------------------------------------------------------
 */
#include "rwlock.h"

#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "miscadmin.h"
#include "pgstat.h"
#include "portability/instr_time.h"
#include "storage/fd.h"
#include "storage/ipc.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#define CONN_NO_DEADLINE PG_INT64_MAX
#define CONN_READ_BUF	(16 * 1024)	/* as hiredis's redisBufferRead */
#define CONN_KEEPALIVE_S 15		/* as hiredis's redisEnableKeepAlive */
#define CONN_ALL_OWED	(-1)	/* conn_exchange: wait for the tagged only */
#define CONN_LATE_MS	100		/* conn_wait: looks this long past a deadline */
#define CONN_HANDSHAKE_ROOM 1024	/* the handshake's commands after AUTH
									 * (conn_append_secret): about 550 bytes
									 * at most */

static uint64 conn_call_id = 1;
static int64 conn_cap = CONN_NO_DEADLINE;	/* see rw_conn_limit */
static bool conn_cancel_cuts = false;	/* see rw_conn_cancellable */
static bool conn_cancel_cut = false;	/* ... and a cancel cut a wait short */

/*
 * A new SQL call or callback: each may try to connect to a node once. A cap
 * on deadlines that an earlier call left behind (an error thrown between
 * rw_conn_tighten and rw_conn_restore) ends here.
 */
void
rw_call_begin(void)
{
	conn_call_id++;
	conn_cap = CONN_NO_DEADLINE;
	conn_cancel_cuts = false;
}

/* The call in progress (cluster.c keeps an ASK redirection for its rest). */
uint64
rw_call_id(void)
{
	return conn_call_id;
}

/*
 * A waiter's next try after a try that failed (waiting.c): a new call as
 * far as connection attempts go (a node that could not be reached is tried
 * again, a cluster's slot map may be loaded again), under the same cap.
 */
void
rw_call_again(void)
{
	conn_call_id++;
}

/*
 * Cap every deadline until called again with 0: COMMIT and backend exit
 * must return within a bound, whatever the settings.
 */
void
rw_conn_limit(int64 deadline)
{
	conn_cap = deadline > 0 ? deadline : CONN_NO_DEADLINE;
}

/*
 * Tighten the cap to `deadline` for a part of a call (quorum.c: the masters
 * of a quorum are reached, then answer, each phase within one timeout
 * shared by all of them). Returns the cap to put back with rw_conn_restore.
 */
int64
rw_conn_tighten(int64 deadline)
{
	int64		old = conn_cap;

	conn_cap = Min(conn_cap, deadline);
	return old;
}

void
rw_conn_restore(int64 cap)
{
	conn_cap = cap;
}

/*
 * Until called again with false: a pending cancel or statement_timeout cuts
 * waits short although the caller holds interrupts (a commit's releases,
 * SPEC 13: a COMMIT never holds off cancel for long, however many holds it
 * ends). The caller serves the cancel in its own way (rw_conn_cancel_cut).
 */
void
rw_conn_cancellable(bool on)
{
	conn_cancel_cuts = on;
	if (on)
		conn_cancel_cut = false;
}

/* Whether a cancel cut a wait short since rw_conn_cancellable(true). */
bool
rw_conn_cancel_cut(void)
{
	return conn_cancel_cut;
}

static int64
conn_deadline(int timeout_ms)
{
	return Min(rw_now_ms() + timeout_ms, conn_cap);
}

/* The wall-clock time of a monotonic instant. */
TimestampTz
rw_mono_to_timestamp(int64 mono_ms)
{
	return TimestampTzPlusMilliseconds(GetCurrentTimestamp(),
									   mono_ms - rw_now_ms());
}

/*
 * Whether an interrupt wants the current wait cut short: terminate always
 * (but not while the backend already exits: its waits are bounded by the
 * exit budget); cancel and statement_timeout where the backend would serve
 * them (not inside a commit, which holds interrupts).
 */
static bool
conn_interrupt_wanted(void)
{
	if (proc_exit_inprogress)
		return false;
	if (ProcDiePending)
		return true;
	if (QueryCancelPending && conn_cancel_cuts)
	{
		conn_cancel_cut = true;
		return true;
	}
	return QueryCancelPending && InterruptHoldoffCount == 0 &&
		QueryCancelHoldoffCount == 0 && CritSectionCount == 0;
}

/*
 * Wait until the connection's socket is ready for `events` or the deadline
 * passes. Returns the ready events, 0 on timeout, -1 if the postmaster died
 * while this process is already exiting, -2 if an interrupt wants the wait
 * to end. With serve, interrupts are served here instead (they throw).
 * A deadline passed less than CONN_LATE_MS ago still looks, without
 * waiting: a quorum reads its masters' answers one after the other within
 * one shared deadline, and an answer that came while an earlier master was
 * waited for counts. (Bounded, so that a reply trickling in cannot stretch
 * the deadline.)
 */
static int
conn_wait(RwConn *conn, uint32 events, int64 deadline, bool serve)
{
	WaitEvent	ev;

	if (conn->sock_events != events)
	{
		ModifyWaitEvent(conn->wes, conn->sock_pos, events, NULL);
		conn->sock_events = events;
	}
	for (;;)
	{
		int64		left = deadline - rw_now_ms();

		if (serve)
			CHECK_FOR_INTERRUPTS();
		else if (conn_interrupt_wanted())
			return -2;
		if (left <= -CONN_LATE_MS)
			return 0;
		if (WaitEventSetWait(conn->wes, deadline == CONN_NO_DEADLINE ? -1 :
							 (long) Max(Min(left, INT_MAX), 0),
							 &ev, 1, PG_WAIT_EXTENSION) == 0)
		{
			if (left <= 0)
				return 0;
			continue;
		}
		if (ev.events & WL_LATCH_SET)
		{
			ResetLatch(MyLatch);
			continue;
		}
		if (ev.events & WL_POSTMASTER_DEATH)
		{
			if (!proc_exit_inprogress)
				proc_exit(1);
			return -1;
		}
		return ev.events & events;
	}
}

/*
 * Wait, serving interrupts, until the connection has something to read or
 * timeout_ms passes (-1: no limit). For lock waits, which have nothing in
 * flight and so may be cancelled at any moment.
 */
bool
rw_conn_wait_readable(RwConn *conn, long timeout_ms)
{
	int64		deadline = timeout_ms < 0 ? conn_cap : conn_deadline(timeout_ms);
	uint32		events = WL_SOCKET_READABLE;

	if (conn->tls)
		events = rw_tls_wait_events(conn->tls, events);
	return conn_wait(conn, events, deadline, true) > 0;
}

/*
 * As rw_conn_wait_readable, for several open connections at once (a
 * quorum's subscribers): true when any has something to read. A wait set
 * is made for the wait: a lock wait is long next to its cost.
 */
bool
rw_conns_wait_readable(RwConn **conns, int n, long timeout_ms)
{
	int64		deadline = timeout_ms < 0 ? conn_cap : conn_deadline(timeout_ms);
	WaitEventSet *wes = CreateWaitEventSet(CurrentMemoryContext, n + 2);
	WaitEvent	ev;
	bool		ready = false;

	/*
	 * The set's epoll descriptor must not leak when adding a socket fails
	 * (epoll_ctl: ERROR) or an interrupt throws.
	 */
	PG_TRY();
	{
		AddWaitEventToSet(wes, WL_LATCH_SET, PGINVALID_SOCKET, MyLatch, NULL);
		AddWaitEventToSet(wes, WL_POSTMASTER_DEATH, PGINVALID_SOCKET, NULL, NULL);
		for (int i = 0; i < n; i++)
		{
			ready |= conns[i]->tls != NULL && rw_tls_pending(conns[i]->tls);
			AddWaitEventToSet(wes, conns[i]->tls ?
							  rw_tls_wait_events(conns[i]->tls, WL_SOCKET_READABLE) :
							  WL_SOCKET_READABLE, conns[i]->ctx->fd, NULL, NULL);
		}
		while (!ready)
		{
			int64		left = deadline - rw_now_ms();

			CHECK_FOR_INTERRUPTS();
			if (left <= 0)
				break;
			if (WaitEventSetWait(wes, deadline == CONN_NO_DEADLINE ? -1 : (long) Min(left, INT_MAX),
								 &ev, 1, PG_WAIT_EXTENSION) == 0)
				continue;
			if (ev.events & WL_LATCH_SET)
				ResetLatch(MyLatch);
			else if (ev.events & WL_POSTMASTER_DEATH)
				proc_exit(1);
			else
				ready = true;
		}
	}
	PG_FINALLY();
	{
		FreeWaitEventSet(wes);
	}
	PG_END_TRY();
	return ready;
}

/*
 * Which of n open connections with answers due to read first (cluster.c:
 * a renewal's batches, sent to every master at once): the first that has
 * something to read, waiting for one until the cap on deadlines
 * (rw_conn_tighten) passes. Never throws: an interrupt that wants the wait
 * cut short, a deadline passed, or a wait set that could not be made all
 * give 0, and reading that connection then fails at once (closing it) as
 * any exchange would, or takes the answer that came.
 */
int
rw_conns_first_readable(RwConn **conns, int n)
{
	WaitEventSet *volatile wes = NULL;
	volatile int ready = -1;
	MemoryContext cxt = CurrentMemoryContext;

	for (int i = 0; i < n; i++)
		if (conns[i]->ctx == NULL ||
			conns[i]->ctx->reader->pos < conns[i]->ctx->reader->len ||
			(conns[i]->tls != NULL && rw_tls_pending(conns[i]->tls)))
			return i;
	PG_TRY();
	{
		WaitEvent	ev;

		wes = CreateWaitEventSet(CurrentMemoryContext, n + 2);
		AddWaitEventToSet(wes, WL_LATCH_SET, PGINVALID_SOCKET, MyLatch, NULL);
		AddWaitEventToSet(wes, WL_POSTMASTER_DEATH, PGINVALID_SOCKET, NULL, NULL);
		for (int i = 0; i < n; i++)
			AddWaitEventToSet(wes, conns[i]->tls ?
							  rw_tls_wait_events(conns[i]->tls, WL_SOCKET_READABLE) :
							  WL_SOCKET_READABLE, conns[i]->ctx->fd, NULL,
							  (void *) (intptr_t) i);
		while (ready < 0)
		{
			int64		left = conn_cap - rw_now_ms();

			if (conn_interrupt_wanted())
				break;
			/* Past the deadline: one last look, without waiting. */
			if (WaitEventSetWait(wes, conn_cap == CONN_NO_DEADLINE ? -1 :
								 (long) Max(Min(left, INT_MAX), 0),
								 &ev, 1, PG_WAIT_EXTENSION) == 0)
			{
				if (left <= 0)
					break;
				continue;
			}
			if (ev.events & WL_LATCH_SET)
				ResetLatch(MyLatch);
			else if (ev.events & WL_POSTMASTER_DEATH)
			{
				if (!proc_exit_inprogress)
					proc_exit(1);
				break;
			}
			else
				ready = (int) (intptr_t) ev.user_data;
		}
	}
	PG_CATCH();
	{
		/* No descriptor for the set: the answers are read in turn. */
		MemoryContextSwitchTo(cxt);
		FlushErrorState();
	}
	PG_END_TRY();
	if (wes != NULL)
		FreeWaitEventSet(wes);
	return ready < 0 ? 0 : ready;
}

/* ---------------------------------------------------------------------
 * Log lines kept for a safe moment
 *
 * elog(LOG) may throw: errfinish serves a pending cancel or terminate. So
 * nothing between a Redis answer and the record of it logs directly (a
 * grant read and not recorded would be a lock held by nobody for a lease;
 * in a quorum, replies left unread on kept connections would be read later
 * as another command's). Those places keep the line here; rw_logs_flush
 * (the session's notes, holds.c, and the keeper's loop) writes it out.
 * Bounded: lines beyond RW_LOGS_MAX are counted, not kept.
 * --------------------------------------------------------------------- */

#define RW_LOGS_MAX 32

static char *logs_kept[RW_LOGS_MAX];
static int	logs_nkept = 0;
static int	logs_dropped = 0;

void
rw_log_later(const char *fmt,...)
{
	char		buf[512];
	va_list		ap;
	char	   *copy;

	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	copy = logs_nkept < RW_LOGS_MAX ?
		MemoryContextAllocExtended(TopMemoryContext, strlen(buf) + 1,
								   MCXT_ALLOC_NO_OOM) : NULL;
	if (copy == NULL)
	{
		logs_dropped++;
		return;
	}
	strcpy(copy, buf);
	logs_kept[logs_nkept++] = copy;
}

/* Write out the kept lines, oldest first. Only where a throw harms nothing. */
void
rw_logs_flush(void)
{
	int			dropped = logs_dropped;

	logs_dropped = 0;
	for (int i = 0; i < logs_nkept; i++)
	{
		char	   *line = logs_kept[i];

		/* Taken off the list first: a throw below must not log it twice. */
		logs_kept[i] = NULL;
		elog(LOG, "%s", line);
		pfree(line);
	}
	logs_nkept = 0;
	if (dropped > 0)
		elog(LOG, "rwlock: %d more such lines were not kept", dropped);
}

/* ---------------------------------------------------------------------
 * Replies owed to tagged commands
 * --------------------------------------------------------------------- */

static void
conn_keep_late(RwConn *conn, void *tag, redisReply *reply)
{
	if (conn->nlate == conn->caplate)
	{
		conn->caplate = Max(8, conn->caplate * 2);
		conn->late = conn->late ?
			repalloc(conn->late, conn->caplate * sizeof(RwLate)) :
			MemoryContextAlloc(TopMemoryContext, conn->caplate * sizeof(RwLate));
	}
	conn->late[conn->nlate].tag = tag;
	conn->late[conn->nlate++].reply = reply;
}

/* The oldest owed reply arrived: move it, with its tag, to the late list. */
static void
conn_owed_answered(RwConn *conn, redisReply *reply)
{
	void	   *tag = conn->owed[0];

	conn->nowed--;
	memmove(conn->owed, conn->owed + 1, conn->nowed * sizeof(void *));
	/* An ASKING ahead of a tagged command (cluster.c): nobody wants it. */
	if (tag == RW_TAG_DISCARD)
	{
		if (reply != NULL)
			freeReplyObject(reply);
		return;
	}
	conn_keep_late(conn, tag, reply);
}

static void
conn_owe(RwConn *conn, void *tag)
{
	if (conn->nowed == conn->capowed)
	{
		conn->capowed = Max(8, conn->capowed * 2);
		conn->owed = conn->owed ?
			repalloc(conn->owed, conn->capowed * sizeof(void *)) :
			MemoryContextAlloc(TopMemoryContext, conn->capowed * sizeof(void *));
	}
	conn->owed[conn->nowed++] = tag;
}

/* ---------------------------------------------------------------------
 * Connecting
 * --------------------------------------------------------------------- */

/* Wipe the output buffer whole, if it held a password (conn_append_secret). */
static void
conn_wipe_secret(RwConn *conn)
{
	if (conn->obuf_secret && conn->ctx != NULL && conn->ctx->obuf != NULL)
		explicit_bzero(conn->ctx->obuf, sdsalloc(conn->ctx->obuf));
	conn->obuf_secret = false;
}

void
rw_conn_close(RwConn *conn)
{
	if (conn->wes != NULL)
	{
		FreeWaitEventSet(conn->wes);
		conn->wes = NULL;
	}
	if (conn->tls != NULL)
	{
		rw_tls_close(conn->tls);
		conn->tls = NULL;
	}
	conn_wipe_secret(conn);
	if (conn->ctx != NULL)
	{
		redisFree(conn->ctx);	/* closes the socket */
		conn->ctx = NULL;
		ReleaseExternalFD();
	}
	conn->scripts_sent = 0;
	/* Replies still owed will never come: hand their tags back empty. */
	while (conn->nowed > 0)
		conn_owed_answered(conn, NULL);
}

/* Fail what is in progress on a connection: record why, then close it. */
static bool
conn_fail(RwConn *conn, RwError *err, RwErrKind kind, const char *msg)
{
	char		copy[sizeof(err->msg)];

	strlcpy(copy, msg, sizeof(copy));	/* msg may be err->msg */
	rw_error_set(err, kind, "%s", copy);
	rw_conn_close(conn);
	return false;
}

/* CreateWaitEventSet may ERROR (no descriptors); a callback must not. */
static bool
conn_make_wait_set(RwConn *conn, RwError *err)
{
	volatile bool ok = true;
	MemoryContext cxt = CurrentMemoryContext;

	PG_TRY();
	{
		conn->wes = CreateWaitEventSet(TopMemoryContext, 3);
		AddWaitEventToSet(conn->wes, WL_LATCH_SET, PGINVALID_SOCKET, MyLatch, NULL);
		AddWaitEventToSet(conn->wes, WL_POSTMASTER_DEATH, PGINVALID_SOCKET, NULL, NULL);
		conn->sock_events = WL_SOCKET_WRITEABLE;
		conn->sock_pos = AddWaitEventToSet(conn->wes, WL_SOCKET_WRITEABLE,
										   conn->ctx->fd, NULL, NULL);
	}
	PG_CATCH();
	{
		MemoryContextSwitchTo(cxt);
		FlushErrorState();
		rw_error_set(err, RW_ERR_CONNECT, "could not create a wait event set");
		ok = false;
	}
	PG_END_TRY();
	return ok;
}

static bool conn_exchange(RwConn *conn, int nreplies, redisReply **replies,
						  int64 deadline, const char *limit, int limit_ms,
						  RwError *err);

/* An error reply in the handshake: credentials refused, or another failure. */
static bool
conn_handshake_error(redisReply *r, const char *command, RwError *err)
{
	bool		auth = strncmp(r->str, "NOAUTH", 6) == 0 ||
		strncmp(r->str, "WRONGPASS", 9) == 0 || strcmp(command, "AUTH") == 0;

	if (strncmp(r->str, "NOAUTH", 6) == 0)
		rw_error_set(err, RW_ERR_AUTH, "Redis requires a password, and neither rwlock.redis_url nor rwlock.password_file gives one for this server: %s", r->str);
	else
		rw_error_set(err, auth ? RW_ERR_AUTH : RW_ERR_CONNECT, "%s refused: %s",
				  command, r->str);
	return false;
}

/*
 * The maxmemory-policy in INFO memory's text; NULL if it does not say
 * (refused by an ACL, or another reply).
 */
static char *
conn_policy_of(redisReply *r)
{
	const char *p;

	if (r->type == REDIS_REPLY_STRING &&
		(p = strstr(r->str, "maxmemory_policy:")) != NULL)
	{
		p += strlen("maxmemory_policy:");
		return pnstrdup(p, strcspn(p, "\r\n"));
	}
	return NULL;
}

/*
 * The maxmemory-policy from the handshake's INFO memory. A user refused
 * INFO (it is in Redis's @dangerous category, which the documented ACL
 * line leaves out) cannot be checked: said once in the server log, and the
 * connection is used (docs/connecting.md).
 */
static char *
conn_policy_info(RwConn *conn, redisReply *r)
{
	static bool said = false;
	char	   *policy = conn_policy_of(r);

	if (policy == NULL && !said && !(r->type == REDIS_REPLY_ERROR &&
									 strncmp(r->str, "NOAUTH", 6) == 0))
	{
		rw_log_later("rwlock: Redis at %s refused INFO (%.200s): its maxmemory-policy cannot be checked; grant the lock user +info, or make sure it is noeviction",
					 conn->node->ep.display,
					 r->type == REDIS_REPLY_ERROR ? r->str : "no maxmemory_policy line");
		said = true;
	}
	return policy;
}

/*
 * Whether a Redis with this maxmemory-policy may serve locks: only
 * noeviction. Any other policy evicts keys once maxmemory is reached, and a
 * lock hash carries a TTL, so volatile-* policies take lock keys first. It
 * is refused even while maxmemory is 0 (nothing evicted yet): CONFIG SET
 * maxmemory can change that at any time, unseen by the connections made.
 */
static bool
conn_policy_check(const char *policy, RwError *err)
{
	if (policy == NULL || pg_strcasecmp(policy, "noeviction") == 0)
		return true;
	rw_error_set(err, RW_ERR_UNFIT,
			  "its maxmemory-policy is %s: it may evict lock keys, freeing held locks for others; set maxmemory-policy noeviction",
			  policy);
	return false;
}

/* Whether a ROLE answer says master; false with *err if it does not. */
static bool
conn_role_is_master(RwEndpoint *ep, redisReply *r, RwError *err)
{
	if (r->type == REDIS_REPLY_ARRAY && r->elements > 0 &&
		r->element[0]->type == REDIS_REPLY_STRING &&
		strcmp(r->element[0]->str, "master") == 0)
		return true;
	rw_error_set(err, RW_ERR_CONNECT,
			  "the server the sentinels named for \"%s\" is not its master (ROLE: %s)",
			  ep->master_name,
			  r->type == REDIS_REPLY_ARRAY && r->elements > 0 &&
			  r->element[0]->type == REDIS_REPLY_STRING ?
			  r->element[0]->str : "?");
	return false;
}

/*
 * A Sentinel-named master, before the password goes to it: ROLE alone. Not
 * the master: false with *err, and the password was never sent. NOAUTH (a
 * server with requirepass answers nothing before AUTH): *checked false,
 * and ROLE is asked again after AUTH. False with *err if the exchange
 * failed.
 */
static bool
conn_role_before_auth(RwConn *conn, int64 deadline, bool *checked,
					  RwError *err)
{
	const char *argv[1] = {"ROLE"};
	redisReply *r;
	bool		ok = true;

	*checked = false;
	rw_append(conn, 1, argv, NULL, NULL);
	if (!conn_exchange(conn, 1, &r, deadline, "rwlock.connect_timeout",
					   rw_connect_timeout_ms, err))
		return false;
	if (r->type != REDIS_REPLY_ERROR)
	{
		ok = conn_role_is_master(&conn->node->ep, r, err);
		*checked = ok;
	}
	freeReplyObject(r);
	if (!ok)
		rw_conn_close(conn);
	return ok;
}

/*
 * Queue a command that carries a password (AUTH) on a new connection. No
 * copy of it may stay in memory once it is sent: hiredis frees the command
 * it formats as is, and empties the output buffer by its length only. So it
 * is formatted here and wiped, into an output buffer with room made ahead
 * for the rest of the handshake (CONN_HANDSHAKE_ROOM: appending no more
 * than that never moves the buffer, which would free the old one as is);
 * the buffer is wiped whole once written out (conn_write) or when the
 * connection closes (rw_conn_close).
 */
static void
conn_append_secret(RwConn *conn, int argc, const char **argv)
{
	redisContext *ctx = conn->ctx;
	size_t		lens[3];
	sds			cmd;
	sds			room;
	int			len;

	Assert(argc <= 3);
	for (int i = 0; i < argc; i++)
		lens[i] = strlen(argv[i]);
	len = redisFormatSdsCommandArgv(&cmd, argc, argv, lens);
	if (len < 0)
		elog(ERROR, "out of memory formatting a Redis command");
	room = sdsMakeRoomFor(ctx->obuf, len + CONN_HANDSHAKE_ROOM);
	if (room != NULL)
	{
		conn->obuf_secret = true;
		ctx->obuf = sdscatlen(room, cmd, len);	/* fits: not moved */
	}
	explicit_bzero(cmd, len);
	sdsfree(cmd);
	if (room == NULL)
		elog(ERROR, "out of memory formatting a Redis command");
}

/*
 * AUTH and SELECT as the URL asks, and a client name for CLIENT LIST. A
 * Redis that wants a password we did not give refuses CLIENT SETNAME with
 * NOAUTH; another refusal of it (an ACL) is ignored. For a Sentinel-named
 * master, ROLE too, in the same round trip: a sentinel may name a server
 * that is no longer (or not yet) the master. With a password to send,
 * ROLE goes first, alone (conn_role_before_auth): a server that is not the
 * master never gets the password, unless it requires one before ROLE
 * (requirepass), which only the sentinels' majority (sentinel.c) and TLS
 * verification of the master's name then guard. A sentinel without a
 * password ignores one that a catch-all line of the password file gave.
 *
 * A command connection to a Redis that serves locks also checks, in the
 * same round trip, that it may (SPEC 13): it must be Redis 5.0 or later
 * (INFO server; a user refused INFO is an ACL user, of 6.0 or later), its
 * maxmemory-policy must be noeviction (INFO memory: no right to read the
 * configuration), and a
 * session's user must be allowed to publish on the lock channels of its
 * rwlock.key_prefix (a PUBLISH to "<prefix>:{}:c", a channel no waiter
 * listens on: no lock has an empty name). Without that permission every
 * release that has a waiter to wake fails, and the lock is left to its
 * lease. A waiters' connection checks that the user may subscribe there
 * (SUBSCRIBE and UNSUBSCRIBE; without it, waiters could only poll), at the
 * first wait. The keeper does not publish (renewals wake nobody) and serves
 * holds of every prefix: it checks the version and the policy only.
 *
 * The steps are a table (handshake_steps): each says when it is sent, what
 * it sends, and what its answer means. All are sent, then all answers read
 * in one round trip; the first answer that fails the connection says why.
 */
/* What the steps of one handshake share. */
typedef struct Handshake
{
	RwConn	   *conn;
	RwEndpoint *ep;
	const char *user;
	const char *password;
	bool		fit_check;		/* a command connection to a lock server */
	bool		role_checked;	/* ROLE was asked before AUTH */
	char	   *probe;			/* "<prefix>:{}:c": the channel probed */
	char	   *policy;			/* INFO's maxmemory-policy, if it said */
	char		dbbuf[16];
	char		namebuf[64];
	RwError    *err;
} Handshake;

typedef struct HandshakeStep
{
	const char *command;		/* for messages */
	bool		(*wanted) (Handshake *h);
	void		(*append) (Handshake *h);
	bool		(*check) (Handshake *h, const char *command, redisReply *r);	/* false: *err */
} HandshakeStep;

static bool
hs_want_auth(Handshake *h)
{
	return h->password != NULL;
}

static void
hs_append_auth(Handshake *h)
{
	const char *argv[3] = {"AUTH", h->user ? h->user : h->password, h->password};

	conn_append_secret(h->conn, h->user ? 3 : 2, argv);
}

/* Any error reply fails the connection. */
static bool
hs_check_plain(Handshake *h, const char *command, redisReply *r)
{
	return r->type != REDIS_REPLY_ERROR || conn_handshake_error(r, command, h->err);
}

/* A sentinel without a password ignores one a catch-all line gave. */
static bool
hs_check_auth(Handshake *h, const char *command, redisReply *r)
{
	if (r->type == REDIS_REPLY_ERROR && h->ep->is_sentinel &&
		strstr(r->str, "without any password configured") != NULL)
		return true;
	return hs_check_plain(h, command, r);
}

static bool
hs_want_select(Handshake *h)
{
	return h->ep->db != 0;
}

static void
hs_append_select(Handshake *h)
{
	const char *argv[2] = {"SELECT", h->dbbuf};

	snprintf(h->dbbuf, sizeof(h->dbbuf), "%d", h->ep->db);
	rw_append(h->conn, 2, argv, NULL, NULL);
}

static bool
hs_want_always(Handshake *h)
{
	return true;
}

static void
hs_append_setname(Handshake *h)
{
	const char *argv[3] = {"CLIENT", "SETNAME", h->namebuf};

	snprintf(h->namebuf, sizeof(h->namebuf), "rwlock:pg:%d%s", MyProcPid,
			 h->ep->is_sentinel ? ":sentinel" :
			 h->conn->is_subscriber ? ":sub" : "");
	rw_append(h->conn, 3, argv, NULL, NULL);
}

/* A refusal by an ACL is ignored; NOAUTH says a password is missing. */
static bool
hs_check_setname(Handshake *h, const char *command, redisReply *r)
{
	if (r->type == REDIS_REPLY_ERROR && strncmp(r->str, "NOAUTH", 6) == 0)
		return conn_handshake_error(r, command, h->err);
	return true;
}

static bool
hs_want_role(Handshake *h)
{
	return h->ep->sentinel && !h->role_checked;
}

static void
hs_append_role(Handshake *h)
{
	const char *argv[1] = {"ROLE"};

	rw_append(h->conn, 1, argv, NULL, NULL);
}

static bool
hs_check_role(Handshake *h, const char *command, redisReply *r)
{
	if (r->type == REDIS_REPLY_ERROR)
		return conn_handshake_error(r, command, h->err);
	return conn_role_is_master(h->ep, r, h->err);
}

static bool
hs_want_fit(Handshake *h)
{
	return h->fit_check;
}

static void
hs_append_info(Handshake *h)
{
	const char *argv[2] = {"INFO", "memory"};

	rw_append(h->conn, 2, argv, NULL, NULL);
}

/* Read, not judged here: conn_policy_check, once every answer is read. */
static bool
hs_check_info(Handshake *h, const char *command, redisReply *r)
{
	h->policy = conn_policy_info(h->conn, r);
	return true;
}

/*
 * The oldest Redis whose commands rwlock's features send work (5.0): the
 * scripts read TIME and then write, which needs script effects
 * replication, Redis's default only since 5.0 (before, such a script fails
 * at its first write); the rest is older (docs/protocol.md, section 1).
 * Valkey says redis_version 7.2.4, whatever its own version.
 */
#define RW_REDIS_MIN_MAJOR	5
#define RW_REDIS_MIN_MINOR	0

static void
hs_append_info_server(Handshake *h)
{
	const char *argv[2] = {"INFO", "server"};

	rw_append(h->conn, 2, argv, NULL, NULL);
}

/* The value of "field:" in INFO's text, up to the line's end, or "". */
static void
hs_info_field(const redisReply *r, const char *field, char *out, size_t size)
{
	const char *p = strstr(r->str, field);
	size_t		len;

	out[0] = '\0';
	if (p == NULL || (p != r->str && p[-1] != '\n'))
		return;
	p += strlen(field);
	len = strcspn(p, "\r\n");
	snprintf(out, size, "%.*s", (int) Min(len, size - 1), p);
}

/*
 * A server older than the features' commands need is refused, its version
 * named. A user refused INFO is not checked, and needs not be: ACL users,
 * and a default user an ACL limits, came with Redis 6.0.
 */
static bool
hs_check_version(Handshake *h, const char *command, redisReply *r)
{
	char		version[64];
	char		valkey[64];
	int			major = 0,
				minor = 0;

	if (r->type != REDIS_REPLY_STRING)
		return true;
	hs_info_field(r, "redis_version:", version, sizeof(version));
	hs_info_field(r, "valkey_version:", valkey, sizeof(valkey));
	if (version[0] == '\0' || sscanf(version, "%d.%d", &major, &minor) != 2)
		return true;
	if (major > RW_REDIS_MIN_MAJOR ||
		(major == RW_REDIS_MIN_MAJOR && minor >= RW_REDIS_MIN_MINOR))
		return true;
	rw_error_set(h->err, RW_ERR_UNFIT,
				 "it is %s %s: rwlock needs Redis %d.%d or later (its scripts read TIME before they write, which needs script effects replication, the default since 5.0)",
				 valkey[0] ? "Valkey" : "Redis", valkey[0] ? valkey : version,
				 RW_REDIS_MIN_MAJOR, RW_REDIS_MIN_MINOR);
	return false;
}

static char *
hs_probe(Handshake *h)
{
	if (h->probe == NULL)
		h->probe = psprintf("%s:{}:c", rw_key_prefix);
	return h->probe;
}

static bool
hs_want_publish(Handshake *h)
{
	return h->fit_check && !IsBackgroundWorker;
}

static void
hs_append_publish(Handshake *h)
{
	const char *argv[3] = {"PUBLISH", hs_probe(h), ""};

	rw_append(h->conn, 3, argv, NULL, NULL);
}

/* The lock channels' right: refused is RW_ERR_NOPERM (NOAUTH is not). */
static bool
hs_check_channel(Handshake *h, const char *command, redisReply *r)
{
	if (r->type == REDIS_REPLY_ERROR && strncmp(r->str, "NOAUTH", 6) != 0)
	{
		rw_error_set(h->err, RW_ERR_NOPERM,
					 "the Redis user may not %s the lock channels (%s %s: %s)",
					 command[0] == 'P' ? "publish on" : "subscribe to",
					 command, h->probe, r->str);
		return false;
	}
	return hs_check_plain(h, command, r);
}

static bool
hs_want_subscribe(Handshake *h)
{
	return h->conn->is_subscriber && !h->ep->is_sentinel;
}

static void
hs_append_subscribe(Handshake *h)
{
	const char *argv[2] = {"SUBSCRIBE", hs_probe(h)};

	rw_append(h->conn, 2, argv, NULL, NULL);
}

static void
hs_append_unsubscribe(Handshake *h)
{
	const char *argv[2] = {"UNSUBSCRIBE", hs_probe(h)};

	rw_append(h->conn, 2, argv, NULL, NULL);
}

/* Still subscribed: no use as a waiter's connection. */
static bool
hs_check_unsubscribe(Handshake *h, const char *command, redisReply *r)
{
	if (r->type == REDIS_REPLY_ARRAY && r->elements == 3 &&
		r->element[2]->type == REDIS_REPLY_INTEGER &&
		r->element[2]->integer == 0)
		return true;
	rw_error_set(h->err, RW_ERR_CONNECT,
				 "unexpected answer to UNSUBSCRIBE %s at connect", h->probe);
	return false;
}

/* In the order they are sent. */
static const HandshakeStep handshake_steps[] = {
	{"AUTH", hs_want_auth, hs_append_auth, hs_check_auth},
	{"SELECT", hs_want_select, hs_append_select, hs_check_plain},
	{"CLIENT SETNAME", hs_want_always, hs_append_setname, hs_check_setname},
	{"ROLE", hs_want_role, hs_append_role, hs_check_role},
	{"INFO", hs_want_fit, hs_append_info_server, hs_check_version},
	{"INFO", hs_want_fit, hs_append_info, hs_check_info},
	{"PUBLISH", hs_want_publish, hs_append_publish, hs_check_channel},
	{"SUBSCRIBE", hs_want_subscribe, hs_append_subscribe, hs_check_channel},
	{"UNSUBSCRIBE", hs_want_subscribe, hs_append_unsubscribe, hs_check_unsubscribe},
};

#define HANDSHAKE_STEPS lengthof(handshake_steps)

static bool
conn_handshake(RwConn *conn, const char *user, const char *password,
			   int64 deadline, RwError *err)
{
	Handshake	h;
	const HandshakeStep *sent[HANDSHAKE_STEPS];
	redisReply *replies[HANDSHAKE_STEPS];
	int			n = 0;
	bool		ok = true;

	memset(&h, 0, sizeof(h));
	h.conn = conn;
	h.ep = &conn->node->ep;
	h.user = user;
	h.password = password;
	h.fit_check = !h.ep->is_sentinel && !conn->is_subscriber;
	h.err = err;

	/* A server a sentinel named proves it is the master before AUTH. */
	if (h.ep->sentinel && password &&
		!conn_role_before_auth(conn, deadline, &h.role_checked, err))
		return false;
	for (int i = 0; i < (int) HANDSHAKE_STEPS; i++)
		if (handshake_steps[i].wanted(&h))
		{
			handshake_steps[i].append(&h);
			sent[n++] = &handshake_steps[i];
		}
	if (!conn_exchange(conn, n, replies, deadline, "rwlock.connect_timeout",
					   rw_connect_timeout_ms, err))
	{
		if (h.probe)
			pfree(h.probe);
		return false;
	}
	for (int i = 0; i < n; i++)
	{
		if (ok)
			ok = sent[i]->check(&h, sent[i]->command, replies[i]);
		freeReplyObject(replies[i]);
	}
	if (ok && h.fit_check)
		ok = conn_policy_check(h.policy, err);
	if (h.policy)
		pfree(h.policy);
	if (h.probe)
		pfree(h.probe);
	if (!ok)
		rw_conn_close(conn);
	return ok;
}

/*
 * Connect a new socket to one address and wait, through the latch, until
 * the connection is made. False with *err (the connection closed) if it
 * fails, times out or is interrupted.
 */
static bool
conn_socket(RwConn *conn, int family, const struct sockaddr *addr,
			socklen_t addrlen, int64 deadline, RwError *err)
{
	int			fd;
	int			soerr = 0;
	socklen_t	len = sizeof(soerr);
	int			ready;

	if (!AcquireExternalFD())
	{
		rw_error_set(err, RW_ERR_CONNECT, "no file descriptor is free for a connection");
		return false;
	}
	fd = socket(family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
	{
		rw_error_set(err, RW_ERR_CONNECT, "could not create a socket: %s", strerror(errno));
		ReleaseExternalFD();
		return false;
	}
	conn->ctx = redisConnectFd(fd);
	conn->opens++;
	if (conn->ctx == NULL)
	{
		close(fd);
		ReleaseExternalFD();
		rw_error_set(err, RW_ERR_CONNECT, "out of memory");
		return false;
	}
	if (family != AF_UNIX)
	{
		int			on = 1;

		/* Commands are small and sent whole: never wait to fill a segment. */
		(void) setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &on, sizeof(on));
	}
	if (connect(fd, addr, addrlen) < 0 && errno != EINPROGRESS && errno != EINTR)
		return conn_fail(conn, err, RW_ERR_CONNECT, strerror(errno));
	if (!conn_make_wait_set(conn, err))
		return conn_fail(conn, err, RW_ERR_CONNECT, err->msg);

	ready = conn_wait(conn, WL_SOCKET_WRITEABLE, deadline, false);
	if (ready == 0)
		return conn_fail(conn, err, RW_ERR_CONNECT,
						 psprintf("no answer within rwlock.connect_timeout (%d ms)",
								  rw_connect_timeout_ms));
	if (ready == -1)
		return conn_fail(conn, err, RW_ERR_CONNECT, "postmaster died");
	if (ready == -2)
		return conn_fail(conn, err, RW_ERR_INTERRUPTED, "interrupted while connecting");
	if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &len) < 0 || soerr != 0)
		return conn_fail(conn, err, RW_ERR_CONNECT, strerror(soerr ? soerr : errno));
	if (family != AF_UNIX)
	{
		int			on = 1;
		int			idle = CONN_KEEPALIVE_S;
		int			intvl = Max(CONN_KEEPALIVE_S / 3, 1);
		int			cnt = 3;

		(void) setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &on, sizeof(on));
		(void) setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof(idle));
		(void) setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof(intvl));
		(void) setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof(cnt));
	}
	return true;
}

/*
 * Resolve a host name, waiting through the latch (resolve.c starts the
 * lookup on glibc's helper thread): a resolver that does not answer (a DNS
 * server down) would otherwise block the backend past
 * rwlock.connect_timeout and past cancel and terminate, which the
 * resolver's own poll() does not heed. The wait polls the lookup every few
 * milliseconds; connections are made rarely. *res is freeaddrinfo's.
 */
static bool
conn_resolve(const char *host, const char *port, int64 deadline,
			 struct addrinfo **res, RwError *err)
{
	struct gaicb *req;
	long		nap = 1;
	int			rc;

	if (!rw_resolve_start(host, port, res, &req, err))
		return false;
	while (req != NULL && (rc = rw_resolve_poll(req, res, err)) == 0)
	{
		if (conn_interrupt_wanted())
		{
			rw_resolve_abandon(req);
			rw_error_set(err, RW_ERR_INTERRUPTED, "interrupted while resolving the host name \"%s\"", host);
			return false;
		}
		if (rw_now_ms() >= deadline)
		{
			rw_resolve_abandon(req);
			rw_error_set(err, RW_ERR_CONNECT,
						 "the host name \"%s\" was not resolved within rwlock.connect_timeout (%d ms)",
						 host, rw_connect_timeout_ms);
			return false;
		}
		if (WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_POSTMASTER_DEATH,
					  nap, PG_WAIT_EXTENSION) & WL_POSTMASTER_DEATH)
		{
			rw_resolve_abandon(req);
			if (!proc_exit_inprogress)
				proc_exit(1);
			rw_error_set(err, RW_ERR_CONNECT, "postmaster died");
			return false;
		}
		ResetLatch(MyLatch);
		nap = Min(nap * 2, 8);
	}
	return req == NULL || rc > 0;
}

/*
 * Make the TCP (or unix socket) connection: each address the host name has,
 * in turn, until one connects, all within the one deadline.
 */
static bool
conn_connect_socket(RwConn *conn, int64 deadline, RwError *err)
{
	RwEndpoint *ep = &conn->node->ep;
	struct addrinfo *res;
	char		port[16];
	bool		ok = false;

	if (ep->is_unix)
	{
		struct sockaddr_un sa;

		memset(&sa, 0, sizeof(sa));
		sa.sun_family = AF_UNIX;
		if (strlen(ep->path) >= sizeof(sa.sun_path))
		{
			rw_error_set(err, RW_ERR_CONNECT, "the unix socket path is too long");
			return false;
		}
		strlcpy(sa.sun_path, ep->path, sizeof(sa.sun_path));
		return conn_socket(conn, AF_UNIX, (struct sockaddr *) &sa, sizeof(sa),
						   deadline, err);
	}

	snprintf(port, sizeof(port), "%d", ep->port);
	if (!conn_resolve(ep->host, port, deadline, &res, err))
		return false;
	for (struct addrinfo *ai = res; ai != NULL && !ok; ai = ai->ai_next)
	{
		ok = conn_socket(conn, ai->ai_family, ai->ai_addr, ai->ai_addrlen,
						 deadline, err);
		if (!ok && (err->kind == RW_ERR_INTERRUPTED || rw_now_ms() >= deadline))
			break;
	}
	freeaddrinfo(res);
	return ok;
}

/* The TLS handshake on the connected socket, each step through the latch. */
static bool
conn_tls_handshake(RwConn *conn, int64 deadline, RwError *err)
{
	char		why[sizeof(err->msg)];

	conn->tls = rw_tls_open(&conn->node->ep, conn->ctx->fd, why, sizeof(why));
	if (conn->tls == NULL)
		return conn_fail(conn, err, RW_ERR_CONNECT, why);
	for (;;)
	{
		uint32		wants = 0;
		int			r = rw_tls_handshake(conn->tls, &wants, why, sizeof(why));
		int			ready;

		if (r > 0)
			return true;
		if (r < 0)
			return conn_fail(conn, err, RW_ERR_CONNECT, why);
		ready = conn_wait(conn, wants, deadline, false);
		if (ready == 0)
			return conn_fail(conn, err, RW_ERR_CONNECT,
							 rw_tls_heard_from_server(conn->tls) ?
							 psprintf("the TLS handshake did not complete within rwlock.connect_timeout (%d ms)",
									  rw_connect_timeout_ms) :
							 psprintf("no answer to the TLS handshake within rwlock.connect_timeout (%d ms); a server without TLS never answers it: for a port without TLS use redis://",
									  rw_connect_timeout_ms));
		if (ready == -1)
			return conn_fail(conn, err, RW_ERR_CONNECT, "postmaster died");
		if (ready == -2)
			return conn_fail(conn, err, RW_ERR_INTERRUPTED,
							 "interrupted during the TLS handshake");
	}
}

/*
 * Connect to one address: the socket, TLS for rediss://, then AUTH (the
 * URL's password or the password file's), SELECT and CLIENT SETNAME (and
 * ROLE for a Sentinel-named master), all before the deadline.
 */
static bool
conn_connect_once(RwConn *conn, int64 deadline, RwError *err)
{
	RwEndpoint *ep = &conn->node->ep;
	char	   *user;
	char	   *password;
	bool		ok;

	if (!rw_password_lookup(ep, &user, &password, err->msg, sizeof(err->msg)))
	{
		err->kind = RW_ERR_CONNECT;
		return false;
	}
	ok = conn_connect_socket(conn, deadline, err) &&
		(!ep->tls || conn_tls_handshake(conn, deadline, err)) &&
		conn_handshake(conn, user, password, deadline, err);
	if (password != NULL && password != ep->password)
	{
		explicit_bzero(password, strlen(password));
		pfree(password);
	}
	if (user != NULL && user != ep->user)
		pfree(user);			/* the password file's, for this connection */
	if (ok && conn->opens > 1)
		rw_stat_add(RW_STAT_RECONNECTS, 1);
	if (!ok && (err->kind == RW_ERR_TIMEOUT || err->kind == RW_ERR_LOST))
	{
		/* A timeout here is a failure to connect, not a slow command. */
		err->kind = RW_ERR_CONNECT;
		/* A TLS server answers a plain client's first bytes so, or not at all. */
		if (!ep->tls && (strncmp(err->msg, "Protocol error", 14) == 0 ||
						 strcmp(err->msg, "Server closed the connection") == 0 ||
						 strstr(err->msg, "reset by peer") != NULL))
			strlcat(err->msg, " (if the server expects TLS, use rediss://)",
					sizeof(err->msg));
	}
	return ok;
}

/* A short pause through the latch; false if an interrupt wants it cut short. */
bool
rw_conn_pause(long ms)
{
	int			rc;

	if (conn_interrupt_wanted())
		return false;
	rc = WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_POSTMASTER_DEATH,
				   ms, PG_WAIT_EXTENSION);
	if (rc & WL_LATCH_SET)
		ResetLatch(MyLatch);
	if ((rc & WL_POSTMASTER_DEATH) && !proc_exit_inprogress)
		proc_exit(1);
	return !conn_interrupt_wanted();
}

#define CONN_SENTINEL_RETRY_MS 100

/*
 * Connect before the deadline. A Sentinel-monitored node is one attempt to
 * reach its master: ask the sentinels (sentinel.c), connect to the address
 * they give and check ROLE; if it is not the master, or cannot be reached
 * (a failover under way: the sentinels still name the dead master), start
 * over after a short pause, until the deadline. A Cluster's node (the
 * logical node: its own connections go to any node of the cluster, the
 * waiters' subscriber above all) is found the same way, by cluster.c's
 * resolver, which names the nodes it knows in turn. The sentinels are asked
 * through ep->resolve (sentinel.c's, attached by whoever made the node:
 * this file never calls up the file map). Once connected at a new
 * address, the node's other connection, if still on the old one, is closed
 * (the subscriber would otherwise wait on a demoted master forever).
 */
static bool
conn_connect(RwConn *conn, int64 deadline, RwError *err)
{
	RwEndpoint *ep = &conn->node->ep;

	if (ep->nquorum > 0)
	{
		/* Its members connect (quorum.c); a quorum has no address. */
		rw_error_set(err, RW_ERR_CONNECT, "a quorum's own node has no connection");
		return false;
	}
	if (!ep->sentinel && !ep->cluster)
		return conn_connect_once(conn, deadline, err);
	for (;;)
	{
		RwNode	   *node = conn->node;

		if (ep->resolve == NULL)
		{
			rw_error_set(err, RW_ERR_CONNECT, "a Sentinel or Cluster URL's node was made without its resolver");
			return false;
		}
		if (ep->resolve(ep, deadline, err) &&
			conn_connect_once(conn, deadline, err))
		{
			RwConn	   *other = conn == &node->cmd ? &node->sub : &node->cmd;

			conn->addr_gen = ep->addr_gen;
			/* A cluster's connections may each be on any of its nodes. */
			if (ep->sentinel && other->node == node && other->ctx != NULL &&
				other->addr_gen != ep->addr_gen)
				rw_conn_close(other);
			return true;
		}
		if (err->kind == RW_ERR_INTERRUPTED || err->kind == RW_ERR_AUTH ||
			err->kind == RW_ERR_UNFIT || err->kind == RW_ERR_NOPERM ||
			rw_now_ms() + CONN_SENTINEL_RETRY_MS >= deadline)
			return false;
		/*
		 * The sentinel that answered may be stale, or lie: ask the next
		 * (for a cluster: try the next node it knows).
		 */
		ep->seed_last = (ep->seed_last + 1) & 0xffff;	/* taken modulo */
		if (!rw_conn_pause(CONN_SENTINEL_RETRY_MS))
		{
			rw_error_set(err, RW_ERR_INTERRUPTED, "interrupted while connecting");
			return false;
		}
	}
}

/*
 * Connect now, before the deadline, whatever happened earlier in this call
 * (sentinel.c, for a connection to one sentinel). Never throws.
 */
bool
rw_conn_open(RwConn *conn, int64 deadline, RwError *err)
{
	err->kind = RW_OK;
	err->maybe_sent = false;
	if (conn->ctx != NULL)
		return true;
	return conn_connect(conn, Min(deadline, conn_cap), err);
}

/*
 * Whether an idle command connection was closed by the other end (Redis
 * restarted, or dropped us): then it is reconnected before use, instead of
 * failing the command sent on it. A command connection that owes no replies
 * has nothing to read between exchanges, so anything readable means EOF, an
 * error, or bytes that are not a reply to anything: either way it is not to
 * be used. The probe costs a system call per command; it is not skipped
 * after a recent read: a Redis that shuts down sends its last replies and
 * then closes, so the EOF waits behind the answer just read (without the
 * probe, t/006's restarts between a COMMIT and the next call could fail).
 */
static bool
conn_went_away(RwConn *conn)
{
	char		c;
	ssize_t		r = recv(conn->ctx->fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);

	if (r > 0 && conn->tls != NULL)
	{
		char		buf[64];
		char		why[64];

		/*
		 * TLS sends records of its own (session tickets, a key update):
		 * gone only if reading gives data, an end or an error.
		 */
		return rw_tls_read(conn->tls, buf, sizeof(buf), why, sizeof(why)) != 0 ||
			rw_tls_pending(conn->tls);
	}
	return r >= 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}

/* Whether the connection is open with nothing of its output left to write. */
bool
rw_conn_sent_all(RwConn *conn)
{
	return conn->ctx != NULL && sdslen(conn->ctx->obuf) == 0;
}

/*
 * Make sure the connection is open, connecting if it is not: bounded by
 * rwlock.connect_timeout, cut short by interrupts, and tried at most once
 * per call. Never throws.
 */
bool
rw_conn_ensure(RwConn *conn, RwError *err)
{
	err->kind = RW_OK;
	err->maybe_sent = false;
	if (conn->ctx != NULL && !conn->is_subscriber && conn->nowed == 0 &&
		sdslen(conn->ctx->obuf) == 0 && conn_went_away(conn))
		rw_conn_close(conn);
	/* Ask the sentinels again now and then; follow the master if it moved. */
	if (conn->ctx != NULL && conn->node->ep.sentinel &&
		rw_now_ms() - conn->node->ep.resolved_ms > RW_SENTINEL_RECHECK_MS &&
		conn->failed_call != conn_call_id)
	{
		RwError		check;

		/*
		 * A short budget: the connection works, and sentinels that do not
		 * answer must not stall every call. Asked again a period later.
		 */
		if (conn->node->ep.resolve != NULL &&
			!conn->node->ep.resolve(&conn->node->ep,
								 conn_deadline(Min(Min(rw_connect_timeout_ms,
													   rw_command_timeout_ms),
												   RW_SENTINEL_CHECK_BUDGET_MS)),
								 &check) &&
			check.kind == RW_ERR_INTERRUPTED)
		{
			*err = check;
			return false;
		}
		/* Not asked again before the next period, answered or not. */
		conn->node->ep.resolved_ms = rw_now_ms();
	}
	/* The master moved since this connection was made: follow it. */
	if (conn->ctx != NULL && conn->node->ep.sentinel &&
		conn->addr_gen != conn->node->ep.addr_gen && conn->nowed == 0)
		rw_conn_close(conn);
	if (conn->ctx != NULL)
		return true;
	if (conn->failed_call == conn_call_id)
	{
		*err = conn->failed_err;
		return false;
	}
	if (conn_connect(conn, conn_deadline(rw_connect_timeout_ms), err))
		return true;
	conn->failed_call = conn_call_id;
	conn->failed_err = *err;
	return false;
}

/* ---------------------------------------------------------------------
 * Exchanging commands and replies
 * --------------------------------------------------------------------- */

/*
 * Queue one command on an open connection. With a tag its reply is not
 * waited for: it is read by later exchanges and handed over by
 * rw_take_late. Without, the next exchange waits for it.
 */
void
rw_append(RwConn *conn, int argc, const char **argv, const size_t *lens,
		  void *tag)
{
	size_t		deflens[8];

	if (lens == NULL)
	{
		Assert(argc <= 8);
		for (int i = 0; i < argc; i++)
			deflens[i] = strlen(argv[i]);
		lens = deflens;
	}
	if (redisAppendCommandArgv(conn->ctx, argc, argv, lens) != REDIS_OK)
		elog(ERROR, "out of memory formatting a Redis command");
	if (tag != NULL)
		conn_owe(conn, tag);
}

/*
 * An error reply that means the server is not (or no longer) a master that
 * may take writes: a replica (READONLY), a replica cut off from its master
 * (MASTERDOWN), a master short of replicas (NOREPLICAS, min-replicas-to-
 * write). On a Sentinel-named node the connection is then closed and the
 * next connection asks the sentinels again. Script errors carry the
 * command's error after "ERR ... script:" in older servers, so the code is
 * looked for at the start only.
 */
static bool
conn_not_master_reply(void *reply)
{
	redisReply *r = reply;

	return r->type == REDIS_REPLY_ERROR &&
		(strncmp(r->str, "READONLY", 8) == 0 ||
		 strncmp(r->str, "MASTERDOWN", 10) == 0 ||
		 strncmp(r->str, "NOREPLICAS", 10) == 0);
}

/*
 * Move whole replies out of hiredis's reader: those owed to tagged commands
 * first (kept as late), then up to nreplies of ours.
 */
static bool
conn_take_replies(RwConn *conn, int nreplies, redisReply **replies,
				  int *nreceived, RwError *err)
{
	while (conn->nowed > 0 || *nreceived < nreplies)
	{
		void	   *reply = NULL;

		if (redisGetReplyFromReader(conn->ctx, &reply) != REDIS_OK)
			return conn_fail(conn, err, RW_ERR_LOST, conn->ctx->errstr);
		if (reply == NULL)
			break;
		if (conn->node->ep.sentinel && conn_not_master_reply(reply))
		{
			char		msg[sizeof(err->msg)];

			snprintf(msg, sizeof(msg),
					 "the server is no longer the master of \"%s\" (%.120s); the command did not run, the next call asks the sentinels again",
					 conn->node->ep.master_name, ((redisReply *) reply)->str);
			freeReplyObject(reply);
			conn_fail(conn, err, RW_ERR_LOST, msg);
			err->maybe_sent = false;
			return false;
		}
		if (conn->nowed > 0)
			conn_owed_answered(conn, reply);
		else
			replies[(*nreceived)++] = reply;
	}
	return true;
}

/*
 * Write what the codec has queued as far as the socket takes it now (one
 * write, as hiredis's redisBufferWrite). False (closed) on failure.
 */
static bool
conn_write(RwConn *conn, RwError *err)
{
	redisContext *ctx = conn->ctx;
	size_t		len = sdslen(ctx->obuf);
	ssize_t		n;
	char		why[sizeof(err->msg)];

	err->maybe_sent = true;
	if (len == 0)
		return true;
	if (conn->tls != NULL)
		n = rw_tls_write(conn->tls, ctx->obuf, len, why, sizeof(why));
	else
	{
		n = write(ctx->fd, ctx->obuf, len);
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
			n = 0;
		else if (n < 0)
			strlcpy(why, strerror(errno), sizeof(why));
	}
	if (n < 0)
		return conn_fail(conn, err, RW_ERR_LOST, why);
	if ((size_t) n == len)
		conn_wipe_secret(conn); /* a password went out: no copy of it stays */
	if ((size_t) n == len && sdsalloc(ctx->obuf) <= CONN_READ_BUF)
		sdsclear(ctx->obuf);	/* keeps the small buffer of one call */
	else if ((size_t) n == len)
	{
		sdsfree(ctx->obuf);		/* a big batch's buffer is not kept */
		ctx->obuf = sdsempty();
	}
	else if (n > 0)
		sdsrange(ctx->obuf, n, -1);
	return true;
}

/*
 * Read what the socket has now and feed it to the codec's reader (one read,
 * as hiredis's redisBufferRead; over TLS until TLS holds nothing more, so
 * that a wait on the socket never misses bytes TLS has already taken off
 * it). False (closed) on failure or end of stream.
 */
static bool
conn_fill(RwConn *conn, RwError *err)
{
	char		buf[CONN_READ_BUF];
	char		why[sizeof(err->msg)];

	for (;;)
	{
		ssize_t		n;

		if (conn->tls != NULL)
			n = rw_tls_read(conn->tls, buf, sizeof(buf), why, sizeof(why));
		else
		{
			n = read(conn->ctx->fd, buf, sizeof(buf));
			if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
				n = 0;
			else if (n < 0)
				strlcpy(why, strerror(errno), sizeof(why));
			else if (n == 0)
			{
				strlcpy(why, "Server closed the connection", sizeof(why));
				n = -1;
			}
		}
		if (n < 0)
			return conn_fail(conn, err, RW_ERR_LOST, why);
		if (n == 0)
			return true;
		if (redisReaderFeed(conn->ctx->reader, buf, n) != REDIS_OK)
			return conn_fail(conn, err, RW_ERR_LOST, conn->ctx->reader->errstr);
		if (conn->tls == NULL || !rw_tls_pending(conn->tls))
			return true;
	}
}

static bool
conn_read(RwConn *conn, int nreplies, redisReply **replies, int *nreceived,
		  RwError *err)
{
	return conn_fill(conn, err) &&
		conn_take_replies(conn, nreplies, replies, nreceived, err);
}

/* The socket event a wait needs to go on writing (or reading). */
static inline uint32
conn_wants(RwConn *conn, uint32 events)
{
	return conn->tls ? rw_tls_wait_events(conn->tls, events) : events;
}

/*
 * A failed wait: say why, and close the connection. A server that did not
 * answer in time is not tried again in the same call (nor in the abort
 * that follows it, which is part of the same call).
 */
static bool
conn_wait_failed(RwConn *conn, int ready, const char *limit, int limit_ms,
				 RwError *err)
{
	if (ready == 0)
		conn_fail(conn, err, RW_ERR_TIMEOUT,
				  psprintf("no answer within %s (%d ms)", limit, limit_ms));
	else if (ready == -2)
		conn_fail(conn, err, RW_ERR_INTERRUPTED,
				  "interrupted while waiting for Redis");
	else
		conn_fail(conn, err, RW_ERR_LOST, "postmaster died");
	conn->failed_call = conn_call_id;
	conn->failed_err = *err;
	conn->failed_err.kind = RW_ERR_CONNECT;
	snprintf(conn->failed_err.msg, sizeof(conn->failed_err.msg),
			 "not tried again in this call after: %s", err->msg);
	return false;
}

/*
 * Send what is queued on the connection and read nreplies replies to our
 * own commands, after any owed to tagged commands sent before them (with
 * CONN_ALL_OWED: until every tagged command is answered, none of ours). On
 * failure the connection is closed and the replies read so far are freed.
 */
static bool
conn_exchange(RwConn *conn, int nreplies, redisReply **replies, int64 deadline,
			  const char *limit, int limit_ms, RwError *err)
{
	int			nreceived = 0;
	bool		all_owed = nreplies == CONN_ALL_OWED;
	bool		ok;

	if (all_owed)
		nreplies = 0;
	ok = conn_write(conn, err) &&
		conn_take_replies(conn, nreplies, replies, &nreceived, err);
	while (ok && (nreceived < nreplies || sdslen(conn->ctx->obuf) > 0 ||
				  (all_owed && conn->nowed > 0)))
	{
		bool		writing = sdslen(conn->ctx->obuf) > 0;
		int			ready = conn_wait(conn,
									  conn_wants(conn, writing ? WL_SOCKET_WRITEABLE :
												 WL_SOCKET_READABLE),
									  deadline, false);

		if (ready <= 0)
			ok = conn_wait_failed(conn, ready, limit, limit_ms, err);
		else if (writing)
			ok = conn_write(conn, err);
		else
			ok = conn_read(conn, nreplies, replies, &nreceived, err);
	}
	if (!ok)
	{
		for (int i = 0; i < nreceived; i++)
			freeReplyObject(replies[i]);
		return false;
	}
	return true;
}

/*
 * Send the queued commands and collect their nreplies replies, bounded by
 * rwlock.command_timeout. Measures the round trip for
 * redis_connection_info(). Never throws; false with *err set on failure.
 */
bool
rw_exchange(RwConn *conn, int nreplies, redisReply **replies, RwError *err)
{
	return rw_exchange_longer(conn, nreplies, replies, 0, err);
}

/*
 * As rw_exchange, with extra_ms more than rwlock.command_timeout: for a
 * pipeline that ends with a WAIT for replicas, which Redis answers only
 * when its own timeout runs out.
 */
bool
rw_exchange_longer(RwConn *conn, int nreplies, redisReply **replies,
				   int extra_ms, RwError *err)
{
	int64		start = rw_now_ms();
	instr_time	t0,
				t1;
	bool		ok;

	err->kind = RW_OK;
	err->maybe_sent = false;
	INSTR_TIME_SET_CURRENT(t0);
	ok = conn_exchange(conn, nreplies, replies,
					   Min(start + rw_command_timeout_ms + extra_ms, conn_cap),
					   "rwlock.command_timeout", rw_command_timeout_ms + extra_ms, err);
	INSTR_TIME_SET_CURRENT(t1);
	INSTR_TIME_SUBTRACT(t1, t0);
	if (ok)
		conn->last_rtt_ms = INSTR_TIME_GET_MILLISEC(t1);
	return ok;
}

/* As rw_exchange, bounded by the given deadline instead (sentinel.c). */
bool
rw_exchange_by(RwConn *conn, int nreplies, redisReply **replies,
			   int64 deadline, RwError *err)
{
	err->kind = RW_OK;
	err->maybe_sent = false;
	return conn_exchange(conn, nreplies, replies, Min(deadline, conn_cap),
						 "rwlock.connect_timeout", rw_connect_timeout_ms, err);
}

/*
 * Write out what is queued (see rw_flush); with keep_on_cut, a wait that a
 * cancel cut short in a cancellable stretch (rw_conn_cancellable) leaves
 * the rest queued, the connection open.
 */
static bool
conn_flush(RwConn *conn, int64 deadline, bool keep_on_cut, RwError *err)
{
	bool		ok = conn_write(conn, err);

	deadline = Min(deadline, conn_cap);
	while (ok && sdslen(conn->ctx->obuf) > 0)
	{
		int			ready;

		/*
		 * A cancel cut this connection's sending short in this call: the
		 * cancel ends the statement, and the abort that follows (the same
		 * call) must not wait on it again for rwlock.command_timeout.
		 */
		if (keep_on_cut && conn->cut_call == conn_call_id)
		{
			rw_error_set(err, RW_ERR_INTERRUPTED,
					  "sending to Redis was interrupted in this call; the rest is queued");
			return false;
		}
		ready = conn_wait(conn, conn_wants(conn, WL_SOCKET_WRITEABLE),
						  deadline, false);
		if (ready == -2 && keep_on_cut && conn_cancel_cuts && !ProcDiePending)
		{
			conn->cut_call = conn_call_id;
			rw_error_set(err, RW_ERR_INTERRUPTED,
					  "interrupted while sending to Redis; the rest is queued");
			return false;
		}
		ok = ready > 0 ? conn_write(conn, err) :
			conn_wait_failed(conn, ready, "rwlock.command_timeout",
							 rw_command_timeout_ms, err);
	}
	return ok;
}

/*
 * Write out everything queued, without reading any reply; waits only while
 * the socket does not take it all. False (connection closed) on failure.
 */
bool
rw_flush(RwConn *conn, int64 deadline, RwError *err)
{
	return conn_flush(conn, deadline, false, err);
}

/*
 * The same, for a connection on which only tagged commands are queued
 * (release.c: their answers are read whenever they come, and those never
 * sent are handed back empty when the connection closes): a cancel that
 * cuts the wait in a cancellable stretch leaves the rest queued, false with
 * err->kind RW_ERR_INTERRUPTED and the connection open; the next flush or
 * exchange on it sends the rest.
 */
bool
rw_flush_tagged(RwConn *conn, int64 deadline, RwError *err)
{
	return conn_flush(conn, deadline, true, err);
}

/*
 * Wait, up to rwlock.command_timeout, until every tagged command sent on
 * the connection is answered (release.c: releases sent on a cluster node
 * that no longer serves their slot must be settled before the name is
 * taken elsewhere). False (closed, the tags handed back empty) on failure.
 */
bool
rw_conn_drain(RwConn *conn, RwError *err)
{
	err->kind = RW_OK;
	err->maybe_sent = false;
	if (conn->ctx == NULL)
		return true;
	return conn_exchange(conn, CONN_ALL_OWED, NULL,
						 Min(rw_now_ms() + rw_command_timeout_ms, conn_cap),
						 "rwlock.command_timeout", rw_command_timeout_ms, err);
}

/*
 * Hand over the replies to tagged commands read so far, oldest first (a
 * NULL reply: the connection closed before it came); the caller frees them
 * and the array. Reads what has already arrived, without waiting.
 */
int
rw_take_late(RwConn *conn, RwLate **late)
{
	int			n;
	int			none = 0;
	RwError		err;

	if (conn->ctx != NULL && conn->nowed > 0)
		(void) conn_read(conn, 0, NULL, &none, &err);
	n = conn->nlate;
	*late = n > 0 ? palloc(n * sizeof(RwLate)) : NULL;
	if (n > 0)
		memcpy(*late, conn->late, n * sizeof(RwLate));
	conn->nlate = 0;
	return n;
}

/*
 * For a subscriber: take one push that has arrived, without waiting.
 * Returns false if the connection failed (and is now closed).
 */
bool
rw_conn_read_pending(RwConn *conn, redisReply **reply, RwError *err)
{
	void	   *r = NULL;

	*reply = NULL;
	if (redisGetReplyFromReader(conn->ctx, &r) == REDIS_OK && r == NULL)
	{
		if (!conn_fill(conn, err))
			return false;
		redisGetReplyFromReader(conn->ctx, &r);
	}
	if (conn->ctx->err)
	{
		if (r)
			freeReplyObject(r);
		return conn_fail(conn, err, RW_ERR_LOST, conn->ctx->errstr);
	}
	*reply = r;
	return true;
}
