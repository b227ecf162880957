/*-------------------------------------------------------------------------
 *
 * redis_conn.c
 *	  One connection from this backend to a Redis node: the socket, hiredis
 *	  as the protocol codec, and every wait on the socket.
 *
 * hiredis is used in non-blocking mode only, as a codec and a buffer: every
 * wait goes through a WaitEventSet that also watches the process latch and
 * postmaster death, and every wait has a deadline on the monotonic clock.
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
 *	  a call): after a failed attempt the rest of the call fails fast;
 *	- commands may be sent with a tag, without waiting for their replies
 *	  (releases at transaction end): their replies are read first by any
 *	  later exchange and kept, with their tags, until rw_take_late; if the
 *	  connection closes first, each such tag is handed back with no reply;
 *	- a caller that must not wait long (a commit, backend exit) caps every
 *	  deadline with rw_conn_limit().
 *
 *-------------------------------------------------------------------------
 */
#include "rwlock.h"

#include <limits.h>
#include <sys/socket.h>

#include "miscadmin.h"
#include "pgstat.h"
#include "portability/instr_time.h"
#include "storage/fd.h"
#include "storage/ipc.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#define CONN_NO_DEADLINE PG_INT64_MAX

static uint64 conn_call_id = 1;
static int64 conn_cap = CONN_NO_DEADLINE;	/* see rw_conn_limit */

/* A new SQL call or callback: each may try to connect to a node once. */
void
rw_call_begin(void)
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

static void
set_error(RwError *err, RwErrKind kind, const char *fmt,...) pg_attribute_printf(3, 4);

static void
set_error(RwError *err, RwErrKind kind, const char *fmt,...)
{
	va_list		ap;

	err->kind = kind;
	va_start(ap, fmt);
	vsnprintf(err->msg, sizeof(err->msg), fmt, ap);
	va_end(ap);
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
	return QueryCancelPending && InterruptHoldoffCount == 0 &&
		QueryCancelHoldoffCount == 0 && CritSectionCount == 0;
}

/*
 * Wait until the connection's socket is ready for `events` or the deadline
 * passes. Returns the ready events, 0 on timeout, -1 if the postmaster died
 * while this process is already exiting, -2 if an interrupt wants the wait
 * to end. With serve, interrupts are served here instead (they throw).
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
		if (left <= 0)
			return 0;
		if (WaitEventSetWait(conn->wes, deadline == CONN_NO_DEADLINE ? -1 : (long) Min(left, INT_MAX),
							 &ev, 1, PG_WAIT_EXTENSION) == 0)
			continue;
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

	return conn_wait(conn, WL_SOCKET_READABLE, deadline, true) > 0;
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

void
rw_conn_close(RwConn *conn)
{
	if (conn->wes != NULL)
	{
		FreeWaitEventSet(conn->wes);
		conn->wes = NULL;
	}
	if (conn->ctx != NULL)
	{
		redisFree(conn->ctx);
		conn->ctx = NULL;
		ReleaseExternalFD();
	}
	/* Replies still owed will never come: hand their tags back empty. */
	while (conn->nowed > 0)
		conn_owed_answered(conn, NULL);
}

/* Fail what is in progress on a connection: record why, then close it. */
static bool
conn_fail(RwConn *conn, RwError *err, RwErrKind kind, const char *msg)
{
	set_error(err, kind, "%s", msg);
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
		set_error(err, RW_ERR_CONNECT, "could not create a wait event set");
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
		set_error(err, RW_ERR_AUTH, "Redis requires a password and rwlock.redis_url gives none: %s", r->str);
	else
		set_error(err, auth ? RW_ERR_AUTH : RW_ERR_CONNECT, "%s refused: %s",
				  command, r->str);
	return false;
}

/*
 * AUTH and SELECT as the URL asks, and a client name for CLIENT LIST. A
 * Redis that wants a password we did not give refuses CLIENT SETNAME with
 * NOAUTH; another refusal of it (an ACL) is ignored.
 */
static bool
conn_handshake(RwConn *conn, int64 deadline, RwError *err)
{
	RwEndpoint *ep = &conn->node->ep;
	const char *commands[3];
	redisReply *replies[3];
	char		dbbuf[16];
	char		namebuf[64];
	int			n = 0;
	bool		ok = true;

	if (ep->password)
	{
		const char *argv[3] = {"AUTH", ep->user ? ep->user : ep->password, ep->password};

		rw_append(conn, ep->user ? 3 : 2, argv, NULL, NULL);
		commands[n++] = "AUTH";
	}
	if (ep->db != 0)
	{
		const char *argv[2] = {"SELECT", dbbuf};

		snprintf(dbbuf, sizeof(dbbuf), "%d", ep->db);
		rw_append(conn, 2, argv, NULL, NULL);
		commands[n++] = "SELECT";
	}
	{
		const char *argv[3] = {"CLIENT", "SETNAME", namebuf};

		snprintf(namebuf, sizeof(namebuf), "rwlock:pg:%d%s", MyProcPid,
				 conn->is_subscriber ? ":sub" : "");
		rw_append(conn, 3, argv, NULL, NULL);
		commands[n++] = "CLIENT SETNAME";
	}
	if (!conn_exchange(conn, n, replies, deadline, "rwlock.connect_timeout",
					   rw_connect_timeout_ms, err))
		return false;
	for (int i = 0; i < n; i++)
	{
		redisReply *r = replies[i];

		if (ok && r->type == REDIS_REPLY_ERROR &&
			(i < n - 1 || strncmp(r->str, "NOAUTH", 6) == 0))
			ok = conn_handshake_error(r, commands[i], err);
		freeReplyObject(r);
	}
	if (!ok)
		rw_conn_close(conn);
	return ok;
}

