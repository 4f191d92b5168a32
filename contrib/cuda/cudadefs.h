/* The few CUDA driver API types libvgpukit-cuda uses, declared from the CUDA 12.x driver API reference
 * (cuda.h; no toolkit needed to build). Handles are opaque pointers; CUdeviceptr is 64-bit. */
#ifndef VGPUKIT_CUDADEFS_H
#define VGPUKIT_CUDADEFS_H
#include <stddef.h>
#include <stdint.h>

typedef int CUresult;
typedef int CUdevice;
typedef uint64_t CUdeviceptr;
typedef uint64_t cuuint64_t;
typedef uint64_t CUmemGenericAllocationHandle;
typedef void *CUcontext, *CUstream, *CUevent, *CUmemoryPool, *CUarray, *CUmipmappedArray, *CUfunction;

#define CUDA_SUCCESS 0
#define CUDA_ERROR_INVALID_VALUE 1
#define CUDA_ERROR_OUT_OF_MEMORY 2
#define CUDA_ERROR_NOT_INITIALIZED 3
#define CUDA_ERROR_NOT_READY 600
#define CU_EVENT_DISABLE_TIMING 0x2
#define CU_MEM_LOCATION_TYPE_DEVICE 1

typedef struct {
    int type; /* CUmemLocationType */
    int id;
} CUmemLocation;

typedef struct { /* CUmemAllocationProp */
    int type, requestedHandleTypes;
    CUmemLocation location;
    void *win32HandleMetaData;
    unsigned char allocFlags[8];
} CUmemAllocationProp;

typedef struct { /* CUmemPoolProps (leading members) */
    int allocType, handleTypes;
    CUmemLocation location;
} CUmemPoolProps;

typedef struct { /* CUDA_ARRAY_DESCRIPTOR */
    size_t Width, Height;
    int Format;
    unsigned NumChannels;
} CUDA_ARRAY_DESCRIPTOR;

typedef struct { /* CUDA_ARRAY3D_DESCRIPTOR */
    size_t Width, Height, Depth;
    int Format;
    unsigned NumChannels, Flags;
} CUDA_ARRAY3D_DESCRIPTOR;

#endif
