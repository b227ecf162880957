/*-------------------------------------------------------------------------
 *
 * cluster.c
 *	  Redis Cluster: hash slots, the slot map, redirections, for a node
 *	  whose URL is redis+cluster:// or rediss+cluster://.
 *
 * Such a node (the logical node: what a hold, its owed releases and the
 * keeper's records belong to) is the whole cluster. Commands for a lock go
 * to the member node that serves the lock's slot: one plain node per
 * address, made when the slot map first names it, each with a command
 * connection opened on demand and authenticated like any other (the URL's
 * user and password, or the password file's line for its host and port).
 * The logical node's own connections go to any node of the cluster
 * (cluster_resolve names the nodes it knows in turn): its command
 * connection asks for the slot map, its subscriber receives wake-ups,
 * which PUBLISH broadcasts to every node of a cluster.
 *
 * The slot map comes from CLUSTER SLOTS, loaded when first needed and again
 * (at most once per call) after a MOVED answer, a CLUSTERDOWN, a lost
 * connection, or before using a member that an earlier call could not
 * connect to (a dead master: its replica may have taken its slots). Until it loads, commands go to the logical node's connection,
 * whose MOVED answers route them. What the callers do with an answer
 * (rw_cluster_redirected):
 *	  MOVED		 the slot lives elsewhere now: the map's entry is set to the
 *				 node named and the whole map reloaded before the next call;
 *				 retried there;
 *	  ASK		 the slot is being migrated and the keys are not (or no
 *				 longer) on the old node: for the rest of the call the slot
 *				 goes to the node named, each call after an ASKING
 *				 (scripts.c); the map is unchanged;
 *	  TRYAGAIN	 a migration has some keys of the lock on each side: retried
 *	  CLUSTERDOWN after a short pause;
 * each within one rwlock.command_timeout from the operation's start, after
 * which it is an error of class 08 (RW_ERR_UNSERVED: the slot was not
 * served in time; a waiter tries again, waiting.c).
 * None of these answers ran the command. The caller does the retrying, so
 * that releases owed for the name go ahead of the retried command on its
 * new connection (release.c).
 *
 * A node of the cluster is shown (redis_connection_info) by its address
 * only, with the URL's user, never the password.
 *
 * Never throws (but on out of memory); no ereport.
 *
 *-------------------------------------------------------------------------
 */
#include "rwlock.h"

#include "utils/memutils.h"

#define CLUSTER_NSLOTS		16384
#define CLUSTER_PAUSE_MS	50	/* between tries after TRYAGAIN, CLUSTERDOWN */

typedef struct RwCluster
{
	RwNode	   *members;		/* one node per address, linked by next */
	RwNode	   *slots[CLUSTER_NSLOTS];	/* NULL: not known */
	bool		stale;			/* reload the map before routing */
	uint64		loaded_call;	/* the call that last loaded it */
	int			ask_slot;		/* -1, or the slot an ASK sent to ask_node */
	RwNode	   *ask_node;
	uint64		ask_call;		/* ... for the rest of this call */
	uint64		reconnect_call; /* the call that retried after a failed
								 * connection */
} RwCluster;

/* CRC16-CCITT (XMODEM), as Redis Cluster's key hashing (its cluster spec). */
static uint16
cluster_crc16(const char *buf, size_t len)
{
	uint16		crc = 0;

	for (size_t i = 0; i < len; i++)
	{
		crc ^= (uint16) ((unsigned char) buf[i]) << 8;
		for (int b = 0; b < 8; b++)
			crc = (crc & 0x8000) ? (uint16) ((crc << 1) ^ 0x1021) : (uint16) (crc << 1);
	}
	return crc;
}

/*
 * The hash slot of a key: of the text between its first '{' and the next
 * '}' if that is not empty, else of the whole key (Redis's rule).
 */
int
rw_cluster_key_slot(const char *key, size_t len)
{
	const char *open = memchr(key, '{', len);

	if (open != NULL)
	{
		const char *start = open + 1;
		const char *close = memchr(start, '}', key + len - start);

		if (close != NULL && close > start)
			return cluster_crc16(start, close - start) % CLUSTER_NSLOTS;
	}
	return cluster_crc16(key, len) % CLUSTER_NSLOTS;
}

