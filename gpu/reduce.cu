/* reduce.cu - the reduction kernels on the device, one per dtype, and
 * their host launcher (gpu.h: hoop_gpu_reduce). Each element is combined
 * as reduce/kernels.h combines it on the CPU, in the same types, so that
 * the bits are the same: integer sums and products wrap in the unsigned
 * type, min and max compare in the signed one, an average divides in the
 * accumulation type; f16 and bf16 widen to f32 and round back with
 * reduce/half.h's own functions. Built for sm_80 and sm_90, with PTX for
 * later GPUs (Makefile: NVCC_GENCODE). */
#include "gpu/gpu.h"
#include "reduce/half.h"

#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>

namespace {

template <typename UT, typename ST> struct int_op {
    int op, avg_n;
    __device__ ST operator()(ST p, ST q) const
    {
        switch (op) {
        case HOOP_SUM: return (ST)(UT)((UT)p + (UT)q);
        case HOOP_PROD: return (ST)(UT)(1u * (UT)p * (UT)q); /* unsigned: u16 would promote to int */
        case HOOP_MIN: return q < p ? q : p;
        case HOOP_MAX: return q > p ? q : p;
        case HOOP_AVG: {
            ST s = (ST)(UT)((UT)p + (UT)q);
            return avg_n > 0 ? (ST)(s / (ST)avg_n) : s;
        }
        default: return p;
        }
    }
};

template <typename T> struct float_op {
    int op, avg_n;
    __device__ T operator()(T p, T q) const
    {
        switch (op) {
        case HOOP_SUM: return p + q;
        case HOOP_PROD: return p * q;
        case HOOP_MIN: return q < p ? q : p;
        case HOOP_MAX: return q > p ? q : p;
        case HOOP_AVG: return avg_n > 0 ? (p + q) / (T)avg_n : p + q;
        default: return p;
        }
    }
};

/* BF: bfloat16, else IEEE binary16. min and max keep the winner's bits. */
template <bool BF> struct half_op {
    int op, avg_n;
    __device__ static float widen(uint16_t h) { return BF ? hoop_bf2f(h) : hoop_h2f(h); }
    __device__ static uint16_t narrow(float f) { return BF ? hoop_f2bf(f) : hoop_f2h(f); }
    __device__ uint16_t operator()(uint16_t p, uint16_t q) const
    {
        float x = widen(p), y = widen(q);
        switch (op) {
        case HOOP_SUM: return narrow(x + y);
        case HOOP_PROD: return narrow(x * y);
        case HOOP_MIN: return y < x ? q : p;
        case HOOP_MAX: return y > x ? q : p;
        case HOOP_AVG: return avg_n > 0 ? narrow((x + y) / (float)avg_n) : narrow(x + y);
        default: return p;
        }
    }
};

/* dst may be a (in place); element i is read before it is written. The
 * result goes to dst and dst2, either of which may be NULL (the same for
 * every thread: no divergence). */
template <typename T, typename F>
__global__ void reduce_kernel(T *dst, T *dst2, const T *a, const T *b, size_t n, F f)
{
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        T v = f(a[i], b[i]);
        if (dst)
            dst[i] = v;
        if (dst2)
            dst2[i] = v;
    }
}

const unsigned threads = 256;
const size_t max_blocks = 65535;

template <typename T, typename F>
cudaError_t launch(void *dst, void *dst2, const void *a, const void *b, size_t n, F f,
                   cudaStream_t s)
{
    size_t blocks = (n + threads - 1) / threads;
    if (blocks > max_blocks)
        blocks = max_blocks;
    reduce_kernel<T, F><<<(unsigned)blocks, threads, 0, s>>>(
        static_cast<T *>(dst), static_cast<T *>(dst2), static_cast<const T *>(a), static_cast<const T *>(b), n, f);
    return cudaGetLastError();
}

} // namespace

extern "C" int hoop_gpu_reduce(void *dst, const void *a, const void *b, size_t n,
                               hoop_dtype_t dtype, hoop_op_t op, int avg_n, void *stream,
                               char *why, size_t why_len)
{
    return hoop_gpu_reduce2(dst, NULL, a, b, n, dtype, op, avg_n, stream, why, why_len);
}

extern "C" int hoop_gpu_reduce2(void *dst, void *dst2, const void *a, const void *b, size_t n,
                                hoop_dtype_t dtype, hoop_op_t op, int avg_n, void *stream,
                                char *why, size_t why_len)
{
    if ((unsigned)op >= HOOP_OP_COUNT || (unsigned)dtype >= HOOP_DTYPE_COUNT) {
        snprintf(why, why_len, "device reduction: dtype %d or op %d is not one of hoop.h's",
                 (int)dtype, (int)op);
        return (int)cudaErrorInvalidValue;
    }
    if (n == 0)
        return 0;
    cudaStream_t s = static_cast<cudaStream_t>(stream);
    int o = (int)op;
    cudaError_t e = cudaErrorInvalidValue;
    switch (dtype) {
    case HOOP_I8: e = launch<int8_t>(dst, dst2, a, b, n, int_op<uint8_t, int8_t>{o, avg_n}, s); break;
    case HOOP_U8: e = launch<uint8_t>(dst, dst2, a, b, n, int_op<uint8_t, uint8_t>{o, avg_n}, s); break;
    case HOOP_I16: e = launch<int16_t>(dst, dst2, a, b, n, int_op<uint16_t, int16_t>{o, avg_n}, s); break;
    case HOOP_U16:
        e = launch<uint16_t>(dst, dst2, a, b, n, int_op<uint16_t, uint16_t>{o, avg_n}, s);
        break;
    case HOOP_I32: e = launch<int32_t>(dst, dst2, a, b, n, int_op<uint32_t, int32_t>{o, avg_n}, s); break;
    case HOOP_U32:
        e = launch<uint32_t>(dst, dst2, a, b, n, int_op<uint32_t, uint32_t>{o, avg_n}, s);
        break;
    case HOOP_I64: e = launch<int64_t>(dst, dst2, a, b, n, int_op<uint64_t, int64_t>{o, avg_n}, s); break;
    case HOOP_U64:
        e = launch<uint64_t>(dst, dst2, a, b, n, int_op<uint64_t, uint64_t>{o, avg_n}, s);
        break;
    case HOOP_F16: e = launch<uint16_t>(dst, dst2, a, b, n, half_op<false>{o, avg_n}, s); break;
    case HOOP_BF16: e = launch<uint16_t>(dst, dst2, a, b, n, half_op<true>{o, avg_n}, s); break;
    case HOOP_F32: e = launch<float>(dst, dst2, a, b, n, float_op<float>{o, avg_n}, s); break;
    case HOOP_F64: e = launch<double>(dst, dst2, a, b, n, float_op<double>{o, avg_n}, s); break;
    default: break;
    }
    if (e != cudaSuccess) {
        snprintf(why, why_len, "device reduction of %zu %s (%s): %s: %s", n,
                 hoop_dtype_str(dtype), hoop_op_str(op), cudaGetErrorName(e),
                 cudaGetErrorString(e));
        return (int)e;
    }
    return 0;
}
