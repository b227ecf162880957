/*-------------------------------------------------------------------------
 *
 * sentinel.c
 *	  Where a Sentinel-monitored master is now, for a node whose URL is
 *	  redis+sentinel:// or rediss+sentinel://.
 *
 * Such a node is the service (the master name), not a host and port. Each
 * time redis_conn.c connects to it (any of the node's connections: lock
 * commands, the waiters' subscriber, the keeper's), it asks here for the
 * master's address: the sentinels are asked in turn with
 * SENTINEL get-master-addr-by-name, starting with the one that answered
 * last; the first that names an address wins. redis_conn.c then connects to
 * that address and checks with ROLE (pipelined with the handshake) that it
 * is the master, starting over if not, all within one
 * rwlock.connect_timeout. When the address differs from the one found
 * before, the endpoint's addr_gen moves on, and redis_conn.c closes the
 * node's connections made to the old address (the subscriber especially:
 * Sentinel kills only normal clients on a failover, and a subscriber left
 * on a demoted master would never be woken).
 *
 * A connection that stays open is checked too: before it is used, if the
 * sentinels were last asked more than RW_SENTINEL_RECHECK_MS ago, they are
 * asked again (redis_conn.c's rw_conn_ensure, through ep->resolve), and the connection is
 * closed and made again if the master moved. This is what follows a
 * failover that leaves the old master up and writable for a while (a
 * SENTINEL FAILOVER reconfigures it only seconds after the new master is
 * announced), without a subscription to +switch-master on every backend.
 * The check has a short budget (RW_SENTINEL_CHECK_BUDGET_MS, or less if
 * rwlock.connect_timeout or rwlock.command_timeout is shorter): if no
 * sentinel answers within it, the connection goes on being used (ROLE was
 * checked when it was made, and READONLY ends it) and the sentinels are
 * asked again a period later. Each check is a short connection to one
 * sentinel: a busy backend makes about one a second.
 *
 * A sentinel is reached through redis_conn.c on a plain endpoint (a
 * temporary node) of its own: over TLS if the URL is rediss+sentinel://,
 * with the same TLS settings; no user or password from the URL (those are
 * the master's), but the password file's line for the sentinel's host and
 * port, if any. A sentinel that has no password ignores one given by a
 * catch-all line. Each sentinel gets a share of what is left of the
 * deadline, so one that hangs cannot use it all.
 *
 * Messages name a sentinel by its place in the URL (#1, #2...), never by
 * its address: they may reach roles that may not read rwlock.redis_url.
 *
 * Never throws (but on out of memory); no ereport.
 *
 *-------------------------------------------------------------------------
 */
#include "rwlock.h"

#include "utils/memutils.h"

/* A temporary node for one sentinel of ep. */
static void
sentinel_node(const RwEndpoint *ep, int i, RwNode *node)
{
	memset(node, 0, sizeof(*node));
	node->ep.is_sentinel = true;
	node->ep.tls = ep->tls;
	node->ep.host = ep->seed_hosts[i];
	node->ep.port = ep->seed_ports[i];
	node->ep.password_file = ep->password_file;
	node->ep.tls_verify = ep->tls_verify;
	node->ep.tls_ca_file = ep->tls_ca_file;
	node->ep.tls_cert_file = ep->tls_cert_file;
	node->ep.tls_key_file = ep->tls_key_file;
	node->ep.url = ep->url;
	node->ep.display = ep->display;
	node->cmd.node = node;
}

/*
 * Ask one sentinel. True with *host and *port (palloc'd) if it names the
 * master; false with *err otherwise.
 */
static bool
sentinel_ask(const RwEndpoint *ep, int i, int64 deadline, char **host,
			 int *port, RwError *err)
{
	RwNode		node;
	redisReply *r = NULL;
	const char *argv[3] = {"SENTINEL", "get-master-addr-by-name", ep->master_name};
	bool		ok = false;

	sentinel_node(ep, i, &node);
	if (!rw_conn_open(&node.cmd, deadline, err))
		return false;
	rw_append(&node.cmd, 3, argv, NULL, NULL);
	if (rw_exchange_by(&node.cmd, 1, &r, deadline, err))
	{
		if (r->type == REDIS_REPLY_ARRAY && r->elements == 2 &&
			r->element[0]->type == REDIS_REPLY_STRING &&
			r->element[1]->type == REDIS_REPLY_STRING &&
			atoi(r->element[1]->str) > 0 && atoi(r->element[1]->str) <= 65535)
		{
			*host = pstrdup(r->element[0]->str);
			*port = atoi(r->element[1]->str);
			ok = true;
		}
		else
		{
			err->kind = RW_ERR_CONNECT;
			snprintf(err->msg, sizeof(err->msg),
					 "sentinel #%d does not know master \"%s\"%s%s",
					 i + 1, ep->master_name,
					 r->type == REDIS_REPLY_ERROR ? ": " : "",
					 r->type == REDIS_REPLY_ERROR ? r->str : "");
		}
		freeReplyObject(r);
	}
	rw_conn_close(&node.cmd);
	return ok;
}

/*
 * Make ep, if it is a redis+sentinel:// endpoint, find its master through
 * the sentinels when redis_conn.c connects to it. Called by whoever makes a
 * node (route.c, keeper.c), above this file and redis_conn.c both.
 */
void
rw_sentinel_attach(RwEndpoint *ep)
{
	if (ep->sentinel)
		ep->resolve = rw_sentinel_resolve;
}

/*
 * Find the master of ep's service and make it ep's host and port (kept in
 * TopMemoryContext; addr_gen moves on if it changed). False with *err (class
 * 08, or interrupted) if no sentinel names it before the deadline.
 */
bool
rw_sentinel_resolve(RwEndpoint *ep, int64 deadline, RwError *err)
{
	char		why[sizeof(err->msg)] = "";
	int			n = ep->nseeds;

	for (int k = 0; k < n; k++)
	{
		int			i = (ep->seed_last + k) % n;
		int64		now = rw_now_ms();
		int64		share = (deadline - now) / (n - k);
		char	   *host;
		int			port;

		if (now >= deadline)
			break;
		if (sentinel_ask(ep, i, now + Max(share, 200) < deadline ? now + Max(share, 200) : deadline,
						 &host, &port, err))
		{
			ep->seed_last = i;
			ep->resolved_ms = rw_now_ms();
			rw_endpoint_set_addr(ep, host, port);
			pfree(host);
			return true;
		}
		if (err->kind == RW_ERR_INTERRUPTED)
			return false;
		if (strstr(err->msg, "sentinel ") == err->msg)
			strlcpy(why, err->msg, sizeof(why));
		else
			snprintf(why, sizeof(why), "sentinel #%d: %s", i + 1, err->msg);
	}
	err->kind = RW_ERR_CONNECT;
	err->maybe_sent = false;
	snprintf(err->msg, sizeof(err->msg),
			 "no sentinel named the master of \"%s\" within rwlock.connect_timeout (%d ms); last: %s",
			 ep->master_name, rw_connect_timeout_ms, why[0] ? why : "no time left");
	return false;
}