/* The node an endpoint belongs to (the endpoint is a node's first field). */
static RwNode *
cluster_node_of_ep(RwEndpoint *ep)
{
	return (RwNode *) ((char *) ep - offsetof(RwNode, ep));
}

/* The member at host:port, made if new: a plain node with the URL's settings. */
static RwNode *
cluster_member(RwNode *node, const char *host, int port)
{
	RwCluster  *c = node->cluster;
	RwNode	   *m;
	MemoryContext old;

	for (m = c->members; m != NULL; m = m->next)
		if (m->ep.port == port && strcmp(m->ep.host, host) == 0)
			return m;
	old = MemoryContextSwitchTo(TopMemoryContext);
	m = palloc0(sizeof(RwNode));
	m->ep = node->ep;			/* credentials, TLS settings, the spec */
	m->ep.cluster = false;
	m->ep.resolve = NULL;
	m->ep.nseeds = 0;
	m->ep.host = pstrdup(host);
	m->ep.port = port;
	m->ep.display = psprintf("%s://%s%s%s%s%s:%d/0", m->ep.tls ? "rediss" : "redis",
							 m->ep.user ? m->ep.user : "", m->ep.user ? "@" : "",
							 strchr(host, ':') ? "[" : "", host,
							 strchr(host, ':') ? "]" : "", port);
	m->cmd.node = m;
	m->sub.node = m;
	m->sub.is_subscriber = true;
	m->next = c->members;
	c->members = m;
	MemoryContextSwitchTo(old);
	return m;
}

/*
 * For the logical node's own connections: the next node to try, among
 * the masters the map names (first: a subscriber there shows in
 * redis_connection_info) and the URL's seeds, in turn (redis_conn.c moves
 * ep->seed_last on after a failed attempt).
 */
static bool
cluster_resolve(RwEndpoint *ep, int64 deadline, RwError *err)
{
	RwCluster  *c = cluster_node_of_ep(ep)->cluster;
	int			nmembers = 0;
	int			i;
	const char *host;
	int			port;
	RwNode	   *m;

	for (m = c->members; m != NULL; m = m->next)
		nmembers++;
	i = ep->seed_last % (nmembers + ep->nseeds);
	if (i < nmembers)
	{
		for (m = c->members; i > 0; i--)
			m = m->next;
		host = m->ep.host;
		port = m->ep.port;
	}
	else
	{
		host = ep->seed_hosts[i - nmembers];
		port = ep->seed_ports[i - nmembers];
	}
	rw_endpoint_set_addr(ep, host, port);
	return true;
}

/*
 * Make a redis+cluster:// node route by slot. Called by whoever makes a
 * node (route.c, keeper.c).
 */
void
rw_cluster_attach(RwNode *node)
{
	if (!node->ep.cluster)
		return;
	node->cluster = MemoryContextAllocZero(TopMemoryContext, sizeof(RwCluster));
	node->cluster->stale = true;
	node->cluster->ask_slot = -1;
	node->ep.resolve = cluster_resolve;
}

/* Close the members' connections and free them (the node goes). */
void
rw_cluster_detach(RwNode *node)
{
	RwCluster  *c = node->cluster;

	if (c == NULL)
		return;
	while (c->members != NULL)
	{
		RwNode	   *m = c->members;

		c->members = m->next;
		rw_conn_close(&m->cmd);
		rw_conn_close(&m->sub);
		pfree(m);
	}
	pfree(c);
	node->cluster = NULL;
}

/* For walking a cluster's members (NULL for another node). */
RwNode *
rw_cluster_members(RwNode *node)
{
	return node->cluster ? node->cluster->members : NULL;
}

