/* checkpoint_crash_test.c -- a process killed while it saves a training
 * checkpoint never costs the previous one.
 *
 * Each round forks a child that loads the checkpoint, then trains and saves
 * generation after generation, telling the parent through a pipe when a save
 * begins and when it has returned. The parent waits for a save to begin,
 * sleeps for a fraction of a measured save time (0 to 115%, so the kills
 * land in the writing, the flushing and after the rename), freezes the child (SIGSTOP),
 * notes how far the temporary file had got, and kills it (SIGKILL). Then the
 * checkpoint must load and equal, bit for bit, either the last generation
 * whose save had returned or the one being saved -- the parent recomputes
 * both by training a reference model the same way.
 *
 * A kill is a crash of the process, not of the machine: what write() handed
 * to the kernel survives it. Power loss is what the fsyncs are for, and no
 * test here can cut the power. */
#define _POSIX_C_SOURCE 200809L

#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "ampx/ampx.h"

#define KILLS 240
#define TENSORS 3
#define FILE_NAME "ckpt.ampx"
#define TEMP_PREFIX "ckpt.ampx.tmp-"

static void check(ampx_status status, const char *what) {
  if (status != AMPX_OK) {
    fprintf(stderr, "%s failed: %s\n", what, ampx_last_error());
    exit(2);
  }
}

typedef struct model {
  ampx_context ctx;
  ampx_tensor tensors[TENSORS];
  ampx_tensor grads[TENSORS];
  ampx_optimizer opt;
  ampx_scaler scaler;
} model;

/* About 2 MB on disk (parameters, AdamW masters and moments): 32 pieces of
 * the library's 64 KiB writes, so the kills find files at many lengths. */
static void model_init(model *m, double seed) {
  static const char *names[TENSORS] = {"w1", "w2", "b"};
  static const ampx_dtype dtypes[TENSORS] = {AMPX_F32, AMPX_F16, AMPX_BF16};
  static const int64_t dims[TENSORS][2] = {{256, 256}, {256, 256}, {256, 1}};
  ampx_context_options ctx_options = AMPX_CONTEXT_OPTIONS_INIT;
  ampx_adam_options adam = AMPX_ADAMW_OPTIONS_INIT;
  ampx_scaler_options scaler = AMPX_SCALER_OPTIONS_INIT;
  int i;
  ctx_options.num_threads = 1;
  check(ampx_context_create(&ctx_options, &m->ctx), "ampx_context_create");
  for (i = 0; i < TENSORS; ++i) {
    check(ampx_tensor_empty(m->ctx, dtypes[i], 2, dims[i], &m->tensors[i]), "ampx_tensor_empty");
    check(ampx_tensor_fill(m->tensors[i], seed + 0.25 * i), "ampx_tensor_fill");
    check(ampx_tensor_set_name(m->tensors[i], names[i]), "ampx_tensor_set_name");
    check(ampx_tensor_zeros(m->ctx, dtypes[i], 2, dims[i], &m->grads[i]), "ampx_tensor_zeros");
    check(ampx_tensor_set_grad(m->tensors[i], m->grads[i]), "ampx_tensor_set_grad");
  }
  adam.lr = 0.01;
  check(ampx_optimizer_create_adam(m->ctx, m->tensors, TENSORS, &adam, &m->opt),
        "ampx_optimizer_create_adam");
  scaler.init_scale = 1024.0;
  scaler.growth_interval = 4;
  check(ampx_scaler_create(m->ctx, &scaler, &m->scaler), "ampx_scaler_create");
}

static void model_free(model *m) {
  int i;
  ampx_scaler_release(m->scaler);
  ampx_optimizer_release(m->opt);
  for (i = 0; i < TENSORS; ++i) {
    ampx_tensor_release(m->grads[i]);
    ampx_tensor_release(m->tensors[i]);
  }
  ampx_context_release(m->ctx);
}

/* The generation a model is at: every training step is one scaler update. */
static int64_t model_generation(const model *m) {
  ampx_scaler_counters counters = AMPX_SCALER_COUNTERS_INIT;
  check(ampx_scaler_get_counters(m->scaler, &counters), "ampx_scaler_get_counters");
  return counters.updates;
}

/* One step from generation g to g + 1; every ninth has an overflow, so
 * steps are skipped and the scale backs off as well as grows. */
static void model_train(model *m) {
  const int64_t g = model_generation(m);
  double scale = 1.0;
  int i;
  check(ampx_scaler_get_scale(m->scaler, &scale), "ampx_scaler_get_scale");
  for (i = 0; i < TENSORS; ++i)
    check(ampx_tensor_fill(m->grads[i], 0.01 * (double)((g + i) % 7 - 3) * scale),
          "ampx_tensor_fill");
  if (g % 9 == 4) check(ampx_tensor_fill(m->grads[0], INFINITY), "ampx_tensor_fill");
  check(ampx_scaler_step(m->scaler, m->opt), "ampx_scaler_step");
  check(ampx_scaler_update(m->scaler), "ampx_scaler_update");
  check(ampx_optimizer_set_lr(m->opt, 0, 0.01 / (1.0 + 0.01 * (double)g)), "ampx_optimizer_set_lr");
}

