/*-------------------------------------------------------------------------
 *
 * route.c
 *	  Which Redis node serves a lock, and the set of nodes this session
 *	  knows.
 *
 * Today a lock is served by the one server rwlock.redis_url names when the
 * lock is first taken; the hold remembers its node, so a change of the URL
 * never strands a hold made on the old server. A node is kept while it is
 * the current one, holds live on it, or releases are owed to it; then it is
 * closed and freed. Sentinel, Cluster and quorum routing will choose nodes
 * here.
 *
 *-------------------------------------------------------------------------
 */
#include "rwlock.h"

#include "utils/memutils.h"

static RwNode *route_nodes = NULL;	/* every node this session knows */
static RwNode *route_current = NULL;	/* where new acquisitions go */

static RwNode *
route_node_create(const char *url)
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
	node->next = route_nodes;
	route_nodes = node;
	MemoryContextSwitchTo(old);
	return node;
}

/* The node that new acquisitions go to: the one rwlock.redis_url names. */
RwNode *
rw_current_node(void)
{
	if (route_current != NULL && strcmp(route_current->ep.url, rw_redis_url) == 0)
		return route_current;

	route_current = NULL;
	for (RwNode *n = route_nodes; n != NULL; n = n->next)
		if (strcmp(n->ep.url, rw_redis_url) == 0)
			route_current = n;
	if (route_current == NULL)
		route_current = route_node_create(rw_redis_url);

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

	if (node == route_current || node->nholds > 0 || node->nowed > 0)
		return;
	rw_conn_close(&node->cmd);
	rw_conn_close(&node->sub);
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
