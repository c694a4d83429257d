/* file.h: a whole file read into memory, the one reader for the small files
 * the tools and the config loader take whole. Pure libc; any thread.
 */
#ifndef FG_FILE_H
#define FG_FILE_H

#include <stddef.h>

/* Reads path into a new NUL-terminated buffer (*out, free() it) of *len bytes.
 * Returns 0, or an errno value: the open or read error, EFBIG when the file
 * is larger than max_bytes, ENOMEM. Nothing is allocated on error. */
int fg_file_read(const char *path, size_t max_bytes, char **out, size_t *len);

#endif
