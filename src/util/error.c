/* zerosim — one place where every error is raised. */
#include "zerosim/error.h"

#include <stdarg.h>
#include <stdio.h>

static _Thread_local char zs_err_buf[ZS_ERROR_MAX];

int zs_error_set(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(zs_err_buf, sizeof zs_err_buf, fmt, ap);
    va_end(ap);
    return -1;
}

const char *zs_error_msg(void) { return zs_err_buf; }

void zs_error_clear(void) { zs_err_buf[0] = '\0'; }
