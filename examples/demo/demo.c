/*
 * demo.c -- the ampx demo (README command 1): mixed-precision training of a
 * real model, in C, on the best device present.
 *
 * It fits a neural field (a coordinate MLP on Fourier features) to a
 * procedural image three times -- in fp32, in fp16 with dynamic loss
 * scaling, and in bf16 without a scaler -- and prints what mixed precision
 * changes: throughput, peak memory, final loss and PSNR, and the loss
 * scaler's events. It writes the reconstructions beside the original (PNG)
 * and a chart of loss and loss scale per step (SVG), and exits non-zero
 * when fp16 or bf16 falls short of fp32's PSNR by more than the margin.
 */
#if !defined(_WIN32)
#define _POSIX_C_SOURCE 200809L /* clock_gettime, fileno, isatty, mkdir */
#endif

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#if defined(_WIN32)
#include <direct.h>
#include <io.h>
#else
#include <sys/stat.h>
#include <unistd.h>
#endif

#include "demo.h"

/* The default --out: CMake sets it inside the build tree; a build by hand
 * writes into the current directory. */
#ifndef AMPX_DEMO_OUT
#define AMPX_DEMO_OUT "demo-out"
#endif

/* How far below fp32's PSNR a low-precision run may land and still pass. */
static const double kPsnrMargin = 1.0;

enum { kPrecisions = 3, kZoom = 4 };

static const demo_precision kRuns[kPrecisions] = {
    {"fp32", AMPX_F32, 0, 0},
    {"fp16", AMPX_F16, 1, 0},
    {"bf16", AMPX_BF16, 0, 0},
};

/* FP8 (ampx.h section 18): bf16 autocast whose linear layers multiply in
 * FP8 with Transformer Engine's delayed scaling; run where the device has
 * FP8 products (the CPU; CUDA from compute capability 8.9). */
static const demo_precision kFp8Run = {"fp8", AMPX_BF16, 0, 1};

/* Colour and dash both differ, so the curves stay apart in grey print. */
static const char *const kColours[kPrecisions] = {"#1f3b73", "#d95f02", "#1b9e77"};
static const char *const kDashes[kPrecisions] = {"", "9 5", "2 4"};
static const char *const kLegend[kPrecisions] = {"fp32", "fp16 + dynamic loss scaling",
                                                  "bf16 (autocast, no scaler)"};

/* The few platform calls C99 lacks: a monotonic clock, terminal detection,
 * directory creation. */
