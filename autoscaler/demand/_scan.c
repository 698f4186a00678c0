/* autoscaler.demand._scan: the demand model's per-record loops, compiled.
 *
 * scan(jobs, fields, pending, unsettled, settle, every, others, ids, ordinal) -> (numbers, priorities, how)
 *   is queue._scan_py's loop: each pending job's JobKey built from its fields, grouped through the dict
 *   ``ids``; ``others`` (a list, or None) gets the jobs that are not pending. ``fields``: the member descriptors of the
 *   record type, in the order of queue.SCAN_FIELDS (the indices F_* below). With ``ordinal`` a new key is
 *   numbered 1 + the ordinal of its first job among pending jobs (scan's groups); without, len(ids) (the
 *   ScanCache's key ids). Returns bytearrays: per job its key's number (int64, −1: not pending), its
 *   priority clamped to Slurm's uint32 (int64), and how its key may be kept (int8: 0 not volatile, 1
 *   volatile and kept while nothing changes, 2 read each time: queue.scan_cached).
 *
 * key_facts(keys, start, partition_ids, reason_ids, feature_ids, request_ids, request_at)
 *   is tables._key_columns_py for keys[start:]: the partitions, reasons, constraints and requests
 *   interned through their dicts (new values numbered on, in the order of first sight), the tasks, the
 *   %N throttles, and per new request its number fields (int64, None -> -1) and where a None was (int8),
 *   and whether its node_request is None. Returns None, having changed nothing, for keys it cannot hold
 *   exactly (an int beyond int64, a value of another type): the Python one then does it.
 *
 * intern(values, ids) -> int64 bytearray: each value's id in the dict (new ones numbered len(ids), in
 *   order): tables.interned's numbering of many values.
 * ranks(jobs, at, fields) -> (float64, int64 bytearrays): tables._lead_rank_py (submit time or 0.0, the
 *   array's id or the job's) of the jobs at the int64 indices ``at``.
 *
 * Key and request tuples of plain values are made untracked by the cyclic collector (untrack_plain).
 * Python's are the reference (tests/unit/test_scan_native.py compares the two). Holds the GIL
 * throughout; no state outlives a call.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <stdint.h>
#include <string.h>

typedef int64_t i64;

enum {
    F_STATE, F_REASON, F_RESERVATION, F_REQUIRED_NODES, F_EXCLUDED_NODES, F_LICENSES, F_PRIORITY,
    F_PARTITIONS, F_FEATURES, F_ARRAY_TASK_ID, F_ARRAY_TASK_STRING, F_ARRAY_PENDING_TASKS, F_ARRAY_JOB_ID,
    F_ARRAY_MAX_TASKS, F_QOS, F_ACCOUNT, F_USER, F_REQUEST /* the request's fields from here on */
};
#define HEAD 6          /* a JobKey: partitions, reason, features, tasks, array, who, *request */
#define MAX_FIELDS 64
#define U32 ((i64)0xFFFFFFFF)

/* An int as int64 (−1 with OverflowError or TypeError set). PyLong_AsLongLongAndOverflow: in 3.11 the
 * plain PyLong_AsLongLong of an int of several digits goes through a byte array. */
static i64 as_i64(PyObject *o)
{
    int over = 0;
    long long x = PyLong_AsLongLongAndOverflow(o, &over);
    if (over) {
        PyErr_SetString(PyExc_OverflowError, "an int beyond int64");
        return -1;
    }
    return (i64)x;
}

typedef struct {
    PyTypeObject *type;          /* the record type the descriptors are of */
    Py_ssize_t n;
    Py_ssize_t offset[MAX_FIELDS];
    PyObject *name[MAX_FIELDS];  /* borrowed from the descriptors */
} Fields;

