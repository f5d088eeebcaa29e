/* zerosim — files that zerosim creates itself.
 *
 * zerosim never writes through a name it did not create: every file it
 * writes is created here, exclusively (O_CREAT|O_EXCL|O_NOFOLLOW), so a
 * file or a symlink already at the name (planted by another user in a
 * shared folder such as /tmp, or left by a crash) is an error, never
 * followed, truncated or overwritten. Temporary files get unpredictable
 * names (STEM.<16 random hex digits>), tried again on a collision, so that
 * nobody can plant anything at them in advance either. A final name is
 * then given with rename(2) in the same folder, which replaces a symlink
 * there itself, not the file it points to.
 *
 * Error lines quote text that comes from files (a name read from a file, a
 * tensor name) through zs_file_escape, so that it can neither forge extra
 * lines nor copy a file's contents into a message.
 */
#ifndef ZEROSIM_FILE_H
#define ZEROSIM_FILE_H

#include <stddef.h>
#include <sys/types.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Create path as a new file, opened with O_CREAT|O_EXCL|O_NOFOLLOW|O_CLOEXEC
 * and flags (O_WRONLY or O_RDWR, and others), permissions mode (less the
 * umask). Returns the descriptor, or -1 with errno set, after recording one
 * line naming path: "... a symlink of that name is in the way ..." or "...
 * something of that name exists ..." when the name is taken, otherwise
 * zs_file_write_error's line. */
int zs_file_create_new(const char *path, int flags, mode_t mode);

/* Create a new file named STEM.<16 random hex digits> (a new name tried on
 * a collision, up to 64 times), as zs_file_create_new does; its name goes
 * to name (cap bytes). Returns the descriptor, or -1 with errno set and one
 * line recorded naming the file. */
int zs_file_create_unique(const char *stem, char *name, size_t cap, int flags, mode_t mode);

/* An unpredictable name STEM.<16 random hex digits> in name (cap bytes),
 * for a caller that creates it itself (linkat of an O_TMPFILE file, which
 * fails on a taken name); -1 with the error recorded when it is too long. */
int zs_file_unique_name(const char *stem, char *name, size_t cap);

/* "cannot write PATH: reason; what to do" (disk full, or otherwise) as the
 * error; returns -1. */
int zs_file_write_error(const char *path, int err);

/* Copy n bytes of text into out (cap bytes, at least 8) for an error line:
 * backslash and control characters (newlines included) and bytes above
 * 126 escaped as \n, \t, \\ or \xHH, cut with "..." where out is full.
 * Returns out. */
const char *zs_file_escape(const char *text, size_t n, char *out, size_t cap);

#ifdef __cplusplus
}
#endif
#endif
