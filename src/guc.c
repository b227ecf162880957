/*-------------------------------------------------------------------------
 *
 * guc.c
 *	  The rwlock.* settings: definitions, bounds and validation; settings
 *	  refused when the library loaded.
 *
 * Every setting is checked when it is set, so that a wrong value fails at
 * SET (or at reload) with an error naming the setting, never later at the
 * first lock call.
 *
 * Before the library is loaded, PostgreSQL keeps rwlock.* values as
 * placeholders and checks nothing: ALTER DATABASE ... SET
 * rwlock.redis_url = 'garbage' is accepted, and so is a PGOPTIONS value of
 * a role that may not set it. When the library loads and defines the
 * settings, such a value is refused with a WARNING and the built-in default
 * takes its place: a session would then take locks on another Redis server
 * (or under another prefix, lease, ...) than the one configured, and
 * exclude nobody. So the value of each placeholder is noted before the
 * setting is defined and compared with what took effect; a setting whose
 * value was refused makes every lock function fail (rw_check_settings)
 * for as long as it holds the value it fell back to.
 *
 *-------------------------------------------------------------------------
 */
#include "rwlock.h"

#include "miscadmin.h"
#include "utils/guc.h"
#include "utils/memutils.h"

char	   *rw_redis_url = NULL;
char	   *rw_key_prefix = NULL;
int			rw_lease_ms = 30000;
double		rw_quorum_drift = 0.01;
int			rw_quorum_max_lease_ms = 60000;
int			rw_connect_timeout_ms = 5000;
int			rw_command_timeout_ms = 2000;
char	   *rw_password_file = NULL;
int			rw_tls_verify = RW_TLS_VERIFY_FULL;
char	   *rw_tls_ca_file = NULL;
char	   *rw_tls_cert_file = NULL;
char	   *rw_tls_key_file = NULL;
int			rw_wait_replicas = 0;
int			rw_wait_replicas_timeout_ms = 100;

/* Bumped when a setting that changes how to connect is assigned. */
uint64		rw_conn_settings_gen = 1;

static const struct config_enum_entry tls_verify_options[] = {
	{"full", RW_TLS_VERIFY_FULL, false},
	{"ca", RW_TLS_VERIFY_CA, false},
	{"none", RW_TLS_VERIFY_NONE, false},
	{NULL, 0, false}
};

/*
 * A refused URL is never quoted: the server's own message would quote the
 * value, password and all, to the client and the log (SPEC 9).
 */
static bool
check_redis_url(char **newval, void **extra, GucSource source)
{
	char	   *why;

	if (*newval == NULL || strlen(*newval) > RW_URL_MAX)
	{
		GUC_check_errmsg("invalid value for parameter \"rwlock.redis_url\"");
		GUC_check_errdetail("The URL must be at most %d bytes.", RW_URL_MAX);
		return false;
	}
	if (!rw_check_url(*newval, &why))
	{
		GUC_check_errmsg("invalid value for parameter \"rwlock.redis_url\"");
		GUC_check_errdetail("%s", why);
		GUC_check_errhint("Use redis://[user[:password]@]host[:port][/db], rediss://... for TLS, unix:///path/to.sock[?db=N], redis+sentinel://host1:port1[,host2:port2...]/master-name[/db], redis+cluster://host1:port1[,host2:port2...]/, or 3, 5, ... URLs separated by spaces (quorum mode).");
		return false;
	}
	return true;
}

/* What is wrong with a key prefix, or NULL. */
static const char *
key_prefix_problem(const char *v)
{
	if (v == NULL || *v == '\0' || strlen(v) > RW_PREFIX_MAX)
		return "length";
	for (const unsigned char *p = (const unsigned char *) v; *p; p++)
	{
		/* Braces would change which cluster hash slot a lock's keys share. */
		if (*p == '{' || *p == '}' || *p < 0x20 || *p == 0x7f)
			return "characters";
	}
	return NULL;
}

