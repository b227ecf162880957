/*-------------------------------------------------------------------------
 *
 * rwlock.h
 *	  Declarations shared by the files of the rwlock extension: distributed
 *	  read/write locks held in Redis, taken and released from SQL.
 *
 * The pieces, bottom up:
 *	  guc.c        settings (rwlock.*) and their validation
 *	  redis_conn.c connections to Redis nodes, driven through the latch
 *	  scripts.c    the protocol's Lua scripts (generated from lua/) and how
 *	               they are run: EVALSHA, falling back to EVAL
 *	  protocol.c   one function per script: keys, arguments, reply checking
 *	  waiting.c    waiting for a busy lock: wake-ups, timeouts, cancellation
 *	  held.c       the table of this session's holds, stacking, transaction
 *	               callbacks, renewal, release at exit
 *	  keeper.c     the background worker that renews leases, and the shared
 *	               memory where sessions publish their holds (only with
 *	               rwlock in shared_preload_libraries); redis_locks and
 *	               redis_renew()
 *	  functions.c  the SQL-callable functions
 *
 *-------------------------------------------------------------------------
 */
#ifndef RWLOCK_H
#define RWLOCK_H

#include "postgres.h"

#include <hiredis/hiredis.h>

#include "datatype/timestamp.h"
#include "storage/latch.h"

#define RW_PROTOCOL_VERSION "2"
#define RW_NAME_MAX			1024	/* bytes of a lock name */
#define RW_PREFIX_MAX		64		/* bytes of rwlock.key_prefix */
#define RW_URL_MAX			1024	/* bytes of rwlock.redis_url */
#define RW_OWNER_MAX		64		/* bytes of an owner id */
#define RW_INTENT_MS		2000	/* lease of a waiting writer's intent */
#define RW_KEEP_TOKEN_MS	600000	/* the last write token outlives a lock */

/* ---- guc.c ---- */
extern char *rw_redis_url;
extern char *rw_key_prefix;
extern int	rw_lease_ms;
extern int	rw_connect_timeout_ms;
extern int	rw_command_timeout_ms;
extern void rw_define_gucs(void);

/* ---- redis_conn.c ---- */

/* Where a node is, as parsed from a redis:// or unix:// URL. */
typedef struct RwEndpoint
{
	char	   *url;			/* as given, password included */
	char	   *display;		/* for messages: no password */
	bool		is_unix;
	char	   *host;
	int			port;
	char	   *path;
	char	   *user;			/* NULL: AUTH password only */
	char	   *password;		/* NULL: no AUTH */
	int			db;
} RwEndpoint;

/* A reply to a command sent by rw_send, and the connection it came on. */
typedef struct RwLate
{
	redisReply *reply;
	uint32		epoch;
} RwLate;

/* One connection to a node. */
typedef struct RwConn
{
	struct RwNode *node;
	redisContext *ctx;			/* NULL when closed */
	WaitEventSet *wes;			/* latch, postmaster death, our socket */
	int			sock_pos;		/* position of the socket event in wes */
	uint32		sock_events;	/* what the socket event waits for now */
	double		last_rtt_ms;
	bool		is_subscriber;
	uint32		epoch;			/* counts connections made */
	int			owed;			/* replies due to commands sent by rw_send */
	RwLate	   *late;			/* those replies, once read, oldest first */
	int			nlate;
	int			caplate;
} RwConn;

/*
 * A Redis server this session talks to. Each hold remembers its node, so a
 * change of rwlock.redis_url never strands a hold made on the old server;
 * future routing (Sentinel, Cluster, quorum) picks nodes per operation.
 */
typedef struct RwNode
{
	RwEndpoint	ep;
	RwConn		cmd;			/* lock commands */
	RwConn		sub;			/* pub/sub wake-ups, opened when first needed */
	int			nholds;			/* holds that live on this node */
	int			nsent;			/* releases sent, answers not read yet */
	struct RwNode *next;
} RwNode;

/* What went wrong in a Redis exchange, for callers that may not throw. */
typedef enum RwErrKind
{
	RW_OK = 0,
	RW_ERR_CONNECT,				/* could not connect, or AUTH/SELECT failed */
	RW_ERR_LOST,				/* connection lost while talking */
	RW_ERR_TIMEOUT,				/* rwlock.command_timeout ran out */
	RW_ERR_REPLY,				/* Redis answered with an error or nonsense */
} RwErrKind;

typedef struct RwError
{
	RwErrKind	kind;
	char		msg[256];
} RwError;

/* One conversation with one connection: commands appended, replies expected. */
typedef struct RwRequest
{
	RwConn	   *conn;
	int			nexpected;
	int			nreceived;
	redisReply **replies;		/* nexpected slots, filled in order */
	RwError		err;
} RwRequest;

/* flags for connecting and exchanging */
#define RW_NOTHROW			0x01	/* report errors in RwError, never ereport */
#define RW_INTERRUPTIBLE	0x02	/* may serve interrupts while connecting */

extern RwNode *rw_current_node(void);
extern RwNode *rw_first_node(void);
extern void rw_node_forget_if_unused(RwNode *node);
extern bool rw_parse_url(const char *url, RwEndpoint *ep, char **why);
extern bool rw_conn_ensure(RwConn *conn, int flags, RwError *err);
extern void rw_conn_close(RwConn *conn);
extern void rw_append(RwRequest *req, int argc, const char **argv, const size_t *lens);
extern bool rw_exchange(RwRequest *reqs, int nreqs, int flags);
extern bool rw_send(RwRequest *req, int flags);
extern int	rw_conn_take_late(RwConn *conn, RwLate **late);
extern void rw_request_free(RwRequest *req);
extern void rw_raise(RwConn *conn, const RwError *err) pg_attribute_noreturn();
extern bool rw_conn_wait_readable(RwConn *conn, long timeout_ms);
extern bool rw_conn_read_pending(RwConn *conn, redisReply **reply, RwError *err);
extern bool rw_conn_flush(RwConn *conn, RwError *err);

