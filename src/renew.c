/*-------------------------------------------------------------------------
 *
 * renew.c
 *	  When and how a session renews the leases of its own holds.
 *
 * With the keeper running (keeper.c), it renews every hold it was shown,
 * and a session renews only those whose renewer has been silent for a
 * third of their lease (at most 10 s: a keeper stopped or stuck;
 * rw_holdtable_renews).
 * Without it, every rwlock call renews, in one pipelined batch per node,
 * the holds past a third of their lease; redis_renew() renews them all at
 * once. The schedule runs on the monotonic clock, so a step of the wall
 * clock never lets a lease lapse.
 *
 * A renewal that cannot reach a node never fails the call that made it (the
 * node may be a former server that is gone): it is tried again after a
 * pause, and a hold that stays unrenewed past its lease is reported lost.
 * An interrupt is served, after the answers that came before it (a
 * cluster's masters, a quorum's members) are recorded.
 *
 *-------------------------------------------------------------------------
 */
#include "rwlock.h"

#include "miscadmin.h"

#define RENEW_RETRY_MIN_MS	100
#define RENEW_RETRY_MAX_MS	1000

static int64 renew_next_ms = PG_INT64_MAX;	/* earliest renewal due */

/* A lease (re)started at renewed_ms: renew it a third of the way in. */
void
rw_renew_scheduled(int64 renewed_ms, int lease_ms)
{
	renew_next_ms = Min(renew_next_ms, renewed_ms + lease_ms / 3);
}

/* The pause before a failed renewal is tried again. */
static int64
renew_retry_pause(void)
{
	return Min(Max(rw_lease_ms / 6, RENEW_RETRY_MIN_MS), RENEW_RETRY_MAX_MS);
}

/*
 * Renew n due holds on one node, each judged on its own; returns how many
 * were renewed. A hold whose renewal failed (an error reply such as BUSY,
 * LOADING or OOM, or a quorum that could not decide it) is tried again
 * after a pause; one that stays unrenewed past its lease is found lost by
 * rw_holds_refresh and reported at the next operation on it.
 */
static int
renew_batch(RwNode *node, RwHeld **due, int n, bool all, int *nlost)
{
	RwKeys	  **keys = palloc(sizeof(RwKeys *) * n);
	int		   *lease = palloc(sizeof(int) * n);
	int		   *held = palloc(sizeof(int) * n);
	int64		sent = rw_now_ms();
	int			nrenewed = 0;
	bool		again = false;
	RwError		err = {RW_OK};

	for (int i = 0; i < n; i++)
	{
		keys[i] = &due[i]->keys;
		lease[i] = due[i]->lease_ms;
	}
	if (!rw_quorum_renew(node, keys, NULL, NULL, lease, n, held, &err))
	{
		node->renew_retry_ms = rw_now_ms() + renew_retry_pause();
		rw_renew_scheduled(node->renew_retry_ms, 0);
		if (err.kind == RW_ERR_INTERRUPTED)
			rw_raise(&node->cmd, &err);
		if (all)
		{
			char	   *msg = psprintf("could not renew leases on %s",
										   rw_endpoint_where(&node->ep));

			rw_note_warning(ERRCODE_CONNECTION_FAILURE, msg, err.msg);
		}
		return 0;
	}
	for (int i = 0; i < n; i++)
	{
		RwHeld	   *h = due[i];

		if (held[i] == 1)
		{
			/* The lease runs from no earlier than when the request went. */
			h->renewed_ms = sent;
			rw_holdtable_renewed(h->slot, sent, false);
			rw_renew_scheduled(sent, h->lease_ms);
			rw_stat_add(RW_STAT_RENEWALS, 1);
			nrenewed++;
		}
		else if (held[i] == 0)
		{
			rw_holds_mark_lost(h);
			rw_holdtable_renewed(h->slot, sent, true);
			if (all)
				rw_note_lost(h->name, NULL);
			if (nlost)
				(*nlost)++;
		}
		else
		{
			again = true;
			if (all)
			{
				char		msg[RW_NAME_MAX + 64];

				snprintf(msg, sizeof(msg),
						 "could not renew the lease of Redis lock \"%s\"", h->name);
				rw_note_warning(ERRCODE_CONNECTION_FAILURE, msg,
								"Redis answered the renewal with an error (see the server log), or too few nodes of the quorum could decide it. It is tried again.");
			}
		}
	}
	if (again)
		rw_renew_scheduled(rw_now_ms() + renew_retry_pause(), 0);
	/* Cut short after some answers (a cluster's, a quorum's): recorded. */
	if (err.kind == RW_ERR_INTERRUPTED)
	{
		node->renew_retry_ms = rw_now_ms() + renew_retry_pause();
		rw_renew_scheduled(node->renew_retry_ms, 0);
		rw_raise(&node->cmd, &err);
	}
	return nrenewed;
}

/*
 * Renew the leases of holds past a third of their lease (all of them with
 * all), one pipelined batch per node. Returns the holds renewed; *nlost (if
 * not NULL) gets those found lost. With all, each lost hold and each node
 * that could not be reached is noted for a warning. Throws only to serve an
 * interrupt.
 */
int
rw_renew_due(bool all, int *nlost)
{
	int64		now = rw_now_ms();
	int			nrenewed = 0;
	RwHeld	  **list;
	RwHeld	  **due;
	int			nlist;

	if (nlost)
		*nlost = 0;
	if (rw_holds_count() == 0 || (!all && now < renew_next_ms))
		return 0;
	renew_next_ms = PG_INT64_MAX;
	list = rw_holds_list(&nlist);
	due = palloc(sizeof(RwHeld *) * (nlist + 1));
	for (RwNode *node = rw_first_node(); node != NULL; node = node->next)
	{
		int			n = 0;

		for (int i = 0; i < nlist; i++)
		{
			RwHeld	   *h = list[i];

			if (h->node != node || h->redis_mode == RW_NONE)
				continue;
			rw_holds_refresh(h);
			if (h->lost)
			{
				if (all)
					rw_note_lost(h->name, NULL);
				if (nlost)
					(*nlost)++;
				continue;
			}
			if (!all && (rw_holdtable_renews(h->slot, h->lease_ms) ||
						 now < h->renewed_ms + h->lease_ms / 3 ||
						 now < node->renew_retry_ms))
			{
				/* Should the keeper stop, this session takes over from here. */
				rw_renew_scheduled(Max(h->renewed_ms, node->renew_retry_ms - h->lease_ms / 3),
								   h->lease_ms);
				continue;
			}
			due[n++] = h;
		}
		if (n > 0)
			nrenewed += renew_batch(node, due, n, all, nlost);
	}
	pfree(due);
	pfree(list);
	return nrenewed;
}
