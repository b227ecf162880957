/*-------------------------------------------------------------------------
 *
 * url.c
 *	  Parsing rwlock.redis_url: redis://[user[:password]@]host[:port][/db],
 *	  rediss://... (the same over TLS),
 *	  unix://[user:password@]/path/to.sock[?db=N], redis+sentinel:// and
 *	  redis+cluster:// (and their rediss+ forms: a list of sentinels or
 *	  cluster nodes); several redis://, rediss:// or unix:// URLs separated
 *	  by white space (quorum mode, quorum.c: an odd number, at least 3); a
 *	  node's spec. The password file is passfile.c's.
 *
 * A node's spec is the URL followed by the settings a connection to it
 * uses, tab-separated: rwlock.password_file, and for a rediss:// URL also
 * rwlock.tls_verify, tls_ca_file, tls_cert_file and tls_key_file (a plain
 * URL without a password file is its own spec). The spec names the node:
 * a change of any of these settings makes a new node, as a change of the
 * URL does, and never strands a hold made with the old ones. It is also
 * what a session publishes for the keeper, which connects with the
 * session's settings, not its own.
 *
 * The parsed endpoint keeps its spec (with the URL's password, if any, for
 * AUTH) and a display form of the URL without the password, shown only to
 * roles that may read rwlock.redis_url (rw_endpoint_where).
 *
 *-------------------------------------------------------------------------
 */
#include "rwlock.h"

#include <ctype.h>

#include "catalog/pg_authid.h"
#include "miscadmin.h"
#include "access/xact.h"
#include "lib/stringinfo.h"
#include "utils/acl.h"
#include "utils/memutils.h"

#define URL_NUL_WHY "A URL must not encode a NUL byte (%00): the user name, password or master name would end there."

/*
 * The len bytes at s with each %XX decoded, palloc'd; NULL if one is %00,
 * which would cut the string short there (a password silently truncated).
 */
static char *
url_percent_decode(const char *s, int len)
{
	char	   *out = palloc(len + 1);
	int			o = 0;

	for (int i = 0; i < len; i++)
	{
		if (s[i] == '%' && i + 2 < len &&
			isxdigit((unsigned char) s[i + 1]) && isxdigit((unsigned char) s[i + 2]))
		{
			char		hex[3] = {s[i + 1], s[i + 2], 0};

			out[o] = (char) strtol(hex, NULL, 16);
			if (out[o++] == '\0')
			{
				pfree(out);
				return NULL;
			}
			i += 2;
		}
		else
			out[o++] = s[i];
	}
	out[o] = '\0';
	return out;
}

/* user[:password] before '@', if any; returns the part after it */
static const char *
url_parse_userinfo(const char *s, const char *end, RwEndpoint *ep, char **why)
{
	const char *at = NULL;

	for (const char *p = s; p < end; p++)
		if (*p == '@')
			at = p;
	if (at == NULL)
		return s;

	{
		const char *colon = memchr(s, ':', at - s);

		if (colon == NULL)
		{
			*why = "A user name needs a password: user:password@ (or give the password in rwlock.password_file and no user name in the URL).";
			return NULL;
		}
		if ((colon > s &&
			 (ep->user = url_percent_decode(s, colon - s)) == NULL) ||
			(ep->password = url_percent_decode(colon + 1, at - colon - 1)) == NULL)
		{
			*why = URL_NUL_WHY;
			return NULL;
		}
	}
	return at + 1;
}

static bool
url_parse_int(const char *s, int len, int min, int max, int *out)
{
	long		v = 0;

	if (len <= 0 || len > 9)
		return false;
	for (int i = 0; i < len; i++)
	{
		if (!isdigit((unsigned char) s[i]))
			return false;
		v = v * 10 + (s[i] - '0');
	}
	if (v < min || v > max)
		return false;
	*out = (int) v;
	return true;
}

/*
 * The host at p (before end): a name, an IPv4 address or a [IPv6] one, up
 * to a ':' or end. Returns where it ends, with *host palloc'd; NULL (and
 * *why) if a '[' is not closed.
 */
static const char *
url_parse_host(const char *p, const char *end, char **host, char **why)
{
	const char *hostend;

	if (*p == '[')
	{
		hostend = memchr(p, ']', end - p);
		if (hostend == NULL)
		{
			*why = "An IPv6 address must be closed by ].";
			return NULL;
		}
		*host = pnstrdup(p + 1, hostend - p - 1);
		return hostend + 1;
	}
	hostend = memchr(p, ':', end - p);
	if (hostend == NULL)
		hostend = end;
	*host = pnstrdup(p, hostend - p);
	return hostend;
}

