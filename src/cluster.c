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
	bool		answered = false;

	c->loaded_call = rw_call_id();
	if (rw_conn_ensure(&node->cmd, &err))
	{
		rw_append(&node->cmd, 2, argv, NULL, NULL);
		answered = rw_exchange(&node->cmd, 1, &r, &err);
	}
	if (!answered)
	{
		/*
		 * A node that did not answer (stopped: it takes connections into
		 * the kernel's backlog and answers nothing) is not asked first
		 * again: the next load asks the next node the resolver knows.
		 */
		if (err.kind != RW_ERR_INTERRUPTED)
			node->ep.seed_last = (node->ep.seed_last + 1) & 0xffff;
		return;
	}
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

/* ---------------------------------------------------------------------
 * Renewals: every master at once
 *
 * A renewal of holds in the slots of several masters sends each master's
 * batch, pipelined, on that master's connection first, then reads the
 * answers as they come, all within one rwlock.command_timeout (SPEC 13: one
 * server that stalls never delays renewals on another). In two stages:
 * first the batches whose connections are open, by the slot map as it is
 * (it may be stale: a master that no longer serves a slot answers MOVED),
 * with nothing that waits for a connection; then the rest, which may need
 * the map loaded or a connection made (within one rwlock.connect_timeout),
 * so that a stopped master being connected to again (a connection to a
 * stopped Redis waits in its kernel's backlog) never delays the masters
 * that answer, nor the renewals they redirect. A master that does not
 * answer in time has its connection dropped (nothing half-read is left on
 * a kept connection), and its holds are undecided: the caller tries them
 * again.
 * Renewals answered MOVED, ASK, TRYAGAIN or CLUSTERDOWN are sent again
 * where they go now as soon as the answer is read, on a connection that
 * has nothing else in flight (the answers of two batches on one
 * connection, or of a batch and CLUSTER SLOTS, must not be confused).
 * ---------------------------------------------------------------------
 */

/* Renewals sent on one connection, not yet answered. */
typedef struct ClusterBatch
{
	RwConn	   *conn;
	bool		asking;			/* each call after an ASKING */
	int			nb;
	int		   *holds;			/* indexes into the caller's arrays */
	RwRenewCall rc;
} ClusterBatch;

/* One call of rw_cluster_renew. */
typedef struct ClusterRenewal
{
	RwNode	   *node;
	RwKeys	  **keys;
	const char *const *owners;
	const uint64 *seqs;
	const int  *lease_ms;
	int		   *held;
	int64		started;
	int		   *pending;		/* holds to send, in the caller's order */
	int			npending;
	ClusterBatch *flight;		/* batches sent, answers due */
	int			nflight;
	bool		any_ok;			/* some batch was answered */
	bool		interrupted;	/* then nothing more is sent */
	RwError    *err;			/* the first failure (an interrupt first) */
} ClusterRenewal;

static void
cluster_renew_failed(ClusterRenewal *r, const RwError *merr)
{
	if (merr->kind == RW_ERR_INTERRUPTED)
		r->interrupted = true;
	if (r->err->kind == RW_OK || merr->kind == RW_ERR_INTERRUPTED)
		*r->err = *merr;
}

/* Whether a batch is in flight on conn. */
static bool
cluster_conn_busy(ClusterRenewal *r, RwConn *conn)
{
	for (int b = 0; b < r->nflight; b++)
		if (r->flight[b].conn == conn)
			return true;
	return false;
}

/*
 * The connection that serves hold i now, and whether after an ASKING; NULL
 * if not to be sent yet. With open_only, by the map as it is, and only an
 * open connection; else as rw_cluster_cmd routes it (the map loaded if due,
 * on the logical node's connection: not while a batch is in flight there).
 */
static RwConn *
cluster_renew_route(ClusterRenewal *r, int i, bool open_only, bool *asking)
{
	RwCluster  *c = r->node->cluster;
	RwConn	   *conn;

	if (open_only)
	{
		int			slot = rw_cluster_key_slot(r->keys[i]->key[0], r->keys[i]->len[0]);
		RwNode	   *m = c->slots[slot];

		*asking = false;
		if (c->ask_slot == slot && c->ask_call == rw_call_id())
		{
			m = c->ask_node;
			*asking = true;
		}
		conn = m != NULL && m->cmd.ctx != NULL ? &m->cmd : NULL;
	}
	else if (cluster_conn_busy(r, &r->node->cmd))
		conn = NULL;
	else
	{
		conn = rw_cluster_cmd(r->node, r->keys[i]);
		*asking = conn->asking;
	}
	return conn != NULL && !cluster_conn_busy(r, conn) ? conn : NULL;
}