/* Every bit of the state: tensors, optimizer state, scaler state. */
static unsigned char *model_snapshot(const model *m, size_t *size) {
  size_t bytes[TENSORS], opt_bytes = 0, total = 0, at = 0;
  ampx_scaler_state state;
  unsigned char *out;
  int i;
  for (i = 0; i < TENSORS; ++i) {
    check(ampx_tensor_nbytes(m->tensors[i], &bytes[i]), "ampx_tensor_nbytes");
    total += bytes[i];
  }
  check(ampx_optimizer_state_size(m->opt, &opt_bytes), "ampx_optimizer_state_size");
  total += opt_bytes + sizeof state;
  out = malloc(total);
  if (!out) exit(2);
  for (i = 0; i < TENSORS; ++i) {
    check(ampx_tensor_to_host(m->tensors[i], out + at, bytes[i]), "ampx_tensor_to_host");
    at += bytes[i];
  }
  check(ampx_optimizer_save_state(m->opt, out + at, opt_bytes), "ampx_optimizer_save_state");
  at += opt_bytes;
  memset(&state, 0, sizeof state);
  state.struct_size = sizeof state;
  check(ampx_scaler_get_state(m->scaler, &state), "ampx_scaler_get_state");
  memcpy(out + at, &state, sizeof state);
  *size = total;
  return out;
}

static ampx_status model_save(const model *m, const char *path) {
  return ampx_checkpoint_file_save(path, m->tensors, TENSORS, m->opt, m->scaler);
}

static ampx_status model_load(const model *m, const char *path) {
  return ampx_checkpoint_file_load(path, m->tensors, TENSORS, m->opt, m->scaler);
}