static bool
conn_connect(RwConn *conn, RwError *err)
{
	RwEndpoint *ep = &conn->node->ep;
	int64		deadline = conn_deadline(rw_connect_timeout_ms);
	redisContext *ctx;
	int			soerr = 0;
	socklen_t	len = sizeof(soerr);
	int			ready;

	if (!AcquireExternalFD())
	{
		set_error(err, RW_ERR_CONNECT, "no file descriptor is free for a connection");
		return false;
	}
	ctx = ep->is_unix ? redisConnectUnixNonBlock(ep->path) :
		redisConnectNonBlock(ep->host, ep->port);
	if (ctx == NULL || ctx->err)
	{
		set_error(err, RW_ERR_CONNECT, "%s", ctx ? ctx->errstr : "out of memory");
		if (ctx)
			redisFree(ctx);
		ReleaseExternalFD();
		return false;
	}
	conn->ctx = ctx;
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
	if (getsockopt(ctx->fd, SOL_SOCKET, SO_ERROR, &soerr, &len) < 0 || soerr != 0)
		return conn_fail(conn, err, RW_ERR_CONNECT, strerror(soerr ? soerr : errno));
	if (!ep->is_unix)
		redisEnableKeepAlive(ctx);
	if (!conn_handshake(conn, deadline, err))
	{
		/* A timeout here is a failure to connect, not a slow command. */
		if (err->kind == RW_ERR_TIMEOUT || err->kind == RW_ERR_LOST)
			err->kind = RW_ERR_CONNECT;
		return false;
	}
	return true;
}

/*
 * Whether an idle command connection was closed by the other end (Redis
 * restarted, or dropped us): then it is reconnected before use, instead of
 * failing the command sent on it. A command connection that owes no replies
 * has nothing to read between exchanges, so anything readable means EOF, an
 * error, or bytes that are not a reply to anything: either way it is not to
 * be used.
 */
static bool
conn_went_away(RwConn *conn)
{
	char		c;
	ssize_t		r = recv(conn->ctx->fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);

	return r >= 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
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
	if (conn->ctx != NULL)
		return true;
	if (conn->failed_call == conn_call_id)
	{
		*err = conn->failed_err;
		return false;
	}
	if (conn_connect(conn, err))
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
		if (conn->nowed > 0)
			conn_owed_answered(conn, reply);
		else
			replies[(*nreceived)++] = reply;
	}
	return true;
}

static bool
conn_write(RwConn *conn, RwError *err)
{
	int			done = 0;

	err->maybe_sent = true;
	if (redisBufferWrite(conn->ctx, &done) != REDIS_OK)
		return conn_fail(conn, err, RW_ERR_LOST, conn->ctx->errstr);
	return true;
}

