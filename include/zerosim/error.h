/* zerosim — errors.
 *
 * Functions that can fail return an int: 0 on success, non-zero on failure,
 * after recording one line of explanation with ZS_FAIL / zs_error_set. Only
 * main() prints it and exits. One function (zs_error_set) raises every error,
 * so one breakpoint catches them all.
 */
#ifndef ZEROSIM_ERROR_H
#define ZEROSIM_ERROR_H

#ifdef __cplusplus
extern "C" {
#endif

/* Record the message (printf-style, no trailing newline) and return -1. */
/* The longest message kept (a configuration's problems, one per line, can be
 * long; everything else is one line). */
#define ZS_ERROR_MAX 12288

int zs_error_set(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* The last recorded message, or "" when none. */
const char *zs_error_msg(void);
void zs_error_clear(void);

#define ZS_FAIL(...) return zs_error_set(__VA_ARGS__)
#define ZS_TRY(expr) do { int zs_try_rc_ = (expr); if (zs_try_rc_) return zs_try_rc_; } while (0)

#ifdef __cplusplus
}
#endif
#endif
