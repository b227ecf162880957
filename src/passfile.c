/*-------------------------------------------------------------------------
 *
 * passfile.c
 *	  The password file: the user and password a connection authenticates
 *	  with when the URL gives no password (redis_conn.c).
 *
 * The password file (rwlock.password_file), after libpq's .pgpass: lines of
 *	  host:port:user:password
 * '#' starts a comment line; '\' escapes ':' and '\'. host is the URL's
 * host as written (for unix://, the socket's path), port a number; '*'
 * matches anything in either. user '*' matches any user; a user name
 * matches a URL with that user, or a URL with none (AUTH then names that
 * user, so even the user name stays out of the URL); an empty user matches
 * only a URL with none. The first matching line wins; a password in the
 * URL wins over the file. The file must be a regular file that neither
 * group nor others may access (mode 0600 or 0400), or it is refused.
 *
 *-------------------------------------------------------------------------
 */
#include "rwlock.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#define PASSFILE_MAX (64 * 1024)

/*
 * The next field of a line: up to an unescaped ':' (or the end, if last),
 * unescaped into out. Returns where the next field starts, or NULL if the
 * line has no more fields.
 */
static char *
passfile_field(char *p, char *out, bool last)
{
	int			o = 0;

	for (; *p; p++)
	{
		if (*p == '\\' && p[1] != '\0')
			p++;
		else if (*p == ':' && !last)
		{
			out[o] = '\0';
			return p + 1;
		}
		out[o++] = *p;
	}
	out[o] = '\0';
	return last ? p : NULL;
}

static bool
passfile_host_matches(const RwEndpoint *ep, const char *host)
{
	if (strcmp(host, "*") == 0)
		return true;
	if (ep->is_unix)
		return strcmp(host, ep->path) == 0;
	if (strcmp(host, ep->host) == 0)
		return true;
	/* An IPv6 address may be written in brackets, as in the URL. */
	return host[0] == '[' && strlen(host) == strlen(ep->host) + 2 &&
		strncmp(host + 1, ep->host, strlen(ep->host)) == 0;
}

static bool
passfile_port_matches(const RwEndpoint *ep, const char *port)
{
	char		buf[16];

	if (strcmp(port, "*") == 0)
		return true;
	if (ep->is_unix)
		return port[0] == '\0';
	snprintf(buf, sizeof(buf), "%d", ep->port);
	return strcmp(port, buf) == 0;
}

/*
 * One line of the file (len bytes at line, its newline left out): whether
 * it is for ep, and if so, its password and (when the URL names no user)
 * its user, palloc'd. Its copies are scratched over and freed: a
 * connection looks up at each reconnection, in whatever memory context is
 * current (the keeper's lasts as long as it does).
 */
static bool
passfile_line(const RwEndpoint *ep, const char *line, size_t len,
			  char **user, char **password)
{
	size_t		size = len + 1;
	char	   *buf = palloc(5 * size);
	char	   *f = buf;
	char	   *host = buf + size;
	char	   *port = buf + 2 * size;
	char	   *fuser = buf + 3 * size;
	char	   *fpass = buf + 4 * size;
	char	   *p;
	bool		match = false;

	memcpy(f, line, len);
	f[len] = '\0';
	if (len > 0 && f[len - 1] == '\r')
		f[--len] = '\0';
	/* Comments, and lines of fewer than four fields, match nothing. */
	if (len > 0 && f[0] != '#' &&
		(p = passfile_field(f, host, false)) != NULL &&
		(p = passfile_field(p, port, false)) != NULL &&
		(p = passfile_field(p, fuser, false)) != NULL)
	{
		passfile_field(p, fpass, true);
		match = passfile_host_matches(ep, host) &&
			passfile_port_matches(ep, port);
		if (match && ep->user != NULL)
			match = strcmp(fuser, "*") == 0 || strcmp(fuser, ep->user) == 0;
		if (match)
		{
			if (ep->user == NULL && fuser[0] != '\0' && strcmp(fuser, "*") != 0)
				*user = pstrdup(fuser);
			*password = pstrdup(fpass);
		}
	}
	explicit_bzero(buf, 5 * size);
	pfree(buf);
	return match;
}

/*
 * The user and password the file's contents (a string) give for ep, as
 * rw_password_lookup says: *user and *password are left alone when no line
 * matches. The contents are the caller's to scratch. Never throws but on
 * out of memory. Apart from the reading of the file, so that verify/fuzz/
 * can call it without a backend.
 */
void
rw_passfile_match(const RwEndpoint *ep, const char *contents, char **user,
				  char **password)
{
	const char *line = contents;

	while (*line)
	{
		const char *end = strchr(line, '\n');
		size_t		len = end ? end - line : strlen(line);

		if (passfile_line(ep, line, len, user, password) || end == NULL)
			break;
		line = end + 1;
	}
}

/*
 * The user and password for AUTH from the endpoint's password file, if it
 * has one and the URL gives no password: *password is NULL when no line
 * matches (or there is no file). False, with *why, if the file cannot be
 * used; why never quotes the file's path or contents. Never throws but on
 * out of memory.
 */
bool
rw_password_lookup(const RwEndpoint *ep, char **user, char **password,
				   char *why, size_t whylen)
{
	struct stat st;
	int			fd;
	char	   *buf;
	ssize_t		n;
	ssize_t		got = 0;

	*user = ep->user;
	*password = ep->password;
	if (ep->password != NULL || ep->password_file == NULL)
		return true;

	fd = open(ep->password_file, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
	{
		snprintf(why, whylen, "could not open rwlock.password_file: %s",
				 strerror(errno));
		return false;
	}
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode))
	{
		snprintf(why, whylen, "rwlock.password_file is not a regular file");
		close(fd);
		return false;
	}
	if (st.st_mode & (S_IRWXG | S_IRWXO))
	{
		snprintf(why, whylen,
				 "rwlock.password_file is refused: group or others may access it (mode %04o; it must be 0600 or less)",
				 (unsigned) (st.st_mode & 07777));
		close(fd);
		return false;
	}
	if (st.st_size > PASSFILE_MAX)
	{
		snprintf(why, whylen, "rwlock.password_file is larger than %d bytes",
				 PASSFILE_MAX);
		close(fd);
		return false;
	}
	buf = palloc(st.st_size + 1);
	while (got < st.st_size &&
		   ((n = read(fd, buf + got, st.st_size - got)) > 0 ||
			(n < 0 && errno == EINTR)))
		got += n > 0 ? n : 0;
	close(fd);
	buf[got] = '\0';

	rw_passfile_match(ep, buf, user, password);
	explicit_bzero(buf, got);
	pfree(buf);
	return true;
}
