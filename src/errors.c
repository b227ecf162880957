/*-------------------------------------------------------------------------
 *
 * errors.c
 *	  What a failure means in SQL: the SQLSTATE of each kind of RwError
 *	  (a connection refused or lost, a timeout, an interrupt, a Redis error
 *	  reply, a permission refused, a protocol-version clash, a Redis unfit
 *	  to serve locks), and rw_raise, which turns one into an ereport.
 *
 * Below redis_conn.c, which fills RwErrors (rw_error_set) as exchanges
 * fail; the layers above decide when to raise them: never between a Redis
 * answer and the session's record of it.
 *
 *-------------------------------------------------------------------------
 */
#include "rwlock.h"

#include "miscadmin.h"

/* Fill *err: its kind and a message (a detail for the user). */
void
rw_error_set(RwError *err, RwErrKind kind, const char *fmt,...)
{
	va_list		ap;

	err->kind = kind;
	va_start(ap, fmt);
	vsnprintf(err->msg, sizeof(err->msg), fmt, ap);
	va_end(ap);
}

/*
 * Whether Redis refused a command for want of a permission: NOPERM, or
 * what the server answers for a command a script ran: Redis 7.0 "The user
 * executing the script can't ...", Valkey 8 (and Redis 7.2's wording) "ACL
 * failure in script: ...".  Anything else is taken for a fault that passes,
 * and the wait would retry it until its timeout.
 */
static bool
conn_is_noperm(const RwError *err)
{
	return err->kind == RW_ERR_NOPERM ||
		(err->kind == RW_ERR_REPLY &&
		 (strncmp(err->msg, "NOPERM", 6) == 0 ||
		  strstr(err->msg, "The user executing the script can't") != NULL ||
		  strstr(err->msg, "ACL failure in script: ") != NULL));
}

/*
 * Whether the scripts refused keys written by a client of another protocol
 * version (the scripts' RWLOCK_VERSION error).
 */
static bool
conn_is_version_clash(const RwError *err)
{
	return err->kind == RW_ERR_REPLY &&
		strncmp(err->msg, "RWLOCK_VERSION ", 15) == 0;
}

/*
 * Whether Redis ran a newer request of this session's owner id on the lock
 * before this one (protocol 3's RWLOCK_STALE): this session's requests go
 * one at a time, so another process uses its owner id.
 */
static bool
conn_is_stale(const RwError *err)
{
	return err->kind == RW_ERR_REPLY && rw_proto_is_stale(err->msg);
}

/* The SQLSTATE of an error: what rw_raise raises, and warnings say. */
int
rw_error_sqlstate(const RwError *err)
{
	if (conn_is_noperm(err))
		return ERRCODE_INSUFFICIENT_PRIVILEGE;
	if (conn_is_version_clash(err) || conn_is_stale(err))
		return ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE;
	switch (err->kind)
	{
		case RW_ERR_CONNECT:
			return ERRCODE_SQLCLIENT_UNABLE_TO_ESTABLISH_SQLCONNECTION;
		case RW_ERR_AUTH:
			return ERRCODE_SQLSERVER_REJECTED_ESTABLISHMENT_OF_SQLCONNECTION;
		case RW_ERR_LOST:
		case RW_ERR_TIMEOUT:
		case RW_ERR_UNSERVED:
			return ERRCODE_CONNECTION_FAILURE;
		case RW_ERR_INTERRUPTED:
			return ERRCODE_QUERY_CANCELED;
		case RW_ERR_UNFIT:
			return ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE;
		case RW_ERR_NOPERM:
		case RW_ERR_REPLY:
		case RW_OK:
			break;
	}
	return ERRCODE_INTERNAL_ERROR;
}

/*
 * Turn an error into an ereport: class 08 for the connection, 57014 for an
 * interrupt (served here), 55000 for a Redis unfit to serve locks or keys
 * of another protocol version, 42501 for a permission Redis refused, XX000
 * for another error reply.
 */