/* Take one range of CLUSTER SLOTS's answer into the map. */
static void
cluster_take_range(RwNode *node, redisReply *range)
{
	redisReply *master;
	long long	from,
				to;
	const char *host;

	if (range->type != REDIS_REPLY_ARRAY || range->elements < 3 ||
		range->element[0]->type != REDIS_REPLY_INTEGER ||
		range->element[1]->type != REDIS_REPLY_INTEGER)
		return;
	master = range->element[2];
	if (master->type != REDIS_REPLY_ARRAY || master->elements < 2 ||
		master->element[0]->type != REDIS_REPLY_STRING ||
		master->element[1]->type != REDIS_REPLY_INTEGER)
		return;
	from = range->element[0]->integer;
	to = range->element[1]->integer;
	/* An empty address means the node that answered. */
	host = master->element[0]->len > 0 ? master->element[0]->str : node->ep.host;
	if (from < 0 || to >= CLUSTER_NSLOTS || from > to || host == NULL)
		return;
	for (long long s = from; s <= to; s++)
		node->cluster->slots[s] = cluster_member(node, host,
												 (int) master->element[1]->integer);
}

/*
 * Load the slot map with CLUSTER SLOTS from any node of the cluster (the
 * logical node's command connection). On failure the old map stays.
 */
static void
cluster_load(RwNode *node)
{
	RwCluster  *c = node->cluster;
	const char *argv[2] = {"CLUSTER", "SLOTS"};
	redisReply *r;
	RwError		err;

	c->loaded_call = rw_call_id();
	if (!rw_conn_ensure(&node->cmd, &err))
		return;
	rw_append(&node->cmd, 2, argv, NULL, NULL);
	if (!rw_exchange(&node->cmd, 1, &r, &err))
		return;
	if (r->type == REDIS_REPLY_ARRAY)
	{
		memset(c->slots, 0, sizeof(c->slots));
		for (size_t i = 0; i < r->elements; i++)
			cluster_take_range(node, r->element[i]);
		c->stale = false;
	}
	else
		rw_conn_close(&node->cmd);	/* not a cluster node: try another */
	freeReplyObject(r);
}

/* The member that serves a slot as far as the map knows, loading it if due. */
static RwNode *
cluster_slot_node(RwNode *node, int slot)
{
	RwCluster  *c = node->cluster;

	if (c->stale && c->loaded_call != rw_call_id())
		cluster_load(node);
	return c->slots[slot];
}

/*
 * The command connection that serves the lock with these keys: the node's
 * own, or in a cluster the member's that serves its slot (the target of an
 * ASK redirection this call, flagged to send ASKING), or, with no map, the
 * logical node's (whose MOVED answers route). Not opened here.
 */
RwConn *
rw_cluster_cmd(RwNode *node, const RwKeys *keys)
{
	RwCluster  *c = node->cluster;
	int			slot;
	RwNode	   *m;

	if (c == NULL)
		return &node->cmd;
	slot = rw_cluster_key_slot(keys->key[0], keys->len[0]);
	if (c->ask_slot == slot && c->ask_call == rw_call_id())
	{
		c->ask_node->cmd.asking = true;
		return &c->ask_node->cmd;
	}
	m = c->slots[slot];
	/* A member an earlier call could not reach: has the slot moved since? */
	if (m != NULL && m->cmd.ctx == NULL && m->cmd.failed_call != 0 &&
		m->cmd.failed_call != rw_call_id())
		c->stale = true;
	m = cluster_slot_node(node, slot);
	if (m == NULL)
	{
		node->cmd.asking = false;
		return &node->cmd;
	}
	m->cmd.asking = false;
	return &m->cmd;
}

/* The member the map names for the keys' slot, without loading it. */
RwNode *
rw_cluster_node_of(RwNode *node, const RwKeys *keys)
{
	if (node->cluster == NULL)
		return node;
	return node->cluster->slots[rw_cluster_key_slot(keys->key[0], keys->len[0])];
}

/* "MOVED 1234 host:port" or "ASK ...": the slot and the node named. */
static RwNode *
cluster_parse_redirect(RwNode *node, const char *msg, int *slot)
{
	const char *sp = strchr(msg, ' ');
	const char *addr;
	const char *colon;
	char	   *host;
	RwNode	   *m;

	if (sp == NULL || (addr = strchr(sp + 1, ' ')) == NULL)
		return NULL;
	*slot = atoi(sp + 1);
	addr++;
	colon = strrchr(addr, ':');
	if (colon == NULL || *slot < 0 || *slot >= CLUSTER_NSLOTS || atoi(colon + 1) <= 0)
		return NULL;
	host = colon > addr ? pnstrdup(addr, colon - addr) : pstrdup(node->ep.host ? node->ep.host : "");
	m = host[0] ? cluster_member(node, host, atoi(colon + 1)) : NULL;
	pfree(host);
	return m;
}

