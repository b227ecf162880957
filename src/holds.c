/*-------------------------------------------------------------------------
 *
 * holds.c
 *	  The session's table of holds: one record per name held, its counts per
 *	  level and mode, what Redis has for the session, and what the keeper is
 *	  shown. Also the warnings that must wait for a safe moment.
 *
 * What Redis has for the session is the strongest mode held: write if any
 * write hold, else read if any read hold, else nothing. Only a change of
 * that goes to Redis, so a repeat acquisition costs no round trip.
 *
 * With the keeper (keeper.c) each hold in Redis is also published in the
 * shared table (holdtable.c) when it is taken, as its modes change, and taken out before
 * it is released in Redis. The keeper renews it and flags it lost;
 * rw_holds_refresh picks that up before each use of the hold.
 *
 * Warnings: an ereport of any level may throw (errfinish serves pending
 * interrupts), so nothing may be reported between a Redis answer and the
 * bookkeeping that records it. Code there notes what to say (rw_note_*),
 * and the notes are emitted by rw_notes_flush once the records are right.
 *
 *-------------------------------------------------------------------------
 */
#include "rwlock.h"

#include "utils/hsearch.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

static HTAB *holds_table = NULL;

/* A warning waiting for a safe moment. */
typedef struct RwNote
{
	int			sqlstate;
	char	   *msg;
	char	   *detail;
	struct RwNote *next;
} RwNote;

static RwNote *notes_head = NULL;
static RwNote *notes_tail = NULL;

static void
holds_ensure_table(void)
{
	HASHCTL		ctl;

	if (holds_table != NULL)
		return;
	ctl.keysize = RW_NAME_MAX + 1;
	ctl.entrysize = sizeof(RwHeld);
	ctl.hcxt = TopMemoryContext;
	holds_table = hash_create("rwlock held locks", 64, &ctl,
							  HASH_ELEM | HASH_STRINGS | HASH_CONTEXT);
}

RwHeld *
rw_holds_find(const char *name)
{
	holds_ensure_table();
	return hash_search(holds_table, name, HASH_FIND, NULL);
}

/*
 * A record for a name about to be taken in Redis, made before the request
 * goes out so that nothing needs allocating once Redis has granted it: the
 * keys (and, by rw_holds_reserve, room for the hold).
 */
RwHeld *
rw_holds_enter(const char *name, RwNode *node)
{
	RwHeld	   *h;
	bool		found;

	holds_ensure_table();
	h = hash_search(holds_table, name, HASH_ENTER, &found);
	if (!found)
	{
		memset(h->count, 0, sizeof(h->count));
		h->stack = NULL;
		h->stack_len = h->stack_cap = 0;
		h->end_gen = 0;
		h->redis_mode = RW_NONE;
		h->token = 0;
		h->lost = false;
		h->slot = -1;
		h->node = node;
		h->cxt = NULL;
		PG_TRY();
		{
			h->cxt = AllocSetContextCreate(TopMemoryContext, "rwlock hold",
										   ALLOCSET_SMALL_SIZES);
			rw_build_keys(rw_key_prefix, name, &h->keys, h->cxt);
		}
		PG_CATCH();
		{
			if (h->cxt)
				MemoryContextDelete(h->cxt);
			hash_search(holds_table, name, HASH_REMOVE, NULL);
			PG_RE_THROW();
		}
		PG_END_TRY();
		node->nholds++;
	}
	return h;
}

/*
 * Room for one more stacked session-level hold of h, made before any lock
 * call that may count one, whether or not it goes to Redis.
 */
void
rw_holds_reserve(RwHeld *h)
{
	int			cap = Max(8, h->stack_cap * 2);

	if (h->stack_len < h->stack_cap)
		return;
	/* the capacity grows only once the allocation has succeeded */
	h->stack = h->stack ? repalloc(h->stack, cap * sizeof(RwMode)) :
		MemoryContextAlloc(h->cxt, cap * sizeof(RwMode));
	h->stack_cap = cap;
}