static bool
url_parse_tcp(const char *s, RwEndpoint *ep, char **why)
{
	const char *end = s + strcspn(s, "/");
	const char *p;

	p = url_parse_userinfo(s, end, ep, why);
	if (p == NULL || (p = url_parse_host(p, end, &ep->host, why)) == NULL)
		return false;
	if (ep->host[0] == '\0')
	{
		*why = "The URL names no host.";
		return false;
	}
	ep->port = 6379;
	if (p < end && *p == ':' && !url_parse_int(p + 1, end - p - 1, 1, 65535, &ep->port))
	{
		*why = "The port must be a number from 1 to 65535.";
		return false;
	}
	else if (p < end && *p != ':')
	{
		*why = "Unexpected characters after the host.";
		return false;
	}
	if (*end == '/' && end[1] != '\0' &&
		!url_parse_int(end + 1, strlen(end + 1), 0, 1000000, &ep->db))
	{
		*why = "The database must be a number after the last /.";
		return false;
	}
	return true;
}

static bool
url_parse_unix(const char *s, RwEndpoint *ep, char **why)
{
	const char *slash = strchr(s, '/');
	const char *q;

	if (slash == NULL)
	{
		*why = "A unix:// URL needs an absolute socket path.";
		return false;
	}
	if (url_parse_userinfo(s, slash, ep, why) == NULL)
		return false;
	if (url_parse_userinfo(s, slash, ep, why) != slash)
	{
		*why = "A unix:// URL needs an absolute socket path.";
		return false;
	}
	q = strchr(slash, '?');
	ep->path = q ? pnstrdup(slash, q - slash) : pstrdup(slash);
	if (q && (strncmp(q, "?db=", 4) != 0 ||
			  !url_parse_int(q + 4, strlen(q + 4), 0, 1000000, &ep->db)))
	{
		*why = "The only option of a unix:// URL is ?db=N.";
		return false;
	}
	ep->is_unix = true;
	return true;
}

/*
 * The list host1[:port1][,host2[:port2]...] from p to end into ep's seeds
 * (the sentinels, or a cluster's seed nodes); what names them in messages.
 */
static bool
url_parse_seeds(const char *p, const char *end, int default_port,
				const char *what, RwEndpoint *ep, char **why)
{
	int			cap = 4;

	ep->seed_hosts = palloc(cap * sizeof(char *));
	ep->seed_ports = palloc(cap * sizeof(int));
	while (p < end)
	{
		const char *item_end = p + strcspn(p, ",/");
		const char *hostend;
		char	   *host;
		int			port = default_port;

		if (item_end > end)
			item_end = end;
		if ((hostend = url_parse_host(p, item_end, &host, why)) == NULL)
			return false;
		if (host[0] == '\0')
		{
			*why = psprintf("Each %s in the URL needs a host: host1:port1,host2:port2.", what);
			return false;
		}
		if (hostend < item_end &&
			(*hostend != ':' ||
			 !url_parse_int(hostend + 1, item_end - hostend - 1, 1, 65535, &port)))
		{
			*why = psprintf("A %s's port must be a number from 1 to 65535.", what);
			return false;
		}
		if (ep->nseeds == 64)
		{
			*why = psprintf("The URL names more than 64 %ss.", what);
			return false;
		}
		if (ep->nseeds == cap)
		{
			cap *= 2;
			ep->seed_hosts = repalloc(ep->seed_hosts, cap * sizeof(char *));
			ep->seed_ports = repalloc(ep->seed_ports, cap * sizeof(int));
		}
		ep->seed_hosts[ep->nseeds] = host;
		ep->seed_ports[ep->nseeds++] = port;
		p = item_end;
		if (p < end && *p == ',')
			p++;
	}
	return true;
}

/*
 * redis+sentinel://[user[:password]@]host1[:port1][,host2[:port2]...]/master-name[/db]:
 * the sentinels (port 26379 unless given) and the service they watch. The
 * URL's user and password are the master's (and its replicas'); a
 * sentinel's come from the password file, by its host and port (sentinel.c).
 */
