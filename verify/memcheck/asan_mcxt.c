/*-------------------------------------------------------------------------
 *
 * asan_mcxt.c
 *	  For the AddressSanitizer build of rwlock (verify/memcheck.sh): every
 *	  allocation rwlock makes through palloc and friends becomes a malloc of
 *	  its own, so that ASan puts redzones around it and quarantines it when
 *	  freed, while it keeps the lifetime of the memory context it was asked
 *	  of.
 *
 * PostgreSQL's allocator carves chunks out of large malloc'd blocks: an
 * overflow of a palloc'd array lands in the next chunk of the same block,
 * where neither ASan nor Valgrind sees it (Debian's server is not built
 * with USE_VALGRIND, which would mark the chunks). Linked with
 * -Wl,--wrap=palloc,... the calls rwlock.so makes go here instead:
 *
 *	- each allocation is malloc'd alone, with a header whose last word is
 *	  the chunk's "context", as PostgreSQL requires of every chunk: so
 *	  pfree, repalloc and GetMemoryChunkSpace, wherever they are called
 *	  from (rwlock or the server), dispatch to the methods below;
 *	- the chunks of one real context hang off a tracker, freed by a reset
 *	  callback registered on that context: a reset or delete of the context
 *	  frees them as it would have freed palloc'd chunks, and a pointer kept
 *	  past that is a heap-use-after-free for ASan.
 *
 * Memory the server allocates for rwlock (psprintf, StringInfo, hash
 * tables) stays the server's: not checked, as the server itself is not.
 * Only the ASan build links this file; the production build never does.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <stdlib.h>

#include "nodes/memnodes.h"
#include "utils/memutils.h"

/* The chunks rwlock allocated in one real context. */
typedef struct McxtTracker
{
	MemoryContextData fake;		/* what the chunks name as their context */
	MemoryContext real;
	MemoryContextCallback cb;	/* on real: frees every chunk below */
	struct McxtChunk *chunks;
} McxtTracker;

/* Before each chunk; `context` is the word right before the user's bytes. */
typedef struct McxtChunk
{
	struct McxtChunk *prev;
	struct McxtChunk *next;
	McxtTracker *t;
	Size		size;
	void	   *pad;			/* keeps the user's bytes 16-byte aligned */
	MemoryContext context;
} McxtChunk;

#define CHUNK_OF(p) ((McxtChunk *) ((char *) (p) - sizeof(McxtChunk)))
#define DATA_OF(c) ((void *) ((char *) (c) + sizeof(McxtChunk)))

extern void *__real_MemoryContextAlloc(MemoryContext context, Size size);
extern void *__real_MemoryContextAllocExtended(MemoryContext context,
											   Size size, int flags);

static void *mcxt_fake_alloc(MemoryContext context, Size size);
static void mcxt_fake_free(MemoryContext context, void *pointer);
static void *mcxt_fake_realloc(MemoryContext context, void *pointer, Size size);
static void mcxt_fake_reset(MemoryContext context);
static Size mcxt_fake_space(MemoryContext context, void *pointer);
static bool mcxt_fake_is_empty(MemoryContext context);
static void mcxt_fake_stats(MemoryContext context,
							MemoryStatsPrintFunc printfunc, void *passthru,
							MemoryContextCounters *totals,
							bool print_to_stderr);

static const MemoryContextMethods mcxt_fake_methods = {
	mcxt_fake_alloc,
	mcxt_fake_free,
	mcxt_fake_realloc,
	mcxt_fake_reset,
	mcxt_fake_reset,
	mcxt_fake_space,
	mcxt_fake_is_empty,
	mcxt_fake_stats
};

/* The real context is reset or deleted: its chunks go with it. */
static void
mcxt_tracker_release(void *arg)
{
	McxtTracker *t = arg;
	McxtChunk  *c = t->chunks;

	while (c != NULL)
	{
		McxtChunk  *next = c->next;

		free(c);
		c = next;
	}
	free(t);
}

/* The tracker of a real context, made (and its callback set) if needed. */
static McxtTracker *
mcxt_tracker(MemoryContext real)
{
	McxtTracker *t;

	for (MemoryContextCallback *cb = real->reset_cbs; cb != NULL; cb = cb->next)
		if (cb->func == mcxt_tracker_release)
			return cb->arg;
	t = calloc(1, sizeof(McxtTracker));
	if (t == NULL)
		return NULL;
	t->fake.type = T_AllocSetContext;
	t->fake.methods = &mcxt_fake_methods;
	t->fake.name = "rwlock asan chunks";
	t->real = real;
	t->cb.func = mcxt_tracker_release;
	t->cb.arg = t;

	/*
	 * Last in the list, so run last: the context's other callbacks (run
	 * newest first) may still read its chunks, as they may in a server whose
	 * contexts free their memory after every callback. Linked by hand, as
	 * MemoryContextRegisterResetCallback would link it first; and the
	 * context is marked as not reset, as that function does, so that its
	 * next reset calls back.
	 */
	{
		MemoryContextCallback **tail = &real->reset_cbs;

		while (*tail != NULL)
			tail = &(*tail)->next;
		t->cb.next = NULL;
		*tail = &t->cb;
		real->isReset = false;
	}
	return t;
}