static bool
conn_read(RwConn *conn, int nreplies, redisReply **replies, int *nreceived,
		  RwError *err)
{
	if (redisBufferRead(conn->ctx) != REDIS_OK)
		return conn_fail(conn, err, RW_ERR_LOST, conn->ctx->errstr);
	return conn_take_replies(conn, nreplies, replies, nreceived, err);
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
 * own commands, after any owed to tagged commands sent before them. On
 * failure the connection is closed and the replies read so far are freed.
 */
static bool
conn_exchange(RwConn *conn, int nreplies, redisReply **replies, int64 deadline,
			  const char *limit, int limit_ms, RwError *err)
{
	int			nreceived = 0;
	bool		ok = conn_write(conn, err) &&
		conn_take_replies(conn, nreplies, replies, &nreceived, err);

	while (ok && (nreceived < nreplies || sdslen(conn->ctx->obuf) > 0))
	{
		uint32		wants = sdslen(conn->ctx->obuf) > 0 ?
			WL_SOCKET_WRITEABLE : WL_SOCKET_READABLE;
		int			ready = conn_wait(conn, wants, deadline, false);

		if (ready <= 0)
			ok = conn_wait_failed(conn, ready, limit, limit_ms, err);
		else if (ready & WL_SOCKET_WRITEABLE)
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
	int64		start = rw_now_ms();
	instr_time	t0,
				t1;
	bool		ok;

	err->kind = RW_OK;
	err->maybe_sent = false;
	INSTR_TIME_SET_CURRENT(t0);
	ok = conn_exchange(conn, nreplies, replies,
					   Min(start + rw_command_timeout_ms, conn_cap),
					   "rwlock.command_timeout", rw_command_timeout_ms, err);
	INSTR_TIME_SET_CURRENT(t1);
	INSTR_TIME_SUBTRACT(t1, t0);
	if (ok)
		conn->last_rtt_ms = INSTR_TIME_GET_MILLISEC(t1);
	return ok;
}

/*
 * Write out everything queued, without reading any reply; waits only while
 * the socket does not take it all. False (connection closed) on failure.
 */
bool
rw_flush(RwConn *conn, int64 deadline, RwError *err)
{
	bool		ok = conn_write(conn, err);

	deadline = Min(deadline, conn_cap);
	while (ok && sdslen(conn->ctx->obuf) > 0)
	{
		int			ready = conn_wait(conn, WL_SOCKET_WRITEABLE, deadline, false);

		ok = ready > 0 ? conn_write(conn, err) :
			conn_wait_failed(conn, ready, "rwlock.command_timeout",
							 rw_command_timeout_ms, err);
	}
	return ok;
}

static bool
conn_owes(RwConn *conn, void *tag)
{
	for (int i = 0; i < conn->nowed; i++)
		if (conn->owed[i] == tag)
			return true;
	return false;
}

/*
 * Wait until the reply to the command sent with `tag` has been read (it is
 * then among the late replies), or the connection failed (then it is there
 * with no reply). False, with *err, only if the wait itself failed.
 */
bool
rw_await_tag(RwConn *conn, void *tag, int64 deadline, RwError *err)
{
	int			none = 0;

	err->kind = RW_OK;
	deadline = Min(deadline, conn_cap);
	if (conn->ctx != NULL && sdslen(conn->ctx->obuf) > 0 &&
		!rw_flush(conn, deadline, err))
		return false;
	while (conn->ctx != NULL && conn_owes(conn, tag))
	{
		int			ready = conn_wait(conn, WL_SOCKET_READABLE, deadline, false);

		if (ready <= 0)
			return conn_wait_failed(conn, ready, "rwlock.command_timeout",
									rw_command_timeout_ms, err);
		if (!conn_read(conn, 0, NULL, &none, err))
			return true;		/* closed: the tag is late, unanswered */
	}
	return true;
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
	if (redisGetReplyFromReader(conn->ctx, &r) == REDIS_OK && r == NULL &&
		redisBufferRead(conn->ctx) == REDIS_OK)
		redisGetReplyFromReader(conn->ctx, &r);
	if (conn->ctx->err)
	{
		if (r)
			freeReplyObject(r);
		return conn_fail(conn, err, RW_ERR_LOST, conn->ctx->errstr);
	}
	*reply = r;
	return true;
}

/*
 * Turn an error into an ereport: class 08 for the connection, 57014 for an
 * interrupt (served here), XX000 for an error reply.
 */
void
rw_raise(RwConn *conn, const RwError *err)
{
	const char *where = conn->node->ep.display;

	switch (err->kind)
	{
		case RW_ERR_CONNECT:
			ereport(ERROR,
					(errcode(ERRCODE_SQLCLIENT_UNABLE_TO_ESTABLISH_SQLCONNECTION),
					 errmsg("could not connect to Redis at %s", where),
					 errdetail("%s", err->msg),
					 errhint("Check rwlock.redis_url and that Redis is running.")));
			break;
		case RW_ERR_AUTH:
			ereport(ERROR,
					(errcode(ERRCODE_SQLSERVER_REJECTED_ESTABLISHMENT_OF_SQLCONNECTION),
					 errmsg("Redis at %s refused authentication", where),
					 errdetail("%s", err->msg),
					 errhint("Check the user name and password of rwlock.redis_url.")));
			break;
		case RW_ERR_LOST:
			ereport(ERROR,
					(errcode(ERRCODE_CONNECTION_FAILURE),
					 errmsg("lost connection to Redis at %s", where),
					 errdetail("%s", err->msg)));
			break;
		case RW_ERR_TIMEOUT:
			ereport(ERROR,
					(errcode(ERRCODE_CONNECTION_FAILURE),
					 errmsg("Redis at %s did not answer in time", where),
					 errdetail("%s; the connection was closed.", err->msg)));
			break;
		case RW_ERR_INTERRUPTED:
			CHECK_FOR_INTERRUPTS();
			ereport(ERROR,
					(errcode(ERRCODE_QUERY_CANCELED),
					 errmsg("canceling statement due to user request"),
					 errdetail("A Redis command was interrupted; its connection was closed.")));
			break;
		case RW_ERR_REPLY:
		case RW_OK:
			ereport(ERROR,
					(errcode(ERRCODE_INTERNAL_ERROR),
					 errmsg("Redis at %s answered with an error", where),
					 errdetail("%s", err->msg)));
			break;
	}
	pg_unreachable();
}
