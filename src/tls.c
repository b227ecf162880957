/*-------------------------------------------------------------------------
 *
 * tls.c
 *	  TLS for rediss:// connections, with OpenSSL, on redis_conn.c's own
 *	  non-blocking socket.
 *
 * redis_conn.c connects the socket and waits on it through the latch, as
 * for a plain connection; this file only turns bytes into TLS records and
 * back. Nothing here blocks: the handshake, a read and a write each do what
 * the socket allows now and say which socket event they need next
 * (readable or writeable; TLS may need to read to write, and the reverse),
 * so that every wait stays in conn_wait, with its deadline and interrupts.
 * Nothing here throws either (failures come back as sentences for RwError)
 * but on out of memory.
 *
 * Contexts (SSL_CTX: verification mode, CA file, client certificate and
 * key) are made on first use and kept per backend, keyed by those settings
 * and by the files' identity and modification time, so a renewed
 * certificate is read at the next connection.
 *
 * What is verified (rwlock.tls_verify): full, the server's certificate
 * chains to a trusted CA (rwlock.tls_ca_file, or the system's store) and
 * names the URL's host (a DNS name or IP address in its subjectAltName;
 * the subject's common name is never read, RFC 9525); ca, only the chain;
 * none, nothing. A handshake that fails says why in plain words: an
 * unknown CA, a name mismatch (a certificate without subjectAltName told
 * apart), an expired certificate, a client certificate required or
 * refused, a server that does not speak TLS. The error queue of OpenSSL, which PostgreSQL's own SSL code shares,
 * is cleared before and after each call.
 *
 *-------------------------------------------------------------------------
 */
#include "rwlock.h"

#include <arpa/inet.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include "utils/memutils.h"

#define TLS_MAX_CONTEXTS 8

struct RwTls
{
	SSL		   *ssl;
	bool		established;	/* the handshake completed */
	bool		failed;			/* a fatal error: no close_notify */
	bool		read_wants_write;	/* the last read needs a writeable socket */
	bool		write_wants_read;	/* the last write needs a readable one */
	bool		has_cert;		/* we present a client certificate */
	bool		cert_requested; /* the server asked for one */
	bool		got_data;		/* the server sent us data after the handshake */
	bool		no_san;			/* its certificate, refused for its name,
								 * has no subjectAltName at all */
};

/* The identity of a file, to notice that it was replaced or changed. */
typedef struct TlsFileSig
{
	dev_t		dev;
	ino_t		ino;
	off_t		size;
	struct timespec mtime;
} TlsFileSig;

typedef struct TlsContext
{
	char	   *key;			/* verify, ca, cert, key files */
	TlsFileSig	sig[3];
	SSL_CTX    *ctx;
	struct TlsContext *next;
} TlsContext;

static TlsContext *tls_contexts = NULL;

static void
tls_file_sig(const char *path, TlsFileSig *sig)
{
	struct stat st;

	memset(sig, 0, sizeof(*sig));
	if (path != NULL && stat(path, &st) == 0)
	{
		sig->dev = st.st_dev;
		sig->ino = st.st_ino;
		sig->size = st.st_size;
		sig->mtime = st.st_mtim;
	}
}

/* OpenSSL's reason for the first error in its queue, or a fallback. */
static const char *
tls_reason(unsigned long e, const char *fallback)
{
	const char *r = e ? ERR_reason_error_string(e) : NULL;

	return r ? r : fallback;
}

/* The server asks for a client certificate: note it, for tls_explain. */
static int
tls_cert_requested(SSL *ssl, void *arg)
{
	((RwTls *) arg)->cert_requested = true;
	return 1;
}

/* A passphrase prompt would read the terminal: never ask. */
static int
tls_no_passphrase(char *buf, int size, int rwflag, void *userdata)
{
	return 0;
}

/*
 * Whether a private key file may be used: owned by us or root, and not
 * accessible by others (by group only if root owns it), as libpq requires.
 */