static int fields_of(PyObject *seq, Fields *f)
{
    PyObject *fast = PySequence_Fast(seq, "fields: a sequence of member descriptors");
    if (fast == NULL) return -1;
    f->n = PySequence_Fast_GET_SIZE(fast);
    if (f->n <= F_REQUEST || f->n > MAX_FIELDS) {
        Py_DECREF(fast);
        PyErr_SetString(PyExc_ValueError, "fields: the wrong number of descriptors");
        return -1;
    }
    f->type = NULL;
    for (Py_ssize_t i = 0; i < f->n; i++) {
        PyObject *d = PySequence_Fast_GET_ITEM(fast, i);
        if (!PyObject_TypeCheck(d, &PyMemberDescr_Type)) {
            Py_DECREF(fast);
            PyErr_SetString(PyExc_TypeError, "fields: a member descriptor each");
            return -1;
        }
        PyMemberDescrObject *m = (PyMemberDescrObject *)d;
        if (m->d_member->type != T_OBJECT_EX && m->d_member->type != T_OBJECT) {
            Py_DECREF(fast);
            PyErr_SetString(PyExc_TypeError, "fields: object members only");
            return -1;
        }
        if (f->type == NULL) f->type = PyDescr_TYPE(d);
        else if (f->type != PyDescr_TYPE(d)) {
            Py_DECREF(fast);
            PyErr_SetString(PyExc_TypeError, "fields: members of one type");
            return -1;
        }
        f->offset[i] = m->d_member->offset;
        f->name[i] = PyDescr_NAME(d);
    }
    Py_DECREF(fast);  /* the descriptors live in the type's dict */
    return 0;
}

/* A new reference to field i of the record (its slot read directly when the record is of the
 * descriptors' type; else by name). */
static PyObject *field(PyObject *job, const Fields *f, Py_ssize_t i, int exact)
{
    if (exact) {
        PyObject *v = *(PyObject **)((char *)job + f->offset[i]);
        if (v == NULL) {
            PyErr_SetObject(PyExc_AttributeError, f->name[i]);
            return NULL;
        }
        Py_INCREF(v);
        return v;
    }
    return PyObject_GetAttr(job, f->name[i]);
}

/* CPython's rule for a tuple the collector may stop tracking (gcmodule.c's untrack_tuples): none of its
 * items may be tracked — an item is a non-container, or a tuple untracked (or untrackable: checked
 * first, as the collector would find). A key or a request tuple of plain values never takes part in a
 * cycle: untracked as made, the collector never walks the 100,000s a first poll keeps (the ScanCache's
 * keys, its requests). */
static int may_be_tracked(PyObject *o)
{
    if (!PyObject_IS_GC(o)) return 0;
    if (!PyTuple_CheckExact(o)) return 1;
    return PyObject_GC_IsTracked(o);
}

static void untrack_plain(PyObject *t)
{
    if (!PyObject_GC_IsTracked(t)) return;
    Py_ssize_t n = PyTuple_GET_SIZE(t);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item = PyTuple_GET_ITEM(t, i);
        if (PyTuple_CheckExact(item)) untrack_plain(item);
        if (may_be_tracked(item)) return;
    }
    PyObject_GC_UnTrack(t);
}

