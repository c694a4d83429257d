/* gw_disk.c: the worker of gw_disk.h. Two intrusive FIFO lists under one
 * mutex: jobs to run and jobs done; the worker sleeps on a condition
 * variable while nothing is queued. Each job carries its own run function
 * (restore, fork, save, cut). */
#include "gateway/gw_disk.h"

#include <libwebsockets.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

typedef struct job job;
/* What a job does on the worker: its engine call, its answer into err, diag and out. */
typedef void (*job_run)(gw_disk *d, job *j);

struct job {
    job_run run;
    fg_engine_t *engine;            /* restore */
    fg_session_params p;            /* restore, fork: name and tenant_name point into the copies below */
    char name[65], tenant_name[65];
    fg_session_t *src;              /* save: its session; fork: the source */
    fg_session_t *out;              /* restore, fork: the new session */
    int keep, expect;               /* cut: tokens to keep (-1: none), the cache's length it expects after */
    int32_t *tail;                  /* cut: the input to queue once cut as expected [n_tail] */
    int n_tail;
    void *meta;                     /* cut: the record to set once cut as expected */
    size_t meta_len;
    fg_err cut_err;                 /* cut: the cut's answer (err: the save's) */
    fg_err err;
    fg_diag diag;
    gw_disk_done done;
    gw_disk_cut_done cut_done;      /* cut: called instead of done */
    void *user;
    struct job *next;
};

struct gw_disk {
    struct lws_context *ctx;
    char *gate;                     /* tests only: the jobs that read a file wait for this one */
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    job *todo, *todo_tail;          /* [mu] */
    job *done, *done_tail;          /* [mu] */
    bool stop;                      /* [mu] */
};

static void push(job **head, job **tail, job *j)
{
    j->next = NULL;
    if (*tail)
        (*tail)->next = j;
    else
        *head = j;
    *tail = j;
}

static job *pop(job **head, job **tail)
{
    job *j = *head;
    if (j && !(*head = j->next))
        *tail = NULL;
    return j;
}

/* Tests only: holds a restore, a fork or a cut until the gate file exists
 * (false: it runs) or the worker stops (true: it is not run, FG_ERR_STATE). */
