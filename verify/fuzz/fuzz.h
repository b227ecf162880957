/* fuzz.h: what the harnesses share (pg_stubs.c) */
#ifndef RW_FUZZ_H
#define RW_FUZZ_H

/* Free every palloc since the last call: after each input. */
extern void fuzz_reset(void);

#endif