static PyObject *scan(PyObject *self, PyObject *args)
{
    PyObject *jobs, *fields_seq, *pending, *unsettled, *settle, *others, *ids;
    int every, ordinal;
    if (!PyArg_ParseTuple(args, "OOUOOpOO!p", &jobs, &fields_seq, &pending, &unsettled, &settle, &every,
                          &others, &PyDict_Type, &ids, &ordinal))
        return NULL;
    if (!PyAnySet_Check(unsettled)) {
        PyErr_SetString(PyExc_TypeError, "unsettled: a set");
        return NULL;
    }
    if (others != Py_None && !PyList_Check(others)) {
        PyErr_SetString(PyExc_TypeError, "others: a list or None");
        return NULL;
    }
    Fields f;
    if (fields_of(fields_seq, &f) < 0) return NULL;
    PyObject *seq = PySequence_Tuple(jobs); /* a copy of a list: settle runs Python code */
    if (seq == NULL) return NULL;
    Py_ssize_t n = PyTuple_GET_SIZE(seq);
    PyObject *numbers = PyByteArray_FromStringAndSize(NULL, n * (Py_ssize_t)sizeof(i64));
    PyObject *priorities = PyByteArray_FromStringAndSize(NULL, n * (Py_ssize_t)sizeof(i64));
    PyObject *how = PyByteArray_FromStringAndSize(NULL, n);
    PyObject *one = PyLong_FromLong(1);
    if (numbers == NULL || priorities == NULL || how == NULL || one == NULL) goto fail;
    i64 *number = (i64 *)PyByteArray_AS_STRING(numbers);
    i64 *priority = (i64 *)PyByteArray_AS_STRING(priorities);
    int8_t *kept = (int8_t *)PyByteArray_AS_STRING(how);
    Py_ssize_t n_request = f.n - F_REQUEST;
    i64 ordinal_next = 1;
    PyObject *v[MAX_FIELDS];
    for (Py_ssize_t j = 0; j < n; j++) {
        PyObject *job = PyTuple_GET_ITEM(seq, j);
        int exact = Py_TYPE(job) == f.type;
        Py_ssize_t got = 0;
        v[F_STATE] = field(job, &f, F_STATE, exact);
        if (v[F_STATE] == NULL) goto fail;
        got = 1;
        int is_pending = v[F_STATE] == pending ? 1 : PyObject_RichCompareBool(v[F_STATE], pending, Py_EQ);
        if (is_pending < 0) goto fail_job;
        if (!is_pending) {
            Py_DECREF(v[F_STATE]);
            number[j] = -1;
            priority[j] = 0;
            kept[j] = 0;
            if (others != Py_None && PyList_Append(others, job) < 0) goto fail;
            continue;
        }
        for (; got < f.n; got++) {
            v[got] = field(job, &f, got, exact);
            if (v[got] == NULL) goto fail_job;
        }
        /* the reason, and how its key may be kept (queue.scan_cached's ``how``) */
        int unset = PySet_Contains(unsettled, v[F_REASON]);
        if (unset < 0) goto fail_job;
        int bound = PyObject_IsTrue(v[F_RESERVATION]);
        if (bound == 0) bound = PyObject_IsTrue(v[F_REQUIRED_NODES]);
        if (bound < 0) goto fail_job;
        int follows = 0;
        if (!bound && unset) {
            follows = PyObject_IsTrue(v[F_EXCLUDED_NODES]);
            if (follows == 0) follows = PyObject_IsTrue(v[F_LICENSES]);
            if (follows < 0) goto fail_job;
        }
        kept[j] = bound ? 2 : !unset ? 0 : follows ? 2 : 1;
        PyObject *reason;
        if (!unset && !bound) {
            reason = v[F_REASON];
            Py_INCREF(reason);
        } else {
            reason = PyObject_CallOneArg(settle, job);
            if (reason == NULL) goto fail_job;
        }
        /* tasks: an array record stands for its pending tasks */
        PyObject *tasks = one;
        if (v[F_ARRAY_TASK_ID] == Py_None) {
            int listed = PyObject_IsTrue(v[F_ARRAY_TASK_STRING]);
            if (listed < 0) {
                Py_DECREF(reason);
                goto fail_job;
            }
            if (listed) tasks = v[F_ARRAY_PENDING_TASKS];
        }
        PyObject *array;
        if (v[F_ARRAY_MAX_TASKS] == Py_None) {
            array = v[F_ARRAY_JOB_ID];
            Py_INCREF(array);
        } else {
            array = PyTuple_Pack(4, v[F_ARRAY_JOB_ID], v[F_ARRAY_TASK_ID], v[F_ARRAY_TASK_STRING],
                                 v[F_ARRAY_MAX_TASKS]);
        }
        PyObject *who = every ? PyTuple_Pack(3, v[F_QOS], v[F_ACCOUNT], v[F_USER]) : Py_NewRef(Py_None);
        PyObject *key = PyTuple_New(HEAD + n_request);
        if (array == NULL || who == NULL || key == NULL) {
            Py_DECREF(reason);
            Py_XDECREF(array);
            Py_XDECREF(who);
            Py_XDECREF(key);
            goto fail_job;
        }
        PyTuple_SET_ITEM(key, 0, Py_NewRef(v[F_PARTITIONS]));
        PyTuple_SET_ITEM(key, 1, reason);
        PyTuple_SET_ITEM(key, 2, Py_NewRef(v[F_FEATURES]));
        PyTuple_SET_ITEM(key, 3, Py_NewRef(tasks));
        PyTuple_SET_ITEM(key, 4, array);
        PyTuple_SET_ITEM(key, 5, who);
        for (Py_ssize_t r = 0; r < n_request; r++) PyTuple_SET_ITEM(key, HEAD + r, Py_NewRef(v[F_REQUEST + r]));
        /* the priority, clamped to Slurm's uint32 as queue._code_array does */
        int over = 0;
        long long p = PyLong_AsLongLongAndOverflow(v[F_PRIORITY], &over);
        if (p == -1 && PyErr_Occurred()) {
            Py_DECREF(key);
            goto fail_job;
        }
        priority[j] = over > 0 ? U32 : over < 0 ? 0 : p < 0 ? 0 : p > U32 ? U32 : (i64)p;
        PyObject *candidate = ordinal ? PyLong_FromLongLong(ordinal_next++) : PyLong_FromSsize_t(PyDict_GET_SIZE(ids));
        if (candidate == NULL) {
            Py_DECREF(key);
            goto fail_job;
        }
        untrack_plain(key);
        PyObject *held = PyDict_SetDefault(ids, key, candidate); /* borrowed */
        Py_DECREF(key);
        Py_DECREF(candidate);
        if (held == NULL) goto fail_job;
        number[j] = as_i64(held);
        if (number[j] == -1 && PyErr_Occurred()) goto fail_job;
        for (Py_ssize_t i = 0; i < f.n; i++) Py_DECREF(v[i]);
        continue;
    fail_job:
        for (Py_ssize_t i = 0; i < got; i++) Py_DECREF(v[i]);
        goto fail;
    }
    Py_DECREF(seq);
    Py_DECREF(one);
    return Py_BuildValue("(NNN)", numbers, priorities, how);
fail:
    Py_DECREF(seq);
    Py_XDECREF(numbers);
    Py_XDECREF(priorities);
    Py_XDECREF(how);
    Py_XDECREF(one);
    return NULL;
}

