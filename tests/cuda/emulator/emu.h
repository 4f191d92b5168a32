/* Types of the CUDA driver API subset the emulator implements, declared from the CUDA 12.x driver API
 * reference (cuda.h): handles are opaque pointers, CUdeviceptr is an unsigned 64-bit integer. */
#ifndef VGPUKIT_EMU_H
#define VGPUKIT_EMU_H
#include <stddef.h>
#include <stdint.h>

typedef int CUresult;
typedef int CUdevice;
typedef uint64_t CUdeviceptr;
typedef uint64_t cuuint64_t;
typedef uint64_t CUmemGenericAllocationHandle;
typedef struct emu_ctx *CUcontext;
typedef struct emu_stream *CUstream;
typedef struct emu_event *CUevent;
typedef struct emu_pool *CUmemoryPool;
typedef struct emu_array *CUarray;
typedef struct emu_array *CUmipmappedArray;
typedef void *CUmodule;
typedef void *CUfunction;
typedef void *CUgraphExec;

enum {
    CUDA_SUCCESS = 0,
    CUDA_ERROR_INVALID_VALUE = 1,
    CUDA_ERROR_OUT_OF_MEMORY = 2,
    CUDA_ERROR_NOT_INITIALIZED = 3,
    CUDA_ERROR_INVALID_DEVICE = 101,
    CUDA_ERROR_INVALID_IMAGE = 200,
    CUDA_ERROR_INVALID_CONTEXT = 201,
    CUDA_ERROR_INVALID_HANDLE = 400,
    CUDA_ERROR_NOT_FOUND = 500,
    CUDA_ERROR_NOT_READY = 600,
};

typedef struct {
    int type; /* CUmemLocationType: 1 DEVICE, 2 HOST, 3 HOST_NUMA, 4 HOST_NUMA_CURRENT */
    int id;
} CUmemLocation;

typedef struct {
    int type;                 /* CUmemAllocationType: 1 PINNED */
    int requestedHandleTypes; /* CUmemAllocationHandleType */
    CUmemLocation location;
    void *win32HandleMetaData;
    struct {
        unsigned char compressionType, gpuDirectRDMACapable;
        unsigned short usage;
        unsigned char reserved[4];
    } allocFlags;
} CUmemAllocationProp;

typedef struct {
    int allocType, handleTypes;
    CUmemLocation location;
    void *win32SecurityAttributes;
    size_t maxSize;
    unsigned short usage;
    unsigned char reserved[54];
} CUmemPoolProps;

typedef struct {
    CUmemLocation location;
    int flags;
} CUmemAccessDesc;

typedef struct {
    size_t Width, Height;
    int Format; /* CUarray_format */
    unsigned NumChannels;
} CUDA_ARRAY_DESCRIPTOR;

typedef struct {
    size_t Width, Height, Depth;
    int Format;
    unsigned NumChannels, Flags;
} CUDA_ARRAY3D_DESCRIPTOR;

typedef struct {
    unsigned gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, sharedMemBytes;
    CUstream hStream;
    void *attrs; /* CUlaunchAttribute * */
    unsigned numAttrs;
} CUlaunchConfig;

#endif
