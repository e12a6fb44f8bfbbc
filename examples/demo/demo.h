/*
 * demo.h -- the pieces of the ampx demo: the task (a neural field fitted to
 * a procedural image), one training run per precision, and the writers of
 * its outputs (PNG images, an SVG chart).
 */
#ifndef AMPX_DEMO_H
#define AMPX_DEMO_H

#include <stdint.h>

#include "ampx/ampx.h"

/* What a run trains and for how long: the same for every precision, so the
 * rows of the table differ only by precision. */
typedef struct demo_config {
  int size;            /* the image is size x size pixels, one sample each */
  int frequencies;     /* random Fourier frequencies: 2 * frequencies inputs */
  double fourier_scale; /* standard deviation of the frequencies (cycles per image) */
  int hidden;          /* width of the hidden layers */
  int layers;          /* hidden layers (linear + ReLU), then linear to RGB */
  int steps;           /* full-batch AdamW steps */
  double lr;           /* peak learning rate (cosine decay to 5% of it) */
  double clip_norm;    /* max gradient norm, applied after unscaling */
  int growth_interval; /* clean steps before the fp16 loss scale doubles */
  int log_every;       /* steps between loss/scale samples (and progress) */
  int progress_tty;    /* nonzero: redraw a progress bar; zero: plain lines */
} demo_config;

/* One precision: fp32 runs without autocast, the others under an autocast
 * policy of that dtype; only fp16 needs an enabled loss scaler. */
typedef struct demo_precision {
  const char *name;
  ampx_dtype dtype;
  int scaler_enabled;
  int fp8;             /* linear layers multiply in FP8 (an FP8 recipe on the policy) */
} demo_precision;

/* The task's data, made on the host once and shared by every run. */
typedef struct demo_task {
  int size;
  int inputs;          /* Fourier features per pixel */
  float *features;     /* [size * size, inputs] */
  float *target;       /* [size * size, 3], RGB in [0, 1] */
} demo_task;

/* What one run measured. The histories hold `points` samples, one every
 * log_every steps and one at the last step. */
typedef struct demo_result {
  double seconds;
  double samples_per_second;
  uint64_t peak_bytes;
  double final_loss;
  double psnr;
  double final_scale;
  ampx_scaler_counters counters;
  int points;
  int *steps;
  double *losses;
  double *scales;
  float *image;        /* the reconstruction, [size * size, 3] */
  int64_t fp8_products; /* FP8 runs: linear calls multiplied in FP8 ... */
  int64_t fp8_fallbacks; /* ... and in bf16, with the last reason: */
  char fp8_note[256];  /* that reason, or why FP8 could not run at all */
} demo_result;

/* splitmix64: a fixed, portable random stream, so the features and the
 * initial weights are the same on every machine, unlike rand(). */
uint64_t demo_random_u64(uint64_t *state);

/* Wall-clock seconds from an arbitrary origin (worker threads make CPU time
 * the wrong measure of throughput). */
double demo_now(void);

/* Builds the image and its features; returns 0 when out of memory. */
int demo_task_make(const demo_config *config, demo_task *task);
void demo_task_free(demo_task *task);

/* Trains a fresh model (same initial weights every time) at `precision` on
 * `ctx`. Returns AMPX_OK or the failing call's status, with a message on
 * stderr -- except AMPX_ERR_NOT_SUPPORTED for an FP8 run on a device
 * without FP8 products, whose reason goes to result->fp8_note. */
ampx_status demo_train(ampx_context ctx, const demo_config *config,
                       const demo_task *task, const demo_precision *precision,
                       demo_result *result);
void demo_result_free(demo_result *result);

/* PSNR in dB of `image` (clamped to [0, 1]) against `reference`. */
double demo_psnr(const float *image, const float *reference, long count);

/* Writes float RGB tiles (values clamped to [0, 1]) side by side, each
 * `size` pixels square magnified `zoom` times, framed when there are
 * several, as one PNG; 0 on failure. */
int demo_write_tiles_png(const char *path, const float *const *tiles, int count,
                         int size, int zoom);

/* One curve pair of the chart. */
typedef struct demo_series {
  const char *name;    /* short, e.g. "fp32" */
  const char *label;   /* for the legend */
  const char *colour;
  const char *dash;    /* SVG stroke-dasharray, "" for solid */
  const demo_result *result;
} demo_series;

/* Writes the loss and loss-scale chart as SVG; 0 on an I/O error. */
int demo_write_chart_svg(const char *path, const char *title, const demo_series *series,
                         int count, int total_steps);

#endif
