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
 * last, until a majority of those the URL lists name the same address (a
 * minority that is stale or lies is outvoted; sessions listing the
 * sentinels in different orders find the same master). redis_conn.c then
 * connects to that address and checks with ROLE that it is the master
 * (before AUTH where the server allows), starting over if not, all within
 * one rwlock.connect_timeout. When the address differs from the one found
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
 * majority answers within it, the connection goes on being used (ROLE was
 * checked when it was made, and READONLY ends it) and the sentinels are
 * asked again a period later. Each check is a short connection to each of
 * a majority of the sentinels (two of three): a busy backend makes about
 * two a second.
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

/* The addresses sentinels named in one resolve, and how many named each. */
typedef struct SentinelTally
{
	int			n;
	char	   *host[64];		/* url.c lists at most 64 sentinels */
	int			port[64];
	int			votes[64];
	int			first[64];		/* the first sentinel that named it */
} SentinelTally;

/* Count one sentinel's answer; returns the votes its address has now. */
static int
sentinel_count(SentinelTally *t, int i, char *host, int port)
{
	for (int j = 0; j < t->n; j++)
		if (t->port[j] == port && strcmp(t->host[j], host) == 0)
		{
			pfree(host);
			return ++t->votes[j];
		}
	t->host[t->n] = host;
	t->port[t->n] = port;
	t->votes[t->n] = 1;
	t->first[t->n] = i;
	t->n++;
	return 1;
}

/* The most votes any address has. */
static int
sentinel_best(const SentinelTally *t, int *which)
{
	int			best = 0;

	*which = -1;
	for (int j = 0; j < t->n; j++)
		if (t->votes[j] > best)
		{
			best = t->votes[j];
			*which = j;
		}
	return best;
}

static void
sentinel_tally_free(SentinelTally *t)
{
	for (int j = 0; j < t->n; j++)
		pfree(t->host[j]);
	t->n = 0;
}

/*
 * Find the master of ep's service and make it ep's host and port (kept in
 * TopMemoryContext; addr_gen moves on if it changed). The sentinels are
 * asked in turn until a majority of those the URL lists name one address:
 * a sentinel that is wrong or lies (names another master, or a server an
 * attacker runs) is outvoted, and two sessions that list the sentinels in
 * different orders find the same master. False with *err (class 08, or
 * interrupted) if no address has a majority before the deadline: too few
 * sentinels answered, or they disagree (a failover under way: the caller
 * asks again after a pause).
 */
bool
rw_sentinel_resolve(RwEndpoint *ep, int64 deadline, RwError *err)
{
	char		why[sizeof(err->msg)] = "";
	int			n = ep->nseeds;
	int			need = n / 2 + 1;
	int			answered = 0;
	int			best = 0;
	int			which = -1;
	SentinelTally tally;

	memset(&tally, 0, sizeof(tally));
	for (int k = 0; k < n && best < need; k++)
	{
		int			i = (ep->seed_last + k) % n;
		int64		now = rw_now_ms();
		int64		share = (deadline - now) / (n - k);
		char	   *host;
		int			port;

		/* No address can have a majority any more: stop asking. */
		if (now >= deadline || best + (n - k) < need)
			break;
		if (sentinel_ask(ep, i, now + Max(share, 200) < deadline ? now + Max(share, 200) : deadline,
						 &host, &port, err))
		{
			answered++;
			(void) sentinel_count(&tally, i, host, port);
			best = sentinel_best(&tally, &which);
			continue;
		}
		if (err->kind == RW_ERR_INTERRUPTED)
		{
			sentinel_tally_free(&tally);
			return false;
		}
		if (strstr(err->msg, "sentinel ") == err->msg)
			strlcpy(why, err->msg, sizeof(why));
		else
			snprintf(why, sizeof(why), "sentinel #%d: %s", i + 1, err->msg);
	}
	if (best >= need)
	{
		ep->seed_last = tally.first[which];
		ep->resolved_ms = rw_now_ms();
		/* The master moved since it was last found: a failover followed. */
		if (ep->host != NULL &&
			(strcmp(ep->host, tally.host[which]) != 0 || ep->port != tally.port[which]))
			rw_stat_add(RW_STAT_FAILOVERS, 1);
		rw_endpoint_set_addr(ep, tally.host[which], tally.port[which]);
		sentinel_tally_free(&tally);
		return true;
	}
	err->kind = RW_ERR_CONNECT;
	err->maybe_sent = false;
	if (tally.n >= 2)
		snprintf(err->msg, sizeof(err->msg),
				 "the sentinels disagree on the master of \"%s\": sentinels #%d and #%d name different servers, and no server is named by a majority (%d of the %d listed)",
				 ep->master_name, tally.first[0] + 1, tally.first[1] + 1,
				 need, n);
	else if (tally.n == 1)
		snprintf(err->msg, sizeof(err->msg),
				 "only %d of the %d sentinels named the master of \"%s\" within rwlock.connect_timeout (%d ms), and a majority (%d) must agree; last failure: %s",
				 answered, n, ep->master_name, rw_connect_timeout_ms, need,
				 why[0] ? why : "no time left");
	else
		snprintf(err->msg, sizeof(err->msg),
				 "no sentinel named the master of \"%s\" within rwlock.connect_timeout (%d ms); last: %s",
				 ep->master_name, rw_connect_timeout_ms, why[0] ? why : "no time left");
	sentinel_tally_free(&tally);
	return false;
}