void
rw_raise(RwConn *conn, const RwError *err)
{
	/*
	 * The URL, without password, only to roles that may read the setting;
	 * for the others, the server log's detail names it.
	 */
	const char *where = rw_endpoint_where(&conn->node->ep);
	char	   *logged = rw_may_see_url() ? NULL :
		psprintf("%s (Redis at %s)", err->msg, conn->node->ep.display);

	if (err->kind != RW_ERR_INTERRUPTED)
		rw_stat_error(rw_error_sqlstate(err));
	if (conn_is_noperm(err))
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("%s refused a command to rwlock's Redis user for want of a permission", where),
				 errdetail("%s", err->msg),
				 logged ? errdetail_log("%s", logged) : 0,
				 errhint("The Redis user needs the lock scripts, the lock keys and the lock channels: see \"What a Redis serving locks must be\" in rwlock's docs/connecting.md.")));
	if (conn_is_version_clash(err))
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("a lock in %s was written by a client of another rwlock protocol version", where),
				 errdetail("%s", err->msg),
				 logged ? errdetail_log("%s", logged) : 0,
				 errhint("Every client sharing a lock must speak the same protocol version (this server speaks %s): upgrade the other one, or let its locks expire.",
						 RW_PROTOCOL_VERSION)));
	if (conn_is_stale(err))
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("%s had already run a newer request of this session's owner id on the lock", where),
				 errdetail("%s", err->msg),
				 logged ? errdetail_log("%s", logged) : 0,
				 errhint("Another process uses this session's owner id (%s): owner ids must be unique.",
						 rw_owner_id())));
	switch (err->kind)
	{
		case RW_ERR_UNFIT:
			ereport(ERROR,
					(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
					 errmsg("%s is not fit to serve locks", where),
					 errdetail("%s", err->msg),
					 logged ? errdetail_log("%s", logged) : 0,
					 errhint("Run a Redis that serves locks with maxmemory-policy noeviction, Redis 5.0 or later.")));
			break;
		case RW_ERR_CONNECT:
			ereport(ERROR,
					(errcode(ERRCODE_SQLCLIENT_UNABLE_TO_ESTABLISH_SQLCONNECTION),
					 errmsg("could not connect to %s", where),
					 errdetail("%s", err->msg),
					 logged ? errdetail_log("%s", logged) : 0,
					 errhint("Check rwlock.redis_url and that Redis is running.")));
			break;
		case RW_ERR_AUTH:
			ereport(ERROR,
					(errcode(ERRCODE_SQLSERVER_REJECTED_ESTABLISHMENT_OF_SQLCONNECTION),
					 errmsg("%s refused authentication", where),
					 errdetail("%s", err->msg),
					 logged ? errdetail_log("%s", logged) : 0,
					 errhint("Check the user name and password (rwlock.redis_url, rwlock.password_file).")));
			break;
		case RW_ERR_LOST:
			ereport(ERROR,
					(errcode(ERRCODE_CONNECTION_FAILURE),
					 errmsg("lost connection to %s", where),
					 errdetail("%s", err->msg),
					 logged ? errdetail_log("%s", logged) : 0));
			break;
		case RW_ERR_UNSERVED:
			ereport(ERROR,
					(errcode(ERRCODE_CONNECTION_FAILURE),
					 errmsg("%s did not serve the lock's hash slot in time", where),
					 errdetail("%s", err->msg),
					 logged ? errdetail_log("%s", logged) : 0));
			break;
		case RW_ERR_TIMEOUT:
			ereport(ERROR,
					(errcode(ERRCODE_CONNECTION_FAILURE),
					 errmsg("%s did not answer in time", where),
					 errdetail("%s; the connection was closed.", err->msg),
					 logged ? errdetail_log("%s; the connection was closed.", logged) : 0));
			break;
		case RW_ERR_INTERRUPTED:
			CHECK_FOR_INTERRUPTS();
			ereport(ERROR,
					(errcode(ERRCODE_QUERY_CANCELED),
					 errmsg("canceling statement due to user request"),
					 errdetail("A Redis command was interrupted; its connection was closed.")));
			break;
		case RW_ERR_NOPERM:		/* raised above */
		case RW_ERR_REPLY:
		case RW_OK:
			ereport(ERROR,
					(errcode(ERRCODE_INTERNAL_ERROR),
					 errmsg("%s answered with an error", where),
					 errdetail("%s", err->msg),
					 logged ? errdetail_log("%s", logged) : 0));
			break;
	}
	pg_unreachable();
}
