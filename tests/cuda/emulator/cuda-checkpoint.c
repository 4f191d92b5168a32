/* A stand-in for NVIDIA's cuda-checkpoint utility (driver R550+), built on the emulator's checkpoint API:
 *   cuda-checkpoint --get-state --pid PID                 prints running|locked|checkpointed|failed
 *   cuda-checkpoint --toggle --pid PID                    running -> lock + checkpoint; checkpointed ->
 *                                                         restore + unlock
 *   cuda-checkpoint --action lock|checkpoint|restore|unlock --pid PID [--timeout MS]
 * Exit 0 on success, 1 with a message on stderr otherwise (as the utility does). */
#include "common.h"

#include <string.h>

typedef struct {
    unsigned timeoutMs, reserved0;
    cuuint64_t reserved1[7];
} CUcheckpointLockArgs;
CUresult cuCheckpointProcessLock(int, CUcheckpointLockArgs *);
CUresult cuCheckpointProcessCheckpoint(int, void *);
CUresult cuCheckpointProcessRestore(int, void *);
CUresult cuCheckpointProcessUnlock(int, void *);
CUresult cuCheckpointProcessGetState(int, int *);

static const char *const states[] = {"running", "locked", "checkpointed", "failed"};

static int fail(const char *what, CUresult r)
{
    fprintf(stderr, "Could not %s: CUDA error %d\n", what, r);
    return 1;
}

int main(int argc, char **argv)
{
    int pid = 0, toggle = 0, get = 0, st = -1;
    const char *action = NULL;
    CUcheckpointLockArgs la = {0, 0, {0}};
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--pid") && i + 1 < argc) pid = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--toggle")) toggle = 1;
        else if (!strcmp(argv[i], "--get-state")) get = 1;
        else if (!strcmp(argv[i], "--action") && i + 1 < argc) action = argv[++i];
        else if (!strcmp(argv[i], "--timeout") && i + 1 < argc) la.timeoutMs = (unsigned)atoi(argv[++i]);
        else return fprintf(stderr, "unknown argument %s\n", argv[i]), 2;
    }
    if (pid <= 0 || toggle + get + (action != NULL) != 1)
        return fprintf(stderr, "usage: cuda-checkpoint --toggle|--get-state|--action A --pid PID\n"), 2;
    CUresult r = cuCheckpointProcessGetState(pid, &st);
    if (r != CUDA_SUCCESS || st < 0 || st > 3)
        return fail("get the state", r);
    if (get)
        return printf("%s\n", states[st]), 0;
    if (toggle)
        action = st == 0 ? "suspend" : "resume";
    if (!strcmp(action, "lock") || !strcmp(action, "suspend"))
        if ((r = cuCheckpointProcessLock(pid, &la)) != CUDA_SUCCESS) return fail("lock", r);
    if (!strcmp(action, "checkpoint") || !strcmp(action, "suspend"))
        if ((r = cuCheckpointProcessCheckpoint(pid, NULL)) != CUDA_SUCCESS) {
            if (!strcmp(action, "suspend")) cuCheckpointProcessUnlock(pid, NULL);
            return fail("checkpoint", r);
        }
    if (!strcmp(action, "restore") || !strcmp(action, "resume"))
        if ((r = cuCheckpointProcessRestore(pid, NULL)) != CUDA_SUCCESS) return fail("restore", r);
    if (!strcmp(action, "unlock") || !strcmp(action, "resume"))
        if ((r = cuCheckpointProcessUnlock(pid, NULL)) != CUDA_SUCCESS) return fail("unlock", r);
    return 0;
}