/* ---- key_facts ---- */

static int exact_int(PyObject *o) /* an int (bool included) within int64 */
{
    if (!PyLong_Check(o)) return 0;
    int over = 0;
    long long x = PyLong_AsLongLongAndOverflow(o, &over);
    if (x == -1 && PyErr_Occurred()) {
        PyErr_Clear();
        return 0;
    }
    return !over;
}

/* Whether the key holds only what key_facts reads exactly; its request numbers (every request field but
 * the last, from request_at on) read into ``num`` (int64, a None as −1) and ``missing`` as they are
 * checked: each number is converted once. */
static int holdable(PyObject *key, Py_ssize_t width, Py_ssize_t request_at, i64 *num, char *missing)
{
    if (!PyTuple_CheckExact(key) || PyTuple_GET_SIZE(key) != width) return 0;
    if (!exact_int(PyTuple_GET_ITEM(key, 3))) return 0;
    PyObject *array = PyTuple_GET_ITEM(key, 4);
    if (PyTuple_Check(array)) {
        if (PyTuple_GET_SIZE(array) != 4) return 0;
        if (PyTuple_GET_ITEM(array, 0) != Py_None &&
            (!exact_int(PyTuple_GET_ITEM(array, 0)) || !exact_int(PyTuple_GET_ITEM(array, 3))))
            return 0;
    }
    for (Py_ssize_t i = request_at; i < width - 1; i++) {
        PyObject *x = PyTuple_GET_ITEM(key, i);
        Py_ssize_t c = i - request_at;
        missing[c] = x == Py_None;
        if (missing[c]) {
            num[c] = -1;
            continue;
        }
        if (!PyLong_Check(x)) return 0;
        int over = 0;
        long long v = PyLong_AsLongLongAndOverflow(x, &over);
        if (over || (v == -1 && PyErr_Occurred())) {
            PyErr_Clear();
            return 0;
        }
        num[c] = (i64)v;
    }
    return 1;
}