/* Follow one redirection answer (see the header); false if it is not one. */
static bool
cluster_follow(RwNode *node, const char *msg)
{
	RwCluster  *c = node->cluster;
	int			slot;
	RwNode	   *m;

	if (strncmp(msg, "MOVED ", 6) == 0)
	{
		if ((m = cluster_parse_redirect(node, msg, &slot)) != NULL)
			c->slots[slot] = m;
		c->stale = true;
		c->loaded_call = 0;		/* reload even in this call */
		c->ask_slot = -1;
		return true;
	}
	if (strncmp(msg, "ASK ", 4) == 0)
	{
		if ((m = cluster_parse_redirect(node, msg, &slot)) != NULL)
		{
			c->ask_slot = slot;
			c->ask_node = m;
			c->ask_call = rw_call_id();
		}
		return true;
	}
	if (strncmp(msg, "CLUSTERDOWN", 11) == 0)
		c->stale = true;
	return rw_proto_is_redirect(msg);
}

/*
 * Note an answer a cluster gave a release read later (release.c): the map
 * follows MOVED and ASK, and the release, which did not run, is sent again.
 */
void
rw_cluster_note_redirect(RwNode *node, const char *msg)
{
	if (node->cluster != NULL)
		(void) cluster_follow(node, msg);
}

/*
 * After a command for node failed with *err: whether to send it again, to
 * where the cluster says it goes now (started: when the operation began;
 * the retries end rwlock.command_timeout after it). A redirection whose
 * time has run out becomes a class 08 error; a lost connection makes the
 * map reload at the next call, and a member that could not be connected to
 * makes it reload now and the command retried, once a call. Waits (through
 * the latch) after TRYAGAIN and CLUSTERDOWN. Always false for a node that
 * is not a cluster.
 */
bool
rw_cluster_redirected(RwNode *node, RwError *err, int64 started)
{
	RwCluster  *c = node->cluster;
	bool		pause;

	if (c == NULL)
		return false;
	if (err->kind == RW_ERR_INTERRUPTED || err->kind == RW_OK)
		return false;
	if (err->kind != RW_ERR_REPLY)
	{
		c->stale = true;
		/*
		 * A member that could not be reached (a dead master) may have lost
		 * its slots to a replica: once per call, reload the map and retry.
		 */
		if (err->kind != RW_ERR_CONNECT || err->maybe_sent ||
			c->reconnect_call == rw_call_id())
			return false;
		c->reconnect_call = rw_call_id();
		c->loaded_call = 0;
		return true;
	}
	pause = strncmp(err->msg, "TRYAGAIN", 8) == 0 ||
		strncmp(err->msg, "CLUSTERDOWN", 11) == 0;
	if (!cluster_follow(node, err->msg))
		return false;
	if (rw_now_ms() - started + (pause ? CLUSTER_PAUSE_MS : 0) >= rw_command_timeout_ms)
	{
		char		msg[sizeof(err->msg)];

		snprintf(msg, sizeof(msg),
				 "the cluster redirected the command for longer than rwlock.command_timeout (%d ms), and it did not run: %s; last answer: %.120s",
				 rw_command_timeout_ms,
				 strncmp(err->msg, "TRYAGAIN", 8) == 0 ?
				 "the lock's hash slot is being migrated, some of its keys on each side" :
				 strncmp(err->msg, "CLUSTERDOWN", 11) == 0 ?
				 "the lock's hash slot has no master that answers (a failover under way?)" :
				 "the lock's hash slot kept moving",
				 err->msg);
		strlcpy(err->msg, msg, sizeof(err->msg));
		err->kind = RW_ERR_UNSERVED;
		err->maybe_sent = false;
		return false;
	}
	if (pause && !rw_conn_pause(CLUSTER_PAUSE_MS))
	{
		err->kind = RW_ERR_INTERRUPTED;
		snprintf(err->msg, sizeof(err->msg), "interrupted while waiting for the cluster");
		return false;
	}
	return true;
}

