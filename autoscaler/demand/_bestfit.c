/* autoscaler.demand._bestfit: the bounded best fit of autoscaler/demand/packing.py, compiled.
 *
 * best_fit(order, runs, cap, open_new) -> (opened, left) is packing._best_fit_py, step for step: the
 * same rooms index (per free-CPU count the rooms (memory, GPUs) sorted, with their count of identical
 * bins; the free-CPU counts present sorted), the same choice of rooms, the same merges, the same answer.
 * Python's is the reference (tests/unit/test_bestfit_native.py compares the two on random and recorded
 * cases). Inputs it cannot hold exactly (a number outside [-2**62, 2**62], a node of more than MAX_CPUS
 * free CPUs, a piece of no CPU) raise OverflowError; packing.py then takes the Python path.
 * Holds the GIL throughout; no state outlives a call.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef int64_t i64;

#define LIMIT (((i64)1) << 62)
#define MAX_CPUS (((i64)1) << 16) /* free CPUs of one room at most (the index is an array by CPUs) */
#define MAX_COUNT (((i64)1) << 31) /* nodes of one job, jobs of one run at most */

typedef struct { i64 m, g, cnt; } Room;       /* rooms of one free-CPU count, sorted by (m, g) */
typedef struct { Room *a; i64 len, cap; } Rooms;
typedef struct { i64 c, m, g, take; } Chosen;

typedef struct {
    Rooms *by_cpus;   /* index: free CPUs (1..MAX_CPUS) */
    i64 n_by_cpus;    /* allocated entries of by_cpus */
    i64 *cpus;        /* the free-CPU counts present, sorted */
    i64 n_cpus, cap_cpus;
    int failed;       /* out of memory */
} Index;

