/*-------------------------------------------------------------------------
 *
 * url.c
 *	  Parsing rwlock.redis_url: redis://[user[:password]@]host[:port][/db]
 *	  and unix://[user:password@]/path/to.sock[?db=N].
 *
 * The parsed endpoint keeps the URL as given (with its password, for AUTH)
 * and a display form without the password, for messages.
 *
 *-------------------------------------------------------------------------
 */
#include "rwlock.h"

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

			out[o++] = (char) strtol(hex, NULL, 16);
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
			*why = "A user name needs a password: user:password@.";
			return NULL;
		}
		if (colon > s)
			ep->user = url_percent_decode(s, colon - s);
		ep->password = url_percent_decode(colon + 1, at - colon - 1);
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

static bool
url_parse_tcp(const char *s, RwEndpoint *ep, char **why)
{
	const char *end = s + strcspn(s, "/");
	const char *hostend;
	const char *p;

	p = url_parse_userinfo(s, end, ep, why);
	if (p == NULL)
		return false;
	if (*p == '[')
	{
		hostend = memchr(p, ']', end - p);
		if (hostend == NULL)
		{
			*why = "An IPv6 address must be closed by ].";
			return false;
		}
		ep->host = pnstrdup(p + 1, hostend - p - 1);
		p = hostend + 1;
	}
	else
	{
		hostend = p + strcspn(p, ":/");
		if (hostend > end)
			hostend = end;
		ep->host = pnstrdup(p, hostend - p);
		p = hostend;
	}
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
 * Parse a URL into *ep (strings palloc'd in the current context). On failure
 * returns false and points *why at a sentence saying what is wrong.
 */
bool
rw_parse_url(const char *url, RwEndpoint *ep, char **why)
{
	bool		ok;

	memset(ep, 0, sizeof(*ep));
	if (strncmp(url, "redis://", 8) == 0)
		ok = url_parse_tcp(url + 8, ep, why);
	else if (strncmp(url, "unix://", 7) == 0)
		ok = url_parse_unix(url + 7, ep, why);
	else
	{
		*why = "The URL must start with redis:// or unix://.";
		ok = false;
	}
	if (!ok)
		return false;
	ep->url = pstrdup(url);
	if (ep->is_unix)
		ep->display = psprintf("unix://%s%s%s?db=%d",
							   ep->user ? ep->user : "", ep->user ? "@" : "",
							   ep->path, ep->db);
	else
		ep->display = psprintf("redis://%s%s%s%s%s:%d/%d",
							   ep->user ? ep->user : "", ep->user ? "@" : "",
							   strchr(ep->host, ':') ? "[" : "", ep->host,
							   strchr(ep->host, ':') ? "]" : "",
							   ep->port, ep->db);
	return true;
}