static bool
url_parse_sentinel(const char *s, RwEndpoint *ep, char **why)
{
	const char *end = s + strcspn(s, "/");
	const char *p;
	const char *name;
	const char *name_end;

	p = url_parse_userinfo(s, end, ep, why);
	if (p == NULL)
		return false;
	ep->sentinel = true;
	if (!url_parse_seeds(p, end, 26379, "sentinel", ep, why))
		return false;
	if (ep->nseeds == 0)
	{
		*why = "A redis+sentinel:// URL names at least one sentinel: host1:port1[,host2:port2...].";
		return false;
	}
	if (*end != '/' || end[1] == '\0' || end[1] == '/')
	{
		*why = "A redis+sentinel:// URL ends with /master-name[/db]: the name the sentinels monitor.";
		return false;
	}
	name = end + 1;
	name_end = name + strcspn(name, "/");
	ep->master_name = url_percent_decode(name, name_end - name);
	if (ep->master_name == NULL)
	{
		*why = URL_NUL_WHY;
		return false;
	}
	if (*name_end == '/' && name_end[1] != '\0' &&
		!url_parse_int(name_end + 1, strlen(name_end + 1), 0, 1000000, &ep->db))
	{
		*why = "The database must be a number after the master name: /master-name/db.";
		return false;
	}
	/* Where the master is: unknown until the sentinels say (sentinel.c). */
	ep->host = NULL;
	ep->port = 0;
	return true;
}

/*
 * redis+cluster://[user[:password]@]host1[:port1][,host2[:port2]...][/[0]]:
 * seed nodes of a Redis Cluster (port 6379 unless given), any of which
 * gives the slot map (cluster.c). A cluster has database 0 only. The user
 * and password are every node's.
 */
static bool
url_parse_cluster(const char *s, RwEndpoint *ep, char **why)
{
	const char *end = s + strcspn(s, "/");
	const char *p;

	p = url_parse_userinfo(s, end, ep, why);
	if (p == NULL)
		return false;
	ep->cluster = true;
	if (!url_parse_seeds(p, end, 6379, "cluster node", ep, why))
		return false;
	if (ep->nseeds == 0)
	{
		*why = "A redis+cluster:// URL names at least one node: host1:port1[,host2:port2...].";
		return false;
	}
	if (*end == '/' && end[1] != '\0' && strcmp(end + 1, "0") != 0)
	{
		*why = "Redis Cluster has database 0 only: a redis+cluster:// URL ends with the nodes, / or /0.";
		return false;
	}
	/* A node to talk to: found when connecting (cluster.c). */
	ep->host = NULL;
	ep->port = 0;
	return true;
}

/* Parse the URL part of a spec (len bytes) into *ep. */
static bool
url_parse(const char *url, int len, RwEndpoint *ep, char **why)
{
	char	   *u = pnstrdup(url, len);

	if (strncmp(u, "redis://", 8) == 0)
		return url_parse_tcp(u + 8, ep, why);
	if (strncmp(u, "rediss://", 9) == 0)
	{
		ep->tls = true;
		return url_parse_tcp(u + 9, ep, why);
	}
	if (strncmp(u, "unix://", 7) == 0)
		return url_parse_unix(u + 7, ep, why);
	if (strncmp(u, "redis+sentinel://", 17) == 0)
		return url_parse_sentinel(u + 17, ep, why);
	if (strncmp(u, "rediss+sentinel://", 18) == 0)
	{
		ep->tls = true;
		return url_parse_sentinel(u + 18, ep, why);
	}
	if (strncmp(u, "redis+cluster://", 16) == 0)
		return url_parse_cluster(u + 16, ep, why);
	if (strncmp(u, "rediss+cluster://", 17) == 0)
	{
		ep->tls = true;
		return url_parse_cluster(u + 17, ep, why);
	}
	*why = "The URL must start with redis://, rediss://, unix://, redis+sentinel://, rediss+sentinel://, redis+cluster:// or rediss+cluster://.";
	return false;
}

/*
 * The URLs of a quorum (quorum.c), separated by white space in the spec's
 * first field (len bytes), each with the spec's other fields (tail: from
 * the first tab, or ""): every member connects with the same settings.
 */
