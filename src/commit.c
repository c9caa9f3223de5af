/*
** commit.c: the group committer (see commit.h).
*/
#include "commit.h"
#include "common.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct committer {
    fsmeta *m;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int stop;
    void (*tick)(void *);
    void *ctx;
};

static void *commit_loop(void *arg)
{
    committer *c = arg;
    pthread_mutex_lock(&c->mu);
    while (!c->stop) {
        struct timespec t;
        clock_gettime(CLOCK_MONOTONIC, &t);
        t.tv_nsec += COMMIT_EVERY_NS / 2;
        t.tv_sec += t.tv_nsec / 1000000000L;
        t.tv_nsec %= 1000000000L;
        pthread_cond_timedwait(&c->cv, &c->mu, &t);
        pthread_mutex_unlock(&c->mu);
        if (c->tick) c->tick(c->ctx);
        int rc = fsmeta_flush(c->m, COMMIT_EVERY_NS);
        if (rc < 0) ck_log(CK_LOG_ERR, "group commit failed: %s", strerror(-rc));
        pthread_mutex_lock(&c->mu);
    }
    pthread_mutex_unlock(&c->mu);
    return NULL;
}

int committer_start(fsmeta *m, void (*tick)(void *), void *ctx, committer **out)
{
    committer *c = calloc(1, sizeof *c);
    if (!c) return -ENOMEM;
    c->m = m;
    c->tick = tick;
    c->ctx = ctx;
    pthread_mutex_init(&c->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&c->cv, &ca);
    pthread_condattr_destroy(&ca);
    fsmeta_group(m, 1);
    int rc = pthread_create(&c->thread, NULL, commit_loop, c);
    if (rc != 0) {
        fsmeta_group(m, 0);
        pthread_cond_destroy(&c->cv);
        pthread_mutex_destroy(&c->mu);
        free(c);
        return -rc;
    }
    *out = c;
    return 0;
}

void committer_stop(committer *c)
{
    if (!c) return;
    pthread_mutex_lock(&c->mu);
    c->stop = 1;
    pthread_cond_signal(&c->cv);
    pthread_mutex_unlock(&c->mu);
    pthread_join(c->thread, NULL);
    int rc = fsmeta_group(c->m, 0);
    if (rc < 0) ck_log(CK_LOG_ERR, "final group commit failed: %s", strerror(-rc));
    pthread_cond_destroy(&c->cv);
    pthread_mutex_destroy(&c->mu);
    free(c);
}