/* The id of the value last interned through one dict, by identity: consecutive keys mostly share their
 * partitions, reason and constraint objects. */
typedef struct { PyObject *value; i64 id; } Last;

/* The id of value in ids, a new one numbered len(ids); -1 with an exception set. */
static i64 intern(PyObject *ids, PyObject *value, int *fresh)
{
    PyObject *got = PyDict_GetItemWithError(ids, value);
    if (got != NULL) {
        *fresh = 0;
        return as_i64(got);
    }
    if (PyErr_Occurred()) return -1;
    Py_ssize_t id = PyDict_GET_SIZE(ids);
    PyObject *num = PyLong_FromSsize_t(id);
    if (num == NULL) return -1;
    int bad = PyDict_SetItem(ids, value, num);
    Py_DECREF(num);
    *fresh = 1;
    return bad ? -1 : (i64)id;
}

static i64 intern_few(PyObject *ids, PyObject *value, Last *last)
{
    if (value == last->value) return last->id;
    int fresh;
    i64 id = intern(ids, value, &fresh);
    if (id >= 0) {
        last->value = value; /* borrowed: the key holding it outlives the loop */
        last->id = id;
    }
    return id;
}

static PyObject *i64_array(Py_ssize_t n, i64 **at)
{
    PyObject *b = PyByteArray_FromStringAndSize(NULL, n * (Py_ssize_t)sizeof(i64));
    if (b != NULL) *at = (i64 *)PyByteArray_AS_STRING(b);
    return b;
}

static PyObject *key_facts_of(PyObject *keys, PyObject *pids, PyObject *rids, PyObject *fids, PyObject *qids,
                              Py_ssize_t request_at);

static PyObject *key_facts(PyObject *self, PyObject *args)
{
    PyObject *key_list, *pids, *rids, *fids, *qids;
    Py_ssize_t start, request_at;
    if (!PyArg_ParseTuple(args, "O!nO!O!O!O!n", &PyList_Type, &key_list, &start, &PyDict_Type, &pids,
                          &PyDict_Type, &rids, &PyDict_Type, &fids, &PyDict_Type, &qids, &request_at))
        return NULL;
    Py_ssize_t total = PyList_GET_SIZE(key_list);
    if (start < 0 || start > total || request_at < HEAD) {
        PyErr_SetString(PyExc_ValueError, "key_facts: start or request_at out of range");
        return NULL;
    }
    PyObject *keys = PyList_GetSlice(key_list, start, total); /* a copy: hashing may run Python code */
    if (keys == NULL) return NULL;
    PyObject *got = key_facts_of(keys, pids, rids, fids, qids, request_at);
    Py_DECREF(keys);
    return got;
}