static bool
tls_key_file_ok(const char *path, char *why, size_t whylen)
{
	struct stat st;

	if (stat(path, &st) < 0)
	{
		snprintf(why, whylen, "could not read the TLS private key: %s", strerror(errno));
		return false;
	}
	if (!S_ISREG(st.st_mode))
	{
		snprintf(why, whylen, "the TLS private key is not a regular file");
		return false;
	}
	if (st.st_uid != geteuid() && st.st_uid != 0)
	{
		snprintf(why, whylen, "the TLS private key file must be owned by the server's OS user or root");
		return false;
	}
	if ((st.st_uid == geteuid() && (st.st_mode & (S_IRWXG | S_IRWXO))) ||
		(st.st_uid == 0 && (st.st_mode & (S_IWGRP | S_IXGRP | S_IRWXO))))
	{
		snprintf(why, whylen,
				 "the TLS private key file is refused: it has group or world access (mode %04o; it must be 0600 or less, or 0640 if owned by root)",
				 (unsigned) (st.st_mode & 07777));
		return false;
	}
	return true;
}

/* Make a context for these settings; NULL with *why on failure. */
static SSL_CTX *
tls_context_make(const RwEndpoint *ep, char *why, size_t whylen)
{
	SSL_CTX    *ctx = SSL_CTX_new(TLS_client_method());
	const char *keyfile = ep->tls_key_file ? ep->tls_key_file : ep->tls_cert_file;
	struct stat st;

	if (ctx == NULL)
	{
		snprintf(why, whylen, "could not make a TLS context: %s",
				 tls_reason(ERR_get_error(), "out of memory"));
		return NULL;
	}
	SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
	/* Partial writes of hiredis's output buffer, which moves as it grows. */
	SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE |
					 SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
	SSL_CTX_set_default_passwd_cb(ctx, tls_no_passphrase);

	if (ep->tls_verify == RW_TLS_VERIFY_NONE)
		SSL_CTX_set_verify(ctx, SSL_VERIFY_NONE, NULL);
	else
	{
		SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL);
		if (ep->tls_ca_file != NULL)
		{
			if (stat(ep->tls_ca_file, &st) < 0)
			{
				snprintf(why, whylen, "could not read rwlock.tls_ca_file: %s",
						 strerror(errno));
				goto fail;
			}
			if (SSL_CTX_load_verify_locations(ctx, ep->tls_ca_file, NULL) != 1)
			{
				snprintf(why, whylen, "could not load rwlock.tls_ca_file: %s",
						 tls_reason(ERR_get_error(), "no certificate in it"));
				goto fail;
			}
		}
		else if (SSL_CTX_set_default_verify_paths(ctx) != 1)
		{
			snprintf(why, whylen, "could not load the system's CA certificates: %s",
					 tls_reason(ERR_get_error(), "unknown error"));
			goto fail;
		}
	}

	if (ep->tls_key_file != NULL && ep->tls_cert_file == NULL)
	{
		snprintf(why, whylen, "rwlock.tls_key_file is set but rwlock.tls_cert_file is not");
		goto fail;
	}
	if (ep->tls_cert_file != NULL)
	{
		if (stat(ep->tls_cert_file, &st) < 0)
		{
			snprintf(why, whylen, "could not read rwlock.tls_cert_file: %s",
					 strerror(errno));
			goto fail;
		}
		if (SSL_CTX_use_certificate_chain_file(ctx, ep->tls_cert_file) != 1)
		{
			snprintf(why, whylen, "could not load rwlock.tls_cert_file: %s",
					 tls_reason(ERR_get_error(), "no certificate in it"));
			goto fail;
		}
		if (!tls_key_file_ok(keyfile, why, whylen))
			goto fail;
		if (SSL_CTX_use_PrivateKey_file(ctx, keyfile, SSL_FILETYPE_PEM) != 1)
		{
			unsigned long e = ERR_peek_last_error();

			if (ERR_GET_LIB(e) == ERR_LIB_X509 &&
				ERR_GET_REASON(e) == X509_R_KEY_VALUES_MISMATCH)
				snprintf(why, whylen, "the TLS private key does not match rwlock.tls_cert_file");
			else if (ERR_GET_LIB(e) == ERR_LIB_PEM &&
					 ERR_GET_REASON(e) == PEM_R_BAD_PASSWORD_READ)
				snprintf(why, whylen, "the TLS private key is encrypted: rwlock needs a key without a passphrase (protected by its file's mode, 0600)");
			else
				snprintf(why, whylen, "could not load the TLS private key (%s): %s",
						 ep->tls_key_file ? "rwlock.tls_key_file" : "in rwlock.tls_cert_file",
						 tls_reason(e, "no key in it"));
			goto fail;
		}
		if (SSL_CTX_check_private_key(ctx) != 1)
		{
			snprintf(why, whylen, "the TLS private key does not match rwlock.tls_cert_file");
			goto fail;
		}
	}
	return ctx;