static void *
mcxt_alloc(MemoryContext real, Size size, int flags)
{
	McxtTracker *t;
	McxtChunk  *c;

	if (!((flags & MCXT_ALLOC_HUGE) ? AllocHugeSizeIsValid(size) :
		  AllocSizeIsValid(size)))
		return __real_MemoryContextAllocExtended(real, size, flags);	/* throws */
	t = mcxt_tracker(real);
	c = t ? malloc(sizeof(McxtChunk) + size) : NULL;
	if (c == NULL)
	{
		if (flags & MCXT_ALLOC_NO_OOM)
			return NULL;
		ereport(ERROR,
				(errcode(ERRCODE_OUT_OF_MEMORY),
				 errmsg("out of memory"),
				 errdetail("Failed on request of size %zu in memory context \"%s\".",
						   size, real->name)));
	}
	c->t = t;
	c->size = size;
	c->context = &t->fake;
	c->prev = NULL;
	c->next = t->chunks;
	if (t->chunks)
		t->chunks->prev = c;
	t->chunks = c;
	if (flags & MCXT_ALLOC_ZERO)
		memset(DATA_OF(c), 0, size);
	return DATA_OF(c);
}

static void
mcxt_unlink(McxtChunk *c)
{
	if (c->prev)
		c->prev->next = c->next;
	else
		c->t->chunks = c->next;
	if (c->next)
		c->next->prev = c->prev;
}

static void *
mcxt_fake_alloc(MemoryContext context, Size size)
{
	return mcxt_alloc(((McxtTracker *) context)->real, size, 0);
}

static void
mcxt_fake_free(MemoryContext context, void *pointer)
{
	McxtChunk  *c = CHUNK_OF(pointer);

	mcxt_unlink(c);
	free(c);
}

/* Always moves: a pointer kept to the old chunk is a use after free. */
static void *
mcxt_fake_realloc(MemoryContext context, void *pointer, Size size)
{
	McxtChunk  *old = CHUNK_OF(pointer);
	void	   *p = mcxt_alloc(old->t->real, size, MCXT_ALLOC_NO_OOM);

	if (p == NULL)
		return NULL;
	memcpy(p, pointer, Min(size, old->size));
	mcxt_unlink(old);
	free(old);
	return p;
}

static void
mcxt_fake_reset(MemoryContext context)
{
	elog(PANIC, "rwlock asan: a chunk's stand-in context was reset");
}

static Size
mcxt_fake_space(MemoryContext context, void *pointer)
{
	return CHUNK_OF(pointer)->size + sizeof(McxtChunk);
}

static bool
mcxt_fake_is_empty(MemoryContext context)
{
	return false;
}

static void
mcxt_fake_stats(MemoryContext context, MemoryStatsPrintFunc printfunc,
				void *passthru, MemoryContextCounters *totals,
				bool print_to_stderr)
{
}

/* The entry points rwlock.so calls, through -Wl,--wrap=NAME. */
extern void *__wrap_palloc(Size size);
extern void *__wrap_palloc0(Size size);
extern void *__wrap_palloc_extended(Size size, int flags);
extern void *__wrap_MemoryContextAlloc(MemoryContext context, Size size);
extern void *__wrap_MemoryContextAllocZero(MemoryContext context, Size size);
extern void *__wrap_MemoryContextAllocZeroAligned(MemoryContext context, Size size);
extern void *__wrap_MemoryContextAllocExtended(MemoryContext context, Size size,
											   int flags);
extern char *__wrap_MemoryContextStrdup(MemoryContext context, const char *string);
extern char *__wrap_pstrdup(const char *in);
extern char *__wrap_pnstrdup(const char *in, Size len);

void *
__wrap_palloc(Size size)
{
	return mcxt_alloc(CurrentMemoryContext, size, 0);
}

void *
__wrap_palloc0(Size size)
{
	return mcxt_alloc(CurrentMemoryContext, size, MCXT_ALLOC_ZERO);
}

void *
__wrap_palloc_extended(Size size, int flags)
{
	return mcxt_alloc(CurrentMemoryContext, size, flags);
}

void *
__wrap_MemoryContextAlloc(MemoryContext context, Size size)
{
	return mcxt_alloc(context, size, 0);
}

void *
__wrap_MemoryContextAllocZero(MemoryContext context, Size size)
{
	return mcxt_alloc(context, size, MCXT_ALLOC_ZERO);
}

void *
__wrap_MemoryContextAllocZeroAligned(MemoryContext context, Size size)
{
	return mcxt_alloc(context, size, MCXT_ALLOC_ZERO);
}

void *
__wrap_MemoryContextAllocExtended(MemoryContext context, Size size, int flags)
{
	return mcxt_alloc(context, size, flags);
}

char *
__wrap_MemoryContextStrdup(MemoryContext context, const char *string)
{
	Size		len = strlen(string) + 1;
	char	   *p = mcxt_alloc(context, len, 0);

	memcpy(p, string, len);
	return p;
}

char *
__wrap_pstrdup(const char *in)
{
	return __wrap_MemoryContextStrdup(CurrentMemoryContext, in);
}

char *
__wrap_pnstrdup(const char *in, Size len)
{
	char	   *p;

	len = strnlen(in, len);
	p = mcxt_alloc(CurrentMemoryContext, len + 1, 0);
	memcpy(p, in, len);
	p[len] = '\0';
	return p;
}
