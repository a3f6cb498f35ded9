/* scale.cu - prescale and postscale factors on the device (gpu.h:
 * hoop_gpu_scale), with the bits of the engine's CPU scaling. */
#include "gpu/gpu.h"
#include "reduce/half.h"
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
    default: return 0; /* integers are not scaled (the engine refuses them at enqueue) */
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
