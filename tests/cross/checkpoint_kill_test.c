/* checkpoint_kill_test.c -- on Windows, a process killed while it saves a
 * checkpoint never costs the previous one (the Windows counterpart of
 * tests/c/checkpoint_crash_test.c, which forks and signals).
 *
 * The watcher starts this program again as a child that saves generation
 * after generation of two tensors to one file, telling the watcher through
 * a pipe when each save begins and when it has returned. The watcher waits
 * for a save to begin, waits a random fraction (0 to 115%) of a measured
 * save time, so that the kills land in the writing, the flushing and after
 * the rename, and kills the child with TerminateProcess. Then the file must
 * load, and hold one generation whole -- every element of both tensors
 * that generation's -- no older than the last save that returned and no
 * newer than the last that began. The next child resumes from it.
 *
 * Prints "checkpoint_kill: OK" at the end: Wine keeps only the low 8 bits
 * of an exit status and a crash exits 5, so ctest checks the output too. */
#include <windows.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ampx/ampx.h"

#define TRIALS 150
#define TENSORS 2
#define ELEMENTS (512 * 512) /* 1 MiB of f32 per tensor */

static void check(ampx_status status, const char *what) {
  if (status != AMPX_OK) {
    fprintf(stderr, "%s failed: %s\n", what, ampx_last_error());
    exit(2);
  }
}

/* Element i of tensor t in generation g: exact in f32. */
static float value(int32_t g, int t, int64_t i) {
  return (float)((g * 131 + t * 17 + i) % 100003);
}

typedef struct model {
  ampx_context ctx;
  ampx_tensor tensors[TENSORS];
  float *host;
} model;

static void model_init(model *m) {
  static const char *names[TENSORS] = {"w", "v"};
  const int64_t n = ELEMENTS;
  const ampx_context_options options = ampx_context_options_default();
  int t;
  check(ampx_context_create(&options, &m->ctx), "ampx_context_create");
  m->host = (float *)calloc(ELEMENTS, sizeof(float));
  if (!m->host) exit(2);
  for (t = 0; t < TENSORS; ++t) {
    check(ampx_tensor_zeros(m->ctx, AMPX_F32, 1, &n, &m->tensors[t]), "ampx_tensor_zeros");
    check(ampx_tensor_set_name(m->tensors[t], names[t]), "ampx_tensor_set_name");
  }
}

static void model_set(model *m, int32_t g) {
  int t;
  int64_t i;
  for (t = 0; t < TENSORS; ++t) {
    for (i = 0; i < ELEMENTS; ++i) m->host[i] = value(g, t, i);
    check(ampx_tensor_copy_from_host(m->tensors[t], m->host, ELEMENTS * sizeof(float)),
          "ampx_tensor_copy_from_host");
  }
}

/* The one generation every element holds, or -1 for a mix. */
static int32_t model_generation(model *m) {
  int32_t g = -1;
  int t;
  int64_t i;
  for (t = 0; t < TENSORS; ++t) {
    check(ampx_tensor_to_host(m->tensors[t], m->host, ELEMENTS * sizeof(float)),
          "ampx_tensor_to_host");
    if (t == 0) {
      /* value(g, 0, 0) = g * 131 % 100003 determines g below 100003 / 131. */
      g = (int32_t)(m->host[0] / 131.0f);
      if (value(g, 0, 0) != m->host[0]) return -1;
    }
    for (i = 0; i < ELEMENTS; ++i)
      if (m->host[i] != value(g, t, i)) return -1;
  }
  return g;
}

typedef struct message {
  int32_t kind; /* 1: a save begins, 2: it returned */
  int32_t generation;
} message;

static void send_message(HANDLE pipe, int32_t kind, int32_t generation) {
  message msg;
  DWORD written = 0;
  msg.kind = kind;
  msg.generation = generation;
  if (!WriteFile(pipe, &msg, sizeof msg, &written, NULL) || written != sizeof msg) exit(3);
}

/* The child: saves generations from `first` on until it is killed. */
static void child(const char *path, int32_t first, HANDLE pipe) {
  model m;
  int32_t g;
  model_init(&m);
  for (g = first;; ++g) {
    model_set(&m, g);
    send_message(pipe, 1, g);
    check(ampx_checkpoint_file_save(path, m.tensors, TENSORS, NULL, NULL),
          "ampx_checkpoint_file_save");
    send_message(pipe, 2, g);
  }
}

static double seconds_now(void) {
  LARGE_INTEGER now, frequency;
  QueryPerformanceCounter(&now);
  QueryPerformanceFrequency(&frequency);
  return (double)now.QuadPart / (double)frequency.QuadPart;
}

/* Temporary files of the checkpoint left in `dir` (a killed writer's),
 * removed; the next save would remove them too. */