static bool
url_parse_quorum(const char *url, int len, const char *tail, RwEndpoint *ep,
				 char **why)
{
	const char *p = url;
	const char *end = url + len;
	StringInfoData b;

	ep->quorum_specs = palloc(sizeof(char *) * (RW_QUORUM_MAX + 1));
	initStringInfo(&b);
	appendStringInfoString(&b, "quorum:");
	while (p < end)
	{
		const char *word;
		RwEndpoint	m;

		while (p < end && isspace((unsigned char) *p))
			p++;
		if (p == end)
			break;
		word = p;
		while (p < end && !isspace((unsigned char) *p))
			p++;
		if (ep->nquorum == RW_QUORUM_MAX)
		{
			*why = psprintf("A quorum has at most %d URLs.", RW_QUORUM_MAX);
			return false;
		}
		ep->quorum_specs[ep->nquorum] = psprintf("%.*s%s", (int) (p - word), word, tail);
		if (!rw_parse_url(ep->quorum_specs[ep->nquorum], &m, why))
			return false;
		if (m.sentinel || m.cluster)
		{
			*why = "Each URL of a quorum must be redis://, rediss:// or unix://.";
			return false;
		}
		appendStringInfo(&b, " %s", m.display);
		ep->nquorum++;
	}
	if (ep->nquorum < 3 || ep->nquorum % 2 == 0)
	{
		*why = "Several URLs (quorum mode) must be an odd number, at least 3, so that any two majorities meet.";
		return false;
	}
	ep->display = b.data;
	return true;
}

/* Whether the URL field holds several URLs: quorum mode. */
static bool
url_is_quorum(const char *url, int len)
{
	for (int i = 0; i < len; i++)
		if (isspace((unsigned char) url[i]))
			return true;
	return false;
}

/* A field of a spec: NULL if empty. */
static char *
spec_field(const char *s, int len)
{
	return len > 0 ? pnstrdup(s, len) : NULL;
}

/* The name of a rwlock.tls_verify value, as in a node's spec. */
const char *
rw_tls_verify_name(RwTlsVerify v)
{
	return v == RW_TLS_VERIFY_CA ? "ca" : v == RW_TLS_VERIFY_NONE ? "none" : "full";
}

/*
 * Parse a node's spec (or a bare URL) into *ep (strings palloc'd in the
 * current context). On failure returns false and points *why at a sentence
 * saying what is wrong; it never quotes the URL.
 */
bool
rw_parse_url(const char *spec, RwEndpoint *ep, char **why)
{
	const char *fields[6];
	int			lens[6];
	int			n = 0;
	const char *p = spec;

	memset(ep, 0, sizeof(*ep));
	for (;;)
	{
		const char *tab = strchr(p, '\t');

		if (n == 6)
		{
			*why = "A node's spec has too many fields.";
			return false;
		}
		fields[n] = p;
		lens[n++] = tab ? tab - p : strlen(p);
		if (tab == NULL)
			break;
		p = tab + 1;
	}
	if (n != 1 && n != 2 && n != 6)
	{
		*why = "A node's spec has a wrong number of fields.";
		return false;
	}
	if (url_is_quorum(fields[0], lens[0]))
	{
		ep->url = pstrdup(spec);
		return url_parse_quorum(fields[0], lens[0], spec + lens[0], ep, why);
	}
	if (!url_parse(fields[0], lens[0], ep, why))
		return false;
	if (n >= 2)
		ep->password_file = spec_field(fields[1], lens[1]);
	ep->tls_verify = RW_TLS_VERIFY_FULL;
	if (n == 6)
	{
		if (lens[2] == 2 && strncmp(fields[2], "ca", 2) == 0)
			ep->tls_verify = RW_TLS_VERIFY_CA;
		else if (lens[2] == 4 && strncmp(fields[2], "none", 4) == 0)
			ep->tls_verify = RW_TLS_VERIFY_NONE;
		ep->tls_ca_file = spec_field(fields[3], lens[3]);
		ep->tls_cert_file = spec_field(fields[4], lens[4]);
		ep->tls_key_file = spec_field(fields[5], lens[5]);
	}
	ep->url = pstrdup(spec);
	if (ep->sentinel || ep->cluster)
	{
		StringInfoData b;

		initStringInfo(&b);
		appendStringInfo(&b, "%s%s://%s%s", ep->tls ? "rediss" : "redis",
						 ep->sentinel ? "+sentinel" : "+cluster",
						 ep->user ? ep->user : "", ep->user ? "@" : "");
		for (int i = 0; i < ep->nseeds; i++)
			appendStringInfo(&b, "%s%s%s%s:%d", i > 0 ? "," : "",
							 strchr(ep->seed_hosts[i], ':') ? "[" : "",
							 ep->seed_hosts[i],
							 strchr(ep->seed_hosts[i], ':') ? "]" : "",
							 ep->seed_ports[i]);
		if (ep->sentinel)
			appendStringInfo(&b, "/%s/%d", ep->master_name, ep->db);
		else
			appendStringInfoString(&b, "/");
		ep->display = b.data;
	}
	else if (ep->is_unix)
		ep->display = psprintf("unix://%s%s%s?db=%d",
							   ep->user ? ep->user : "", ep->user ? "@" : "",
							   ep->path, ep->db);
	else
		ep->display = psprintf("%s://%s%s%s%s%s:%d/%d",
							   ep->tls ? "rediss" : "redis",
							   ep->user ? ep->user : "", ep->user ? "@" : "",
							   strchr(ep->host, ':') ? "[" : "", ep->host,
							   strchr(ep->host, ':') ? "]" : "",
							   ep->port, ep->db);
	return true;
}