/* Drop a record: no holds left, nothing in Redis (or released already). */
void
rw_holds_forget(RwHeld *h)
{
	RwNode	   *node = h->node;

	rw_holds_unpublish(h);
	if (h->cxt != NULL)
		MemoryContextDelete(h->cxt);
	hash_search(holds_table, h->name, HASH_REMOVE, NULL);
	node->nholds--;
	rw_node_forget_if_unused(node);
}

/* After an error: drop records made for acquisitions that never happened. */
void
rw_holds_sweep(void)
{
	RwHeld	  **list;
	int			n;

	if (holds_table == NULL)
		return;
	list = rw_holds_list(&n);
	for (int i = 0; i < n; i++)
		if (list[i]->redis_mode == RW_NONE && rw_wanted_mode(list[i]) == RW_NONE)
			rw_holds_forget(list[i]);
	pfree(list);
}

int
rw_holds_count(void)
{
	return holds_table ? hash_get_num_entries(holds_table) : 0;
}

/* Every record, in an array the caller frees: safe to change the table. */
RwHeld **
rw_holds_list(int *n)
{
	HASH_SEQ_STATUS seq;
	RwHeld	   *h;
	RwHeld	  **list;

	holds_ensure_table();
	list = palloc(sizeof(RwHeld *) * (hash_get_num_entries(holds_table) + 1));
	*n = 0;
	hash_seq_init(&seq, holds_table);
	while ((h = hash_seq_search(&seq)) != NULL)
		list[(*n)++] = h;
	return list;
}

RwMode
rw_level_mode(RwHeld *h, RwLevel level)
{
	return h->count[level][RW_WRITE] > 0 ? RW_WRITE :
		h->count[level][RW_READ] > 0 ? RW_READ : RW_NONE;
}

/* What Redis should have for the session: the strongest mode held. */
RwMode
rw_wanted_mode(RwHeld *h)
{
	return Max(rw_level_mode(h, RW_SESSION), rw_level_mode(h, RW_XACT));
}

/* ---- the keeper's view of this session's holds (holdtable.c) ---- */

/*
 * Record a grant by Redis: the mode Redis now has, the token, a lease that
 * started at `since` (when the try that got it was sent),
 * and the keeper's copy. Allocates nothing and never throws. Returns false
 * if the keeper's table is full (the hold is not published): the caller
 * then gives the grant back and fails, once the records are right, for a
 * hold nobody renews or shows must not be left to its lease.
 * (The caller schedules the lease's renewal.)
 */
bool
rw_holds_granted(RwHeld *h, RwMode mode, int64 token, int64 since)
{
	bool		full = false;

	if (h->redis_mode == RW_NONE)
		h->acquired = GetCurrentTimestamp();
	h->redis_mode = mode;
	h->token = token;
	h->renewed_ms = since;		/* the lease runs from no later than then */
	h->lease_ms = rw_quorum_lease(h->node);
	h->lost = false;
	h->slot = rw_holdtable_publish(h->slot, h->name, h->node->ep.url,
								h->keys.key[0], rw_owner_id(), h->token,
								h->acquired, h->renewed_ms, h->lease_ms, &full);
	return !full;
}

void
rw_holds_publish_modes(RwHeld *h)
{
	if (h->slot >= 0)
		rw_holdtable_set_modes(h->slot, rw_level_mode(h, RW_SESSION),
							rw_level_mode(h, RW_XACT));
}

/* Before a hold is released in Redis: the keeper must not renew it after. */
void
rw_holds_unpublish(RwHeld *h)
{
	if (h->slot >= 0)
		rw_holdtable_unpublish(h->slot);
	h->slot = -1;
}

/* At exit, before the hold is released in Redis: not renewed, but kept. */
void
rw_holds_exiting(RwHeld *h)
{
	rw_holdtable_exiting(h->slot);
}

/*
 * At exit, after the releases were sent: a hold whose release went out
 * leaves the keeper's table; one whose release did not get through is left
 * to the keeper to release.
 */
