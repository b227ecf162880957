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
char	   *rw_password_file = NULL;
int			rw_tls_verify = RW_TLS_VERIFY_FULL;
char	   *rw_tls_ca_file = NULL;
char	   *rw_tls_cert_file = NULL;
char	   *rw_tls_key_file = NULL;

/* Bumped when a setting that changes how to connect is assigned. */
uint64		rw_conn_settings_gen = 1;

static const struct config_enum_entry tls_verify_options[] = {
	{"full", RW_TLS_VERIFY_FULL, false},
	{"ca", RW_TLS_VERIFY_CA, false},
	{"none", RW_TLS_VERIFY_NONE, false},
	{NULL, 0, false}
};

const char *
rw_tls_verify_name(RwTlsVerify v)
{
	return v == RW_TLS_VERIFY_CA ? "ca" : v == RW_TLS_VERIFY_NONE ? "none" : "full";
}

static bool
check_redis_url(char **newval, void **extra, GucSource source)
{
	char	   *why;

	if (*newval == NULL || strlen(*newval) > RW_URL_MAX)
	{
		GUC_check_errdetail("The URL must be at most %d bytes.", RW_URL_MAX);
		return false;
	}
	if (!rw_check_url(*newval, &why))
	{
		GUC_check_errdetail("%s", why);
		GUC_check_errhint("Use redis://[user[:password]@]host[:port][/db], rediss://... for TLS, or unix:///path/to.sock[?db=N].");
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

/* A file setting: empty (none), or a path of at most RW_PATH_MAX bytes. */
static bool
check_path(char **newval, void **extra, GucSource source)
{
	if (*newval == NULL)
		return true;
	if (strlen(*newval) > RW_PATH_MAX)
	{
		GUC_check_errdetail("The path must be at most %d bytes.", RW_PATH_MAX);
		return false;
	}
	for (const unsigned char *p = (const unsigned char *) *newval; *p; p++)
	{
		if (*p < 0x20 || *p == 0x7f)
		{
			GUC_check_errdetail("The path must not contain control characters.");
			return false;
		}
	}
	return true;
}

/* Any setting that changes how to connect: the next lock names its node anew. */
static void
assign_conn_string(const char *newval, void *extra)
{
	rw_conn_settings_gen++;
}

static void
assign_conn_enum(int newval, void *extra)
{
	rw_conn_settings_gen++;
}

void
rw_define_gucs(void)
{
	DefineCustomStringVariable("rwlock.redis_url",
							   "Redis server that holds the locks.",
							   "redis://[user[:password]@]host[:port][/db], rediss://... (TLS) or unix:///path[?db=N]. "
							   "Takes effect at the next connection; holds stay on the server that granted them.",
							   &rw_redis_url,
							   "redis://127.0.0.1:6379/0",
							   PGC_SUSET,
							   GUC_SUPERUSER_ONLY,
							   check_redis_url, assign_conn_string, NULL);

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
							"Includes the TLS handshake and AUTH.",
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

	DefineCustomStringVariable("rwlock.password_file",
							   "File with the Redis password (and user), readable only by the server's OS user.",
							   "Lines of host:port:user:password, as in libpq's .pgpass. "
							   "Used when rwlock.redis_url gives no password. Empty: none.",
							   &rw_password_file,
							   "",
							   PGC_SUSET,
							   0,
							   check_path, assign_conn_string, NULL);

	DefineCustomEnumVariable("rwlock.tls_verify",
							 "What a rediss:// connection verifies of the server's certificate.",
							 "full: that a trusted CA signed it and that it names the URL's host; "
							 "ca: only that a trusted CA signed it; none: nothing.",
							 &rw_tls_verify,
							 RW_TLS_VERIFY_FULL,
							 tls_verify_options,
							 PGC_SUSET,
							 0,
							 NULL, assign_conn_enum, NULL);

	DefineCustomStringVariable("rwlock.tls_ca_file",
							   "CA certificates (PEM) that a rediss:// server's certificate must chain to.",
							   "Empty: the system's CA store.",
							   &rw_tls_ca_file,
							   "",
							   PGC_SUSET,
							   0,
							   check_path, assign_conn_string, NULL);

	DefineCustomStringVariable("rwlock.tls_cert_file",
							   "Client certificate (PEM) a rediss:// connection presents.",
							   "Empty: none.",
							   &rw_tls_cert_file,
							   "",
							   PGC_SUSET,
							   0,
							   check_path, assign_conn_string, NULL);

	DefineCustomStringVariable("rwlock.tls_key_file",
							   "Private key (PEM, unencrypted) of rwlock.tls_cert_file.",
							   "Empty: the key is in rwlock.tls_cert_file.",
							   &rw_tls_key_file,
							   "",
							   PGC_SUSET,
							   0,
							   check_path, assign_conn_string, NULL);

	MarkGUCPrefixReserved("rwlock");
}