static i64 lower_room(const Rooms *v, i64 m, i64 g) /* first index with (m', g') >= (m, g) */
{
    i64 lo = 0, hi = v->len;
    while (lo < hi) {
        i64 mid = (lo + hi) >> 1;
        const Room *e = &v->a[mid];
        if (e->m < m || (e->m == m && e->g < g)) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

static i64 lower_cpus(const Index *x, i64 c) /* first index of x->cpus >= c */
{
    i64 lo = 0, hi = x->n_cpus;
    while (lo < hi) {
        i64 mid = (lo + hi) >> 1;
        if (x->cpus[mid] < c) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

static int reserve(void **a, i64 *cap, i64 want, size_t size)
{
    if (want <= *cap) return 1;
    i64 n = *cap ? *cap : 16;
    while (n < want) n *= 2;
    void *p = realloc(*a, (size_t)n * size);
    if (!p) return 0;
    *a = p;
    *cap = n;
    return 1;
}

/* Add cnt bins of room (c, m, g); no bins, or a room of no CPU (takes no piece ever): nothing (as
 * _Rooms.put). */
static void put(Index *x, i64 c, i64 m, i64 g, i64 cnt)
{
    if (c <= 0 || cnt <= 0 || x->failed) return;
    if (c >= x->n_by_cpus) {
        i64 n = x->n_by_cpus ? x->n_by_cpus : 64;
        while (n <= c) n *= 2;
        Rooms *p = realloc(x->by_cpus, (size_t)n * sizeof(Rooms));
        if (!p) { x->failed = 1; return; }
        memset(p + x->n_by_cpus, 0, (size_t)(n - x->n_by_cpus) * sizeof(Rooms));
        x->by_cpus = p;
        x->n_by_cpus = n;
    }
    Rooms *v = &x->by_cpus[c];
    i64 i = lower_room(v, m, g);
    if (i < v->len && v->a[i].m == m && v->a[i].g == g) {
        v->a[i].cnt += cnt;
        return;
    }
    if (!reserve((void **)&v->a, &v->cap, v->len + 1, sizeof(Room))) { x->failed = 1; return; }
    memmove(&v->a[i + 1], &v->a[i], (size_t)(v->len - i) * sizeof(Room));
    v->a[i].m = m;
    v->a[i].g = g;
    v->a[i].cnt = cnt;
    if (++v->len == 1) { /* a free-CPU count now present */
        if (!reserve((void **)&x->cpus, &x->cap_cpus, x->n_cpus + 1, sizeof(i64))) { x->failed = 1; return; }
        i64 j = lower_cpus(x, c);
        memmove(&x->cpus[j + 1], &x->cpus[j], (size_t)(x->n_cpus - j) * sizeof(i64));
        x->cpus[j] = c;
        x->n_cpus++;
    }
}

/* Take cnt bins of the room (c, m, g), which holds at least that many (as _Rooms.take). */
static void take(Index *x, i64 c, i64 m, i64 g, i64 cnt)
{
    Rooms *v = &x->by_cpus[c];
    i64 i = lower_room(v, m, g);
    if ((v->a[i].cnt -= cnt)) return;
    memmove(&v->a[i], &v->a[i + 1], (size_t)(v->len - i - 1) * sizeof(Room));
    if (--v->len == 0) {
        i64 j = lower_cpus(x, c);
        memmove(&x->cpus[j], &x->cpus[j + 1], (size_t)(x->n_cpus - j - 1) * sizeof(i64));
        x->n_cpus--;
    }
}

static i64 count_of(const Index *x, i64 c, i64 m, i64 g)
{
    const Rooms *v = &x->by_cpus[c];
    return v->a[lower_room(v, m, g)].cnt;
}

/* How many pieces (pc, pm, pg) a room (c, m, g) takes; all non-negative, pc >= 1 (as packing._fit). */
static i64 fit(i64 c, i64 m, i64 g, i64 pc, i64 pm, i64 pg)
{
    i64 f = c / pc;
    if (pm && m / pm < f) f = m / pm;
    if (pg && g / pg < f) f = g / pg;
    return f;
}

static int read_int(PyObject *o, i64 lo, i64 hi, i64 *out)
{
    long long v = PyLong_AsLongLong(o);
    if (v == -1 && PyErr_Occurred()) return 0;
    if (v < lo || v > hi) {
        PyErr_SetString(PyExc_OverflowError, "best_fit: a number outside what the compiled path holds");
        return 0;
    }
    *out = (i64)v;
    return 1;
}

static void release(Index *x)
{
    for (i64 c = 0; c < x->n_by_cpus; c++) free(x->by_cpus[c].a);
    free(x->by_cpus);
    free(x->cpus);
}

/* A run of identical jobs: nodes, and per node CPUs, memory, GPUs; jobs. Validated on the way in. */
typedef struct { i64 n, pc, pm, pg, k; } Run;

static int check_run(Run *r)
{
    if (r->n < 1 || r->n > MAX_COUNT || r->pc < 1 || r->pc > MAX_CPUS || r->pm < 0 || r->pm > LIMIT
        || r->pg < 0 || r->pg > LIMIT || r->k < 0 || r->k > MAX_COUNT) {
        PyErr_SetString(PyExc_OverflowError, "best_fit: a number outside what the compiled path holds");
        return 0;
    }
    if (r->n * r->k > MAX_COUNT) { /* pieces of one run: bounds every count and sum below 2**62 */
        PyErr_SetString(PyExc_OverflowError, "best_fit: a run of more pieces than the compiled path holds");
        return 0;
    }
    return 1;
}

/* Bins from runs [cpus, memory, gpus, count] into the index. */
static int read_bins(PyObject *runs_in, Index *x)
{
    PyObject *runs = PySequence_Fast(runs_in, "best_fit: runs must be iterable");
    if (!runs) return 0;
    Py_ssize_t n_runs = PySequence_Fast_GET_SIZE(runs);
    for (Py_ssize_t b = 0; b < n_runs; b++) {
        PyObject *run = PySequence_Fast(PySequence_Fast_GET_ITEM(runs, b), "best_fit: a run must be a sequence");
        if (!run) { Py_DECREF(runs); return 0; }
        i64 c, m, g, cnt;
        int ok = PySequence_Fast_GET_SIZE(run) == 4;
        if (!ok) PyErr_SetString(PyExc_TypeError, "best_fit: a run is [cpus, memory, gpus, count]");
        ok = ok && read_int(PySequence_Fast_GET_ITEM(run, 0), -LIMIT, MAX_CPUS, &c)
             && read_int(PySequence_Fast_GET_ITEM(run, 1), -LIMIT, LIMIT, &m)
             && read_int(PySequence_Fast_GET_ITEM(run, 2), -LIMIT, LIMIT, &g)
             && read_int(PySequence_Fast_GET_ITEM(run, 3), -LIMIT, MAX_COUNT, &cnt);
        Py_DECREF(run);
        if (!ok) { Py_DECREF(runs); return 0; }
        put(x, c, m, g, cnt);
    }
    Py_DECREF(runs);
    return 1;
}

static int read_cap(PyObject *cap_in, i64 *cc, i64 *cm, i64 *cg)
{
    if (!PyTuple_Check(cap_in) || PyTuple_GET_SIZE(cap_in) != 3) {
        PyErr_SetString(PyExc_TypeError, "best_fit: cap must be a tuple (cpus, memory, gpus)");
        return 0;
    }
    return read_int(PyTuple_GET_ITEM(cap_in, 0), 1, MAX_CPUS, cc) && read_int(PyTuple_GET_ITEM(cap_in, 1), 0, LIMIT, cm)
           && read_int(PyTuple_GET_ITEM(cap_in, 2), 0, LIMIT, cg);
}

/* The best fit of the runs, in order, into x (and new bins if open_new): packing._best_fit_py. Returns
 * (opened, [jobs left per run]) or NULL with an exception set. */
static PyObject *place(Index *x, const Run *order, i64 n_order, i64 cc, i64 cm, i64 cg, int open_new)
{
    Chosen *chosen = NULL;
    i64 cap_chosen = 0, opened = 0;
    PyObject *left = PyList_New((Py_ssize_t)n_order), *result = NULL;
    if (!left) return NULL;
    for (i64 r = 0; r < n_order; r++) {
        const i64 n = order[r].n, pc = order[r].pc, pm = order[r].pm, pg = order[r].pg;
        i64 k = order[r].k;
        i64 per_fresh = fit(cc, cm, cg, pc, pm, pg);
        if (per_fresh < 1) per_fresh = 1;
        while (k) {
            /* the n best rooms (a room stands for its count of identical bins) */
            i64 found = 0, t = k, n_chosen = 0;
            for (i64 ci = lower_cpus(x, pc); ci < x->n_cpus && found < n; ci++) {
                i64 c = x->cpus[ci];
                const Rooms *v = &x->by_cpus[c];
                if (v->a[v->len - 1].m < pm) continue;
                for (i64 i = lower_room(v, pm, pg); i < v->len && found < n; i++) {
                    const Room *e = &v->a[i];
                    if (e->g < pg) continue;
                    i64 tk = e->cnt < n - found ? e->cnt : n - found;
                    if (!reserve((void **)&chosen, &cap_chosen, n_chosen + 1, sizeof(Chosen))) {
                        PyErr_NoMemory();
                        goto done;
                    }
                    chosen[n_chosen++] = (Chosen){c, e->m, e->g, tk};
                    found += tk;
                    i64 f = fit(c, e->m, e->g, pc, pm, pg);
                    if (f < t) t = f;
                }
            }
            if (found < n && !open_new) break; /* the job does not fit: place none of its pieces */
            if (!found) { /* nothing takes a piece: rounds of per_fresh jobs on n new bins */
                i64 rounds = k / per_fresh, rest = k % per_fresh;
                if (rounds) put(x, cc - per_fresh * pc, cm - per_fresh * pm, cg - per_fresh * pg, rounds * n);
                if (rest) put(x, cc - rest * pc, cm - rest * pm, cg - rest * pg, n);
                opened += (rounds + (rest ? 1 : 0)) * n;
                k = 0;
                break;
            }
            if (found < n && per_fresh < t) t = per_fresh;
            if (n == 1) { /* one-node pieces: every bin of the best room takes t */
                i64 have = count_of(x, chosen[0].c, chosen[0].m, chosen[0].g);
                chosen[0].take = have < k / t ? have : k / t;
                n_chosen = 1;
            }
            for (i64 j = 0; j < n_chosen; j++) {
                take(x, chosen[j].c, chosen[j].m, chosen[j].g, chosen[j].take);
                put(x, chosen[j].c - t * pc, chosen[j].m - t * pm, chosen[j].g - t * pg, chosen[j].take);
            }
            if (found < n) {
                put(x, cc - t * pc, cm - t * pm, cg - t * pg, n - found);
                opened += n - found;
            }
            k -= n == 1 ? t * chosen[0].take : t;
            if (x->failed) break;
        }
        if (x->failed) {
            PyErr_NoMemory();
            goto done;
        }
        PyObject *k_left = PyLong_FromLongLong(k);
        if (!k_left) goto done;
        PyList_SET_ITEM(left, (Py_ssize_t)r, k_left);
    }
    result = Py_BuildValue("(LO)", (long long)opened, left);
done:
    Py_DECREF(left);
    free(chosen);
    return result;
}

static PyObject *best_fit(PyObject *self, PyObject *args)
{
    PyObject *order_in, *runs_in, *cap_in;
    int open_new;
    (void)self;
    if (!PyArg_ParseTuple(args, "OOOp", &order_in, &runs_in, &cap_in, &open_new)) return NULL;
    i64 cc, cm, cg;
    if (!read_cap(cap_in, &cc, &cm, &cg)) return NULL;
    PyObject *order = PySequence_Fast(order_in, "best_fit: order must be a sequence");
    if (!order) return NULL;
    Py_ssize_t n_order = PySequence_Fast_GET_SIZE(order);
    Index x = {0};
    PyObject *result = NULL;
    Run *runs = malloc(((size_t)n_order + 1) * sizeof(Run));
    if (!runs) { PyErr_NoMemory(); goto done; }
    for (Py_ssize_t r = 0; r < n_order; r++) {
        PyObject *item = PySequence_Fast_GET_ITEM(order, r), *piece;
        if (!PyTuple_Check(item) || PyTuple_GET_SIZE(item) != 2 || !PyTuple_Check(piece = PyTuple_GET_ITEM(item, 0))
            || PyTuple_GET_SIZE(piece) != 4) {
            PyErr_SetString(PyExc_TypeError, "best_fit: order holds ((nodes, cpus, memory, gpus), jobs)");
            goto done;
        }
        Run *run = &runs[r];
        if (!read_int(PyTuple_GET_ITEM(piece, 0), 1, MAX_COUNT, &run->n)
            || !read_int(PyTuple_GET_ITEM(piece, 1), 1, MAX_CPUS, &run->pc)
            || !read_int(PyTuple_GET_ITEM(piece, 2), 0, LIMIT, &run->pm)
            || !read_int(PyTuple_GET_ITEM(piece, 3), 0, LIMIT, &run->pg)
            || !read_int(PyTuple_GET_ITEM(item, 1), 0, MAX_COUNT, &run->k) || !check_run(run))
            goto done;
    }
    if (!read_bins(runs_in, &x)) goto done;
    result = place(&x, runs, n_order, cc, cm, cg, open_new);
done:
    free(runs);
    Py_DECREF(order);
    release(&x);
    return result;
}

/* One int64 column: a C-contiguous buffer of 8-byte signed integers (numpy int64). */
static int get_column(PyObject *o, Py_buffer *view, Py_ssize_t *len)
{
    if (PyObject_GetBuffer(o, view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) return 0;
    const char *f = view->format ? view->format : "B";
    if (f[0] == '<' || f[0] == '=' || f[0] == '@') f++;
    if (view->ndim != 1 || view->itemsize != 8 || (strcmp(f, "q") && strcmp(f, "l"))) {
        PyErr_SetString(PyExc_TypeError, "best_fit_columns: columns must be int64 arrays");
        PyBuffer_Release(view);
        return 0;
    }
    *len = view->shape[0];
    return 1;
}

static PyObject *best_fit_columns(PyObject *self, PyObject *args)
{
    PyObject *cols[5], *runs_in, *cap_in;
    int open_new;
    (void)self;
    if (!PyArg_ParseTuple(args, "OOOOOOOp", &cols[0], &cols[1], &cols[2], &cols[3], &cols[4], &runs_in, &cap_in,
                          &open_new))
        return NULL;
    i64 cc, cm, cg;
    if (!read_cap(cap_in, &cc, &cm, &cg)) return NULL;
    Py_buffer views[5];
    int got = 0;
    Py_ssize_t n_order = -1;
    Index x = {0};
    Run *runs = NULL;
    PyObject *result = NULL;
    for (; got < 5; got++) {
        Py_ssize_t len;
        if (!get_column(cols[got], &views[got], &len)) goto done;
        if (n_order >= 0 && len != n_order) {
            PyErr_SetString(PyExc_ValueError, "best_fit_columns: columns of different lengths");
            got++;
            goto done;
        }
        n_order = len;
    }
    runs = malloc(((size_t)n_order + 1) * sizeof(Run));
    if (!runs) { PyErr_NoMemory(); goto done; }
    const i64 *n = views[0].buf, *pc = views[1].buf, *pm = views[2].buf, *pg = views[3].buf, *k = views[4].buf;
    for (Py_ssize_t r = 0; r < n_order; r++) {
        runs[r] = (Run){n[r], pc[r], pm[r], pg[r], k[r]};
        if (!check_run(&runs[r])) goto done;
    }
    if (!read_bins(runs_in, &x)) goto done;
    result = place(&x, runs, n_order, cc, cm, cg, open_new);
done:
    for (int i = 0; i < got; i++) PyBuffer_Release(&views[i]);
    free(runs);
    release(&x);
    return result;
}

static PyMethodDef methods[] = {
    {"best_fit", best_fit, METH_VARARGS,
     "best_fit(order, runs, cap, open_new) -> (opened, left): packing._best_fit_py, compiled."},
    {"best_fit_columns", best_fit_columns, METH_VARARGS,
     "best_fit_columns(nodes, cpus, memory, gpus, jobs, runs, cap, open_new) -> (opened, left): best_fit of "
     "the runs given as five int64 arrays."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "autoscaler.demand._bestfit",
    "The bounded best fit of autoscaler.demand.packing, compiled (optional: packing.py falls back to Python).",
    -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__bestfit(void) { return PyModule_Create(&module); }