double demo_now(void) {
  struct timespec ts;
#if defined(_MSC_VER) /* MinGW-w64 has clock_gettime (winpthreads) */
  timespec_get(&ts, TIME_UTC);
#else
  clock_gettime(CLOCK_MONOTONIC, &ts);
#endif
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int stderr_is_terminal(void) {
#if defined(_WIN32)
  return _isatty(_fileno(stderr));
#else
  return isatty(fileno(stderr));
#endif
}

static int make_directory(const char *path) {
#if defined(_WIN32)
  int rc = _mkdir(path);
#else
  int rc = mkdir(path, 0777);
#endif
  return rc == 0 || errno == EEXIST;
}

/* Creates `path` and any missing parents. */
static int make_directories(const char *path) {
  char buffer[4096];
  size_t length = strlen(path);
  if (length == 0 || length >= sizeof buffer) return 0;
  memcpy(buffer, path, length + 1);
  for (size_t i = 1; i < length; ++i) {
    if (buffer[i] != '/' && buffer[i] != '\\') continue;
    buffer[i] = '\0';
    int ok = make_directory(buffer);
    buffer[i] = path[i];
    if (!ok) return 0;
  }
  return make_directory(buffer);
}

static void usage(FILE *f) {
  fprintf(f,
          "usage: ampx_demo [--device cpu|cuda] [--out DIR] [--steps N] [--quick]\n"
          "  --device  where to train (default: CUDA when present, else the CPU)\n"
          "  --out     folder for the images and the chart (default: %s)\n"
          "  --steps   training steps per precision (default 600; --quick: 60)\n"
          "  --quick   a tiny image and few steps, for tests\n",
          AMPX_DEMO_OUT);
}

static void format_bytes(char *out, size_t size, uint64_t bytes) {
  if (bytes >= 1024u * 1024u)
    snprintf(out, size, "%.2f MiB", (double)bytes / (1024.0 * 1024.0));
  else
    snprintf(out, size, "%.1f KiB", (double)bytes / 1024.0);
}

static void print_row(const demo_precision *run, const demo_result *r) {
  char memory[32];
  format_bytes(memory, sizeof memory, r->peak_bytes);
  printf("%-9s %9.2f %11.0f %12s %11.3e %10.2f", run->name, r->seconds, r->samples_per_second,
         memory, r->final_loss, r->psnr);
  if (run->scaler_enabled)
    printf(" %8lld %9lld %8lld %12.0f\n", (long long)r->counters.growths,
           (long long)r->counters.backoffs, (long long)r->counters.skipped, r->final_scale);
  else
    printf(" %8s %9s %8s %12s\n", "-", "-", "-", "no scaler");
}

static void print_table(const demo_result *results) {
  printf("%-9s %9s %11s %12s %11s %10s %8s %9s %8s %12s\n", "precision", "time (s)",
         "samples/s", "peak memory", "final loss", "PSNR (dB)", "growths", "backoffs",
         "skipped", "final scale");
  for (int i = 0; i < kPrecisions; ++i) print_row(&kRuns[i], &results[i]);
}

static int write_outputs(const char *dir, const demo_task *task, const demo_result *results,
                         const char *title, int steps) {
  char path[4200];
  int ok = 1;
  const float *tiles[kPrecisions + 1] = {task->target};
  for (int i = 0; i < kPrecisions; ++i) tiles[i + 1] = results[i].image;

  snprintf(path, sizeof path, "%s/original.png", dir);
  ok = ok && demo_write_tiles_png(path, tiles, 1, task->size, 1);
  for (int i = 0; i < kPrecisions && ok; ++i) {
    snprintf(path, sizeof path, "%s/%s.png", dir, kRuns[i].name);
    ok = demo_write_tiles_png(path, &tiles[i + 1], 1, task->size, 1);
  }
  snprintf(path, sizeof path, "%s/comparison.png", dir);
  ok = ok && demo_write_tiles_png(path, tiles, kPrecisions + 1, task->size, kZoom);

  demo_series series[kPrecisions];
  for (int i = 0; i < kPrecisions; ++i) {
    series[i].name = kRuns[i].name;
    series[i].label = kLegend[i];
    series[i].colour = kColours[i];
    series[i].dash = kDashes[i];
    series[i].result = &results[i];
  }
  snprintf(path, sizeof path, "%s/training.svg", dir);
  ok = ok && demo_write_chart_svg(path, title, series, kPrecisions, steps);
  if (!ok) fprintf(stderr, "could not write %s\n", path);
  return ok;
}

int main(int argc, char **argv) {
  demo_config config;
  config.size = 64;
  config.frequencies = 64;
  config.fourier_scale = 6.0;
  config.hidden = 64;
  config.layers = 3;
  config.steps = 600;
  config.lr = 1e-2;
  config.clip_norm = 1.0;
  config.growth_interval = 25;
  config.log_every = 5;
  config.progress_tty = stderr_is_terminal();
  const char *out_dir = AMPX_DEMO_OUT;
  const char *device_name = NULL;
  int steps = 0;

  for (int i = 1; i < argc; ++i) {
    const char *arg = argv[i];
    const char *value = i + 1 < argc ? argv[i + 1] : NULL;
    if (strcmp(arg, "--quick") == 0) {
      config.size = 16;
      config.frequencies = 16;
      config.fourier_scale = 4.0;
      config.hidden = 32;
      config.layers = 2;
      config.steps = 60;
      config.growth_interval = 10;
      config.log_every = 2;
    } else if (strcmp(arg, "--device") == 0 && value) {
      device_name = value, ++i;
    } else if (strcmp(arg, "--out") == 0 && value) {
      out_dir = value, ++i;
    } else if (strcmp(arg, "--steps") == 0 && value) {
      steps = atoi(value), ++i;
      if (steps < 1) {
        fprintf(stderr, "--steps wants a positive number, not '%s'\n", value);
        return 2;
      }
    } else if (strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0) {
      usage(stdout);
      return 0;
    } else {
      usage(stderr);
      return 2;
    }
  }
  if (steps > 0) config.steps = steps;

  ampx_context_options options = AMPX_CONTEXT_OPTIONS_INIT;
  if (device_name == NULL) {
    options.device_type = ampx_cuda_device_count() > 0 ? AMPX_DEVICE_CUDA : AMPX_DEVICE_CPU;
  } else if (strcmp(device_name, "cuda") == 0) {
    options.device_type = AMPX_DEVICE_CUDA;
  } else if (strcmp(device_name, "cpu") == 0) {
    options.device_type = AMPX_DEVICE_CPU;
  } else {
    fprintf(stderr, "--device is cpu or cuda, not '%s'\n", device_name);
    return 2;
  }
  ampx_context ctx = NULL;
  if (ampx_context_create(&options, &ctx) != AMPX_OK) {
    fprintf(stderr, "no context on %s: %s\n", device_name ? device_name : "the CPU",
            ampx_last_error());
    return 2;
  }
  const int on_cuda = options.device_type == AMPX_DEVICE_CUDA;

  demo_task task;
  if (!demo_task_make(&config, &task)) {
    fprintf(stderr, "out of host memory\n");
    ampx_context_release(ctx);
    return 2;
  }
  const long pixels = (long)config.size * config.size;
  const long parameters = (long)(task.inputs + 1) * config.hidden +
                          (long)(config.layers - 1) * (config.hidden + 1) * config.hidden +
                          (long)(config.hidden + 1) * 3;
  printf("ampx %s demo: mixed-precision training of a neural field\n", ampx_version_string());
  printf("device  %s\n", on_cuda ? "CUDA device 0"
                         : ampx_has_cuda() ? "CPU (no CUDA device found)"
                                           : "CPU (ampx built without CUDA)");
  printf("task    fit a %dx%d procedural image (hard edges, a checkerboard, smooth shading)\n"
         "        with an MLP on (x, y): %d Fourier features -> %d x %d ReLU -> RGB, "
         "%ld parameters;\n"
         "        MSE loss, full batch (%ld pixels), %d AdamW steps, cosine lr from %g, "
         "grad norm clipped to %g\n",
         config.size, config.size, task.inputs, config.layers, config.hidden, parameters,
         pixels, config.steps, config.lr, config.clip_norm);
  printf("runs    fp32  no autocast, no scaler\n"
         "        fp16  autocast + dynamic loss scaling: init 65536, x2 after %d clean steps\n"
         "              (torch's default is 2000; shorter so a short run shows the scaler at\n"
         "              work), x0.5 and the step skipped when a gradient overflows\n"
         "        bf16  autocast, scaler disabled (bf16 has fp32's range)\n\n",
         config.growth_interval);
  fflush(stdout);

  demo_result results[kPrecisions];
  memset(results, 0, sizeof results);
  int status = 0;
  for (int i = 0; i < kPrecisions && status == 0; ++i) {
    if (demo_train(ctx, &config, &task, &kRuns[i], &results[i]) != AMPX_OK) status = 2;
  }
  demo_result fp8;
  memset(&fp8, 0, sizeof fp8);
  int fp8_ran = 0;
  if (status == 0) {
    const ampx_status fp8_status = demo_train(ctx, &config, &task, &kFp8Run, &fp8);
    fp8_ran = fp8_status == AMPX_OK;
    if (fp8_status != AMPX_OK && fp8_status != AMPX_ERR_NOT_SUPPORTED) status = 2;
  }

  if (status == 0) {
    print_table(results);
    if (fp8_ran) print_row(&kFp8Run, &fp8);
    printf("\nsamples/s: pixels trained per second; peak memory: ampx tensor bytes, the peak "
           "of each run alone\n");
    if (fp8_ran)
      printf("fp8: bf16 autocast with its linear layers in FP8 (E4M3 forward, E5M2 gradients, "
             "delayed scaling);\n     %lld products in FP8, %lld in bf16%s%s\n",
             (long long)fp8.fp8_products, (long long)fp8.fp8_fallbacks,
             fp8.fp8_fallbacks ? " -- the last because " : "", fp8.fp8_fallbacks ? fp8.fp8_note : "");
    else
      printf("fp8: not run: %s\n", fp8.fp8_note);
    printf("\n");
    for (int i = 1; i < kPrecisions; ++i) {
      const double gap = results[i].psnr - results[0].psnr;
      const int pass = gap >= -kPsnrMargin;
      printf("%s PSNR within %.1f dB of fp32: %s (%+.2f dB)\n", kRuns[i].name, kPsnrMargin,
             pass ? "yes" : "no", gap);
      if (!pass) status = 1;
    }
    if (fp8_ran)
      printf("fp8 PSNR against bf16: %+.2f dB (not a pass/fail check: FP8's 3-bit mantissa "
             "costs a neural field's fine detail; the FP8 training gate is the classifier "
             "test in tests/unit/test_fp8_autocast.cpp)\n",
             fp8.psnr - results[2].psnr);
    char title[160];
    snprintf(title, sizeof title, "ampx: %dx%d neural field on %s, loss and loss scale",
             config.size, config.size, on_cuda ? "CUDA" : "the CPU");
    if (!make_directories(out_dir) ||
        !write_outputs(out_dir, &task, results, title, config.steps)) {
      fprintf(stderr, "could not write the outputs into %s\n", out_dir);
      status = 2;
    } else {
      printf("\nwrote into %s/:\n      comparison.png (original | fp32 | fp16 | bf16, %dx), "
             "{original,fp32,fp16,bf16}.png,\n      training.svg (loss and loss scale per step)\n",
             out_dir, kZoom);
    }
  }

  for (int i = 0; i < kPrecisions; ++i) demo_result_free(&results[i]);
  demo_result_free(&fp8);
  demo_task_free(&task);
  ampx_context_release(ctx);
  return status;
}
