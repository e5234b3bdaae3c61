// Random fill kernels: counter-based hash, so every element gets a value in [-1, 1) (never zeros
// everywhere) and the host can regenerate nothing: checks copy results back instead.
// FLOPs: none counted. Bytes: n * sizeof(T) written.

__device__ __forceinline__ unsigned int gp_hash(unsigned long long i, unsigned int seed) {
    unsigned long long x = i * 0x9E3779B97F4A7C15ull + (unsigned long long)seed * 0xBF58476D1CE4E5B9ull;
    x ^= x >> 31; x *= 0x94D049BB133111EBull; x ^= x >> 29;
    return (unsigned int)(x >> 32);
}

__device__ __forceinline__ float gp_uniform(unsigned long long i, unsigned int seed) {
    // [-1, 1)
    return (float)(gp_hash(i, seed) >> 8) * (2.0f / 16777216.0f) - 1.0f;
}

extern "C" __global__ void fill_f32(float *out, unsigned long long n, unsigned int seed, float scale) {
    for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n;
         i += (unsigned long long)gridDim.x * blockDim.x) {
        out[i] = gp_uniform(i, seed) * scale;
    }
}

// bf16: the top 16 bits of an f32 (round to nearest even).
extern "C" __global__ void fill_bf16(unsigned short *out, unsigned long long n, unsigned int seed, float scale) {
    for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n;
         i += (unsigned long long)gridDim.x * blockDim.x) {
        float f = gp_uniform(i, seed) * scale;
        unsigned int b = __float_as_uint(f);
        b += 0x7FFFu + ((b >> 16) & 1u);
        out[i] = (unsigned short)(b >> 16);
    }
}

extern "C" __global__ void fill_f16(unsigned short *out, unsigned long long n, unsigned int seed, float scale) {
    for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n;
         i += (unsigned long long)gridDim.x * blockDim.x) {
        float f = gp_uniform(i, seed) * scale;
        unsigned short h;
        asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
        out[i] = h;
    }
}

// fp8 e4m3 (OCP, finite-only): built by hand from sign, exponent (bias 7) and 3 mantissa bits.
extern "C" __global__ void fill_e4m3(unsigned char *out, unsigned long long n, unsigned int seed, float scale) {
    for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n;
         i += (unsigned long long)gridDim.x * blockDim.x) {
        unsigned int h = gp_hash(i, seed);
        unsigned int sign = (h >> 31) & 1u;
        unsigned int exp = 4u + ((h >> 3) & 3u);   // 2^-3 .. 2^0
        unsigned int man = h & 7u;
        out[i] = (unsigned char)((sign << 7) | (exp << 3) | man);
    }
}