void
rw_holds_exited(RwHeld *h)
{
	if (h->slot >= 0 && !rw_release_went_out(h->node, h->name))
	{
		rw_holdtable_orphan(h->slot);
		h->slot = -1;
	}
	else
		rw_holds_unpublish(h);
}

/*
 * Record that a hold was lost (its lease ran out, Redis lost it), counting
 * it once. Never throws: called between Redis's answers and their records.
 */
void
rw_holds_mark_lost(RwHeld *h)
{
	if (!h->lost)
		rw_stat_add(RW_STAT_HOLDS_LOST, 1);
	h->lost = true;
}

/* What the keeper learnt: renewals, and whether the hold was lost. */
void
rw_holds_refresh(RwHeld *h)
{
	if (h->slot >= 0 && rw_holdtable_state(h->slot, &h->renewed_ms))
		rw_holds_mark_lost(h);
	/* Unrenewed past its lease (its server unreachable): Redis dropped it. */
	if (h->redis_mode != RW_NONE && !h->lost &&
		rw_now_ms() >= h->renewed_ms + h->lease_ms)
		rw_holds_mark_lost(h);
}

/* Rows of redis_held_locks: one per (name, level, mode) with holds. */
int
rw_held_rows(RwHeldRow **rows)
{
	RwHeld	  **list;
	int			n,
				nrows = 0;

	list = rw_holds_list(&n);
	*rows = palloc(sizeof(RwHeldRow) * 4 * (n + 1));
	for (int i = 0; i < n; i++)
	{
		RwHeld	   *h = list[i];

		rw_holds_refresh(h);
		for (int level = RW_SESSION; level <= RW_XACT; level++)
			for (RwMode m = RW_WRITE; m >= RW_READ; m--)
			{
				RwHeldRow  *r;

				if (h->count[level][m] == 0)
					continue;
				r = &(*rows)[nrows++];
				r->name = pstrdup(h->name);
				r->mode = m;
				r->level = (RwLevel) level;
				r->depth = h->count[level][m];
				r->token = h->token;
				r->acquired = h->acquired;
				r->lost = h->lost;
			}
	}
	pfree(list);
	return nrows;
}

/* ---- warnings kept for a safe moment ---- */

/* Allocation may fail; then the note is lost, never the bookkeeping. */
static void
notes_add(int sqlstate, const char *msg, const char *detail)
{
	MemoryContext old = MemoryContextSwitchTo(TopMemoryContext);
	RwNote	   *note = palloc_extended(sizeof(RwNote), MCXT_ALLOC_NO_OOM);

	if (note != NULL)
	{
		note->sqlstate = sqlstate;
		note->msg = pstrdup(msg);
		note->detail = detail ? pstrdup(detail) : NULL;
		note->next = NULL;
		if (notes_tail)
			notes_tail->next = note;
		else
			notes_head = note;
		notes_tail = note;
	}
	MemoryContextSwitchTo(old);
}

void
rw_note_lost(const char *name, const char *detail)
{
	char		msg[RW_NAME_MAX + 64];

	snprintf(msg, sizeof(msg), "Redis lock \"%s\" was lost", name);
	notes_add(ERRCODE_WARNING, msg,
			  detail ? detail : "Its lease ran out or Redis lost its data while this session held it.");
}

void
rw_note_warning(int sqlstate, const char *msg, const char *detail)
{
	notes_add(sqlstate, msg, detail);
}

/* Emit the notes, oldest first. Call only where a throw harms nothing. */
void
rw_notes_flush(void)
{
	rw_logs_flush();
	while (notes_head != NULL)
	{
		RwNote	   *note = notes_head;

		notes_head = note->next;
		if (notes_head == NULL)
			notes_tail = NULL;
		ereport(WARNING,
				(errcode(note->sqlstate),
				 errmsg_internal("%s", note->msg),
				 note->detail ? errdetail_internal("%s", note->detail) : 0));
		pfree(note->msg);
		if (note->detail)
			pfree(note->detail);
		pfree(note);
	}
}