fail:
	SSL_CTX_free(ctx);
	return NULL;
}

/* The context for an endpoint's settings, made or reused. */
static SSL_CTX *
tls_context(const RwEndpoint *ep, char *why, size_t whylen)
{
	char	   *key = psprintf("%s\t%s\t%s\t%s", rw_tls_verify_name(ep->tls_verify),
							   ep->tls_ca_file ? ep->tls_ca_file : "",
							   ep->tls_cert_file ? ep->tls_cert_file : "",
							   ep->tls_key_file ? ep->tls_key_file : "");
	TlsFileSig	sig[3];
	TlsContext **link;
	TlsContext *c;
	int			n = 0;

	tls_file_sig(ep->tls_ca_file, &sig[0]);
	tls_file_sig(ep->tls_cert_file, &sig[1]);
	tls_file_sig(ep->tls_key_file, &sig[2]);
	for (link = &tls_contexts; (c = *link) != NULL; link = &c->next, n++)
	{
		if (strcmp(c->key, key) != 0)
			continue;
		*link = c->next;
		if (memcmp(c->sig, sig, sizeof(sig)) == 0)
		{
			/* Most recently used first. */
			c->next = tls_contexts;
			tls_contexts = c;
			pfree(key);
			return c->ctx;
		}
		/* A file changed: make the context again. */
		SSL_CTX_free(c->ctx);
		pfree(c->key);
		pfree(c);
		break;
	}

	c = MemoryContextAllocZero(TopMemoryContext, sizeof(TlsContext));
	c->ctx = tls_context_make(ep, why, whylen);
	ERR_clear_error();
	if (c->ctx == NULL)
	{
		pfree(c);
		pfree(key);
		return NULL;
	}
	c->key = MemoryContextStrdup(TopMemoryContext, key);
	pfree(key);
	memcpy(c->sig, sig, sizeof(sig));
	c->next = tls_contexts;
	tls_contexts = c;

	/* Keep a few; SSL objects hold their own reference to theirs. */
	for (n = 0, link = &tls_contexts; (c = *link) != NULL; n++)
	{
		if (n >= TLS_MAX_CONTEXTS)
		{
			*link = c->next;
			SSL_CTX_free(c->ctx);
			pfree(c->key);
			pfree(c);
		}
		else
			link = &c->next;
	}
	return tls_contexts->ctx;
}

static bool
tls_host_is_ip(const char *host)
{
	unsigned char buf[sizeof(struct in6_addr)];

	return inet_pton(AF_INET, host, buf) == 1 || inet_pton(AF_INET6, host, buf) == 1;
}

/*
 * The verification callback of rwlock.tls_verify = full: OpenSSL's verdict
 * stands; a name mismatch on a certificate without any subjectAltName is
 * remembered, to say why (after a failed handshake the certificate is no
 * longer at hand).
 */
static int
tls_verify_cb(int ok, X509_STORE_CTX *store)
{
	int			vr = X509_STORE_CTX_get_error(store);

	if (!ok && (vr == X509_V_ERR_HOSTNAME_MISMATCH ||
				vr == X509_V_ERR_IP_ADDRESS_MISMATCH))
	{
		SSL		   *ssl = X509_STORE_CTX_get_ex_data(store,
													 SSL_get_ex_data_X509_STORE_CTX_idx());
		RwTls	   *t = ssl ? SSL_get_app_data(ssl) : NULL;
		X509	   *leaf = X509_STORE_CTX_get0_cert(store);

		if (t != NULL && leaf != NULL)
			t->no_san = X509_get_ext_by_NID(leaf, NID_subject_alt_name, -1) < 0;
	}
	return ok;
}

