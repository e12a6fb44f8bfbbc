/* SB3's RunningMeanStd (Chan et al.'s parallel update), in double: the
 * running mean and variance of observations or returns that VecNormalize
 * divides by. Internal to libampx_rl (and its tests). */
#ifndef AMPX_RL_RUNNING_STATS_H
#define AMPX_RL_RUNNING_STATS_H

#include <stddef.h>

typedef struct running_stats {
  double *mean, *var; /* dim entries each; start at 0 and 1 */
  double count;       /* starts at 1e-4, as SB3's epsilon */
} running_stats;

/* Folds a batch of rows x dim samples (row-major) into the statistics:
 * the batch's population mean and variance per column, combined. */
void rl_rms_update(running_stats *rs, const float *x, size_t rows, size_t dim);

#endif
