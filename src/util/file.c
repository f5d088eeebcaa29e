/* zerosim — files that zerosim creates itself (see zerosim/file.h). */
#include "zerosim/file.h"
#include "zerosim/error.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define ZS_FILE_TRIES 64

int zs_file_write_error(const char *path, int err)
{
    if (err == ENOSPC || err == EDQUOT)
        ZS_FAIL("cannot write %s: %s; free some space there or write elsewhere", path,
                strerror(err));
    ZS_FAIL("cannot write %s: %s; check that the directory exists and is writable", path,
            strerror(err ? err : EIO));
}

int zs_file_create_new(const char *path, int flags, mode_t mode)
{
    int fd = open(path, flags | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode);
    if (fd >= 0)
        return fd;
    int err = errno;
    struct stat sb;
    if (err == EEXIST && lstat(path, &sb) == 0 && S_ISLNK(sb.st_mode))
        zs_error_set("cannot create %s: a symlink of that name is in the way; zerosim writes "
                     "only files it creates (remove the symlink, or write elsewhere)", path);
    else if (err == EEXIST)
        zs_error_set("cannot create %s: something of that name exists; zerosim writes only "
                     "files it creates (remove it, or write elsewhere)", path);
    else
        zs_file_write_error(path, err);
    errno = err;
    return -1;
}

/* 64 bits nobody can guess: the kernel's random bytes, or, where they are
 * not to be had, the clock, the process and a counter (still unique, and
 * the exclusive create keeps a guessed name harmless). */
static uint64_t zs_file_random(void)
{
    uint64_t r = 0;
    if (getentropy(&r, sizeof r) == 0)
        return r;
    static _Thread_local uint64_t counter;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    r = (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 30) ^ ((uint64_t)getpid() << 17) ^
        (++counter * 0x9E3779B97F4A7C15ull);
    return r;
}

int zs_file_unique_name(const char *stem, char *name, size_t cap)
{
    int n = snprintf(name, cap, "%s.%016llx", stem, (unsigned long long)zs_file_random());
    if (n < 0 || (size_t)n >= cap)
        ZS_FAIL("path too long: %s", stem);
    return 0;
}

int zs_file_create_unique(const char *stem, char *name, size_t cap, int flags, mode_t mode)
{
    for (int t = 0; t < ZS_FILE_TRIES; t++) {
        if (zs_file_unique_name(stem, name, cap)) {
            errno = ENAMETOOLONG;
            return -1;
        }
        int fd = zs_file_create_new(name, flags, mode);
        if (fd >= 0 || errno != EEXIST)
            return fd;
    }
    int err = errno;
    zs_error_set("cannot create a new file %s.*: %d random names were all taken", stem,
                 ZS_FILE_TRIES);
    errno = err;
    return -1;
}

const char *zs_file_escape(const char *text, size_t n, char *out, size_t cap)
{
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)text[i];
        char e[8];
        if (c == '\n')
            snprintf(e, sizeof e, "\\n");
        else if (c == '\t')
            snprintf(e, sizeof e, "\\t");
        else if (c == '\\')
            snprintf(e, sizeof e, "\\\\");
        else if (c < 32 || c > 126)
            snprintf(e, sizeof e, "\\x%02x", c);
        else
            snprintf(e, sizeof e, "%c", c);
        size_t k = strlen(e);
        if (o + k + 4 > cap) { /* room for "..." and the terminator */
            snprintf(out + o, cap - o, "...");
            return out;
        }
        memcpy(out + o, e, k);
        o += k;
    }
    out[o] = '\0';
    return out;
}
