/*-------------------------------------------------------------------------
 *
 * redis_conn.c
 *	  Connections from this backend to Redis nodes.
 *
 * hiredis is used in non-blocking mode only as a protocol codec and buffer:
 * every wait for the socket goes through a WaitEventSet that also watches the
 * process latch and postmaster death, so a backend talking to a dead or
 * stalled Redis stays responsive, and no wait outlasts rwlock.connect_timeout
 * or rwlock.command_timeout.
 *
 * Rules kept here:
 *	- a connection whose exchange failed (lost, timed out, garbled) is closed
 *	  at once: nothing ever reads a stale reply off a kept connection;
 *	- while a command is in flight, interrupts are not served (they are left
 *	  pending for the caller): a lock command either completes, so its caller
 *	  knows what Redis did, or times out and the connection is dropped;
 *	- several requests, on several nodes, can be sent and awaited together
 *	  (rw_exchange), which is what quorum and cluster fan-out will need.
 *
 *-------------------------------------------------------------------------
 */
#include "rwlock.h"

#include <sys/socket.h>

#include "miscadmin.h"
#include "pgstat.h"
#include "storage/fd.h"
#include "storage/ipc.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

static RwNode *nodes = NULL;	/* every node this session knows */
static RwNode *current = NULL;	/* where new acquisitions go */

/* ---------------------------------------------------------------------
 * URLs
 * --------------------------------------------------------------------- */

static char *
percent_decode(const char *s, int len)
{
	char	   *out = palloc(len + 1);
	int			o = 0;

	for (int i = 0; i < len; i++)
	{
		if (s[i] == '%' && i + 2 < len &&
			isxdigit((unsigned char) s[i + 1]) && isxdigit((unsigned char) s[i + 2]))
		{
			char		hex[3] = {s[i + 1], s[i + 2], 0};

			out[o++] = (char) strtol(hex, NULL, 16);
			i += 2;
		}
		else
			out[o++] = s[i];
	}
	out[o] = '\0';
	return out;
}

/* user[:password] before '@', if any; returns the part after it */
static const char *
parse_userinfo(const char *s, const char *end, RwEndpoint *ep, char **why)
{
	const char *at = NULL;

	for (const char *p = s; p < end; p++)
		if (*p == '@')
			at = p;
	if (at == NULL)
		return s;

	{
		const char *colon = memchr(s, ':', at - s);

		if (colon == NULL)
		{
			*why = "A user name needs a password: user:password@.";
			return NULL;
		}
		if (colon > s)
			ep->user = percent_decode(s, colon - s);
		ep->password = percent_decode(colon + 1, at - colon - 1);
	}
	return at + 1;
}

static bool
parse_int(const char *s, int len, int min, int max, int *out)
{
	long		v = 0;

	if (len <= 0 || len > 9)
		return false;
	for (int i = 0; i < len; i++)
	{
		if (!isdigit((unsigned char) s[i]))
			return false;
		v = v * 10 + (s[i] - '0');
	}
	if (v < min || v > max)
		return false;
	*out = (int) v;
	return true;
}

static bool
parse_tcp(const char *s, RwEndpoint *ep, char **why)
{
	const char *end = s + strcspn(s, "/");
	const char *hostend;
	const char *p;

	p = parse_userinfo(s, end, ep, why);
	if (p == NULL)
		return false;
	if (*p == '[')
	{
		hostend = memchr(p, ']', end - p);
		if (hostend == NULL)
		{
			*why = "An IPv6 address must be closed by ].";
			return false;
		}
		ep->host = pnstrdup(p + 1, hostend - p - 1);
		p = hostend + 1;
	}
	else
	{
		hostend = p + strcspn(p, ":/");
		if (hostend > end)
			hostend = end;
		ep->host = pnstrdup(p, hostend - p);
		p = hostend;
	}
	if (ep->host[0] == '\0')
	{
		*why = "The URL names no host.";
		return false;
	}
	ep->port = 6379;
	if (p < end && *p == ':' && !parse_int(p + 1, end - p - 1, 1, 65535, &ep->port))
	{
		*why = "The port must be a number from 1 to 65535.";
		return false;
	}
	else if (p < end && *p != ':')
	{
		*why = "Unexpected characters after the host.";
		return false;
	}
	if (*end == '/' && end[1] != '\0' &&
		!parse_int(end + 1, strlen(end + 1), 0, 1000000, &ep->db))
	{
		*why = "The database must be a number after the last /.";
		return false;
	}
	return true;
}