static bool
check_key_prefix(char **newval, void **extra, GucSource source)
{
	const char *problem = key_prefix_problem(*newval);

	if (problem == NULL)
		return true;
	if (strcmp(problem, "length") == 0)
		GUC_check_errdetail("The prefix must be 1 to %d bytes long.", RW_PREFIX_MAX);
	else
		GUC_check_errdetail("The prefix must not contain braces or control characters.");
	return false;
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

/* ---------------------------------------------------------------------
 * Values refused when the library loaded
 * --------------------------------------------------------------------- */

typedef struct GucNote
{
	const char *name;
	bool		is_int;
	int		   *intvar;
	int			unit;
	char	   *before;			/* the placeholder's value, or NULL */
	char	   *fallback;		/* refused: the value it fell back to */
	bool		permission;		/* refused for lack of privilege */
} GucNote;

static GucNote guc_notes[] = {
	{"rwlock.redis_url"},
	{"rwlock.key_prefix"},
	{"rwlock.lease", true, &rw_lease_ms, GUC_UNIT_MS},
	{"rwlock.connect_timeout", true, &rw_connect_timeout_ms, GUC_UNIT_MS},
	{"rwlock.command_timeout", true, &rw_command_timeout_ms, GUC_UNIT_MS},
	{"rwlock.password_file"},
	{"rwlock.tls_verify"},
	{"rwlock.tls_ca_file"},
	{"rwlock.tls_cert_file"},
	{"rwlock.tls_key_file"},
	{"rwlock.wait_replicas", true, &rw_wait_replicas, 0},
	{"rwlock.wait_replicas_timeout", true, &rw_wait_replicas_timeout_ms, GUC_UNIT_MS},
};

static bool guc_any_refused = false;
static bool guc_loaded_at_start = false;	/* from shared_preload_libraries */

/* Before the settings are defined: what the placeholders hold. */
static void
guc_note_placeholders(void)
{
	for (int i = 0; i < lengthof(guc_notes); i++)
	{
		const char *v = GetConfigOption(guc_notes[i].name, true, false);

		guc_notes[i].before = v ? MemoryContextStrdup(TopMemoryContext, v) : NULL;
	}
}

/* Whether a placeholder's value is what took effect. */
static bool
guc_took_effect(GucNote *n)
{
	const char *now = GetConfigOption(n->name, false, false);

	if (n->is_int)
	{
		int			v;

		return parse_int(n->before, &v, n->unit, NULL) && v == *n->intvar;
	}
	if (strcmp(n->name, "rwlock.tls_verify") == 0)
		return pg_strcasecmp(n->before, now) == 0;
	return strcmp(n->before, now) == 0;
}

/* After: note each setting whose placeholder's value was refused. */
static void
guc_note_refusals(void)
{
	for (int i = 0; i < lengthof(guc_notes); i++)
	{
		GucNote    *n = &guc_notes[i];
		char	   *why;

		if (n->before == NULL || guc_took_effect(n))
			continue;
		n->fallback = MemoryContextStrdup(TopMemoryContext,
										  GetConfigOption(n->name, false, false));
		/* A valid value refused: the role that set it may not. */
		if (strcmp(n->name, "rwlock.redis_url") == 0)
			n->permission = rw_check_url(n->before, &why);
		else if (strcmp(n->name, "rwlock.key_prefix") == 0)
			n->permission = key_prefix_problem(n->before) == NULL;
		else
			n->permission = false;
		guc_any_refused = true;
	}
	guc_loaded_at_start = process_shared_preload_libraries_in_progress;
	for (int i = 0; i < lengthof(guc_notes); i++)
	{
		if (guc_notes[i].before)
			pfree(guc_notes[i].before);
		guc_notes[i].before = NULL;
	}
}

/*
 * Fail if a setting's configured value was refused when the library loaded
 * and the setting still holds the value it fell back to: locks taken now
 * would not be the configured ones. Called before every lock operation
 * goes to Redis (route.c).
 */
void
rw_check_settings(void)
{
	if (likely(!guc_any_refused))
		return;
	for (int i = 0; i < lengthof(guc_notes); i++)
	{
		GucNote    *n = &guc_notes[i];

		if (n->fallback == NULL ||
			strcmp(GetConfigOption(n->name, false, false), n->fallback) != 0)
			continue;
		ereport(ERROR,
				(errcode(n->permission ? ERRCODE_INSUFFICIENT_PRIVILEGE :
						 ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s was not applied in this session, so rwlock refuses to take locks", n->name),
				 n->permission ?
				 errdetail("It was set before the library was loaded by a role that may not set it (e.g. in PGOPTIONS), and was refused when it loaded; this session would otherwise use the built-in default.") :
				 errdetail("Its value, set before the library was loaded, is not valid and was refused when it loaded; this session would otherwise use the built-in default."),
				 guc_loaded_at_start ?
				 errhint("Fix the value in the server's configuration and reload it (SELECT pg_reload_conf()); the server log says why it was refused at start.") :
				 errhint("Fix the value (ALTER DATABASE/ROLE ... SET, postgresql.conf) and reconnect; put rwlock in shared_preload_libraries to have values checked when they are set.")));
	}
}

void
rw_define_gucs(void)
{
	guc_note_placeholders();

	DefineCustomStringVariable("rwlock.redis_url",
							   "Redis server that holds the locks.",
							   "redis://[user[:password]@]host[:port][/db], rediss://... (TLS), unix:///path[?db=N], redis+sentinel://host1:port1[,...]/master-name[/db] or redis+cluster://host1:port1[,...]/. "
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

	DefineCustomIntVariable("rwlock.wait_replicas",
							"Replicas that must acknowledge a grant or renewal (WAIT).",
							"0: none. A grant fewer replicas acknowledged within "
							"rwlock.wait_replicas_timeout is undone and reported; a renewal "
							"counts on the master and is logged.",
							&rw_wait_replicas,
							0, 0, 64,
							PGC_SUSET,
							0,
							NULL, NULL, NULL);

	DefineCustomIntVariable("rwlock.wait_replicas_timeout",
							"How long a grant or renewal waits for replicas to acknowledge it.",
							"Used when rwlock.wait_replicas > 0; added to rwlock.command_timeout "
							"for that round trip.",
							&rw_wait_replicas_timeout_ms,
							100, 1, 60000,
							PGC_SUSET,
							GUC_UNIT_MS,
							NULL, NULL, NULL);

	DefineCustomRealVariable("rwlock.quorum_drift",
							 "Quorum mode: the clock drift allowed for, as a fraction of the lease.",
							 "A grant counts only if a majority granted it within the lease less "
							 "the time spent and this margin (Redlock's drift factor).",
							 &rw_quorum_drift,
							 0.01, 0.0, 0.5,
							 PGC_SIGHUP,
							 0,
							 NULL, NULL, NULL);

	DefineCustomIntVariable("rwlock.quorum_max_lease",
							"Quorum mode: the longest lease; a Redis that restarted is not counted for this long.",
							"rwlock.lease is capped at this in quorum mode. A node whose uptime is "
							"shorter (it may have restarted empty while it held locks) does not count "
							"toward a majority until it has been up this long, unless it persists every "
							"write (appendonly yes, appendfsync always).",
							&rw_quorum_max_lease_ms,
							60000, 1000, 86400000,
							PGC_SIGHUP,
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
	guc_note_refusals();
}