static bool held(gw_disk *d, job *j)
{
    if (!d->gate)
        return false;
    for (;;) {
        pthread_mutex_lock(&d->mu);
        const bool stop = d->stop;
        pthread_mutex_unlock(&d->mu);
        if (stop) {
            j->err = fg_diag_set(&j->diag, FG_ERR_STATE, "the server stopped before the session file was read");
            return true;
        }
        if (access(d->gate, F_OK) == 0)
            return false;
        const struct timespec ts = {0, 10 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
}

static void run_restore(gw_disk *d, job *j)
{
    if (!held(d, j))
        j->err = fg_session_restore(j->engine, &j->p, &j->out, &j->diag);
}

static void run_fork(gw_disk *d, job *j)
{
    if (!held(d, j))
        j->err = fg_session_fork(j->src, &j->p, &j->out, &j->diag);
}

static void run_save(gw_disk *d, job *j)
{
    (void)d;
    j->err = fg_session_save(j->src, &j->diag);
}

static void run_cut(gw_disk *d, job *j)
{
    if (held(d, j)) {
        j->cut_err = j->err;
        return;
    }
    if (j->keep < 0) {
        j->cut_err = FG_ERR_UNSUPPORTED; /* only the save was asked for */
    } else if ((j->cut_err = fg_session_truncate(j->src, j->keep, &j->diag)) == FG_OK) {
        if (fg_session_length(j->src) != j->expect)
            j->cut_err = fg_diag_set(&j->diag, FG_ERR_STATE, "the cache held %d tokens after the cut, not %d",
                                     fg_session_length(j->src), j->expect);
        if (j->cut_err == FG_OK && j->n_tail)
            j->cut_err = fg_session_append(j->src, j->tail, j->n_tail, &j->diag);
        if (j->cut_err == FG_OK)
            j->cut_err = fg_session_set_meta(j->src, j->meta, j->meta_len, &j->diag);
    }
    fg_diag save = {{0}};
    j->err = fg_session_save(j->src, &save);
    if (j->cut_err == FG_OK && j->err != FG_OK)
        j->diag = save;
}

static void *worker(void *arg)
{
    gw_disk *d = arg;
    pthread_mutex_lock(&d->mu);
    for (;;) {
        while (!d->todo && !d->stop)
            pthread_cond_wait(&d->cv, &d->mu);
        job *j = d->stop ? NULL : pop(&d->todo, &d->todo_tail);
        if (!j)
            break;
        pthread_mutex_unlock(&d->mu);
        memset(&j->diag, 0, sizeof j->diag);
        j->run(d, j);
        pthread_mutex_lock(&d->mu);
        push(&d->done, &d->done_tail, j);
        lws_cancel_service(d->ctx); /* the one lws call other threads may make */
    }
    pthread_mutex_unlock(&d->mu);
    return NULL;
}

gw_disk *gw_disk_new(struct lws_context *ctx, const char *gate_file)
{
    gw_disk *d = calloc(1, sizeof *d);
    if (!d)
        return NULL;
    d->ctx = ctx;
    if (gate_file && gate_file[0] && !(d->gate = strdup(gate_file))) {
        free(d);
        return NULL;
    }
    pthread_mutex_init(&d->mu, NULL);
    pthread_cond_init(&d->cv, NULL);
    if (pthread_create(&d->thread, NULL, worker, d) != 0) {
        pthread_cond_destroy(&d->cv);
        pthread_mutex_destroy(&d->mu);
        free(d->gate);
        free(d);
        return NULL;
    }
    return d;
}

static fg_err queue(gw_disk *d, job *j)
{
    pthread_mutex_lock(&d->mu);
    push(&d->todo, &d->todo_tail, j);
    pthread_cond_signal(&d->cv);
    pthread_mutex_unlock(&d->mu);
    return FG_OK;
}

/* A job with a copy of p's strings (restore, fork). */
static job *job_with_params(job_run run, const fg_session_params *p, gw_disk_done done, void *user)
{
    job *j = calloc(1, sizeof *j);
    if (!j)
        return NULL;
    *j = (job){.run = run, .p = *p, .done = done, .user = user};
    snprintf(j->name, sizeof j->name, "%s", p->name ? p->name : "");
    snprintf(j->tenant_name, sizeof j->tenant_name, "%s", p->tenant_name ? p->tenant_name : "");
    j->p.name = p->name ? j->name : NULL;
    j->p.tenant_name = p->tenant_name ? j->tenant_name : NULL;
    return j;
}

fg_err gw_disk_restore(gw_disk *d, fg_engine_t *e, const fg_session_params *p, gw_disk_done done, void *user)
{
    job *j = job_with_params(run_restore, p, done, user);
    if (!j)
        return FG_ERR_NOMEM;
    j->engine = e;
    return queue(d, j);
}

fg_err gw_disk_fork(gw_disk *d, fg_session_t *src, const fg_session_params *p, gw_disk_done done, void *user)
{
    job *j = job_with_params(run_fork, p, done, user);
    if (!j)
        return FG_ERR_NOMEM;
    j->src = src;
    return queue(d, j);
}

fg_err gw_disk_save(gw_disk *d, fg_session_t *s, gw_disk_done done, void *user)
{
    job *j = calloc(1, sizeof *j);
    if (!j)
        return FG_ERR_NOMEM;
    *j = (job){.run = run_save, .src = s, .done = done, .user = user};
    return queue(d, j);
}

fg_err gw_disk_cut(gw_disk *d, fg_session_t *s, int keep, int expect, const int32_t *tail, int n_tail,
                   const void *meta, size_t meta_len, gw_disk_cut_done done, void *user)
{
    job *j = calloc(1, sizeof *j);
    if (!j || (meta_len && !(j->meta = malloc(meta_len))) ||
        (n_tail > 0 && !(j->tail = malloc((size_t)n_tail * sizeof *tail)))) {
        if (j)
            free(j->meta);
        free(j);
        return FG_ERR_NOMEM;
    }
    if (meta_len)
        memcpy(j->meta, meta, meta_len);
    if (n_tail > 0)
        memcpy(j->tail, tail, (size_t)n_tail * sizeof *tail);
    j->n_tail = n_tail > 0 ? n_tail : 0;
    j->run = run_cut;
    j->src = s;
    j->keep = keep;
    j->expect = expect;
    j->meta_len = meta_len;
    j->cut_done = done;
    j->user = user;
    return queue(d, j);
}

/* Hands a job's answer over (may queue more) and frees it. */
static void finish(job *j)
{
    if (j->cut_done)
        j->cut_done(j->user, j->cut_err, j->err, &j->diag);
    else
        j->done(j->user, j->out, j->err, &j->diag);
    free(j->meta);
    free(j->tail);
    free(j);
}

void gw_disk_poll(gw_disk *d)
{
    for (;;) {
        pthread_mutex_lock(&d->mu);
        job *j = pop(&d->done, &d->done_tail);
        pthread_mutex_unlock(&d->mu);
        if (!j)
            return;
        finish(j);
    }
}

void gw_disk_free(gw_disk *d)
{
    if (!d)
        return;
    pthread_mutex_lock(&d->mu);
    d->stop = true;
    pthread_cond_signal(&d->cv);
    pthread_mutex_unlock(&d->mu);
    pthread_join(d->thread, NULL);
    gw_disk_poll(d);
    job *j;
    while ((j = pop(&d->todo, &d->todo_tail))) { /* never run */
        snprintf(j->diag.msg, sizeof j->diag.msg, "the server stopped before the job ran");
        j->out = NULL;
        j->err = j->cut_err = FG_ERR_STATE;
        finish(j);
    }
    pthread_cond_destroy(&d->cv);
    pthread_mutex_destroy(&d->mu);
    free(d->gate);
    free(d);
}