/* key_facts of every key of the list ``keys`` (a copy nobody else holds). */
static PyObject *key_facts_of(PyObject *keys, PyObject *pids, PyObject *rids, PyObject *fids, PyObject *qids,
                              Py_ssize_t request_at)
{
    Py_ssize_t n = PyList_GET_SIZE(keys);
    if (n == 0) Py_RETURN_NONE;
    PyObject *first = PyList_GET_ITEM(keys, 0);
    if (!PyTuple_CheckExact(first) || PyTuple_GET_SIZE(first) <= request_at) Py_RETURN_NONE;
    Py_ssize_t width = PyTuple_GET_SIZE(first);
    Py_ssize_t n_num = width - 1 - request_at; /* every request field but the last (node_request) */
    i64 *num = NULL, *source = NULL;
    /* every key's request numbers, read as each key is checked; the new requests' rows are moved to the
     * front after the loop (a new request's row comes from its first key, never from before it) */
    PyObject *a_num = i64_array(n * n_num, &num);
    PyObject *a_missing = PyByteArray_FromStringAndSize(NULL, n * n_num);
    PyObject *a_source = i64_array(n, &source);
    PyObject *a_plain = NULL;
    if (!a_num || !a_missing || !a_source) {
        Py_XDECREF(a_num);
        Py_XDECREF(a_missing);
        Py_XDECREF(a_source);
        return NULL;
    }
    char *missing = PyByteArray_AS_STRING(a_missing);
    for (Py_ssize_t k = 0; k < n; k++)  /* nothing changed before every key is known holdable */
        if (!holdable(PyList_GET_ITEM(keys, k), width, request_at, num + k * n_num, missing + k * n_num)) {
            Py_DECREF(a_num);
            Py_DECREF(a_missing);
            Py_DECREF(a_source);
            Py_RETURN_NONE;
        }

    i64 *partition = NULL, *reason = NULL, *feature = NULL, *tasks = NULL, *throttle_id = NULL;
    i64 *throttle_limit = NULL, *request = NULL;
    PyObject *a_partition = i64_array(n, &partition), *a_reason = i64_array(n, &reason);
    PyObject *a_feature = i64_array(n, &feature), *a_tasks = i64_array(n, &tasks);
    PyObject *a_tid = i64_array(n, &throttle_id), *a_tlim = i64_array(n, &throttle_limit);
    PyObject *a_request = i64_array(n, &request);
    PyObject *a_solo = PyByteArray_FromStringAndSize(NULL, n);
    PyObject *new_requests = PyList_New(0);
    if (!a_partition || !a_reason || !a_feature || !a_tasks || !a_tid || !a_tlim || !a_request || !a_solo ||
        !new_requests)
        goto fail;
    char *solo = PyByteArray_AS_STRING(a_solo);
    Last last[3] = {{NULL, -1}, {NULL, -1}, {NULL, -1}};
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *key = PyList_GET_ITEM(keys, i);
        int fresh;
        if ((partition[i] = intern_few(pids, PyTuple_GET_ITEM(key, 0), &last[0])) < 0) goto fail;
        if ((reason[i] = intern_few(rids, PyTuple_GET_ITEM(key, 1), &last[1])) < 0) goto fail;
        if ((feature[i] = intern_few(fids, PyTuple_GET_ITEM(key, 2), &last[2])) < 0) goto fail;
        tasks[i] = as_i64(PyTuple_GET_ITEM(key, 3));
        PyObject *array = PyTuple_GET_ITEM(key, 4);
        solo[i] = PyTuple_Check(array) ? 1 : 0;
        throttle_id[i] = throttle_limit[i] = -1;
        if (solo[i] && PyTuple_GET_ITEM(array, 0) != Py_None) {
            throttle_id[i] = as_i64(PyTuple_GET_ITEM(array, 0));
            throttle_limit[i] = as_i64(PyTuple_GET_ITEM(array, 3));
        }
        PyObject *req = PyTuple_GetSlice(key, request_at, width);
        if (req == NULL) goto fail;
        untrack_plain(req);
        request[i] = intern(qids, req, &fresh);
        if (request[i] < 0) {
            Py_DECREF(req);
            goto fail;
        }
        if (fresh) {
            source[PyList_GET_SIZE(new_requests)] = i;
            if (PyList_Append(new_requests, req) < 0) {
                Py_DECREF(req);
                goto fail;
            }
        }
        Py_DECREF(req);
    }
    Py_ssize_t n_new = PyList_GET_SIZE(new_requests);
    a_plain = PyByteArray_FromStringAndSize(NULL, n_new);
    if (!a_plain) goto fail;
    char *plain = PyByteArray_AS_STRING(a_plain);
    for (Py_ssize_t r = 0; r < n_new; r++) {  /* source[r] >= r: rows before r are final */
        if (source[r] != r) {
            memcpy(num + r * n_num, num + source[r] * n_num, (size_t)n_num * sizeof(i64));
            memcpy(missing + r * n_num, missing + source[r] * n_num, (size_t)n_num);
        }
        plain[r] = PyTuple_GET_ITEM(PyList_GET_ITEM(new_requests, r), n_num) == Py_None;
    }
    Py_CLEAR(a_source);
    if (PyByteArray_Resize(a_num, n_new * n_num * (Py_ssize_t)sizeof(i64)) < 0 ||
        PyByteArray_Resize(a_missing, n_new * n_num) < 0)
        goto fail;
    return Py_BuildValue("(NNNNNNNNNNNN)", a_partition, a_reason, a_feature, a_tasks, a_solo, a_tid, a_tlim,
                         a_request, new_requests, a_num, a_missing, a_plain);