/*
 * Send the pending holds that can go now, one pipelined batch per
 * connection (and per ASKING or not); the others stay pending.
 */
static void
cluster_renew_send(ClusterRenewal *r, bool open_only)
{
	int			n = r->npending;
	int			nretry = 0;
	int		   *retry = palloc(sizeof(int) * Max(n, 1));
	RwConn	  **conn = palloc(sizeof(RwConn *) * Max(n, 1));
	bool	   *asking = palloc(sizeof(bool) * Max(n, 1));
	RwKeys	  **bk = palloc(sizeof(RwKeys *) * Max(n, 1));
	const char **bo = palloc(sizeof(char *) * Max(n, 1));
	uint64	   *bs = palloc(sizeof(uint64) * Max(n, 1));
	int		   *bl = palloc(sizeof(int) * Max(n, 1));

	for (int j = 0; j < n; j++)
		conn[j] = r->interrupted ? NULL :
			cluster_renew_route(r, r->pending[j], open_only, &asking[j]);
	for (int first = 0; first < n; first++)
	{
		ClusterBatch *b;
		RwConn	   *to = conn[first];
		bool		ask = asking[first];
		RwError		merr;

		if (to == NULL || r->interrupted)
			continue;
		b = &r->flight[r->nflight];
		b->conn = to;
		b->asking = ask;
		b->nb = 0;
		b->holds = palloc(sizeof(int) * n);
		for (int j = first; j < n; j++)
		{
			if (conn[j] != to || asking[j] != ask)
				continue;
			conn[j] = NULL;
			b->holds[b->nb] = r->pending[j];
			bk[b->nb] = r->keys[r->pending[j]];
			bo[b->nb] = r->owners ? r->owners[r->pending[j]] : NULL;
			bs[b->nb] = r->owners ? r->seqs[r->pending[j]] : 0;
			bl[b->nb] = r->lease_ms[r->pending[j]];
			r->pending[j] = -1;
			b->nb++;
		}
		/* Other holds routed to this connection wait for its answers. */
		for (int j = first + 1; j < n; j++)
			if (conn[j] == to)
				conn[j] = NULL;
		to->asking = ask;
		if (rw_proto_renew_send(to, bk, r->owners ? bo : NULL, bs, bl, b->nb,
								&b->rc, &merr))
		{
			r->nflight++;
			continue;
		}
		/* Not sent: undecided, unless the map says to try elsewhere. */
		cluster_renew_failed(r, &merr);
		if (!r->interrupted && rw_cluster_redirected(r->node, &merr, r->started))
			for (int k = 0; k < b->nb; k++)
				retry[nretry++] = b->holds[k];
		pfree(b->holds);
	}
	/* Keep those still pending, in order, and those to try again. */
	{
		int			kept = 0;

		for (int j = 0; j < n; j++)
			if (r->pending[j] >= 0)
				r->pending[kept++] = r->pending[j];
		for (int k = 0; k < nretry; k++)
			r->pending[kept++] = retry[k];
		r->npending = kept;
	}
	pfree(conn);
	pfree(asking);
	pfree(bk);
	pfree(bo);
	pfree(bs);
	pfree(bl);
	pfree(retry);
	/* A master that refused the connection: the map was reloaded (once a call). */
	if (nretry > 0 && !r->interrupted)
		cluster_renew_send(r, open_only);
}

/*
 * Read the answers of the batch whose connection has something to read
 * first (or, when the time is up or an interrupt wants it, of the first:
 * its exchange then fails and drops the connection). Redirected holds
 * become pending again while there is time.
 */
static void
cluster_renew_collect(ClusterRenewal *r)
{
	RwConn	  **conns = palloc(sizeof(RwConn *) * r->nflight);
	ClusterBatch b;
	int			f;
	int		   *bh;
	char	  **bw;
	RwError		merr;
	const char *redirect = NULL;

	for (int k = 0; k < r->nflight; k++)
		conns[k] = r->flight[k].conn;
	f = rw_conns_first_readable(conns, r->nflight);
	pfree(conns);
	b = r->flight[f];
	r->flight[f] = r->flight[--r->nflight];
	bh = palloc(sizeof(int) * b.nb);
	bw = palloc0(sizeof(char *) * b.nb);
	/* Routing other holds (rw_cluster_cmd) may have changed it since. */
	b.conn->asking = b.asking;
	if (b.conn->ctx == NULL)
	{
		pfree(b.rc.calls);
		pfree(b.rc.leases);
		rw_error_set(&merr, RW_ERR_LOST, "the connection closed before the renewals were answered");
		merr.maybe_sent = true;
		cluster_renew_failed(r, &merr);
	}
	else if (!rw_proto_renew_collect(b.conn, &b.rc, bh, bw, &merr))
	{
		cluster_renew_failed(r, &merr);
		if (!r->interrupted)
			(void) rw_cluster_redirected(r->node, &merr, r->started);
	}
	else
	{
		r->any_ok = true;
		for (int k = 0; k < b.nb; k++)
		{
			r->held[b.holds[k]] = bh[k] == -2 ? -1 : bh[k];
			if (bh[k] == -2)
				rw_cluster_note_redirect(r->node, redirect = bw[k]);
		}
	}
	if (redirect != NULL && !r->interrupted)
	{
		RwError		again = {RW_ERR_REPLY};

		strlcpy(again.msg, redirect, sizeof(again.msg));
		if (rw_cluster_redirected(r->node, &again, r->started))
		{
			for (int k = 0; k < b.nb; k++)
				if (bh[k] == -2)
					r->pending[r->npending++] = b.holds[k];
		}
		else
			cluster_renew_failed(r, &again);
	}
	for (int k = 0; k < b.nb; k++)
		if (bw[k] != NULL)
			pfree(bw[k]);
	pfree(bh);
	pfree(bw);
	pfree(b.holds);
}

