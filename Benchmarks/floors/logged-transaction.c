// The floor of pdbench's `transaction/1000-keys-nosync`: LMDB's own part of a logged 1,000-key
// transaction, as PersistentDefaults does it, against raw LMDB (both MDB_NOSYNC).
//   raw:    1,000 mdb_put of 8-byte Int values in the unnamed database, commit.
//   logged (1): per key, mdb_get of the old value, then mdb_put of the 9-byte tagged value in the
//           named database "values"; then one log record (8-byte big-endian sequence, the 1,000
//           names and values) put in "log" with MDB_APPEND, the record 200 back deleted, commit.
//   cursor (2): as logged, but one cursor finds the old value (MDB_SET_KEY) and overwrites it
//           in place (MDB_CURRENT): one B-tree descent per key instead of two.
// Build and run (prints the p50 of 300 transactions after 50 of warm-up):
//   cc -O2 Benchmarks/floors/logged-transaction.c -llmdb -o /tmp/floor
//   mkdir -p /tmp/a /tmp/b && /tmp/floor /tmp/a 0 && /tmp/floor /tmp/b 1 && mkdir -p /tmp/c && /tmp/floor /tmp/c 2
#include <lmdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec * 1e9 + t.tv_nsec; }
static int cmp(const void *a, const void *b) { double x = *(double*)a, y = *(double*)b; return x < y ? -1 : x > y; }
#define N 1000
#define ROUNDS 300
int main(int argc, char **argv) {
  int logged = atoi(argv[2]);
  MDB_env *env; mdb_env_create(&env); mdb_env_set_maxdbs(env, 8); mdb_env_set_mapsize(env, 1 << 30);
  if (mdb_env_open(env, argv[1], MDB_NOSYNC, 0600)) { puts("open"); return 1; }
  MDB_txn *t; MDB_dbi values, log;
  mdb_txn_begin(env, 0, 0, &t);
  if (logged) { mdb_dbi_open(t, "values", MDB_CREATE, &values); mdb_dbi_open(t, "log", MDB_CREATE, &log); }
  else mdb_dbi_open(t, 0, 0, &values);
  mdb_txn_commit(t);
  char names[N][16]; size_t lens[N];
  for (int i = 0; i < N; i++) lens[i] = sprintf(names[i], "key-%d", i);
  static unsigned char record[64 * N]; double samples[ROUNDS]; unsigned long long seq = 0;
  for (int r = -50; r < ROUNDS; r++) {
    double start = now();
    mdb_txn_begin(env, 0, 0, &t);
    size_t used = 0;
    MDB_cursor *cursor = 0;
    if (logged == 2) mdb_cursor_open(t, values, &cursor);
    for (int i = 0; i < N; i++) {
      long v = (long)r * N + i; unsigned char val[9]; val[0] = 3; memcpy(val + 1, &v, 8);
      MDB_val k = {lens[i], names[i]}, d = {logged ? 9 : 8, logged ? (void*)val : (void*)&v};
      if (logged == 1) { MDB_val old; mdb_get(t, values, &k, &old); }
      if (logged == 2) {
        // One descent: the cursor that found the old value overwrites it in place.
        MDB_val old; int found = mdb_cursor_get(cursor, &k, &old, MDB_SET_KEY) == 0;
        if (mdb_cursor_put(cursor, &k, &d, found ? MDB_CURRENT : 0)) { puts("cursor put"); return 1; }
      } else if (mdb_put(t, values, &k, &d, 0)) { puts("put"); return 1; }
      if (logged) { record[used++] = (unsigned char)lens[i]; memcpy(record + used, names[i], lens[i]); used += lens[i]; record[used++] = 9; memcpy(record + used, val, 9); used += 9; }
    }
    if (logged) {
      seq++; unsigned char key[8]; for (int b = 0; b < 8; b++) key[b] = seq >> (56 - 8 * b);
      MDB_val k = {8, key}, d = {used + 24, record};
      if (mdb_put(t, log, &k, &d, MDB_APPEND)) { puts("log"); return 1; }
      // Prune: keep at most ~4 MiB of log (about 200 of these records).
      if (seq > 200) { unsigned long long old = seq - 200; for (int b = 0; b < 8; b++) key[b] = old >> (56 - 8 * b); mdb_del(t, log, &k, 0); }
    }
    if (cursor) mdb_cursor_close(cursor);
    mdb_txn_commit(t);
    if (r >= 0) samples[r] = now() - start;
  }
  qsort(samples, ROUNDS, sizeof(double), cmp);
  printf("%s p50 %.1f us\n", logged == 2 ? "cursor" : logged ? "logged" : "raw   ", samples[ROUNDS / 2] / 1e3);
}