/*
 * Start TLS on a connected socket: the handshake is then driven by
 * rw_tls_handshake. NULL, with *why, if the settings cannot be used.
 */
RwTls *
rw_tls_open(const RwEndpoint *ep, int fd, char *why, size_t whylen)
{
	SSL_CTX    *ctx;
	SSL		   *ssl;
	RwTls	   *t;
	bool		ok;

	ERR_clear_error();
	ctx = tls_context(ep, why, whylen);
	if (ctx == NULL)
		return NULL;
	ssl = SSL_new(ctx);
	if (ssl == NULL)
	{
		snprintf(why, whylen, "could not start TLS: %s",
				 tls_reason(ERR_get_error(), "out of memory"));
		ERR_clear_error();
		return NULL;
	}
	ok = SSL_set_fd(ssl, fd) == 1;
	if (ok && !tls_host_is_ip(ep->host))
		ok = SSL_set_tlsext_host_name(ssl, ep->host) == 1;
	if (ok && ep->tls_verify == RW_TLS_VERIFY_FULL)
	{
		if (tls_host_is_ip(ep->host))
			ok = X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), ep->host) == 1;
		else
		{
			/*
			 * The subjectAltName only, never the subject's common name
			 * (RFC 9525, as browsers do): OpenSSL would otherwise fall
			 * back to the CN of a certificate without DNS names.
			 */
			SSL_set_hostflags(ssl, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS |
							  X509_CHECK_FLAG_NEVER_CHECK_SUBJECT);
			ok = SSL_set1_host(ssl, ep->host) == 1;
		}
	}
	t = ok ? calloc(1, sizeof(RwTls)) : NULL;
	if (t == NULL)
	{
		snprintf(why, whylen, "could not start TLS: %s",
				 tls_reason(ERR_get_error(), "out of memory"));
		ERR_clear_error();
		SSL_free(ssl);
		return NULL;
	}
	SSL_set_cert_cb(ssl, tls_cert_requested, t);
	SSL_set_app_data(ssl, t);
	if (ep->tls_verify == RW_TLS_VERIFY_FULL)
		SSL_set_verify(ssl, SSL_VERIFY_PEER, tls_verify_cb);
	SSL_set_connect_state(ssl);
	t->ssl = ssl;
	t->has_cert = ep->tls_cert_file != NULL;
	return t;
}

/* What the certificate check found wrong, in plain words. */
static void
tls_explain_verify(RwTls *t, long vr, char *why, size_t whylen)
{
	const char *what = X509_verify_cert_error_string(vr);

	switch (vr)
	{
		case X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT_LOCALLY:
		case X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT:
		case X509_V_ERR_SELF_SIGNED_CERT_IN_CHAIN:
		case X509_V_ERR_DEPTH_ZERO_SELF_SIGNED_CERT:
		case X509_V_ERR_UNABLE_TO_VERIFY_LEAF_SIGNATURE:
			snprintf(why, whylen,
					 "TLS handshake failed: the server's certificate is signed by an unknown certificate authority (%s); rwlock.tls_ca_file must hold the CA that signed it",
					 what);
			break;
		case X509_V_ERR_HOSTNAME_MISMATCH:
		case X509_V_ERR_IP_ADDRESS_MISMATCH:
			if (t->no_san)
				snprintf(why, whylen,
						 "TLS handshake failed: the server's certificate has no subjectAltName, and only its subjectAltName (DNS name or IP address) can name the URL's host, never the common name; or set rwlock.tls_verify = ca");
			else
				snprintf(why, whylen,
						 "TLS handshake failed: the server's certificate is not for the host in rwlock.redis_url (%s); connect by a name the certificate gives, or set rwlock.tls_verify = ca",
						 what);
			break;
		case X509_V_ERR_CERT_HAS_EXPIRED:
			snprintf(why, whylen, "TLS handshake failed: the server's certificate has expired");
			break;
		case X509_V_ERR_CERT_NOT_YET_VALID:
			snprintf(why, whylen, "TLS handshake failed: the server's certificate is not valid yet");
			break;
		default:
			snprintf(why, whylen, "TLS handshake failed: the server's certificate was not accepted: %s",
					 what);
			break;
	}
}

