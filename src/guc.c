/*-------------------------------------------------------------------------
 *
 * guc.c
 *	  The rwlock.* settings: definitions, bounds and validation.
 *
 * Every setting is checked when it is set, so that a wrong value fails at
 * SET (or at reload) with an error naming the setting, never later at the
 * first lock call.
 *
 *-------------------------------------------------------------------------
 */
#include "rwlock.h"

#include "utils/guc.h"

char	   *rw_redis_url = NULL;
char	   *rw_key_prefix = NULL;
int			rw_lease_ms = 30000;
int			rw_connect_timeout_ms = 5000;
int			rw_command_timeout_ms = 2000;

static bool
check_redis_url(char **newval, void **extra, GucSource source)
{
	RwEndpoint	ep;
	char	   *why;

	if (*newval == NULL || strlen(*newval) > RW_URL_MAX)
	{
		GUC_check_errdetail("The URL must be at most %d bytes.", RW_URL_MAX);
		return false;
	}
	if (!rw_parse_url(*newval, &ep, &why))
	{
		GUC_check_errdetail("%s", why);
		GUC_check_errhint("Use redis://[user[:password]@]host[:port][/db] or unix:///path/to.sock[?db=N].");
		return false;
	}
	return true;
}

static bool
check_key_prefix(char **newval, void **extra, GucSource source)
{
	const unsigned char *p;

	if (*newval == NULL || **newval == '\0' || strlen(*newval) > RW_PREFIX_MAX)
	{
		GUC_check_errdetail("The prefix must be 1 to %d bytes long.", RW_PREFIX_MAX);
		return false;
	}
	for (p = (const unsigned char *) *newval; *p; p++)
	{
		/* Braces would change which cluster hash slot a lock's keys share. */
		if (*p == '{' || *p == '}' || *p < 0x20 || *p == 0x7f)
		{
			GUC_check_errdetail("The prefix must not contain braces or control characters.");
			return false;
		}
	}
	return true;
}

void
rw_define_gucs(void)
{
	DefineCustomStringVariable("rwlock.redis_url",
							   "Redis server that holds the locks.",
							   "redis://[user[:password]@]host[:port][/db] or unix:///path[?db=N]. "
							   "Takes effect at the next connection; holds stay on the server that granted them.",
							   &rw_redis_url,
							   "redis://127.0.0.1:6379/0",
							   PGC_SUSET,
							   GUC_SUPERUSER_ONLY,
							   check_redis_url, NULL, NULL);

	DefineCustomStringVariable("rwlock.key_prefix",
							   "Prefix of every Redis key rwlock uses.",
							   NULL,
							   &rw_key_prefix,
							   "rwlock",
							   PGC_SUSET,
							   0,
							   check_key_prefix, NULL, NULL);

	DefineCustomIntVariable("rwlock.lease",
							"Lease of a lock in Redis: how long it outlives a holder that stops renewing it.",
							NULL,
							&rw_lease_ms,
							30000, 500, 86400000,
							PGC_USERSET,
							GUC_UNIT_MS,
							NULL, NULL, NULL);

	DefineCustomIntVariable("rwlock.connect_timeout",
							"How long to wait for Redis to accept a connection.",
							NULL,
							&rw_connect_timeout_ms,
							5000, 10, 3600000,
							PGC_USERSET,
							GUC_UNIT_MS,
							NULL, NULL, NULL);

	DefineCustomIntVariable("rwlock.command_timeout",
							"How long to wait for Redis to answer one command.",
							NULL,
							&rw_command_timeout_ms,
							2000, 10, 3600000,
							PGC_USERSET,
							GUC_UNIT_MS,
							NULL, NULL, NULL);

	MarkGUCPrefixReserved("rwlock");
}