/*
 * Send what is pending and read every answer as it comes, all within one
 * rwlock.command_timeout, sending again at once what was redirected. With
 * open_only, only on connections open now (routed by the map as it is);
 * else (what is left) loading the map and connecting as need be, within
 * one rwlock.connect_timeout before the answers' time starts. The
 * redirections' time (rw_cluster_redirected) counts from the answers'.
 */
static void
cluster_renew_stage(ClusterRenewal *r, bool open_only)
{
	int64		cap;

	if (open_only)
		cluster_renew_send(r, true);
	else
	{
		cap = rw_conn_tighten(rw_now_ms() + rw_connect_timeout_ms);
		cluster_renew_send(r, false);
		rw_conn_restore(cap);
	}
	r->started = rw_now_ms();
	cap = rw_conn_tighten(r->started + rw_command_timeout_ms +
						  (rw_wait_replicas > 0 ? rw_wait_replicas_timeout_ms : 0));
	while (r->nflight > 0)
	{
		cluster_renew_collect(r);
		if (r->npending > 0)
			cluster_renew_send(r, open_only);
	}
	rw_conn_restore(cap);
}

/*
 * Renew n holds of one node, on behalf of owners[i] as of their requests
 * seqs[i] (NULL owners: this session's, as of its newest request),
 * as rw_proto_renew does: for a cluster, one pipelined batch per master
 * that serves some of them, all sent before any answer is waited for, and
 * those redirected sent again where they go now (see above). held[i] as
 * rw_proto_renew's (-1 also for a hold whose master could not be reached
 * or did not answer in time, or that stayed redirected: undecided). False,
 * with *err, if no master answered. An interrupt stops what is still to
 * send or read, but the batches answered before it keep their results:
 * true then if any was, with *err RW_ERR_INTERRUPTED, for the caller to
 * record them before it serves the interrupt (as rw_quorum_renew does).
 * Never throws (but on out of memory).
 */
bool
rw_cluster_renew(RwNode *node, RwKeys **keys, const char *const *owners,
				 const uint64 *seqs, const int *lease_ms, int n, int *held,
				 RwError *err)
{
	ClusterRenewal r;

	if (node->cluster == NULL)
		return rw_proto_renew(&node->cmd, keys, owners, seqs, lease_ms, n,
							  held, NULL, err);
	memset(&r, 0, sizeof(r));
	r.node = node;
	r.keys = keys;
	r.owners = owners;
	r.seqs = seqs;
	r.lease_ms = lease_ms;
	r.held = held;
	r.started = rw_now_ms();
	r.err = err;
	err->kind = RW_OK;
	err->maybe_sent = false;
	err->msg[0] = '\0';
	/* A hold is in at most one batch or pending at a time. */
	r.pending = palloc(sizeof(int) * n);
	r.flight = palloc(sizeof(ClusterBatch) * n);
	for (int i = 0; i < n; i++)
	{
		r.pending[i] = i;
		held[i] = -1;
	}
	r.npending = n;

	/* The masters connected to first: nothing waits for a connection. */
	cluster_renew_stage(&r, true);
	/* Then the rest: the map loaded, connections made. */
	if (r.npending > 0 && !r.interrupted)
		cluster_renew_stage(&r, false);
	if (!r.any_ok && err->kind == RW_OK)
		rw_error_set(err, RW_ERR_CONNECT, "no master of the cluster could be asked to renew the leases");
	pfree(r.pending);
	pfree(r.flight);
	/* An interrupt is the caller's to serve (renew.c raises it). */
	return r.any_ok;
}
