/*-------------------------------------------------------------------------
 *
 * route.c
 *	  Which Redis node serves a lock, and the set of nodes this session
 *	  knows.
 *
 * Today a lock is served by the one server rwlock.redis_url names when the
 * lock is first taken, reached with the connection settings in effect then
 * (the node's spec, url.c); the hold remembers its node, so a change of the
 * URL or of those settings never strands a hold made on the old server. A node is kept while it is
 * the current one, holds live on it, or releases are owed to it; then it is
 * closed and freed. A redis+sentinel:// node is the service, wherever its
 * master is (sentinel.c); a redis+cluster:// node is the whole cluster, and
 * each of its locks is served by the member that serves the lock's slot
 * (cluster.c, rw_cluster_cmd); a quorum's node (several URLs) is the
 * quorum, and each of its locks is held on a majority of its members
 * (quorum.c).
 *
 *-------------------------------------------------------------------------
 */
#include "rwlock.h"

#include "utils/memutils.h"

static RwNode *route_nodes = NULL;	/* every node this session knows */
static RwNode *route_current = NULL;	/* where new acquisitions go */

static uint64 route_gen = 0;	/* rw_conn_settings_gen route_current is for */

static RwNode *
route_node_create(const char *spec)
{
	MemoryContext old = MemoryContextSwitchTo(TopMemoryContext);
	RwNode	   *node = palloc0(sizeof(RwNode));
	char	   *why;

	/* The settings' check hooks accepted all of it already. */
	if (!rw_parse_url(spec, &node->ep, &why))
		elog(ERROR, "rwlock.redis_url became invalid: %s", why);
	rw_sentinel_attach(&node->ep);
	node->cmd.node = node;
	node->sub.node = node;
	node->sub.is_subscriber = true;
	rw_cluster_attach(node);
	rw_quorum_attach(node);
	node->next = route_nodes;
	route_nodes = node;
	MemoryContextSwitchTo(old);
	return node;
}

/*
 * The node that new acquisitions go to: the one rwlock.redis_url names,
 * with the connection settings in effect. Fails if a setting was refused
 * when the library loaded (guc.c): never a lock on another server.
 */
RwNode *
rw_current_node(void)
{
	char	   *spec;

	rw_check_settings();
	if (route_current != NULL && route_gen == rw_conn_settings_gen)
		return route_current;

	spec = rw_current_spec();
	route_current = NULL;
	for (RwNode *n = route_nodes; n != NULL; n = n->next)
		if (strcmp(n->ep.url, spec) == 0)
			route_current = n;
	if (route_current == NULL)
		route_current = route_node_create(spec);
	route_gen = rw_conn_settings_gen;
	pfree(spec);

	/* Old nodes stay only while holds or owed releases live on them. */
	for (RwNode *n = route_nodes, *next; n != NULL; n = next)
	{
		next = n->next;
		rw_node_forget_if_unused(n);
	}
	return route_current;
}

/* For walking every node (exit, renewal, connection info). */
RwNode *
rw_first_node(void)
{
	return route_nodes;
}

/* Close and free a node that is neither current nor needed by anything. */
void
rw_node_forget_if_unused(RwNode *node)
{
	RwNode	  **link;

	if (node == route_current || node->nholds > 0 || node->nowed > 0 ||
		node->pins > 0)
		return;
	rw_conn_close(&node->cmd);
	rw_conn_close(&node->sub);
	rw_cluster_detach(node);
	rw_quorum_detach(node);
	for (link = &route_nodes; *link != NULL; link = &(*link)->next)
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
