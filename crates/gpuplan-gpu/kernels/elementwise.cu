// Memory-bound ops a training step runs, in bf16 with f32 math. One block per row for the row ops.
// Byte formulas: rmsnorm = 2*rows*cols*2 + cols*2 (x in, y out, weight); silu_mul = 3*n*2
// (gate, up in, out); softmax = 2*rows*cols*2.

__device__ __forceinline__ float bf2f(unsigned short b) { return __uint_as_float(((unsigned int)b) << 16); }
__device__ __forceinline__ unsigned short f2bf(float f) {
    unsigned int b = __float_as_uint(f);
    b += 0x7FFFu + ((b >> 16) & 1u);
    return (unsigned short)(b >> 16);
}

__device__ __forceinline__ float block_sum(float v, float *s) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    __syncthreads();
    if ((threadIdx.x & 31) == 0) s[threadIdx.x >> 5] = v;
    __syncthreads();
    float t = 0.0f;
    for (int w = 0; w < (blockDim.x + 31) / 32; ++w) t += s[w];
    return t;
}

__device__ __forceinline__ float block_max(float v, float *s) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    __syncthreads();
    if ((threadIdx.x & 31) == 0) s[threadIdx.x >> 5] = v;
    __syncthreads();
    float t = -3.0e38f;
    for (int w = 0; w < (blockDim.x + 31) / 32; ++w) t = fmaxf(t, s[w]);
    return t;
}

// cols must be a multiple of 8 (16-byte vectors of 8 bf16).
extern "C" __global__ void rmsnorm_bf16(const uint4 *__restrict__ x, const uint4 *__restrict__ w, uint4 *__restrict__ y,
                                        unsigned int cols) {
    __shared__ float s[32];
    unsigned int c8 = cols / 8;
    const uint4 *row = x + (unsigned long long)blockIdx.x * c8;
    uint4 *out = y + (unsigned long long)blockIdx.x * c8;
    float ss = 0.0f;
    for (unsigned int i = threadIdx.x; i < c8; i += blockDim.x) {
        uint4 v = row[i];
        unsigned int u[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
        for (int k = 0; k < 4; ++k) {
            float a = bf2f(u[k] & 0xFFFF), b = bf2f(u[k] >> 16);
            ss += a * a + b * b;
        }
    }
    float r = rsqrtf(block_sum(ss, s) / (float)cols + 1e-6f);
    for (unsigned int i = threadIdx.x; i < c8; i += blockDim.x) {
        uint4 v = row[i], g = w[i];
        unsigned int u[4] = {v.x, v.y, v.z, v.w}, gw[4] = {g.x, g.y, g.z, g.w}, o[4];
#pragma unroll
        for (int k = 0; k < 4; ++k) {
            float a = bf2f(u[k] & 0xFFFF) * r * bf2f(gw[k] & 0xFFFF);
            float b = bf2f(u[k] >> 16) * r * bf2f(gw[k] >> 16);
            o[k] = (unsigned int)f2bf(a) | ((unsigned int)f2bf(b) << 16);
        }
        out[i] = make_uint4(o[0], o[1], o[2], o[3]);
    }
}

// out = silu(gate) * up, n8 = elements / 8.
extern "C" __global__ void silu_mul_bf16(const uint4 *__restrict__ gate, const uint4 *__restrict__ up, uint4 *__restrict__ out,
                                         unsigned long long n8) {
    unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n8; i += stride) {
        uint4 g = gate[i], u = up[i];
        unsigned int gg[4] = {g.x, g.y, g.z, g.w}, uu[4] = {u.x, u.y, u.z, u.w}, o[4];
#pragma unroll
        for (int k = 0; k < 4; ++k) {
            float g0 = bf2f(gg[k] & 0xFFFF), g1 = bf2f(gg[k] >> 16);
            float r0 = g0 / (1.0f + __expf(-g0)) * bf2f(uu[k] & 0xFFFF);
            float r1 = g1 / (1.0f + __expf(-g1)) * bf2f(uu[k] >> 16);
            o[k] = (unsigned int)f2bf(r0) | ((unsigned int)f2bf(r1) << 16);
        }
        out[i] = make_uint4(o[0], o[1], o[2], o[3]);
    }
}

// Row softmax; cols a multiple of 8. Reads the row twice (max+sum pass, write pass): the second
// read mostly hits L1/L2 for rows of a few thousand elements.
extern "C" __global__ void softmax_bf16(const uint4 *__restrict__ x, uint4 *__restrict__ y, unsigned int cols) {
    __shared__ float s[32];
    unsigned int c8 = cols / 8;
    const uint4 *row = x + (unsigned long long)blockIdx.x * c8;
    uint4 *out = y + (unsigned long long)blockIdx.x * c8;
    float m = -3.0e38f;
    for (unsigned int i = threadIdx.x; i < c8; i += blockDim.x) {
        uint4 v = row[i];
        unsigned int u[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
        for (int k = 0; k < 4; ++k) m = fmaxf(m, fmaxf(bf2f(u[k] & 0xFFFF), bf2f(u[k] >> 16)));
    }
    m = block_max(m, s);
    float sum = 0.0f;
    for (unsigned int i = threadIdx.x; i < c8; i += blockDim.x) {
        uint4 v = row[i];
        unsigned int u[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
        for (int k = 0; k < 4; ++k) sum += __expf(bf2f(u[k] & 0xFFFF) - m) + __expf(bf2f(u[k] >> 16) - m);
    }
    float inv = 1.0f / block_sum(sum, s);
    for (unsigned int i = threadIdx.x; i < c8; i += blockDim.x) {
        uint4 v = row[i];
        unsigned int u[4] = {v.x, v.y, v.z, v.w}, o[4];
#pragma unroll
        for (int k = 0; k < 4; ++k) {
            float a = __expf(bf2f(u[k] & 0xFFFF) - m) * inv, b = __expf(bf2f(u[k] >> 16) - m) * inv;
            o[k] = (unsigned int)f2bf(a) | ((unsigned int)f2bf(b) << 16);
        }
        out[i] = make_uint4(o[0], o[1], o[2], o[3]);
    }
}