static bool
parse_unix(const char *s, RwEndpoint *ep, char **why)
{
	const char *slash = strchr(s, '/');
	const char *q;

	if (slash == NULL)
	{
		*why = "A unix:// URL needs an absolute socket path.";
		return false;
	}
	if (parse_userinfo(s, slash, ep, why) == NULL)
		return false;
	if (parse_userinfo(s, slash, ep, why) != slash)
	{
		*why = "A unix:// URL needs an absolute socket path.";
		return false;
	}
	q = strchr(slash, '?');
	ep->path = q ? pnstrdup(slash, q - slash) : pstrdup(slash);
	if (q && (strncmp(q, "?db=", 4) != 0 ||
			  !parse_int(q + 4, strlen(q + 4), 0, 1000000, &ep->db)))
	{
		*why = "The only option of a unix:// URL is ?db=N.";
		return false;
	}
	ep->is_unix = true;
	return true;
}

/*
 * Parse a URL into *ep (strings palloc'd in the current context). On failure
 * returns false and points *why at a sentence saying what is wrong.
 */
bool
rw_parse_url(const char *url, RwEndpoint *ep, char **why)
{
	bool		ok;

	memset(ep, 0, sizeof(*ep));
	if (strncmp(url, "redis://", 8) == 0)
		ok = parse_tcp(url + 8, ep, why);
	else if (strncmp(url, "unix://", 7) == 0)
		ok = parse_unix(url + 7, ep, why);
	else
	{
		*why = "The URL must start with redis:// or unix://.";
		ok = false;
	}
	if (!ok)
		return false;
	ep->url = pstrdup(url);
	if (ep->is_unix)
		ep->display = psprintf("unix://%s%s%s?db=%d",
							   ep->user ? ep->user : "", ep->user ? "@" : "",
							   ep->path, ep->db);
	else
		ep->display = psprintf("redis://%s%s%s%s%s:%d/%d",
							   ep->user ? ep->user : "", ep->user ? "@" : "",
							   strchr(ep->host, ':') ? "[" : "", ep->host,
							   strchr(ep->host, ':') ? "]" : "",
							   ep->port, ep->db);
	return true;
}

/* ---------------------------------------------------------------------
 * Nodes
 * --------------------------------------------------------------------- */

static RwNode *
node_create(const char *url)
{
	MemoryContext old = MemoryContextSwitchTo(TopMemoryContext);
	RwNode	   *node = palloc0(sizeof(RwNode));
	char	   *why;

	/* The GUC's check hook accepted this URL already. */
	if (!rw_parse_url(url, &node->ep, &why))
		elog(ERROR, "rwlock.redis_url became invalid: %s", why);
	node->cmd.node = node;
	node->sub.node = node;
	node->sub.is_subscriber = true;
	node->next = nodes;
	nodes = node;
	MemoryContextSwitchTo(old);
	return node;
}

/* The node that new acquisitions go to: the one rwlock.redis_url names. */
RwNode *
rw_current_node(void)
{
	if (current != NULL && strcmp(current->ep.url, rw_redis_url) == 0)
		return current;

	current = NULL;
	for (RwNode *n = nodes; n != NULL; n = n->next)
		if (strcmp(n->ep.url, rw_redis_url) == 0)
			current = n;
	if (current == NULL)
		current = node_create(rw_redis_url);

	/* Old nodes stay only while holds live on them. */
	for (RwNode *n = nodes, *next; n != NULL; n = next)
	{
		next = n->next;
		rw_node_forget_if_unused(n);
	}
	return current;
}

/* For walking every node (exit, renewal, connection info). */
RwNode *
rw_first_node(void)
{
	return nodes;
}

/* Close and free a node that is neither current nor holding anything. */
void
rw_node_forget_if_unused(RwNode *node)
{
	RwNode	  **link;

	if (node == current || node->nholds > 0 || node->nsent > 0)
		return;
	rw_conn_close(&node->cmd);
	rw_conn_close(&node->sub);
	for (link = &nodes; *link != NULL; link = &(*link)->next)
	{
		if (*link == node)
		{
			*link = node->next;
			break;
		}
	}
	/* Endpoint strings are few and small; the node itself goes. */
	pfree(node);
}

/* ---------------------------------------------------------------------
 * Waiting on sockets
 * --------------------------------------------------------------------- */

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

