/* Whether the machine has a core for one more spinning thread.
 *
 * Spinning instead of sleeping only pays while the spinning threads do not
 * take the cores of the threads that would do the work they wait for: with
 * more runnable threads than cores the scheduler slices them, and a spin
 * then holds a core for a time slice (milliseconds) while the peer that
 * would answer waits for it. The kernel's count of runnable threads (the
 * fourth field of /proc/loadavg, system-wide, the reader included) against
 * the online cores tells. */
#ifndef JET_BASE_RUNQ_H
#define JET_BASE_RUNQ_H

#include <stdbool.h>
#include <stdint.h>

/* False once more threads than online cores were runnable at three readings
 * in a row (a moment's excess does not count), true again at the first
 * reading without excess, and when the count cannot be read. Any thread;
 * reads the count at most once a millisecond per process (now_us: the
 * caller's clock) and otherwise answers from the last reading. */
bool jet__runq_has_room(int64_t now_us);

/* Tests: the runnable and online counts of the last reading. */
void jet__runq_last(int *runnable_p, int *cores_p);
/* Tests: read the counts from a file of /proc/loadavg's format instead (NULL:
 * /proc/loadavg again), from the next call of jet__runq_has_room on, with
 * the readings in a row forgotten. Not while another thread asks. */
void jet__runq_set_source(const char *path);

#endif