/* Why a TLS call failed, in plain words; OpenSSL's queue is then cleared. */
static void
tls_explain(RwTls *t, int ret, int sslerr, int saved_errno, char *why,
			size_t whylen)
{
	unsigned long e = ERR_peek_error();
	int			reason = ERR_GET_REASON(e);
	const char *stage = t->established ? "TLS" : "TLS handshake failed";
	long		vr = SSL_get_verify_result(t->ssl);

	if (sslerr == SSL_ERROR_ZERO_RETURN)
		snprintf(why, whylen, "Server closed the connection");
	else if (sslerr == SSL_ERROR_SYSCALL && e == 0)
	{
		if (saved_errno == 0)
			snprintf(why, whylen, "%s: the server closed the connection", stage);
		else
			snprintf(why, whylen, "%s: %s", stage, strerror(saved_errno));
	}
	else if (sslerr != SSL_ERROR_SSL || ERR_GET_LIB(e) != ERR_LIB_SSL)
		snprintf(why, whylen, "%s: %s", stage, tls_reason(e, "unknown error"));
	else if (reason == SSL_R_CERTIFICATE_VERIFY_FAILED && vr != X509_V_OK)
		tls_explain_verify(t, vr, why, whylen);
	else
	{
		switch (reason)
		{
			case SSL_R_WRONG_VERSION_NUMBER:
			case SSL_R_UNKNOWN_PROTOCOL:
			case SSL_R_PACKET_LENGTH_TOO_LONG:
			case SSL_R_HTTP_REQUEST:
			case SSL_R_UNEXPECTED_RECORD:
				snprintf(why, whylen,
						 "%s: the server does not speak TLS (%s); for a port without TLS use redis://",
						 stage, tls_reason(e, "?"));
				break;
			case SSL_R_TLSV13_ALERT_CERTIFICATE_REQUIRED:
			case SSL_R_SSLV3_ALERT_HANDSHAKE_FAILURE:
				if (!t->has_cert)
				{
					snprintf(why, whylen,
							 "%s: the server requires a client certificate (%s); set rwlock.tls_cert_file and rwlock.tls_key_file",
							 stage, tls_reason(e, "?"));
					break;
				}
				/* FALLTHROUGH */
			case SSL_R_TLSV1_ALERT_UNKNOWN_CA:
			case SSL_R_SSLV3_ALERT_BAD_CERTIFICATE:
			case SSL_R_SSLV3_ALERT_CERTIFICATE_EXPIRED:
			case SSL_R_SSLV3_ALERT_CERTIFICATE_REVOKED:
			case SSL_R_SSLV3_ALERT_CERTIFICATE_UNKNOWN:
			case SSL_R_SSLV3_ALERT_UNSUPPORTED_CERTIFICATE:
			case SSL_R_TLSV1_ALERT_ACCESS_DENIED:
				if (t->has_cert)
				{
					snprintf(why, whylen,
							 "%s: the server refused the client certificate of rwlock.tls_cert_file (%s)",
							 stage, tls_reason(e, "?"));
					break;
				}
				/* FALLTHROUGH */
			default:
				snprintf(why, whylen, "%s: %s", stage, tls_reason(e, "unknown error"));
				break;
			case SSL_R_UNEXPECTED_EOF_WHILE_READING:
				snprintf(why, whylen, "%s: the server closed the connection", stage);
				break;
		}
	}
	/*
	 * A server that wants a client certificate it did not get (or does not
	 * accept) may just close the connection once the TLS 1.3 handshake is
	 * over, before answering anything, without an alert (Redis does).
	 */
	if (t->established && !t->got_data && t->cert_requested &&
		(sslerr == SSL_ERROR_SYSCALL || sslerr == SSL_ERROR_ZERO_RETURN ||
		 (sslerr == SSL_ERROR_SSL && reason == SSL_R_UNEXPECTED_EOF_WHILE_READING)))
	{
		if (t->has_cert)
			snprintf(why, whylen,
					 "TLS: the server closed the connection after the handshake: it did not accept the client certificate of rwlock.tls_cert_file");
		else
			snprintf(why, whylen,
					 "TLS: the server requires a client certificate, and closed the connection after the handshake; set rwlock.tls_cert_file and rwlock.tls_key_file");
	}
	t->failed = true;
	ERR_clear_error();
}