static long
ms_until(TimestampTz deadline)
{
	TimestampTz now = GetCurrentTimestamp();

	if (now >= deadline)
		return 0;
	return TimestampDifferenceMilliseconds(now, deadline);
}

/*
 * Wait until the connection's socket is ready for `events` or the deadline
 * passes. Returns the ready events, 0 on timeout, -1 if the postmaster died
 * while this process is already exiting. The latch only wakes us; interrupts
 * are served here only with RW_INTERRUPTIBLE.
 */
static int
conn_wait(RwConn *conn, uint32 events, TimestampTz deadline, int flags)
{
	WaitEvent	ev;

	if (conn->sock_events != events)
	{
		ModifyWaitEvent(conn->wes, conn->sock_pos, events, NULL);
		conn->sock_events = events;
	}
	for (;;)
	{
		long		timeout = ms_until(deadline);

		if (timeout <= 0)
			return 0;
		if (WaitEventSetWait(conn->wes, timeout, &ev, 1, PG_WAIT_EXTENSION) == 0)
			continue;
		if (ev.events & WL_LATCH_SET)
		{
			ResetLatch(MyLatch);
			if (flags & RW_INTERRUPTIBLE)
				CHECK_FOR_INTERRUPTS();
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
 * timeout_ms passes (-1: no limit). Used by lock waits, which hold nothing
 * in flight and so may be cancelled at any moment.
 */
bool
rw_conn_wait_readable(RwConn *conn, long timeout_ms)
{
	TimestampTz deadline = timeout_ms < 0 ? DT_NOEND :
		TimestampTzPlusMilliseconds(GetCurrentTimestamp(), timeout_ms);

	return conn_wait(conn, WL_SOCKET_READABLE, deadline, RW_INTERRUPTIBLE) > 0;
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
	/* Replies still owed are lost; the sender learns it from the epoch. */
	conn->owed = 0;
}

static bool
make_wait_set(RwConn *conn, int flags, RwError *err)
{
	volatile bool ok = true;

	/* CreateWaitEventSet may ERROR (no descriptors); some callers can't. */
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
		if (!(flags & RW_NOTHROW))
			PG_RE_THROW();
		FlushErrorState();
		set_error(err, RW_ERR_CONNECT, "could not create a wait event set");
		ok = false;
	}
	PG_END_TRY();
	return ok;
}

static bool exchange(RwRequest *reqs, int nreqs, TimestampTz deadline, int flags);

/* AUTH and SELECT as the URL asks, and a client name for CLIENT LIST. */
static bool
handshake(RwConn *conn, TimestampTz deadline, int flags, RwError *err)
{
	RwEndpoint *ep = &conn->node->ep;
	RwRequest	req = {conn};
	char		dbbuf[16];
	char		namebuf[64];
	bool		ok = true;

	if (ep->password)
	{
		const char *argv[3] = {"AUTH", ep->user ? ep->user : ep->password, ep->password};

		rw_append(&req, ep->user ? 3 : 2, argv, NULL);
	}
	if (ep->db != 0)
	{
		const char *argv[2] = {"SELECT", dbbuf};

		snprintf(dbbuf, sizeof(dbbuf), "%d", ep->db);
		rw_append(&req, 2, argv, NULL);
	}
	{
		const char *argv[3] = {"CLIENT", "SETNAME", namebuf};

		snprintf(namebuf, sizeof(namebuf), "rwlock:pg:%d%s", MyProcPid,
				 conn->is_subscriber ? ":sub" : "");
		rw_append(&req, 3, argv, NULL);
	}
	if (!exchange(&req, 1, deadline, flags))
	{
		*err = req.err;
		err->kind = RW_ERR_CONNECT;
		return false;
	}
	/* The last reply is CLIENT SETNAME's, which an ACL may refuse: ignored. */
	for (int i = 0; i < req.nreceived - 1; i++)
	{
		redisReply *r = req.replies[i];

		if (r->type == REDIS_REPLY_ERROR)
		{
			set_error(err, RW_ERR_CONNECT, "%s refused: %s",
					  (ep->password && i == 0) ? "AUTH" : "SELECT", r->str);
			ok = false;
			break;
		}
	}
	rw_request_free(&req);
	return ok;
}

static bool
connect_fail(RwConn *conn, RwError *err, RwErrKind kind, const char *msg)
{
	set_error(err, kind, "%s", msg);
	rw_conn_close(conn);
	return false;
}

static bool
conn_connect(RwConn *conn, int flags, RwError *err)
{
	RwEndpoint *ep = &conn->node->ep;
	TimestampTz deadline;
	redisContext *ctx;
	int			soerr = 0;
	socklen_t	len = sizeof(soerr);
	int			ready;

	deadline = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), rw_connect_timeout_ms);
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
	if (!make_wait_set(conn, flags, err))
		return connect_fail(conn, err, RW_ERR_CONNECT, err->msg);

	ready = conn_wait(conn, WL_SOCKET_WRITEABLE, deadline, flags);
	if (ready == 0)
		return connect_fail(conn, err, RW_ERR_CONNECT,
							psprintf("no answer within rwlock.connect_timeout (%d ms)",
									 rw_connect_timeout_ms));
	if (ready < 0)
		return connect_fail(conn, err, RW_ERR_CONNECT, "postmaster died");
	if (getsockopt(ctx->fd, SOL_SOCKET, SO_ERROR, &soerr, &len) < 0 || soerr != 0)
		return connect_fail(conn, err, RW_ERR_CONNECT, strerror(soerr ? soerr : errno));
	if (!ep->is_unix)
		redisEnableKeepAlive(ctx);
	if (!handshake(conn, deadline, flags, err))
	{
		rw_conn_close(conn);
		return false;
	}
	conn->epoch++;
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
 * Make sure the connection is open, connecting if it is not. Bounded by
 * rwlock.connect_timeout. With RW_INTERRUPTIBLE a cancel ends the attempt,
 * and the half-made connection is closed.
 */
bool
rw_conn_ensure(RwConn *conn, int flags, RwError *err)
{
	volatile bool ok = false;

	if (conn->ctx != NULL && !conn->is_subscriber && conn->owed == 0 &&
		conn_went_away(conn))
		rw_conn_close(conn);
	if (conn->ctx != NULL)
		return true;
	PG_TRY();
	{
		ok = conn_connect(conn, flags, err);
	}
	PG_CATCH();
	{
		rw_conn_close(conn);
		PG_RE_THROW();
	}
	PG_END_TRY();
	return ok;
}

/* ---------------------------------------------------------------------
 * Exchanging commands and replies
 * --------------------------------------------------------------------- */

/* Queue one command on the request's connection (which must be open). */
void
rw_append(RwRequest *req, int argc, const char **argv, const size_t *lens)
{
	size_t		deflens[8];

	if (lens == NULL)
	{
		Assert(argc <= 8);
		for (int i = 0; i < argc; i++)
			deflens[i] = strlen(argv[i]);
		lens = deflens;
	}
	if (redisAppendCommandArgv(req->conn->ctx, argc, argv, lens) != REDIS_OK)
		elog(ERROR, "out of memory formatting a Redis command");
	if (req->replies == NULL)
		req->replies = MemoryContextAllocZero(TopMemoryContext, 8 * sizeof(redisReply *));
	else if (req->nexpected % 8 == 0)
		req->replies = repalloc(req->replies, (req->nexpected + 8) * sizeof(redisReply *));
	req->replies[req->nexpected++] = NULL;
}

void
rw_request_free(RwRequest *req)
{
	for (int i = 0; i < req->nreceived; i++)
		freeReplyObject(req->replies[i]);
	if (req->replies)
		pfree(req->replies);
	req->replies = NULL;
	req->nreceived = req->nexpected = 0;
}

/* Fail a request: its connection may hold half a reply, so it is closed. */
static void
req_fail(RwRequest *req, RwErrKind kind, const char *msg)
{
	set_error(&req->err, kind, "%s", msg);
	rw_conn_close(req->conn);
}

/* Keep the reply of a command sent by rw_send, for rw_conn_take_late. */
static void
keep_late(RwConn *conn, redisReply *reply)
{
	if (conn->nlate == conn->caplate)
	{
		conn->caplate = Max(8, conn->caplate * 2);
		conn->late = conn->late ?
			repalloc(conn->late, conn->caplate * sizeof(RwLate)) :
			MemoryContextAlloc(TopMemoryContext, conn->caplate * sizeof(RwLate));
	}
	conn->late[conn->nlate].reply = reply;
	conn->late[conn->nlate++].epoch = conn->epoch;
	conn->owed--;
}

/*
 * Move whole replies from the reader into the request. Replies owed to
 * commands sent earlier by rw_send come first, and are set aside.
 */
static bool
req_take_replies(RwRequest *req)
{
	RwConn	   *conn = req->conn;

	while (conn->owed > 0 || req->nreceived < req->nexpected)
	{
		void	   *reply = NULL;

		if (redisGetReplyFromReader(conn->ctx, &reply) != REDIS_OK)
		{
			req_fail(req, RW_ERR_LOST, conn->ctx->errstr);
			return false;
		}
		if (reply == NULL)
			break;
		if (conn->owed > 0)
			keep_late(conn, reply);
		else
			req->replies[req->nreceived++] = reply;
	}
	return true;
}

bool
rw_conn_flush(RwConn *conn, RwError *err)
{
	int			done = 0;

	if (redisBufferWrite(conn->ctx, &done) != REDIS_OK)
	{
		set_error(err, RW_ERR_LOST, "%s", conn->ctx->errstr);
		rw_conn_close(conn);
		return false;
	}
	return true;
}

/* Read what the socket has; then move replies. False if the request failed. */
static bool
req_read(RwRequest *req)
{
	if (redisBufferRead(req->conn->ctx) != REDIS_OK)
	{
		req_fail(req, RW_ERR_LOST, req->conn->ctx->errstr);
		return false;
	}
	return req_take_replies(req);
}

static bool
req_pending(RwRequest *req)
{
	return req->err.kind == RW_OK && req->nreceived < req->nexpected;
}

/* Until its output is written: whether rw_send still has work. */
static bool
req_unsent(RwRequest *req)
{
	return req->err.kind == RW_OK && req->conn->ctx->obuf[0] != '\0';
}

static uint32
req_wants(RwRequest *req)
{
	return (req->conn->ctx->obuf[0] != '\0') ? WL_SOCKET_WRITEABLE : WL_SOCKET_READABLE;
}

static void
req_ready(RwRequest *req, uint32 events)
{
	if (events & WL_SOCKET_WRITEABLE)
		rw_conn_flush(req->conn, &req->err);
	else if (events & WL_SOCKET_READABLE)
		req_read(req);
}

/* Several requests at once: one wait set over every pending socket. */
static bool
exchange_many(RwRequest *reqs, int nreqs, TimestampTz deadline)
{
	for (;;)
	{
		WaitEventSet *wes;
		WaitEvent  *evs;
		int			npending = 0;
		int			nev;

		for (int i = 0; i < nreqs; i++)
			npending += req_pending(&reqs[i]) ? 1 : 0;
		if (npending == 0)
			return true;

		wes = CreateWaitEventSet(CurrentMemoryContext, npending + 2);
		evs = palloc(sizeof(WaitEvent) * (npending + 2));
		AddWaitEventToSet(wes, WL_LATCH_SET, PGINVALID_SOCKET, MyLatch, NULL);
		AddWaitEventToSet(wes, WL_POSTMASTER_DEATH, PGINVALID_SOCKET, NULL, NULL);
		for (int i = 0; i < nreqs; i++)
			if (req_pending(&reqs[i]))
				AddWaitEventToSet(wes, req_wants(&reqs[i]), reqs[i].conn->ctx->fd,
								  NULL, &reqs[i]);
		nev = WaitEventSetWait(wes, ms_until(deadline), evs, npending + 2,
							   PG_WAIT_EXTENSION);
		FreeWaitEventSet(wes);
		if (nev == 0 && ms_until(deadline) <= 0)
		{
			for (int i = 0; i < nreqs; i++)
				if (req_pending(&reqs[i]))
					req_fail(&reqs[i], RW_ERR_TIMEOUT, "no answer within rwlock.command_timeout");
			pfree(evs);
			return false;
		}
		for (int e = 0; e < nev; e++)
		{
			if (evs[e].events & WL_LATCH_SET)
				ResetLatch(MyLatch);
			else if (evs[e].events & WL_POSTMASTER_DEATH)
			{
				if (!proc_exit_inprogress)
					proc_exit(1);
				for (int i = 0; i < nreqs; i++)
					if (req_pending(&reqs[i]))
						req_fail(&reqs[i], RW_ERR_LOST, "postmaster died");
			}
			else
				req_ready((RwRequest *) evs[e].user_data, evs[e].events);
		}
		pfree(evs);
	}
}

/*
 * Send every request's queued commands and collect their replies, until each
 * request has all its replies or failed. Interrupts stay pending.
 */
static bool
exchange(RwRequest *reqs, int nreqs, TimestampTz deadline, int flags)
{
	bool		ok = true;

	for (int i = 0; i < nreqs; i++)
	{
		reqs[i].err.kind = RW_OK;
		if (rw_conn_flush(reqs[i].conn, &reqs[i].err))
			req_take_replies(&reqs[i]);
	}

	if (nreqs == 1)
	{
		RwRequest  *req = &reqs[0];

		while (req_pending(req))
		{
			int			ready = conn_wait(req->conn, req_wants(req), deadline, flags);

			if (ready == 0)
				req_fail(req, RW_ERR_TIMEOUT,
						 psprintf("no answer within rwlock.command_timeout (%d ms)",
								  rw_command_timeout_ms));
			else if (ready < 0)
				req_fail(req, RW_ERR_LOST, "postmaster died");
			else
				req_ready(req, (uint32) ready);
		}
	}
	else
		exchange_many(reqs, nreqs, deadline);

	for (int i = 0; i < nreqs; i++)
		if (reqs[i].err.kind != RW_OK)
			ok = false;
	return ok;
}

/*
 * Send and collect, bounded by rwlock.command_timeout. Measures the round
 * trip of single requests for redis_connection_info().
 */
bool
rw_exchange(RwRequest *reqs, int nreqs, int flags)
{
	TimestampTz start = GetCurrentTimestamp();
	bool		ok;

	ok = exchange(reqs, nreqs,
				  TimestampTzPlusMilliseconds(start, rw_command_timeout_ms),
				  flags & ~RW_INTERRUPTIBLE);
	if (ok && nreqs == 1)
		reqs[0].conn->last_rtt_ms = (GetCurrentTimestamp() - start) / 1000.0;
	return ok;
}

/*
 * Send a request's commands without waiting for their replies: they are
 * read, in order, by later exchanges on the connection (which read them
 * first anyway) and handed over by rw_conn_take_late. Waits only while the
 * socket does not take the whole output, bounded by rwlock.command_timeout.
 * False if the connection failed; it is then closed, and what was sent may
 * or may not have run.
 */
bool
rw_send(RwRequest *req, int flags)
{
	TimestampTz deadline = TimestampTzPlusMilliseconds(GetCurrentTimestamp(),
													   rw_command_timeout_ms);

	req->err.kind = RW_OK;
	rw_conn_flush(req->conn, &req->err);
	while (req_unsent(req))
	{
		int			ready = conn_wait(req->conn, WL_SOCKET_WRITEABLE, deadline,
									  flags & ~RW_INTERRUPTIBLE);

		if (ready == 0)
			req_fail(req, RW_ERR_TIMEOUT,
					 psprintf("could not send within rwlock.command_timeout (%d ms)",
							  rw_command_timeout_ms));
		else if (ready < 0)
			req_fail(req, RW_ERR_LOST, "postmaster died");
		else
			rw_conn_flush(req->conn, &req->err);
	}
	if (req->err.kind != RW_OK)
		return false;
	req->conn->owed += req->nexpected;
	req->nexpected = 0;
	return true;
}

/*
 * Hand over the replies to rw_send's commands read so far, oldest first,
 * each with the epoch of the connection it came on (a command sent on an
 * earlier epoch whose reply is not among them never got one); the caller
 * frees them. Reads what has already arrived, without waiting.
 */
int
rw_conn_take_late(RwConn *conn, RwLate **late)
{
	RwRequest	req = {conn};
	int			n;

	if (conn->ctx != NULL && conn->owed > 0 && redisBufferRead(conn->ctx) == REDIS_OK)
	{
		(void) req_take_replies(&req);
	}
	else if (conn->ctx != NULL && conn->owed > 0)
		req_fail(&req, RW_ERR_LOST, conn->ctx->errstr);
	n = conn->nlate;
	*late = n > 0 ? palloc(n * sizeof(RwLate)) : NULL;
	if (n > 0)
		memcpy(*late, conn->late, n * sizeof(RwLate));
	conn->nlate = 0;
	return n;
}

/*
 * For a subscriber: take one reply that has arrived, without waiting.
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
		set_error(err, RW_ERR_LOST, "%s", conn->ctx->errstr);
		if (r)
			freeReplyObject(r);
		rw_conn_close(conn);
		return false;
	}
	*reply = r;
	return true;
}

/* Turn an error into an ereport: class 08 for the connection, XX000 else. */
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
