/*-------------------------------------------------------------------------
 *
 * pg_stubs.c
 *	  Stand-ins for the few backend functions src/url.c and src/passfile.c
 *	  call, so that the fuzz harnesses run them without a server.
 *
 * Every palloc is a malloc of its own (AddressSanitizer then sees an
 * overflow of any of them), recorded so that fuzz_reset() frees them all
 * after each input, as the end of a query frees a memory context. The
 * parsers throw only on out of memory; an elog/ereport reaching here is a
 * finding, and aborts.
 *
 *-------------------------------------------------------------------------
 */
#include "rwlock.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "lib/stringinfo.h"
#include "miscadmin.h"
#include "utils/acl.h"
#include "utils/memutils.h"

#include "fuzz.h"

/* The printf family: c.h routes them to PostgreSQL's; libc's do here. */
#undef snprintf
#undef vsnprintf
#undef sprintf
#undef fprintf
#undef vfprintf
#undef printf
#undef strerror

/* guc.c's settings, read by rw_current_spec */
char	   *rw_redis_url = "redis://127.0.0.1:6379/0";
char	   *rw_password_file = NULL;
int			rw_tls_verify = RW_TLS_VERIFY_FULL;
char	   *rw_tls_ca_file = NULL;
char	   *rw_tls_cert_file = NULL;
char	   *rw_tls_key_file = NULL;

MemoryContext TopMemoryContext = NULL;
MemoryContext CurrentMemoryContext = NULL;

/* Before each allocation: the list fuzz_reset frees. */
typedef struct FuzzChunk
{
	struct FuzzChunk *prev;
	struct FuzzChunk *next;
	size_t		size;
	size_t		pad;			/* the user's bytes 16-byte aligned */
} FuzzChunk;

static FuzzChunk *chunks = NULL;

void
fuzz_reset(void)
{
	while (chunks != NULL)
	{
		FuzzChunk  *next = chunks->next;

		free(chunks);
		chunks = next;
	}
}

int
fuzz_live_chunks(void)
{
	int			n = 0;

	for (FuzzChunk *c = chunks; c != NULL; c = c->next)
		n++;
	return n;
}

void *
palloc(Size size)
{
	FuzzChunk  *c = malloc(sizeof(FuzzChunk) + size);

	if (c == NULL)
		abort();
	c->prev = NULL;
	c->next = chunks;
	c->size = size;
	if (chunks)
		chunks->prev = c;
	chunks = c;
	return c + 1;
}

void *
palloc0(Size size)
{
	return memset(palloc(size), 0, size);
}

void *
MemoryContextAlloc(MemoryContext context, Size size)
{
	return palloc(size);
}

/* Freed for real: a pointer used after pfree is ASan's to report. */
void
pfree(void *pointer)
{
	FuzzChunk  *c = (FuzzChunk *) pointer - 1;

	if (c->prev)
		c->prev->next = c->next;
	else
		chunks = c->next;
	if (c->next)
		c->next->prev = c->prev;
	free(c);
}

/* Always moves, as a grown chunk would. */
void *
repalloc(void *pointer, Size size)
{
	FuzzChunk  *old = (FuzzChunk *) pointer - 1;
	void	   *p = palloc(size);

	memcpy(p, pointer, Min(old->size, size));
	pfree(pointer);
	return p;
}

char *
pstrdup(const char *in)
{
	return strcpy(palloc(strlen(in) + 1), in);
}

char *
MemoryContextStrdup(MemoryContext context, const char *string)
{
	return pstrdup(string);
}

char *
pnstrdup(const char *in, Size len)
{
	char	   *out;

	len = strnlen(in, len);
	out = palloc(len + 1);
	memcpy(out, in, len);
	out[len] = '\0';
	return out;
}

char *
psprintf(const char *fmt,...)
{
	va_list		args;
	int			n;
	char	   *out;

	va_start(args, fmt);
	n = vsnprintf(NULL, 0, fmt, args);
	va_end(args);
	out = palloc(n + 1);
	va_start(args, fmt);
	vsnprintf(out, n + 1, fmt, args);
	va_end(args);
	return out;
}

int
pg_snprintf(char *str, size_t count, const char *fmt,...)
{
	va_list		args;
	int			n;

	va_start(args, fmt);
	n = vsnprintf(str, count, fmt, args);
	va_end(args);
	return n;
}

int
pg_fprintf(FILE *stream, const char *fmt,...)
{
	va_list		args;
	int			n;

	va_start(args, fmt);
	n = vfprintf(stream, fmt, args);
	va_end(args);
	return n;
}

char *
pg_strerror(int errnum)
{
	return strerror(errnum);
}

void
initStringInfo(StringInfo str)
{
	str->maxlen = 1024;
	str->data = palloc(str->maxlen);
	str->data[0] = '\0';
	str->len = 0;
	str->cursor = 0;
}

void
appendStringInfoString(StringInfo str, const char *s)
{
	int			n = strlen(s);

	if (str->len + n + 1 > str->maxlen)
	{
		int			cap = str->maxlen;

		while (str->len + n + 1 > cap)
			cap *= 2;
		str->data = repalloc(str->data, cap);
		str->maxlen = cap;
	}
	memcpy(str->data + str->len, s, n + 1);
	str->len += n;
}

void
appendStringInfo(StringInfo str, const char *fmt,...)
{
	va_list		args;
	int			n;
	char	   *s;

	va_start(args, fmt);
	n = vsnprintf(NULL, 0, fmt, args);
	va_end(args);
	s = malloc(n + 1);
	va_start(args, fmt);
	vsnprintf(s, n + 1, fmt, args);
	va_end(args);
	appendStringInfoString(str, s);
	free(s);
}

/* rw_may_see_url: as a role that may read settings */
bool
IsTransactionState(void)
{
	return true;
}

Oid
GetUserId(void)
{
	return 10;
}

bool
has_privs_of_role(Oid member, Oid role)
{
	return true;
}

/* Nothing the parsers do should throw: a throw is a finding. */
bool
errstart(int elevel, const char *domain)
{
	fprintf(stderr, "fuzz: the parser raised an error of level %d\n", elevel);
	abort();
}

bool
errstart_cold(int elevel, const char *domain)
{
	return errstart(elevel, domain);
}
