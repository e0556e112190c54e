/* A file mapped read-only for the readers (token files, checkpoints, Hugging Face
 * files): a private mapping, so pages come in as read and are shared with the page
 * cache (the ranks of a process and the processes of a host hold one copy).  One header,
 * no object, as errf.h, so each reader still builds alone into its fuzz target. */
#ifndef RT_MAPF_H
#define RT_MAPF_H

#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* Maps the file at path into *map (NULL when it is empty), *len its bytes, known also
 * when the mapping failed (0 when it could not be opened); 0, or the errno of what
 * failed.  rt_unmap_file undoes it (a NULL map: nothing). */
static inline int rt_map_file(const char *path, void **map, size_t *len)
{
	struct stat sb;
	int fd = open(path, O_RDONLY), e = 0;
	*map = NULL;
	*len = 0;
	if (fd < 0 || fstat(fd, &sb))
		e = errno;
	else if ((*len = (size_t)sb.st_size) &&
	         (*map = mmap(NULL, *len, PROT_READ, MAP_PRIVATE, fd, 0)) == MAP_FAILED)
		e = errno, *map = NULL;
	if (fd >= 0)
		close(fd);
	return e;
}

static inline void rt_unmap_file(void *map, size_t len)
{
	if (map)
		munmap(map, len);
}

#endif