static int remove_temporaries(const char *dir) {
  char pattern[MAX_PATH];
  WIN32_FIND_DATAA entry;
  HANDLE find;
  int count = 0;
  snprintf(pattern, sizeof pattern, "%s\\ckpt.ampx.tmp-*", dir);
  find = FindFirstFileA(pattern, &entry);
  if (find == INVALID_HANDLE_VALUE) return 0;
  do {
    char file[MAX_PATH];
    snprintf(file, sizeof file, "%s\\%s", dir, entry.cFileName);
    if (DeleteFileA(file)) ++count;
  } while (FindNextFileA(find, &entry));
  FindClose(find);
  return count;
}

static int watcher(void) {
  char self[MAX_PATH], dir[MAX_PATH], path[MAX_PATH], command[3 * MAX_PATH];
  model m;
  int32_t loaded = 0;
  double save_seconds, started;
  int trial, torn = 0, with_temporary = 0, after_rename = 0;
  DWORD temp_length = GetTempPathA(MAX_PATH, dir);
  DWORD self_length = GetModuleFileNameA(NULL, self, MAX_PATH);
  if (self_length == 0 || self_length >= MAX_PATH) return 2;
  if (temp_length == 0 || temp_length > MAX_PATH - 40) return 2;
  snprintf(dir + temp_length, MAX_PATH - temp_length, "ampx-kill-%lu",
           (unsigned long)GetCurrentProcessId());
  if (!CreateDirectoryA(dir, NULL)) return 2;
  snprintf(path, sizeof path, "%s\\ckpt.ampx", dir);

  model_init(&m);
  model_set(&m, 0);
  started = seconds_now();
  check(ampx_checkpoint_file_save(path, m.tensors, TENSORS, NULL, NULL), "first save");
  save_seconds = seconds_now() - started;
  printf("one save takes %.2f ms\n", save_seconds * 1e3);
  srand(12345);

  for (trial = 0; trial < TRIALS; ++trial) {
    SECURITY_ATTRIBUTES inherit = {sizeof(SECURITY_ATTRIBUTES), NULL, TRUE};
    HANDLE read_end, write_end;
    STARTUPINFOA startup;
    PROCESS_INFORMATION process;
    message msg;
    DWORD got = 0;
    int32_t last_begun = -1, last_returned = loaded, found;
    double delay;
    if (!CreatePipe(&read_end, &write_end, &inherit, 0)) return 2;
    SetHandleInformation(read_end, HANDLE_FLAG_INHERIT, 0);
    snprintf(command, sizeof command, "\"%s\" --child \"%s\" %ld %llu", self, path,
             (long)(loaded + 1), (unsigned long long)(uintptr_t)write_end);
    memset(&startup, 0, sizeof startup);
    startup.cb = sizeof startup;
    if (!CreateProcessA(NULL, command, NULL, NULL, TRUE, 0, NULL, NULL, &startup, &process)) {
      fprintf(stderr, "CreateProcess failed: %lu\n", (unsigned long)GetLastError());
      return 2;
    }
    CloseHandle(write_end); /* so that reads end when the child does */
    /* The first save begins; the kill lands 0-115% of a save later. */
    if (!ReadFile(read_end, &msg, sizeof msg, &got, NULL) || got != sizeof msg || msg.kind != 1) {
      fprintf(stderr, "trial %d: the child did not start saving\n", trial);
      return 2;
    }
    last_begun = msg.generation;
    delay = save_seconds * 1.15 * rand() / RAND_MAX;
    started = seconds_now();
    while (seconds_now() - started < delay) {
    }
    TerminateProcess(process.hProcess, 9);
    WaitForSingleObject(process.hProcess, INFINITE);
    CloseHandle(process.hThread);
    CloseHandle(process.hProcess);
    while (ReadFile(read_end, &msg, sizeof msg, &got, NULL) && got == sizeof msg) {
      if (msg.kind == 1) last_begun = msg.generation;
      if (msg.kind == 2) last_returned = msg.generation;
    }
    CloseHandle(read_end);

    with_temporary += remove_temporaries(dir) > 0;
    check(ampx_checkpoint_file_load(path, m.tensors, TENSORS, NULL, NULL), "load after a kill");
    found = model_generation(&m);
    if (found < 0 || found < last_returned || found > last_begun) {
      fprintf(stderr,
              "trial %d: the checkpoint holds %s%d, expected the last returned save (%d) "
              "or the one being written (%d)\n",
              trial, found < 0 ? "a mix, first element of " : "generation ", found,
              (int)last_returned, (int)last_begun);
      ++torn;
    }
    after_rename += found == last_begun && last_returned < last_begun;
    if (found >= 0) loaded = found;
  }
  remove_temporaries(dir);
  DeleteFileA(path);
  RemoveDirectoryA(dir);
  printf("%d kills: %d left a temporary file, %d came after the rename of an unreturned save, "
         "%d torn\n",
         TRIALS, with_temporary, after_rename, torn);
  if (torn) return 1;
  printf("checkpoint_kill: OK\n");
  return 0;
}

int main(int argc, char **argv) {
  if (argc == 5 && strcmp(argv[1], "--child") == 0) {
    child(argv[2], (int32_t)atol(argv[3]), (HANDLE)(uintptr_t)strtoull(argv[4], NULL, 10));
    return 0;
  }
  return watcher();
}
