// Memory-bandwidth kernels. Each is a grid-stride loop over 16-byte vectors; n4 counts float4s.
// Byte formulas (what the Rust side divides by time): read = 16*n4, write = 16*n4, copy = 32*n4.

// read: sums every element; each block writes one partial sum so nothing is optimized away.
extern "C" __global__ void hbm_read(const float4 *__restrict__ in, float *__restrict__ partial, unsigned long long n4) {
    float acc = 0.0f;
    unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;
    for (; i + 3 * stride < n4; i += 4 * stride) {
        float4 a = in[i];
        float4 b = in[i + stride];
        float4 c = in[i + 2 * stride];
        float4 d = in[i + 3 * stride];
        acc += (a.x + a.y + a.z + a.w) + (b.x + b.y + b.z + b.w) + (c.x + c.y + c.z + c.w) + (d.x + d.y + d.z + d.w);
    }
    for (; i < n4; i += stride) {
        float4 a = in[i];
        acc += a.x + a.y + a.z + a.w;
    }
    __shared__ float s[32];
    for (int o = 16; o > 0; o >>= 1) acc += __shfl_down_sync(0xffffffffu, acc, o);
    if ((threadIdx.x & 31) == 0) s[threadIdx.x >> 5] = acc;
    __syncthreads();
    if (threadIdx.x == 0) {
        float t = 0.0f;
        for (int w = 0; w < (blockDim.x + 31) / 32; ++w) t += s[w];
        partial[blockIdx.x] = t;
    }
}

extern "C" __global__ void hbm_write(float4 *__restrict__ out, unsigned long long n4, float v) {
    unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n4; i += stride) {
        float f = v + (float)(i & 1023);
        out[i] = make_float4(f, f, f, f);
    }
}

extern "C" __global__ void hbm_copy(const float4 *__restrict__ in, float4 *__restrict__ out, unsigned long long n4) {
    unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;
    for (; i + stride < n4; i += 2 * stride) {
        float4 a = in[i];
        float4 b = in[i + stride];
        out[i] = a;
        out[i + stride] = b;
    }
    for (; i < n4; i += stride) out[i] = in[i];
}

// Launch overhead: does nothing.
extern "C" __global__ void empty_kernel() {}