/* Renew the batch of those pending that conn serves; see rw_cluster_renew. */
static bool
cluster_renew_batch(RwConn *conn, int *batch, int nb, RwKeys **keys,
					const char *const *owners, const int *lease_ms,
					int *held, char **why, RwError *err)
{
	RwKeys	  **bk = palloc(sizeof(RwKeys *) * nb);
	const char **bo = palloc(sizeof(char *) * nb);
	int		   *bl = palloc(sizeof(int) * nb);
	int		   *bh = palloc(sizeof(int) * nb);
	char	  **bw = palloc0(sizeof(char *) * nb);
	bool		ok;

	for (int k = 0; k < nb; k++)
	{
		bk[k] = keys[batch[k]];
		bo[k] = owners ? owners[batch[k]] : NULL;
		bl[k] = lease_ms[batch[k]];
	}
	ok = rw_proto_renew(conn, bk, owners ? bo : NULL, bl, nb, bh, bw, err);
	for (int k = 0; ok && k < nb; k++)
	{
		held[batch[k]] = bh[k];
		why[batch[k]] = bw[k];
	}
	pfree(bk);
	pfree(bo);
	pfree(bl);
	pfree(bh);
	pfree(bw);
	return ok;
}

/*
 * Renew n holds of one node, on behalf of owners[i] (NULL: this session's),
 * as rw_proto_renew does: for a cluster, one pipelined batch per member
 * that serves some of them, and those redirected sent again where they go
 * now, within rwlock.command_timeout. held[i] as rw_proto_renew's (-1 also
 * for a hold whose member could not be reached or that stayed redirected).
 * False, with *err, if no member could be reached.
 */
bool
rw_cluster_renew(RwNode *node, RwKeys **keys, const char *const *owners,
				 const int *lease_ms, int n, int *held, RwError *err)
{
	int64		started = rw_now_ms();
	int		   *pending = palloc(sizeof(int) * n);
	int		   *batch = palloc(sizeof(int) * n);
	char	  **why = palloc0(sizeof(char *) * n);
	int			npending = n;
	bool		any_ok = false;

	if (node->cluster == NULL)
		return rw_proto_renew(&node->cmd, keys, owners, lease_ms, n, held, NULL, err);
	for (int i = 0; i < n; i++)
	{
		pending[i] = i;
		held[i] = -1;
	}
	while (npending > 0)
	{
		int			nagain = 0;
		const char *redirect = NULL;

		/* Take the batch of the member serving the first left, until none. */
		for (int left = npending; left > 0;)
		{
			RwConn	   *conn = rw_cluster_cmd(node, keys[pending[nagain]]);
			int			nb = 0;
			int			rest = nagain;

			for (int j = nagain; j < nagain + left; j++)
			{
				if (rw_cluster_cmd(node, keys[pending[j]]) == conn)
					batch[nb++] = pending[j];
				else
					pending[rest++] = pending[j];
			}
			left = rest - nagain;
			if (cluster_renew_batch(conn, batch, nb, keys, owners, lease_ms,
									held, why, err))
				any_ok = true;
			else if (err->kind == RW_ERR_INTERRUPTED)
				return false;
			else
				(void) rw_cluster_redirected(node, err, started);
			/* Those redirected go to the front, to be sent again. */
			for (int k = 0; k < nb; k++)
			{
				if (held[batch[k]] != -2)
					continue;
				held[batch[k]] = -1;
				redirect = why[batch[k]];
				memmove(pending + nagain + 1, pending + nagain, sizeof(int) * left);
				pending[nagain++] = batch[k];
			}
		}
		npending = nagain;
		if (npending > 0)
		{
			RwError		r = {RW_ERR_REPLY};

			strlcpy(r.msg, redirect, sizeof(r.msg));
			if (!rw_cluster_redirected(node, &r, started))
				break;
		}
	}
	return any_ok;
}
