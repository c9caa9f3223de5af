/*
** commit.h: the daemon's group committer.
**
** With group commit on (fsmeta_group), metadata transactions that need not
** be durable accumulate in one open SQLite transaction. This thread commits
** it once it is COMMIT_EVERY_NS old: a crash of the daemon loses at most
** that much of what was not fsync'd, and thousands of small files share a
** pack sync and a WAL write per interval instead of one each. An fsync
** commits at once (fsmeta_begin durable).
*/
#ifndef CKPT_COMMIT_H
#define CKPT_COMMIT_H

#include "../fsmeta/fsmeta.h"

#include <stdint.h>

#define COMMIT_EVERY_NS 50000000LL /* 50 ms */

typedef struct committer committer;

/* Turn group commit on for m and start the thread. Before each commit it
** calls tick(ctx), unless tick is NULL: work to join the group. */
int committer_start(fsmeta *m, void (*tick)(void *), void *ctx, committer **out);
/* Stop it (NULL: nothing), commit what is open and turn group commit off. */
void committer_stop(committer *c);

#endif
