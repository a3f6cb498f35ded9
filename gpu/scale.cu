/* scale.cu - prescale and postscale factors on the device (gpu.h:
 * hoop_gpu_scale), with the bits of the engine's CPU scaling. */
#include "gpu/gpu.h"
#include "reduce/half.h"
#include "reduce/iscale.h"
extern "C" {
#include "reduce/reduce.h"
}

#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>

namespace {

template <typename T, typename S> __global__ void scale_kernel(T *p, size_t n, S f)
{
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        p[i] = (T)(p[i] * f);
}

template <bool BF> __global__ void scale_half_kernel(uint16_t *p, size_t n, float f)
{
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        float x = BF ? hoop_bf2f(p[i]) : hoop_h2f(p[i]);
        p[i] = BF ? hoop_f2bf(x * f) : hoop_f2h(x * f);
    }
}

// The integers' scaling of iscale.h, by type.
__device__ inline int8_t iscale(int8_t x, double f) { return hoop_iscale_i8(x, f); }
__device__ inline uint8_t iscale(uint8_t x, double f) { return hoop_iscale_u8(x, f); }
__device__ inline int16_t iscale(int16_t x, double f) { return hoop_iscale_i16(x, f); }
__device__ inline uint16_t iscale(uint16_t x, double f) { return hoop_iscale_u16(x, f); }
__device__ inline int32_t iscale(int32_t x, double f) { return hoop_iscale_i32(x, f); }
__device__ inline uint32_t iscale(uint32_t x, double f) { return hoop_iscale_u32(x, f); }
__device__ inline int64_t iscale(int64_t x, double f) { return hoop_iscale_i64(x, f); }
__device__ inline uint64_t iscale(uint64_t x, double f) { return hoop_iscale_u64(x, f); }

template <typename T> __global__ void scale_int_kernel(T *p, size_t n, double f)
{
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        p[i] = iscale(p[i], f);
}

unsigned blocks_for(size_t n)
{
    size_t b = (n + 255) / 256;
    return (unsigned)(b > 65535 ? 65535 : b ? b : 1);
}

} // namespace

extern "C" int hoop_gpu_scale(void *buf, size_t n, hoop_dtype_t dtype, double f, char *why,
                              size_t why_len)
{
    if (f == 1.0 || n == 0)
        return 0;
    if (hoop_gpu_emulated()) {
        hoop_reduce_scale(buf, n, dtype, f);
        return 0;
    }
    cudaStream_t s = cudaStreamPerThread;
    unsigned b = blocks_for(n);
    switch (dtype) {
    case HOOP_F32: scale_kernel<float, float><<<b, 256, 0, s>>>((float *)buf, n, (float)f); break;
    case HOOP_F64: scale_kernel<double, double><<<b, 256, 0, s>>>((double *)buf, n, f); break;
    case HOOP_F16: scale_half_kernel<false><<<b, 256, 0, s>>>((uint16_t *)buf, n, (float)f); break;
    case HOOP_BF16: scale_half_kernel<true><<<b, 256, 0, s>>>((uint16_t *)buf, n, (float)f); break;
    case HOOP_I8: scale_int_kernel<int8_t><<<b, 256, 0, s>>>((int8_t *)buf, n, f); break;
    case HOOP_U8: scale_int_kernel<uint8_t><<<b, 256, 0, s>>>((uint8_t *)buf, n, f); break;
    case HOOP_I16: scale_int_kernel<int16_t><<<b, 256, 0, s>>>((int16_t *)buf, n, f); break;
    case HOOP_U16: scale_int_kernel<uint16_t><<<b, 256, 0, s>>>((uint16_t *)buf, n, f); break;
    case HOOP_I32: scale_int_kernel<int32_t><<<b, 256, 0, s>>>((int32_t *)buf, n, f); break;
    case HOOP_U32: scale_int_kernel<uint32_t><<<b, 256, 0, s>>>((uint32_t *)buf, n, f); break;
    case HOOP_I64: scale_int_kernel<int64_t><<<b, 256, 0, s>>>((int64_t *)buf, n, f); break;
    case HOOP_U64: scale_int_kernel<uint64_t><<<b, 256, 0, s>>>((uint64_t *)buf, n, f); break;
    default: return 0;
    }
    cudaError_t e = cudaGetLastError();
    if (e == cudaSuccess)
        e = cudaStreamSynchronize(s);
    if (e != cudaSuccess) {
        snprintf(why, why_len, "scaling %zu %s on the device by %g: %s: %s", n,
                 hoop_dtype_str(dtype), f, cudaGetErrorName(e), cudaGetErrorString(e));
        cudaGetLastError();
        return (int)e;
    }
    return 0;
}