/*
 * Drive the handshake as far as the socket allows: 1 done, 0 not yet
 * (*wants: the socket event to wait for), -1 failed (*why).
 */
int
rw_tls_handshake(RwTls *t, uint32 *wants, char *why, size_t whylen)
{
	int			r;
	int			e;

	ERR_clear_error();
	errno = 0;
	r = SSL_connect(t->ssl);
	if (r == 1)
	{
		t->established = true;
		return 1;
	}
	e = SSL_get_error(t->ssl, r);
	if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE)
	{
		*wants = e == SSL_ERROR_WANT_READ ? WL_SOCKET_READABLE : WL_SOCKET_WRITEABLE;
		ERR_clear_error();
		return 0;
	}
	tls_explain(t, r, e, errno, why, whylen);
	return -1;
}

/*
 * Read what the socket has: bytes read, 0 if it would block (see
 * rw_tls_wait_events), -1 on failure or end of stream (*why).
 */
ssize_t
rw_tls_read(RwTls *t, char *buf, size_t len, char *why, size_t whylen)
{
	int			n;
	int			e;

	ERR_clear_error();
	errno = 0;
	n = SSL_read(t->ssl, buf, (int) Min(len, INT_MAX));
	t->read_wants_write = false;
	if (n > 0)
	{
		t->got_data = true;
		return n;
	}
	e = SSL_get_error(t->ssl, n);
	if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE)
	{
		t->read_wants_write = e == SSL_ERROR_WANT_WRITE;
		ERR_clear_error();
		return 0;
	}
	tls_explain(t, n, e, errno, why, whylen);
	return -1;
}

/* Write what the socket takes: bytes written, 0 would block, -1 failed. */
ssize_t
rw_tls_write(RwTls *t, const char *buf, size_t len, char *why, size_t whylen)
{
	int			n;
	int			e;

	ERR_clear_error();
	errno = 0;
	n = SSL_write(t->ssl, buf, (int) Min(len, INT_MAX));
	t->write_wants_read = false;
	if (n > 0)
		return n;
	e = SSL_get_error(t->ssl, n);
	if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE)
	{
		t->write_wants_read = e == SSL_ERROR_WANT_READ;
		ERR_clear_error();
		return 0;
	}
	tls_explain(t, n, e, errno, why, whylen);
	return -1;
}

/*
 * The socket event to wait for to go on reading (events readable) or
 * writing (writeable): TLS may need the other one.
 */
uint32
rw_tls_wait_events(RwTls *t, uint32 events)
{
	if (events == WL_SOCKET_WRITEABLE && t->write_wants_read)
		return WL_SOCKET_READABLE;
	if (events == WL_SOCKET_READABLE && t->read_wants_write)
		return WL_SOCKET_WRITEABLE;
	return events;
}

/* Whether TLS holds bytes already read from the socket but not returned. */
bool
rw_tls_pending(RwTls *t)
{
	return SSL_pending(t->ssl) > 0 || SSL_has_pending(t->ssl);
}

/* Whether the server has sent anything at all (for a stalled handshake). */
bool
rw_tls_heard_from_server(RwTls *t)
{
	BIO		   *rbio = SSL_get_rbio(t->ssl);

	return rbio != NULL && BIO_number_read(rbio) > 0;
}

/*
 * End TLS: a close_notify if the connection is sound (what the socket
 * takes now, no waiting), then free. The socket is closed by the caller.
 */
void
rw_tls_close(RwTls *t)
{
	if (t == NULL)
		return;
	ERR_clear_error();
	if (t->established && !t->failed)
		(void) SSL_shutdown(t->ssl);
	SSL_free(t->ssl);
	ERR_clear_error();
	free(t);
}