fail:
    Py_XDECREF(a_partition);
    Py_XDECREF(a_reason);
    Py_XDECREF(a_feature);
    Py_XDECREF(a_tasks);
    Py_XDECREF(a_tid);
    Py_XDECREF(a_tlim);
    Py_XDECREF(a_request);
    Py_XDECREF(a_solo);
    Py_XDECREF(new_requests);
    Py_XDECREF(a_num);
    Py_XDECREF(a_missing);
    Py_XDECREF(a_source);
    Py_XDECREF(a_plain);
    return NULL;
}

/* ---- intern: tables.interned's numbering, compiled ---- */

static PyObject *intern_all(PyObject *self, PyObject *args)
{
    PyObject *values, *ids;
    if (!PyArg_ParseTuple(args, "OO!", &values, &PyDict_Type, &ids)) return NULL;
    PyObject *seq = PySequence_Tuple(values); /* a copy of a list: hashing may run Python code */
    if (seq == NULL) return NULL;
    Py_ssize_t n = PyTuple_GET_SIZE(seq);
    i64 *out;
    PyObject *a_out = i64_array(n, &out);
    if (a_out == NULL) {
        Py_DECREF(seq);
        return NULL;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        int fresh;
        out[i] = intern(ids, PyTuple_GET_ITEM(seq, i), &fresh);
        if (out[i] < 0) {
            Py_DECREF(seq);
            Py_DECREF(a_out);
            return NULL;
        }
    }
    Py_DECREF(seq);
    return a_out;
}