static double now_seconds(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static void sleep_seconds(double seconds) {
  struct timespec t;
  t.tv_sec = (time_t)seconds;
  t.tv_nsec = (long)((seconds - (double)t.tv_sec) * 1e9);
  while (nanosleep(&t, &t) != 0 && errno == EINTR) {
  }
}

/* The child: resume from the checkpoint, then train and save forever,
 * reporting +g before saving generation g and -g once the save returned. */
static void child(const char *path, int report) {
  model m;
  model_init(&m, 7.0);
  check(model_load(&m, path), "the child's ampx_checkpoint_file_load");
  for (;;) {
    int32_t message;
    model_train(&m);
    message = (int32_t)model_generation(&m);
    if (write(report, &message, sizeof message) != (ssize_t)sizeof message) _exit(3);
    check(model_save(&m, path), "the child's ampx_checkpoint_file_save");
    message = -message;
    if (write(report, &message, sizeof message) != (ssize_t)sizeof message) _exit(3);
  }
}

/* Where the temporary file of the frozen child had got to. */
enum phase { NO_TEMP, TEMP_EMPTY, TEMP_PARTIAL, TEMP_COMPLETE, PHASES };
static const char *phase_names[PHASES] = {
    "no temporary file (between saves, or just renamed)", "temporary file created, empty",
    "temporary file partly written", "temporary file complete, not yet renamed"};

/* Classifies the temporary files in `dir` and removes them (a killed writer
 * leaves its own behind); returns how many there were. */
static int sweep_temporaries(const char *dir, off_t full_size, enum phase *phase) {
  DIR *d = opendir(dir);
  struct dirent *e;
  int found = 0;
  *phase = NO_TEMP;
  if (!d) exit(2);
  while ((e = readdir(d)) != NULL) {
    char name[4096];
    struct stat info;
    if (strncmp(e->d_name, TEMP_PREFIX, strlen(TEMP_PREFIX)) != 0) continue;
    snprintf(name, sizeof name, "%s/%s", dir, e->d_name);
    if (stat(name, &info) == 0) {
      *phase = info.st_size == 0          ? TEMP_EMPTY
               : info.st_size < full_size ? TEMP_PARTIAL
                                          : TEMP_COMPLETE;
    }
    unlink(name);
    ++found;
  }
  closedir(d);
  return found;
}

/* Snapshots of the reference run by generation, kept from the checkpoint's
 * current generation on (it never goes back). */
typedef struct reference {
  model m;
  unsigned char **snaps;
  size_t *sizes;
  int64_t count;
} reference;

static const unsigned char *reference_snapshot(reference *r, int64_t g, size_t *size) {
  while (r->count <= g) {
    r->snaps = realloc(r->snaps, (size_t)(r->count + 1) * sizeof *r->snaps);
    r->sizes = realloc(r->sizes, (size_t)(r->count + 1) * sizeof *r->sizes);
    if (!r->snaps || !r->sizes) exit(2);
    if (r->count > 0) model_train(&r->m);
    r->snaps[r->count] = model_snapshot(&r->m, &r->sizes[r->count]);
    ++r->count;
  }
  *size = r->sizes[g];
  return r->snaps[g];
}

static void reference_forget_before(reference *r, int64_t g) {
  int64_t i;
  for (i = 0; i < g && i < r->count; ++i) {
    free(r->snaps[i]);
    r->snaps[i] = NULL;
  }
}

int main(void) {
  char dir[] = "ampx_crash_XXXXXX";
  char path[64], scratch[64];
  reference ref;
  model check_model;
  int kills_by_phase[PHASES] = {0, 0, 0, 0};
  int old_kept = 0, new_kept = 0, failures = 0, temporaries = 0, round;
  int64_t file_gen = 0;
  double save_time = 0.0;
  struct stat info;
  off_t full_size;
  size_t size;

  if (!mkdtemp(dir)) {
    perror("mkdtemp");
    return 2;
  }
  snprintf(path, sizeof path, "%s/%s", dir, FILE_NAME);
  snprintf(scratch, sizeof scratch, "%s/timing.ampx", dir);

  memset(&ref, 0, sizeof ref);
  model_init(&ref.m, 1.0);
  model_init(&check_model, 3.0);
  reference_snapshot(&ref, 0, &size);
  check(model_save(&ref.m, path), "the first ampx_checkpoint_file_save");
  if (stat(path, &info) != 0) return 2;
  full_size = info.st_size;
  {
    int i;
    const double start = now_seconds();
    for (i = 0; i < 5; ++i) check(model_save(&ref.m, scratch), "a timing save");
    save_time = (now_seconds() - start) / 5.0;
    unlink(scratch);
  }
  printf("checkpoint of %ld bytes; one save takes %.2f ms here\n", (long)full_size,
         save_time * 1e3);

  for (round = 0; round < KILLS; ++round) {
    int fds[2], status;
    int32_t message;
    int64_t last_done = file_gen, target_begins = 1 + round % 2, begins = 0, loaded_gen;
    enum phase phase;
    pid_t pid;
    const unsigned char *expected;
    unsigned char *found;
    size_t found_size;

    if (pipe(fds) != 0) return 2;
    fflush(stdout);
    pid = fork();
    if (pid < 0) return 2;
    if (pid == 0) {
      close(fds[0]);
      child(path, fds[1]);
    }
    close(fds[1]);
    /* Wait for the chosen save to begin, then into it. */
    while (begins < target_begins && read(fds[0], &message, sizeof message) == sizeof message) {
      if (message > 0)
        ++begins;
      else
        last_done = -message;
    }
    /* Even rounds comb the first fifth of a save finely (the writing;
     * the rest is mostly fsync), odd ones the whole save and past it. */
    sleep_seconds(save_time * (double)(round / 2 % 24) / 24.0 * (round % 2 == 0 ? 0.2 : 1.15));
    kill(pid, SIGSTOP);
    waitpid(pid, &status, WUNTRACED);
    temporaries += sweep_temporaries(dir, full_size, &phase);
    ++kills_by_phase[phase];
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
    if (!WIFSIGNALED(status) || WTERMSIG(status) != SIGKILL) {
      fprintf(stderr, "round %d: the child ended on its own (status %d)\n", round, status);
      return 1;
    }
    while (read(fds[0], &message, sizeof message) == sizeof message)
      if (message < 0) last_done = -message;
    close(fds[0]);

    if (model_load(&check_model, path) != AMPX_OK) {
      fprintf(stderr, "round %d (%s): the checkpoint does not load: %s\n", round,
              phase_names[phase], ampx_last_error());
      ++failures;
      continue;
    }
    loaded_gen = model_generation(&check_model);
    if (loaded_gen != last_done && loaded_gen != last_done + 1) {
      fprintf(stderr, "round %d: the checkpoint is generation %ld; expected %ld or %ld\n", round,
              (long)loaded_gen, (long)last_done, (long)last_done + 1);
      ++failures;
      continue;
    }
    expected = reference_snapshot(&ref, loaded_gen, &size);
    found = model_snapshot(&check_model, &found_size);
    if (found_size != size || memcmp(found, expected, size) != 0) {
      fprintf(stderr, "round %d: generation %ld loads but differs from the reference\n", round,
              (long)loaded_gen);
      ++failures;
    } else if (loaded_gen == last_done) {
      ++old_kept;
    } else {
      ++new_kept;
    }
    free(found);
    reference_forget_before(&ref, loaded_gen);
    file_gen = loaded_gen;
  }

  {
    int p;
    printf("%d kills (SIGKILL) of a process saving a checkpoint:\n", KILLS);
    for (p = 0; p < PHASES; ++p) printf("  %3d with %s\n", kills_by_phase[p], phase_names[p]);
    printf("afterwards the checkpoint loaded and matched bit for bit: %d times the last\n"
           "completed save, %d times the save in progress (renamed before the kill); %d failures;\n"
           "%d leftover temporary files removed; the run reached generation %ld\n",
           old_kept, new_kept, failures, temporaries, (long)file_gen);
  }
  model_free(&check_model);
  model_free(&ref.m);
  {
    int64_t i;
    for (i = 0; i < ref.count; ++i) free(ref.snaps[i]);
    free(ref.snaps);
    free(ref.sizes);
  }
  unlink(path);
  rmdir(dir);
  return failures == 0 && old_kept + new_kept == KILLS ? 0 : 1;
}
