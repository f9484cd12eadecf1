/* Files replaced whole or not at all, whatever the moment of a crash: the new text goes to a
 * fresh temporary file beside the old one (".NAME.XXXXXX", mkstemp: a name nobody can plant a
 * symlink at beforehand), is synced, renamed over the old file, and the directory is synced so
 * the rename survives too (rename(2) is atomic: a reader sees the old file or the new one).
 * A kill between creating the temporary file and renaming it leaves the temporary file behind;
 * atomic_file_sweep removes such leftovers, and is called where the file is read at start
 * and before each save. */
#ifndef LR_UTIL_ATOMIC_FILE_H
#define LR_UTIL_ATOMIC_FILE_H

#include <stddef.h>
#include <sys/types.h>

/* Replace path with len bytes of text, mode `mode` (whatever the umask). 0 or -errno; on
 * failure path is as it was and no temporary file is left. A directory that cannot be synced
 * fails it too (the rename might not survive a crash). */
int atomic_file_write(const char *path, const char *text, size_t len, mode_t mode);

/* Remove the temporary files an interrupted atomic_file_write (or a save using the same
 * naming) left beside path: ".BASENAME.XXXXXX" with six letters or digits. Returns how many
 * were removed (each is logged) or -errno when the directory cannot be read (ENOENT: 0).
 * Only one process may save path at a time, or this could remove another's file in flight. */
int atomic_file_sweep(const char *path);

#endif
