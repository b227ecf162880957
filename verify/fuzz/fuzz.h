/* fuzz.h: what the harnesses share (pg_stubs.c) */
#ifndef RW_FUZZ_H
#define RW_FUZZ_H

/* Free every palloc since the last call: after each input. */
extern void fuzz_reset(void);

/* How many pallocs are not freed yet. */
extern int	fuzz_live_chunks(void);

#endif