/* ---- scripts.c ---- */
typedef enum RwScriptId
{
	RW_SCRIPT_ACQUIRE,
	RW_SCRIPT_RELEASE,
	RW_SCRIPT_RENEW,
	RW_SCRIPT_INFO,
	RW_NSCRIPTS
} RwScriptId;

typedef struct RwScript
{
	const char *name;
	const char *sha1;			/* hex, computed at build time */
	const char *body;
} RwScript;

extern const RwScript rw_scripts[RW_NSCRIPTS];	/* generated */

#define RW_SCRIPT_MAXARGS 12

/* One script call, as EVALSHA; rw_script_run turns it into EVAL if need be. */
typedef struct RwScriptCall
{
	RwScriptId	id;
	int			argc;
	const char *argv[RW_SCRIPT_MAXARGS];
	size_t		lens[RW_SCRIPT_MAXARGS];
	char		numkeys[4];
} RwScriptCall;

extern void rw_script_prepare(RwScriptCall *call, RwScriptId id, int nkeys,
							  const char *const *keys, const size_t *keylens,
							  int nargs, const char *const *args);
extern bool rw_script_run(RwConn *conn, RwScriptCall *calls, int ncalls,
						  redisReply **replies, int flags, RwError *err);
extern bool rw_script_send(RwConn *conn, RwScriptCall *call, int flags,
						   RwError *err);

/* ---- protocol.c ---- */

/* The Redis keys of one lock; all share one cluster hash slot. */
typedef struct RwKeys
{
	char	   *key[3];			/* hash, readers, intents */
	size_t		len[3];
	char	   *channel;		/* wake-ups are published here */
	size_t		channel_len;
} RwKeys;

typedef enum RwAcquireStatus
{
	RW_GRANTED,
	RW_BUSY,
	RW_UPGRADE_CONFLICT,
} RwAcquireStatus;

typedef struct RwLockInfo
{
	char		state[8];		/* free, read, write */
	int64		token;
	char	   *writer;			/* NULL if none */
	int64		writer_ms;
	int			nreaders;
	char	  **readers;
	int64	   *reader_ms;
	int			nwaiting;
	char	  **waiting;
	int64	   *waiting_ms;
} RwLockInfo;

extern const char *rw_owner_id(void);
extern void rw_build_keys(const char *prefix, const char *name, RwKeys *keys,
						  MemoryContext cxt);
extern RwAcquireStatus rw_proto_acquire(RwConn *conn, const RwKeys *keys,
										char mode, int lease_ms, int intent_ms,
										int64 *result, char **other);
extern void rw_free_keys(RwKeys *keys);
extern int	rw_proto_release(RwConn *conn, const RwKeys *keys, char keep,
							 int lease_ms, int flags, RwError *err);
extern bool rw_proto_release_send(RwConn *conn, const RwKeys *keys,
								  RwError *err);
extern int	rw_proto_release_result(RwConn *conn, redisReply *r, int flags,
									RwError *err);
extern bool rw_proto_renew_batch(RwConn *conn, RwKeys **keys,
								 const int *lease_ms, int n, int *held,
								 int flags, RwError *err);
extern bool rw_proto_renew_owners(RwConn *conn, RwKeys **keys,
								  const char *const *owners,
								  const int *lease_ms, int n, int *held,
								  int flags, RwError *err);
extern void rw_proto_info(RwConn *conn, const RwKeys *keys, RwLockInfo *info);

/* ---- waiting.c ---- */
extern bool rw_wait_acquire(RwNode *node, const RwKeys *keys, const char *name,
							char mode, char held_mode, long timeout_ms,
							bool timeout_is_error, int64 *token);
extern void rw_abandon_wait(void);

/* ---- held.c ---- */
typedef enum RwLevel
{
	RW_SESSION,
	RW_XACT
} RwLevel;

extern void rw_held_init(void);
extern void rw_held_settle(void);
extern void rw_defer_release(RwNode *node, const RwKeys *keys, char keep);
extern bool rw_lock(const char *name, char mode, RwLevel level,
					long wait_ms, bool is_try, int64 *token);
extern bool rw_unlock(const char *name);
extern int	rw_unlock_all(void);
extern int	rw_renew_due(bool all, int *nlost);
extern void rw_check_name(text *name, char *buf);

/* A row of redis_held_locks */
typedef struct RwHeldRow
{
	char	   *name;
	char		mode;
	RwLevel		level;
	int			depth;
	int64		token;
	TimestampTz acquired;
	bool		lost;
	TimestampTz lease_until;
} RwHeldRow;
extern int	rw_held_rows(RwHeldRow **rows);

/* ---- keeper.c ---- */
extern void rw_keeper_init(void);
extern bool rw_keeper_running(void);
extern int	rw_keeper_publish(int slot, const char *name, const char *url,
							  const char *key, const char *owner, int64 token,
							  TimestampTz acquired, TimestampTz renewed,
							  int lease_ms);
extern void rw_keeper_unpublish(int slot);
extern void rw_keeper_set_modes(int slot, char session_mode, char xact_mode);
extern bool rw_keeper_state(int slot, TimestampTz *renewed);
extern void rw_keeper_renewed(int slot, TimestampTz renewed, bool lost);

#endif							/* RWLOCK_H */