static PyObject *ranks(PyObject *self, PyObject *args)
{
    PyObject *jobs, *at_buf, *fields_seq;
    if (!PyArg_ParseTuple(args, "OOO", &jobs, &at_buf, &fields_seq)) return NULL;
    Py_buffer at;
    if (PyObject_GetBuffer(at_buf, &at, PyBUF_C_CONTIGUOUS) < 0) return NULL;
    PyObject *seq = NULL, *a_submit = NULL, *a_ident = NULL;
    Fields f;
    if (at.len % (Py_ssize_t)sizeof(i64) != 0) {
        PyErr_SetString(PyExc_ValueError, "at: int64 indices");
        goto fail;
    }
    /* fields: submit_time, array_job_id, job_id (fields_of wants more: read them by hand) */
    PyObject *fast = PySequence_Fast(fields_seq, "fields: three member descriptors");
    if (fast == NULL) goto fail;
    if (PySequence_Fast_GET_SIZE(fast) != 3) {
        Py_DECREF(fast);
        PyErr_SetString(PyExc_ValueError, "fields: three member descriptors");
        goto fail;
    }
    f.type = NULL;
    f.n = 3;
    for (Py_ssize_t i = 0; i < 3; i++) {
        PyObject *d = PySequence_Fast_GET_ITEM(fast, i);
        if (!PyObject_TypeCheck(d, &PyMemberDescr_Type) ||
            (((PyMemberDescrObject *)d)->d_member->type != T_OBJECT_EX &&
             ((PyMemberDescrObject *)d)->d_member->type != T_OBJECT) ||
            (f.type != NULL && f.type != PyDescr_TYPE(d))) {
            Py_DECREF(fast);
            PyErr_SetString(PyExc_TypeError, "fields: object members of one type");
            goto fail;
        }
        f.type = PyDescr_TYPE(d);
        f.offset[i] = ((PyMemberDescrObject *)d)->d_member->offset;
        f.name[i] = PyDescr_NAME(d);
    }
    Py_DECREF(fast);
    seq = PySequence_Tuple(jobs); /* a copy of a list: truth and float may run Python code */
    if (seq == NULL) goto fail;
    Py_ssize_t n_jobs = PyTuple_GET_SIZE(seq), m = at.len / (Py_ssize_t)sizeof(i64);
    const i64 *idx = (const i64 *)at.buf;
    i64 *ident;
    a_submit = PyByteArray_FromStringAndSize(NULL, m * (Py_ssize_t)sizeof(double));
    a_ident = i64_array(m, &ident);
    if (a_submit == NULL || a_ident == NULL) goto fail;
    double *submit = (double *)PyByteArray_AS_STRING(a_submit);
    for (Py_ssize_t i = 0; i < m; i++) {
        if (idx[i] < 0 || idx[i] >= n_jobs) {
            PyErr_SetString(PyExc_IndexError, "at: an index beyond the jobs");
            goto fail;
        }
        PyObject *job = PyTuple_GET_ITEM(seq, idx[i]);
        int exact = Py_TYPE(job) == f.type;
        PyObject *v[3];
        Py_ssize_t got;
        for (got = 0; got < 3; got++) {
            v[got] = field(job, &f, got, exact);
            if (v[got] == NULL) break;
        }
        int ok = got == 3;
        if (ok) {  /* submit_time or 0.0; array_job_id or job_id (tables._lead_rank_py) */
            int t = PyObject_IsTrue(v[0]);
            submit[i] = t > 0 ? PyFloat_AsDouble(v[0]) : 0.0;
            int a = t < 0 ? -1 : PyObject_IsTrue(v[1]);
            ident[i] = a < 0 ? -1 : as_i64(a ? v[1] : v[2]);
            ok = !PyErr_Occurred();
        }
        for (Py_ssize_t k = 0; k < got; k++) Py_DECREF(v[k]);
        if (!ok) goto fail;
    }
    Py_DECREF(seq);
    PyBuffer_Release(&at);
    return Py_BuildValue("(NN)", a_submit, a_ident);
fail:
    Py_XDECREF(seq);
    Py_XDECREF(a_submit);
    Py_XDECREF(a_ident);
    PyBuffer_Release(&at);
    return NULL;
}

static PyMethodDef methods[] = {
    {"intern", intern_all, METH_VARARGS, "tables.interned's numbering of many values (few=False), compiled."},
    {"ranks", ranks, METH_VARARGS, "tables._lead_rank_py, compiled."},
    {"scan", scan, METH_VARARGS, "queue._scan_py's loop over the job records, compiled."},
    {"key_facts", key_facts, METH_VARARGS, "tables._key_columns_py, compiled (None: not holdable)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_scan", NULL, -1, methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__scan(void) { return PyModule_Create(&module); }