/*
 * The URL(s) of the setting, white space trimmed and each run of it made
 * one space: the URLs of a quorum name one node however they are spaced,
 * and a tab never ends up inside the spec's first field.
 */
static char *
url_words(const char *s)
{
	StringInfoData b;

	initStringInfo(&b);
	while (*s)
	{
		size_t		n;

		s += strspn(s, " \t\r\n\v\f");
		n = strcspn(s, " \t\r\n\v\f");
		if (n > 0)
			appendStringInfo(&b, "%s%.*s", b.len > 0 ? " " : "", (int) n, s);
		s += n;
	}
	return b.data;
}

/* For the setting's check hook: a URL alone, no control characters. */
bool
rw_check_url(const char *url, char **why)
{
	RwEndpoint	ep;

	for (const unsigned char *p = (const unsigned char *) url; *p; p++)
	{
		/* Spaces, tabs and newlines separate the URLs of a quorum. */
		if ((*p < 0x20 && !isspace(*p)) || *p == 0x7f)
		{
			*why = "The URL must not contain control characters.";
			return false;
		}
	}
	return rw_parse_url(url_words(url), &ep, why);
}

/*
 * The spec of the node rwlock.redis_url names, with the settings in effect
 * now (see the header comment).
 */
char *
rw_current_spec(void)
{
	bool		tls = strstr(rw_redis_url, "rediss://") != NULL ||
		strstr(rw_redis_url, "rediss+sentinel://") != NULL ||
		strstr(rw_redis_url, "rediss+cluster://") != NULL;
	char	   *url = url_words(rw_redis_url);
	char	   *spec;
	const char *pf = rw_password_file ? rw_password_file : "";

	if (tls)
		spec = psprintf("%s\t%s\t%s\t%s\t%s\t%s", url, pf,
						rw_tls_verify_name(rw_tls_verify),
						rw_tls_ca_file ? rw_tls_ca_file : "",
						rw_tls_cert_file ? rw_tls_cert_file : "",
						rw_tls_key_file ? rw_tls_key_file : "");
	else if (*pf != '\0')
		spec = psprintf("%s\t%s", url, pf);
	else
		return url;
	pfree(url);
	return spec;
}

/*
 * Where a node is, for a message: its URL (without password) to roles that
 * may read rwlock.redis_url, else "the configured Redis server".
 */
const char *
rw_endpoint_where(const RwEndpoint *ep)
{
	if (rw_may_see_url())
		return psprintf("Redis at %s", ep->display);
	return "the configured Redis server";
}

/*
 * Make host:port the address a resolved endpoint (Sentinel, Cluster)
 * connects to, kept in TopMemoryContext; addr_gen moves on if it changed.
 */
void
rw_endpoint_set_addr(RwEndpoint *ep, const char *host, int port)
{
	if (ep->host != NULL && strcmp(ep->host, host) == 0 && ep->port == port)
		return;
	if (ep->host != NULL)
		pfree(ep->host);
	ep->host = MemoryContextStrdup(TopMemoryContext, host);
	ep->port = port;
	ep->addr_gen++;
}

/* Whether the current role may read rwlock.redis_url (as SHOW decides). */
bool
rw_may_see_url(void)
{
	return IsTransactionState() &&
		has_privs_of_role(GetUserId(), ROLE_PG_READ_ALL_SETTINGS);
}
